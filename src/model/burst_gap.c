/*
 * burst_gap.c - the Burst-Gap model: evaluation of its equations over a calibrated parameter
 * table, robust fitting of R, T_iss0 and V_k/Q from measurements, and the planner.
 *
 * Design. Every evaluation resolves (K, V) into one operating point (T_iss0, Q, R in bytes/us)
 * and applies the equations of burst_gap.h to it; the equations live in one place each
 * (issue_us, period_us, recovery_us, excess_bytes), so the public functions and the planner
 * cannot disagree. T_iss0 is interpolated piecewise-linearly in V inside a row and linearly in K
 * between rows; a convex combination of nondecreasing functions is nondecreasing, which is what
 * makes the predictions monotone in V. The rate condition is always tested as G >= G*, never as a
 * division, so it agrees with the recovery gap bit for bit.
 *
 * Fitting uses order statistics (median, quartiles by linear interpolation between order
 * statistics) so that a minority of outliers moves neither the estimate nor its spread much. The
 * knee fit is a continuous two-segment (hinge) least-squares fit: for a fixed knee the model is
 * linear in its three coefficients (the intercept and the two segments' slopes, solved by QR,
 * volumes scaled into (0, 1]: accurate on sweeps whose volumes span many orders of magnitude),
 * the lower slope constrained to be >= 0 (refitted level where it would be negative);
 * the knee is searched on a grid of KNEE_GRID candidates per interval between adjacent volumes,
 * then refined by golden-section search between the best candidate's neighbours, so it is not
 * pinned to a measured volume; the best hinge is a knee only if it beats a straight line by more
 * than the noise (knee_significance). O(KNEE_GRID * n^2) for n samples (sweeps have tens to
 * hundreds of points). A row of the table is built from the samples below the knee (per-volume
 * medians, made nondecreasing by pooling adjacent violators, O(n log n)), so the calibration's
 * T_iss0 table is measured data, as burst_gap.h describes it. The stall times add the capacity term
 * (V - Q)/R to the capacity-free equations with one more max, which leaves them bit-identical
 * wherever the capacity holds.
 *
 * Thread safety: pure functions of their arguments; callable from any thread. Errors are
 * recorded with weft_error(), the only output of this file besides the *_out arguments.
 */
#include "model/burst_gap.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "util/log.h"

/* One operating point: the parameters resolved at (K, V). */
typedef struct bg_point {
    double t_iss0_us;
    double capacity_bytes;
    double bytes_per_us; /* R */
} bg_point_t;

/* The equations of burst_gap.h, over one operating point; v in bytes, gap in us. */

static double issue_us(const bg_point_t *p, double v, double gap_us)
{
    return fmax(p->t_iss0_us, v / p->bytes_per_us - gap_us);
}

static double period_us(const bg_point_t *p, double v, double gap_us)
{
    return fmax(p->t_iss0_us + gap_us, v / p->bytes_per_us);
}

/* The earliest end of a burst that starts with the drain empty, (V - Q)/R: the capacity stall. */
static double stall_us(const bg_point_t *p, double v)
{
    return (v - p->capacity_bytes) / p->bytes_per_us;
}

static double recovery_us(const bg_point_t *p, double v)
{
    return fmax(0.0, v / p->bytes_per_us - p->t_iss0_us);
}

static double excess_bytes(const bg_point_t *p, double v)
{
    return fmax(0.0, v - p->bytes_per_us * p->t_iss0_us);
}

/* Parameters */

static bool finite_positive(double x)
{
    return isfinite(x) && x > 0.0;
}

static weft_status_t check_params(const char *fn, const weft_bg_params_t *params)
{
    if (params == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    if (!finite_positive(params->drain_gbps))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: drain_gbps %g must be finite and > 0", fn,
                          params->drain_gbps);
    if (params->nrows < 1 || params->nrows > WEFT_BG_MAX_ROWS)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: nrows %d must be in 1..%d", fn,
                          params->nrows, WEFT_BG_MAX_ROWS);
    for (int r = 0; r < params->nrows; r++) {
        const weft_bg_row_t *row = &params->row[r];
        if (row->producers < 1)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: row[%d].producers %d must be >= 1",
                              fn, r, row->producers);
        if (r > 0 && row->producers <= params->row[r - 1].producers)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: row[%d].producers %d is not above row[%d]'s %d", fn, r,
                              row->producers, r - 1, params->row[r - 1].producers);
        if (!(isfinite(row->capacity_bytes) && row->capacity_bytes >= 0.0))
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: row[%d].capacity_bytes %g must be finite and >= 0", fn, r,
                              row->capacity_bytes);
        if (row->npoints < 1 || row->npoints > WEFT_BG_MAX_POINTS)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: row[%d].npoints %d must be in 1..%d",
                              fn, r, row->npoints, WEFT_BG_MAX_POINTS);
        for (int i = 0; i < row->npoints; i++) {
            if (!finite_positive(row->t_iss0_us[i]))
                return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                  "%s: row[%d].t_iss0_us[%d] %g must be finite and > 0", fn, r, i,
                                  row->t_iss0_us[i]);
            if (row->bytes[i] > WEFT_BG_MAX_BYTES)
                return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                  "%s: row[%d].bytes[%d] %llu is above WEFT_BG_MAX_BYTES (2^53)",
                                  fn, r, i, (unsigned long long)row->bytes[i]);
            if (i > 0 && row->bytes[i] <= row->bytes[i - 1])
                return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                  "%s: row[%d].bytes[%d] %llu is not above the previous %llu", fn,
                                  r, i, (unsigned long long)row->bytes[i],
                                  (unsigned long long)row->bytes[i - 1]);
            if (i > 0 && row->t_iss0_us[i] < row->t_iss0_us[i - 1])
                return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                  "%s: row[%d].t_iss0_us[%d] %g decreases (previous %g)", fn, r, i,
                                  row->t_iss0_us[i], row->t_iss0_us[i - 1]);
        }
    }
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_params_check(const weft_bg_params_t *params)
{
    return check_params("weft_bg_params_check", params);
}

