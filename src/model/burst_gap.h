/*
 * burst_gap.h - the Burst-Gap model of device-initiated remote stores, its fitting from
 * measurements, and the planner that places compute between bursts (docs/burst_gap.md).
 *
 * A producer that issues a burst of V bytes of remote stores and then computes for a gap G sees
 * the stores drain toward the peer at a finite rate R with at most Q bytes outstanding:
 *
 *     issue time           T_iss  = max(T_iss0, V/R - G)
 *     steady-state period  P      = max(T_iss0 + G, V/R)           (= T_iss + G)
 *     recovery gap         G*     = [V/R - T_iss0]+
 *     capacity excess      E      = [V - R*T_iss0]+, the bound is E <= Q
 *     backpressure-free    iff V/(T_iss0 + G) <= R (that is G >= G*) and E <= Q
 *
 * T_iss0 = T_iss0(K, V) depends on the number K of producers (issuing SMs/CTAs) and on V;
 * Q = Q(K) on K; R is one number per platform. One weft_bg_params_t describes one traffic
 * pattern: one-way stores and the all-to-all (bidirectional) pattern are calibrated and held as
 * separate parameter sets.
 *
 * Units, everywhere in this module: volumes in bytes, times in microseconds (us), rates in GB/s
 * (1e9 bytes per second, so R bytes/us = drain_gbps * 1e3), as in model/cost_model.h.
 *
 * Pure: no I/O, no threads, no CUDA; every function is a function of its arguments and may be
 * called from any thread. The fitting functions allocate scratch with malloc and free it before
 * returning. Errors are recorded once with weft_error(), naming the function and the argument;
 * outputs (*_out) are written only on success.
 */
#ifndef WEFT_MODEL_BURST_GAP_H
#define WEFT_MODEL_BURST_GAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WEFT_BG_MAX_ROWS 16   /* producer counts K calibrated per parameter set */
#define WEFT_BG_MAX_POINTS 32 /* volumes V per producer count */
/* The largest volume of a table point or a sample, 2^53 bytes: every volume up to it converts to
 * a double exactly, so volumes that differ as integers differ as the doubles the model
 * computes with (above it, distinct volumes can round to one double and the interpolation would
 * divide by zero). Burst volumes given to the evaluation functions and the planner may be larger.
 */
#define WEFT_BG_MAX_BYTES (1ull << 53)

/*
 * T_iss0(K, V) is held as measured data: one row per calibrated K, each a small table of
 * (V, T_iss0) points, interpolated piecewise-linearly in V. Below the first point T_iss0 is the
 * first point's value (a smaller burst is never predicted to take less than the smallest one
 * measured: conservative); beyond the last point the last segment is extended (its slope is the
 * issue cost per byte of large bursts); a single point gives a constant. Between two calibrated
 * K, T_iss0 and Q are interpolated linearly in K; a K outside the calibrated range is rejected.
 * A table, not an affine law t0 + V/peak, because the issue time of small bursts is not affine
 * (latency plateau, then a slope that changes as the producers saturate), and the calibration
 * measures T_iss0 point by point anyway; an affine law is the special case of two points.
 */
typedef struct weft_bg_row {
    int producers;                        /* K of this row (>= 1) */
    int npoints;                          /* entries used below (1..WEFT_BG_MAX_POINTS) */
    uint64_t bytes[WEFT_BG_MAX_POINTS];   /* V of each point, strictly increasing, at most
                                             WEFT_BG_MAX_BYTES */
    double t_iss0_us[WEFT_BG_MAX_POINTS]; /* T_iss0(K, V): finite, > 0, nondecreasing in V */
    double capacity_bytes;                /* Q(K): finite, >= 0 */
} weft_bg_row_t;

typedef struct weft_bg_params {
    double drain_gbps;                   /* R: finite, > 0 */
    int nrows;                           /* rows used (1..WEFT_BG_MAX_ROWS) */
    weft_bg_row_t row[WEFT_BG_MAX_ROWS]; /* producers strictly increasing */
} weft_bg_params_t;

/* WEFT_SUCCESS if every field is in the range its comment gives, else WEFT_ERR_INVALID_ARGUMENT
 * naming the first field out of range. Every function below that takes params checks it. */
weft_status_t weft_bg_params_check(const weft_bg_params_t *params);

