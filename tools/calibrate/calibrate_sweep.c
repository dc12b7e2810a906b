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

/*
 * The fits' preconditions, checked after the fits because they need the fitted numbers; each
 * returns true, or false with the reason in why[WHY_LEN].
 *
 * The rate fit (weft_bg_fit_rate) needs drain-bound bursts: V/R > T_iss0(K = all, V) for the
 * rate sweep's volumes. A smaller burst's period is its issue time, so V/period measures how
 * fast the producers issue, not R (-V 64K gave 8.7 GB/s against 150). It is checked at the
 * smallest fitted volume, V_min = MAX/16: beyond it T_iss0 grows more slowly than V/R when the
 * producers issue faster than the drain, which a drain-bound V_min shows (T_iss0 = t0 + V/peak,
 * t0 >= 0). T_iss0(all, V_min) is the lower segment of the knee fit of K = all at V_min (the
 * T_iss0 line, extended beyond the knee as a row's table is); without that knee, the plateau
 * fit of K = all bounds it from above when -p >= V_min (T_iss0 is nondecreasing in V, and a
 * plateau that stalled on the capacity only measured more); with neither, R cannot be checked
 * and is reported as fitted, with a note saying so (a machine whose K = all shows no knee, as an
 * H200 with its ranks on one GPU, would otherwise get no R at the default -p).
 * Fitting R from the differences of periods between volumes instead would not help: where the
 * bursts are not drain-bound the period's slope is the issue cost per byte, not 1/R.
 */
#define WHY_LEN 320

static bool rate_drain_bound(const cal_t *c, int pattern, double r_bpus,
                             const weft_bg_knee_fit_t *knee_all,
                             const weft_bg_plateau_fit_t *plateau_all, char *why)
{
    double v_min = (double)(c->s->max_bytes >> (RATE_SETTINGS - 1)), drain_us = v_min / r_bpus;
    if (knee_all) {
        double t_iss0 =
            knee_all->t_knee_us + knee_all->below_us_per_byte * (v_min - knee_all->knee_bytes);
        if (drain_us > t_iss0)
            return true;
        snprintf(why, WHY_LEN,
                 "the rate sweep is not drain-bound: its smallest volume %.0f drains in V/R = "
                 "%.3g us, not more than T_iss0 = %.3g us (the knee fit's lower segment), so its "
                 "period is not V/R (raise -V)",
                 v_min, drain_us, t_iss0);
        return false;
    }
    if (plateau_all && (double)c->s->plateau_bytes >= v_min) {
        if (drain_us > plateau_all->t_iss0_us)
            return true;
        snprintf(why, WHY_LEN,
                 "the rate sweep is not shown drain-bound: its smallest volume %.0f drains in "
                 "V/R = %.3g us, not more than the %.3g us that bound T_iss0 there (the plateau at "
                 "-p, no knee fit at K = %d) (raise -V)",
                 v_min, drain_us, plateau_all->t_iss0_us, c->k[c->nk - 1]);
        return false;
    }
    if (c->rank == 0)
        printf("# %s: R not checked: no knee fit at K = %d, and -p %llu is below the smallest "
               "rate volume %.0f, so nothing shows the rate sweep drain-bound (pass -p %.0f to "
               "check it)\n",
               pattern_names[pattern], c->k[c->nk - 1], (unsigned long long)c->s->plateau_bytes,
               v_min, v_min);
    return true;
}

/*
 * The plateau fit (weft_bg_fit_plateau) takes the issue time after a gap >= V/R for T_iss0, but
 * that burst issues at max(T_iss0, (V - Q)/R): past the knee it stalls on the capacity (-p 32M
 * gave 209 us for a T_iss0 of 58 us). By the model it stalls iff its excess E = V - R*T_iss0
 * exceeds Q; a stalled plateau measures (V - Q)/R, so that E computed from it equals Q. The
 * fitted T_iss0 is therefore accepted when E <= Q/2, Q from its K's knee fit: a stalled one
 * passes only if the fit overstates Q twice over. Without a knee fit, or without a checked R
 * (Q is computed from it), Q is taken as 0: the burst must be issue-bound even with no capacity
 * (V/R <= T_iss0: the small K whose producers issue slower than the drain, which have no knee).
 * V <= V_k would not do: V_k comes from a doubling sweep and can lie well past the true knee
 * (13% on the synthetic alltoall at K = 8, whose -p 1M then read 13% high).
 */
static bool plateau_issue_bound(const cal_t *c, double r_bpus, const weft_bg_plateau_fit_t *pl,
                                const weft_bg_knee_fit_t *knee, bool rate_ok, char *why)
{
    double v = (double)c->s->plateau_bytes, e = v - r_bpus * pl->t_iss0_us;
    double q = knee && rate_ok ? knee->capacity_bytes : 0.0;
    if (e <= 0.5 * q)
        return true;
    const char *q_from = !rate_ok ? ": R failed its check" : knee ? "" : ": no knee fit";
    snprintf(why, WHY_LEN,
             "-p %.0f is not shown issue-bound: its excess V - R*T = %.4g bytes is above half the "
             "capacity (Q = %.4g bytes%s), so its issue time %.3g us may be a stall on the "
             "capacity, not T_iss0 (%s)",
             v, e, q, q_from, pl->t_iss0_us, rate_ok ? "lower -p" : "raise -V");
    return false;
}

