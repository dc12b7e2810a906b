/*
 * fdpass.h - fixed-size records with at most one file descriptor attached (SCM_RIGHTS), over a
 * Unix-domain SOCK_SEQPACKET socket: the framing of the control sockets (core/ctrl.c), and of
 * the two-process CUDA test and benchmark (tests/unit/test_mem_cuda.c, bench/reg_cost.c).
 *
 * Both calls retry on EINTR, never raise SIGPIPE and report like sendmsg and recvmsg: the byte
 * count, or -1 with errno set. A record is whole when the count equals the length asked for;
 * the caller decides what anything else means (and how to report it).
 *
 * Thread safety: reentrant; one socket must not be used by two threads at once.
 */
#ifndef WEFT_UTIL_FDPASS_H
#define WEFT_UTIL_FDPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Send len bytes at buf as one record on sock, with fd attached when fd >= 0 (the caller keeps
 * fd; the peer receives its own descriptor). wait: block until the socket has room; otherwise
 * return -1 with errno EAGAIN (or EWOULDBLOCK) when it is full. Returns len, or -1 with errno
 * set (EPIPE or ECONNRESET: the peer is gone). */
ssize_t weft_fdpass_send(int sock, const void *buf, size_t len, int fd, bool wait);

/* Receive one record of len bytes into buf. *fd_out gets the descriptor attached to it
 * (close-on-exec), or -1 when there is none or the call did not return len: a descriptor
 * that came with a failed or wrong-sized record is closed. timeout_ms: 0 returns at once, -1
 * with errno EAGAIN (or EWOULDBLOCK), when nothing is pending; > 0 waits at most that long,
 * then returns -1 with errno ETIMEDOUT; < 0 waits without limit. Returns len for a whole record,
 * 0 at end of file (the peer closed), another count for a shorter record, or -1 with errno set
 * (EMSGSIZE: the record or its descriptors did not fit, or it carried more than one descriptor;
 * EMFILE: its descriptor was lost because this process has no descriptor left (RLIMIT_NOFILE);
 * either way the record is consumed and no descriptor is left open). */
ssize_t weft_fdpass_recv(int sock, void *buf, size_t len, int timeout_ms, int *fd_out);

#endif /* WEFT_UTIL_FDPASS_H */
