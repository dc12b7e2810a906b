/*
 * reduce_units.c - running a reduction over the workers (see reduce_units.h).
 */
#include "op/reduce_units.h"

#include "exec/reduce_host.h"
#include "op/op.h"

#define REDUCE_GRANULE 64

static void reduce_unit(void *ctx, uint32_t slice, uint64_t offset, uint64_t bytes)
{
    const weft_reduce_job_t *job = ctx;
    uint64_t off = job->slice_offset[slice] + offset;
    const void *srcs[WEFT_MAX_RANKS];
    for (int r = 0; r < job->nsrcs; r++)
        srcs[r] = (const uint8_t *)job->srcs[r] + off;
    weft_reduce_host((uint8_t *)job->dst + off, srcs, job->nsrcs, bytes / job->esize, job->dtype,
                     job->op, job->avg_divisor);
}

weft_status_t weft_reduce_run(struct weft_op *op, weft_reduce_job_t *job, size_t count)
{
    uint64_t bytes = (uint64_t)count * job->esize;
    int n = op->comm->nranks;
    /* ceil(bytes / n) rounded up to the granule: at most n slices cover every byte. */
    uint64_t share = (bytes + (uint64_t)n - 1) / (uint64_t)n;
    uint64_t per = (share + REDUCE_GRANULE - 1) / REDUCE_GRANULE * REDUCE_GRANULE;
    if (per == 0)
        per = REDUCE_GRANULE;
    job->nslices = 0;
    for (uint64_t off = 0; off < bytes; off += per) {
        size_t i = job->nslices++;
        job->slice_offset[i] = off;
        job->slices[i] = (weft_slice_t){.peer = (int)i,
                                        .tier = WEFT_TIER_PEER,
                                        .bytes = bytes - off < per ? bytes - off : per};
    }
    return weft_op_move(op, job->slices, job->nslices, REDUCE_GRANULE, reduce_unit, job);
}
