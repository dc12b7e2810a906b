/*
 * registry.h - registration-on-allocation: the table of this rank's allocations inside its
 * window slice, the address allocator of the slice, and the registrar thread that makes every
 * allocation mapped at the same address on every peer.
 *
 * Tickets: every registration and every unregistration of this rank gets the next ticket
 * (1, 2, ...; 64 bits, in messages too, so they never wrap). Each peer maps and unmaps in
 * ticket order and acknowledges each ticket, so "peer p acknowledged t" means every job up to t
 * is done on p. An allocation is ready when the minimum acknowledged ticket over all peers
 * reached its own.
 *
 * The registrar thread ("weft-registrar") blocks in poll() on an eventfd (new jobs, stop) and
 * every control socket; it exports and sends this rank's jobs, maps/unmaps peers' segments and
 * answers them, and turns a socket that closes without a BYE into WEFT_ERR_PEER_LOST on the
 * communicator. It never spins.
 *
 * Descriptor shortages: a registration whose export finds no descriptor left (the provider's
 * WEFT_ERR_NO_MEMORY, mem.h; host: EMFILE, ENFILE, e.g. from the process's other files) stays at
 * the head of the queue, with its segment, the jobs after it waiting behind it, and is retried
 * every WEFT_CTRL_RETRY_NS (as a send that meets a transient shortage is); only when the shortage
 * has lasted the communicator's timeout does it fail the communicator (WEFT_ERR_TIMEOUT, naming the
 * export's error; the peers see the loss). A waiter for that registration (acquire) keeps its own
 * deadline meanwhile. The receiving side cannot retry: a descriptor the kernel could not install is
 * lost, so a peer's registration that meets a shortage here fails the communicator at once
 * (WEFT_ERR_SYSTEM).
 *
 * Lock order: registry mutex only. It is never held while blocking on a peer (an allocation that
 * waits for the peers' acknowledgements drops it), across the provider's export or import (the
 * registrar's), nor across its create and map of a new chunk (weft_registry_alloc drops it around
 * them: milliseconds on the GPU). It is held across the release of a chunk left empty (by
 * weft_registry_free, or by weft_registry_alloc, which may give back several spare chunks in one
 * call): the provider's unmap, its discard of the chunk's range of the memfd (host: a punch-hole of
 * up to 1 GiB, the largest chunk) and its destroy; and across the unmap and destroy of a new chunk
 * that could not be entered in the tables, and the destroy of a new chunk's segment that is never
 * registered (staged) or has no peer to be registered with (one rank). The registrar takes it only
 * to move the queued jobs over, so it waits for it at most as long as one free or allocation takes
 * to release its empty chunks; it neither sends nor acknowledges meanwhile.
 */
#ifndef WEFT_CORE_REGISTRY_H
#define WEFT_CORE_REGISTRY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/window.h"
#include "mem/mem.h"
#include "util/wait.h"
#include "weft.h"

typedef struct weft_registry weft_registry_t;
struct weft_comm;

/* Counters (read with atomic loads; weft_get_stats copies them). */
typedef struct weft_registry_stats {
    _Atomic uint64_t registrations_started;
    _Atomic uint64_t registrations_completed;
    _Atomic uint64_t bytes_registered;
    _Atomic uint64_t peer_mappings;
} weft_registry_stats_t;

/* Create the registry for this rank's slice and start the registrar thread over the control
 * sockets ctrl_fds (nranks entries, -1 at rank, from weft_ctrl_connect; ownership passes to the
 * registry on success and stays with the caller on failure). Its eventfd and the sockets are
 * entered in util/forksafe.h's table, so a forked child does not keep them. comm (kept, never
 * NULL) takes the registrar's errors, and its timeout_s, wait_policy, async_error and aborted
 * bound weft_registry_alloc's wait for peers (weft_comm_check). With a sparse
 * provider (mem.h: host) one memfd backs every allocation, at offsets never reused.
 * chunk_min_bytes: 0 gives every allocation a segment of its own; otherwise physical memory is
 * made, mapped and registered in chunks of at least that size, growing geometrically, and
 * allocations are carved out of them (heap.h): one export per chunk, not per allocation.
 * backlog (WEFT_REGISTRATION_BACKLOG; 0 counts as 1): how many registrations the registrar
 * sends before every peer acknowledged them; later jobs wait in its queue, in ticket order.
 * Each holds an exported descriptor here until sent, and one in flight to each peer until
 * received, so this bounds the descriptors a burst of allocations costs (not under a file size
 * limit, where the host provider gives each segment a memfd of its own: registry.c); allocations
 * never wait for it. */
weft_status_t weft_registry_create(struct weft_comm *comm, const weft_window_t *win, int rank,
                                   int nranks, weft_registration_t mode, size_t chunk_min_bytes,
                                   unsigned backlog, int *ctrl_fds, weft_registry_t **reg_out);

