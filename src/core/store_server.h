/*
 * store_server.h - the rendezvous store's server thread ("weft-store", store_server.c), which
 * rank 0's weft_store_open starts and weft_store_close stops. Internal to the store: only
 * bootstrap.c calls these.
 *
 * The listener, the connections and the eventfd are opened through util/forksafe.h (closed with
 * weft_forksafe_close): a forked child keeps neither the port nor the ranks' connections open.
 *
 * Thread safety: start and stop are called by the thread that owns the rank-0 store handle; the
 * server thread shares nothing with it but the eventfd that stop writes.
 */
#ifndef WEFT_CORE_STORE_SERVER_H
#define WEFT_CORE_STORE_SERVER_H

#include <stdint.h>

#include "weft.h"

struct addrinfo;

typedef struct weft_store_server weft_store_server_t;

/* How the server stops. DRAIN: serve until every rank has connected and disconnected, or the
 * deadline passes. NOW: stop at once (rank 0 failed to open its own store). FAIL: as DRAIN, but
 * a GET of a key that does not exist, pending or later, closes its connection (rank 0 failed what
 * the store serves, so that key may never come; keys that exist are still served). */
typedef enum {
    WEFT_STORE_STOP_DRAIN = 1,
    WEFT_STORE_STOP_NOW = 2,
    WEFT_STORE_STOP_FAIL = 3
} weft_store_stop_t;

/* Listen on the first address of list that accepts the bind (SO_REUSEADDR; EADDRINUSE, a previous
 * store still holding the port, is retried until deadline_ns) and start the server thread for
 * nranks ranks of the given generation; it serves until weft_store_server_stop and deadline_ns
 * (CLOCK_MONOTONIC) bounds its drain. addr and port only name the address in errors. Blocks at
 * most until deadline_ns. On success *server_out is set. Statuses (recorded): WEFT_ERR_SYSTEM
 * (bind/listen, eventfd or thread creation failed), WEFT_ERR_NO_MEMORY. */
weft_status_t weft_store_server_start(const struct addrinfo *list, const char *addr, int port,
                                      int nranks, uint32_t generation, uint64_t deadline_ns,
                                      weft_store_server_t **server_out);

/* Ask the server to stop as how says, wait for its thread (it stops by its deadline at the
 * latest, so this never blocks past it) and free it. Connections still open are closed: their
 * clients fail with WEFT_ERR_PEER_LOST. */
void weft_store_server_stop(weft_store_server_t *server, weft_store_stop_t how);

#endif /* WEFT_CORE_STORE_SERVER_H */
