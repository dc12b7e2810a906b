/*
 * fdpass.c - records with one descriptor over SOCK_SEQPACKET sockets (see fdpass.h).
 *
 * Thread safety: reentrant; no state.
 */
#include "util/fdpass.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Room for one descriptor, aligned for struct cmsghdr. */
typedef union fd_control {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
} fd_control_t;

ssize_t weft_fdpass_send(int sock, const void *buf, size_t len, int fd, bool wait)
{
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    fd_control_t ctl;
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    int flags = MSG_NOSIGNAL | (wait ? 0 : MSG_DONTWAIT);
    ssize_t n;
    do {
        n = sendmsg(sock, &mh, flags);
    } while (n < 0 && errno == EINTR);
    return n;
}

ssize_t weft_fdpass_recv(int sock, void *buf, size_t len, int timeout_ms, int *fd_out)
{
    *fd_out = -1;
    if (timeout_ms > 0) {
        struct pollfd pfd = {.fd = sock, .events = POLLIN};
        int ready;
        do {
            ready = poll(&pfd, 1, timeout_ms);
        } while (ready < 0 && errno == EINTR);
        if (ready == 0)
            errno = ETIMEDOUT;
        if (ready <= 0)
            return -1;
    }
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    fd_control_t ctl;
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    int flags = MSG_CMSG_CLOEXEC | (timeout_ms == 0 ? MSG_DONTWAIT : 0);
    ssize_t n;
    do {
        n = recvmsg(sock, &mh, flags);
    } while (n < 0 && errno == EINTR);
    /* The control buffer has room for two descriptors once aligned: keep the first, close any
     * other (a record carries at most one), and fail the record. */
    int nfds = 0;
    for (struct cmsghdr *c = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (nfds++ == 0)
                *fd_out = fd;
            else
                close(fd);
        }
    }
    if (n >= 0 && ((mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nfds > 1)) {
        /* Room for two descriptors, yet none came: the kernel could not install the one sent
         * (it drops it and flags the control data truncated), so this process is out of
         * descriptors. */
        int no_room = (mh.msg_flags & MSG_CTRUNC) && nfds == 0;
        n = -1;
        errno = no_room ? EMFILE : EMSGSIZE;
    }
    if (n != (ssize_t)len && *fd_out >= 0) {
        int saved = errno;
        close(*fd_out);
        *fd_out = -1;
        errno = saved;
    }
    return n;
}