/* Stop the registrar, join it, unmap every peer segment and every own allocation, close the
 * sockets, free. orderly (every rank destroys in step, after the closing handshake): first send
 * what is queued and a BYE to every peer, and wait for theirs until deadline_ns, so that each
 * side reads the other's close as orderly. Otherwise (an error, an abort, a failed init): send
 * nothing, shut the sockets down at once, so that peers fail with WEFT_ERR_PEER_LOST at once
 * instead of at their timeout; deadline_ns is unused. Never waits past deadline_ns (orderly)
 * or at all (otherwise). NULL is a no-op. */
void weft_registry_destroy(weft_registry_t *reg, int orderly, uint64_t deadline_ns);

/* Close every control socket at once (abort): never blocks; peers see the loss. */
void weft_registry_shutdown_sockets(weft_registry_t *reg);

/* Allocate bytes in this rank's slice, mapped locally at once. internal != 0 (staging scratch,
 * control blocks): always registered at once, whatever the mode. Otherwise the mode decides:
 * roa registers now (in the background), jit at first use, staged never. Returns at once,
 * waiting for neither the registrar nor a peer, except near out of memory: when no new chunk can
 * be made until released memory (freed earlier, or spare chunks it released for room) is
 * unmapped by every peer (address ranges, and a GPU chunk's memory, come back only then), it
 * waits for the peers' acknowledgements, without the registry's mutex, bounded by comm's
 * timeout and health: WEFT_ERR_TIMEOUT, WEFT_ERR_PEER_LOST (or the communicator's stored error)
 * or WEFT_ERR_ABORTED when the wait fails, which fails the communicator. Otherwise:
 *   WEFT_ERR_NO_MEMORY: bytes exceed the slice, or the slice has no room left; a sparse
 *     provider's memfd has no unused offsets left (registry.c); the provider is out of memory
 *     (host: mmap of the memfd, a memfd above the file size limit or one ftruncate cannot grow;
 *     cuda: CUDA_ERROR_OUT_OF_MEMORY from cuMemCreate, cuMemMap or cuMemSetAccess); or a table
 *     of the registry cannot grow.
 *   WEFT_ERR_SYSTEM: the host provider cannot make a memfd for other reasons, e.g.
 *     memfd_create failing with EMFILE under a file size limit (ulimit -f), where every chunk is
 *     a memfd of its own.
 *   WEFT_ERR_CUDA: cuMemCreate, cuMemMap or cuMemSetAccess fails otherwise.
 *   WEFT_ERR_INVALID_ARGUMENT: 0 bytes (weft_malloc answers those itself).
 * None of these fails the communicator. The messages of this function and of weft_registry_free
 * say what failed, not for which call: the caller prefixes its own name (weft_error_prefix). */
weft_status_t weft_registry_alloc(weft_registry_t *reg, size_t bytes, int internal, void **ptr_out);

/* Free an allocation made by weft_registry_alloc (ptr must be its start). Returns at once. A
 * chunk left empty is unmapped and unregistered (one empty chunk per class is kept as a spare);
 * its address range is reused once every peer acknowledged the unmap. WEFT_ERR_INVALID_ARGUMENT if
 * ptr is not the start of a live allocation; WEFT_ERR_NO_MEMORY when the heap cannot record its
 * range as free (ptr stays allocated; freeing it again may succeed). A chunk whose unmap fails
 * (logged where it fails) is no failure of the call: its range is never reused. */
weft_status_t weft_registry_free(weft_registry_t *reg, void *ptr);

/* Result of weft_registry_acquire. */
typedef enum {
    WEFT_BUF_STAGED = 0, /* not remotely accessible: take the staged path */
    WEFT_BUF_READY = 1   /* [ptr, ptr + bytes) is mapped at the same address on every peer */
} weft_buf_state_t;

/* Look up [ptr, ptr + bytes) (interior pointers included). If it lies inside one chunk that may
 * be registered, make sure it is (jit registers it now) and wait until every peer
 * acknowledged it; *waited_ns_out gets the time spent waiting (0 when it was ready; a jit first
 * use counts from the moment it queued the registration, however fast that was). Returns the
 * state in *state_out. The wait checks check(arg) between sleeps (deadline, peer loss). */
weft_status_t weft_registry_acquire(weft_registry_t *reg, const void *ptr, size_t bytes,
                                    const weft_wait_policy_t *policy, weft_wait_check_fn check,
                                    void *arg, weft_buf_state_t *state_out,
                                    uint64_t *waited_ns_out);

/* Memory-model edges between the registrar's mappings and the threads that use them. The
 * protocol already orders them across processes (a peer posts a buffer only after we
 * acknowledged its mapping; it frees one only after we signalled that we stopped reading), but
 * those edges pass through another process, invisible to the C memory model and to
 * ThreadSanitizer. So: the registrar release-increments an epoch after every map and acquires
 * the readers' epoch before every unmap; an operation acquires the mapping epoch before its
 * first remote read (weft_registry_observe_mappings) and releases the readers' epoch after its
 * last one (weft_registry_reads_done). Each is one atomic access. */
void weft_registry_observe_mappings(weft_registry_t *reg);
void weft_registry_reads_done(weft_registry_t *reg);

/* Counters of this registry. */
const weft_registry_stats_t *weft_registry_stats(const weft_registry_t *reg);

#endif /* WEFT_CORE_REGISTRY_H */
