/*
 * reduce_scatter_mesh.c - reduce-scatter over the full mesh: rank r reads block r of every
 * rank's input and reduces them (in rank order) into its output, in one step.
 *
 * In place (recvbuf == sendbuf + rank * recvcount) we overwrite only block r of our input,
 * which no peer reads.
 */
#include "op/op.h"

weft_status_t weft_reduce_scatter_mesh(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                       size_t recvcount, weft_dtype_t dtype, weft_redop_t redop,
                                       void *stream)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_reduce_scatter", stream, &op);
    if (st != WEFT_SUCCESS)
        return st;
    size_t block = recvcount * weft_dtype_size(dtype);
    const void *src;
    st = weft_op_source(&op, sendbuf, block * (size_t)comm->nranks, 0, &src);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    weft_op_desc_t desc = {.coll = WEFT_COLL_REDUCE_SCATTER,
                           .dtype = dtype,
                           .redop = redop,
                           .count = recvcount,
                           .src = (uint64_t)(uintptr_t)src};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    const void *srcs[WEFT_MAX_RANKS];
    size_t mine = (size_t)comm->rank * block;
    for (int r = 0; r < comm->nranks; r++) {
        const uint8_t *base =
            r == comm->rank ? sendbuf : (const uint8_t *)(uintptr_t)weft_op_peer(&op, r)->src;
        srcs[r] = base + mine;
    }
    weft_work_t work;
    weft_work_reduce(&work, recvbuf, srcs, comm->nranks, recvcount, dtype, redop, comm->nranks,
                     comm->nranks);
    return weft_op_end(&op, weft_op_execute(&op, &work, WEFT_SYNC_DONE, st), 0);
}
