/*
 * copy_units.h - the unit function shared by the copying algorithms: slice p copies bytes from
 * src[p] to dst[p].
 */
#ifndef WEFT_OP_COPY_UNITS_H
#define WEFT_OP_COPY_UNITS_H

#include <stdint.h>
#include <string.h>

#include "core/comm.h"

typedef struct weft_copy_job {
    const uint8_t *src[WEFT_MAX_RANKS];
    uint8_t *dst[WEFT_MAX_RANKS];
} weft_copy_job_t;

static inline void weft_copy_unit(void *ctx, uint32_t slice, uint64_t offset, uint64_t bytes)
{
    const weft_copy_job_t *job = ctx;
    memcpy(job->dst[slice] + offset, job->src[slice] + offset, bytes);
}

#define WEFT_COPY_GRANULE 64

#endif /* WEFT_OP_COPY_UNITS_H */
