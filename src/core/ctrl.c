/*
 * ctrl.c - the control-socket mesh and its message framing (see ctrl.h).
 *
 * Thread safety: weft_ctrl_connect runs on the initialising thread; afterwards each socket is
 * used by the registrar thread only.
 */
#include "core/ctrl.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fdpass.h"
#include "util/forksafe.h"
#include "util/log.h"

#define HELLO_MAGIC 0x7765667443544cull /* "weftCTL" */

typedef struct hello {
    uint64_t magic;
    int32_t rank;
    int32_t nranks;
    uint8_t secret[WEFT_CTRL_SECRET_BYTES];
} hello_t;

typedef struct ctrl_addr {
    socklen_t len;
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
} ctrl_addr_t;

static int remaining_ms(uint64_t deadline_ns)
{
    uint64_t now = weft_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999) / 1000000;
    return ms > 1000 ? 1000 : (int)ms;
}

/* Wait until sock is ready for events, or fail with TIMEOUT at the deadline. store_fd, when not
 * -1, is the store's connection (weft_store_fd): its turning readable means the rendezvous broke
 * (a rank was lost), WEFT_ERR_PEER_LOST. */
static weft_status_t wait_fd(int sock, short events, int store_fd, uint64_t deadline_ns,
                             const char *what)
{
    for (;;) {
        struct pollfd p[2] = {{.fd = sock, .events = events}, {.fd = store_fd, .events = POLLIN}};
        int ms = remaining_ms(deadline_ns);
        if (ms == 0)
            return weft_error(WEFT_ERR_TIMEOUT, "weft_comm_init: control sockets: %s timed out",
                              what);
        int n = poll(p, store_fd >= 0 ? 2 : 1, ms);
        if (n < 0 && errno != EINTR)
            return weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: poll (%s)", what);
        if (n > 0 && p[0].revents != 0)
            return WEFT_SUCCESS;
        if (n > 0)
            return weft_error(WEFT_ERR_PEER_LOST,
                              "weft_comm_init: control sockets: %s: the rendezvous store closed "
                              "the connection (a rank failed or was lost)",
                              what);
    }
}

static weft_status_t send_hello(int sock, int rank, int nranks, const uint8_t *secret)
{
    hello_t mine = {.magic = HELLO_MAGIC, .rank = rank, .nranks = nranks};
    memcpy(mine.secret, secret, WEFT_CTRL_SECRET_BYTES);
    if (send(sock, &mine, sizeof mine, MSG_NOSIGNAL) != (ssize_t)sizeof mine)
        return weft_error_errno(WEFT_ERR_PEER_LOST, errno, "weft_comm_init: send hello");
    return WEFT_SUCCESS;
}

/* Receive a peer's hello and check the peer: same uid, expected rank (or any rank above ours
 * when expect_rank < 0), same job secret. *rank_out gets the peer's rank. */
static weft_status_t recv_hello(int sock, int rank, int nranks, int expect_rank,
                                const uint8_t *secret, uint64_t deadline_ns, int *rank_out)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: SO_PEERCRED");
    if (cred.uid != getuid())
        return weft_error(WEFT_ERR_PEER_LOST,
                          "weft_comm_init: control socket peer has uid %u, expected %u",
                          (unsigned)cred.uid, (unsigned)getuid());
    weft_status_t st = wait_fd(sock, POLLIN, -1, deadline_ns, "hello");
    if (st != WEFT_SUCCESS)
        return st;
    hello_t theirs;
    ssize_t n = recv(sock, &theirs, sizeof theirs, 0);
    if (n != (ssize_t)sizeof theirs || theirs.magic != HELLO_MAGIC || theirs.nranks != nranks ||
        memcmp(theirs.secret, secret, WEFT_CTRL_SECRET_BYTES) != 0)
        return weft_error(WEFT_ERR_PEER_LOST,
                          "weft_comm_init: control socket peer failed the job check");
    if ((expect_rank >= 0 && theirs.rank != expect_rank) ||
        (expect_rank < 0 && (theirs.rank <= rank || theirs.rank >= nranks)))
        return weft_error(WEFT_ERR_PEER_LOST, "weft_comm_init: control socket peer claims rank %d",
                          (int)theirs.rank);
    *rank_out = theirs.rank;
    return WEFT_SUCCESS;
}

