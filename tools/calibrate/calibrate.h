/*
 * calibrate.h - what the files of weft-calibrate share: the sweeps' settings and tables, one
 * measured point, the run's state (cal_t) and the functions one file calls in another. The
 * program, its method and its files are described in weft_calibrate.c.
 *
 * Plain C, also included by calibrate_device.cu: the CUDA side of the state (communicator,
 * stream, buffers) is behind struct cal_device, defined there. Every function exits the process
 * on a failure (fatal in gpu_prog.h: status 1, "weft-calibrate: rank <r>: <what>: <why>").
 *
 * Thread safety: single-threaded; cal_t is the one instance main owns, and every function works
 * on it from the main thread.
 */
#ifndef WEFT_TOOLS_CALIBRATE_H
#define WEFT_TOOLS_CALIBRATE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

#include "model/burst_gap.h" /* C: no extern "C" of its own */

#define BLOCK_THREADS 256 /* threads of every kernel block */
#define MAX_REPEATS 100   /* the most -r takes */
#define WARM_BURSTS 2     /* bursts left out of each point's medians */
#define MAX_SETTINGS 32   /* settings per sweep */
#define MIN_BYTES 4096    /* smallest knee-sweep volume */
#define RATE_SETTINGS 5   /* MAX/16 .. MAX */
#define NGAPS 9           /* gaps of the plateau sweep */
#define MAX_K 4           /* producer counts: 1, 8, 32, all (calibrate_sweep.c) */

/* The plateau sweep's gaps, x V/R (calibrate_sweep.c). */
extern const double gap_factors[NGAPS];

/* Held out of the fits: the rate sweep's middle volume, the plateau gaps whose gap_holdout is set
 * (0.75, 1.5, 3 x V/R), and the knee volumes of cal_knee_holdout(). */
#define RATE_HOLDOUT 2
extern const bool gap_holdout[NGAPS];

enum { PAT_ONEWAY, PAT_LOCAL, PAT_ALLTOALL, NUM_PATTERNS };
extern const char *const pattern_names[NUM_PATTERNS];
enum { P_ISSUE, P_GAP, P_PERIOD, NPV }; /* the values of one point, in us */
/* Parameters per pattern and repeat: R, then per K slot T_iss0, V_k, T_iss0(V_k), Q. */
enum { Q_TISS0, Q_KNEE, Q_TKNEE, Q_CAP, NQ };
#define NPARAMS (1 + MAX_K * NQ)
enum { SWEEP_RATE, SWEEP_PLATEAU, SWEEP_KNEE, NUM_SWEEPS };
enum { SET_FIT, SET_HOLDOUT, NUM_SETS };
/* Points of one pattern and repeat, per rank: the rate sweep, then each K's two sweeps. */
#define POINTS_PER_RANK (RATE_SETTINGS + MAX_K * (NGAPS + MAX_SETTINGS))

typedef struct setup {
    int repeats, bursts;
    uint64_t max_bytes, plateau_bytes;
    const char *json;
    bool synthetic;          /* --synthetic: points drawn from a built-in platform, no GPU */
    uint64_t synthetic_seed; /* its noise's seed */
} setup_t;

/* One setting as one rank measured it, kept until its pattern's repeat has been fitted. */
typedef struct point {
    int sweep, producers, rank;
    bool holdout;                         /* kept out of the fits */
    uint64_t bytes;                       /* V */
    double gap_nominal_us;                /* the gap asked for */
    double v[NPV];                        /* measured issue time, gap, period (us) */
    double pred_issue_us, pred_period_us; /* NAN where the repeat's parameters do not cover K */
} point_t;

/* The relative errors of one pattern's points of one set, over every repeat. */
typedef struct tally {
    double *issue, *period; /* |predicted - measured| / measured, n of each */
    int n, unpredicted;     /* points with and without both errors */
} tally_t;

typedef struct cal_device cal_device_t; /* the CUDA side (calibrate_device.cu) */

typedef struct cal {
    const setup_t *s;
    cal_device_t *dev; /* NULL with --synthetic */
    int rank, nranks, sms, ranks_per_gpu, ngpus, nk;
    int k[MAX_K];        /* producer counts, increasing; k[nk - 1] = all */
    double iters_per_us; /* gap-loop iterations per microsecond */
    double *h_all;       /* the current sweep's points, every rank, [rank][setting][NPV] */
    double *params;      /* [repeat][pattern][NPARAMS], NAN where a fit failed */
    point_t *pts;        /* the current pattern and repeat's points, every rank */
    int npts;
    tally_t tally[NUM_PATTERNS][NUM_SETS];
    uint64_t rng; /* --synthetic: the noise's state (splitmix64) */
    FILE *json;
    int json_rows;
    char device[256], driver[32], date[32];
} cal_t;

