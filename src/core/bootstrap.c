/*
 * bootstrap.c - the rendezvous store: rank 0 hosts a key-value server over TCP, every rank
 * (rank 0 too) is a client of it on one connection.
 *
 * Wire format. Every message is a 4-byte little-endian body length followed by the body; the
 * body starts with a one-byte type:
 *   HELLO   client -> server  magic u32, version u32, rank u32, nranks u32, generation u32
 *   WELCOME server -> client  magic u32 (the handshake was accepted)
 *   SET     client -> server  key length u16, key, value (the rest of the body)
 *   GET     client -> server  key length u16, key
 *   VALUE   server -> client  value (the rest of the body); the answer to the oldest GET
 * A client sends one GET at a time and waits for its VALUE, so answers need no tag. SET has no
 * answer: the connection is ordered, so a GET sent after a SET sees it.
 *
 * Server design. One thread ("weft-store") owns every server structure and blocks in poll() on
 * an eventfd (the stop request), the listening socket and all client sockets, which are
 * non-blocking. Input is assembled per client into a body buffer; a SET's body becomes the
 * stored entry without a copy. A GET for a key that does not exist yet is parked on a list of
 * pending GETs and answered by the SET that creates the key. Output is queued per client and
 * written when the socket is writable, so a slow reader never blocks the server. A connection
 * whose first message is not a valid HELLO (magic, version, nranks, generation, rank not already
 * connected) is closed; the client sees the close before a WELCOME and retries. On stop the
 * server keeps serving until every rank has connected and disconnected, or the deadline passes.
 *
 * Client design. The client socket is non-blocking; every send, receive and connect waits in
 * poll() for at most the time left before the store's absolute deadline. Joining retries
 * (connection refused or reset, handshake rejected) with a backoff from 1 ms to 100 ms until the
 * deadline: this also covers a server that is not listening yet and a previous store's server
 * that still holds the port. A transport error, timeout or protocol error leaves the byte stream
 * in an unknown state, so it is sticky: every later call on the handle fails with that status.
 *
 * Thread safety: one thread uses a store handle at a time. The server thread shares nothing with
 * the handle's thread but the eventfd it is woken through; its structures are created before it
 * starts and freed after it is joined.
 */
#include "core/bootstrap.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"

#define STORE_MAGIC 0x77656674u /* "weft" */
#define STORE_VERSION 1u
#define STORE_KEY_MAX 255u
#define STORE_VALUE_MAX (16u << 20)
#define STORE_HDR_BYTES 4u
#define STORE_HELLO_BYTES 21u /* type + five u32 */
#define STORE_WELCOME_BYTES 5u
#define STORE_BODY_MAX (1u + 2u + STORE_KEY_MAX + STORE_VALUE_MAX)
#define STORE_BACKOFF_MIN_NS 1000000ull
#define STORE_BACKOFF_MAX_NS 100000000ull
#define STORE_TAG_MAX (STORE_KEY_MAX - 12u) /* room for "/<rank>" */

enum { MSG_HELLO = 1, MSG_WELCOME, MSG_SET, MSG_GET, MSG_VALUE };

/* Stop requests, written to the server's eventfd: STOP_DRAIN serves until every rank has come
 * and gone (or the deadline); STOP_NOW stops at once (rank 0 failed to open its own store). */
enum { STOP_DRAIN = 1, STOP_NOW = 2 };

/* ---------------------------------------------------------------------------------------------
 * Server structures (owned by the server thread while it runs)
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

typedef struct store_server {
    int listen_fd;
    int wake_fd; /* eventfd: written once by weft_store_close to request the stop */
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
    int closing; /* 0, STOP_DRAIN or STOP_NOW */
    int accept_failed;
} store_server_t;

struct weft_store {
    int fd;
    int rank;
    int nranks;
    uint64_t deadline_ns;
    weft_status_t failed;   /* sticky status after a transport, timeout or protocol error */
    store_server_t *server; /* rank 0 only */
};

/* ---------------------------------------------------------------------------------------------
 * Encoding and time helpers
 * ------------------------------------------------------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Milliseconds left before deadline_ns, rounded up, clamped to [0, INT_MAX]. */
