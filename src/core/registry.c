/*
 * registry.c - allocation table, slice allocator and registrar thread (see registry.h).
 *
 * DESIGN
 *   The caller's path (alloc, free, acquire) only touches the table under the mutex, maps or
 *   unmaps locally, and queues jobs; it never waits for the registrar or a peer, except where it
 *   needs their answer: acquire for a registration, and an allocation near out of memory for
 *   the unmapping of the spare chunks it released for room (new_chunk). The registrar
 *   thread does everything that involves peers. Physical memory comes in chunks (heap.h: one
 *   per allocation on the host, large ones carved into allocations on the GPU); registration is
 *   per chunk.
 *
 *   Segments hold no descriptor until the registrar exports them: a sparse provider's (host) are
 *   ranges of one huge memfd (`file`, made at creation), a VMM handle's (cuda) descriptor is made
 *   by the export. So a burst of allocations holds no descriptors; the registrar holds one per
 *   registration being sent, and sends at most `backlog` registrations that not every peer
 *   acknowledged yet (later jobs wait in its `queue`, in ticket order). The exception: under a
 *   file size limit (ulimit -f) the host provider is not sparse and every segment is a memfd of
 *   its own, which a queued job (or a jit chunk not yet used) keeps open until it is sent: a burst
 *   of allocations then holds a descriptor each, and one past RLIMIT_NOFILE fails (memfd_create:
 *   WEFT_ERR_SYSTEM); allocations never wait for the registrar, so nothing else can bound it. An
 *   export that finds no descriptor left keeps its job (and segment) at the queue's head and is
 *   retried until the communicator's timeout (export_shortage, registry.h).
 *
 *   Ranges of `file` are handed out at offsets that only grow (`file_next`) and are never
 *   reused, though addresses are: a process that still maps a freed chunk (a forked child, or
 *   a peer's) then reads zeros (the chunk's memory was discarded) or what another such process
 *   wrote there, never a later allocation, and its writes reach no live allocation. 2^62 bytes
 *   of offsets last centuries of allocations; past them weft_malloc fails with
 *   WEFT_ERR_NO_MEMORY.
 *
 *   new chunk (roa, or internal): create segment (or take a range of `file`) -> map in own
 *                  slice -> job REG (the job owns the segment; the registrar exports it once,
 *                  destroys the segment - the mappings, or `file`, keep the memory - and
 *                  attaches that one descriptor to the REG of every peer, with the range's
 *                  offset, closing it after the last was sent).
 *   new chunk (jit): as roa, but the segment stays with the chunk until the first acquire.
 *   new chunk (staged, user): the segment is destroyed at once; never registered.
 *   free         : the allocation's range goes back to its chunk; a chunk left empty (beyond
 *                  one spare) is unmapped locally (and its memory discarded from `file`) -> job
 *                  UNREG -> its address range waits in `pending` until every peer acknowledged
 *                  the UNREG ticket, then is reusable.
 *   peer REG     : check the range lies in the sender's slice -> import the descriptor's
 *                  [offset, offset + bytes) -> map -> ack.
 *   peer UNREG   : unmap -> ack.
 *
 * THREADS AND LOCKS
 *   `mu` protects the heap, pending ranges, `jobs`, next_ticket and file_next; it is never held
 *   across a provider's create or map of a new chunk (milliseconds on the GPU), but it is held
 *   across the release of an empty chunk (release_chunk: unmap, discard, destroy; registry.h says
 *   how long the registrar, which takes it in drain_jobs, may wait). The registrar owns the
 *   sockets, outboxes, `queue`, `inflight`, peer mappings and acked[] without a lock; it publishes
 *   progress through `acked_all` (the minimum of acked[]) and atomic counters, and rings the futex
 *   word `acked_moved` after every change of `acked_all`, so that waiters can sleep.
 *
 * TICKETS
 *   64 bits, from 1, on the wire too: they never wrap, so "ready" is a plain comparison with
 *   `acked_all`, however long ago a chunk was registered. A peer's acknowledgement must be
 *   above its previous one and at most the last ticket sent; anything else is malformed.
 *
 * ONE FILE
 *   The caller's path and the registrar share the private weft_registry_t, its lock discipline
 *   and the job queue between them (push_job on one side, drain_jobs on the other); the
 *   bookkeeping that needs neither lives in heap.c and ctrl.c already. Splitting the rest in two
 *   would publish that struct and its invariants to a second file (and to test_registry, which
 *   includes this one to reach them), so it stays one unit of about 1200 lines.
 */
#include "core/registry.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/comm.h"
#include "core/ctrl.h"
#include "core/heap.h"
#include "util/array.h"
#include "util/clock.h"
#include "util/forksafe.h"
#include "util/log.h"

typedef struct pending {
    uintptr_t addr;
    size_t bytes;
    uint64_t ticket; /* the UNREG ticket every peer must acknowledge first */
} pending_t;

typedef struct job {
    uint32_t type; /* WEFT_CTRL_REG, WEFT_CTRL_UNREG, WEFT_CTRL_BYE */
    uint64_t ticket;
    uintptr_t addr;
    size_t bytes;
    weft_mem_seg_t seg; /* REG: owned by the job */
} job_t;

/* A registration's exported descriptor, shared by its REG message to every peer (sendmsg gives
 * each receiver a copy of its own) and closed after the last of them was sent or dropped: a
 * registration holds one descriptor here whatever the number of peers. */
typedef struct shared_fd {
    int fd;
    int refs;
} shared_fd_t;

typedef struct outmsg {
    weft_ctrl_msg_t msg;
    shared_fd_t *sfd; /* REG: a reference to the descriptor to attach; NULL for other messages */
} outmsg_t;

typedef struct outbox {
    outmsg_t *msgs;
    size_t head, n, cap;
} outbox_t;

typedef struct peer_map {
    uintptr_t addr;
    size_t bytes;
} peer_map_t;

typedef struct inflight {
    uint64_t ticket;
    size_t bytes;
} inflight_t;

/* A growable array of T: data, n, cap. */
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *data;                                                                                   \
        size_t n, cap;                                                                             \
    }

#define VEC_RESERVE(v, need) weft_array_grow((void **)&(v).data, &(v).cap, (need), sizeof *(v).data)

#define CHUNK_MAX_BYTES (1ull << 30) /* chunks grow geometrically up to this size */

struct weft_registry {
    struct weft_comm *comm;
    weft_window_t win;
    const weft_mem_ops_t *mem;
    int rank, nranks;
    weft_registration_t mode;
    size_t gran;
    uint64_t backlog;    /* REGs sent and not acknowledged by all, at most (>= 1) */
    weft_mem_seg_t file; /* sparse providers: the memfd behind every chunk; else fd -1 */
    size_t file_next;    /* the lowest offset of `file` never handed out (under mu) */

    pthread_mutex_t mu;
    weft_heap_t heap;       /* chunks and allocations of this rank's slice */
    VEC(pending_t) pending; /* released chunks waiting for UNREG acks */
    VEC(job_t) jobs;        /* FIFO, moved whole into `queue` by the registrar */
    uint64_t next_ticket;   /* last ticket issued */

