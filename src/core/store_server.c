/*
 * store_server.c - the rendezvous store's server thread ("weft-store"), hosted by rank 0: a
 * key-value store that every rank (rank 0 too) reaches as a client on one TCP connection. The
 * wire protocol is in store_proto.h; the client side is bootstrap.c.
 *
 * Design. One thread ("weft-store") owns every server structure and blocks in poll() on an
 * eventfd (the stop request), the listening socket and all client sockets, which are
 * non-blocking. Input is assembled per client into a body buffer; a SET's body becomes the
 * stored entry without a copy. A GET for a key that does not exist yet is parked on a list of
 * pending GETs and answered by the SET that creates the key. Output is queued per client and
 * written when the socket is writable, so a slow reader never blocks the server; a client that
 * sends a SET or GET before reading the answer to its GET breaks the protocol and is dropped, so
 * no client can make the server queue without bound. A connection whose first message is not a
 * valid HELLO (magic, version, nranks, generation, rank not already connected) is closed; the
 * client sees the close before a WELCOME and retries. So is one that has not completed its HELLO
 * within STORE_HELLO_WINDOW_NS, and past STORE_PENDING_MAX(nranks) connections without a HELLO
 * every accepted one costs the oldest idle one its connection (store_proto.h): connections that
 * never speak hold neither descriptors nor a place for long. When accept fails for lack of
 * descriptors, the server closes the oldest idle connection to free one; when nothing can be
 * freed (or memory ran short) it stops watching the listener for STORE_ACCEPT_PAUSE_NS and then
 * tries again, so a passing shortage does not keep later ranks out (they wait in the listen
 * backlog, and retry until their deadline). On stop the server keeps serving until every rank
 * has connected and disconnected, or the deadline passes; after rank 0 failed
 * (WEFT_STORE_STOP_FAIL) it closes every connection that waits for a missing key, and every
 * rank's connection STORE_FAIL_LINGER_NS later. A rank's connection that the client ends
 * without LEAVE or FAIL (store_proto.h) breaks the rendezvous: every rank's connection is
 * closed, and a later one at its first request.
 *
 * Thread safety: the server thread shares nothing with the thread that starts and stops it but
 * the eventfd it is woken through; its structures are created before it starts and freed after
 * it is joined.
 */
#include "core/store_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/store_proto.h"
#include "util/clock.h"
#include "util/forksafe.h"
#include "util/log.h"

/* After accept failed for lack of resources with nothing to free: how long the listener rests. */
#define STORE_ACCEPT_PAUSE_NS 20000000ull

/* ---------------------------------------------------------------------------------------------
 * Structures (owned by the server thread while it runs)
 * ------------------------------------------------------------------------------------------- */

/* One queued output message. */
typedef struct out_buf {
    struct out_buf *next;
    size_t len, off;
    uint8_t data[];
} out_buf_t;

/* One connection. rank is -1 until its HELLO is accepted. */
typedef struct conn {
    int fd;
    int rank;
    int dead;
    int gone; /* the client ended the connection (end of stream, or a socket error) */
    int bye;  /* the client sent LEAVE or FAIL: its end of the connection is no failure */
    uint64_t accepted_ns; /* when it was accepted (its HELLO is due STORE_HELLO_WINDOW_NS later) */
    uint8_t hdr[STORE_HDR_BYTES];
    size_t hdr_got;
    uint8_t *body; /* allocated once the header is complete */
    uint32_t body_len;
    size_t body_got;
    out_buf_t *out_head, *out_tail;
} conn_t;

/* A stored key. body is the SET message body that carried it; key and value point into it. */
typedef struct kv_entry {
    struct kv_entry *next;
    uint8_t *body;
    const uint8_t *key;
    size_t key_len;
    const uint8_t *value;
    size_t value_len;
} kv_entry_t;

/* A GET waiting for its key to be set. */
typedef struct pending_get {
    struct pending_get *next;
    conn_t *conn;
    size_t key_len;
    uint8_t key[STORE_KEY_MAX];
} pending_get_t;

