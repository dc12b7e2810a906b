/*
 * op_common.c - the steps every host algorithm shares (see op.h).
 *
 * Thread safety: an operation runs on the communicator's user thread; weft_op_execute hands units
 * to the executor's workers, which claim them through comm->steal (each unit runs once, on
 * whichever worker claims it), only read peers' memory and write this rank's.
 */
#include <string.h>

#include "core/comm_cuda.h"
#include "op/op.h"
#include "util/log.h"

weft_status_t weft_op_begin(struct weft_comm *comm, const char *call, void *stream, weft_op_t *op)
{
    /* The API layer checked that the communicator is usable (weft_api_check_comm). */
    weft_cuda_prev_t prev = {NULL, 0};
    if (comm->backend == WEFT_BACKEND_CUDA) {
        weft_status_t st = weft_cuda_device_enter(comm, call, &prev);
        if (st == WEFT_SUCCESS)
            st = weft_cuda_check(comm, call);
        if (st != WEFT_SUCCESS) {
            weft_cuda_device_leave(prev);
            return st;
        }
    }
    /* Two threads in operations at once would interleave their handshakes: both would wait
     * until the timeout and leave the communicator dead. Refuse the second instead. */
    if (atomic_exchange_explicit(&comm->in_op, 1, memory_order_acquire)) {
        weft_cuda_device_leave(prev);
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: comm is in an operation on another thread (a communicator serves "
                          "one thread at a time)",
                          call);
    }
    *op = (weft_op_t){
        .comm = comm, .seq = ++comm->seq, .call = call, .stream = stream, .caller = prev};
    op->wait = weft_comm_wait_ctx(comm, call);
    return WEFT_SUCCESS;
}

/* weft_op_end but for giving the caller's device back. */
static weft_status_t op_finish(weft_op_t *op, weft_status_t st, int inline_payload)
{
    struct weft_comm *comm = op->comm;
    weft_registry_reads_done(comm->registry);
    if (op->first_use_ns > 0) { /* once, however many of its buffers it waited for */
        atomic_fetch_add_explicit(&comm->stats.first_use_waits, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&comm->stats.first_use_wait_ns, op->first_use_ns,
                                  memory_order_relaxed);
    }
    if (st == WEFT_SUCCESS && op->pending.bytes > 0)
        st = weft_error(WEFT_ERR_INTERNAL, "%s: a local copy was never issued", op->call);
    /* The communicator's state first, then the next operation may begin (another thread's
     * would otherwise start on a communicator about to be marked failed). */
    if (st != WEFT_SUCCESS && !op->posted && comm->nranks > 1) {
        weft_comm_fail(comm, st); /* see op.h */
        atomic_store_explicit(&comm->in_op, 0, memory_order_release);
        return st;
    }
    switch (st) {
    case WEFT_SUCCESS:
        if (inline_payload)
            atomic_fetch_add_explicit(&comm->stats.inline_ops, 1, memory_order_relaxed);
        else if (op->staged)
            atomic_fetch_add_explicit(&comm->stats.staged_ops, 1, memory_order_relaxed);
        else
            atomic_fetch_add_explicit(&comm->stats.zero_copy_ops, 1, memory_order_relaxed);
        if (op->remote_stores)
            atomic_fetch_add_explicit(&comm->stats.remote_store_ops, 1, memory_order_relaxed);
        if (op->usage.copy_engine)
            atomic_fetch_add_explicit(&comm->stats.copy_engine_ops, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&comm->stats.sm_blocks, (uint64_t)op->usage.sm_blocks,
                                  memory_order_relaxed);
        break;
    case WEFT_ERR_PEER_LOST:
    case WEFT_ERR_TIMEOUT:
    case WEFT_ERR_ABORTED:
    case WEFT_ERR_INTERNAL:
        /* Fatal: every later call returns the same status (weft.h), and the connections close,
         * so that peers waiting on this rank see WEFT_ERR_PEER_LOST at once and no later free
         * unmaps a buffer a peer may still be reading in this operation. */
        weft_comm_fail(comm, st);
        break;
    default:
        break;
    }
    atomic_store_explicit(&comm->in_op, 0, memory_order_release);
    return st;
}

weft_status_t weft_op_end(weft_op_t *op, weft_status_t st, int inline_payload)
{
    st = op_finish(op, st, inline_payload);
    weft_cuda_device_leave(op->caller);
    return st;
}