weft_status_t weft_ctrl_connect(weft_store_t *store, int rank, int nranks,
                                const uint8_t secret[WEFT_CTRL_SECRET_BYTES], uint64_t deadline_ns,
                                int *fds_out)
{
    weft_status_t st;
    ctrl_addr_t *addrs = NULL;
    for (int i = 0; i < nranks; i++)
        fds_out[i] = -1;

    int lsock = weft_forksafe_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lsock < 0)
        return weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: socket(AF_UNIX)");
    /* Autobind: binding only the family assigns a unique abstract address. */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ctrl_addr_t me = {0};
    socklen_t salen = sizeof(sa_family_t);
    if (bind(lsock, (struct sockaddr *)&sa, salen) != 0 || listen(lsock, nranks) != 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: bind/listen(AF_UNIX)");
        goto err_close_listen;
    }
    salen = sizeof sa;
    if (getsockname(lsock, (struct sockaddr *)&sa, &salen) != 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: getsockname");
        goto err_close_listen;
    }
    me.len = salen;
    memcpy(me.path, sa.sun_path, salen - sizeof(sa_family_t));

    addrs = calloc((size_t)nranks, sizeof *addrs);
    if (!addrs) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
        goto err_close_listen;
    }
    st = weft_store_allgather(store, "ctrl/addr", &me, sizeof me, addrs);
    if (st != WEFT_SUCCESS)
        goto err_free_addrs;

    /* Connect to every lower rank and send our hello at once (it waits in the socket until that
     * rank accepts), so that no rank waits on another while holding back its own hellos. */
    for (int p = 0; p < rank; p++) {
        int s = weft_forksafe_socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (s < 0) {
            st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: socket(AF_UNIX)");
            goto err_close_peers;
        }
        fds_out[p] = s;
        struct sockaddr_un pa = {.sun_family = AF_UNIX};
        if (addrs[p].len <= sizeof(sa_family_t) || addrs[p].len > sizeof pa ||
            addrs[p].len - sizeof(sa_family_t) > sizeof addrs[p].path) {
            /* The store is reachable over TCP: never trust a length from it. */
            st = weft_error(WEFT_ERR_PEER_LOST,
                            "weft_comm_init: rank %d's control socket address has length %u", p,
                            (unsigned)addrs[p].len);
            goto err_close_peers;
        }
        memcpy(pa.sun_path, addrs[p].path, addrs[p].len - sizeof(sa_family_t));
        if (connect(s, (struct sockaddr *)&pa, addrs[p].len) != 0) {
            st = weft_error_errno(WEFT_ERR_PEER_LOST, errno,
                                  "weft_comm_init: connect to rank %d's control socket", p);
            goto err_close_peers;
        }
        st = send_hello(s, rank, nranks, secret);
        if (st != WEFT_SUCCESS)
            goto err_close_peers;
    }
    /* Accept every higher rank and answer its hello. */
    for (int k = rank + 1; k < nranks; k++) {
        /* The listener is non-blocking (weft_forksafe_accept holds a lock across the call): a
         * connection that went away between poll and accept means waiting for the next. */
        int s;
        do {
            st = wait_fd(lsock, POLLIN, weft_store_fd(store), deadline_ns, "accept");
            if (st != WEFT_SUCCESS)
                goto err_close_peers;
            s = weft_forksafe_accept(lsock, SOCK_CLOEXEC);
        } while (s < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ||
                           errno == ECONNABORTED));
        if (s < 0) {
            st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: accept");
            goto err_close_peers;
        }
        int peer;
        st = recv_hello(s, rank, nranks, -1, secret, deadline_ns, &peer);
        if (st == WEFT_SUCCESS && fds_out[peer] >= 0)
            st = weft_error(WEFT_ERR_PEER_LOST, "weft_comm_init: rank %d connected twice", peer);
        if (st == WEFT_SUCCESS)
            st = send_hello(s, rank, nranks, secret);
        if (st != WEFT_SUCCESS) {
            weft_forksafe_close(s);
            goto err_close_peers;
        }
        fds_out[peer] = s;
    }
    /* Receive the lower ranks' answers. */
    for (int p = 0; p < rank; p++) {
        int peer;
        st = recv_hello(fds_out[p], rank, nranks, p, secret, deadline_ns, &peer);
        if (st != WEFT_SUCCESS)
            goto err_close_peers;
    }
    free(addrs);
    weft_forksafe_close(lsock);
    return WEFT_SUCCESS;

err_close_peers:
    for (int i = 0; i < nranks; i++) {
        weft_forksafe_close(fds_out[i]);
        fds_out[i] = -1;
    }
err_free_addrs:
    free(addrs);
err_close_listen:
    weft_forksafe_close(lsock);
    return st;
}

/* The status of a non-blocking weft_fdpass call on a control message that returned n: the whole
 * message, the socket full (send) or empty (receive), or the peer lost. */