struct weft_store_server {
    int listen_fd;
    int wake_fd; /* eventfd: written once by weft_store_server_stop to request the stop */
    pthread_t thread;
    int nranks;
    uint32_t generation;
    uint64_t deadline_ns;

    conn_t **conns;
    size_t nconns, conns_cap;
    struct pollfd *pfds;
    size_t pfds_cap;
    kv_entry_t *kv;
    pending_get_t *pending;
    uint8_t *seen; /* seen[r]: rank r has completed a handshake at least once */
    int nseen;
    int nlive;   /* connections with an accepted handshake */
    int closing; /* 0 or a weft_store_stop_t */
    /* 0, or until when the listener rests after accept failed for lack of resources */
    uint64_t accept_resume_ns;
    int accept_errno; /* the errno of the accept failure last recorded, 0 after a success */
    int failed_rank;  /* a rank that sent FAIL, or -1 (also rank 0 stopping with STOP_FAIL) */
    int broken;       /* a rank's connection was lost without a goodbye: serve no rank again */
    /* After the first FAIL: when the connections then open are closed (fail_pending); 0 before,
     * UINT64_MAX once done. */
    uint64_t fail_close_ns;
};
static void conn_free(conn_t *c)
{
    out_buf_t *o = c->out_head;
    while (o != NULL) {
        out_buf_t *next = o->next;
        free(o);
        o = next;
    }
    free(c->body);
    weft_forksafe_close(c->fd);
    free(c);
}

/* Queue a message of the given type whose payload is the concatenation of a (alen bytes) and b
 * (blen bytes). Marks the connection dead if memory runs out. */
static void conn_queue(conn_t *c, uint8_t type, const void *a, size_t alen, const void *b,
                       size_t blen)
{
    size_t body = 1 + alen + blen;
    out_buf_t *o = malloc(sizeof *o + STORE_HDR_BYTES + body);
    if (o == NULL) {
        weft_error(WEFT_ERR_NO_MEMORY, "weft-store: reply of %zu bytes to rank %d", body, c->rank);
        c->dead = 1;
        return;
    }
    o->next = NULL;
    o->len = STORE_HDR_BYTES + body;
    o->off = 0;
    store_put_u32(o->data, (uint32_t)body);
    o->data[STORE_HDR_BYTES] = type;
    if (alen > 0)
        memcpy(o->data + STORE_HDR_BYTES + 1, a, alen);
    if (blen > 0)
        memcpy(o->data + STORE_HDR_BYTES + 1 + alen, b, blen);
    if (c->out_tail == NULL)
        c->out_head = o;
    else
        c->out_tail->next = o;
    c->out_tail = o;
}

/* Write queued output until it is all sent or the socket would block. */
static void conn_flush(conn_t *c)
{
    while (!c->dead && c->out_head != NULL) {
        out_buf_t *o = c->out_head;
        ssize_t n = send(c->fd, o->data + o->off, o->len - o->off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                WEFT_LOG_DEBUG("weft-store: send to rank %d: %s", c->rank, strerror(errno));
                c->dead = c->gone = 1;
            }
            return;
        }
        o->off += (size_t)n;
        if (o->off == o->len) {
            c->out_head = o->next;
            if (c->out_head == NULL)
                c->out_tail = NULL;
            free(o);
        }
    }
}

