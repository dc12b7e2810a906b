/*
 * bootstrap.c - the rendezvous store's client side and the functions of bootstrap.h: every rank
 * (rank 0 too) is a client, on one TCP connection, of the key-value server that rank 0 hosts
 * (store_server.c). The wire protocol is in store_proto.h.
 *
 * Design. The client socket is non-blocking; every send, receive and connect waits in poll() for
 * at most the time left before the store's absolute deadline. Joining retries (connection refused
 * or reset, handshake rejected) with a backoff from 1 ms to 100 ms until the deadline: this also
 * covers a server that is not listening yet and a previous store's server that still holds the
 * port. A transport error, timeout or protocol error leaves the byte stream in an unknown state,
 * so it is sticky: every later call on the handle fails with that status. On rank 0, opening
 * starts the server thread before joining it, and closing stops it.
 *
 * Thread safety: one thread uses a store handle at a time. The server thread shares nothing with
 * the handle's thread but the eventfd it is woken through (store_server.h).
 */
#include "core/bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/store_proto.h"
#include "core/store_server.h"
#include "util/clock.h"
#include "util/forksafe.h"
#include "util/log.h"

#define STORE_TAG_MAX (STORE_KEY_MAX - 12u) /* room for "/<rank>" */

struct weft_store {
    int fd;
    int rank;
    int nranks;
    uint64_t deadline_ns;
    weft_status_t failed;        /* sticky status after a transport, timeout or protocol error */
    weft_store_server_t *server; /* rank 0 only */
};

/* Resolve addr:port into a list of TCP addresses. A temporary resolver failure (EAI_AGAIN) is
 * retried until the deadline. */
static weft_status_t resolve(const char *addr, int port, uint64_t deadline_ns,
                             struct addrinfo **list_out)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    uint64_t backoff_ns = STORE_BACKOFF_MIN_NS;
    for (;;) {
        int rc = getaddrinfo(addr, service, &hints, list_out);
        if (rc == 0)
            return WEFT_SUCCESS;
        if (rc == EAI_SYSTEM)
            return weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_store_open: getaddrinfo(\"%s\")",
                                    addr);
        if (rc != EAI_AGAIN)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "weft_store_open: addr \"%s\" does not resolve: %s", addr,
                              gai_strerror(rc));
        if (weft_now_ns() >= deadline_ns)
            return weft_error(WEFT_ERR_TIMEOUT,
                              "weft_store_open: addr \"%s\" did not resolve before the "
                              "deadline: %s",
                              addr, gai_strerror(rc));
        weft_store_proto_backoff(&backoff_ns, deadline_ns);
    }
}

/* The client I/O helpers below do not record errors: they return WEFT_SUCCESS,
 * WEFT_ERR_TIMEOUT (the deadline passed), WEFT_ERR_PEER_LOST (the connection closed or failed;
 * *err gets errno, 0 for an orderly close) or WEFT_ERR_SYSTEM (poll failed; *err gets errno), and
 * the caller records the error once, with what it was doing. */

/* Wait for events on fd until the deadline. */
static weft_status_t wait_fd(int fd, short events, uint64_t deadline_ns, int *err)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int timeout_ms = weft_store_proto_ms_left(deadline_ns);
        int n = poll(&p, 1, timeout_ms);
        if (n > 0)
            return WEFT_SUCCESS;
        if (n < 0 && errno != EINTR) {
            *err = errno;
            return WEFT_ERR_SYSTEM;
        }
        if (n == 0 && timeout_ms == 0)
            return WEFT_ERR_TIMEOUT;
    }
}

/* After a send or receive on fd failed with errno: WEFT_SUCCESS when the call should be made
 * again (it was interrupted, or it would have blocked and fd became ready for events before the
 * deadline); otherwise the status to return. */
static weft_status_t io_retry(int fd, short events, uint64_t deadline_ns, int *err)
{
    if (errno == EINTR)
        return WEFT_SUCCESS;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return wait_fd(fd, events, deadline_ns, err);
    *err = errno;
    return WEFT_ERR_PEER_LOST;
}