    /* registrar-owned */
    int *socks;
    int *bye; /* peer said BYE */
    int *closed;
    outbox_t *out;
    uint64_t *retry_ns; /* when to retry a peer's outbox after a transient send failure; 0: none */
    uint64_t *acked;    /* the last ticket each peer acknowledged */
    uint64_t sent_ticket; /* the last ticket queued to the peers */
    VEC(job_t) queue;     /* jobs taken from `jobs`, not yet run: the head waits for the backlog */
    size_t queue_head;
    /* The head's export met a descriptor shortage (export_shortage): when to retry it, and when
     * to give up; 0: none. */
    uint64_t export_retry_ns, export_deadline_ns;
    VEC(peer_map_t) maps;
    VEC(inflight_t) inflight; /* REG tickets not yet acknowledged by all */
    int efd;
    pthread_t thread;
    int thread_started;
    _Atomic int stopping; /* STOP_* */
    uint64_t stop_deadline_ns;

    /* Every ticket up to acked_all is acknowledged by every peer (min over acked[]). Written by
     * one thread: the registrar, or without peers the allocating thread under mu. */
    _Atomic uint64_t acked_all;
    weft_flag_t acked_moved;      /* bumped after every store to acked_all: waiters sleep on it */
    _Atomic uint64_t map_epoch;   /* registrar: bumped (release) after every peer map */
    _Atomic uint64_t reads_epoch; /* operations: bumped (release) after their remote reads */
    weft_registry_stats_t stats;
};

/* Values of `stopping`. */
enum {
    STOP_NOT = 0,
    STOP_ORDERLY, /* send what is queued, the BYE last, and wait for the peers' BYEs */
    STOP_NOW      /* leave at once: the sockets are shut down, nothing more is sent */
};

/* ---- acknowledgements ------------------------------------------------------------------------ */

/* Publish that every peer acknowledged every ticket up to acked, and wake the waiters. */
static void publish_acked(weft_registry_t *reg, uint64_t acked)
{
    atomic_store_explicit(&reg->acked_all, acked, memory_order_release);
    uint64_t moved = atomic_load_explicit(&reg->acked_moved.value, memory_order_relaxed);
    weft_flag_set(&reg->acked_moved, moved + 1);
}

/* Wait until every peer acknowledged ticket. The 32-bit futex word only says that acked_all
 * moved; the comparison is on the 64-bit ticket. check(arg) bounds the wait. */
static weft_status_t wait_acked(weft_registry_t *reg, uint64_t ticket,
                                const weft_wait_policy_t *policy, weft_wait_check_fn check,
                                void *arg)
{
    for (;;) {
        uint64_t moved = atomic_load_explicit(&reg->acked_moved.value, memory_order_acquire);
        if (atomic_load_explicit(&reg->acked_all, memory_order_acquire) >= ticket)
            return WEFT_SUCCESS;
        weft_status_t st = weft_flag_wait(&reg->acked_moved, moved + 1, policy, check, arg);
        if (st != WEFT_SUCCESS)
            return st;
    }
}

/* ---- slice bookkeeping (under mu) ---------------------------------------------------------- */

/* Give ranges of released chunks whose UNREG every peer acknowledged back to the slice. */
static void reclaim_pending(weft_registry_t *reg)
{
    uint64_t acked = atomic_load_explicit(&reg->acked_all, memory_order_acquire);
    size_t keep = 0;
    for (size_t i = 0; i < reg->pending.n; i++) {
        pending_t r = reg->pending.data[i];
        if (acked >= r.ticket && weft_heap_give_range(&reg->heap, r.addr, r.bytes) == 0)
            continue;
        reg->pending.data[keep++] = r;
    }
    reg->pending.n = keep;
}

/* ---- jobs (under mu) ------------------------------------------------------------------------- */

static void wake_registrar(weft_registry_t *reg)
{
    uint64_t one = 1;
    ssize_t n = write(reg->efd, &one, sizeof one);
    (void)n; /* a full eventfd counter already means "wake up" */
}

/* Queue a job with the next ticket; returns the ticket, or 0 if the queue cannot grow. */
static uint64_t push_job(weft_registry_t *reg, uint32_t type, uintptr_t addr, size_t bytes,
                         weft_mem_seg_t seg)
{
    if (VEC_RESERVE(reg->jobs, reg->jobs.n + 1) != 0)
        return 0;
    uint64_t ticket = ++reg->next_ticket;
    if (type == WEFT_CTRL_REG)
        atomic_fetch_add(&reg->stats.registrations_started, 1);
    if (reg->nranks == 1) {         /* no peer: nothing to send, nothing to wait for, done now */
        publish_acked(reg, ticket); /* before the counters (handle_ack) */
        if (type == WEFT_CTRL_REG) {
            reg->mem->destroy(&seg); /* the local mapping keeps the memory */
            atomic_fetch_add(&reg->stats.registrations_completed, 1);
            atomic_fetch_add(&reg->stats.bytes_registered, bytes);
        }
        return ticket;
    }
    reg->jobs.data[reg->jobs.n++] =
        (job_t){.type = type, .ticket = ticket, .addr = addr, .bytes = bytes, .seg = seg};
    wake_registrar(reg);
    return ticket;
}

/* ---- registrar thread ------------------------------------------------------------------------ */

/* Drop one reference to sfd (NULL: nothing); the last one closes the descriptor. */
static void shared_fd_drop(shared_fd_t *sfd)
{
    if (sfd && --sfd->refs == 0) {
        close(sfd->fd);
        free(sfd);
    }
}

/* weft_comm_fail for the registrar, on its own sockets (it may run before comm->registry is
 * set). The communicator fails with status (or keeps the error recorded before) and every
 * connection is shut down: the peers see the loss at once instead of waiting out their timeouts,
 * and no later UNREG reaches them (a peer still copying from this rank's buffers in the failed
 * operation keeps its mappings until teardown). */
static void fail_comm(weft_registry_t *reg, weft_status_t status)
{
    weft_comm_set_async_error(reg->comm, status);
    weft_registry_shutdown_sockets(reg);
}

/* Queue msg for peer, with a new reference to sfd (may be NULL).
 *
 * The messages before `head` were sent (flush_outbox drops their references as it sends them).
 * A peer whose socket stays full keeps the outbox from ever emptying, so their room is taken
 * back here: when the array is full and at least half of it was sent, the waiting messages move
 * to the front (references move with them); otherwise it doubles. So the array has room for at
 * most four times the most messages ever waiting (at least 16), and a move never takes more
 * messages than were sent since the last one (amortised constant time per message). */
static void outbox_push(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg,
                        shared_fd_t *sfd)
{
    outbox_t *ob = &reg->out[peer];
    if (ob->head > 0 && ob->n == ob->cap && ob->head >= ob->n - ob->head) {
        ob->n -= ob->head;
        memmove(ob->msgs, ob->msgs + ob->head, ob->n * sizeof *ob->msgs);
        ob->head = 0;
    }
    if (weft_array_grow((void **)&ob->msgs, &ob->cap, ob->n + 1, sizeof *ob->msgs) != 0) {
        fail_comm(reg, weft_error(WEFT_ERR_NO_MEMORY, "registrar: outbox to rank %d", peer));
        return;
    }
    if (sfd)
        sfd->refs++;
    ob->msgs[ob->n++] = (outmsg_t){*msg, sfd};
}