static kv_entry_t *kv_find(weft_store_server_t *s, const uint8_t *key, size_t key_len)
{
    for (kv_entry_t *e = s->kv; e != NULL; e = e->next)
        if (e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
            return e;
    return NULL;
}

static void handle_hello(weft_store_server_t *s, conn_t *c, const uint8_t *body, uint32_t len)
{
    if (len != STORE_HELLO_BYTES || body[0] != STORE_MSG_HELLO) {
        WEFT_LOG_DEBUG("weft-store: rejecting a connection: not a handshake");
        c->dead = 1;
        return;
    }
    uint32_t magic = store_get_u32(body + 1), version = store_get_u32(body + 5);
    uint32_t rank = store_get_u32(body + 9), nranks = store_get_u32(body + 13),
             gen = store_get_u32(body + 17);
    if (magic != STORE_MAGIC || version != STORE_VERSION || nranks != (uint32_t)s->nranks ||
        gen != s->generation || rank >= nranks) {
        WEFT_LOG_DEBUG("weft-store: rejecting rank %u: magic %#x version %u nranks %u "
                       "generation %u (expected nranks %d generation %u)",
                       rank, magic, version, nranks, gen, s->nranks, s->generation);
        c->dead = 1;
        return;
    }
    for (size_t i = 0; i < s->nconns; i++) {
        if (s->conns[i]->rank == (int)rank && !s->conns[i]->dead) {
            WEFT_LOG_DEBUG("weft-store: rejecting rank %u: already connected", rank);
            c->dead = 1;
            return;
        }
    }
    c->rank = (int)rank;
    s->nlive++;
    if (!s->seen[rank]) {
        s->seen[rank] = 1;
        s->nseen++;
    }
    uint8_t magic_le[4];
    store_put_u32(magic_le, STORE_MAGIC);
    conn_queue(c, STORE_MSG_WELCOME, magic_le, sizeof magic_le, NULL, 0);
}

/* Store a SET (taking ownership of its body) and answer the GETs that waited for its key. */
static void handle_set(weft_store_server_t *s, conn_t *c, uint8_t *body, uint32_t len)
{
    size_t key_len = store_get_u16(body + 1);
    if (key_len == 0 || key_len > STORE_KEY_MAX || 3 + key_len > len) {
        weft_error(WEFT_ERR_INTERNAL, "weft-store: malformed SET from rank %d", c->rank);
        c->dead = 1;
        free(body);
        return;
    }
    const uint8_t *key = body + 3;
    kv_entry_t *e = kv_find(s, key, key_len);
    if (e == NULL) {
        e = malloc(sizeof *e);
        if (e == NULL) {
            weft_error(WEFT_ERR_NO_MEMORY, "weft-store: SET from rank %d", c->rank);
            c->dead = 1;
            free(body);
            return;
        }
        e->next = s->kv;
        s->kv = e;
    } else {
        free(e->body);
    }
    e->body = body;
    e->key = key;
    e->key_len = key_len;
    e->value = body + 3 + key_len;
    e->value_len = len - 3 - key_len;

    pending_get_t **pp = &s->pending;
    while (*pp != NULL) {
        pending_get_t *p = *pp;
        if (p->key_len == key_len && memcmp(p->key, key, key_len) == 0) {
            *pp = p->next;
            if (!p->conn->dead) {
                conn_queue(p->conn, STORE_MSG_VALUE, e->value, e->value_len, NULL, 0);
                conn_flush(p->conn);
            }
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

static void handle_get(weft_store_server_t *s, conn_t *c, const uint8_t *body, uint32_t len)
{
    size_t key_len = len >= 3 ? store_get_u16(body + 1) : 0;
    if (key_len == 0 || key_len > STORE_KEY_MAX || 3 + key_len != len) {
        weft_error(WEFT_ERR_INTERNAL, "weft-store: malformed GET from rank %d", c->rank);
        c->dead = 1;
        return;
    }
    kv_entry_t *e = kv_find(s, body + 3, key_len);
    if (e != NULL) {
        conn_queue(c, STORE_MSG_VALUE, e->value, e->value_len, NULL, 0);
        return;
    }
    if (s->failed_rank >= 0) {
        WEFT_LOG_DEBUG("weft-store: dropping rank %d: it waits for a key after rank %d failed",
                       c->rank, s->failed_rank);
        c->dead = 1;
        return;
    }
    pending_get_t *p = malloc(sizeof *p);
    if (p == NULL) {
        weft_error(WEFT_ERR_NO_MEMORY, "weft-store: GET from rank %d", c->rank);
        c->dead = 1;
        return;
    }
    p->conn = c;
    p->key_len = key_len;
    memcpy(p->key, body + 3, key_len);
    p->next = s->pending;
    s->pending = p;
}

/* rank failed what the store serves: every GET waiting for a key that does not exist, and every
 * later one, closes its connection (the client fails at once instead of at its deadline), and
 * STORE_FAIL_LINGER_NS later every rank's connection still open is closed (close_after_fail). */
static void fail_pending(weft_store_server_t *s, int rank)
{
    if (s->failed_rank < 0)
        s->failed_rank = rank;
    if (s->fail_close_ns == 0)
        s->fail_close_ns = weft_now_ns() + STORE_FAIL_LINGER_NS;
    for (pending_get_t *p = s->pending; p != NULL; p = p->next)
        p->conn->dead = 1; /* reap_dead frees them */
}

/* Close every rank's connection open now (reap_dead frees them). */
static void close_ranked(weft_store_server_t *s)
{
    for (size_t i = 0; i < s->nconns; i++)
        if (s->conns[i]->rank >= 0)
            s->conns[i]->dead = 1;
}

/* STORE_FAIL_LINGER_NS after a FAIL: close every rank's connection open now, so that a rank
 * waiting on something else than the store (weft_store_fd) learns of the failure; a rank that
 * connects later still reads what exists (store_proto.h). */
static void close_after_fail(weft_store_server_t *s, uint64_t now)
{
    if (s->fail_close_ns == 0 || s->fail_close_ns == UINT64_MAX || now < s->fail_close_ns)
        return;
    s->fail_close_ns = UINT64_MAX;
    close_ranked(s);
}

/* Whether c still owes its client an answer: a GET parked for its key, or output not yet sent.
 * A client waits for the answer to its GET before it sends anything but FAIL (store_proto.h), so
 * a SET or GET from a connection in this state breaks the protocol. Checking it bounds what one
 * connection can make the server hold: one parked GET and one queued answer. */
static int conn_owes_answer(const weft_store_server_t *s, const conn_t *c)
{
    if (c->out_head != NULL)
        return 1;
    for (const pending_get_t *p = s->pending; p != NULL; p = p->next)
        if (p->conn == c)
            return 1;
    return 0;
}

/* Act on one complete message; takes ownership of body. */
static void handle_message(weft_store_server_t *s, conn_t *c, uint8_t *body, uint32_t len)
{
    if (c->rank < 0) {
        handle_hello(s, c, body, len);
        free(body);
        return;
    }
    if (s->broken) {
        WEFT_LOG_DEBUG("weft-store: closing rank %d: the rendezvous broke (rank %d was lost)",
                       c->rank, s->failed_rank);
        c->dead = 1;
        free(body);
        return;
    }
    if ((body[0] == STORE_MSG_SET || body[0] == STORE_MSG_GET) && conn_owes_answer(s, c)) {
        weft_error(
            WEFT_ERR_INTERNAL,
            "weft-store: dropping rank %d: it sent a %s before reading the answer to its GET",
            c->rank, body[0] == STORE_MSG_SET ? "SET" : "GET");
        c->dead = 1;
        free(body);
        return;
    }
    switch (body[0]) {
    case STORE_MSG_SET:
        if (len >= 3) {
            handle_set(s, c, body, len);
            return;
        }
        break;
    case STORE_MSG_GET:
        handle_get(s, c, body, len);
        free(body);
        return;
    case STORE_MSG_FAIL:
        if (len == 1) {
            c->bye = 1;
            fail_pending(s, c->rank);
            free(body);
            return;
        }
        break;
    case STORE_MSG_LEAVE:
        if (len == 1) {
            c->bye = 1;
            free(body);
            return;
        }
        break;
    default:
        break;
    }
    weft_error(WEFT_ERR_INTERNAL, "weft-store: unexpected message type %u from rank %d", body[0],
               c->rank);
    c->dead = 1;
    free(body);
}

/* Read everything the socket has, handling each complete message. */
static void conn_read(weft_store_server_t *s, conn_t *c)
{
    while (!c->dead) {
        uint8_t *dst;
        size_t want;
        if (c->hdr_got < STORE_HDR_BYTES) {
            dst = c->hdr + c->hdr_got;
            want = STORE_HDR_BYTES - c->hdr_got;
        } else {
            dst = c->body + c->body_got;
            want = c->body_len - c->body_got;
        }
        ssize_t n = recv(c->fd, dst, want, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                WEFT_LOG_DEBUG("weft-store: recv from rank %d: %s", c->rank, strerror(errno));
                c->dead = c->gone = 1;
            }
            return;
        }
        if (n == 0) {
            c->dead = c->gone = 1; /* a goodbye before it (c->bye), or the client is gone */
            return;
        }
        if (c->hdr_got < STORE_HDR_BYTES) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got < STORE_HDR_BYTES)
                continue;
            c->body_len = store_get_u32(c->hdr);
            if (c->body_len == 0 || c->body_len > STORE_BODY_MAX ||
                (c->rank < 0 && c->body_len != STORE_HELLO_BYTES)) {
                WEFT_LOG_DEBUG("weft-store: dropping rank %d: message of %u bytes", c->rank,
                               c->body_len);
                c->dead = 1;
                return;
            }
            c->body = malloc(c->body_len);
            if (c->body == NULL) {
                weft_error(WEFT_ERR_NO_MEMORY, "weft-store: message of %u bytes from rank %d",
                           c->body_len, c->rank);
                c->dead = 1;
                return;
            }
            c->body_got = 0;
            continue;
        }
        c->body_got += (size_t)n;
        if (c->body_got == c->body_len) {
            uint8_t *body = c->body;
            c->body = NULL;
            c->hdr_got = 0;
            handle_message(s, c, body, c->body_len);
        }
    }
}

/* Track a new connection. Returns 0, or -1 (error recorded) if memory runs out. */
static int conn_add(weft_store_server_t *s, int fd)
{
    if (s->nconns == s->conns_cap) {
        size_t cap = s->conns_cap ? s->conns_cap * 2 : 16;
        conn_t **conns = realloc(s->conns, cap * sizeof *conns);
        if (conns == NULL)
            goto err_no_memory;
        s->conns = conns;
        s->conns_cap = cap;
    }
    conn_t *c = calloc(1, sizeof *c);
    if (c == NULL)
        goto err_no_memory;
    c->fd = fd;
    c->rank = -1;
    c->accepted_ns = weft_now_ns();
    s->conns[s->nconns++] = c;
    return 0;

err_no_memory:
    weft_error(WEFT_ERR_NO_MEMORY, "weft-store: new connection (%zu open)", s->nconns);
    return -1;
}

/* Connections alive and still without an accepted HELLO. */
static size_t count_pending(const weft_store_server_t *s)
{
    size_t n = 0;
    for (size_t i = 0; i < s->nconns; i++)
        n += s->conns[i]->rank < 0 && !s->conns[i]->dead;
    return n;
}

/* Whether c, alive and without a HELLO, still has none after reading what it may have sent since
 * the last poll. */
static int still_silent(weft_store_server_t *s, conn_t *c)
{
    conn_read(s, c);
    return c->rank < 0 && !c->dead;
}

/* Mark for closing (reap_dead) the oldest connection without a HELLO that was accepted
 * STORE_EVICT_AGE_NS ago or more, after reading what it may have sent since the last poll.
 * Connections are kept in the order they were accepted. Returns 1, or 0 when there is none; then
 * *ripe_ns (may be NULL) gets when the oldest one without a HELLO will be old enough (0 if there
 * is none). */
static int evict_oldest_pending(weft_store_server_t *s, const char *why, uint64_t *ripe_ns)
{
    uint64_t now = weft_now_ns();
    if (ripe_ns)
        *ripe_ns = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c->rank >= 0 || c->dead)
            continue;
        if (now - c->accepted_ns < STORE_EVICT_AGE_NS) {
            if (ripe_ns)
                *ripe_ns = c->accepted_ns + STORE_EVICT_AGE_NS;
            return 0; /* the oldest is too young to be judged, and so are the rest */
        }
        if (!still_silent(s, c))
            continue;
        WEFT_LOG_DEBUG("weft-store: closing a connection that sent no handshake: %s", why);
        c->dead = 1;
        return 1;
    }
    return 0;
}

