/*
 * reduce_units.h - the unit function shared by the reducing algorithms: reduce an element range
 * of nranks sources (one per rank, in rank order) into a destination.
 */
#ifndef WEFT_OP_REDUCE_UNITS_H
#define WEFT_OP_REDUCE_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm.h"
#include "model/partition.h"
#include "weft.h"

typedef struct weft_reduce_job {
    const void *srcs[WEFT_MAX_RANKS]; /* element 0 of the reduced range, per rank */
    void *dst;                        /* element 0 of the result */
    int nsrcs;
    weft_dtype_t dtype;
    weft_redop_t op;
    size_t esize;
    int avg_divisor;
    weft_slice_t slices[WEFT_MAX_RANKS];         /* the range cut for the partitioner */
    uint64_t slice_offset[WEFT_MAX_RANKS];       /* byte offset of each slice in the range */
    size_t nslices;
} weft_reduce_job_t;

/* Reduce the job's whole range (count elements) with the communicator's workers: the range is
 * cut into one slice per rank (multiples of 64 bytes; distinct pseudo-peers so the fan-out cap
 * does not serialise a reduction) and handed to weft_op_move. */
struct weft_op;
weft_status_t weft_reduce_run(struct weft_op *op, weft_reduce_job_t *job, size_t count);

#endif /* WEFT_OP_REDUCE_UNITS_H */