/* Send the whole iovec array (modified in place) before the deadline. */
static weft_status_t send_iov(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ns, int *err)
{
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            weft_status_t status = io_retry(fd, POLLOUT, deadline_ns, err);
            if (status != WEFT_SUCCESS)
                return status;
            continue;
        }
        size_t done = (size_t)n;
        while (iovcnt > 0 && done >= iov->iov_len) {
            done -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (uint8_t *)iov->iov_base + done;
            iov->iov_len -= done;
        }
    }
    return WEFT_SUCCESS;
}

/* Receive exactly len bytes before the deadline (buf NULL: receive and discard). */
static weft_status_t recv_exact(int fd, void *buf, size_t len, uint64_t deadline_ns, int *err)
{
    uint8_t scratch[4096];
    uint8_t *p = buf;
    while (len > 0) {
        size_t want = len;
        uint8_t *dst = p;
        if (p == NULL) {
            dst = scratch;
            want = len < sizeof scratch ? len : sizeof scratch;
        }
        ssize_t n = recv(fd, dst, want, 0);
        if (n == 0) {
            *err = 0;
            return WEFT_ERR_PEER_LOST;
        }
        if (n < 0) {
            weft_status_t status = io_retry(fd, POLLIN, deadline_ns, err);
            if (status != WEFT_SUCCESS)
                return status;
            continue;
        }
        if (p != NULL)
            p += n;
        len -= (size_t)n;
    }
    return WEFT_SUCCESS;
}

/* Connect a non-blocking socket to one address before the deadline. Returns the socket, or -1
 * with *err set (the connection attempt failed and may be retried). */
static int try_connect(const struct addrinfo *ai, uint64_t deadline_ns, int *err)
{
    int fd = weft_forksafe_socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                  ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = errno;
            weft_forksafe_close(fd);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        while ((n = poll(&p, 1, weft_store_proto_ms_left(deadline_ns))) < 0 && errno == EINTR)
            continue;
        int so_err = 0;
        socklen_t so_len = sizeof so_err;
        if (n <= 0)
            so_err = n == 0 ? ETIMEDOUT : errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &so_len) != 0)
            so_err = errno;
        if (so_err != 0) {
            *err = so_err;
            weft_forksafe_close(fd);
            return -1;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Send HELLO and wait for WELCOME (I/O helper statuses; nothing is recorded). A refused
 * handshake reads as WEFT_ERR_PEER_LOST: the server closed the connection. */
static weft_status_t handshake(weft_store_t *st, uint32_t generation, int *err)
{
    uint8_t msg[STORE_HDR_BYTES + STORE_HELLO_BYTES];
    store_put_u32(msg, STORE_HELLO_BYTES);
    msg[4] = STORE_MSG_HELLO;
    store_put_u32(msg + 5, STORE_MAGIC);
    store_put_u32(msg + 9, STORE_VERSION);
    store_put_u32(msg + 13, (uint32_t)st->rank);
    store_put_u32(msg + 17, (uint32_t)st->nranks);
    store_put_u32(msg + 21, generation);
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
    weft_status_t status = send_iov(st->fd, &iov, 1, st->deadline_ns, err);
    if (status != WEFT_SUCCESS)
        return status;
    uint8_t reply[STORE_HDR_BYTES + STORE_WELCOME_BYTES];
    status = recv_exact(st->fd, reply, sizeof reply, st->deadline_ns, err);
    if (status != WEFT_SUCCESS)
        return status;
    if (store_get_u32(reply) != STORE_WELCOME_BYTES || reply[4] != STORE_MSG_WELCOME ||
        store_get_u32(reply + 5) != STORE_MAGIC) {
        *err = EPROTO;
        return WEFT_ERR_PEER_LOST;
    }
    return WEFT_SUCCESS;
}

/* Join the server: connect and handshake, retrying with backoff until the deadline. */
static weft_status_t client_join(weft_store_t *st, const struct addrinfo *list, const char *addr,
                                 int port, uint32_t generation, double timeout_s)
{
    uint64_t backoff_ns = STORE_BACKOFF_MIN_NS;
    int last_err = 0;
    int rejected = 0;
    for (;;) {
        for (const struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next) {
            st->fd = try_connect(ai, st->deadline_ns, &last_err);
            if (st->fd < 0) {
                if (last_err == EMFILE || last_err == ENFILE || last_err == ENOMEM ||
                    last_err == ENOBUFS)
                    return weft_error_errno(WEFT_ERR_SYSTEM, last_err,
                                            "weft_store_open: socket for %s port %d", addr, port);
                continue;
            }
            int err = 0;
            weft_status_t status = handshake(st, generation, &err);
            if (status == WEFT_SUCCESS)
                return WEFT_SUCCESS;
            weft_forksafe_close(st->fd);
            st->fd = -1;
            if (status == WEFT_ERR_SYSTEM)
                return weft_error_errno(status, err, "weft_store_open: poll");
            if (status == WEFT_ERR_PEER_LOST)
                rejected = 1;
        }
        if (weft_now_ns() >= st->deadline_ns)
            break;
        weft_store_proto_backoff(&backoff_ns, st->deadline_ns);
    }
    if (rejected)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "weft_store_open: rank %d of %d could not join the store at %s port "
                          "%d within %.3g s: the server closed the connection before welcoming it "
                          "(another job, nranks or generation %u mismatched, the rank already "
                          "connected, or connections that send nothing crowding the server)",
                          st->rank, st->nranks, addr, port, timeout_s, generation);
    return weft_error_errno(WEFT_ERR_TIMEOUT, last_err,
                            "weft_store_open: rank %d of %d could not reach the store at %s port "
                            "%d within %.3g s",
                            st->rank, st->nranks, addr, port, timeout_s);
}