/*
 * Evaluation. Each takes the producer count K (within the calibrated range), the burst volume
 * in bytes and, where it matters, the gap in us (finite, >= 0). Statuses: WEFT_SUCCESS, or
 * WEFT_ERR_INVALID_ARGUMENT for a NULL pointer, bad params, K out of range or a bad gap.
 * Predictions are monotone: more bytes never predict a smaller T_iss0, issue time or period, and
 * a longer gap never predicts a longer issue time. G* and the excess grow with V only where
 * T_iss0 grows at most as fast as V/R (the producers issue faster than the drain), as measured
 * platforms do; a table whose T_iss0 grows faster makes large bursts issue-bound, with less to
 * recover.
 */

/* T_iss0(K, V) in us, interpolated as described above. */
weft_status_t weft_bg_t_iss0(const weft_bg_params_t *params, int producers, uint64_t bytes,
                             double *t_iss0_us_out);

/* Q(K) in bytes. */
weft_status_t weft_bg_capacity(const weft_bg_params_t *params, int producers,
                               double *capacity_bytes_out);

/* T_iss = max(T_iss0, V/R - G), in us. */
weft_status_t weft_bg_issue_time(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                 double gap_us, double *issue_us_out);

/* Steady-state period of bursts of V bytes each followed by a gap G: max(T_iss0 + G, V/R), us. */
weft_status_t weft_bg_period(const weft_bg_params_t *params, int producers, uint64_t bytes,
                             double gap_us, double *period_us_out);

/*
 * Issue time and period with the capacity stall included, for predicting measured bursts of any
 * volume (weft_bg_issue_time and weft_bg_period assume the capacity holds). The issuer stalls
 * while Q(K) bytes are outstanding, so a burst that starts with B0 bytes still draining cannot
 * end before (B0 + V - Q)/R. An isolated burst (B0 = 0) ends at (V - Q)/R at the earliest; a
 * periodic burst that stalls ends with Q outstanding, which its gap drains to B0 = [Q - R*G]+,
 * so the next one ends at max((V - Q)/R, V/R - G). Hence
 *
 *     T_stall = max(T_iss0, V/R - G, (V - Q)/R)
 *     P_stall = T_stall + G = max(T_iss0 + G, V/R, (V - Q)/R + G)
 *
 * Where (V - Q)/R <= T_iss0 (the capacity holds: E <= Q) they equal weft_bg_issue_time and
 * weft_bg_period bit for bit. Monotone like them: nondecreasing in V, T_stall nonincreasing in
 * G. Statuses as the evaluation functions above; both outputs must be non-NULL and are written
 * only on success.
 */
weft_status_t weft_bg_stall_times(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                  double gap_us, double *issue_us_out, double *period_us_out);

/* G* = [V/R - T_iss0]+ in us: the smallest gap after which the next burst issues at T_iss0. */
weft_status_t weft_bg_recovery_gap(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                   double *gap_us_out);

/* The capacity bound: *excess_bytes_out = [V - R*T_iss0]+ (bytes still outstanding when the
 * burst has issued), *fits_out = (excess <= Q(K)). */
weft_status_t weft_bg_capacity_check(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                     double *excess_bytes_out, bool *fits_out);

/* *free_out = (G >= G*) && ([V - R*T_iss0]+ <= Q(K)). G >= G* is the rate condition
 * V/(T_iss0 + G) <= R rearranged (it also handles T_iss0 + G = 0 without a division). */
weft_status_t weft_bg_backpressure_free(const weft_bg_params_t *params, int producers,
                                        uint64_t bytes, double gap_us, bool *free_out);

/*
 * Fitting. A sample is one measurement: a burst of `bytes`, the gap that followed it, and the
 * measured time (a period for the rate fit, an issue time for the others). Each fit returns an
 * estimate, a spread in the same unit (interquartile range, so a few outliers do not move it)
 * and the number of samples it rests on. Statuses: WEFT_ERR_INVALID_ARGUMENT for NULL pointers,
 * too few samples, bytes of 0 or above WEFT_BG_MAX_BYTES, non-finite or non-positive times, or
 * degenerate data (named in the message);
 * WEFT_ERR_NO_MEMORY if scratch cannot be allocated.
 */
typedef struct weft_bg_sample {
    uint64_t bytes; /* V of the burst: 1..WEFT_BG_MAX_BYTES */
    double gap_us;  /* G after it */
    double time_us; /* measured period or issue time */
} weft_bg_sample_t;

#define WEFT_BG_FIT_MIN_SAMPLES 3   /* rate and plateau fits */
#define WEFT_BG_KNEE_MIN_PER_SIDE 3 /* knee fit: samples on each side of the knee */