/* Errors of accept that concern one connection only (Linux passes pending network errors of the
 * new connection through accept, and a firewall may refuse it): take the next one. */
static int accept_error_passes(int err)
{
    switch (err) {
    case EINTR:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENETUNREACH:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENONET:
    case EOPNOTSUPP:
        return 1;
    default:
        return 0;
    }
}

static void accept_all(weft_store_server_t *s)
{
    size_t pending = count_pending(s);
    for (;;) {
        if (pending >= (size_t)STORE_PENDING_MAX(s->nranks)) {
            /* The rest wait in the listen backlog. Room is made one connection per round, from
             * the oldest idle one that has been silent long enough, so that a burst of idle
             * connections cannot push out a rank's that came among them before it spoke; while
             * none is, the listener rests until the oldest is (no busy poll on it meanwhile). */
            uint64_t ripe_ns;
            if (!evict_oldest_pending(s, "too many connections without one", &ripe_ns) &&
                ripe_ns != 0)
                s->accept_resume_ns = ripe_ns;
            return;
        }
        int fd = weft_forksafe_accept(s->listen_fd, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (accept_error_passes(err))
                continue;
            if (err == EAGAIN || err == EWOULDBLOCK)
                return;
            /* Out of descriptors: free one (reap_dead closes it before the next poll, which
             * finds the listener ready again). */
            if ((err == EMFILE || err == ENFILE) &&
                evict_oldest_pending(s, "out of descriptors to accept another", NULL))
                return;
            /* Nothing to free, or out of memory: rest the listener rather than spin on it, then
             * try again; the connections wait in the listen backlog. Recorded once per cause. */
            if (err != s->accept_errno)
                weft_error_errno(WEFT_ERR_SYSTEM, err,
                                 "weft-store: accept (retried every %llu ms while it fails)",
                                 (unsigned long long)(STORE_ACCEPT_PAUSE_NS / 1000000));
            s->accept_errno = err;
            s->accept_resume_ns = weft_now_ns() + STORE_ACCEPT_PAUSE_NS;
            return;
        }
        s->accept_errno = 0;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (conn_add(s, fd) != 0)
            weft_forksafe_close(fd); /* the client sees the close and retries */
        else
            pending++;
    }
}

