/*
 * allgather_mesh.c - all-gather over the full mesh, in one step (no ring), the data split over
 * the workers. Two forms; every rank takes the same one, decided from every rank's descriptor:
 *
 * - stores, when every rank allows it (WEFT_REMOTE_STORES; by default on the CUDA backend),
 *   every rank's output is registered, no rank's input went through the staging scratch (a
 *   rank stages before it knows which form the others can take) and no rank's copies would run
 *   on the copy engines (which write only their own rank's memory): each rank reads its input once
 *   and writes it into every rank's output (a FANOUT work item). A rank moves n + 1 blocks'
 *   worth of bytes instead of 2n, and on NVLink the writes are posted stores with no round trip.
 * - loads, otherwise: each rank copies every peer's input block into its own output. Only the
 *   inputs are read remotely, so an unregistered output costs nothing, and an unregistered
 *   input is copied into the staging scratch first.
 *
 * Both end with the closing signal: for loads, nobody still reads our input; for stores, every
 * peer's writes into our output have landed. In place (sendbuf == recvbuf + rank * count) our
 * own block is already where it belongs and is never copied.
 */
#include "op/op.h"

weft_status_t weft_allgather_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                  size_t count, weft_dtype_t dtype, void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_all_gather", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    size_t bytes = count * weft_dtype_size(dtype);
    const void *src;
    st = weft_op_source(&op, sendbuf, bytes, 0, &src);
    /* The store form's copies: our block into every output but ours in place. */
    int in_place = (const uint8_t *)recvbuf + (size_t)me * bytes == (const uint8_t *)sendbuf;
    uint64_t copied = (uint64_t)(in_place ? n - 1 : n) * bytes;
    int out_ready = 0;
    if (st == WEFT_SUCCESS && comm->remote_stores && !op.staged && bytes > 0 &&
        !weft_cuda_copy_engine_takes(comm, copied))
        st = weft_op_acquire(&op, recvbuf, (size_t)n * bytes, &out_ready);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_GATHER,
                           .dtype = dtype,
                           .count = count,
                           .src = (uint64_t)(uintptr_t)src,
                           .dst = out_ready ? (uint64_t)(uintptr_t)recvbuf : 0};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    weft_work_t work;
    if (weft_op_store_form(&op, &desc)) {
        void *dsts[WEFT_MAX_RANKS];
        int ndsts = 0;
        for (int r = 0; r < n; r++) {
            if (r == me && in_place)
                continue;
            uint8_t *out = r == me ? recvbuf : (uint8_t *)(uintptr_t)weft_op_peer(&op, r)->dst;
            dsts[ndsts++] = out + (size_t)me * bytes;
        }
        weft_work_fanout(&work, dsts, ndsts, sendbuf, bytes, n);
    } else {
        work = (weft_work_t){.kind = WEFT_WORK_COPY, .nslices = n};
        for (int r = 0; r < n; r++) {
            work.dst[r] = (uint8_t *)recvbuf + (size_t)r * bytes;
            work.src[r] = r == me ? sendbuf : (const uint8_t *)(uintptr_t)weft_op_peer(&op, r)->src;
            int copy = work.src[r] != work.dst[r];
            work.slices[r] =
                (weft_slice_t){.peer = r, .tier = comm->peer_tier[r], .bytes = copy ? bytes : 0};
        }
    }
    return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
}
