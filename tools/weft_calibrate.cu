/*
 * weft_calibrate.cu - weft-calibrate: measures the Burst-Gap parameters (R, T_iss0(K, V), V_k,
 * Q(K)) of device-initiated remote stores and fits them with model/burst_gap.h (DESIGN.md,
 * "Burst-Gap model"; docs/burst_gap.md, "Calibration"). CUDA backend; built with CUDA only. C
 * written as C++ only where nvcc needs it: the kernels and their launches.
 *
 *   weftrun -n N weft-calibrate [-r REPEATS] [-b BURSTS] [-V MAX_BYTES] [-p PLATEAU_BYTES]
 *                               [--json FILE]
 *   weft-calibrate --synthetic SEED [...]      (no GPU: see below)
 *
 * Every rank weft_mallocs a receive buffer of N regions of MAX_BYTES (region s is written by
 * rank s), all-gathers its address (shadow addressing: the pointer is valid on every rank) and
 * waits for its registration with one weft_all_reduce on it. The producer kernel runs K blocks;
 * a burst of V bytes (all blocks together, 16-byte stores, split evenly over the blocks in
 * 512-byte warp chunks) is followed by a gap made of a dependent FMA chain whose result feeds the
 * next burst's data, calibrated to microseconds with %globaltimer first. Thread 0 of each block
 * reads %globaltimer after a __syncthreads before and after each burst. Per burst, across
 * blocks: start = min of the starts, issue time = max of the ends - start, gap = start - the
 * previous burst's end, period = start - the previous start. One setting (pattern, K, V, gap)
 * is one kernel of BURSTS bursts, every rank at once after a weft_barrier, reduced to the
 * medians over bursts 2.. of those times: a point. The points of all ranks are pooled (all-
 * gathered) and every rank fits the same numbers.
 *
 * Patterns: oneway (rank r stores to rank r+1 mod N), local (the same kernel storing to r's own
 * buffer: the control) and alltoall (every rank stores to every other rank at once, the burst
 * split evenly over the peers in warp chunks). Per pattern and repeat:
 *
 *   rate     zero-gap bursts, K = all SMs / ranks sharing the GPU, V = MAX/16 .. MAX
 *            -> R (weft_bg_fit_rate on the periods)
 *   plateau  V = PLATEAU_BYTES, gaps {0 .. 4} x V/R, for each K -> T_iss0(K, V)
 *            (weft_bg_fit_plateau on the issue times)
 *   knee     isolated bursts (gap max(10 us, 2 V/R)), V = 4 KiB .. MAX doubling, for each K
 *            -> V_k, T_iss0(K, V_k), Q(K) (weft_bg_fit_knee)
 *
 * K in {1, 8, 32, all}, clipped to all. A fit that fails (no knee in the sweep, too few plateau
 * points) is reported as null with its reason. Each parameter is reported as the median and the
 * spread (max - min) over the repeats. Rank 0 prints a table and writes --json FILE: machine,
 * date, options, parameters (median, spread, every repeat's value), the held-out check and the
 * points of every rank. Results are labelled "same-device" when all ranks share one GPU.
 *
 * Held-out check (docs/burst_gap.md, "Held-out check"). Some settings of each sweep are measured
 * but kept out of every fit: the middle volume of the rate sweep (MAX/4), the gaps {0.75, 1.5, 3}
 * x V/R of the plateau sweep, and every third volume of the knee sweep from the second on (never
 * the last), so each lies between fitted settings. The fits see the rest, exactly as they would
 * see the whole sweep. Each repeat's fits make a parameter table (R; per K whose knee fitted, the
 * T_iss0 table of weft_bg_fit_row and Q), and every point of that repeat, fitted or held out, gets
 * its predicted issue time and period from weft_bg_stall_times at its K, volume and measured gap.
 * The relative errors |predicted - measured| / measured are pooled per pattern over repeats, K
 * and ranks; rank 0 prints their count, median and max, held-out and fitted points apart, and
 * writes every point with its tag ("fit" or "holdout") and prediction to the JSON, from which
 * bench/plot_burst_gap.py draws measured against predicted.
 *
 * --synthetic SEED runs the same host path with no GPU and no communicator: three ranks' points
 * are drawn from a built-in platform (the stall model with 1% noise) instead of measured, so the
 * sweeps' bookkeeping, the fits, the check and the JSON can be tested anywhere.
 *
 * Exit status: 0 on success, 1 on a failed call, 2 on an argument error, 77 without a CUDA device
 * ("SKIP: no CUDA device (<reason>)"). Thread safety: single-threaded. Length: past the ~1000
 * lines of the style guide because the measurement, the synthetic source and the check share
 * the sweeps' bookkeeping (point_t, run_sweep); the check and the report (host C, about 300
 * lines) are the part to move to a file of their own if this grows.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "weft.h"
#include "bench_util.h"
#include "gpu_prog.h"
extern "C" {
#include "model/burst_gap.h"
#include "util/parse_bytes.h"
}

#define BLOCK_THREADS 256
#define MAX_REPEATS 100
#define WARM_BURSTS 2         /* bursts left out of each point's medians */
#define SPIN_CAL_ITERS 200000 /* gap-loop iterations timed by the calibration */
#define MAX_SETTINGS 32       /* settings per sweep */
#define MIN_BYTES 4096        /* smallest knee-sweep volume */
#define RATE_SETTINGS 5       /* MAX/16 .. MAX */
#define NGAPS 9
static const double gap_factors[NGAPS] = {0, 0.25, 0.5, 0.75, 1.25, 1.5, 2, 3, 4};
#define MAX_K 4
static const int k_wanted[MAX_K - 1] = {1, 8, 32};

/* Held out of the fits: the rate sweep's middle volume, these plateau gaps (0.75, 1.5, 3 x V/R),
 * and the knee volumes of knee_holdout(). */
#define RATE_HOLDOUT 2
static const bool gap_holdout[NGAPS] = {false, false, false, true, false, true, false, true, false};