/* T_iss0 of one row at v bytes: clamped below the first point, last segment extended above. */
static double row_t_iss0_us(const weft_bg_row_t *row, double v)
{
    int n = row->npoints;
    if (n == 1 || v <= (double)row->bytes[0])
        return row->t_iss0_us[0];
    int i = 0;
    while (i < n - 2 && v > (double)row->bytes[i + 1])
        i++;
    double x0 = (double)row->bytes[i], x1 = (double)row->bytes[i + 1];
    double y0 = row->t_iss0_us[i], y1 = row->t_iss0_us[i + 1];
    return y0 + (y1 - y0) * ((v - x0) / (x1 - x0));
}

/* The rows bracketing K and the weight of the upper one; false if K is outside the table. */
static bool find_rows(const weft_bg_params_t *params, int producers, int *lo_out, double *w_out)
{
    int n = params->nrows;
    if (producers < params->row[0].producers || producers > params->row[n - 1].producers)
        return false;
    int lo = 0;
    while (lo < n - 1 && producers >= params->row[lo + 1].producers)
        lo++;
    double w = 0.0;
    if (lo < n - 1) {
        w = (double)(producers - params->row[lo].producers) /
            (double)(params->row[lo + 1].producers - params->row[lo].producers);
    }
    *lo_out = lo;
    *w_out = w;
    return true;
}

/* The operating point at (K, v); params checked and K in range. */
static bg_point_t resolve(const weft_bg_params_t *params, int lo, double w, double v)
{
    const weft_bg_row_t *a = &params->row[lo];
    bg_point_t p = {row_t_iss0_us(a, v), a->capacity_bytes, params->drain_gbps * 1e3};
    if (w > 0.0) {
        const weft_bg_row_t *b = &params->row[lo + 1];
        p.t_iss0_us = (1.0 - w) * p.t_iss0_us + w * row_t_iss0_us(b, v);
        p.capacity_bytes = (1.0 - w) * a->capacity_bytes + w * b->capacity_bytes;
    }
    return p;
}

/* Check the common arguments and resolve the operating point at (K, bytes). */
static weft_status_t eval_args(const char *fn, const weft_bg_params_t *params, int producers,
                               uint64_t bytes, const void *out, int *lo_out, double *w_out,
                               bg_point_t *point_out)
{
    weft_status_t status = check_params(fn, params);
    if (status != WEFT_SUCCESS)
        return status;
    if (out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: output pointer is NULL", fn);
    int lo;
    double w;
    if (!find_rows(params, producers, &lo, &w))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: producers %d is outside the calibrated range %d..%d", fn, producers,
                          params->row[0].producers, params->row[params->nrows - 1].producers);
    if (lo_out != NULL) {
        *lo_out = lo;
        *w_out = w;
    }
    *point_out = resolve(params, lo, w, (double)bytes);
    return WEFT_SUCCESS;
}

