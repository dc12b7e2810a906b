/*
 * select.c - choosing the algorithm of each collective.
 *
 * On the host backend, payloads that fit the handshake slot take the flag path
 * (coll_inline.c); on the CUDA backend, payloads per pair of ranks up to WEFT_CUDA_PUSH_BYTES
 * take the push path (coll_push.c), its device counterpart (one H200 with 4 ranks and two
 * H200s: 3-6 us faster than the mesh for small payloads, docs/results/2026-11-29-h200-s5.md).
 * Otherwise everything but all-reduce has one mesh algorithm. All-reduce: two-shot reads
 * 2(n-1)S/n bytes remotely per rank against (n-1)S for one-shot, at the price of a second
 * synchronisation; with two ranks both read S, so one-shot always wins there. From three ranks up,
 * two-shot takes over at WEFT_ALLREDUCE_TWOSHOT_BYTES (default 2 MiB, measured:
 * docs/results/2026-11-29-allreduce-crossover.md).
 * Arguments were checked by the API layer.
 */
#include "op/op.h"
#include "op/select.h"

/* The flag path: the host backend and a payload per pair that fits the handshake slot. */
static int use_inline(const struct weft_comm *comm, size_t pair_bytes)
{
    return comm->backend == WEFT_BACKEND_HOST && weft_inline_fits(comm, pair_bytes);
}

weft_status_t weft_select_all_reduce(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t op,
                                     void *stream)
{
    size_t bytes = count * weft_dtype_size(dtype);
    if (use_inline(comm, bytes))
        return weft_inline_all_reduce(comm, sendbuf, recvbuf, count, dtype, op);
    if (weft_push_fits(comm, bytes))
        return weft_push_all_reduce(comm, sendbuf, recvbuf, count, dtype, op, stream);
    /* In place, one-shot must first copy the input (peers read it while it is overwritten);
     * two-shot needs no copy, which pays for its second synchronisation from
     * WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES on, with two ranks as with more. */
    size_t twoshot_from = sendbuf == recvbuf ? comm->allreduce_inplace_twoshot_bytes
                          : comm->nranks > 2 ? comm->allreduce_twoshot_bytes
                                             : SIZE_MAX;
    if (comm->nranks > 1 && bytes >= twoshot_from)
        return weft_allreduce_twoshot(comm, sendbuf, recvbuf, count, dtype, op, stream);
    return weft_allreduce_oneshot(comm, sendbuf, recvbuf, count, dtype, op, stream);
}

weft_status_t weft_select_all_gather(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, void *stream)
{
    if (use_inline(comm, count * weft_dtype_size(dtype)))
        return weft_inline_all_gather(comm, sendbuf, recvbuf, count, dtype);
    if (weft_push_fits(comm, count * weft_dtype_size(dtype)))
        return weft_push_all_gather(comm, sendbuf, recvbuf, count, dtype, stream);
    return weft_allgather_mesh(comm, sendbuf, recvbuf, count, dtype, stream);
}

weft_status_t weft_select_reduce_scatter(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                         size_t recvcount, weft_dtype_t dtype, weft_redop_t op,
                                         void *stream)
{
    if (use_inline(comm, recvcount * weft_dtype_size(dtype)))
        return weft_inline_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op);
    if (weft_push_fits(comm, recvcount * weft_dtype_size(dtype)))
        return weft_push_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op, stream);
    return weft_reduce_scatter_mesh(comm, sendbuf, recvbuf, recvcount, dtype, op, stream);
}

weft_status_t weft_select_broadcast(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                    size_t count, weft_dtype_t dtype, int root, void *stream)
{
    if (use_inline(comm, count * weft_dtype_size(dtype)))
        return weft_inline_broadcast(comm, sendbuf, recvbuf, count, dtype, root);
    if (weft_push_fits(comm, count * weft_dtype_size(dtype)))
        return weft_push_broadcast(comm, sendbuf, recvbuf, count, dtype, root, stream);
    return weft_broadcast_mesh(comm, sendbuf, recvbuf, count, dtype, root, stream);
}

weft_status_t weft_select_all_to_all(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, void *stream)
{
    if (use_inline(comm, count * weft_dtype_size(dtype)))
        return weft_inline_all_to_all(comm, sendbuf, recvbuf, count, dtype);
    if (weft_push_fits(comm, count * weft_dtype_size(dtype)))
        return weft_push_all_to_all(comm, sendbuf, recvbuf, count, dtype, stream);
    size_t counts[WEFT_MAX_RANKS], displs[WEFT_MAX_RANKS];
    for (int p = 0; p < comm->nranks; p++) {
        counts[p] = count;
        displs[p] = (size_t)p * count;
    }
    return weft_alltoallv_mesh(comm, sendbuf, counts, displs, recvbuf, counts, displs, dtype,
                               WEFT_COLL_ALL_TO_ALL, count, stream);
}

weft_status_t weft_select_all_to_allv(struct weft_comm *comm, const void *sendbuf,
                                      const size_t *sendcounts, const size_t *sdispls,
                                      void *recvbuf, const size_t *recvcounts,
                                      const size_t *rdispls, weft_dtype_t dtype, void *stream)
{
    return weft_alltoallv_mesh(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls,
                               dtype, WEFT_COLL_ALL_TO_ALLV, 0, stream);
}

weft_status_t weft_select_barrier(struct weft_comm *comm, void *stream)
{
    if (comm->backend == WEFT_BACKEND_CUDA)
        return weft_barrier_stream(comm, stream);
    return weft_inline_barrier(comm);
}
