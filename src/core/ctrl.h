/*
 * ctrl.h - the control sockets: one Unix-domain SOCK_SEQPACKET connection between every pair of
 * ranks, used to pass segment descriptors (SCM_RIGHTS) and registration messages.
 *
 * Setup: every rank listens on an autobound abstract-namespace address (no file is created, so
 * nothing is left behind), publishes it in the rendezvous store, connects to every lower rank
 * and accepts every higher one. Both ends of each connection check the other with SO_PEERCRED
 * (same uid) and exchange a hello carrying the rank and the per-job secret; a connection that
 * fails either check is dropped and setup fails.
 *
 * Messages are fixed-size records (weft_ctrl_msg_t), at most one descriptor each.
 *
 * Every socket here (the listener and the connections) is opened through util/forksafe.h, so a
 * forked child closes its copies, and must be closed with weft_forksafe_close, whoever owns it.
 */
#ifndef WEFT_CORE_CTRL_H
#define WEFT_CORE_CTRL_H

#include <stdint.h>

#include "core/bootstrap.h"
#include "weft.h"

#define WEFT_CTRL_SECRET_BYTES 32

typedef enum {
    WEFT_CTRL_REG = 1,   /* map the attached descriptor at addr (bytes); ack with REG_ACK */
    WEFT_CTRL_REG_ACK,   /* ticket is mapped */
    WEFT_CTRL_UNREG,     /* unmap [addr, addr + bytes); ack with UNREG_ACK */
    WEFT_CTRL_UNREG_ACK, /* ticket is unmapped */
    WEFT_CTRL_BYE,       /* the sender is closing in order (destroy): its EOF is not a loss */
    WEFT_CTRL_BLOCK      /* init only: the attached descriptor is the sender's control block */
} weft_ctrl_type_t;

typedef struct weft_ctrl_msg {
    uint32_t type;   /* weft_ctrl_type_t */
    uint32_t pad;    /* zero */
    uint64_t ticket; /* the sender's registration ticket (REG, UNREG, BYE; registry.h), or the
                        ticket acknowledged (REG_ACK, UNREG_ACK) */
    uint64_t addr;
    uint64_t bytes;
    uint64_t offset; /* REG: where the segment starts in the memory the descriptor holds (a
                        sparse provider's memfd, mem.h); 0 otherwise */
} weft_ctrl_msg_t;

/* Build the full mesh. fds_out has nranks entries; fds_out[rank] is set to -1; the caller owns
 * the others (close them with weft_forksafe_close). Blocks until
 * every connection is checked or deadline_ns (CLOCK_MONOTONIC) passes (WEFT_ERR_TIMEOUT).
 * Statuses: WEFT_ERR_SYSTEM (socket calls), WEFT_ERR_PEER_LOST (a peer failed a check or closed).
 * On failure every descriptor opened here is closed. */
weft_status_t weft_ctrl_connect(weft_store_t *store, int rank, int nranks,
                                const uint8_t secret[WEFT_CTRL_SECRET_BYTES], uint64_t deadline_ns,
                                int *fds_out);

/* Init only: send fd (bytes long) to every peer as a WEFT_CTRL_BLOCK message and receive every
 * peer's; peer_fds_out has nranks entries, [rank] = -1, the others owned by the caller on
 * success (on failure everything received is closed). Blocks until done or deadline_ns (a send
 * that fails transiently, as weft_ctrl_send describes, is retried until then). */
weft_status_t weft_ctrl_exchange_fd(const int *socks, int rank, int nranks, int fd, size_t bytes,
                                    uint64_t deadline_ns, int *peer_fds_out);

/* How long a sender waits before it retries a message that failed with WEFT_ERR_NO_MEMORY. */
#define WEFT_CTRL_RETRY_NS 1000000ull

/* Send one message, with fd attached if fd >= 0 (the caller keeps its own fd). Non-blocking.
 * Returns WEFT_ERR_TIMEOUT if the socket buffer is full (the caller polls POLLOUT and retries);
 * WEFT_ERR_NO_MEMORY if the kernel is short of buffers or memory, or of room for descriptors in
 * flight (ENOBUFS, ENOMEM, ETOOMANYREFS: transient, and POLLOUT does not say when it passes, so
 * the caller retries after WEFT_CTRL_RETRY_NS, within its own deadline); WEFT_ERR_PEER_LOST for
 * any other failure (EPIPE, ECONNRESET: the peer is gone). Logs nothing: the caller reports. */
weft_status_t weft_ctrl_send(int sock, const weft_ctrl_msg_t *msg, int fd);

/* Receive one message (non-blocking). *fd_out gets the attached descriptor or -1. Returns
 * WEFT_ERR_TIMEOUT when nothing is pending; WEFT_ERR_SYSTEM when the message came but its
 * descriptor was lost because this process has none left (EMFILE: the message is consumed, and
 * cannot be received again); WEFT_ERR_PEER_LOST on EOF or any other error. Logs nothing. */
weft_status_t weft_ctrl_recv(int sock, weft_ctrl_msg_t *msg, int *fd_out);

#endif /* WEFT_CORE_CTRL_H */