weft_status_t weft_op_acquire(weft_op_t *op, const void *ptr, size_t bytes, int *ready_out)
{
    if (op->comm->nranks == 1) { /* no peer will read it */
        *ready_out = 1;
        return WEFT_SUCCESS;
    }
    weft_status_t st =
        weft_comm_acquire(op->comm, ptr, bytes, &op->wait, ready_out, &op->first_use_ns);
    if (st != WEFT_SUCCESS) /* the registry's message does not know the call */
        return weft_error_prefix(st, op->call);
    return WEFT_SUCCESS;
}

weft_status_t weft_op_stage(weft_op_t *op, size_t bytes, uint8_t **base_out)
{
    void *base;
    weft_status_t st = weft_comm_staging(op->comm, bytes, &op->wait, &base, &op->first_use_ns);
    if (st != WEFT_SUCCESS)
        return st;
    op->staged = 1;
    *base_out = base;
    return WEFT_SUCCESS;
}

weft_status_t weft_op_source(weft_op_t *op, const void *ptr, size_t bytes, int force_copy,
                             const void **remote_out)
{
    int ready = 0;
    weft_status_t st = weft_op_acquire(op, ptr, bytes, &ready);
    if (st != WEFT_SUCCESS)
        return st;
    if (ready && !force_copy) {
        *remote_out = ptr;
        return WEFT_SUCCESS;
    }
    uint8_t *base;
    int staged = op->staged;
    st = weft_op_stage(op, bytes, &base);
    if (st != WEFT_SUCCESS)
        return st;
    if (ready) /* a private copy of registered memory is not the staged path */
        op->staged = staged;
    st = weft_op_local_copy(op, base, ptr, bytes);
    if (st != WEFT_SUCCESS)
        return st;
    *remote_out = base;
    return WEFT_SUCCESS;
}

weft_status_t weft_op_exchange(weft_op_t *op, const weft_op_desc_t *desc,
                               const uint64_t *src_per_peer, const uint64_t *pair_send,
                               const uint64_t *pair_recv, const void *data, size_t data_stride,
                               int *pair_only_out)
{
    struct weft_comm *comm = op->comm;
    weft_op_desc_t d = *desc;
    if (pair_only_out)
        *pair_only_out = 0;
    if (pair_send && pair_recv)
        d.pair_digest = weft_hs_pair_digest(comm->rank, comm->nranks, pair_send, pair_recv);
    op->posted = 1;
    for (int i = 1; i < comm->nranks; i++) {
        /* Start with the next rank so that ranks do not all write to rank 0 first. */
        int p = (comm->rank + i) % comm->nranks;
        if (src_per_peer)
            d.src = src_per_peer[p];
        if (pair_send)
            d.pair_send = pair_send[p];
        if (pair_recv)
            d.pair_recv = pair_recv[p];
        weft_hs_post(comm, p, op->seq, &d,
                     data ? (const uint8_t *)data + (size_t)p * data_stride : NULL);
    }
    weft_status_t st = weft_hs_wait_posted(comm, op->seq, &op->wait);
    if (st != WEFT_SUCCESS)
        return st;
    weft_registry_observe_mappings(comm->registry);
    int common;
    /* d: the common fields as posted, and this rank's digest term */
    st = weft_hs_check_match(comm, op->seq, &d, pair_send, pair_recv, op->call, &common);
    if (st == WEFT_ERR_MISMATCH && !common && pair_only_out)
        *pair_only_out = 1;
    return st;
}

int weft_op_store_form(weft_op_t *op, const weft_op_desc_t *mine)
{
    const struct weft_comm *comm = op->comm;
    int stores = comm->nranks > 1 && mine->dst != 0;
    for (int r = 0; r < comm->nranks && stores; r++)
        stores = r == comm->rank || weft_op_peer(op, r)->dst != 0;
    op->remote_stores = stores;
    return stores;
}

weft_status_t weft_op_local_copy(weft_op_t *op, void *dst, const void *src, size_t bytes)
{
    if (op->comm->backend == WEFT_BACKEND_CUDA)
        return weft_cuda_local_copy(op->comm, &op->pending, dst, src, bytes, op->stream);
    memcpy(dst, src, bytes);
    return WEFT_SUCCESS;
}

typedef struct move_ctx {
    weft_steal_t *steal;
    const weft_work_t *work;
} move_ctx_t;

static void move_unit(void *arg, const weft_unit_t *unit)
{
    const move_ctx_t *m = arg;
    weft_work_host_unit(m->work, unit->slice, unit->offset, unit->bytes);
}

