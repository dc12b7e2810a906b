/*
 * test_fdpass.c - records with one descriptor over a SOCK_SEQPACKET socketpair
 * (src/util/fdpass.c): a descriptor arrives, close-on-exec, and reaches the same pipe; a record
 * without one gives -1; nothing pending returns EAGAIN at once or ETIMEDOUT after the timeout; a
 * short record is returned as such and its descriptor closed; a long one, or one with two
 * descriptors, fails with EMSGSIZE and leaves none open; a record whose descriptor the kernel
 * cannot install (RLIMIT_NOFILE reached) fails with EMFILE and is consumed;
 * end of file reads 0; a full socket refuses a non-waiting send; a send to a closed peer fails
 * with EPIPE instead of raising SIGPIPE.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/fdpass.h"
#include "check.h"

typedef struct rec {
    uint64_t a, b;
} rec_t;

#define TIMEOUT_MS 20

static int make_pair(int sv[2])
{
    int rc = socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
    CHECK(rc == 0, "socketpair: %s", strerror(errno));
    return rc;
}

/* A descriptor travels with the record, arrives close-on-exec and reaches the same pipe; a
 * record without one gives -1. */
static void test_descriptor(void)
{
    int sv[2], p[2];
    if (make_pair(sv) != 0)
        return;
    CHECK(pipe(p) == 0, "pipe: %s", strerror(errno));
    rec_t out = {1, 2}, in = {0, 0};
    CHECK(weft_fdpass_send(sv[0], &out, sizeof out, p[1], true) == (ssize_t)sizeof out,
          "send with a descriptor: %s", strerror(errno));
    int fd = -7;
    ssize_t n = weft_fdpass_recv(sv[1], &in, sizeof in, -1, &fd);
    CHECK(n == (ssize_t)sizeof in && in.a == 1 && in.b == 2, "recv returned %zd", n);
    CHECK(fd >= 0 && fd != p[1], "received descriptor %d", fd);
    if (fd >= 0) {
        CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC, "received descriptor is not close-on-exec");
        char byte = 'x', got = 0;
        CHECK(write(fd, &byte, 1) == 1 && read(p[0], &got, 1) == 1 && got == 'x',
              "received descriptor does not reach the pipe");
        close(fd);
    }
    out.a = 3;
    CHECK(weft_fdpass_send(sv[0], &out, sizeof out, -1, false) == (ssize_t)sizeof out,
          "send without a descriptor: %s", strerror(errno));
    fd = -7;
    n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == (ssize_t)sizeof in && in.a == 3 && fd == -1, "recv returned %zd, fd %d", n, fd);
    close(p[0]);
    close(p[1]);
    close(sv[0]);
    close(sv[1]);
}

/* Nothing pending: at once with timeout 0, after the timeout with timeout > 0. */
static void test_nothing_pending(void)
{
    int sv[2];
    if (make_pair(sv) != 0)
        return;
    rec_t in;
    int fd = -7;
    errno = 0;
    ssize_t n = weft_fdpass_recv(sv[1], &in, sizeof in, 0, &fd);
    CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK) && fd == -1,
          "non-blocking recv of nothing returned %zd (%s), fd %d", n, strerror(errno), fd);
    fd = -7;
    errno = 0;
    n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == -1 && errno == ETIMEDOUT && fd == -1,
          "recv of nothing with a timeout returned %zd (%s), fd %d", n, strerror(errno), fd);
    close(sv[0]);
    close(sv[1]);
}

/* A short record comes back as its length with its descriptor closed; a long one fails. */
static void test_wrong_size(void)
{
    int sv[2], p[2];
    if (make_pair(sv) != 0)
        return;
    CHECK(pipe(p) == 0, "pipe: %s", strerror(errno));
    rec_t out = {4, 5}, in;
    CHECK(weft_fdpass_send(sv[0], &out, sizeof out.a, p[1], true) == (ssize_t)sizeof out.a,
          "short send: %s", strerror(errno));
    close(p[1]); /* the only write end left is the one in flight */
    int fd = -7;
    ssize_t n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == (ssize_t)sizeof out.a && fd == -1, "short record: returned %zd, fd %d", n, fd);
    char byte;
    CHECK(read(p[0], &byte, 1) == 0, "the short record's descriptor was not closed");
    close(p[0]);

    uint64_t big[4] = {0, 0, 0, 0};
    CHECK(weft_fdpass_send(sv[0], big, sizeof big, -1, true) == (ssize_t)sizeof big,
          "long send: %s", strerror(errno));
    errno = 0;
    n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == -1 && errno == EMSGSIZE && fd == -1, "long record: returned %zd (%s), fd %d", n,
          strerror(errno), fd);
    close(sv[0]);
    close(sv[1]);
}

/* A record that carries two descriptors (a peer's bug) fails with EMSGSIZE and leaves neither
 * open here: each write end in flight is the pipe's last, so its read end sees end of file once
 * both are closed. */
