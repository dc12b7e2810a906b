/*
 * allreduce_oneshot.c - all-reduce in one step: every rank reads every peer's whole input and
 * reduces it into its own output, in rank order (so every rank gets bit-identical results).
 *
 * Cost per rank: (n - 1) * S bytes read remotely, one reduction of n inputs; one handshake and
 * one closing signal. Best for small and medium sizes; the two-shot form takes over from the
 * sizes select.c gives (twoshot_from: WEFT_ALLREDUCE_TWOSHOT_BYTES and its in-place twin, whose
 * defaults depend on the rank count, in place and the GPUs the ranks span).
 *
 * In place, peers read our input while we overwrite it, so the input is copied first.
 */
#include "op/op.h"

weft_status_t weft_allreduce_oneshot(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t redop,
                                     void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_all_reduce", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    const void *src;
    st = weft_op_source(&op, sendbuf, count * weft_dtype_size(dtype), sendbuf == recvbuf, &src);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_REDUCE,
                           .dtype = dtype,
                           .redop = redop,
                           .count = count,
                           .src = (uint64_t)(uintptr_t)src};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    const void *srcs[WEFT_MAX_RANKS];
    for (int r = 0; r < comm->nranks; r++)
        srcs[r] = r == comm->rank ? src : (const void *)(uintptr_t)weft_op_peer(&op, r)->src;
    weft_work_t work;
    weft_work_reduce(&work, recvbuf, srcs, comm->nranks, count, dtype, redop, comm->nranks,
                     comm->nranks);
    return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
}
