/*
 * cost_model.h - the linear cost model of a transfer: tau(s) = alpha_t + s / beta_t per tier.
 *
 * Pure: no I/O, no threads, no CUDA. Every field carries its unit in its name. A tier is a class
 * of path with its own latency and bandwidth.
 */
#ifndef WEFT_MODEL_COST_MODEL_H
#define WEFT_MODEL_COST_MODEL_H

#include <stdint.h>

typedef enum {
    WEFT_TIER_SELF = 0,    /* a rank's own memory (local copy or reduction) */
    WEFT_TIER_PEER,        /* another rank, same NUMA node / NVLink peer */
    WEFT_TIER_REMOTE_NUMA, /* another rank on another NUMA node */
    WEFT_NUM_TIERS
} weft_tier_t;

typedef struct weft_tier_params {
    double lat_us;       /* alpha_t: fixed cost of one unit, microseconds (>= 0) */
    double bw_gbps;      /* beta_t: bandwidth, GB/s = 1e9 bytes per second (> 0) */
    uint64_t unit_bytes; /* S_t: slices are cut into units of this size (> 0), rounded down
                            to the partitioner's granule, at least one granule, and raised where
                            a slice would make more than WEFT_PARTITION_UNITS_PER_WORKER units
                            per worker (partition.h) */
    int fanout;          /* H_t: at most this many workers target one peer of this tier (>= 1) */
} weft_tier_params_t;

typedef struct weft_cost_model {
    weft_tier_params_t tier[WEFT_NUM_TIERS];
} weft_cost_model_t;

/* tau(bytes) = lat_us + bytes / (bw_gbps * 1e3) microseconds, for the given tier. */
double weft_cost_us(const weft_cost_model_t *model, weft_tier_t tier, uint64_t bytes);

/* Returns 0 if every tier's parameters are in range (see the field comments), -1 otherwise. */
int weft_cost_model_check(const weft_cost_model_t *model);

#endif /* WEFT_MODEL_COST_MODEL_H */