/* Stop talking to peer: drop what is queued for it, and shut the socket down so that the peer
 * sees the loss too (it then fails with WEFT_ERR_PEER_LOST instead of waiting for
 * acknowledgements that will not come). Unless it said BYE, the communicator fails with
 * status, or keeps the error recorded before. */
static void peer_drop(weft_registry_t *reg, int peer, weft_status_t status, const char *why)
{
    if (reg->closed[peer])
        return;
    reg->closed[peer] = 1;
    /* Recorded before the shutdown, which the peer (or a test playing it) may act on at once. */
    if (!reg->bye[peer] && atomic_load(&reg->stopping) == STOP_NOT)
        fail_comm(reg, weft_error(status, "rank %d %s: %s", peer,
                                  status == WEFT_ERR_PEER_LOST ? "lost" : "dropped", why));
    shutdown(reg->socks[peer], SHUT_RDWR);
    outbox_t *ob = &reg->out[peer];
    for (size_t i = ob->head; i < ob->n; i++)
        shared_fd_drop(ob->msgs[i].sfd);
    ob->head = ob->n = 0;
}

/* The peer is gone, or broke the protocol: peer_drop with WEFT_ERR_PEER_LOST. */
static void peer_lost(weft_registry_t *reg, int peer, const char *why)
{
    peer_drop(reg, peer, WEFT_ERR_PEER_LOST, why);
}

static void receive_from(weft_registry_t *reg, int peer);

/* A retry parked until *at_ns (0: none): whether it may run now (then *at_ns is cleared). */
static int retry_due(uint64_t *at_ns)
{
    if (*at_ns != 0) {
        if (weft_now_ns() < *at_ns)
            return 0; /* poll's timeout will bring us back (wake_at) */
        *at_ns = 0;
    }
    return 1;
}

/* timeout_ms (-1: none) lowered to wake the registrar by at_ns (0: nothing parked). */
static int wake_at(int timeout_ms, uint64_t at_ns, uint64_t now)
{
    if (at_ns == 0)
        return timeout_ms;
    int ms = at_ns > now ? (int)((at_ns - now) / 1000000 + 1) : 0;
    return timeout_ms < 0 || ms < timeout_ms ? ms : timeout_ms;
}

/* Send what is queued for peer, as far as its socket takes it. A transient failure (the kernel
 * short of buffers or of room for descriptors in flight) leaves the message queued and parks the
 * outbox until retry_ns[peer]; the waits for its acknowledgement keep their own deadlines. */
static void flush_outbox(weft_registry_t *reg, int peer)
{
    outbox_t *ob = &reg->out[peer];
    if (!retry_due(&reg->retry_ns[peer]))
        return;
    while (ob->head < ob->n && !reg->closed[peer]) {
        outmsg_t *m = &ob->msgs[ob->head];
        weft_status_t st = weft_ctrl_send(reg->socks[peer], &m->msg, m->sfd ? m->sfd->fd : -1);
        if (st == WEFT_ERR_TIMEOUT)
            return; /* socket full: POLLOUT will bring us back */
        if (st == WEFT_ERR_NO_MEMORY) {
            reg->retry_ns[peer] = weft_now_ns() + WEFT_CTRL_RETRY_NS; /* poll's timeout */
            return;
        }
        if (st != WEFT_SUCCESS) {
            /* Read what the peer sent before it closed: a BYE makes the close orderly. */
            receive_from(reg, peer);
            peer_lost(reg, peer, "control socket send failed");
            return;
        }
        shared_fd_drop(m->sfd);
        ob->head++;
    }
}

/* Export a REG job's segment into *sfd_out (one reference, the caller's) and destroy the
 * segment: the mappings keep the memory. On failure the job keeps its segment, so that the
 * export can be retried: WEFT_ERR_NO_MEMORY is a shortage that may pass (no descriptor left,
 * mem.h), logged at DEBUG only (the caller reports it). */
static weft_status_t export_job(weft_registry_t *reg, job_t *job, shared_fd_t **sfd_out)
{
    int fd;
    weft_error_quiet_begin(WEFT_ERR_NO_MEMORY);
    weft_status_t st = reg->mem->export_fd(&job->seg, &fd);
    shared_fd_t *sfd = NULL;
    if (st == WEFT_SUCCESS && !(sfd = malloc(sizeof *sfd))) {
        close(fd);
        st = weft_error(WEFT_ERR_NO_MEMORY, "registrar: shared descriptor record");
    }
    weft_error_quiet_end(WEFT_ERR_NO_MEMORY);
    if (st != WEFT_SUCCESS)
        return st;
    reg->mem->destroy(&job->seg);
    *sfd = (shared_fd_t){.fd = fd, .refs = 1};
    *sfd_out = sfd;
    return WEFT_SUCCESS;
}

/* The export of the REG job at the queue's head found no descriptor (or memory) left: a
 * shortage that may pass (other threads' files close, descriptors in flight are received).
 * Returns 1 to keep the job at the head, with its segment, and retry it after
 * WEFT_CTRL_RETRY_NS (export_retry_ns); 0 once the shortage has lasted the communicator's
 * timeout, with the failure recorded (WEFT_ERR_TIMEOUT, naming the export's error). The first
 * shortage is logged once, as a warning. */
static int export_shortage(weft_registry_t *reg, const job_t *job)
{
    uint64_t now = weft_now_ns();
    if (reg->export_deadline_ns == 0) {
        reg->export_deadline_ns = weft_deadline_after_s(reg->comm->timeout_s);
        WEFT_LOG_WARN("registrar: cannot export the registration of ticket %llu (%zu bytes at "
                      "%p) yet: %s; retrying for up to %g s",
                      (unsigned long long)job->ticket, job->bytes, (void *)job->addr,
                      weft_last_error(), reg->comm->timeout_s);
    }
    if (now < reg->export_deadline_ns) {
        reg->export_retry_ns = now + WEFT_CTRL_RETRY_NS;
        return 1;
    }
    char why[256];
    snprintf(why, sizeof why, "%s", weft_last_error());
    reg->export_deadline_ns = 0;
    (void)weft_error(WEFT_ERR_TIMEOUT,
                     "registrar: the registration of ticket %llu (%zu bytes at %p) could not be "
                     "exported within the communicator's timeout of %g s: %s",
                     (unsigned long long)job->ticket, job->bytes, (void *)job->addr,
                     reg->comm->timeout_s, why);
    return 0;
}

/* Run the job at the queue's head. Returns 1 when it ran (or failed, failing the communicator),
 * 0 when it must stay at the head: its export met a shortage (export_shortage). */
