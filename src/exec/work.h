/*
 * work.h - the data movement of one collective step, described as data so that every executor
 * (CPU workers, CUDA thread blocks, copy engines) can run it.
 *
 * A work item is a list of slices. Each slice is one contiguous transfer with one peer (or a
 * piece of a reduction), in one tier, which the partitioner cuts into units for the workers:
 *   COPY   slice i copies slices[i].bytes from src[i] to dst[i];
 *   REDUCE slice i covers bytes [off[i], off[i] + slices[i].bytes) of one range: the result at
 *          dst[d] + off[i], for every d < ndsts, is the reduction, in order r = 0 .. nsrcs - 1,
 *          of src[r] + off[i] (slices are cut on multiples of 64 bytes, so no element is
 *          split); it is computed into dst[0] and copied from there to the others (a two-shot
 *          all-reduce that stores its reduced chunk into every peer's output);
 *   FANOUT slice i covers bytes [off[i], off[i] + slices[i].bytes) of one range, copied from
 *          src[0] + off[i] to dst[d] + off[i] for every d < ndsts: the source is read once
 *          (an all-gather that stores its input into every peer's output).
 * Pointers may be peers' memory (registered, mapped at the same address).
 */
#ifndef WEFT_EXEC_WORK_H
#define WEFT_EXEC_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "model/partition.h"
#include "weft.h"

#define WEFT_MAX_RANKS 256
#define WEFT_WORK_GRANULE 64 /* cuts fall on multiples of this many bytes */

/* The size of each of n parts that cover bytes, cut on the granule: ceil(bytes / n) rounded up
 * to WEFT_WORK_GRANULE (the last parts may then be short or empty). n >= 1; bytes at most 2^56
 * (the API's bound on a buffer), so the result is never 0 for bytes > 0 and nothing wraps. */
static inline uint64_t weft_work_share(uint64_t bytes, int n)
{
    uint64_t share = bytes / (uint64_t)n + (bytes % (uint64_t)n != 0);
    return (share / WEFT_WORK_GRANULE + (share % WEFT_WORK_GRANULE != 0)) * WEFT_WORK_GRANULE;
}

typedef enum { WEFT_WORK_COPY, WEFT_WORK_REDUCE, WEFT_WORK_FANOUT } weft_work_kind_t;

typedef struct weft_work {
    weft_work_kind_t kind;
    int nslices;
    weft_slice_t slices[WEFT_MAX_RANKS];
    const uint8_t *src[WEFT_MAX_RANKS];
    uint8_t *dst[WEFT_MAX_RANKS]; /* COPY: per slice; REDUCE, FANOUT: per destination */
    uint64_t off[WEFT_MAX_RANKS]; /* REDUCE, FANOUT: offset of each slice in the range */
    int ndsts;                    /* REDUCE, FANOUT */
    /* REDUCE only */
    int nsrcs;
    weft_dtype_t dtype;
    weft_redop_t op;
    int avg_divisor;
} weft_work_t;

/* Synchronisation with the peers around a work item. */
enum {
    WEFT_SYNC_PHASE = 0x1,       /* after the work: phase signal to and from every peer */
    WEFT_SYNC_DONE = 0x2,        /* after the work: closing signal to and from every peer */
    WEFT_SYNC_DONE_NOWAIT = 0x4, /* after the work: closing signal to every peer, no wait
                                    (host; the CUDA backend waits as for WEFT_SYNC_DONE) */
    WEFT_SYNC_CONTINUE = 0x8,    /* second step of an operation whose first step's phase signal
                                    already synchronised: no device-side entry wait */
    WEFT_SYNC_KEEP_SEQ = 0x10,   /* CUDA: the operation goes on after this launch (its entry
                                    step before copy-engine copies): keep the counter */
    WEFT_SYNC_STORES = 0x20      /* the work writes into peers' memory (a store form): the CUDA
                                    closing signal orders every block's writes at system scope
                                    (set by weft_op_execute) */
};

/* Set up a REDUCE over count elements: dst[0] = dst (ndsts 1), src[r] = srcs[r] for r < nsrcs, the
 * range cut into nslices near-equal slices (multiples of the granule; distinct pseudo-peers so the
 * fan-out cap does not serialise a reduction). */
void weft_work_reduce(weft_work_t *work, void *dst, const void *const *srcs, int nsrcs,
                      size_t count, weft_dtype_t dtype, weft_redop_t op, int avg_divisor,
                      int nslices);

/* Set up a FANOUT of bytes from src to each of dsts[0 .. ndsts - 1], the range cut into nslices
 * near-equal slices as for weft_work_reduce. */
void weft_work_fanout(weft_work_t *work, void *const *dsts, int ndsts, const void *src,
                      size_t bytes, int nslices);

/* Run bytes at offset of slice `slice` on the CPU (the host executor's unit of work). */
void weft_work_host_unit(const weft_work_t *work, uint32_t slice, uint64_t offset, uint64_t bytes);

#endif /* WEFT_EXEC_WORK_H */