typedef struct weft_bg_rate_fit {
    double drain_gbps;        /* R: median over samples of V / period */
    double drain_spread_gbps; /* interquartile range of the per-sample V / period */
    size_t nsamples;          /* samples used */
} weft_bg_rate_fit_t;

/* R from zero-gap periodic bursts, whose period is V/R: the median of V/period, a robust slope
 * through the origin. Every sample must have gap_us == 0, bytes > 0, and be drain-bound
 * (V/R > T_iss0: large bursts), which the caller ensures; at least WEFT_BG_FIT_MIN_SAMPLES. */
weft_status_t weft_bg_fit_rate(const weft_bg_sample_t *samples, size_t nsamples,
                               weft_bg_rate_fit_t *fit_out);

typedef struct weft_bg_plateau_fit {
    double t_iss0_us;        /* T_iss0(K, V): median of the issue times on the plateau */
    double t_iss0_spread_us; /* interquartile range of those issue times */
    size_t nsamples;         /* samples on the plateau (gap_us >= V/R) */
} weft_bg_plateau_fit_t;

/* T_iss0 at one (K, V) from a gap sweep: all samples have the same bytes (> 0); those with
 * gap_us >= V/R are on the plateau whatever T_iss0 is (V/R - G <= 0 < T_iss0), and their median
 * issue time is the estimate. drain_gbps is R, from weft_bg_fit_rate. At least
 * WEFT_BG_FIT_MIN_SAMPLES samples must be on the plateau. */
weft_status_t weft_bg_fit_plateau(const weft_bg_sample_t *samples, size_t nsamples,
                                  double drain_gbps, weft_bg_plateau_fit_t *fit_out);

typedef struct weft_bg_knee_fit {
    double knee_bytes;            /* V_k: where the isolated-burst issue time leaves T_iss0 */
    double knee_spread_bytes;     /* residual_iqr_us / (above - below slope): the shift of the
                                     knee that a typical residual causes */
    double t_knee_us;             /* T_iss0(K, V_k): the lower segment at the knee, > 0 */
    double below_us_per_byte;     /* slope of the lower segment (issue cost per byte), >= 0 */
    double above_us_per_byte;     /* slope of the upper segment (stall-bound, about 1/R) */
    double residual_iqr_us;       /* interquartile range of the residuals of the two segments */
    double capacity_bytes;        /* Q(K) = V_k - R * T_iss0(K, V_k), clamped to [0, V_k] */
    double capacity_spread_bytes; /* |1 - R * below slope| * knee_spread_bytes */
    size_t nsamples;              /* samples used (all) */
} weft_bg_knee_fit_t;

/*
 * V_k and Q(K) from an isolated-burst sweep over V (each burst starts with the drain empty; the
 * gap is not read). The sweep is fitted by least squares with a continuous two-segment line
 * (a hinge): T = a + b*V + c*[V - V_k]+ with b >= 0 (the lower segment is an issue time, which
 * does not fall as V grows: where the unconstrained fit has b < 0 the lower segment is fitted
 * level), the knee searched over (volume-scaled) candidates between the sampled volumes and
 * refined by golden-section search; every candidate leaves at least WEFT_BG_KNEE_MIN_PER_SIDE
 * samples and two distinct volumes on each side. The lower segment is T_iss0(K, V); the upper
 * one, where the capacity stalls the issuer, has slope about 1/R. Degenerate
 * (WEFT_ERR_INVALID_ARGUMENT): too few distinct volumes, the best hinge does not get steeper
 * (c <= 0: no knee in the sweep), its issue time at the knee is not > 0 (so that
 * 0 <= Q(K) <= V_k), or its bend is not significant: a weighted F statistic of the hinge against
 * the best straight line, with each sample's noise modelled as the larger of a floor and a part
 * proportional to its time (both estimated from the residuals), must exceed 5^2. Noise makes
 * c > 0 on about half of all straight sweeps; this rejects all but about 1% of them
 * (burst_gap.c, knee_significance, says how). drain_gbps is R.
 */
weft_status_t weft_bg_fit_knee(const weft_bg_sample_t *samples, size_t nsamples, double drain_gbps,
                               weft_bg_knee_fit_t *fit_out);