/* eval_args for the functions that also take a gap: gap_us must be finite and >= 0. */
static weft_status_t eval_gap_args(const char *fn, const weft_bg_params_t *params, int producers,
                                   uint64_t bytes, double gap_us, const void *out,
                                   bg_point_t *point_out)
{
    weft_status_t status = eval_args(fn, params, producers, bytes, out, NULL, NULL, point_out);
    if (status != WEFT_SUCCESS)
        return status;
    if (!(isfinite(gap_us) && gap_us >= 0.0))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: gap_us %g must be finite and >= 0", fn,
                          gap_us);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_t_iss0(const weft_bg_params_t *params, int producers, uint64_t bytes,
                             double *t_iss0_us_out)
{
    bg_point_t p;
    weft_status_t status =
        eval_args("weft_bg_t_iss0", params, producers, bytes, t_iss0_us_out, NULL, NULL, &p);
    if (status != WEFT_SUCCESS)
        return status;
    *t_iss0_us_out = p.t_iss0_us;
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_capacity(const weft_bg_params_t *params, int producers,
                               double *capacity_bytes_out)
{
    bg_point_t p;
    weft_status_t status =
        eval_args("weft_bg_capacity", params, producers, 0, capacity_bytes_out, NULL, NULL, &p);
    if (status != WEFT_SUCCESS)
        return status;
    *capacity_bytes_out = p.capacity_bytes;
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_issue_time(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                 double gap_us, double *issue_us_out)
{
    static const char fn[] = "weft_bg_issue_time";
    bg_point_t p;
    weft_status_t status = eval_gap_args(fn, params, producers, bytes, gap_us, issue_us_out, &p);
    if (status != WEFT_SUCCESS)
        return status;
    *issue_us_out = issue_us(&p, (double)bytes, gap_us);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_period(const weft_bg_params_t *params, int producers, uint64_t bytes,
                             double gap_us, double *period_us_out)
{
    static const char fn[] = "weft_bg_period";
    bg_point_t p;
    weft_status_t status = eval_gap_args(fn, params, producers, bytes, gap_us, period_us_out, &p);
    if (status != WEFT_SUCCESS)
        return status;
    *period_us_out = period_us(&p, (double)bytes, gap_us);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_stall_times(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                  double gap_us, double *issue_us_out, double *period_us_out)
{
    static const char fn[] = "weft_bg_stall_times";
    bg_point_t p;
    weft_status_t status = eval_gap_args(fn, params, producers, bytes, gap_us, issue_us_out, &p);
    if (status != WEFT_SUCCESS)
        return status;
    if (period_us_out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: period_us_out is NULL", fn);
    /* Each a max of the capacity-free equation and the stall, so the two agree bit for bit
     * wherever the stall does not bind. */
    double v = (double)bytes, stall = stall_us(&p, v);
    *issue_us_out = fmax(issue_us(&p, v, gap_us), stall);
    *period_us_out = fmax(period_us(&p, v, gap_us), stall + gap_us);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_recovery_gap(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                   double *gap_us_out)
{
    bg_point_t p;
    weft_status_t status =
        eval_args("weft_bg_recovery_gap", params, producers, bytes, gap_us_out, NULL, NULL, &p);
    if (status != WEFT_SUCCESS)
        return status;
    *gap_us_out = recovery_us(&p, (double)bytes);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_capacity_check(const weft_bg_params_t *params, int producers, uint64_t bytes,
                                     double *excess_bytes_out, bool *fits_out)
{
    static const char fn[] = "weft_bg_capacity_check";
    bg_point_t p;
    weft_status_t status =
        eval_args(fn, params, producers, bytes, excess_bytes_out, NULL, NULL, &p);
    if (status != WEFT_SUCCESS)
        return status;
    if (fits_out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: fits_out is NULL", fn);
    double e = excess_bytes(&p, (double)bytes);
    *excess_bytes_out = e;
    *fits_out = e <= p.capacity_bytes;
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_backpressure_free(const weft_bg_params_t *params, int producers,
                                        uint64_t bytes, double gap_us, bool *free_out)
{
    static const char fn[] = "weft_bg_backpressure_free";
    bg_point_t p;
    weft_status_t status = eval_gap_args(fn, params, producers, bytes, gap_us, free_out, &p);
    if (status != WEFT_SUCCESS)
        return status;
    double v = (double)bytes;
    *free_out = gap_us >= recovery_us(&p, v) && excess_bytes(&p, v) <= p.capacity_bytes;
    return WEFT_SUCCESS;
}

/* Fitting */

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0 <= q <= 1) of n >= 1 sorted values, interpolating between order
 * statistics: position q * (n - 1). */
static double quantile_sorted(const double *x, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t i = (size_t)pos;
    if (i + 1 >= n)
        return x[n - 1];
    double f = pos - (double)i;
    return x[i] + f * (x[i + 1] - x[i]);
}

/* Sort x in place; the median and the interquartile range. */
static void median_iqr(double *x, size_t n, double *median_out, double *iqr_out)
{
    qsort(x, n, sizeof *x, compare_double);
    *median_out = quantile_sorted(x, n, 0.5);
    *iqr_out = quantile_sorted(x, n, 0.75) - quantile_sorted(x, n, 0.25);
}

static weft_status_t check_samples(const char *fn, const weft_bg_sample_t *samples, size_t nsamples,
                                   size_t min_samples, const void *out, const char *out_name)
{
    if (out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, out_name);
    if (samples == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: samples is NULL", fn);
    if (nsamples < min_samples)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: %zu samples, at least %zu needed", fn,
                          nsamples, min_samples);
    for (size_t i = 0; i < nsamples; i++) {
        if (samples[i].bytes == 0 || samples[i].bytes > WEFT_BG_MAX_BYTES)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: samples[%zu].bytes %llu must be in 1..WEFT_BG_MAX_BYTES (2^53)",
                              fn, i, (unsigned long long)samples[i].bytes);
        if (!finite_positive(samples[i].time_us))
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: samples[%zu].time_us %g must be finite and > 0", fn, i,
                              samples[i].time_us);
        if (!(isfinite(samples[i].gap_us) && samples[i].gap_us >= 0.0))
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: samples[%zu].gap_us %g must be finite and >= 0", fn, i,
                              samples[i].gap_us);
    }
    return WEFT_SUCCESS;
}

static weft_status_t check_drain(const char *fn, double drain_gbps)
{
    if (!finite_positive(drain_gbps))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: drain_gbps %g must be finite and > 0", fn,
                          drain_gbps);
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_fit_rate(const weft_bg_sample_t *samples, size_t nsamples,
                               weft_bg_rate_fit_t *fit_out)
{
    static const char fn[] = "weft_bg_fit_rate";
    weft_status_t status =
        check_samples(fn, samples, nsamples, WEFT_BG_FIT_MIN_SAMPLES, fit_out, "fit_out");
    if (status != WEFT_SUCCESS)
        return status;
    for (size_t i = 0; i < nsamples; i++) {
        if (samples[i].gap_us != 0.0)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: samples[%zu].gap_us is %g, zero-gap bursts expected", fn, i,
                              samples[i].gap_us);
    }
    double *gbps = malloc(nsamples * sizeof *gbps);
    if (gbps == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: scratch for %zu samples", fn, nsamples);
    /* 1 byte/us = 1e6 bytes/s = 1e-3 GB/s. */
    for (size_t i = 0; i < nsamples; i++)
        gbps[i] = (double)samples[i].bytes / samples[i].time_us / 1e3;
    double median, iqr;
    median_iqr(gbps, nsamples, &median, &iqr);
    free(gbps);
    fit_out->drain_gbps = median;
    fit_out->drain_spread_gbps = iqr;
    fit_out->nsamples = nsamples;
    return WEFT_SUCCESS;
}

weft_status_t weft_bg_fit_plateau(const weft_bg_sample_t *samples, size_t nsamples,
                                  double drain_gbps, weft_bg_plateau_fit_t *fit_out)
{
    static const char fn[] = "weft_bg_fit_plateau";
    weft_status_t status =
        check_samples(fn, samples, nsamples, WEFT_BG_FIT_MIN_SAMPLES, fit_out, "fit_out");
    if (status == WEFT_SUCCESS)
        status = check_drain(fn, drain_gbps);
    if (status != WEFT_SUCCESS)
        return status;
    for (size_t i = 1; i < nsamples; i++) {
        if (samples[i].bytes != samples[0].bytes)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: samples[%zu].bytes %llu differs from samples[0]'s %llu (one "
                              "volume per fit)",
                              fn, i, (unsigned long long)samples[i].bytes,
                              (unsigned long long)samples[0].bytes);
    }
    double drain_us = (double)samples[0].bytes / (drain_gbps * 1e3);
    double *t = malloc(nsamples * sizeof *t);
    if (t == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: scratch for %zu samples", fn, nsamples);
    size_t n = 0;
    for (size_t i = 0; i < nsamples; i++) {
        if (samples[i].gap_us >= drain_us)
            t[n++] = samples[i].time_us;
    }
    if (n < WEFT_BG_FIT_MIN_SAMPLES) {
        free(t);
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: %zu samples have gap_us >= V/R = %g us, at least %d needed", fn, n,
                          drain_us, WEFT_BG_FIT_MIN_SAMPLES);
    }
    double median, iqr;
    median_iqr(t, n, &median, &iqr);
    free(t);
    fit_out->t_iss0_us = median;
    fit_out->t_iss0_spread_us = iqr;
    fit_out->nsamples = n;
    return WEFT_SUCCESS;
}

typedef struct bg_xy {
    double x; /* bytes, divided by the largest volume (so in (0, 1]) */
    double y; /* us */
} bg_xy_t;

static int compare_x(const void *a, const void *b)
{
    double x = ((const bg_xy_t *)a)->x, y = ((const bg_xy_t *)b)->x;
    return (x > y) - (x < y);
}

/* The hinge fitted to pts by least squares, x scaled as in bg_xy: y = a + b*x + c*[x - knee]+,
 * held as its two segments' slopes, below = b and above = b + c, which are its coefficients in
 * the per-segment basis of hinge_value. */
typedef struct bg_hinge {
    double knee, a;
    double below, above; /* slopes, us per scaled byte */
    double sse;          /* sum of squared residuals, us^2 */
} bg_hinge_t;

/* The hinge at x in the per-segment basis (1, min(x, knee), [x - knee]+). */
static double hinge_value(const bg_hinge_t *h, double x)
{
    return h->a + h->below * fmin(x, h->knee) + h->above * fmax(0.0, x - h->knee);
}

/* Least squares over pts of y on the hinge's basis at a fixed knee, (1, min(x, knee),
 * [x - knee]+), or without the middle column when flat (the lower segment held level), into
 * sol = (a, below, above) (below = 0 when flat). The per-segment basis has its two slope columns
 * nonzero on opposite sides of the knee: they stay far from parallel however small the knee is
 * next to the largest volume (in the basis (1, x, [x - knee]+) the last two columns differ only
 * below the knee, and the normal equations square that ill-conditioning). Solved by QR, the rows
 * folded one at a time into the triangular factor by Givens rotations (no scratch, backward
 * stable), then back substitution. False if the design is numerically rank-deficient (the
 * caller's knees leave two distinct volumes on each side, so this does not happen with real
 * data). */
static bool solve_hinge(const bg_xy_t *pts, size_t n, double knee, bool flat, double sol[3])
{
    const int m = flat ? 2 : 3;
    /* r: upper triangle of R; z: Q^T y; norm2: squared column norms, for the rank test. */
    double r[3][3] = {{0.0}}, z[3] = {0.0}, norm2[3] = {0.0};
    for (size_t i = 0; i < n; i++) {
        double lower = fmin(pts[i].x, knee), upper = fmax(0.0, pts[i].x - knee), t = pts[i].y;
        double f[3] = {1.0, flat ? upper : lower, upper};
        for (int j = 0; j < m; j++)
            norm2[j] += f[j] * f[j];
        for (int j = 0; j < m; j++) {
            if (f[j] == 0.0)
                continue;
            double h = hypot(r[j][j], f[j]), c = r[j][j] / h, s = f[j] / h;
            r[j][j] = h;
            for (int k = j + 1; k < m; k++) {
                double rk = r[j][k];
                r[j][k] = c * rk + s * f[k];
                f[k] = c * f[k] - s * rk;
            }
            double zj = z[j];
            z[j] = c * zj + s * t;
            t = c * t - s * zj;
        }
    }
    double x[3];
    for (int j = m - 1; j >= 0; j--) {
        if (!(fabs(r[j][j]) > 1e-12 * sqrt(norm2[j])))
            return false;
        double acc = z[j];
        for (int k = j + 1; k < m; k++)
            acc -= r[j][k] * x[k];
        x[j] = acc / r[j][j];
    }
    sol[0] = x[0];
    sol[1] = flat ? 0.0 : x[1];
    sol[2] = flat ? x[1] : x[2];
    return true;
}

/* Fit the hinge at a fixed knee by least squares with its lower slope constrained to be >= 0:
 * the lower segment is T_iss0, which cannot fall as the volume grows. A negative lower slope
 * (noise on a flat plateau, or a few large volumes whose line points below zero at the knee)
 * once gave a T_iss0 below zero at the knee and a capacity above the knee volume. The problem
 * is a convex quadratic with one linear constraint, so when the unconstrained minimum breaks it
 * the constrained one lies on its boundary: the fit with the lower segment level. False if the
 * design is rank-deficient (solve_hinge). */
static bool fit_hinge(const bg_xy_t *pts, size_t n, double knee, bg_hinge_t *out)
{
    double sol[3];
    if (!solve_hinge(pts, n, knee, false, sol))
        return false;
    if (sol[1] < 0.0 && !solve_hinge(pts, n, knee, true, sol))
        return false;
    bg_hinge_t h = {knee, sol[0], sol[1], sol[2], 0.0};
    for (size_t i = 0; i < n; i++) {
        double e = pts[i].y - hinge_value(&h, pts[i].x);
        h.sse += e * e;
    }
    *out = h;
    return true;
}

#define KNEE_GRID 8               /* candidate knees per interval between adjacent volumes */
#define KNEE_REFINE 48            /* golden-section steps around the best candidate */
#define KNEE_MIN_T 5.0            /* a knee's significance must exceed this (knee_significance) */
#define KNEE_TIME_RESOLUTION 1e-9 /* noise floor, relative to the largest time (exact data) */

/* The median of the n >= 1 values of x, sorting them in place. */
static double median_of(double *x, size_t n)
{
    qsort(x, n, sizeof *x, compare_double);
    return quantile_sorted(x, n, 0.5);
}

/*
 * How much better the hinge h fits pts than the best straight line, in units of the noise: the
 * square root of F = (W_line - W_hinge) / max(W_hinge / (n - 4), 1), where W is the sum of
 * squared residuals weighted by 1/sigma_i^2. Least squares finds a slope change c != 0 in any
 * noisy line, c > 0 about half the time; this tells such a bend from a knee. The noise of a
 * timing grows with the time (a floor, then a part proportional to the time), and on a sweep of
 * doubling volumes the few largest times carry most of the unweighted squares, so an unweighted
 * F test both takes the noise of the largest bursts for knees and scores real knees low. Hence
 * sigma_i = max(s_abs, s_rel * y_i, KNEE_TIME_RESOLUTION * max y): s_abs is the median absolute
 * residual of the samples with times at or below the median time, s_rel the median relative
 * residual of those at or above it, each divided by 0.6745 (standard deviations for normal
 * noise). The line is the weighted least-squares line (its best chance); the hinge is the
 * unweighted fit. The denominator's floor of 1 trusts the noise model where the residuals are
 * smaller than it predicts. Times are divided by the largest one, so no square overflows. On
 * straight lines with additive, proportional or mixed noise (2 to 3 samples per volume, 10 to 40
 * samples) the statistic exceeded KNEE_MIN_T in at most about 1% of sweeps; the capacity knees
 * of the recorded H200 sweeps score 9 to 20. scratch holds 2n values.
 */
static double knee_significance(const bg_xy_t *pts, size_t n, const bg_hinge_t *h, double *scratch)
{
    double *low = scratch, *high = scratch + n;
    for (size_t i = 0; i < n; i++)
        low[i] = pts[i].y;
    double y_median = median_of(low, n), unit = 1.0 / low[n - 1];
    size_t nlow = 0, nhigh = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(pts[i].y - hinge_value(h, pts[i].x));
        if (pts[i].y <= y_median)
            low[nlow++] = e * unit;
        if (pts[i].y >= y_median)
            high[nhigh++] = e / pts[i].y;
    }
    double s_abs = median_of(low, nlow) / 0.6745, s_rel = median_of(high, nhigh) / 0.6745;
    /* Weights, then the weighted line about the weighted means (no cancellation). */
    double sw = 0.0, swx = 0.0, swy = 0.0;
    for (size_t i = 0; i < n; i++) {
        double s = fmax(fmax(s_abs, s_rel * pts[i].y * unit), KNEE_TIME_RESOLUTION);
        scratch[i] = 1.0 / (s * s);
        sw += scratch[i];
        swx += scratch[i] * pts[i].x;
        swy += scratch[i] * pts[i].y * unit;
    }
    double mx = swx / sw, my = swy / sw, sxx = 0.0, sxy = 0.0;
    for (size_t i = 0; i < n; i++) {
        sxx += scratch[i] * (pts[i].x - mx) * (pts[i].x - mx);
        sxy += scratch[i] * (pts[i].x - mx) * (pts[i].y * unit - my);
    }
    double slope = sxy / sxx, w_line = 0.0, w_hinge = 0.0;
    for (size_t i = 0; i < n; i++) {
        double el = pts[i].y * unit - (my + slope * (pts[i].x - mx));
        double eh = (pts[i].y - hinge_value(h, pts[i].x)) * unit;
        w_line += scratch[i] * el * el;
        w_hinge += scratch[i] * eh * eh;
    }
    return sqrt(fmax(0.0, w_line - w_hinge) / fmax(w_hinge / (double)(n - 4), 1.0));
}

weft_status_t weft_bg_fit_knee(const weft_bg_sample_t *samples, size_t nsamples, double drain_gbps,
                               weft_bg_knee_fit_t *fit_out)
{
    static const char fn[] = "weft_bg_fit_knee";
    weft_status_t status =
        check_samples(fn, samples, nsamples, 2 * WEFT_BG_KNEE_MIN_PER_SIDE, fit_out, "fit_out");
    if (status == WEFT_SUCCESS)
        status = check_drain(fn, drain_gbps);
    if (status != WEFT_SUCCESS)
        return status;
    bg_xy_t *pts = malloc(nsamples * sizeof *pts);
    if (pts == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: scratch for %zu samples", fn, nsamples);
    double *resid = malloc(2 * nsamples * sizeof *resid);
    if (resid == NULL) {
        status = weft_error(WEFT_ERR_NO_MEMORY, "%s: scratch for %zu samples", fn, nsamples);
        goto err_free_pts;
    }
    double scale = 0.0;
    for (size_t i = 0; i < nsamples; i++)
        scale = fmax(scale, (double)samples[i].bytes);
    for (size_t i = 0; i < nsamples; i++)
        pts[i] = (bg_xy_t){(double)samples[i].bytes / scale, samples[i].time_us};
    qsort(pts, nsamples, sizeof *pts, compare_x);

    /* Candidate knees lie in [x_i, x_{i+1}) between adjacent distinct volumes, with at least
     * WEFT_BG_KNEE_MIN_PER_SIDE samples and two distinct volumes on each side: samples at or
     * below the knee follow the lower segment. best_lo/best_hi bracket the best candidate. */
    bg_hinge_t best = {0.0, 0.0, 0.0, 0.0, INFINITY};
    double best_lo = 0.0, best_hi = 0.0;
    size_t below = 0, distinct_below = 0;
    for (size_t i = 0; i + 1 < nsamples; i++) {
        below++;
        distinct_below += i == 0 || pts[i].x != pts[i - 1].x;
        if (pts[i + 1].x == pts[i].x)
            continue;
        size_t distinct_above = 1;
        for (size_t j = i + 2; j < nsamples && distinct_above < 2; j++)
            distinct_above += pts[j].x != pts[j - 1].x;
        if (below < WEFT_BG_KNEE_MIN_PER_SIDE || nsamples - below < WEFT_BG_KNEE_MIN_PER_SIDE ||
            distinct_below < 2 || distinct_above < 2)
            continue;
        double step = (pts[i + 1].x - pts[i].x) / KNEE_GRID;
        for (int g = 0; g < KNEE_GRID; g++) {
            bg_hinge_t h;
            double knee = pts[i].x + g * step;
            if (fit_hinge(pts, nsamples, knee, &h) && h.sse < best.sse) {
                best = h;
                best_lo = fmax(pts[i].x, knee - step);
                best_hi = fmin(pts[i + 1].x, knee + step);
            }
        }
    }
    if (!isfinite(best.sse)) {
        status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "%s: no knee leaves %d samples and 2 distinct volumes on each side", fn,
                            WEFT_BG_KNEE_MIN_PER_SIDE);
        goto err_free_resid;
    }
    /* Refine between the neighbouring candidates; SSE is smooth there. */
    double lo = best_lo, hi = best_hi;
    const double phi = 0.6180339887498949;
    for (int it = 0; it < KNEE_REFINE; it++) {
        double k1 = hi - phi * (hi - lo), k2 = lo + phi * (hi - lo);
        bg_hinge_t h1, h2;
        bool ok1 = fit_hinge(pts, nsamples, k1, &h1), ok2 = fit_hinge(pts, nsamples, k2, &h2);
        if (ok1 && h1.sse < best.sse)
            best = h1;
        if (ok2 && h2.sse < best.sse)
            best = h2;
        if (ok1 && (!ok2 || h1.sse <= h2.sse))
            hi = k2;
        else
            lo = k1;
    }
    if (!(best.above > best.below)) {
        status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "%s: no knee in the sweep (the issue time does not get steeper with "
                            "the volume): extend the sweep to larger volumes",
                            fn);
        goto err_free_resid;
    }
    double significance = knee_significance(pts, nsamples, &best, resid);
    if (!(significance > KNEE_MIN_T)) {
        status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "%s: no significant knee in the sweep (the best two-segment fit, knee "
                            "at %g bytes, beats a straight line by %.3g noise units, more than %g "
                            "needed): extend the sweep to larger volumes",
                            fn, best.knee * scale, significance, KNEE_MIN_T);
        goto err_free_resid;
    }
    /* T_iss0 at the knee is an issue time, so > 0; the lower slope >= 0 keeps it at or above
     * the intercept, but the upper segment's samples can still pull that to 0 or below. */
    double t_knee = best.a + best.below * best.knee;
    if (!(t_knee > 0.0)) {
        status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "%s: degenerate knee (the best two-segment fit, knee at %g bytes, has "
                            "an issue time of %g us there, not > 0)",
                            fn, best.knee * scale, t_knee);
        goto err_free_resid;
    }
    for (size_t i = 0; i < nsamples; i++)
        resid[i] = pts[i].y - hinge_value(&best, pts[i].x);
    double median, iqr;
    median_iqr(resid, nsamples, &median, &iqr);
    double r_bpus = drain_gbps * 1e3;
    double below_us_per_byte = best.below / scale, above_us_per_byte = best.above / scale;
    double knee_bytes = best.knee * scale;
    double knee_spread = iqr / (above_us_per_byte - below_us_per_byte);
    fit_out->knee_bytes = knee_bytes;
    fit_out->knee_spread_bytes = knee_spread;
    fit_out->t_knee_us = t_knee;
    fit_out->below_us_per_byte = below_us_per_byte;
    fit_out->above_us_per_byte = above_us_per_byte;
    fit_out->residual_iqr_us = iqr;
    /* Q = [V_k - R*T_iss0(K, V_k)]+ <= V_k needs no clamp: R > 0 (check_drain) and t_knee > 0
     * (checked above) make V_k - R*t_knee < V_k, and V_k > 0 (a volume between samples, >= 1). */
    fit_out->capacity_bytes = fmax(0.0, knee_bytes - r_bpus * t_knee);
    fit_out->capacity_spread_bytes = fabs(1.0 - r_bpus * below_us_per_byte) * knee_spread;
    fit_out->nsamples = nsamples;
    status = WEFT_SUCCESS;
err_free_resid:
    free(resid);
err_free_pts:
    free(pts);
    return status;
}