static weft_status_t msg_status(ssize_t n)
{
    if (n == (ssize_t)sizeof(weft_ctrl_msg_t))
        return WEFT_SUCCESS;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return WEFT_ERR_TIMEOUT;
    if (n < 0 && errno == EMFILE)
        return WEFT_ERR_SYSTEM; /* a descriptor lost here, for want of room: not the peer's end */
    return WEFT_ERR_PEER_LOST;
}

weft_status_t weft_ctrl_send(int sock, const weft_ctrl_msg_t *msg, int fd)
{
    ssize_t n = weft_fdpass_send(sock, msg, sizeof *msg, fd, false);
    if (n < 0 && (errno == ENOBUFS || errno == ENOMEM || errno == ETOOMANYREFS))
        return WEFT_ERR_NO_MEMORY; /* the kernel's shortage, not the connection's end */
    return msg_status(n);
}

/* Send one message like weft_ctrl_send, waiting while the socket is full and retrying a
 * transient failure every WEFT_CTRL_RETRY_NS, until deadline_ns. what names it in errors. */
static weft_status_t send_by(int sock, const weft_ctrl_msg_t *msg, int fd, uint64_t deadline_ns,
                             const char *what)
{
    for (;;) {
        weft_status_t st = weft_ctrl_send(sock, msg, fd);
        if (st == WEFT_ERR_TIMEOUT) {
            st = wait_fd(sock, POLLOUT, -1, deadline_ns, what);
        } else if (st == WEFT_ERR_NO_MEMORY) {
            if (weft_now_ns() + WEFT_CTRL_RETRY_NS > deadline_ns)
                return weft_error(WEFT_ERR_TIMEOUT,
                                  "weft_comm_init: control sockets: %s: the kernel lacked buffers "
                                  "or descriptor room until the deadline",
                                  what);
            struct timespec pause = {0, (long)WEFT_CTRL_RETRY_NS};
            nanosleep(&pause, NULL); /* an early wake-up only retries sooner */
            st = WEFT_SUCCESS;
        } else {
            return st;
        }
        if (st != WEFT_SUCCESS)
            return st;
    }
}

weft_status_t weft_ctrl_recv(int sock, weft_ctrl_msg_t *msg, int *fd_out)
{
    return msg_status(weft_fdpass_recv(sock, msg, sizeof *msg, 0, fd_out));
}

weft_status_t weft_ctrl_exchange_fd(const int *socks, int rank, int nranks, int fd, size_t bytes,
                                    uint64_t deadline_ns, int *peer_fds_out)
{
    weft_ctrl_msg_t msg = {.type = WEFT_CTRL_BLOCK, .bytes = bytes};
    weft_status_t st = WEFT_SUCCESS;
    for (int p = 0; p < nranks; p++)
        peer_fds_out[p] = -1;
    for (int p = 0; p < nranks && st == WEFT_SUCCESS; p++) {
        if (p == rank)
            continue;
        st = send_by(socks[p], &msg, fd, deadline_ns, "control block exchange");
        if (st == WEFT_ERR_PEER_LOST)
            st = weft_error(WEFT_ERR_PEER_LOST,
                            "weft_comm_init: sending the control block to "
                            "rank %d failed",
                            p);
    }
    for (int p = 0; p < nranks && st == WEFT_SUCCESS; p++) {
        if (p == rank)
            continue;
        st = wait_fd(socks[p], POLLIN, -1, deadline_ns, "control block exchange");
        if (st != WEFT_SUCCESS)
            break;
        weft_ctrl_msg_t in;
        st = weft_ctrl_recv(socks[p], &in, &peer_fds_out[p]);
        if (st == WEFT_SUCCESS &&
            (in.type != WEFT_CTRL_BLOCK || in.bytes != bytes || peer_fds_out[p] < 0))
            st = WEFT_ERR_PEER_LOST;
        if (st == WEFT_ERR_SYSTEM)
            st = weft_error(WEFT_ERR_SYSTEM,
                            "weft_comm_init: rank %d's control block came without its "
                            "descriptor: this process has no file descriptor left (raise "
                            "ulimit -n)",
                            p);
        else if (st != WEFT_SUCCESS)
            st = weft_error(WEFT_ERR_PEER_LOST,
                            "weft_comm_init: rank %d sent no valid control block", p);
    }
    if (st != WEFT_SUCCESS) {
        for (int p = 0; p < nranks; p++) {
            if (peer_fds_out[p] >= 0)
                close(peer_fds_out[p]);
            peer_fds_out[p] = -1;
        }
    }
    return st;
}
