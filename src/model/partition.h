/*
 * partition.h - cutting remote slices into units and assigning them to workers.
 *
 * Pure: no I/O, no threads, no CUDA. Given the remote slices of one collective (one contiguous
 * transfer each, between this rank and one peer, in one tier), the partitioner cuts every slice
 * into units of the tier's cut: its unit size rounded down to a multiple of granule_bytes, or one
 * granule where the unit size is smaller than a granule (so a unit can exceed the unit size:
 * cuts fall on multiples of granule_bytes, and an element or a vector is never split); the last
 * unit of a slice holds the rest.
 *
 * Bound: one slice makes at most WEFT_PARTITION_UNITS_PER_WORKER * nworkers units. A slice that
 * its tier's cut would split into more is cut instead at the smallest multiple of granule_bytes
 * that makes at most that many (or, where that multiple overflows, kept whole), so a plan holds
 * at most that many units per non-empty slice whatever the unit size (a 1-byte unit size does
 * not make bytes / granule_bytes units). Every byte is still covered exactly once and the
 * fan-out cap holds. It assigns the units to workers to minimise the makespan:
 * longest-processing-time first (units sorted by cost, descending; ties broken by slice index
 * then offset, so the result is deterministic), each unit going to the least-loaded worker
 * (ties: lowest index) among those allowed by the fan-out cap: at most H_t distinct workers
 * receive units of one peer. A worker already holding units of that peer is always allowed.
 *
 * The naive assignment (one peer per worker, round-robin: slice i -> worker i % nworkers, no
 * cutting) is provided as the baseline the benchmarks compare against.
 *
 * Memory: a plan owns growable arrays, reused across calls (no allocation once warm).
 */
#ifndef WEFT_MODEL_PARTITION_H
#define WEFT_MODEL_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "model/cost_model.h"
#include "weft.h"

/* Most units one slice makes, per worker (the bound above): enough for LPT to balance a single
 * slice to within 1/64 of a worker's share, and for stealing to even out the rest. */
#define WEFT_PARTITION_UNITS_PER_WORKER 64

typedef struct weft_slice {
    int peer;         /* rank at the other end; fan-out is counted per peer */
    weft_tier_t tier; /* cost class */
    uint64_t bytes;   /* a multiple of granule_bytes, except possibly at the very end */
} weft_slice_t;

typedef struct weft_unit {
    uint32_t slice;  /* index into the slices array */
    uint32_t worker; /* worker that runs this unit */
    uint64_t offset; /* byte offset inside the slice */
    uint64_t bytes;  /* > 0 */
    double cost_us;  /* tau of this unit */
} weft_unit_t;

typedef struct weft_plan {
    weft_unit_t *units;     /* grouped by worker: units of worker w are
                               units[worker_begin[w] .. worker_begin[w+1]), in LPT order */
    size_t nunits;
    size_t *worker_begin;   /* nworkers + 1 entries */
    double *worker_load_us; /* sum of unit costs per worker */
    int nworkers;
    double makespan_us;     /* max over workers of worker_load_us */
    /* capacities of the arrays above (internal) */
    size_t units_cap;
    int workers_cap;
    /* internal: one scratch block, reused across calls, carved by weft_partition into the
       sort buffers and the per-peer fan-out bookkeeping (layout in partition.c) */
    void *scratch;
    size_t scratch_bytes;
} weft_plan_t;

/* A plan with no arrays; pass to weft_partition, free with weft_plan_fini. */
void weft_plan_init(weft_plan_t *plan);
void weft_plan_fini(weft_plan_t *plan);

/* Cut and assign as described above. Slices with bytes == 0 produce no units. nworkers >= 1,
 * granule_bytes >= 1. Returns WEFT_ERR_INVALID_ARGUMENT for out-of-range arguments (including a
 * model that fails weft_cost_model_check), WEFT_ERR_NO_MEMORY if the arrays cannot grow;
 * the plan is left valid but unspecified on failure. */
weft_status_t weft_partition(const weft_cost_model_t *model, const weft_slice_t *slices,
                             size_t nslices, int nworkers, uint64_t granule_bytes,
                             weft_plan_t *plan);

/* How many units weft_partition would cut these slices into for nworkers workers (UINT64_MAX
 * past its limit), without assigning them: cheap, for choosing unit sizes. The arguments must be
 * valid for weft_partition (nworkers >= 1, granule_bytes >= 1, every tier in range). */
uint64_t weft_partition_units(const weft_cost_model_t *model, const weft_slice_t *slices,
                              size_t nslices, int nworkers, uint64_t granule_bytes);

/* The naive baseline: slice i goes whole to worker i % nworkers. Same statuses. */
weft_status_t weft_partition_naive(const weft_cost_model_t *model, const weft_slice_t *slices,
                                   size_t nslices, int nworkers, weft_plan_t *plan);

/* max(load) / mean(load) - 1 over workers that could have work, or 0 for an empty plan:
 * 0 means perfectly balanced. */
double weft_plan_imbalance(const weft_plan_t *plan);

#endif /* WEFT_MODEL_PARTITION_H */