/* Close the connections whose HELLO is overdue at now. Returns the earliest HELLO deadline of
 * those left, or UINT64_MAX if none waits for its HELLO. */
static uint64_t expire_pending(weft_store_server_t *s, uint64_t now)
{
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (c->rank >= 0 || c->dead)
            continue;
        uint64_t due = c->accepted_ns + STORE_HELLO_WINDOW_NS;
        if (now < due) {
            next = due < next ? due : next;
        } else if (still_silent(s, c)) {
            WEFT_LOG_DEBUG("weft-store: closing a connection that sent no handshake within %llu ms",
                           (unsigned long long)(STORE_HELLO_WINDOW_NS / 1000000));
            c->dead = 1;
        }
    }
    return next;
}

/* A rank's connection was lost without a goodbye: its process died (or its connection broke),
 * so no rank's rendezvous can complete. Close every rank's connection (a rank waiting on
 * something else than the store watches it: weft_store_fd), and every later one at its first
 * request (handle_message). */
static void break_rendezvous(weft_store_server_t *s, int rank)
{
    if (!s->broken)
        WEFT_LOG_DEBUG("weft-store: rank %d's connection was lost without a goodbye: closing "
                       "every rank's",
                       rank);
    s->broken = 1;
    if (s->failed_rank < 0)
        s->failed_rank = rank;
    close_ranked(s);
}