weft_status_t weft_store_open(const char *addr, int port, int rank, int nranks, uint32_t generation,
                              double timeout_s, weft_store_t **store_out)
{
    weft_status_t status;
    if (addr == NULL || addr[0] == '\0')
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_store_open: addr is empty");
    if (port <= 0 || port > 65535)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_store_open: port %d is out of range",
                          port);
    if (nranks <= 0 || rank < 0 || rank >= nranks)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_store_open: rank %d is out of range for nranks %d", rank, nranks);
    if (!(timeout_s > 0)) /* also rejects NaN */
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_store_open: timeout_s %g is not positive", timeout_s);
    if (store_out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_store_open: store_out is NULL");

    weft_store_t *st = calloc(1, sizeof *st);
    if (st == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_store_open: store handle");
    st->fd = -1;
    st->rank = rank;
    st->nranks = nranks;
    st->deadline_ns = weft_deadline_after_s(timeout_s);

    struct addrinfo *list;
    status = resolve(addr, port, st->deadline_ns, &list);
    if (status != WEFT_SUCCESS)
        goto err_free_store;
    if (rank == 0) {
        status = weft_store_server_start(list, addr, port, nranks, generation, st->deadline_ns,
                                         &st->server);
        if (status != WEFT_SUCCESS)
            goto err_free_list;
    }
    status = client_join(st, list, addr, port, generation, timeout_s);
    if (status != WEFT_SUCCESS)
        goto err_stop_server;
    freeaddrinfo(list);
    *store_out = st;
    return WEFT_SUCCESS;

err_stop_server:
    if (st->server != NULL)
        weft_store_server_stop(st->server, WEFT_STORE_STOP_NOW);
err_free_list:
    freeaddrinfo(list);
err_free_store:
    free(st);
    return status;
}

/* Fail fast on a handle that already failed; otherwise check that key is a valid key. */
static weft_status_t check_call(const weft_store_t *st, const char *key, const char *what)
{
    if (st == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: store is NULL", what);
    if (st->failed != WEFT_SUCCESS)
        return weft_error(st->failed, "%s: the store failed earlier (%s)", what,
                          weft_status_string(st->failed));
    if (key == NULL || key[0] == '\0' || strlen(key) > STORE_KEY_MAX)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: key must hold 1 to %u bytes", what,
                          STORE_KEY_MAX);
    return WEFT_SUCCESS;
}

/* Record the failure of a call (an I/O helper status and its errno) once, and make it sticky:
 * the byte stream may be mid-message, so the handle is unusable afterwards. */
static weft_status_t fail(weft_store_t *st, weft_status_t status, int err, const char *what,
                          const char *key)
{
    if (status == WEFT_ERR_TIMEOUT)
        weft_error(status, "%s: key \"%s\": the store's deadline passed first", what, key);
    else if (status == WEFT_ERR_PEER_LOST && err == 0)
        weft_error(status,
                   "%s: key \"%s\": the store closed the connection (a rank failed or was lost)",
                   what, key);
    else if (status == WEFT_ERR_PEER_LOST)
        weft_error_errno(status, err, "%s: key \"%s\": connection to the store lost", what, key);
    else
        weft_error_errno(status, err, "%s: key \"%s\": poll", what, key);
    st->failed = status;
    return status;
}

weft_status_t weft_store_set(weft_store_t *store, const char *key, const void *value, size_t len)
{
    static const char what[] = "weft_store_set";
    weft_status_t status = check_call(store, key, what);
    if (status != WEFT_SUCCESS)
        return status;
    if (len > STORE_VALUE_MAX || (value == NULL && len > 0))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_store_set: value of %zu bytes (at most %u, non-NULL)", len,
                          STORE_VALUE_MAX);
    size_t key_len = strlen(key);
    uint8_t hdr[STORE_HDR_BYTES + 3];
    store_put_u32(hdr, (uint32_t)(3 + key_len + len));
    hdr[4] = STORE_MSG_SET;
    store_put_u16(hdr + 5, (uint16_t)key_len);
    struct iovec iov[3] = {{.iov_base = hdr, .iov_len = sizeof hdr},
                           {.iov_base = (void *)key, .iov_len = key_len},
                           {.iov_base = (void *)value, .iov_len = len}};
    int err = 0;
    status = send_iov(store->fd, iov, len > 0 ? 3 : 2, store->deadline_ns, &err);
    return status == WEFT_SUCCESS ? status : fail(store, status, err, what, key);
}

