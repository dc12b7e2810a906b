/*
 * store_proto.h - the wire protocol of the rendezvous store (bootstrap.h), shared by its server
 * thread (store_server.c) and its client (bootstrap.c). Internal to core.
 *
 * Wire format. Every message is a 4-byte little-endian body length followed by the body; the
 * body starts with a one-byte type:
 *   HELLO   client -> server  magic u32, version u32, rank u32, nranks u32, generation u32
 *   WELCOME server -> client  magic u32 (the handshake was accepted)
 *   SET     client -> server  key length u16, key, value (the rest of the body)
 *   GET     client -> server  key length u16, key
 *   VALUE   server -> client  value (the rest of the body); the answer to the oldest GET
 *   FAIL    client -> server  (nothing more) the client failed what the store serves and leaves:
 *                             a GET of a key that does not exist, waiting or later, closes its
 *                             connection instead of waiting for a key that may never come; the
 *                             GETs of keys that exist are still answered (peers read a verdict
 *                             every rank reaches) for STORE_FAIL_LINGER_NS, after which every
 *                             connection then open is closed (a rank waiting on something else,
 *                             watching the store's connection, learns of the failure)
 *   LEAVE   client -> server  (nothing more) the client is done and closes its connection
 * A client's connection that ends without LEAVE or FAIL after its HELLO was accepted (its process
 * died, or the connection broke) ends the rendezvous: the server closes every client's
 * connection at once and closes each later one at its first request after the WELCOME, so every
 * rank fails with WEFT_ERR_PEER_LOST instead of waiting for its deadline (a rank that died
 * publishes nothing more, and ranks waiting on anything but the store watch its connection too).
 * A client sends one GET at a time and waits for its VALUE, so answers need no tag (the server
 * drops a client that sends a SET or GET before it has its VALUE). SET has no answer: the
 * connection is ordered, so a GET sent after a SET sees it. Integers are little-endian.
 *
 * Both sides retry what may succeed later (resolving, binding a port still held, joining) with a
 * backoff from STORE_BACKOFF_MIN_NS to STORE_BACKOFF_MAX_NS, bounded by the store's absolute
 * deadline (CLOCK_MONOTONIC nanoseconds, util/clock.h).
 *
 * Thread safety: everything here is a pure function of its arguments (and the clock).
 */
#ifndef WEFT_CORE_STORE_PROTO_H
#define WEFT_CORE_STORE_PROTO_H

#include <stdint.h>

#define STORE_MAGIC 0x77656674u /* "weft" */
#define STORE_VERSION 3u        /* 2: FAIL; 3: LEAVE, and a connection lost without it */
#define STORE_KEY_MAX 255u
#define STORE_VALUE_MAX (16u << 20)
#define STORE_HDR_BYTES 4u
#define STORE_HELLO_BYTES 21u /* type + five u32 */
#define STORE_WELCOME_BYTES 5u
#define STORE_BODY_MAX (1u + 2u + STORE_KEY_MAX + STORE_VALUE_MAX)
#define STORE_BACKOFF_MIN_NS 1000000ull
#define STORE_BACKOFF_MAX_NS 100000000ull
/* A client sends its HELLO as soon as it is connected. The server closes a connection that has
 * not completed its HELLO within STORE_HELLO_WINDOW_NS of being accepted, and keeps at most
 * STORE_PENDING_MAX(nranks) such connections: past that, each one it accepts costs the oldest
 * its connection, provided that one was accepted STORE_EVICT_AGE_NS ago or more (a client sends
 * its HELLO right after connecting: one that has been silent that long is not a rank; younger
 * ones wait for their turn in the listen backlog). A client closed that way
 * sees the close before a WELCOME and retries, so neither bound can fail a real rank; they keep
 * connections that never speak (port scanners, stray clients) from holding the server's
 * descriptors and memory, and from keeping ranks out. */
#define STORE_HELLO_WINDOW_NS 2000000000ull
#define STORE_PENDING_MAX(nranks) (4 * (nranks) + 8)
#define STORE_EVICT_AGE_NS 100000000ull
/* After a FAIL: how long the connections then open may still read the keys that exist. */
#define STORE_FAIL_LINGER_NS 1000000000ull

/* Message types: the first byte of a body. */
enum {
    STORE_MSG_HELLO = 1,
    STORE_MSG_WELCOME,
    STORE_MSG_SET,
    STORE_MSG_GET,
    STORE_MSG_VALUE,
    STORE_MSG_FAIL,
    STORE_MSG_LEAVE
};

static inline void store_put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t store_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void store_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline uint16_t store_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Milliseconds left before deadline_ns, rounded up, clamped to [0, INT_MAX]: a poll() timeout
 * that never ends a wait before the deadline. Does not block. */
int weft_store_proto_ms_left(uint64_t deadline_ns);

/* One step of a retry loop: sleep for *backoff_ns, or until deadline_ns if that comes first
 * (returns at once if it has passed), then double *backoff_ns up to STORE_BACKOFF_MAX_NS.
 * Start a loop with *backoff_ns = STORE_BACKOFF_MIN_NS. */
void weft_store_proto_backoff(uint64_t *backoff_ns, uint64_t deadline_ns);

#endif /* WEFT_CORE_STORE_PROTO_H */