/* Free dead connections and the GETs they left pending. */
static void reap_dead(weft_store_server_t *s)
{
    for (size_t i = 0; i < s->nconns && !s->broken; i++) {
        const conn_t *c = s->conns[i];
        if (c->dead && c->gone && c->rank >= 0 && !c->bye)
            break_rendezvous(s, c->rank);
    }
    pending_get_t **pp = &s->pending;
    while (*pp != NULL) {
        pending_get_t *p = *pp;
        if (p->conn->dead) {
            *pp = p->next;
            free(p);
        } else {
            pp = &p->next;
        }
    }
    size_t kept = 0;
    for (size_t i = 0; i < s->nconns; i++) {
        conn_t *c = s->conns[i];
        if (!c->dead) {
            s->conns[kept++] = c;
            continue;
        }
        if (c->rank >= 0)
            s->nlive--;
        conn_free(c);
    }
    s->nconns = kept;
}

static int server_done(const weft_store_server_t *s)
{
    if (s->closing == WEFT_STORE_STOP_NOW)
        return 1;
    if (s->closing == 0)
        return 0;
    return (s->nseen == s->nranks && s->nlive == 0) || weft_now_ns() >= s->deadline_ns;
}

/* The poll timeout of a round: until the first of the drain deadline (when closing), the next
 * HELLO deadline and the end of the listener's rest; -1 (none) if there is none. */
