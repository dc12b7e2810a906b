/*
 * plan_cache.h - the partitioner's plans for the last few distinct inputs, kept for reuse.
 *
 * Pure: no I/O, no threads, no CUDA. A program calls the same collectives with the same sizes
 * over and over, and a plan depends only on the partitioner's inputs (the cost model, every
 * slice's peer, tier and size, the worker count and the granule), never on the buffers. The
 * cache keeps the plans of the most recently used distinct inputs; a hit costs a hash of the
 * inputs and one full comparison with the entry (a hash match alone is never trusted), where
 * weft_partition costs 0.3-1 us with warm CPU caches and 4-6 us with cold ones, as after an
 * idle gap (docs/results/2026-11-29-h200-s5.md).
 *
 * Each entry owns its plan and a copy of its inputs; a miss replaces the least recently used
 * entry, and a failed call changes no entry. A cache of zero entries partitions every call into
 * a plan of its own (the cache off, for measurement).
 *
 * Thread safety: none. One cache per communicator, used on its user thread.
 */
#ifndef WEFT_MODEL_PLAN_CACHE_H
#define WEFT_MODEL_PLAN_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model/partition.h"
#include "weft.h"

#define WEFT_PLAN_CACHE_MAX_ENTRIES 256

typedef struct weft_plan_cache weft_plan_cache_t;

/* A cache of `entries` plans (0 .. WEFT_PLAN_CACHE_MAX_ENTRIES). WEFT_ERR_INVALID_ARGUMENT for
 * an out-of-range count or a NULL out, WEFT_ERR_NO_MEMORY if it cannot be allocated. */
weft_status_t weft_plan_cache_create(int entries, weft_plan_cache_t **out);

/* Frees the cache and every plan in it. NULL is ignored. */
void weft_plan_cache_destroy(weft_plan_cache_t *cache);

/* weft_partition through the cache: *plan_out is the plan of these inputs (the same contract
 * and statuses as weft_partition, and WEFT_ERR_INVALID_ARGUMENT for a NULL cache or plan_out).
 * The plan belongs to the cache: it stays valid and unchanged until the next call on it. */
weft_status_t weft_plan_cache_partition(weft_plan_cache_t *cache, const weft_cost_model_t *model,
                                        const weft_slice_t *slices, size_t nslices, int nworkers,
                                        uint64_t granule_bytes, const weft_plan_t **plan_out);

/* Calls answered from the cache and calls that partitioned, since creation. */
void weft_plan_cache_counts(const weft_plan_cache_t *cache, uint64_t *hits, uint64_t *misses);

#endif /* WEFT_MODEL_PLAN_CACHE_H */
