/*
 * alltoall_mesh.c - all-to-all(v) over the full mesh, in one step, the copies split over the
 * workers by the partitioner (uneven blocks are where the cost model matters). Two forms, every
 * rank taking the same one (decided from every rank's descriptor):
 *
 * - loads: rank r copies, from every rank p, the block p addressed to r straight into its own
 *   output. Only the inputs are read remotely (an unregistered input is staged first).
 * - stores, for all_to_all when every rank allows it (WEFT_REMOTE_STORES; by default on the
 *   CUDA backend), every rank's output is registered, no rank's input was staged and no rank's
 *   copies would run on the copy engines (which write only their own rank's memory): rank r
 *   writes its block for p into block r of p's output. All reads are local, and on NVLink the
 *   writes are posted stores with no round trip. An all_to_allv keeps the loads: its peers'
 *   displacements are not in the descriptors.
 *
 * Both end with the closing signal: for loads, nobody still reads our input; for stores, every
 * peer's writes into our output have landed.
 *
 * Each pair checks its counts at the handshake (what p sends to r against what r expects from
 * p), and every rank adds up the pair digest (handshake.c), so every rank sees a mismatch
 * there and returns before anything moves; the pair's two ranks name it. Should the digest
 * miss one (a 2^-64 chance), only the pair sees it: the operation then still completes, without
 * moving data on those ranks, and the closing signal carries the verdict to everyone (on the CUDA
 * backend the others may have taken the push path, which the pair skips: they end at the
 * timeout).
 *
 * An all_to_allv whose blocks are all within the CUDA push path's limit takes that path
 * instead (coll_push.c; an all_to_all chose it before calling here). Only the handshake tells a
 * rank the other ranks' blocks, so every rank posts its largest and all decide alike after it;
 * the input was made readable for the mesh by then (registered, or a private copy, which the
 * push path then drops).
 */
#include "op/op.h"
#include "util/log.h"

weft_status_t weft_alltoallv_mesh(struct weft_comm *comm, const void *sendbuf,
                                  const size_t *sendcounts, const size_t *sdispls, void *recvbuf,
                                  const size_t *recvcounts, const size_t *rdispls,
                                  weft_dtype_t dtype, weft_coll_t coll, size_t count, void *stream)
{
    const char *call = coll == WEFT_COLL_ALL_TO_ALL ? "weft_all_to_all" : "weft_all_to_allv";
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, call, stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    int n = comm->nranks, me = comm->rank;
    size_t esize = weft_dtype_size(dtype);

    /* The input's extent: the farthest byte any block reaches. */
    size_t extent = 0;
    for (int p = 0; p < n; p++) {
        size_t end = (sdispls[p] + sendcounts[p]) * esize;
        if (sendcounts[p] > 0 && end > extent)
            extent = end;
    }
    const void *src = sendbuf;
    if (extent > 0)
        st = weft_op_source(&op, sendbuf, extent, 0, &src);
    int out_ready = 0;
    size_t out_bytes = (size_t)n * count * esize; /* all_to_all: what either form copies */
    if (st == WEFT_SUCCESS && coll == WEFT_COLL_ALL_TO_ALL && comm->remote_stores && !op.staged &&
        count > 0 && !weft_cuda_copy_engine_takes(comm, out_bytes))
        st = weft_op_acquire(&op, recvbuf, out_bytes, &out_ready);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    uint64_t block_src[WEFT_MAX_RANKS], pair_send[WEFT_MAX_RANKS], pair_recv[WEFT_MAX_RANKS];
    uint64_t pair_max = 0;
    for (int p = 0; p < n; p++) {
        block_src[p] = (uint64_t)(uintptr_t)src + sdispls[p] * esize;
        pair_send[p] = sendcounts[p];
        pair_recv[p] = recvcounts[p];
        uint64_t larger = sendcounts[p] > recvcounts[p] ? sendcounts[p] : recvcounts[p];
        pair_max = larger * esize > pair_max ? larger * esize : pair_max;
    }
    weft_op_desc_t desc = {.coll = coll,
                           .dtype = dtype,
                           .count = count,
                           .pair_max = pair_max,
                           .dst = out_ready ? (uint64_t)(uintptr_t)recvbuf : 0};
    int pair_only;
    st = weft_op_exchange(&op, &desc, block_src, pair_send, pair_recv, NULL, 0, &pair_only);
    if (st != WEFT_SUCCESS && !pair_only)
        return weft_op_end(&op, st, 0);
    if (st == WEFT_SUCCESS && coll == WEFT_COLL_ALL_TO_ALLV) {
        for (int p = 0; p < n; p++) {
            uint64_t theirs = p == me ? 0 : weft_op_peer(&op, p)->pair_max;
            pair_max = theirs > pair_max ? theirs : pair_max;
        }
        if (pair_max > 0 && weft_push_fits(comm, pair_max))
            return weft_op_end(&op,
                               weft_push_all_to_allv(&op, sendbuf, sendcounts, sdispls, recvbuf,
                                                     recvcounts, rdispls, esize, pair_max),
                               1);
    }

    weft_work_t work = {.kind = WEFT_WORK_COPY, .nslices = n};
    int stores = st == WEFT_SUCCESS && weft_op_store_form(&op, &desc);
    for (int p = 0; p < n; p++) {
        if (stores) { /* all_to_all: our block for p into block me of p's output */
            uint8_t *out = p == me ? recvbuf : (uint8_t *)(uintptr_t)weft_op_peer(&op, p)->dst;
            work.dst[p] = out + (size_t)me * count * esize;
            work.src[p] = (const uint8_t *)sendbuf + sdispls[p] * esize;
        } else {
            work.dst[p] = (uint8_t *)recvbuf + rdispls[p] * esize;
            work.src[p] = p == me ? (const uint8_t *)sendbuf + sdispls[p] * esize
                                  : (const uint8_t *)(uintptr_t)weft_op_peer(&op, p)->src;
        }
        work.slices[p] = (weft_slice_t){
            .peer = p, .tier = comm->peer_tier[p], .bytes = (uint64_t)recvcounts[p] * esize};
    }
    /* On a pair-count mismatch nothing moves, but the closing signal still runs: it tells every
     * rank, not only the pair that saw it. */
    return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
}
