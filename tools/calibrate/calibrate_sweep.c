/*
 * calibrate_sweep.c - weft-calibrate's sweeps (calibrate.h): the settings of the rate, plateau
 * and knee sweeps of one pattern and repeat, which of them are held out, their points (measured
 * by calibrate_device.cu or drawn by calibrate_synthetic.c) kept as point_t, and the fits of
 * model/burst_gap.h on the points not held out; then cal_check_points predicts them all.
 *
 * Every rank runs the same sweeps on the same pooled points, so every rank fits the same
 * numbers; only rank 0 prints. Thread safety: single-threaded.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_prog.h"
#include "calibrate.h"

const double gap_factors[NGAPS] = {0, 0.25, 0.5, 0.75, 1.25, 1.5, 2, 3, 4};
const bool gap_holdout[NGAPS] = {false, false, false, true, false, true, false, true, false};
const char *const pattern_names[NUM_PATTERNS] = {"oneway", "local", "alltoall"};

static const int k_wanted[MAX_K - 1] = {1, 8, 32};

void cal_choose_k(cal_t *c)
{
    int kall = c->sms / c->ranks_per_gpu > 0 ? c->sms / c->ranks_per_gpu : 1;
    c->nk = 0;
    for (int i = 0; i < MAX_K - 1; i++)
        if (k_wanted[i] < kall)
            c->k[c->nk++] = k_wanted[i];
    c->k[c->nk++] = kall;
}

/* The results are sized for every point of every repeat. */
void cal_results_open(cal_t *c)
{
    size_t per_repeat = (size_t)c->nranks * POINTS_PER_RANK;
    c->h_all = calloc((size_t)MAX_SETTINGS * NPV * c->nranks, sizeof(double));
    c->params = calloc((size_t)c->s->repeats * NUM_PATTERNS * NPARAMS, sizeof(double));
    c->pts = calloc(per_repeat, sizeof(point_t));
    if (!c->h_all || !c->params || !c->pts)
        fatal("calloc: out of memory");
    for (int p = 0; p < NUM_PATTERNS; p++)
        for (int set = 0; set < NUM_SETS; set++) {
            tally_t *t = &c->tally[p][set];
            t->issue = calloc(per_repeat * c->s->repeats, sizeof(double));
            t->period = calloc(per_repeat * c->s->repeats, sizeof(double));
            if (!t->issue || !t->period)
                fatal("calloc: out of memory");
        }
}

void cal_results_close(cal_t *c)
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

/*
 * One sweep: the n settings (bytes[i], gap_us[i], held out if holdout[i]) with K blocks, measured
 * (or synthesized) on every rank, appended to c->pts as [rank][setting]. Returns the index of
 * the sweep's first point; the sweep has n * nranks.
 */
static int run_sweep(cal_t *c, int pattern, int sweep, int K, const uint64_t *bytes,
                     const double *gap_us, const bool *holdout, int n)
{
    if (c->s->synthetic)
        cal_synthesize(c, pattern, K, bytes, gap_us, n);
    else
        cal_measure(c, pattern, K, bytes, gap_us, n);
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
        out[m].gap_us = zero_gap ? 0 : cal_point_gap_us(pt);
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

int cal_knee_volumes(const cal_t *c, uint64_t *bytes)
{
    int n = 0;
    for (uint64_t v = MIN_BYTES; v <= c->s->max_bytes && n < MAX_SETTINGS; v *= 2)
        bytes[n++] = v;
    return n;
}

bool cal_knee_holdout(int i, int n)
{
    return i % 3 == 1 && i < n - 1;
}

void cal_run_pattern(cal_t *c, int repeat, int pattern, double *p)
{
    uint64_t bytes[MAX_SETTINGS];
    double gaps[MAX_SETTINGS];
    bool hold[MAX_SETTINGS];
    weft_bg_sample_t *smp = malloc((size_t)c->nranks * POINTS_PER_RANK * sizeof *smp);
    weft_bg_params_t *params = calloc(1, sizeof *params);
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
        cal_check_points(c, repeat, pattern, NULL, has_row); /* every later fit needs R */
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

        int n = cal_knee_volumes(c, bytes);
        for (int i = 0; i < n; i++) {
            gaps[i] = fmax(10.0, 2.0 * (double)bytes[i] / r_bpus);
            hold[i] = cal_knee_holdout(i, n);
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
    cal_check_points(c, repeat, pattern, params->nrows > 0 ? params : NULL, has_row);
    free(params);
    free(smp);
}