/* The row fit's samples: sorted by bytes, then by time. */
static int compare_sample(const void *a, const void *b)
{
    const weft_bg_sample_t *x = a, *y = b;
    if (x->bytes != y->bytes)
        return (x->bytes > y->bytes) - (x->bytes < y->bytes);
    return (x->time_us > y->time_us) - (x->time_us < y->time_us);
}

/* The median time of n >= 1 samples sorted by time. */
static double median_time_sorted(const weft_bg_sample_t *s, size_t n)
{
    const double a = s[(n - 1) / 2].time_us, b = s[n / 2].time_us;
    return a + 0.5 * (b - a);
}

weft_status_t weft_bg_fit_row(const weft_bg_sample_t *samples, size_t nsamples, double drain_gbps,
                              int producers, const weft_bg_knee_fit_t *knee, weft_bg_row_t *row_out)
{
    static const char fn[] = "weft_bg_fit_row";
    weft_status_t status = check_samples(fn, samples, nsamples, 1, row_out, "row_out");
    if (status == WEFT_SUCCESS)
        status = check_drain(fn, drain_gbps);
    if (status != WEFT_SUCCESS)
        return status;
    if (knee == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: knee is NULL", fn);
    if (producers < 1)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: producers %d must be >= 1", fn,
                          producers);
    if (!(isfinite(knee->knee_bytes) && knee->knee_bytes >= 0.0))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: knee_bytes %g must be finite and >= 0",
                          fn, knee->knee_bytes);
    if (!(isfinite(knee->capacity_bytes) && knee->capacity_bytes >= 0.0))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: capacity_bytes %g must be finite and >= 0", fn,
                          knee->capacity_bytes);
    weft_bg_sample_t *q = malloc(nsamples * sizeof *q);
    if (q == NULL)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: scratch for %zu samples", fn, nsamples);
    double r_bpus = drain_gbps * 1e3;
    size_t n = 0;
    for (size_t i = 0; i < nsamples; i++) {
        double v = (double)samples[i].bytes;
        if (v <= knee->knee_bytes && samples[i].gap_us >= v / r_bpus)
            q[n++] = samples[i];
    }
    qsort(q, n, sizeof *q, compare_sample);

    /* One point per volume, its median weighted by its sample count; a point lower than the
     * block before it merges with it, repeatedly (pool adjacent violators), so the blocks'
     * means stay nondecreasing. Block b covers points first[b] .. first[b + 1] - 1. */
    weft_bg_row_t row = {.producers = producers, .capacity_bytes = knee->capacity_bytes};
    double mean[WEFT_BG_MAX_POINTS], weight[WEFT_BG_MAX_POINTS];
    int first[WEFT_BG_MAX_POINTS], nblocks = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && q[j].bytes == q[i].bytes)
            j++;
        if (row.npoints == WEFT_BG_MAX_POINTS) {
            status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                                "%s: more than %d volumes at or below the knee (%g bytes)", fn,
                                WEFT_BG_MAX_POINTS, knee->knee_bytes);
            goto err_free_q;
        }
        row.bytes[row.npoints] = q[i].bytes;
        mean[nblocks] = median_time_sorted(q + i, j - i);
        weight[nblocks] = (double)(j - i);
        first[nblocks++] = row.npoints++;
        while (nblocks > 1 && mean[nblocks - 2] > mean[nblocks - 1]) {
            int a = nblocks - 2, b = nblocks - 1;
            double w = weight[a] + weight[b];
            mean[a] = (weight[a] * mean[a] + weight[b] * mean[b]) / w;
            weight[a] = w;
            nblocks--;
        }
        i = j;
    }
    if (row.npoints == 0) {
        status = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                            "%s: no sample at or below the knee (%g bytes) with gap_us >= V/R", fn,
                            knee->knee_bytes);
        goto err_free_q;
    }
    for (int b = 0; b < nblocks; b++) {
        int end = b + 1 < nblocks ? first[b + 1] : row.npoints;
        for (int i = first[b]; i < end; i++)
            row.t_iss0_us[i] = mean[b];
    }
    *row_out = row;
    status = WEFT_SUCCESS;
