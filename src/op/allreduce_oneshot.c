/*
 * allreduce_oneshot.c - all-reduce in one step: every rank reads every peer's whole input and
 * reduces it into its own output, in rank order (so every rank gets bit-identical results).
 *
 * Cost per rank: (n - 1) * S bytes read remotely, one reduction of n inputs; one handshake and
 * one closing signal. Best for small and medium sizes; the two-shot form takes over from
 * WEFT_ALLREDUCE_TWOSHOT_BYTES.
 *
 * In place, peers read our input while we overwrite it, so the input is staged first.
 */
#include "op/op.h"
#include "op/reduce_units.h"
#include "util/log.h"

weft_status_t weft_allreduce_oneshot(struct weft_comm *comm, const void *sendbuf, void *recvbuf,
                                     size_t count, weft_dtype_t dtype, weft_redop_t redop)
{
    weft_op_t op;
    weft_status_t st = weft_op_begin(comm, "weft_all_reduce", &op);
    if (st != WEFT_SUCCESS)
        return st;
    size_t esize = weft_dtype_size(dtype);
    const void *src;
    st = weft_op_source(&op, sendbuf, count * esize, sendbuf == recvbuf, &src);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);
    weft_op_desc_t desc = {.coll = WEFT_COLL_ALL_REDUCE, .dtype = dtype, .redop = redop,
                           .count = count, .src = (uint64_t)(uintptr_t)src};
    st = weft_op_exchange(&op, &desc, NULL, NULL, NULL, NULL, 0, NULL);
    if (st != WEFT_SUCCESS)
        return weft_op_end(&op, st, 0);

    weft_reduce_job_t job = {.dst = recvbuf, .nsrcs = comm->nranks, .dtype = dtype, .op = redop,
                             .esize = esize, .avg_divisor = comm->nranks};
    for (int r = 0; r < comm->nranks; r++)
        job.srcs[r] = r == comm->rank ? src : (const void *)(uintptr_t)weft_op_peer(&op, r)->src;
    st = weft_reduce_run(&op, &job, count);
    return weft_op_end(&op, weft_op_complete(&op, WEFT_SIGNAL_DONE, st), 0);
}
