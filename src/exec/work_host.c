/*
 * work_host.c - running work units on the CPU (see work.h).
 */
#include <string.h>

#include "exec/reduce_host.h"
#include "exec/work.h"

/* Cut [0, bytes) into at most nslices slices of near-equal size (multiples of the granule), as
 * distinct pseudo-peers so that the fan-out cap does not serialise them. */
static void cut_range(weft_work_t *work, uint64_t bytes, int nslices)
{
    uint64_t per = weft_work_share(bytes, nslices); /* at most nslices slices cover it all */
    work->nslices = 0;
    for (uint64_t off = 0; off < bytes; off += per) {
        int i = work->nslices++;
        work->off[i] = off;
        work->slices[i] = (weft_slice_t){
            .peer = i, .tier = WEFT_TIER_PEER, .bytes = bytes - off < per ? bytes - off : per};
    }
}

void weft_work_reduce(weft_work_t *work, void *dst, const void *const *srcs, int nsrcs,
                      size_t count, weft_dtype_t dtype, weft_redop_t op, int avg_divisor,
                      int nslices)
{
    work->kind = WEFT_WORK_REDUCE;
    work->dst[0] = dst;
    work->ndsts = 1;
    work->nsrcs = nsrcs;
    work->dtype = dtype;
    work->op = op;
    work->avg_divisor = avg_divisor;
    for (int r = 0; r < nsrcs; r++)
        work->src[r] = srcs[r];
    cut_range(work, (uint64_t)count * weft_dtype_size(dtype), nslices);
}

void weft_work_fanout(weft_work_t *work, void *const *dsts, int ndsts, const void *src,
                      size_t bytes, int nslices)
{
    work->kind = WEFT_WORK_FANOUT;
    work->src[0] = src;
    work->ndsts = ndsts;
    for (int d = 0; d < ndsts; d++)
        work->dst[d] = dsts[d];
    cut_range(work, bytes, nslices);
}

void weft_work_host_unit(const weft_work_t *work, uint32_t slice, uint64_t offset, uint64_t bytes)
{
    if (work->kind == WEFT_WORK_COPY) {
        memcpy(work->dst[slice] + offset, work->src[slice] + offset, bytes);
        return;
    }
    uint64_t off = work->off[slice] + offset;
    if (work->kind == WEFT_WORK_FANOUT) {
        for (int d = 0; d < work->ndsts; d++)
            memcpy(work->dst[d] + off, work->src[0] + off, bytes);
        return;
    }
    const void *srcs[WEFT_MAX_RANKS];
    for (int r = 0; r < work->nsrcs; r++)
        srcs[r] = work->src[r] + off;
    size_t esize = weft_dtype_size(work->dtype);
    weft_reduce_host(work->dst[0] + off, srcs, work->nsrcs, bytes / esize, work->dtype, work->op,
                     work->avg_divisor);
    for (int d = 1; d < work->ndsts; d++)
        memcpy(work->dst[d] + off, work->dst[0] + off, bytes);
}