static int run_job(weft_registry_t *reg, job_t *job)
{
    weft_ctrl_msg_t msg = {.type = job->type,
                           .ticket = job->ticket,
                           .addr = job->addr,
                           .bytes = job->bytes,
                           .offset = job->seg.offset};
    shared_fd_t *sfd = NULL;
    int connected = 0;
    for (int p = 0; p < reg->nranks; p++)
        connected += p != reg->rank && !reg->closed[p];
    if (job->type == WEFT_CTRL_REG && connected == 0) {
        reg->mem->destroy(&job->seg); /* no peer left to send it to (the communicator failed) */
        return 1;
    }
    if (job->type == WEFT_CTRL_REG) {
        /* Room to track it first: a REG sent untracked would escape the backlog and the
         * counters (handle_ack completes only what `inflight` holds). */
        weft_status_t st;
        if (VEC_RESERVE(reg->inflight, reg->inflight.n + 1) != 0) {
            st = weft_error(WEFT_ERR_NO_MEMORY, "registrar: table of registrations in flight");
        } else {
            st = export_job(reg, job, &sfd);
            if (st == WEFT_ERR_NO_MEMORY) {
                if (export_shortage(reg, job))
                    return 0;
                st = WEFT_ERR_TIMEOUT;
            }
        }
        reg->export_deadline_ns = 0;
        if (st != WEFT_SUCCESS) {
            /* No peer maps this ticket: none may acknowledge a later one either, since
             * acknowledgements are cumulative and would make the chunk look registered. */
            reg->mem->destroy(&job->seg);
            fail_comm(reg, st);
            for (int p = 0; p < reg->nranks; p++) {
                if (p != reg->rank)
                    peer_lost(reg, p, "a registration could not be sent");
            }
            return 1;
        }
        reg->inflight.data[reg->inflight.n++] = (inflight_t){job->ticket, job->bytes};
    }
    reg->sent_ticket = job->ticket;
    for (int p = 0; p < reg->nranks; p++) {
        if (p != reg->rank && !reg->closed[p])
            outbox_push(reg, p, &msg, sfd);
    }
    shared_fd_drop(sfd);
    return 1;
}

/* Run queued jobs in ticket order while the backlog has room for the next REG, and the head's
 * export is not waiting to be retried. */
static void run_queue(weft_registry_t *reg)
{
    while (reg->queue_head < reg->queue.n) {
        job_t *job = &reg->queue.data[reg->queue_head];
        if (job->type == WEFT_CTRL_REG && reg->inflight.n >= reg->backlog)
            return; /* an acknowledgement will bring us back (handle_ack) */
        if (!retry_due(&reg->export_retry_ns))
            return;
        if (!run_job(reg, job))
            return; /* parked until export_retry_ns */
        reg->queue_head++;
    }
    reg->queue_head = reg->queue.n = 0;
}

/* Move the jobs callers queued behind the registrar's own, then run what the backlog allows. */
static void drain_jobs(weft_registry_t *reg)
{
    uint64_t count;
    ssize_t n = read(reg->efd, &count, sizeof count);
    (void)n;
    pthread_mutex_lock(&reg->mu);
    if (reg->queue_head > 0) { /* drop what ran: the queue holds only what waits */
        reg->queue.n -= reg->queue_head;
        memmove(reg->queue.data, reg->queue.data + reg->queue_head,
                reg->queue.n * sizeof *reg->queue.data);
        reg->queue_head = 0;
    }
    if (reg->queue.n == 0) { /* take the array; the caller side starts a new one */
        free(reg->queue.data);
        reg->queue.data = reg->jobs.data;
        reg->queue.n = reg->jobs.n;
        reg->queue.cap = reg->jobs.cap;
        reg->jobs.data = NULL;
        reg->jobs.n = reg->jobs.cap = 0;
    } else if (reg->jobs.n > 0 && VEC_RESERVE(reg->queue, reg->queue.n + reg->jobs.n) == 0) {
        memcpy(reg->queue.data + reg->queue.n, reg->jobs.data,
               reg->jobs.n * sizeof *reg->jobs.data);
        reg->queue.n += reg->jobs.n;
        reg->jobs.n = 0;
    } else if (reg->jobs.n > 0) {
        fail_comm(reg, weft_error(WEFT_ERR_NO_MEMORY, "registrar: job queue"));
    }
    pthread_mutex_unlock(&reg->mu);
    run_queue(reg);
}

/* A peer acknowledged ticket: check it (above its previous one, at most the last one sent),
 * then publish the new minimum and count the registrations it completes. */
static void handle_ack(weft_registry_t *reg, int peer, uint64_t ticket)
{
    if (ticket <= reg->acked[peer] || ticket > reg->sent_ticket) {
        peer_lost(reg, peer, "malformed acknowledgement");
        return;
    }
    reg->acked[peer] = ticket;
    uint64_t min = UINT64_MAX;
    for (int p = 0; p < reg->nranks; p++) {
        if (p != reg->rank && reg->acked[p] < min)
            min = reg->acked[p];
    }
    /* Published before it is counted: whoever sees a registration counted as completed
     * (weft_get_stats, seq_cst loads of the counters) finds it acknowledged, so a first use then
     * never waits (the tests poll the counters, then expect no first-use wait). */
    publish_acked(reg, min);
    size_t keep = 0;
    for (size_t i = 0; i < reg->inflight.n; i++) {
        inflight_t f = reg->inflight.data[i];
        if (f.ticket <= min) {
            atomic_fetch_add(&reg->stats.registrations_completed, 1);
            atomic_fetch_add(&reg->stats.bytes_registered, f.bytes);
        } else {
            reg->inflight.data[keep++] = f;
        }
    }
    reg->inflight.n = keep;
    run_queue(reg); /* the backlog may have room again */
}

/* A peer asks us to map its segment: check, import, map, acknowledge. */
static void handle_reg(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg, int fd)
{
    uintptr_t slice = weft_window_slice(&reg->win, peer);
    if (fd < 0 || msg->addr < slice || msg->bytes == 0 || msg->bytes > reg->win.slice_bytes ||
        msg->addr - slice > reg->win.slice_bytes - msg->bytes || msg->addr % reg->gran != 0 ||
        msg->offset % reg->gran != 0) { /* a non-zero offset: the provider's import judges it */
        if (fd >= 0)
            close(fd);
        peer_lost(reg, peer, "malformed registration");
        return;
    }
    weft_mem_seg_t seg;
    weft_status_t st = reg->mem->import_fd(fd, msg->offset, msg->bytes, &seg);
    if (st == WEFT_SUCCESS) {
        st = reg->mem->map(&seg, (void *)msg->addr);
        reg->mem->destroy(&seg);
    }
    if (st == WEFT_SUCCESS && VEC_RESERVE(reg->maps, reg->maps.n + 1) != 0) {
        reg->mem->unmap((void *)msg->addr, msg->bytes);
        st = weft_error(WEFT_ERR_NO_MEMORY, "registrar: peer mapping table");
    }
    if (st != WEFT_SUCCESS) {
        /* Never acknowledge a later ticket of this peer: that would cover this one. */
        fail_comm(reg, st);
        peer_lost(reg, peer, "its registration could not be mapped here");
        return;
    }
    reg->maps.data[reg->maps.n++] = (peer_map_t){msg->addr, msg->bytes};
    atomic_fetch_add_explicit(&reg->map_epoch, 1, memory_order_release);
    atomic_fetch_add(&reg->stats.peer_mappings, 1);
    weft_ctrl_msg_t ack = {.type = WEFT_CTRL_REG_ACK, .ticket = msg->ticket};
    outbox_push(reg, peer, &ack, NULL);
}