enum { PAT_ONEWAY, PAT_LOCAL, PAT_ALLTOALL, NUM_PATTERNS };
static const char *const pattern_names[NUM_PATTERNS] = {"oneway", "local", "alltoall"};
enum { P_ISSUE, P_GAP, P_PERIOD, NPV }; /* the values of one point, in us */
/* Parameters per pattern and repeat: R, then per K slot T_iss0, V_k, T_iss0(V_k), Q. */
enum { Q_TISS0, Q_KNEE, Q_TKNEE, Q_CAP, NQ };
static const char *const q_names[NQ] = {"t_iss0_us", "knee_bytes", "t_knee_us", "capacity_bytes"};
#define NPARAMS (1 + MAX_K * NQ)
enum { SWEEP_RATE, SWEEP_PLATEAU, SWEEP_KNEE, NUM_SWEEPS };
static const char *const sweep_names[NUM_SWEEPS] = {"rate", "plateau", "knee"};
enum { SET_FIT, SET_HOLDOUT, NUM_SETS };
static const char *const set_names[NUM_SETS] = {"fit", "holdout"};
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

typedef struct cal {
    const setup_t *s;
    weft_comm_t comm;
    cudaStream_t stream;
    int rank, nranks, sms, ranks_per_gpu, ngpus, nk;
    int k[MAX_K];                   /* producer counts, increasing; k[nk - 1] = all */
    double iters_per_us;            /* gap-loop iterations per microsecond */
    uint8_t *buf;                   /* this rank's receive buffer (weft_malloc) */
    uint64_t *peer_buf;             /* host: every rank's buf */
    uint4 **d_dst;                  /* device: destination pointers of the current pattern */
    uint64_t *d_ts, *h_ts;          /* (block, burst, start/end) timestamps, ns */
    double *d_mine, *d_all, *h_all; /* points: this rank's, every rank's (device), host copy */
    double *params;                 /* [repeat][pattern][NPARAMS], NAN where a fit failed */
    point_t *pts;                   /* the current pattern and repeat's points, every rank */
    int npts;
    tally_t tally[NUM_PATTERNS][NUM_SETS];
    uint64_t rng; /* --synthetic: the noise's state (splitmix64) */
    FILE *json;
    int json_rows;
    char device[256], driver[32], date[32];
} cal_t;

/* ------------------------------------------------------------------------------------------- */
/* Device side                                                                                  */
/* ------------------------------------------------------------------------------------------- */

static __device__ __forceinline__ uint64_t globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The gap: iters x 8 dependent FMAs. The result feeds the next burst's data, so it stays. */
static __device__ __forceinline__ float spin(float x, long iters)
{
    for (long i = 0; i < iters; i++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            x = fmaf(x, 0.9999999f, 1e-7f);
    }
    return x;
}

/* One block of BLOCK_THREADS: the time of iters gap-loop iterations into *ns_out. */
static __global__ void spin_kernel(long iters, uint64_t *ns_out, float *sink)
{
    __syncthreads();
    uint64_t t0 = globaltimer_ns();
    float x = spin((float)threadIdx.x, iters);
    __syncthreads();
    if (threadIdx.x == 0)
        *ns_out = globaltimer_ns() - t0;
    if (x == -1.0f) /* never true; keeps x live */
        *sink = x;
}

/*
 * Bursts of vecs 16-byte stores, all blocks together, each block a contiguous range of 32-vector
 * (512-byte) chunks; chunk c goes to peer c mod npeers at chunk c / npeers of that peer's
 * destination. ts[(block * bursts + b) * 2 + {0, 1}] = the block's start and end of burst b.
 */
static __global__ void burst_kernel(uint4 *const *dst, int npeers, uint64_t vecs, int bursts,
                                    long gap_iters, uint64_t *ts)
{
    uint64_t t0 = 0, chunks = vecs / 32; /* t0: thread 0's start of the current burst */
    uint64_t lo = chunks * blockIdx.x / gridDim.x * 32,
             hi = chunks * (blockIdx.x + 1) / gridDim.x * 32;
    float x = (float)threadIdx.x;
    for (int b = 0; b < bursts; b++) {
        __syncthreads();
        if (threadIdx.x == 0)
            t0 = globaltimer_ns();
        uint32_t tag = __float_as_uint(x);
        for (uint64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            uint64_t c = i / 32;
            uint64_t off = (c / (uint64_t)npeers) * 32 + i % 32;
            dst[c % (uint64_t)npeers][off] =
                make_uint4(tag, (uint32_t)i, (uint32_t)b, tag ^ (uint32_t)i);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint64_t t1 = globaltimer_ns();
            ts[((uint64_t)blockIdx.x * bursts + b) * 2] = t0;
            ts[((uint64_t)blockIdx.x * bursts + b) * 2 + 1] = t1;
        }
        x = spin(x, gap_iters);
    }
}

/* ------------------------------------------------------------------------------------------- */
/* Host-side reductions                                                                         */
/* ------------------------------------------------------------------------------------------- */

/*
 * One point from the timestamps ts[(block * bursts + b) * 2 + {0, 1}] of nblocks blocks: the
 * medians over bursts WARM_BURSTS.. (bursts > WARM_BURSTS) of the issue time, the gap before the
 * burst and the period, in us (see the file comment). scratch holds bursts doubles.
 */
static void reduce_point(const uint64_t *ts, int nblocks, int bursts, double *scratch,
                         double out[NPV])
{
    uint64_t prev_start = 0, prev_end = 0;
    int n = bursts - WARM_BURSTS;
    double *issue = scratch, gap[64], period[64]; /* bursts <= 64, checked by the options */
    for (int b = 0; b < bursts; b++) {
        uint64_t start = UINT64_MAX, end = 0;
        for (int k = 0; k < nblocks; k++) {
            const uint64_t *t = ts + ((size_t)k * bursts + b) * 2;
            start = t[0] < start ? t[0] : start;
            end = t[1] > end ? t[1] : end;
        }
        if (b >= WARM_BURSTS) {
            issue[b - WARM_BURSTS] = (double)(end - start) / 1e3;
            gap[b - WARM_BURSTS] = (double)(int64_t)(start - prev_end) / 1e3;
            period[b - WARM_BURSTS] = (double)(start - prev_start) / 1e3;
        }
        prev_start = start;
        prev_end = end;
    }
    out[P_ISSUE] = bench_median_double(issue, (size_t)n);
    out[P_GAP] = bench_median_double(gap, (size_t)n);
    out[P_PERIOD] = bench_median_double(period, (size_t)n);
}