err_free_q:
    free(q);
    return status;
}

/* Planner */

/* ceil(a / b) for b > 0, without the overflow of (a + b - 1) / b. */
static uint64_t ceil_div(uint64_t a, uint64_t b)
{
    return a / b + (a % b != 0);
}

/* The smallest d >= 1 with d * tile_us >= gap_us; false if it exceeds INT_MAX. */
static bool tiles_for_gap(double gap_us, double tile_us, int *tiles_out)
{
    double d = fmax(1.0, ceil(gap_us / tile_us));
    /* The division rounds: step to the exact smallest d in floating point. */
    if (d > 1.0 && (d - 1.0) * tile_us >= gap_us)
        d -= 1.0;
    if (d * tile_us < gap_us)
        d += 1.0;
    if (d > (double)INT_MAX)
        return false;
    *tiles_out = (int)d;
    return true;
}

weft_status_t weft_bg_plan(const weft_bg_params_t *params, int producers, uint64_t burst_bytes,
                           double tile_compute_us, weft_bg_plan_t *plan_out)
{
    static const char fn[] = "weft_bg_plan";
    int lo = 0;
    double w = 0.0;
    bg_point_t p;
    weft_status_t status = eval_args(fn, params, producers, burst_bytes, plan_out, &lo, &w, &p);
    if (status != WEFT_SUCCESS)
        return status;
    if (burst_bytes == 0)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: burst_bytes is 0", fn);
    if (!finite_positive(tile_compute_us))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: tile_compute_us %g must be finite and > 0", fn, tile_compute_us);

    weft_bg_plan_t plan = {0};
    double v = (double)burst_bytes;
    plan.t_iss0_us = p.t_iss0_us;
    plan.recovery_gap_us = recovery_us(&p, v);
    plan.excess_bytes = excess_bytes(&p, v);
    plan.capacity_bytes = p.capacity_bytes;
    plan.rate_ok = tile_compute_us >= plan.recovery_gap_us;
    plan.capacity_ok = plan.excess_bytes <= p.capacity_bytes;
    plan.backpressure_free = plan.rate_ok && plan.capacity_ok;

    /* Rule 1: the fewest sub-bursts whose excess fits. T_iss0 never drops below its value at
     * the smallest calibrated volume, t_min, so a sub-burst of at most floor(R * t_min + Q)
     * bytes fits: when that is at least one byte, m = ceil(V / floor(R * t_min + Q)) is always
     * enough, and the scan ends there or at WEFT_BG_MAX_SUB_BURSTS. */
    uint64_t m = 1;
    bg_point_t sub = p;
    if (!plan.capacity_ok) {
        bg_point_t floor_point = resolve(params, lo, w, 0.0);
        double fit_bytes = floor(p.bytes_per_us * floor_point.t_iss0_us + p.capacity_bytes);
        double m_max = fit_bytes >= 1.0 ? ceil(v / fit_bytes) : v;
        m_max = fmin(m_max, (double)WEFT_BG_MAX_SUB_BURSTS);
        for (m = 2; (double)m <= m_max; m++) {
            double part = (double)ceil_div(burst_bytes, m);
            sub = resolve(params, lo, w, part);
            if (excess_bytes(&sub, part) <= sub.capacity_bytes)
                break;
        }
        if ((double)m > m_max)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                              "%s: no split of %llu bytes into at most %d sub-bursts fits a "
                              "capacity of %g bytes",
                              fn, (unsigned long long)burst_bytes, WEFT_BG_MAX_SUB_BURSTS,
                              p.capacity_bytes);
    }
    plan.sub_bursts = (int)m;
    plan.sub_burst_bytes = ceil_div(burst_bytes, m);

    /* Rule 2: the gap after each (sub-)burst, in whole tiles. */
    double part = (double)plan.sub_burst_bytes;
    double need_us = recovery_us(&sub, part);
    if (!tiles_for_gap(need_us, tile_compute_us, &plan.interleave_tiles))
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: a recovery gap of %g us needs more than INT_MAX tiles of %g us", fn,
                          need_us, tile_compute_us);
    plan.planned_gap_us = plan.interleave_tiles * tile_compute_us;
    plan.planned_issue_us = issue_us(&sub, part, plan.planned_gap_us);
    plan.planned_period_us = period_us(&sub, part, plan.planned_gap_us);

    /* Rule 3. */
    if (m > 1)
        plan.advice = WEFT_BG_ADVICE_SPLIT;
    else if (plan.interleave_tiles > 1)
        plan.advice = WEFT_BG_ADVICE_INTERLEAVE;
    else
        plan.advice = WEFT_BG_ADVICE_NONE;
    *plan_out = plan;
    return WEFT_SUCCESS;
}