static void handle_unreg(weft_registry_t *reg, int peer, const weft_ctrl_msg_t *msg)
{
    for (size_t i = 0; i < reg->maps.n; i++) {
        peer_map_t *m = &reg->maps.data[i];
        if (m->addr == msg->addr && m->bytes == msg->bytes &&
            weft_window_owner(&reg->win, m->addr) == peer) {
            (void)atomic_load_explicit(&reg->reads_epoch, memory_order_acquire);
            weft_status_t st = reg->mem->unmap((void *)m->addr, m->bytes);
            if (st != WEFT_SUCCESS)
                fail_comm(reg, st);
            *m = reg->maps.data[--reg->maps.n];
            atomic_fetch_sub(&reg->stats.peer_mappings, 1);
            break;
        }
    }
    weft_ctrl_msg_t ack = {.type = WEFT_CTRL_UNREG_ACK, .ticket = msg->ticket};
    outbox_push(reg, peer, &ack, NULL);
}

static void receive_from(weft_registry_t *reg, int peer)
{
    for (;;) {
        weft_ctrl_msg_t msg;
        int fd;
        weft_status_t st = weft_ctrl_recv(reg->socks[peer], &msg, &fd);
        if (st == WEFT_ERR_TIMEOUT)
            return;
        if (st == WEFT_ERR_SYSTEM) { /* its registration cannot be mapped here, nor acknowledged */
            peer_drop(reg, peer, st,
                      "a control message's descriptor was lost: this process has no file "
                      "descriptor left (raise ulimit -n)");
            return;
        }
        if (st != WEFT_SUCCESS) {
            peer_lost(reg, peer, "control socket closed");
            return;
        }
        if (fd >= 0 && msg.type != WEFT_CTRL_REG) {
            close(fd);
            fd = -1;
        }
        switch (msg.type) {
        case WEFT_CTRL_REG:
            handle_reg(reg, peer, &msg, fd);
            break;
        case WEFT_CTRL_UNREG:
            handle_unreg(reg, peer, &msg);
            break;
        case WEFT_CTRL_REG_ACK:
        case WEFT_CTRL_UNREG_ACK:
            handle_ack(reg, peer, msg.ticket);
            break;
        case WEFT_CTRL_BYE:
            reg->bye[peer] = 1;
            break;
        default:
            peer_lost(reg, peer, "unknown control message");
            return;
        }
        if (reg->closed[peer])
            return;
    }
}

/* Ready to close: everything queued was sent, and every peer still connected said BYE (so it is
 * stopping too, and our EOF cannot look like a loss to it). */
static int ready_to_close(const weft_registry_t *reg)
{
    int connected = 0;
    for (int p = 0; p < reg->nranks; p++) {
        if (p == reg->rank || reg->closed[p])
            continue;
        if (reg->out[p].head < reg->out[p].n || !reg->bye[p])
            return 0;
        connected++;
    }
    return connected == 0 || reg->queue_head == reg->queue.n;
}

static void *registrar_main(void *arg)
{
    weft_registry_t *reg = arg;
    pthread_setname_np(pthread_self(), "weft-registrar");
    weft_status_t attached = reg->mem->attach_thread(reg->comm->device);
    if (attached != WEFT_SUCCESS) {
        fail_comm(reg, attached);
        return NULL;
    }
    struct pollfd *pfds = calloc((size_t)reg->nranks + 1, sizeof *pfds);
    int *who = calloc((size_t)reg->nranks + 1, sizeof *who);
    if (!pfds || !who) {
        fail_comm(reg, weft_error(WEFT_ERR_NO_MEMORY, "registrar: calloc"));
        free(pfds);
        free(who);
        return NULL;
    }
    for (;;) {
        int stopping = atomic_load(&reg->stopping);
        int timeout_ms = -1;
        if (stopping == STOP_NOW)
            break;
        if (stopping == STOP_ORDERLY) {
            /* Send what is queued (the BYE last of all), then leave. */
            drain_jobs(reg);
            for (int p = 0; p < reg->nranks; p++) {
                if (p != reg->rank && !reg->closed[p])
                    flush_outbox(reg, p);
            }
            if (ready_to_close(reg))
                break;
            uint64_t now = weft_now_ns();
            if (now >= reg->stop_deadline_ns)
                break;
            timeout_ms = (int)((reg->stop_deadline_ns - now) / 1000000 + 1);
        }
        int n = 0;
        pfds[n] = (struct pollfd){.fd = reg->efd, .events = POLLIN};
        who[n++] = -1;
        uint64_t now = weft_now_ns();
        timeout_ms = wake_at(timeout_ms, reg->export_retry_ns, now); /* the queue's head */
        for (int p = 0; p < reg->nranks; p++) {
            if (p == reg->rank || reg->closed[p])
                continue;
            short ev = POLLIN;
            if (reg->retry_ns[p] != 0) /* parked: wake up when it may retry */
                timeout_ms = wake_at(timeout_ms, reg->retry_ns[p], now);
            else if (reg->out[p].head < reg->out[p].n)
                ev |= POLLOUT;
            pfds[n] = (struct pollfd){.fd = reg->socks[p], .events = ev};
            who[n++] = p;
        }
        int ready = poll(pfds, (nfds_t)n, timeout_ms);
        if (ready < 0) {
            if (errno == EINTR)
                continue;
            fail_comm(reg, weft_error_errno(WEFT_ERR_SYSTEM, errno, "registrar: poll"));
            break;
        }
        for (int i = 0; i < n; i++) {
            if (pfds[i].revents == 0)
                continue;
            if (who[i] < 0) {
                drain_jobs(reg);
                continue;
            }
            int p = who[i];
            if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR))
                receive_from(reg, p);
            if (!reg->closed[p] && (pfds[i].revents & POLLOUT))
                flush_outbox(reg, p);
        }
        if (reg->export_retry_ns != 0)
            run_queue(reg); /* retries the head's export once its time has come */
        /* New jobs or acks may have filled outboxes: try to send right away. */
        for (int p = 0; p < reg->nranks; p++) {
            if (p != reg->rank && !reg->closed[p])
                flush_outbox(reg, p);
        }
    }
    free(pfds);
    free(who);
    return NULL;
}

/* ---- public functions ------------------------------------------------------------------------ */