/* Median and spread (max - min) of the finite values among v[0..n) (n <= MAX_REPEATS, stride
 * apart); NAN and 0 when there are none. Returns the number of finite values. */
static int summarize(const double *v, int n, int stride, double *med_out, double *spread_out)
{
    double f[MAX_REPEATS];
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[(size_t)i * stride]))
            f[m++] = v[(size_t)i * stride];
    *med_out = m ? bench_median_double(f, (size_t)m) : NAN;
    *spread_out = m ? f[m - 1] - f[0] : 0; /* the median sorted f */
    return m;
}

/* ------------------------------------------------------------------------------------------- */
/* Measurement                                                                                  */
/* ------------------------------------------------------------------------------------------- */

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
}

/* Gap-loop iterations per microsecond: the median of 5 timed runs of SPIN_CAL_ITERS. */
static void calibrate_spin(cal_t *c)
{
    uint64_t *d_ns;
    float *d_sink;
    cuda_ok(cudaMalloc((void **)&d_ns, sizeof *d_ns), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&d_sink, sizeof *d_sink), "cudaMalloc");
    double rate[5];
    for (int i = 0; i < 5; i++) {
        spin_kernel<<<1, BLOCK_THREADS, 0, c->stream>>>(SPIN_CAL_ITERS, d_ns, d_sink);
        cuda_ok(cudaGetLastError(), "spin_kernel launch");
        uint64_t ns = 0;
        cuda_ok(cudaMemcpyAsync(&ns, d_ns, sizeof ns, cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync");
        cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after spin_kernel");
        rate[i] = ns ? SPIN_CAL_ITERS / (ns / 1e3) : 0;
    }
    c->iters_per_us = bench_median_double(rate, 5);
    if (!(c->iters_per_us > 0))
        fatal("gap-loop calibration: %%globaltimer did not advance");
    cuda_ok(cudaFree(d_ns), "cudaFree");
    cuda_ok(cudaFree(d_sink), "cudaFree");
}

/* Destination pointers of a pattern into c->d_dst; returns the number of peers. */
static int set_pattern(cal_t *c, int pattern)
{
    uint4 *dst[64]; /* nranks <= 65, checked at start */
    int n = 0;
    size_t region = (size_t)c->rank * c->s->max_bytes; /* this rank's region at every receiver */
    if (pattern == PAT_ONEWAY)
        dst[n++] = (uint4 *)(uintptr_t)(c->peer_buf[(c->rank + 1) % c->nranks] + region);
    else if (pattern == PAT_LOCAL)
        dst[n++] = (uint4 *)(c->buf + region);
    else
        for (int p = 1; p < c->nranks; p++)
            dst[n++] = (uint4 *)(uintptr_t)(c->peer_buf[(c->rank + p) % c->nranks] + region);
    cuda_ok(
        cudaMemcpyAsync(c->d_dst, dst, (size_t)n * sizeof *dst, cudaMemcpyHostToDevice, c->stream),
        "cudaMemcpyAsync (destinations)");
    return n;
}

/* The n settings (bytes[i], gap_us[i]) with K blocks, every rank at once; every rank's points
 * into c->h_all as [rank][setting][NPV]. */
static void measure(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us,
                    int n)
{
    int npeers = set_pattern(c, pattern);
    double mine[MAX_SETTINGS * NPV], scratch[64];
    for (int i = 0; i < n; i++) {
        long iters = (long)(gap_us[i] * c->iters_per_us + 0.5);
        weft_ok(weft_barrier(c->comm, c->stream), "weft_barrier");
        burst_kernel<<<K, BLOCK_THREADS, 0, c->stream>>>(c->d_dst, npeers, bytes[i] / 16,
                                                         c->s->bursts, iters, c->d_ts);
        cuda_ok(cudaGetLastError(), "burst_kernel launch");
        cuda_ok(cudaMemcpyAsync(c->h_ts, c->d_ts, (size_t)K * c->s->bursts * 2 * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, c->stream),
                "cudaMemcpyAsync (timestamps)");
        cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after burst_kernel");
        reduce_point(c->h_ts, K, c->s->bursts, scratch, mine + (size_t)i * NPV);
    }
    size_t count = (size_t)n * NPV;
    cuda_ok(
        cudaMemcpyAsync(c->d_mine, mine, count * sizeof(double), cudaMemcpyHostToDevice, c->stream),
        "cudaMemcpyAsync (points)");
    weft_ok(weft_all_gather(c->comm, c->d_mine, c->d_all, count, WEFT_FLOAT64, c->stream),
            "weft_all_gather of the points");
    cuda_ok(cudaMemcpyAsync(c->h_all, c->d_all, count * c->nranks * sizeof(double),
                            cudaMemcpyDeviceToHost, c->stream),
            "cudaMemcpyAsync (points to the host)");
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize after the points");
}

/*
 * --synthetic: the built-in platform. Pattern p drains at syn_drain_gbps[p]; K producers issue
 * at min(50 K, 600) GB/s after a 2 us latency (T_iss0 = 2 us + V / that rate), with
 * Q(K) = 2 MiB * min(K, 32) / 32 outstanding at most. The gap loop adds 0.3 us to every gap.
 * Measured times are the stall times of that model (weft_bg_stall_times) with 1% noise, uniform;
 * period = issue time + gap. Small K issues slower than the drain: no knee, so those rows do not
 * fit and their points stay unpredicted, as on a GPU whose few SMs cannot outpace the drain.
 */
#define SYN_RANKS 3
#define SYN_SMS 132
#define SYN_LOOP_US 0.3
static const double syn_drain_gbps[NUM_PATTERNS] = {150.0, 400.0, 100.0};

/* A factor 1 +- 1%, uniform (splitmix64). */
static double syn_noise(cal_t *c)
{
    uint64_t z = (c->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return 1.0 + 0.02 * ((double)(z >> 11) * 0x1.0p-53 - 0.5);
}

static void synthesize(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us,
                       int n)
{
    weft_bg_params_t t;
    memset(&t, 0, sizeof t);
    double peak_bpus = fmin(50.0 * K, 600.0) * 1e3;
    t.drain_gbps = syn_drain_gbps[pattern];
    t.nrows = 1;
    t.row[0].producers = K;
    t.row[0].npoints = 2;
    t.row[0].bytes[0] = MIN_BYTES;
    t.row[0].bytes[1] = c->s->max_bytes;
    t.row[0].t_iss0_us[0] = 2.0 + MIN_BYTES / peak_bpus;
    t.row[0].t_iss0_us[1] = 2.0 + (double)c->s->max_bytes / peak_bpus;
    t.row[0].capacity_bytes = 2097152.0 * fmin(K, 32) / 32;
    for (int r = 0; r < c->nranks; r++)
        for (int i = 0; i < n; i++) {
            double *v = c->h_all + ((size_t)r * n + i) * NPV, period;
            v[P_GAP] = (gap_us[i] + SYN_LOOP_US) * syn_noise(c);
            weft_ok(weft_bg_stall_times(&t, K, bytes[i], v[P_GAP], &v[P_ISSUE], &period),
                    "weft_bg_stall_times (synthetic)");
            v[P_ISSUE] *= syn_noise(c);
            v[P_PERIOD] = v[P_ISSUE] + v[P_GAP];
        }
}

/*
 * One sweep: the n settings (bytes[i], gap_us[i], held out if holdout[i]) with K blocks, measured
 * (or synthesized) on every rank, appended to c->pts as [rank][setting]. Returns the index of
 * the sweep's first point; the sweep has n * nranks.
 */
static int run_sweep(cal_t *c, int pattern, int sweep, int K, const uint64_t *bytes,
                     const double *gap_us, const bool *holdout, int n)
{
    if (c->s->synthetic)
        synthesize(c, pattern, K, bytes, gap_us, n);
    else
        measure(c, pattern, K, bytes, gap_us, n);
    int first = c->npts;
    for (int r = 0; r < c->nranks; r++)
        for (int i = 0; i < n; i++) {
            point_t *pt = &c->pts[c->npts++];
            pt->sweep = sweep;
            pt->producers = K;
            pt->rank = r;
            pt->holdout = holdout[i];
            pt->bytes = bytes[i];
            pt->gap_nominal_us = gap_us[i];
            memcpy(pt->v, c->h_all + ((size_t)r * n + i) * NPV, sizeof pt->v);
            pt->pred_issue_us = NAN;
            pt->pred_period_us = NAN;
        }
    return first;
}

/* The gap a point's burst was followed by, as the fits and the predictions take it: the measured
 * one, clamped at 0. */
static double point_gap_us(const point_t *pt)
{
    return pt->v[P_GAP] > 0 ? pt->v[P_GAP] : 0;
}

/* The fitting samples of the sweep whose points are c->pts[first, c->npts): the points not held
 * out; time is the issue time or the period. The rate fit's samples take gap 0 (the nominal gap;
 * the measured one is the loop overhead). Returns their number. */
static int samples(const cal_t *c, int first, int which, bool zero_gap, weft_bg_sample_t *out)
{
    int m = 0;
    for (int i = first; i < c->npts; i++) {
        const point_t *pt = &c->pts[i];
        if (pt->holdout)
            continue;
        out[m].bytes = pt->bytes;
        out[m].gap_us = zero_gap ? 0 : point_gap_us(pt);
        out[m].time_us = pt->v[which];
        m++;
    }
    return m;
}

static void fit_failed(const cal_t *c, int pattern, const char *what, int K)
{
    if (c->rank == 0)
        printf("# %s: %s fit failed (K = %d): %s\n", pattern_names[pattern], what, K,
               weft_last_error());
}

/* The knee sweep's volumes, MIN_BYTES doubling up to MAX_BYTES, into bytes; returns their
 * number (at most MAX_SETTINGS). */
static int knee_volumes(const cal_t *c, uint64_t *bytes)
{
    int n = 0;
    for (uint64_t v = MIN_BYTES; v <= c->s->max_bytes && n < MAX_SETTINGS; v *= 2)
        bytes[n++] = v;
    return n;
}

/* Knee-sweep setting i of n is held out: every third from the second, never the last, so every
 * held-out volume lies between two fitted ones. */
static bool knee_holdout(int i, int n)
{
    return i % 3 == 1 && i < n - 1;
}

/*
 * Predict every point of the current repeat from params (NULL when R did not fit; has_row[ki]
 * says whether K = c->k[ki] has a row), tally the relative errors of the issue time and the
 * period, and write the points as JSON rows (rank 0).
 */
static void check_points(cal_t *c, int repeat, int pattern, const weft_bg_params_t *params,
                         const bool *has_row)
{
    for (int i = 0; i < c->npts; i++) {
        point_t *pt = &c->pts[i];
        int ki = 0;
        while (c->k[ki] != pt->producers)
            ki++;
        if (params && has_row[ki])
            weft_ok(weft_bg_stall_times(params, pt->producers, pt->bytes, point_gap_us(pt),
                                        &pt->pred_issue_us, &pt->pred_period_us),
                    "weft_bg_stall_times (prediction)");
        int set = pt->holdout ? SET_HOLDOUT : SET_FIT;
        tally_t *t = &c->tally[pattern][set];
        double mi = pt->v[P_ISSUE], mp = pt->v[P_PERIOD];
        if (isfinite(pt->pred_issue_us) && isfinite(pt->pred_period_us) && mi > 0 && mp > 0) {
            t->issue[t->n] = fabs(pt->pred_issue_us - mi) / mi;
            t->period[t->n] = fabs(pt->pred_period_us - mp) / mp;
            t->n++;
        } else {
            t->unpredicted++;
        }
        if (!c->json)
            continue;
        fprintf(c->json,
                "%s\n    {\"repeat\":%d,\"pattern\":\"%s\",\"sweep\":\"%s\",\"set\":\"%s\","
                "\"producers\":%d,\"rank\":%d,\"bytes\":%llu,\"gap_nominal_us\":%.6g,"
                "\"issue_us\":%.6g,\"gap_us\":%.6g,\"period_us\":%.6g,\"predicted_issue_us\":",
                c->json_rows++ ? "," : "", repeat, pattern_names[pattern], sweep_names[pt->sweep],
                set_names[set], pt->producers, pt->rank, (unsigned long long)pt->bytes,
                pt->gap_nominal_us, pt->v[P_ISSUE], pt->v[P_GAP], pt->v[P_PERIOD]);
        json_num(c->json, pt->pred_issue_us);
        fputs(",\"predicted_period_us\":", c->json);
        json_num(c->json, pt->pred_period_us);
        fputc('}', c->json);
    }
}

/*
 * One repeat of every sweep of one pattern; its parameters into p[NPARAMS] (NAN if not fitted),
 * then the check of its points against them. Fits see only the points not held out.
 */
static void run_pattern(cal_t *c, int repeat, int pattern, double *p)
{
    uint64_t bytes[MAX_SETTINGS];
    double gaps[MAX_SETTINGS];
    bool hold[MAX_SETTINGS];
    weft_bg_sample_t *smp =
        (weft_bg_sample_t *)malloc((size_t)c->nranks * POINTS_PER_RANK * sizeof *smp);
    weft_bg_params_t *params = (weft_bg_params_t *)calloc(1, sizeof *params);
    if (!smp || !params)
        fatal("malloc: out of memory");
    for (int i = 0; i < NPARAMS; i++)
        p[i] = NAN;
    c->npts = 0;
    int kall = c->k[c->nk - 1];
    bool has_row[MAX_K] = {false};

    for (int i = 0; i < RATE_SETTINGS; i++) {
        bytes[i] = c->s->max_bytes >> (RATE_SETTINGS - 1 - i);
        gaps[i] = 0;
        hold[i] = i == RATE_HOLDOUT;
    }
    int first = run_sweep(c, pattern, SWEEP_RATE, kall, bytes, gaps, hold, RATE_SETTINGS);
    weft_bg_rate_fit_t rate;
    int m = samples(c, first, P_PERIOD, true, smp);
    if (weft_bg_fit_rate(smp, (size_t)m, &rate) != WEFT_SUCCESS) {
        fit_failed(c, pattern, "rate", kall);
        check_points(c, repeat, pattern, NULL, has_row); /* every later fit needs R */
        free(params);
        free(smp);
        return;
    }
    p[0] = rate.drain_gbps;
    params->drain_gbps = rate.drain_gbps;
    double r_bpus = rate.drain_gbps * 1e3; /* bytes per us */

    for (int ki = 0; ki < c->nk; ki++) {
        int K = c->k[ki];
        double *q = p + 1 + ki * NQ;
        double vr = (double)c->s->plateau_bytes / r_bpus;
        for (int i = 0; i < NGAPS; i++) {
            bytes[i] = c->s->plateau_bytes;
            gaps[i] = gap_factors[i] * vr;
            hold[i] = gap_holdout[i];
        }
        first = run_sweep(c, pattern, SWEEP_PLATEAU, K, bytes, gaps, hold, NGAPS);
        weft_bg_plateau_fit_t pl;
        int mp = samples(c, first, P_ISSUE, false, smp);
        if (weft_bg_fit_plateau(smp, (size_t)mp, rate.drain_gbps, &pl) == WEFT_SUCCESS)
            q[Q_TISS0] = pl.t_iss0_us;
        else
            fit_failed(c, pattern, "plateau", K);

        int n = knee_volumes(c, bytes);
        for (int i = 0; i < n; i++) {
            gaps[i] = fmax(10.0, 2.0 * (double)bytes[i] / r_bpus);
            hold[i] = knee_holdout(i, n);
        }
        first = run_sweep(c, pattern, SWEEP_KNEE, K, bytes, gaps, hold, n);
        weft_bg_knee_fit_t kn;
        int mk = samples(c, first, P_ISSUE, false, smp + mp);
        if (weft_bg_fit_knee(smp + mp, (size_t)mk, rate.drain_gbps, &kn) != WEFT_SUCCESS) {
            fit_failed(c, pattern, "knee", K);
            continue;
        }
        q[Q_KNEE] = kn.knee_bytes;
        q[Q_TKNEE] = kn.t_knee_us;
        q[Q_CAP] = kn.capacity_bytes;
        /* The row's T_iss0 table: both sweeps' points on the plateau, below the knee. */
        if (weft_bg_fit_row(smp, (size_t)(mp + mk), rate.drain_gbps, K, &kn,
                            &params->row[params->nrows]) == WEFT_SUCCESS) {
            params->nrows++;
            has_row[ki] = true;
        } else {
            fit_failed(c, pattern, "row", K);
        }
    }
    check_points(c, repeat, pattern, params->nrows > 0 ? params : NULL, has_row);
    free(params);
    free(smp);
}

/* ------------------------------------------------------------------------------------------- */
/* Setup and report                                                                             */
/* ------------------------------------------------------------------------------------------- */

/* Every rank's value of mine into all_out[nranks] (through a small cudaMalloc buffer). */
static void gather_u64(cal_t *c, uint64_t mine, uint64_t *all_out, const char *what)
{
    uint64_t *d;
    cuda_ok(cudaMalloc((void **)&d, (size_t)(c->nranks + 1) * sizeof *d), "cudaMalloc");
    cuda_ok(cudaMemcpyAsync(d, &mine, sizeof mine, cudaMemcpyHostToDevice, c->stream),
            "cudaMemcpyAsync");
    weft_ok(weft_all_gather(c->comm, d, d + 1, 1, WEFT_UINT64, c->stream), what);
    cuda_ok(cudaMemcpyAsync(all_out, d + 1, (size_t)c->nranks * sizeof *d, cudaMemcpyDeviceToHost,
                            c->stream),
            "cudaMemcpyAsync");
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    cuda_ok(cudaFree(d), "cudaFree");
}

/* Machine: device, SM count, driver; GPUs and ranks per GPU from the all-gathered device UUIDs. */
static void describe_machine(cal_t *c)
{
    int dev = 0, drv = 0;
    struct cudaDeviceProp prop;
    cuda_ok(cudaGetDevice(&dev), "cudaGetDevice");
    cuda_ok(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    snprintf(c->device, sizeof c->device, "%s", prop.name);
    c->sms = prop.multiProcessorCount;
    cuda_ok(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
    snprintf(c->driver, sizeof c->driver, "%d.%d", drv / 1000, drv % 1000 / 10);

    uint64_t id = 1469598103934665603ull; /* FNV-1a of the UUID */
    for (int i = 0; i < 16; i++)
        id = (id ^ (uint8_t)prop.uuid.bytes[i]) * 1099511628211ull;
    uint64_t *ids = (uint64_t *)calloc((size_t)c->nranks, sizeof *ids);
    if (!ids)
        fatal("calloc: out of memory");
    gather_u64(c, id, ids, "weft_all_gather of the device ids");
    c->ngpus = 0;
    c->ranks_per_gpu = 0;
    for (int r = 0; r < c->nranks; r++) {
        int same = 0, first = 1;
        for (int q = 0; q < c->nranks; q++) {
            same += ids[q] == ids[r];
            first &= !(q < r && ids[q] == ids[r]);
        }
        c->ngpus += first;
        c->ranks_per_gpu = same > c->ranks_per_gpu ? same : c->ranks_per_gpu;
    }
    free(ids);
}

/* The producer counts: k_wanted below K = all (the SMs / ranks sharing a GPU), then all. */
static void choose_k(cal_t *c)
{
    int kall = c->sms / c->ranks_per_gpu > 0 ? c->sms / c->ranks_per_gpu : 1;
    c->nk = 0;
    for (int i = 0; i < MAX_K - 1; i++)
        if (k_wanted[i] < kall)
            c->k[c->nk++] = k_wanted[i];
    c->k[c->nk++] = kall;
}

/* --synthetic: the machine the built-in platform stands for (one rank per GPU). */
static void synthetic_machine(cal_t *c)
{
    c->rank = 0;
    gpu_prog_rank = 0;
    c->nranks = SYN_RANKS;
    c->sms = SYN_SMS;
    c->ranks_per_gpu = 1;
    c->ngpus = SYN_RANKS;
    c->iters_per_us = NAN;
    c->rng = c->s->synthetic_seed;
    snprintf(c->device, sizeof c->device, "synthetic (seed %llu, no GPU)",
             (unsigned long long)c->s->synthetic_seed);
    snprintf(c->driver, sizeof c->driver, "none");
}

/* Receive buffer, its registration, and every rank's address. */
static void open_buffers(cal_t *c)
{
    size_t bytes = (size_t)c->nranks * c->s->max_bytes;
    weft_ok(weft_malloc(c->comm, (void **)&c->buf, bytes), "weft_malloc (receive buffer)");
    /* A collective on the buffer waits until every peer has mapped it (first use). */
    weft_ok(weft_all_reduce(c->comm, c->buf, c->buf, 1, WEFT_UINT64, WEFT_SUM, c->stream),
            "weft_all_reduce on the receive buffer");
    c->peer_buf = (uint64_t *)calloc((size_t)c->nranks, sizeof(uint64_t));
    if (!c->peer_buf)
        fatal("calloc: out of memory");
    gather_u64(c, (uint64_t)(uintptr_t)c->buf, c->peer_buf,
               "weft_all_gather of the buffer addresses");
    weft_ok(weft_barrier(c->comm, c->stream), "weft_barrier"); /* every buffer mapped everywhere */
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");

    size_t nts = (size_t)c->k[c->nk - 1] * c->s->bursts * 2, npts = MAX_SETTINGS * NPV;
    cuda_ok(cudaMalloc((void **)&c->d_dst, (size_t)c->nranks * sizeof(uint4 *)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&c->d_ts, nts * sizeof(uint64_t)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&c->d_mine, npts * sizeof(double)), "cudaMalloc");
    cuda_ok(cudaMalloc((void **)&c->d_all, npts * c->nranks * sizeof(double)), "cudaMalloc");
    c->h_ts = (uint64_t *)calloc(nts, sizeof(uint64_t));
    if (!c->h_ts)
        fatal("calloc: out of memory");
}

/* Host-side results: the sweep's points, every repeat's parameters, the points of a repeat and
 * the error tallies (sized for every point of every repeat). */
static void open_results(cal_t *c)
{
    size_t per_repeat = (size_t)c->nranks * POINTS_PER_RANK;
    c->h_all = (double *)calloc((size_t)MAX_SETTINGS * NPV * c->nranks, sizeof(double));
    c->params = (double *)calloc((size_t)c->s->repeats * NUM_PATTERNS * NPARAMS, sizeof(double));
    c->pts = (point_t *)calloc(per_repeat, sizeof(point_t));
    if (!c->h_all || !c->params || !c->pts)
        fatal("calloc: out of memory");
    for (int p = 0; p < NUM_PATTERNS; p++)
        for (int set = 0; set < NUM_SETS; set++) {
            tally_t *t = &c->tally[p][set];
            t->issue = (double *)calloc(per_repeat * c->s->repeats, sizeof(double));
            t->period = (double *)calloc(per_repeat * c->s->repeats, sizeof(double));
            if (!t->issue || !t->period)
                fatal("calloc: out of memory");
        }
}

static void close_results(cal_t *c)
{
    for (int p = NUM_PATTERNS - 1; p >= 0; p--)
        for (int set = NUM_SETS - 1; set >= 0; set--) {
            free(c->tally[p][set].period);
            free(c->tally[p][set].issue);
        }
    free(c->pts);
    free(c->params);
    free(c->h_all);
}

static void close_buffers(cal_t *c)
{
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    weft_ok(weft_barrier(c->comm, c->stream), "weft_barrier"); /* no peer still storing */
    cuda_ok(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize");
    weft_ok(weft_free(c->comm, c->buf), "weft_free");
    cuda_ok(cudaFree(c->d_dst), "cudaFree");
    cuda_ok(cudaFree(c->d_ts), "cudaFree");
    cuda_ok(cudaFree(c->d_mine), "cudaFree");
    cuda_ok(cudaFree(c->d_all), "cudaFree");
    free(c->peer_buf);
    free(c->h_ts);
}

/* One parameter's median and spread over the repeats: a table row and a JSON member. K is the
 * producer count of the row, 0 for R (one per pattern). */
static void report_param(cal_t *c, int pattern, int index, const char *name, int K)
{
    size_t stride = NUM_PATTERNS * NPARAMS;
    const double *v = c->params + (size_t)pattern * NPARAMS + index;
    double med, spread;
    int m = summarize(v, c->s->repeats, (int)stride, &med, &spread);
    char k[16] = "-";
    if (K > 0)
        snprintf(k, sizeof k, "%d", K);
    printf("%-9s %4s %-15s %12.4g %12.4g %3d/%d\n", pattern_names[pattern], k, name, med, spread, m,
           c->s->repeats);
    if (!c->json)
        return;
    fprintf(c->json, "\"%s\":{\"median\":", name);
    json_num(c->json, med);
    fputs(",\"spread\":", c->json);
    json_num(c->json, spread);
    fputs(",\"repeats\":[", c->json);
    for (int i = 0; i < c->s->repeats; i++) {
        fputs(i ? "," : "", c->json);
        json_num(c->json, v[i * stride]);
    }
    fputs("]}", c->json);
}

/* Median and max of v[0..n) (sorts v), as a table's columns and a JSON object. */
static void report_errors(cal_t *c, double *v, int n, const char *name)
{
    double med = n ? bench_median_double(v, (size_t)n) : NAN, max = n ? v[n - 1] : NAN;
    printf(" %12.4g %12.4g", med, max);
    if (!c->json)
        return;
    fprintf(c->json, ",\"%s\":{\"median\":", name);
    json_num(c->json, med);
    fputs(",\"max\":", c->json);
    json_num(c->json, max);
    fputc('}', c->json);
}

/* Rank 0: the held-out check, per pattern and set: the table and the JSON members. */
static void report_check(cal_t *c)
{
    printf("# model check: relative error |predicted - measured| / measured of the issue time and\n"
           "# the period, pooled over repeats, K and ranks; 'holdout' points were kept out of the\n"
           "# fits, 'fit' points were offered to them; unpredicted: no fitted row for the K\n"
           "#%-8s %-7s %7s %11s %12s %12s %12s %12s\n",
           "pattern", "set", "points", "unpredicted", "issue_med", "issue_max", "period_med",
           "period_max");
    for (int p = 0; p < NUM_PATTERNS; p++) {
        if (c->json)
            fprintf(c->json, ",\n    \"%s\": {", pattern_names[p]);
        for (int set = NUM_SETS - 1; set >= 0; set--) {
            tally_t *t = &c->tally[p][set];
            printf("%-9s %-7s %7d %11d", pattern_names[p], set_names[set], t->n, t->unpredicted);
            if (c->json)
                fprintf(c->json, "%s\"%s\": {\"points\":%d,\"unpredicted\":%d",
                        set == NUM_SETS - 1 ? "" : ", ", set_names[set], t->n, t->unpredicted);
            report_errors(c, t->issue, t->n, "issue_rel_err");
            report_errors(c, t->period, t->n, "period_rel_err");
            printf("\n");
            if (c->json)
                fputc('}', c->json);
        }
        if (c->json)
            fputc('}', c->json);
    }
}

/* Rank 0: the tables and the JSON of the parameters and of the check. */
static void report(cal_t *c)
{
    printf("# parameters: median and spread (max - min) over repeats that fitted; R in GB/s,\n"
           "# times in us, volumes in bytes\n#%-8s %4s %-15s %12s %12s %s\n",
           "pattern", "K", "parameter", "median", "spread", "fitted");
    if (c->json)
        fputs("\n  ],\n  \"params\": {", c->json);
    for (int p = 0; p < NUM_PATTERNS; p++) {
        if (c->json)
            fprintf(c->json, "%s\n    \"%s\": {", p ? "," : "", pattern_names[p]);
        report_param(c, p, 0, "drain_gbps", 0);
        if (c->json)
            fputs(",\"rows\":[", c->json);
        for (int ki = 0; ki < c->nk; ki++) {
            if (c->json)
                fprintf(c->json, "%s{\"producers\":%d,", ki ? "," : "", c->k[ki]);
            for (int qi = 0; qi < NQ; qi++) {
                if (c->json && qi)
                    fputc(',', c->json);
                report_param(c, p, 1 + ki * NQ + qi, q_names[qi], c->k[ki]);
            }
            if (c->json)
                fputc('}', c->json);
        }
        if (c->json)
            fputs("]}", c->json);
    }
    if (c->json)
        fputs("\n  },\n  \"check\": {\"metric\": \"|predicted - measured| / measured\"", c->json);
    report_check(c);
    if (c->json)
        fputs("\n  }\n}\n", c->json);
}

/* Rank 0: the header line and the JSON preamble (machine, date, options, what is held out). */
static void header(cal_t *c)
{
    const char *label = c->s->synthetic                  ? "synthetic"
                        : c->ngpus == 1 && c->nranks > 1 ? "same-device"
                                                         : "multi-device";
    printf("# weft-calibrate (%s): %s, %d SMs, driver %s, %d ranks on %d GPU(s), K up to %d, %s\n"
           "# %d repeats, %d bursts per setting, max %llu bytes, plateau %llu bytes, "
           "gap loop %.1f iterations/us\n",
           label, c->device, c->sms, c->driver, c->nranks, c->ngpus, c->k[c->nk - 1], c->date,
           c->s->repeats, c->s->bursts, (unsigned long long)c->s->max_bytes,
           (unsigned long long)c->s->plateau_bytes, c->iters_per_us);
    fflush(stdout);
    if (!c->json)
        return;
    fprintf(c->json,
            "{\n  \"tool\": \"weft-calibrate\",\n  \"label\": \"%s\",\n  \"date\": \"%s\",\n"
            "  \"machine\": {\"device\": \"%s\", \"sms\": %d, \"driver\": \"%s\", \"ranks\": %d, "
            "\"gpus\": %d, \"ranks_per_gpu\": %d},\n"
            "  \"options\": {\"repeats\": %d, \"bursts\": %d, \"max_bytes\": %llu, "
            "\"plateau_bytes\": %llu, \"block_threads\": %d, \"gap_iters_per_us\": ",
            label, c->date, c->device, c->sms, c->driver, c->nranks, c->ngpus, c->ranks_per_gpu,
            c->s->repeats, c->s->bursts, (unsigned long long)c->s->max_bytes,
            (unsigned long long)c->s->plateau_bytes, BLOCK_THREADS);
    json_num(c->json, c->iters_per_us);
    fprintf(c->json, "},\n  \"holdout\": {\"rate_bytes\": [%llu], \"plateau_gap_factors\": [",
            (unsigned long long)(c->s->max_bytes >> (RATE_SETTINGS - 1 - RATE_HOLDOUT)));
    for (int i = 0, n = 0; i < NGAPS; i++)
        if (gap_holdout[i])
            fprintf(c->json, "%s%g", n++ ? ", " : "", gap_factors[i]);
    fputs("], \"knee_bytes\": [", c->json);
    uint64_t bytes[MAX_SETTINGS];
    int n = knee_volumes(c, bytes);
    for (int i = 0, m = 0; i < n; i++)
        if (knee_holdout(i, n))
            fprintf(c->json, "%s%llu", m++ ? ", " : "", (unsigned long long)bytes[i]);
    fputs("]},\n  \"raw\": [", c->json);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weftrun -n N weft-calibrate [-r REPEATS] [-b BURSTS] [-V MAX_BYTES]\n"
            "                                  [-p PLATEAU_BYTES] [--json FILE]\n"
            "  -r, --repeats N     repeats of every sweep (1..100, default 5)\n"
            "  -b, --bursts N      bursts per setting, the first %d not counted (%d..64,\n"
            "                      default 12)\n"
            "  -V, --max-bytes S   largest burst: rate and knee sweeps (power of two,\n"
            "                      64K..1G, default 64M)\n"
            "  -p, --plateau S     burst of the gap sweep (multiple of 512, default 64K)\n"
            "      --json FILE     also write everything as one JSON object (rank 0)\n"
            "      --synthetic SEED  no GPU: draw three ranks' points from a built-in\n"
            "                      platform (seeded noise) to test the fits, the check and\n"
            "                      the JSON; run without weftrun\n",
            WARM_BURSTS, WARM_BURSTS + 3);
}

/* Parse the command line into s. Returns 0, 1 (help printed) or 2 (usage error). */
static int parse_args(int argc, char **argv, setup_t *s)
{
    static const struct option longopts[] = {{"repeats", required_argument, NULL, 'r'},
                                             {"bursts", required_argument, NULL, 'b'},
                                             {"max-bytes", required_argument, NULL, 'V'},
                                             {"plateau", required_argument, NULL, 'p'},
                                             {"json", required_argument, NULL, 'j'},
                                             {"synthetic", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    memset(s, 0, sizeof *s);
    s->repeats = 5;
    s->bursts = 12;
    s->max_bytes = 64u << 20;
    s->plateau_bytes = 64u << 10;
    int opt;
    while ((opt = getopt_long(argc, argv, "r:b:V:p:h", longopts, NULL)) != -1) {
        char *end;
        int bad = 0;
        switch (opt) {
        case 'r':
            bad = bench_parse_int(optarg, 1, MAX_REPEATS, &s->repeats);
            break;
        case 'b':
            bad = bench_parse_int(optarg, WARM_BURSTS + 3, 64, &s->bursts);
            break;
        case 'V':
            bad = weft_parse_bytes(optarg, &s->max_bytes) != 0 || s->max_bytes < (64u << 10) ||
                  s->max_bytes > (1u << 30) || (s->max_bytes & (s->max_bytes - 1));
            break;
        case 'p':
            bad = weft_parse_bytes(optarg, &s->plateau_bytes) != 0 || s->plateau_bytes == 0 ||
                  s->plateau_bytes % 512 || s->plateau_bytes > (1u << 30);
            break;
        case 'j':
            s->json = optarg;
            break;
        case 's':
            errno = 0;
            s->synthetic_seed = strtoull(optarg, &end, 0);
            bad = errno || end == optarg || *end;
            s->synthetic = true;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || s->plateau_bytes > s->max_bytes) {
        usage(stderr);
        return 2;
    }
    return 0;
}

/* Run the CUDA side up to the sweeps: communicator, stream, machine, buffers, gap loop. Returns
 * 77 (printing SKIP) without a CUDA device, else 0. */
static int open_device(cal_t *c)
{
    require_device();
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_CUDA;
    cfg.registration = WEFT_REGISTRATION_ROA;
    weft_ok(weft_comm_init(&c->comm, &cfg), "weft_comm_init");
    c->rank = weft_comm_rank(c->comm);
    c->nranks = weft_comm_size(c->comm);
    gpu_prog_rank = c->rank;
    if (c->nranks < 2 || c->nranks > 65)
        fatal("needs 2 to 65 ranks (weftrun -n N), got %d", c->nranks);
    /* weft_comm_init made the rank's device current on this thread. */
    cuda_ok(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    describe_machine(c);
    choose_k(c);
    open_buffers(c);
    calibrate_spin(c);
    return 0;
}

static void close_device(cal_t *c)
{
    close_buffers(c);
    cuda_ok(cudaStreamDestroy(c->stream), "cudaStreamDestroy");
    weft_ok(weft_comm_destroy(c->comm), "weft_comm_destroy");
}

int main(int argc, char **argv)
{
    gpu_prog_name = "weft-calibrate";
    setup_t s;
    int pa = parse_args(argc, argv, &s);
    if (pa != 0)
        return pa == 1 ? 0 : 2;

    cal_t c;
    memset(&c, 0, sizeof c);
    c.s = &s;
    time_t now = time(NULL);
    struct tm utc;
    if (!gmtime_r(&now, &utc) || !strftime(c.date, sizeof c.date, "%Y-%m-%dT%H:%M:%SZ", &utc))
        snprintf(c.date, sizeof c.date, "unknown");
    if (s.synthetic) {
        synthetic_machine(&c);
        choose_k(&c);
    } else if (open_device(&c) != 0) {
        return 77;
    }
    open_results(&c);
    if (c.rank == 0 && s.json && !(c.json = fopen(s.json, "w")))
        fatal("--json %s: %s", s.json, strerror(errno));
    if (c.rank == 0)
        header(&c);

    for (int r = 0; r < s.repeats; r++)
        for (int p = 0; p < NUM_PATTERNS; p++)
            run_pattern(&c, r, p, c.params + ((size_t)r * NUM_PATTERNS + p) * NPARAMS);
    if (c.rank == 0)
        report(&c);

    close_results(&c);
    if (!s.synthetic)
        close_device(&c);
    if (c.json && fclose(c.json) != 0)
        fatal("--json %s: %s", s.json, strerror(errno));
    return 0;
}