/*
 * One row of the parameter table from the samples of one K: the T_iss0(K, V) table from the
 * samples that start with the drain empty, Q(K) from the knee fit. A sample qualifies if
 * bytes <= knee->knee_bytes (below the knee an isolated burst issues at T_iss0) and
 * gap_us >= V/R (whatever the previous burst of V bytes left outstanding has drained: the
 * isolated bursts of a knee sweep, the long gaps of a gap sweep); the others are skipped. Each
 * distinct qualifying volume becomes one point, its T_iss0 the median of its samples' times;
 * the medians are then made nondecreasing in V by pooling adjacent violators (a pooled run of
 * volumes takes the mean of their medians weighted by their sample counts: the weighted
 * least-squares nondecreasing fit), as the table requires. capacity_bytes = knee->capacity_bytes.
 * drain_gbps is R; knee is weft_bg_fit_knee's result for the same K. Statuses:
 * WEFT_ERR_INVALID_ARGUMENT for NULL pointers, a bad sample (as the fits), bad drain_gbps,
 * producers < 1, a knee_bytes or capacity_bytes that is not finite and >= 0, no qualifying
 * sample, or more than WEFT_BG_MAX_POINTS qualifying volumes; WEFT_ERR_NO_MEMORY. On success
 * the row passes weft_bg_params_check (as a table's only row).
 */
weft_status_t weft_bg_fit_row(const weft_bg_sample_t *samples, size_t nsamples, double drain_gbps,
                              int producers, const weft_bg_knee_fit_t *knee,
                              weft_bg_row_t *row_out);

/*
 * Planner. A fused kernel computes tiles of tile_compute_us each (G_tile) and emits a burst of
 * burst_bytes (V) per tile from K producers. The decision rule (docs/burst_gap.md):
 *
 *  1. Capacity first: if [V - R*T_iss0(K,V)]+ > Q(K), the burst stalls whatever the gap, so it
 *     is SPLIT into the fewest m >= 2 sub-bursts of ceil(V/m) bytes whose excess fits Q(K).
 *  2. Then the rate: the burst (or sub-burst) of v bytes needs a gap of G*(v). If G_tile >= G*,
 *     one tile of compute between bursts suffices (d = 1); otherwise INTERLEAVE d =
 *     ceil(G* / G_tile) tiles of compute between bursts (the smallest d with d*G_tile >= G*).
 *  3. NONE if the schedule as given (one burst of V after each tile) is backpressure-free.
 *
 * Interleaving places compute that does not itself emit a burst (the next expert wave, the
 * attention loop before the epilogue) between bursts; it cannot raise the long-run rate above R.
 */
typedef enum {
    WEFT_BG_ADVICE_NONE = 0,   /* backpressure-free as it is */
    WEFT_BG_ADVICE_INTERLEAVE, /* interleave_tiles (>= 2) tiles of compute between bursts */
    WEFT_BG_ADVICE_SPLIT       /* sub_bursts (>= 2), each followed by interleave_tiles tiles */
} weft_bg_advice_t;

typedef struct weft_bg_plan_result {
    /* The schedule as given: one burst of V bytes, then one tile of compute. */
    bool backpressure_free; /* rate_ok && capacity_ok */
    bool rate_ok;           /* G_tile >= recovery_gap_us */
    bool capacity_ok;       /* excess_bytes <= capacity_bytes */
    double t_iss0_us;       /* T_iss0(K, V) */
    double recovery_gap_us; /* G*(V) */
    double excess_bytes;    /* [V - R*T_iss0(K,V)]+ */
    double capacity_bytes;  /* Q(K) */
    /* The recommendation and the schedule it predicts. */
    weft_bg_advice_t advice;
    int sub_bursts;           /* m: 1 unless SPLIT */
    uint64_t sub_burst_bytes; /* ceil(V / m): the largest sub-burst */
    int interleave_tiles;     /* d >= 1: tiles of compute after each (sub-)burst */
    double planned_gap_us;    /* d * G_tile >= G*(sub_burst_bytes) */
    double planned_issue_us;  /* T_iss of one (sub-)burst followed by planned_gap_us */
    double planned_period_us; /* steady-state period of one (sub-)burst and its gap */
} weft_bg_plan_t;

#define WEFT_BG_MAX_SUB_BURSTS 65536 /* the split search stops here */

/* Plan for V = burst_bytes (> 0), K = producers, G_tile = tile_compute_us (finite, > 0), as
 * described above. Computation only; the split search costs O(m) interpolations. Statuses:
 * WEFT_ERR_INVALID_ARGUMENT for bad arguments or parameters, or when no split into at most
 * WEFT_BG_MAX_SUB_BURSTS sub-bursts fits, or the gap would need more than INT_MAX tiles. */
weft_status_t weft_bg_plan(const weft_bg_params_t *params, int producers, uint64_t burst_bytes,
                           double tile_compute_us, weft_bg_plan_t *plan_out);

#endif /* WEFT_MODEL_BURST_GAP_H */
