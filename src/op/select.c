/*
 * select.c - choosing the algorithm of each collective.
 *
 * On the host backend, payloads that fit the handshake slot take the flag path
 * (coll_inline.c); on the CUDA backend, payloads per pair of ranks up to WEFT_CUDA_PUSH_BYTES
 * take the push path (coll_push.c), its device counterpart (one H200 with 4 ranks and two
 * H200s: 3-6 us faster than the mesh for small payloads, docs/results/2026-11-29-h200-s5.md).
 * Otherwise everything but all-reduce has one mesh algorithm. All-reduce: two-shot reads
 * 2(n-1)S/n bytes remotely per rank against (n-1)S for one-shot, at the price of a second
 * synchronisation. With two ranks both read S: out of place one-shot wins, except on two GPUs,
 * where two-shot's fewer bytes through each GPU's own memory pay from a few MiB. Two-shot takes
 * over at WEFT_ALLREDUCE_TWOSHOT_BYTES, in place (where one-shot must first copy its input) at
 * WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES; see twoshot_from for their defaults. Arguments were
 * checked by the API layer.
 */
#include "core/comm_cuda.h"
#include "op/op.h"
#include "op/select.h"
#include "util/config.h"

/* The measured crossovers, used where the variables are "auto" (their default). Host, and ranks
 * sharing one GPU: 2 MiB out of place (host: docs/results/2026-11-29-allreduce-crossover.md; one
 * H200, 4 ranks: between 1 and 2 MiB), 1 MiB in place. Ranks on several GPUs, where a byte read
 * from a peer crosses NVLink instead of the GPU's own memory: two H200s, 4 ranks, two-shot 8%
 * faster at 512 KiB out of place and 3-5% faster from 128 KiB in place (2 ranks too), equal
 * below (docs/results/2026-11-30-h200-s10.md, section 3). */
#define TWOSHOT_BYTES ((size_t)2 << 20)
#define INPLACE_TWOSHOT_BYTES ((size_t)1 << 20)
#define TWOSHOT_BYTES_GPUS ((size_t)512 << 10)
#define INPLACE_TWOSHOT_BYTES_GPUS ((size_t)128 << 10)
/* Two ranks on two GPUs, out of place, where both forms read S bytes remotely: two-shot within
 * 1% of one-shot at 4 MiB, 1-4% faster from 8 MiB to 1 GiB but for 1% slower at 128 MiB, as it
 * moves fewer bytes through each GPU's own memory (docs/results/2026-11-30-h200-s14.md). */
#define PAIR_TWOSHOT_BYTES_GPUS ((size_t)4 << 20)

/* The size from which an all-reduce takes the two-shot form (SIZE_MAX: never). */
static size_t twoshot_from(const struct weft_comm *comm, int inplace)
{
    uint64_t set = inplace ? comm->allreduce_inplace_twoshot_bytes : comm->allreduce_twoshot_bytes;
    if (set != WEFT_CONFIG_AUTO)
        return set < SIZE_MAX ? (size_t)set : SIZE_MAX;
    if (weft_cuda_spans_gpus(comm))
        return inplace             ? INPLACE_TWOSHOT_BYTES_GPUS
               : comm->nranks <= 2 ? PAIR_TWOSHOT_BYTES_GPUS
                                   : TWOSHOT_BYTES_GPUS;
    if (!inplace && comm->nranks <= 2)
        return SIZE_MAX;
    return inplace ? INPLACE_TWOSHOT_BYTES : TWOSHOT_BYTES;
}

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
     * two-shot needs no copy, which pays for its second synchronisation from a smaller size on,
     * with two ranks as with more. */
    if (comm->nranks > 1 && bytes >= twoshot_from(comm, sendbuf == recvbuf))
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

weft_status_t weft_select_empty(struct weft_comm *comm, const char *call, int coll,
                                weft_dtype_t dtype, weft_redop_t op, int root)
{
    weft_op_desc_t desc = {.coll = (uint8_t)coll,
                           .dtype = (uint8_t)dtype,
                           .redop = (uint8_t)op,
                           .root = (int16_t)root};
    return weft_inline_empty(comm, call, &desc);
}

weft_status_t weft_select_barrier(struct weft_comm *comm, void *stream)
{
    if (comm->backend == WEFT_BACKEND_CUDA)
        return weft_barrier_stream(comm, stream);
    return weft_inline_barrier(comm);
}