static int ms_left(uint64_t deadline_ns)
{
    uint64_t now = weft_now_ns();
    if (now >= deadline_ns)
        return 0;
    uint64_t ms = (deadline_ns - now + 999999u) / 1000000u;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Sleep for ns, or until deadline_ns if that comes first. */
static void sleep_until_min(uint64_t ns, uint64_t deadline_ns)
{
    uint64_t now = weft_now_ns();
    if (now >= deadline_ns)
        return;
    if (deadline_ns - now < ns)
        ns = deadline_ns - now;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000u),
                          .tv_nsec = (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

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
        sleep_until_min(backoff_ns, deadline_ns);
        backoff_ns = backoff_ns * 2 > STORE_BACKOFF_MAX_NS ? STORE_BACKOFF_MAX_NS : backoff_ns * 2;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Server
 * ------------------------------------------------------------------------------------------- */

static void conn_free(conn_t *c)
{
    out_buf_t *o = c->out_head;
    while (o != NULL) {
        out_buf_t *next = o->next;
        free(o);
        o = next;
    }
    free(c->body);
    close(c->fd);
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
    put_u32(o->data, (uint32_t)body);
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
                c->dead = 1;
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

static kv_entry_t *kv_find(store_server_t *s, const uint8_t *key, size_t key_len)
{
    for (kv_entry_t *e = s->kv; e != NULL; e = e->next)
        if (e->key_len == key_len && memcmp(e->key, key, key_len) == 0)
            return e;
    return NULL;
}

static void handle_hello(store_server_t *s, conn_t *c, const uint8_t *body, uint32_t len)
{
    if (len != STORE_HELLO_BYTES || body[0] != MSG_HELLO) {
        WEFT_LOG_DEBUG("weft-store: rejecting a connection: not a handshake");
        c->dead = 1;
        return;
    }
    uint32_t magic = get_u32(body + 1), version = get_u32(body + 5);
    uint32_t rank = get_u32(body + 9), nranks = get_u32(body + 13), gen = get_u32(body + 17);
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
    put_u32(magic_le, STORE_MAGIC);
    conn_queue(c, MSG_WELCOME, magic_le, sizeof magic_le, NULL, 0);
}

/* Store a SET (taking ownership of its body) and answer the GETs that waited for its key. */
static void handle_set(store_server_t *s, conn_t *c, uint8_t *body, uint32_t len)
{
    size_t key_len = get_u16(body + 1);
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
                conn_queue(p->conn, MSG_VALUE, e->value, e->value_len, NULL, 0);
                conn_flush(p->conn);
            }
            free(p);
        } else {
            pp = &p->next;
        }
    }
}

static void handle_get(store_server_t *s, conn_t *c, const uint8_t *body, uint32_t len)
{
    size_t key_len = len >= 3 ? get_u16(body + 1) : 0;
    if (key_len == 0 || key_len > STORE_KEY_MAX || 3 + key_len != len) {
        weft_error(WEFT_ERR_INTERNAL, "weft-store: malformed GET from rank %d", c->rank);
        c->dead = 1;
        return;
    }
    kv_entry_t *e = kv_find(s, body + 3, key_len);
    if (e != NULL) {
        conn_queue(c, MSG_VALUE, e->value, e->value_len, NULL, 0);
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

/* Act on one complete message; takes ownership of body. */
static void handle_message(store_server_t *s, conn_t *c, uint8_t *body, uint32_t len)
{
    if (c->rank < 0) {
        handle_hello(s, c, body, len);
        free(body);
        return;
    }
    switch (body[0]) {
    case MSG_SET:
        if (len >= 3) {
            handle_set(s, c, body, len);
            return;
        }
        break;
    case MSG_GET:
        handle_get(s, c, body, len);
        free(body);
        return;
    default:
        break;
    }
    weft_error(WEFT_ERR_INTERNAL, "weft-store: unexpected message type %u from rank %d", body[0],
               c->rank);
    c->dead = 1;
    free(body);
}

/* Read everything the socket has, handling each complete message. */
static void conn_read(store_server_t *s, conn_t *c)
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
                c->dead = 1;
            }
            return;
        }
        if (n == 0) {
            c->dead = 1; /* orderly close: the client is done or gone */
            return;
        }
        if (c->hdr_got < STORE_HDR_BYTES) {
            c->hdr_got += (size_t)n;
            if (c->hdr_got < STORE_HDR_BYTES)
                continue;
            c->body_len = get_u32(c->hdr);
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
static int conn_add(store_server_t *s, int fd)
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
    s->conns[s->nconns++] = c;
    return 0;

err_no_memory:
    weft_error(WEFT_ERR_NO_MEMORY, "weft-store: new connection (%zu open)", s->nconns);
    return -1;
}