static void run_worker_units(void *arg, int worker)
{
    move_ctx_t *m = arg;
    (void)weft_steal_run(m->steal, worker, move_unit, m);
}

/* Run the work on the CPU workers: whole slices in order with one worker; otherwise the
 * partitioner's plan, which each worker starts with its own units and completes by stealing
 * (exec/steal.h). The errors of the plan name call, the public call, first. */
static weft_status_t host_move(struct weft_comm *comm, const weft_work_t *work, const char *call)
{
    int nworkers = comm->exec_ops->nworkers(comm->exec);
    if (nworkers == 1) {
        for (int i = 0; i < work->nslices; i++) {
            if (work->slices[i].bytes > 0)
                weft_work_host_unit(work, (uint32_t)i, 0, work->slices[i].bytes);
        }
        return WEFT_SUCCESS;
    }
    const weft_plan_t *plan;
    weft_status_t st =
        weft_plan_cache_partition(comm->plans, &comm->model, work->slices, (size_t)work->nslices,
                                  nworkers, WEFT_WORK_GRANULE, &plan);
    if (st != WEFT_SUCCESS)
        return weft_error_prefix(st, call);
    st = weft_steal_prepare(&comm->steal, plan);
    if (st != WEFT_SUCCESS)
        return weft_error_prefix(st, call);
    move_ctx_t m = {&comm->steal, work};
    comm->exec_ops->run(comm->exec, run_worker_units, &m);
    return WEFT_SUCCESS;
}

/* Signal `kind` with my status to every peer; unless nowait, wait for theirs. */
static weft_status_t host_signal(weft_op_t *op, weft_signal_kind_t kind, weft_status_t mine,
                                 int nowait)
{
    weft_hs_signal(op->comm, kind, op->seq, mine, NULL);
    if (nowait)
        return mine;
    weft_status_t theirs;
    weft_status_t st = weft_hs_wait_signal(op->comm, kind, op->seq, &op->wait, &theirs);
    if (st != WEFT_SUCCESS)
        return st;
    if (mine != WEFT_SUCCESS)
        return mine;
    if (theirs != WEFT_SUCCESS)
        return weft_error(theirs, "%s: a peer reported: %s", op->call, weft_status_string(theirs));
    return WEFT_SUCCESS;
}

weft_status_t weft_op_execute(weft_op_t *op, const weft_work_t *work, unsigned sync,
                              weft_status_t mine)
{
    struct weft_comm *comm = op->comm;
    if (op->remote_stores)
        sync |= WEFT_SYNC_STORES;
    if (comm->backend == WEFT_BACKEND_CUDA) {
        weft_status_t st = weft_cuda_execute(comm, work, sync, mine, &op->pending, &op->push,
                                             op->stream, &op->usage);
        if (st != WEFT_SUCCESS && mine == WEFT_SUCCESS) {
            weft_error_prefix(st, op->call); /* the partitioner's, a launch's: name the call */
            weft_comm_fail(comm, st);        /* peers wait for this rank's signals */
        }
        return st;
    }
    weft_status_t st = mine;
    if (st == WEFT_SUCCESS && work)
        st = host_move(comm, work, op->call);
    if (sync & WEFT_SYNC_PHASE)
        st = host_signal(op, WEFT_SIGNAL_PHASE, st, 0);
    if (sync & (WEFT_SYNC_DONE | WEFT_SYNC_DONE_NOWAIT))
        st = host_signal(op, WEFT_SIGNAL_DONE, st, (sync & WEFT_SYNC_DONE_NOWAIT) != 0);
    return st;
}

weft_status_t weft_op_agree(weft_op_t *op, weft_status_t mine, const weft_signal_note_t *note,
                            weft_status_t *status_out, weft_signal_note_t *notes_out)
{
    struct weft_comm *comm = op->comm;
    weft_hs_signal(comm, WEFT_SIGNAL_PHASE, op->seq, mine, note);
    weft_status_t st = weft_hs_wait_signal(comm, WEFT_SIGNAL_PHASE, op->seq, &op->wait, NULL);
    if (st != WEFT_SUCCESS)
        return st;
    for (int p = 0; p < comm->nranks; p++) {
        if (p != comm->rank) {
            weft_hs_signal_note(comm, WEFT_SIGNAL_PHASE, p, &status_out[p], &notes_out[p]);
            continue;
        }
        status_out[p] = mine;
        notes_out[p] = mine != WEFT_SUCCESS && note ? *note : (weft_signal_note_t){0, 0, 0};
    }
    return WEFT_SUCCESS;
}