static void test_two_descriptors(void)
{
    int sv[2], p[2], q[2];
    if (make_pair(sv) != 0)
        return;
    CHECK(pipe(p) == 0 && pipe(q) == 0, "pipe: %s", strerror(errno));
    rec_t out = {8, 9}, in;
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = &out, .iov_len = sizeof out};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int two[2] = {p[1], q[1]};
    memcpy(CMSG_DATA(c), two, sizeof two);
    CHECK(sendmsg(sv[0], &mh, MSG_NOSIGNAL) == (ssize_t)sizeof out, "sendmsg: %s", strerror(errno));
    close(p[1]);
    close(q[1]);
    int fd = -7;
    errno = 0;
    ssize_t n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == -1 && errno == EMSGSIZE && fd == -1, "two descriptors: returned %zd (%s), fd %d", n,
          strerror(errno), fd);
    if (fd >= 0)
        close(fd);
    char byte;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    fcntl(q[0], F_SETFL, O_NONBLOCK);
    CHECK(read(p[0], &byte, 1) == 0, "the first descriptor was left open");
    CHECK(read(q[0], &byte, 1) == 0, "the second descriptor was left open");
    close(p[0]);
    close(q[0]);
    close(sv[0]);
    close(sv[1]);
}

/* The receiver has no descriptor left: the record is consumed, its descriptor lost, EMFILE. */
static void test_no_descriptor_room(void)
{
    int sv[2], p[2];
    if (make_pair(sv) != 0)
        return;
    CHECK(pipe(p) == 0, "pipe: %s", strerror(errno));
    rec_t out = {5, 6}, in;
    CHECK(weft_fdpass_send(sv[0], &out, sizeof out, p[1], true) == (ssize_t)sizeof out, "send: %s",
          strerror(errno));
    CHECK(weft_fdpass_send(sv[0], &out, sizeof out, -1, true) == (ssize_t)sizeof out, "send: %s",
          strerror(errno));
    close(p[1]);
    int lowest = dup(0); /* the lowest free descriptor number */
    close(lowest);
    struct rlimit saved, lim;
    CHECK(getrlimit(RLIMIT_NOFILE, &saved) == 0, "getrlimit: %s", strerror(errno));
    lim = saved;
    lim.rlim_cur = (rlim_t)lowest; /* no new descriptor fits */
    CHECK(setrlimit(RLIMIT_NOFILE, &lim) == 0, "setrlimit: %s", strerror(errno));
    int fd = -7;
    errno = 0;
    ssize_t n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    int err = errno;
    CHECK(setrlimit(RLIMIT_NOFILE, &saved) == 0, "restore RLIMIT_NOFILE: %s", strerror(errno));
    CHECK(n == -1 && err == EMFILE && fd == -1, "no room: returned %zd (%s), fd %d", n,
          strerror(err), fd);
    if (fd >= 0)
        close(fd);
    n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd); /* the next record */
    CHECK(n == (ssize_t)sizeof in && fd == -1 && in.a == 5, "after it: returned %zd, fd %d", n, fd);
    char byte;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    CHECK(read(p[0], &byte, 1) == 0, "the lost descriptor is still open somewhere");
    close(p[0]);
    close(sv[0]);
    close(sv[1]);
}

/* End of file, a full socket, a closed peer. */
static void test_peer_states(void)
{
    int sv[2];
    if (make_pair(sv) != 0)
        return;
    rec_t out = {6, 7}, in;
    ssize_t n;
    int sent = 0;
    errno = 0;
    while ((n = weft_fdpass_send(sv[0], &out, sizeof out, -1, false)) == (ssize_t)sizeof out &&
           sent < 1000000)
        sent++;
    CHECK(n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK),
          "non-waiting send to a full socket returned %zd (%s) after %d records", n,
          strerror(errno), sent);
    close(sv[0]);
    int fd = -7;
    for (int i = 0; i < sent; i++)
        (void)weft_fdpass_recv(sv[1], &in, sizeof in, 0, &fd);
    n = weft_fdpass_recv(sv[1], &in, sizeof in, TIMEOUT_MS, &fd);
    CHECK(n == 0 && fd == -1, "recv after the peer closed returned %zd, fd %d", n, fd);
    errno = 0;
    n = weft_fdpass_send(sv[1], &out, sizeof out, -1, true);
    CHECK(n == -1 && (errno == EPIPE || errno == ECONNRESET),
          "send to a closed peer returned %zd (%s)", n, strerror(errno));
    close(sv[1]);
}

int main(void)
{
    test_descriptor();
    test_nothing_pending();
    test_wrong_size();
    test_two_descriptors();
    test_no_descriptor_room();
    test_peer_states();
    if (failures)
        printf("test_fdpass: %d failure(s)\n", failures);
    else
        printf("PASS: test_fdpass\n");
    return failures != 0;
}