static int round_timeout_ms(const weft_store_server_t *s, uint64_t next_hello_ns)
{
    uint64_t wake = next_hello_ns;
    if (s->closing != 0 && s->deadline_ns < wake)
        wake = s->deadline_ns;
    if (s->accept_resume_ns != 0 && s->accept_resume_ns < wake)
        wake = s->accept_resume_ns;
    if (s->fail_close_ns != 0 && s->fail_close_ns < wake)
        wake = s->fail_close_ns;
    return wake == UINT64_MAX ? -1 : weft_store_proto_ms_left(wake);
}

static void *server_main(void *arg)
{
    weft_store_server_t *s = arg;
    pthread_setname_np(pthread_self(), "weft-store");
    while (!server_done(s)) {
        uint64_t now = weft_now_ns();
        uint64_t next_hello_ns = expire_pending(s, now);
        close_after_fail(s, now);
        reap_dead(s);
        if (s->accept_resume_ns != 0 && now >= s->accept_resume_ns)
            s->accept_resume_ns = 0;
        size_t need = 2 + s->nconns;
        if (need > s->pfds_cap) {
            struct pollfd *p = realloc(s->pfds, need * sizeof *p);
            if (p == NULL) {
                weft_error(WEFT_ERR_NO_MEMORY, "weft-store: poll set of %zu", need);
                break;
            }
            s->pfds = p;
            s->pfds_cap = need;
        }
        s->pfds[0] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
        s->pfds[1] =
            (struct pollfd){.fd = s->accept_resume_ns != 0 ? -1 : s->listen_fd, .events = POLLIN};
        size_t npoll = s->nconns;
        for (size_t i = 0; i < npoll; i++) {
            conn_t *c = s->conns[i];
            s->pfds[2 + i] = (struct pollfd){
                .fd = c->fd, .events = (short)(POLLIN | (c->out_head != NULL ? POLLOUT : 0))};
        }
        int n = poll(s->pfds, 2 + npoll, round_timeout_ms(s, next_hello_ns));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft-store: poll");
            break;
        }
        if (s->pfds[0].revents & POLLIN) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof v) == (ssize_t)sizeof v)
                s->closing = v == WEFT_STORE_STOP_FAIL  ? WEFT_STORE_STOP_FAIL
                             : v >= WEFT_STORE_STOP_NOW ? WEFT_STORE_STOP_NOW
                                                        : WEFT_STORE_STOP_DRAIN;
            if (s->closing == WEFT_STORE_STOP_FAIL)
                fail_pending(s, 0);
        }
        for (size_t i = 0; i < npoll; i++) {
            conn_t *c = s->conns[i];
            short re = s->pfds[2 + i].revents;
            if (re & (POLLIN | POLLHUP | POLLERR))
                conn_read(s, c);
            if ((re & (POLLOUT | POLLHUP | POLLERR)) || c->out_head != NULL)
                conn_flush(c);
        }
        if (s->pfds[1].revents & POLLIN)
            accept_all(s);
        reap_dead(s);
    }
    /* Whoever is still connected sees the connection close and fails with PEER_LOST. */
    for (size_t i = 0; i < s->nconns; i++)
        s->conns[i]->dead = 1;
    reap_dead(s);
    return NULL;
}