static void accept_all(store_server_t *s)
{
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            /* Out of descriptors or memory: stop accepting rather than spin on the listener;
             * ranks that have not joined time out. */
            weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft-store: accept");
            s->accept_failed = 1;
            return;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (conn_add(s, fd) != 0)
            close(fd); /* the client sees the close and retries */
    }
}

/* Free dead connections and the GETs they left pending. */
static void reap_dead(store_server_t *s)
{
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

static int server_done(const store_server_t *s)
{
    if (s->closing == STOP_NOW)
        return 1;
    if (s->closing != STOP_DRAIN)
        return 0;
    return (s->nseen == s->nranks && s->nlive == 0) || weft_now_ns() >= s->deadline_ns;
}

static void *server_main(void *arg)
{
    store_server_t *s = arg;
    pthread_setname_np(pthread_self(), "weft-store");
    while (!server_done(s)) {
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
        s->pfds[1] = (struct pollfd){.fd = s->accept_failed ? -1 : s->listen_fd, .events = POLLIN};
        size_t npoll = s->nconns;
        for (size_t i = 0; i < npoll; i++) {
            conn_t *c = s->conns[i];
            s->pfds[2 + i] = (struct pollfd){
                .fd = c->fd, .events = (short)(POLLIN | (c->out_head != NULL ? POLLOUT : 0))};
        }
        int timeout_ms = s->closing == STOP_DRAIN ? ms_left(s->deadline_ns) : -1;
        int n = poll(s->pfds, 2 + npoll, timeout_ms);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft-store: poll");
            break;
        }
        if (s->pfds[0].revents & POLLIN) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof v) == (ssize_t)sizeof v)
                s->closing = v >= STOP_NOW ? STOP_NOW : STOP_DRAIN;
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

static void server_free(store_server_t *s)
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
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                            ai->ai_protocol);
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
            close(fd);
        }
        if (!in_use || weft_now_ns() >= deadline_ns)
            return weft_error_errno(WEFT_ERR_SYSTEM, last_err,
                                    "weft_store_open: cannot listen on %s port %d", addr, port);
        sleep_until_min(backoff_ns, deadline_ns);
        backoff_ns = backoff_ns * 2 > STORE_BACKOFF_MAX_NS ? STORE_BACKOFF_MAX_NS : backoff_ns * 2;
    }
}