weft_status_t weft_registry_create(struct weft_comm *comm, const weft_window_t *win, int rank,
                                   int nranks, weft_registration_t mode, size_t chunk_min_bytes,
                                   unsigned backlog, int *ctrl_fds, weft_registry_t **reg_out)
{
    weft_status_t st;
    weft_registry_t *reg = calloc(1, sizeof *reg);
    if (!reg)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry");
    reg->comm = comm;
    reg->win = *win;
    reg->mem = win->mem;
    reg->rank = rank;
    reg->nranks = nranks;
    reg->mode = mode;
    reg->gran = win->mem->granularity();
    reg->backlog = backlog > 0 ? backlog : 1;
    reg->efd = -1;
    reg->file = (weft_mem_seg_t){.fd = -1};
    pthread_mutex_init(&reg->mu, NULL);
    reg->socks = calloc((size_t)nranks, sizeof *reg->socks);
    reg->bye = calloc((size_t)nranks, sizeof *reg->bye);
    reg->closed = calloc((size_t)nranks, sizeof *reg->closed);
    reg->out = calloc((size_t)nranks, sizeof *reg->out);
    reg->retry_ns = calloc((size_t)nranks, sizeof *reg->retry_ns);
    reg->acked = calloc((size_t)nranks, sizeof *reg->acked);
    if (!reg->socks || !reg->bye || !reg->closed || !reg->out || !reg->retry_ns || !reg->acked) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry arrays");
        goto err_free;
    }
    for (int p = 0; p < nranks; p++)
        reg->socks[p] = -1;
    if (reg->gran == 0) {
        st = weft_error(WEFT_ERR_UNSUPPORTED,
                        "weft_comm_init: the memory provider reports no mapping granularity");
        goto err_free;
    }
    if (weft_heap_init(&reg->heap, weft_window_slice(win, rank), win->slice_bytes, reg->gran,
                       chunk_min_bytes, CHUNK_MAX_BYTES) != 0) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: registry free list");
        goto err_free;
    }
    size_t file_bytes = reg->mem->sparse_bytes();
    if (file_bytes > 0) { /* takes memory only where allocations touch it */
        st = reg->mem->create(file_bytes, &reg->file);
        if (st != WEFT_SUCCESS)
            goto err_free;
    }
    reg->efd = weft_forksafe_eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (reg->efd < 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, errno, "weft_comm_init: eventfd");
        goto err_free;
    }
    for (int p = 0; p < nranks; p++) {
        reg->socks[p] = ctrl_fds[p];
        ctrl_fds[p] = -1;
    }
    int err = pthread_create(&reg->thread, NULL, registrar_main, reg);
    if (err != 0) {
        st = weft_error_errno(WEFT_ERR_SYSTEM, err, "weft_comm_init: pthread_create(registrar)");
        goto err_close;
    }
    reg->thread_started = 1;
    *reg_out = reg;
    return WEFT_SUCCESS;

err_close:
    for (int p = 0; p < nranks; p++) {
        ctrl_fds[p] = reg->socks[p]; /* ownership goes back on failure */
        reg->socks[p] = -1;
    }
    weft_forksafe_close(reg->efd);
err_free:
    reg->mem->destroy(&reg->file);
    free(reg->socks);
    free(reg->bye);
    free(reg->closed);
    free(reg->out);
    free(reg->retry_ns);
    free(reg->acked);
    weft_heap_fini(&reg->heap);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
    return st;
}

void weft_registry_shutdown_sockets(weft_registry_t *reg)
{
    if (!reg)
        return;
    for (int p = 0; p < reg->nranks; p++) {
        if (reg->socks[p] >= 0)
            shutdown(reg->socks[p], SHUT_RDWR);
    }
}

void weft_registry_destroy(weft_registry_t *reg, int orderly, uint64_t deadline_ns)
{
    if (!reg)
        return;
    if (reg->thread_started) {
        if (orderly) {
            pthread_mutex_lock(&reg->mu);
            (void)push_job(reg, WEFT_CTRL_BYE, 0, 0, (weft_mem_seg_t){.fd = -1});
            pthread_mutex_unlock(&reg->mu);
            reg->stop_deadline_ns = deadline_ns;
        }
        atomic_store(&reg->stopping, orderly ? STOP_ORDERLY : STOP_NOW);
        if (!orderly) /* after `stopping`: our own hang-up is no lost peer to the registrar */
            weft_registry_shutdown_sockets(reg);
        wake_registrar(reg);
        pthread_join(reg->thread, NULL);
    }
    for (size_t i = 0; i < reg->jobs.n; i++) {
        if (reg->jobs.data[i].type == WEFT_CTRL_REG)
            reg->mem->destroy(&reg->jobs.data[i].seg);
    }
    for (size_t i = reg->queue_head; i < reg->queue.n; i++) {
        if (reg->queue.data[i].type == WEFT_CTRL_REG)
            reg->mem->destroy(&reg->queue.data[i].seg);
    }
    for (int p = 0; p < reg->nranks; p++) {
        outbox_t *ob = &reg->out[p];
        for (size_t i = ob->head; i < ob->n; i++)
            shared_fd_drop(ob->msgs[i].sfd);
        free(ob->msgs);
        weft_forksafe_close(reg->socks[p]);
    }
    for (size_t i = 0; i < reg->maps.n; i++)
        reg->mem->unmap((void *)reg->maps.data[i].addr, reg->maps.data[i].bytes);
    for (size_t i = 0; i < reg->heap.nchunks; i++) {
        weft_chunk_t *c = reg->heap.chunks[i];
        reg->mem->unmap((void *)c->addr, c->bytes);
        reg->mem->destroy(&c->seg);
    }
    reg->mem->destroy(&reg->file); /* its memory lives on while peers still map it */
    weft_forksafe_close(reg->efd);
    free(reg->jobs.data);
    free(reg->queue.data);
    free(reg->maps.data);
    free(reg->inflight.data);
    weft_heap_fini(&reg->heap);
    free(reg->pending.data);
    free(reg->socks);
    free(reg->bye);
    free(reg->closed);
    free(reg->out);
    free(reg->retry_ns);
    free(reg->acked);
    pthread_mutex_destroy(&reg->mu);
    free(reg);
}

/* Whether a new chunk is registered as soon as it is made (internal ones whatever the mode). */
static int registers_at_once(const weft_registry_t *reg, int internal)
{
    return internal || reg->mode == WEFT_REGISTRATION_ROA;
}

/* Map a new chunk of bytes in the slice and register it as the mode says. Called under mu, it
 * drops mu while the provider makes and maps the memory (cuMemCreate and cuMemMap take
 * milliseconds), so that other threads' acquires, frees and allocations from the chunks there
 * are meanwhile do not wait; the address range (and the range of `file`) is taken first, so no
 * other thread is handed it. */