static void server_free(weft_store_server_t *s)
{
    kv_entry_t *e = s->kv;
    while (e != NULL) {
        kv_entry_t *next = e->next;
        free(e->body);
        free(e);
        e = next;
    }
    free(s->conns);
    free(s->pfds);
    free(s->seen);
    free(s);
}

/* Bind and listen on the first address of the list that accepts the bind. EADDRINUSE (another
 * store still holds the port) is retried until the deadline. */
static weft_status_t server_listen(const struct addrinfo *list, const char *addr, int port,
                                   int nranks, uint64_t deadline_ns, int *fd_out)
{
    uint64_t backoff_ns = STORE_BACKOFF_MIN_NS;
    for (;;) {
        int last_err = 0;
        int in_use = 0;
        for (const struct addrinfo *ai = list; ai != NULL; ai = ai->ai_next) {
            int fd = weft_forksafe_socket(
                ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                last_err = errno;
                continue;
            }
            int one = 1;
            int backlog = nranks > SOMAXCONN - 16 ? SOMAXCONN : nranks + 16;
            if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
                bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
                *fd_out = fd;
                return WEFT_SUCCESS;
            }
            last_err = errno;
            in_use |= errno == EADDRINUSE;
            weft_forksafe_close(fd);
        }
        if (!in_use || weft_now_ns() >= deadline_ns)
            return weft_error_errno(WEFT_ERR_SYSTEM, last_err,
                                    "weft_store_open: cannot listen on %s port %d", addr, port);
        weft_store_proto_backoff(&backoff_ns, deadline_ns);
    }
}

weft_status_t weft_store_server_start(const struct addrinfo *list, const char *addr, int port,
                                      int nranks, uint32_t generation, uint64_t deadline_ns,
                                      weft_store_server_t **server_out)
{
    weft_status_t status;
    weft_store_server_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_store_open: server state");
    s->nranks = nranks;
    s->failed_rank = -1;
    s->generation = generation;
    s->deadline_ns = deadline_ns;
    s->seen = calloc((size_t)nranks, 1);
    if (s->seen == NULL) {
        status = weft_error(WEFT_ERR_NO_MEMORY, "weft_store_open: nranks %d", nranks);
        goto err_free_server;
    }
    status = server_listen(list, addr, port, nranks, deadline_ns, &s->listen_fd);
    if (status != WEFT_SUCCESS)
        goto err_free_server;
    s->wake_fd = weft_forksafe_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd < 0) {
        status = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_store_open: eventfd");
        goto err_close_listen;
    }
    /* The server thread takes no signals: they belong to the application's threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        status = weft_error_errno(WEFT_ERR_SYSTEM, rc, "weft_store_open: pthread_create");
        goto err_close_wake;
    }
    *server_out = s;
    return WEFT_SUCCESS;

err_close_wake:
    weft_forksafe_close(s->wake_fd);
err_close_listen:
    weft_forksafe_close(s->listen_fd);
err_free_server:
    server_free(s);
    return status;
}

void weft_store_server_stop(weft_store_server_t *s, weft_store_stop_t how)
{
    uint64_t v = (uint64_t)how; /* the eventfd's counter: the server reads it as the request */
    while (write(s->wake_fd, &v, sizeof v) < 0 && errno == EINTR)
        continue;
    pthread_join(s->thread, NULL);
    weft_forksafe_close(s->wake_fd);
    weft_forksafe_close(s->listen_fd);
    server_free(s);
}