/* The gap a point's burst was followed by, as the fits and the predictions take it: the measured
 * one, clamped at 0. */
static inline double cal_point_gap_us(const point_t *pt)
{
    return pt->v[P_GAP] > 0 ? pt->v[P_GAP] : 0;
}

/* ---------------------------------------------------------------------------------------------
 * The points measured on the GPU (calibrate_device.cu); collective: every rank calls each.
 * ------------------------------------------------------------------------------------------- */

/* Start the CUDA side into c->dev: the communicator (CUDA backend, ROA registration), a stream,
 * the machine (c->rank, nranks, device, sms, driver, ngpus, ranks_per_gpu), the producer counts
 * (cal_choose_k), every rank's receive buffer of nranks x max_bytes and the gap loop's rate
 * (c->iters_per_us). Without a CUDA device prints "SKIP: no CUDA device (<reason>)" and exits
 * with GPU_PROG_SKIP (77); exits with 1 on a failed call or outside 2..65 ranks. */
void cal_device_open(cal_t *c);

/* Wait until no peer stores any more, then free what cal_device_open made. */
void cal_device_close(cal_t *c);

/* Measure the n settings (bytes[i], gap_us[i]; n <= MAX_SETTINGS) of pattern with K blocks,
 * every rank at once, each a kernel of c->s->bursts bursts reduced to the medians of its issue
 * time, gap and period; every rank's points into c->h_all. Blocks until they are there. */
void cal_measure(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us, int n);

/* ---------------------------------------------------------------------------------------------
 * The points drawn from the built-in platform, --synthetic (calibrate_synthetic.c).
 * ------------------------------------------------------------------------------------------- */

/* The machine the platform stands for (three ranks, one per GPU) into c, and the noise's seed;
 * c->rank = 0 stands for every rank. */
void cal_synthetic_machine(cal_t *c);

/* cal_measure's points, drawn from the platform with noise, for every rank into c->h_all. */
void cal_synthesize(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us,
                    int n);

/* ---------------------------------------------------------------------------------------------
 * The sweeps and their fits (calibrate_sweep.c).
 * ------------------------------------------------------------------------------------------- */

/* The producer counts into c->k and c->nk: 1, 8, 32 below K = all (the SMs / ranks sharing a
 * GPU; c->sms and c->ranks_per_gpu set), then all. */
void cal_choose_k(cal_t *c);

/* Allocate, zeroed, what the sweeps fill (c->h_all, c->params, c->pts, c->tally), sized from
 * c->nranks and the setup; cal_results_close frees it. */
void cal_results_open(cal_t *c);
void cal_results_close(cal_t *c);

/* The knee sweep's volumes, MIN_BYTES doubling up to max_bytes, into bytes; returns their number
 * (at most MAX_SETTINGS). */
int cal_knee_volumes(const cal_t *c, uint64_t *bytes);

/* Knee-sweep setting i of n is held out: every third from the second, never the last, so every
 * held-out volume lies between two fitted ones. */
bool cal_knee_holdout(int i, int n);

/* One repeat of every sweep of one pattern, measured (or synthesized); its parameters into
 * p[NPARAMS] (NAN where a fit failed or its precondition does not hold: R where the rate sweep
 * is not shown drain-bound, and then Q too; T_iss0 where the plateau burst may stall on the
 * capacity; each with a line on rank 0 saying why), then the check of its points against them
 * (cal_check_points; nothing is predicted without R). Fits see only the points not held out. */
void cal_run_pattern(cal_t *c, int repeat, int pattern, double *p);

/* ---------------------------------------------------------------------------------------------
 * The held-out check and the report, rank 0's table and JSON (calibrate_report.c).
 * ------------------------------------------------------------------------------------------- */

/* Predict every point of the current repeat (c->pts) from params (NULL when R did not fit;
 * has_row[ki] says whether K = c->k[ki] has a row), tally the relative errors of the issue time
 * and the period into c->tally[pattern], and write the points as JSON rows (when c->json). */
void cal_check_points(cal_t *c, int repeat, int pattern, const weft_bg_params_t *params,
                      const bool *has_row);

/* Rank 0, before the sweeps: the header lines, and the JSON up to the points (machine, date,
 * options, what is held out). */
void cal_report_header(cal_t *c);

/* Rank 0, after the sweeps: the tables of the parameters and of the check, and the rest of the
 * JSON. */
void cal_report(cal_t *c);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TOOLS_CALIBRATE_H */