/* On a value longer than cap, *len_out still receives its length (so the caller can size a
 * buffer) and the status is WEFT_ERR_INVALID_ARGUMENT; the handle stays usable. */
weft_status_t weft_store_get(weft_store_t *store, const char *key, void *buf, size_t cap,
                             size_t *len_out)
{
    static const char what[] = "weft_store_get";
    weft_status_t status = check_call(store, key, what);
    if (status != WEFT_SUCCESS)
        return status;
    if (buf == NULL && cap > 0)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_store_get: buf is NULL, cap %zu", cap);
    size_t key_len = strlen(key);
    uint8_t hdr[STORE_HDR_BYTES + 3];
    store_put_u32(hdr, (uint32_t)(3 + key_len));
    hdr[4] = STORE_MSG_GET;
    store_put_u16(hdr + 5, (uint16_t)key_len);
    struct iovec iov[2] = {{.iov_base = hdr, .iov_len = sizeof hdr},
                           {.iov_base = (void *)key, .iov_len = key_len}};
    int err = 0;
    status = send_iov(store->fd, iov, 2, store->deadline_ns, &err);
    if (status != WEFT_SUCCESS)
        return fail(store, status, err, what, key);

    uint8_t reply[STORE_HDR_BYTES + 1];
    status = recv_exact(store->fd, reply, sizeof reply, store->deadline_ns, &err);
    if (status != WEFT_SUCCESS)
        return fail(store, status, err, what, key);
    uint32_t body_len = store_get_u32(reply);
    if (body_len == 0 || body_len - 1 > STORE_VALUE_MAX || reply[4] != STORE_MSG_VALUE) {
        store->failed =
            weft_error(WEFT_ERR_INTERNAL, "weft_store_get: key \"%s\": malformed answer", key);
        return store->failed;
    }
    size_t value_len = body_len - 1;
    size_t take = value_len < cap ? value_len : cap;
    status = recv_exact(store->fd, buf, take, store->deadline_ns, &err);
    if (status == WEFT_SUCCESS)
        status = recv_exact(store->fd, NULL, value_len - take, store->deadline_ns, &err);
    if (status != WEFT_SUCCESS)
        return fail(store, status, err, what, key);
    if (len_out != NULL)
        *len_out = value_len;
    if (value_len > cap)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_store_get: value of key \"%s\" holds %zu bytes, cap is %zu", key,
                          value_len, cap);
    return WEFT_SUCCESS;
}

/* Key of rank r's contribution under tag: "<tag>/<r>". */
static weft_status_t rank_key(char *key, size_t cap, const char *tag, int r, const char *what)
{
    if (tag == NULL || tag[0] == '\0' || strlen(tag) > STORE_TAG_MAX)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: tag must hold 1 to %u bytes", what,
                          STORE_TAG_MAX);
    snprintf(key, cap, "%s/%d", tag, r);
    return WEFT_SUCCESS;
}