static void check_failed(const cal_t *c, int pattern, const char *what, int K, const char *why)
{
    if (c->rank == 0)
        printf("# %s: %s fit failed (K = %d): %s\n", pattern_names[pattern], what, K, why);
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
    params->drain_gbps = rate.drain_gbps;
    double r_bpus = rate.drain_gbps * 1e3; /* bytes per us */

    /* Per K, the fits that succeeded, and their samples: the plateau sweep's mp[ki] at
     * smp[off[ki]], then the knee sweep's mk[ki]; the sweeps of every K fit in smp, which holds
     * as many samples as the repeat has points. The preconditions are checked after the loop,
     * and the rows fitted after them, as they need their outcome. */
    weft_bg_plateau_fit_t pl[MAX_K];
    weft_bg_knee_fit_t kn[MAX_K];
    bool pl_ok[MAX_K] = {false}, kn_ok[MAX_K] = {false};
    int off[MAX_K], mp[MAX_K], mk[MAX_K];
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
        off[ki] = ki == 0 ? 0 : off[ki - 1] + mp[ki - 1] + mk[ki - 1];
        weft_bg_sample_t *sp = smp + off[ki];
        mp[ki] = samples(c, first, P_ISSUE, false, sp);
        pl_ok[ki] =
            weft_bg_fit_plateau(sp, (size_t)mp[ki], rate.drain_gbps, &pl[ki]) == WEFT_SUCCESS;
        if (!pl_ok[ki])
            fit_failed(c, pattern, "plateau", K);

        int n = cal_knee_volumes(c, bytes);
        for (int i = 0; i < n; i++) {
            gaps[i] = fmax(10.0, 2.0 * (double)bytes[i] / r_bpus);
            hold[i] = cal_knee_holdout(i, n);
        }
        first = run_sweep(c, pattern, SWEEP_KNEE, K, bytes, gaps, hold, n);
        mk[ki] = samples(c, first, P_ISSUE, false, sp + mp[ki]);
        if (weft_bg_fit_knee(sp + mp[ki], (size_t)mk[ki], rate.drain_gbps, &kn[ki]) !=
            WEFT_SUCCESS) {
            fit_failed(c, pattern, "knee", K);
            continue;
        }
        kn_ok[ki] = true;
        q[Q_KNEE] = kn[ki].knee_bytes;
        q[Q_TKNEE] = kn[ki].t_knee_us;
        q[Q_CAP] = kn[ki].capacity_bytes;
    }

    /* R and what is computed from it (Q, every prediction) are reported only when the rate
     * sweep was drain-bound. V_k and T_iss0 do not take R's value, and an R fitted from bursts
     * that were not drain-bound is too low, which only makes their V/R tests stricter. */
    char why[WHY_LEN];
    int ka = c->nk - 1;
    bool rate_ok = rate_drain_bound(c, pattern, r_bpus, kn_ok[ka] ? &kn[ka] : NULL,
                                    pl_ok[ka] ? &pl[ka] : NULL, why);
    if (rate_ok) {
        p[0] = rate.drain_gbps;
    } else {
        check_failed(c, pattern, "rate", kall, why);
        for (int ki = 0; ki < c->nk; ki++)
            p[1 + ki * NQ + Q_CAP] = NAN;
    }
    bool pl_issue_bound[MAX_K] = {false};
    for (int ki = 0; ki < c->nk; ki++) {
        if (!pl_ok[ki])
            continue;
        pl_issue_bound[ki] =
            plateau_issue_bound(c, r_bpus, &pl[ki], kn_ok[ki] ? &kn[ki] : NULL, rate_ok, why);
        if (pl_issue_bound[ki])
            p[1 + ki * NQ + Q_TISS0] = pl[ki].t_iss0_us;
        else
            check_failed(c, pattern, "plateau", c->k[ki], why);
    }
    /* The rows, per K whose knee fitted, only with a checked R (every prediction needs it, and a
     * row's Q is computed from it); has_row[ki] says which K got one. A row's T_iss0 table takes
     * the knee sweep's points below the knee, and the plateau sweep's only when its plateau
     * passed plateau_issue_bound: a plateau that may have stalled on the capacity (or did not
     * fit) is no T_iss0, and -p can lie below V_k (which the row's samples are cut at), so its
     * points would enter the table at -p and every prediction interpolated near it. */
    for (int ki = 0; rate_ok && ki < c->nk; ki++) {
        if (!kn_ok[ki])
            continue;
        const weft_bg_sample_t *sr = smp + off[ki] + (pl_issue_bound[ki] ? 0 : mp[ki]);
        size_t mr = (size_t)(mk[ki] + (pl_issue_bound[ki] ? mp[ki] : 0));
        if (weft_bg_fit_row(sr, mr, rate.drain_gbps, c->k[ki], &kn[ki],
                            &params->row[params->nrows]) == WEFT_SUCCESS) {
            params->nrows++;
            has_row[ki] = true;
        } else {
            fit_failed(c, pattern, "row", c->k[ki]);
        }
    }
    cal_check_points(c, repeat, pattern, params->nrows > 0 ? params : NULL, has_row);
    free(params);
    free(smp);
}