static weft_status_t server_start(const struct addrinfo *list, const char *addr, int port,
                                  int nranks, uint32_t generation, uint64_t deadline_ns,
                                  store_server_t **server_out)
{
    weft_status_t status;
    store_server_t *s = calloc(1, sizeof *s);
    if (s == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_store_open: server state");
    s->nranks = nranks;
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
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
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
    close(s->wake_fd);
err_close_listen:
    close(s->listen_fd);
err_free_server:
    server_free(s);
    return status;
}

/* Ask the server to stop (STOP_DRAIN or STOP_NOW), wait for it (it stops by its deadline at the
 * latest) and free it. */
static void server_stop(store_server_t *s, uint64_t how)
{
    while (write(s->wake_fd, &how, sizeof how) < 0 && errno == EINTR)
        continue;
    pthread_join(s->thread, NULL);
    close(s->wake_fd);
    close(s->listen_fd);
    server_free(s);
}

/* ---------------------------------------------------------------------------------------------
 * Client
 * ------------------------------------------------------------------------------------------- */

/* The client I/O helpers below do not record errors: they return WEFT_SUCCESS,
 * WEFT_ERR_TIMEOUT (the deadline passed), WEFT_ERR_PEER_LOST (the connection closed or failed;
 * *err gets errno, 0 for an orderly close) or WEFT_ERR_SYSTEM (poll failed; *err gets errno), and
 * the caller records the error once, with what it was doing. */

/* Wait for events on fd until the deadline. */
static weft_status_t wait_fd(int fd, short events, uint64_t deadline_ns, int *err)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int timeout_ms = ms_left(deadline_ns);
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

/* Send the whole iovec array (modified in place) before the deadline. */
static weft_status_t send_iov(int fd, struct iovec *iov, int iovcnt, uint64_t deadline_ns, int *err)
{
    while (iovcnt > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                weft_status_t status = wait_fd(fd, POLLOUT, deadline_ns, err);
                if (status != WEFT_SUCCESS)
                    return status;
                continue;
            }
            *err = errno;
            return WEFT_ERR_PEER_LOST;
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
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                weft_status_t status = wait_fd(fd, POLLIN, deadline_ns, err);
                if (status != WEFT_SUCCESS)
                    return status;
                continue;
            }
            *err = errno;
            return WEFT_ERR_PEER_LOST;
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
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            *err = errno;
            close(fd);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        while ((n = poll(&p, 1, ms_left(deadline_ns))) < 0 && errno == EINTR)
            continue;
        int so_err = 0;
        socklen_t so_len = sizeof so_err;
        if (n <= 0)
            so_err = n == 0 ? ETIMEDOUT : errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_err, &so_len) != 0)
            so_err = errno;
        if (so_err != 0) {
            *err = so_err;
            close(fd);
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
    put_u32(msg, STORE_HELLO_BYTES);
    msg[4] = MSG_HELLO;
    put_u32(msg + 5, STORE_MAGIC);
    put_u32(msg + 9, STORE_VERSION);
    put_u32(msg + 13, (uint32_t)st->rank);
    put_u32(msg + 17, (uint32_t)st->nranks);
    put_u32(msg + 21, generation);
    struct iovec iov = {.iov_base = msg, .iov_len = sizeof msg};
    weft_status_t status = send_iov(st->fd, &iov, 1, st->deadline_ns, err);
    if (status != WEFT_SUCCESS)
        return status;
    uint8_t reply[STORE_HDR_BYTES + STORE_WELCOME_BYTES];
    status = recv_exact(st->fd, reply, sizeof reply, st->deadline_ns, err);
    if (status != WEFT_SUCCESS)
        return status;
    if (get_u32(reply) != STORE_WELCOME_BYTES || reply[4] != MSG_WELCOME ||
        get_u32(reply + 5) != STORE_MAGIC) {
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
            close(st->fd);
            st->fd = -1;
            if (status == WEFT_ERR_SYSTEM)
                return weft_error_errno(status, err, "weft_store_open: poll");
            if (status == WEFT_ERR_PEER_LOST)
                rejected = 1;
        }
        if (weft_now_ns() >= st->deadline_ns)
            break;
        sleep_until_min(backoff_ns, st->deadline_ns);
        backoff_ns = backoff_ns * 2 > STORE_BACKOFF_MAX_NS ? STORE_BACKOFF_MAX_NS : backoff_ns * 2;
    }
    if (rejected)
        return weft_error(WEFT_ERR_TIMEOUT,
                          "weft_store_open: rank %d of %d could not join the store at %s port "
                          "%d within %.3g s: the server refused the handshake (another job, "
                          "nranks or generation %u mismatched, or rank already connected)",
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
        status = server_start(list, addr, port, nranks, generation, st->deadline_ns, &st->server);
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
        server_stop(st->server, STOP_NOW);
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
        weft_error(status, "%s: key \"%s\": the store closed the connection", what, key);
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
    put_u32(hdr, (uint32_t)(3 + key_len + len));
    hdr[4] = MSG_SET;
    put_u16(hdr + 5, (uint16_t)key_len);
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
    put_u32(hdr, (uint32_t)(3 + key_len));
    hdr[4] = MSG_GET;
    put_u16(hdr + 5, (uint16_t)key_len);
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
    uint32_t body_len = get_u32(reply);
    if (body_len == 0 || body_len - 1 > STORE_VALUE_MAX || reply[4] != MSG_VALUE) {
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

void weft_store_close(weft_store_t *store)
{
    if (store == NULL)
        return;
    if (store->fd >= 0)
        close(store->fd);
    if (store->server != NULL)
        server_stop(store->server, STOP_DRAIN);
    free(store);
}