weft_status_t weft_store_allgather(weft_store_t *store, const char *tag, const void *mine,
                                   size_t len, void *all_out)
{
    static const char what[] = "weft_store_allgather";
    char key[STORE_KEY_MAX + 1];
    if (store == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: store is NULL", what);
    weft_status_t status = rank_key(key, sizeof key, tag, store->rank, what);
    if (status != WEFT_SUCCESS)
        return status;
    if (len > 0 && (mine == NULL || all_out == NULL))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: mine or all_out is NULL", what);
    if (len > STORE_VALUE_MAX)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: len %zu exceeds %u", what, len,
                          STORE_VALUE_MAX);
    status = weft_store_set(store, key, mine, len);
    if (status != WEFT_SUCCESS)
        return status;
    for (int r = 0; r < store->nranks; r++) {
        uint8_t *dst = (uint8_t *)all_out + (size_t)r * len;
        if (r == store->rank) {
            if (len > 0)
                memmove(dst, mine, len);
            continue;
        }
        rank_key(key, sizeof key, tag, r, what);
        size_t got = 0;
        status = weft_store_get(store, key, dst, len, &got);
        if (status == WEFT_ERR_INVALID_ARGUMENT || (status == WEFT_SUCCESS && got != len))
            return weft_error(WEFT_ERR_MISMATCH,
                              "%s: tag \"%s\": rank %d contributed %zu bytes, this rank %zu", what,
                              tag, r, got, len);
        if (status != WEFT_SUCCESS)
            return status;
    }
    return WEFT_SUCCESS;
}

weft_status_t weft_store_barrier(weft_store_t *store, const char *tag)
{
    static const char what[] = "weft_store_barrier";
    char key[STORE_KEY_MAX + 1];
    if (store == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: store is NULL", what);
    weft_status_t status = rank_key(key, sizeof key, tag, store->rank, what);
    if (status != WEFT_SUCCESS)
        return status;
    status = weft_store_set(store, key, NULL, 0);
    if (status != WEFT_SUCCESS)
        return status;
    for (int r = 0; r < store->nranks; r++) {
        if (r == store->rank)
            continue;
        rank_key(key, sizeof key, tag, r, what);
        size_t got = 0;
        status = weft_store_get(store, key, NULL, 0, &got);
        if (status == WEFT_ERR_INVALID_ARGUMENT)
            return weft_error(WEFT_ERR_MISMATCH,
                              "%s: tag \"%s\" of rank %d carries %zu bytes (used by another "
                              "call?)",
                              what, tag, r, got);
        if (status != WEFT_SUCCESS)
            return status;
    }
    return WEFT_SUCCESS;
}

#define STORE_BYE_SEND_NS 1000000000ull /* at most this long to say goodbye to the store */

static void store_close(weft_store_t *store, weft_store_stop_t how)
{
    if (store == NULL)
        return;
    if (store->failed == WEFT_SUCCESS) {
        /* Best effort (a message boundary: no call is mid-message once the handle is usable).
         * FAIL: peers waiting for our keys fail at once. LEAVE: our end of the connection is
         * no loss of this rank (store_proto.h). */
        uint8_t msg[STORE_HDR_BYTES + 1];
        store_put_u32(msg, 1);
        msg[4] = how == WEFT_STORE_STOP_FAIL ? STORE_MSG_FAIL : STORE_MSG_LEAVE;
        struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
        uint64_t soon = weft_now_ns() + STORE_BYE_SEND_NS;
        int err = 0;
        (void)send_iov(store->fd, &iov, 1, soon < store->deadline_ns ? soon : store->deadline_ns,
                       &err);
    }
    weft_forksafe_close(store->fd);
    if (store->server != NULL)
        weft_store_server_stop(store->server, how);
    free(store);
}

int weft_store_fd(const weft_store_t *store)
{
    return store->fd;
}

void weft_store_close(weft_store_t *store)
{
    store_close(store, WEFT_STORE_STOP_DRAIN);
}

void weft_store_close_failed(weft_store_t *store)
{
    store_close(store, WEFT_STORE_STOP_FAIL);
}