static weft_status_t add_chunk(weft_registry_t *reg, size_t bytes, int internal,
                               weft_chunk_t **chunk_out)
{
    uintptr_t addr;
    if (weft_heap_take_range(&reg->heap, bytes, &addr) != 0)
        return weft_error(WEFT_ERR_NO_MEMORY, "no %zu bytes left in this rank's window slice",
                          bytes);
    weft_mem_seg_t seg = {.fd = -1};
    weft_status_t st = WEFT_SUCCESS;
    int sparse = reg->file.fd >= 0;
    if (sparse) {
        if (reg->file.bytes - reg->file_next < bytes) {
            st = weft_error(WEFT_ERR_NO_MEMORY,
                            "this rank's memfd has no unused %zu bytes left (%zu "
                            "bytes were handed out, and are never reused)",
                            bytes, reg->file_next);
            goto err_give;
        }
        seg = weft_mem_range(&reg->file, reg->file_next, bytes);
        reg->file_next += bytes; /* never handed out again, even if this fails */
    }
    pthread_mutex_unlock(&reg->mu);
    if (!sparse)
        st = reg->mem->create(bytes, &seg);
    if (st == WEFT_SUCCESS) {
        st = reg->mem->map(&seg, (void *)addr);
        if (st != WEFT_SUCCESS)
            reg->mem->destroy(&seg);
    }
    pthread_mutex_lock(&reg->mu);
    if (st != WEFT_SUCCESS)
        goto err_give;
    weft_chunk_t *c = weft_heap_add_chunk(&reg->heap, addr, bytes, seg, 0, internal);
    if (!c) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "out of memory for the chunk table");
        goto err_unmap;
    }
    c->file_offset = seg.offset;
    if (registers_at_once(reg, internal)) {
        c->ticket = push_job(reg, WEFT_CTRL_REG, addr, bytes, seg);
        if (c->ticket == 0) {
            (void)weft_heap_remove_chunk(&reg->heap, c);
            st = weft_error(WEFT_ERR_NO_MEMORY, "out of memory for the registration queue");
            goto err_unmap;
        }
        c->seg = (weft_mem_seg_t){.fd = -1}; /* the job owns the segment now */
    } else if (reg->mode == WEFT_REGISTRATION_STAGED) {
        reg->mem->destroy(&c->seg); /* never registered: the mapping keeps the memory */
    }
    *chunk_out = c;
    return WEFT_SUCCESS;

err_unmap:
    reg->mem->unmap((void *)addr, bytes);
    reg->mem->destroy(&seg);
err_give:
    (void)weft_heap_give_range(&reg->heap, addr, bytes);
    return st;
}

/* Unmap an empty chunk and unregister it; its range is reused once every peer unmapped it. */
static void release_chunk(weft_registry_t *reg, weft_chunk_t *c)
{
    uint64_t registered = c->ticket;
    weft_status_t st = reg->mem->unmap((void *)c->addr, c->bytes);
    reg->mem->destroy(&c->seg);
    if (reg->file.fd >= 0) /* any mapping left (a peer's, a forked child's) reads zeros now */
        (void)reg->mem->discard(&reg->file, c->file_offset, c->bytes);
    weft_range_t r = weft_heap_remove_chunk(&reg->heap, c);
    if (st != WEFT_SUCCESS)
        return; /* still mapped here: never reuse the range */
    if (!registered) {
        (void)weft_heap_give_range(&reg->heap, r.addr, r.bytes);
        return;
    }
    if (VEC_RESERVE(reg->pending, reg->pending.n + 1) != 0)
        return; /* no bookkeeping: the range is leaked, never reused unsafely */
    uint64_t ticket = push_job(reg, WEFT_CTRL_UNREG, r.addr, r.bytes, (weft_mem_seg_t){.fd = -1});
    if (ticket != 0)
        reg->pending.data[reg->pending.n++] = (pending_t){r.addr, r.bytes, ticket};
}

/* Release every empty chunk (the spares) under mu: their memory, and their address ranges once
 * the peers unmapped them, become free. Returns how many were released. */
static size_t release_empty_chunks(weft_registry_t *reg)
{
    size_t released = 0;
    for (weft_chunk_t *c; (c = weft_heap_empty_chunk(&reg->heap)) != NULL; released++)
        release_chunk(reg, c); /* takes c off the heap, unmapped or not */
    return released;
}

/* The highest UNREG ticket of a released chunk whose address range still waits for the peers'
 * acknowledgements (under mu); 0 when none does. */
static uint64_t pending_ticket(const weft_registry_t *reg)
{
    uint64_t acked = atomic_load_explicit(&reg->acked_all, memory_order_acquire);
    uint64_t highest = 0;
    for (size_t i = 0; i < reg->pending.n; i++) {
        uint64_t t = reg->pending.data[i].ticket;
        if (t > acked && t > highest)
            highest = t;
    }
    return highest;
}

/* A new chunk for an allocation of size bytes, under mu (dropped meanwhile: add_chunk, and the
 * wait below): of the growth's size (chunks grow to 1 GiB); short of memory or of address space
 * for that, of the allocation's own size after the spare chunks were given back, so that an
 * allocation that would fit does not fail.
 *
 * Released memory does not come back at once: a registered chunk's address range waits in
 * `pending` until every peer acknowledged its UNREG, and on the GPU its physical memory lives on
 * in the peers' mappings until they unmap it. That holds for the spares released here and for
 * chunks freed earlier alike. So when the allocation's own size fails too while released chunks
 * wait for that, wait (mu dropped) until every peer acknowledged the last of their UNREGs, then
 * reclaim their ranges and try once more. The communicator's timeout, peer loss and abort bound
 * the wait (weft_comm_check); a failed wait fails the communicator, as a failed wait of an
 * operation does. Acknowledgements come from the peers' registrars, not from their callers, so
 * a live peer answers within milliseconds. */
static weft_status_t new_chunk_tries(weft_registry_t *reg, size_t size, int internal,
                                     weft_chunk_t **chunk_out)
{
    size_t grown = weft_heap_chunk_bytes(&reg->heap, size, 0);
    size_t smallest = weft_heap_chunk_bytes(&reg->heap, size, 1);
    int more = grown > smallest || weft_heap_empty_chunk(&reg->heap) != NULL ||
               reg->pending.n > 0; /* something to try after a failure */
    /* Only running out of memory (or of room) has a fallback below, reported by the last
     * attempt if it still fails; any other failure (WEFT_ERR_CUDA from cuMemMap, WEFT_ERR_SYSTEM
     * from memfd_create) is returned at once, so it is logged as usual. */
    if (more)
        weft_error_quiet_begin(WEFT_ERR_NO_MEMORY);
    weft_status_t st = add_chunk(reg, grown, internal, chunk_out);
    if (more)
        weft_error_quiet_end(WEFT_ERR_NO_MEMORY);
    if (st == WEFT_SUCCESS)
        weft_heap_grow(&reg->heap);
    if (st != WEFT_ERR_NO_MEMORY || !more)
        return st;
    size_t released = release_empty_chunks(reg);
    reclaim_pending(reg); /* what the peers acknowledged already (with one rank: everything) */
    uint64_t unmapping = pending_ticket(reg);
    WEFT_LOG_DEBUG("registry: no chunk of %zu bytes (%s); %zu spare chunk(s) released, trying "
                   "%zu bytes",
                   grown, weft_last_error(), released, smallest);
    if (unmapping != 0) /* the attempt after the wait reports what still fails */
        weft_error_quiet_begin(WEFT_ERR_NO_MEMORY);
    st = add_chunk(reg, smallest, internal, chunk_out);
    if (unmapping != 0)
        weft_error_quiet_end(WEFT_ERR_NO_MEMORY);
    if (st != WEFT_ERR_NO_MEMORY || unmapping == 0)
        return st;
    WEFT_LOG_DEBUG("registry: no chunk of %zu bytes (%s); waiting until every peer "
                   "acknowledged ticket %llu, the unmapping of the released chunks",
                   smallest, weft_last_error(), (unsigned long long)unmapping);
    pthread_mutex_unlock(&reg->mu);
    weft_wait_ctx_t ctx =
        weft_comm_wait_ctx(reg->comm, "waiting for the peers to unmap memory released for room");
    st = wait_acked(reg, unmapping, &reg->comm->wait_policy, weft_comm_check, &ctx);
    if (st != WEFT_SUCCESS)
        fail_comm(reg, st);
    pthread_mutex_lock(&reg->mu);
    if (st != WEFT_SUCCESS)
        return st;
    reclaim_pending(reg);
    return add_chunk(reg, smallest, internal, chunk_out);
}

