/*
 * bootstrap.h - the rendezvous store: a small key-value store hosted by rank 0 over TCP, used
 * only while a communicator is created (exchange of control-socket names, window agreement)
 * and then closed.
 *
 * Protocol: every rank (rank 0 too) is a client on one TCP connection to the server thread that
 * rank 0 runs. The first message of a connection carries a magic, the protocol version, the
 * client's rank, nranks and a generation number (how many weft_comm_init calls this process made
 * before: ranks that make the same calls agree on it); the server rejects connections whose
 * nranks or generation differ, and the client then retries until its deadline. Requests: SET
 * key value, GET key (the server answers when the key exists: a GET blocks server-side, not by
 * polling), and the client-side helpers below. Keys and values are byte strings (keys up to 255
 * bytes, values up to 16 MiB).
 *
 * Every call takes the store's deadline (given at open); a server or client that loses its
 * connection fails the pending call with WEFT_ERR_PEER_LOST. A rank whose connection is lost
 * without a goodbye (its process died) fails every rank's rendezvous at once: the server closes
 * every connection (store_proto.h).
 *
 * Every socket of the store (the client's, and on rank 0 the server's listener and connections)
 * is opened through util/forksafe.h: a child forked while a communicator is being created does
 * not keep them (nor the port) open.
 *
 * Thread safety: one thread uses a store handle at a time. The server thread is internal.
 */
#ifndef WEFT_CORE_BOOTSTRAP_H
#define WEFT_CORE_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

typedef struct weft_store weft_store_t;

/* Connect to the store at addr:port (rank 0 first starts the server there, binding with
 * SO_REUSEADDR). Blocks until connected or until timeout_s has passed (connection refused is
 * retried with backoff). On success *store_out is set. Statuses: WEFT_ERR_INVALID_ARGUMENT (bad
 * address, rank out of range), WEFT_ERR_SYSTEM (bind/listen failed), WEFT_ERR_TIMEOUT. */
weft_status_t weft_store_open(const char *addr, int port, int rank, int nranks, uint32_t generation,
                              double timeout_s, weft_store_t **store_out);

/* Set key to value (overwrites). */
weft_status_t weft_store_set(weft_store_t *store, const char *key, const void *value, size_t len);

/* Wait until key exists, then copy its value into buf (cap bytes); *len_out gets the value's
 * full length. WEFT_ERR_INVALID_ARGUMENT if the value is longer than cap. */
weft_status_t weft_store_get(weft_store_t *store, const char *key, void *buf, size_t cap,
                             size_t *len_out);

/* All ranks contribute len bytes under tag; all_out (nranks * len bytes) receives every rank's
 * contribution in rank order. Every rank must call it with the same tag and len. */
weft_status_t weft_store_allgather(weft_store_t *store, const char *tag, const void *mine,
                                   size_t len, void *all_out);

/* Returns when every rank has called it with the same tag. */
weft_status_t weft_store_barrier(weft_store_t *store, const char *tag);

/* The descriptor of the connection to the store, for a wait on something else to poll for
 * POLLIN beside it: between calls the server sends nothing, so the connection turns readable
 * only when the server closed it (a rank was lost, or failed a moment ago: store_proto.h). The
 * caller neither reads nor closes it. */
int weft_store_fd(const weft_store_t *store);

/* Close the connection (telling the store this rank is done). On rank 0 this also stops the server
 * thread once every client has disconnected or the store's deadline has passed (never blocks past
 * it). NULL is a no-op. */
void weft_store_close(weft_store_t *store);

/* Like weft_store_close, after this rank failed the collective work the store serves: it tells
 * the store (FAIL, store_proto.h), which then still answers GETs of keys that exist (so peers can
 * read a verdict every rank reaches), but closes the connection of a client waiting for a key
 * that does not exist, now or later: it fails with WEFT_ERR_PEER_LOST at once rather than at its
 * deadline (and rank 0 need not wait for it); a second later it closes every connection then
 * open. NULL is a no-op. */
void weft_store_close_failed(weft_store_t *store);

#endif /* WEFT_CORE_BOOTSTRAP_H */