/* new_chunk_tries, and after a success the last error as it was before: the failure of an
 * attempt that a fallback made good is no error of the call (weft.h: weft_last_error is empty
 * after a call that succeeded). Under mu. */
static weft_status_t new_chunk(weft_registry_t *reg, size_t size, int internal,
                               weft_chunk_t **chunk_out)
{
    char before[WEFT_ERROR_TEXT_BYTES];
    snprintf(before, sizeof before, "%s", weft_last_error());
    weft_status_t st = new_chunk_tries(reg, size, internal, chunk_out);
    if (st == WEFT_SUCCESS)
        weft_error_restore(before);
    return st;
}

weft_status_t weft_registry_alloc(weft_registry_t *reg, size_t bytes, int internal, void **ptr_out)
{
    /* Inside a chunk, 0 bytes would take no room: its address would be the next allocation's,
     * and freeing it would free that one (weft_malloc answers 0 bytes itself). */
    if (bytes == 0)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_registry_alloc: bytes is 0 (an allocation takes at least 1)");
    if (bytes > reg->win.slice_bytes)
        return weft_error(WEFT_ERR_NO_MEMORY, "%zu bytes exceed the window slice", bytes);
    pthread_mutex_lock(&reg->mu);
    reclaim_pending(reg);
    size_t size = weft_heap_alloc_size(&reg->heap, bytes);
    uintptr_t addr;
    weft_chunk_t *c;
    weft_status_t st = WEFT_SUCCESS;
    if (weft_heap_alloc(&reg->heap, size, internal, &addr, &c) != 0) {
        weft_chunk_t *fresh;
        st = new_chunk(reg, size, internal, &fresh);
        if (st == WEFT_SUCCESS) {
            /* Usually from fresh; from another chunk if one was freed while mu was dropped. */
            if (weft_heap_alloc(&reg->heap, size, internal, &addr, &c) != 0)
                st = weft_error(WEFT_ERR_NO_MEMORY, "out of memory for the allocation table");
            if (weft_heap_should_release(&reg->heap, fresh))
                release_chunk(reg, fresh); /* left empty, and not needed as the spare */
        }
    }
    pthread_mutex_unlock(&reg->mu);
    if (st == WEFT_SUCCESS)
        *ptr_out = (void *)addr;
    return st;
}

weft_status_t weft_registry_free(weft_registry_t *reg, void *ptr)
{
    pthread_mutex_lock(&reg->mu);
    weft_chunk_t *c;
    int rc = weft_heap_free(&reg->heap, (uintptr_t)ptr, &c);
    if (rc != 0) {
        pthread_mutex_unlock(&reg->mu);
        if (rc == WEFT_HEAP_NO_MEMORY)
            return weft_error(WEFT_ERR_NO_MEMORY,
                              "ptr %p: out of memory recording its range as free (it "
                              "stays allocated; freeing it again may succeed)",
                              ptr);
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "ptr %p is not the start of a weft_malloc allocation", ptr);
    }
    if (weft_heap_should_release(&reg->heap, c))
        release_chunk(reg, c);
    pthread_mutex_unlock(&reg->mu);
    return WEFT_SUCCESS;
}

weft_status_t weft_registry_acquire(weft_registry_t *reg, const void *ptr, size_t bytes,
                                    const weft_wait_policy_t *policy, weft_wait_check_fn check,
                                    void *arg, weft_buf_state_t *state_out, uint64_t *waited_ns_out)
{
    *waited_ns_out = 0;
    *state_out = WEFT_BUF_STAGED;
    uintptr_t addr = (uintptr_t)ptr;
    if (weft_window_owner(&reg->win, addr) != reg->rank)
        return WEFT_SUCCESS;
    pthread_mutex_lock(&reg->mu);
    weft_chunk_t *a = weft_heap_find_chunk(&reg->heap, addr);
    if (!a || bytes > a->bytes - (addr - a->addr)) { /* not ours, or runs past the chunk */
        pthread_mutex_unlock(&reg->mu);
        return WEFT_SUCCESS;
    }
    uint64_t t0 = 0; /* when this call started waiting for the registration */
    if (a->ticket == 0) {
        if (reg->mode != WEFT_REGISTRATION_JIT) {
            pthread_mutex_unlock(&reg->mu);
            return WEFT_SUCCESS; /* staged mode: never registered */
        }
        /* jit: this first use registers the chunk, so it waits whatever the timing. */
        t0 = weft_now_ns();
        a->ticket = push_job(reg, WEFT_CTRL_REG, a->addr, a->bytes, a->seg);
        if (a->ticket == 0) {
            size_t chunk_bytes = a->bytes;
            uintptr_t chunk_addr = a->addr;
            pthread_mutex_unlock(&reg->mu);
            return weft_error(WEFT_ERR_NO_MEMORY,
                              "cannot queue the registration of the %zu-byte chunk at %p: out of "
                              "memory",
                              chunk_bytes, (void *)chunk_addr);
        }
        a->seg = (weft_mem_seg_t){.fd = -1};
    }
    uint64_t ticket = a->ticket;
    pthread_mutex_unlock(&reg->mu);

    if (atomic_load_explicit(&reg->acked_all, memory_order_acquire) < ticket) {
        if (t0 == 0)
            t0 = weft_now_ns();
        weft_status_t st = wait_acked(reg, ticket, policy, check, arg);
        if (st != WEFT_SUCCESS)
            return st;
    }
    if (t0 != 0)
        *waited_ns_out = weft_now_ns() - t0 + 1;
    *state_out = WEFT_BUF_READY;
    return WEFT_SUCCESS;
}

void weft_registry_observe_mappings(weft_registry_t *reg)
{
    (void)atomic_load_explicit(&reg->map_epoch, memory_order_acquire);
}

void weft_registry_reads_done(weft_registry_t *reg)
{
    atomic_fetch_add_explicit(&reg->reads_epoch, 1, memory_order_release);
}

const weft_registry_stats_t *weft_registry_stats(const weft_registry_t *reg)
{
    return &reg->stats;
}
