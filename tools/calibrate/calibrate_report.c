/*
 * calibrate_report.c - weft-calibrate's held-out check and its output (calibrate.h): every
 * point predicted from its repeat's fitted parameters (weft_bg_stall_times) and its relative
 * errors tallied per pattern and set; rank 0's header lines and tables of the parameters
 * (median and spread over repeats) and of the check; and the JSON object, written as the run
 * goes: the preamble before the sweeps, one row per point after each repeat's fits, the
 * parameters and the check at the end.
 *
 * Thread safety: single-threaded; the tables are constant.
 */
#include <math.h>
#include <stdio.h>

#include "bench_util.h"
#include "gpu_prog.h"
#include "calibrate.h"

static const char *const q_names[NQ] = {"t_iss0_us", "knee_bytes", "t_knee_us", "capacity_bytes"};
static const char *const sweep_names[NUM_SWEEPS] = {"rate", "plateau", "knee"};
static const char *const set_names[NUM_SETS] = {"fit", "holdout"};

static void json_num(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, "%.6g", v);
    else
        fputs("null", f);
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

void cal_report_header(cal_t *c)
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
    /* Every string escaped: the device name and the driver version come from CUDA. */
    fputs("{\n  \"tool\": \"weft-calibrate\",\n  \"label\": ", c->json);
    bench_json_string(c->json, label);
    fputs(",\n  \"date\": ", c->json);
    bench_json_string(c->json, c->date);
    fputs(",\n  \"machine\": {\"device\": ", c->json);
    bench_json_string(c->json, c->device);
    fprintf(c->json, ", \"sms\": %d, \"driver\": ", c->sms);
    bench_json_string(c->json, c->driver);
    fprintf(c->json,
            ", \"ranks\": %d, \"gpus\": %d, \"ranks_per_gpu\": %d},\n"
            "  \"options\": {\"repeats\": %d, \"bursts\": %d, \"max_bytes\": %llu, "
            "\"plateau_bytes\": %llu, \"block_threads\": %d, \"gap_iters_per_us\": ",
            c->nranks, c->ngpus, c->ranks_per_gpu, c->s->repeats, c->s->bursts,
            (unsigned long long)c->s->max_bytes, (unsigned long long)c->s->plateau_bytes,
            BLOCK_THREADS);
    json_num(c->json, c->iters_per_us);
    fprintf(c->json, "},\n  \"holdout\": {\"rate_bytes\": [%llu], \"plateau_gap_factors\": [",
            (unsigned long long)(c->s->max_bytes >> (RATE_SETTINGS - 1 - RATE_HOLDOUT)));
    for (int i = 0, n = 0; i < NGAPS; i++)
        if (gap_holdout[i])
            fprintf(c->json, "%s%g", n++ ? ", " : "", gap_factors[i]);
    fputs("], \"knee_bytes\": [", c->json);
    uint64_t bytes[MAX_SETTINGS];
    int n = cal_knee_volumes(c, bytes);
    for (int i = 0, m = 0; i < n; i++)
        if (cal_knee_holdout(i, n))
            fprintf(c->json, "%s%llu", m++ ? ", " : "", (unsigned long long)bytes[i]);
    fputs("]},\n  \"raw\": [", c->json);
}

void cal_check_points(cal_t *c, int repeat, int pattern, const weft_bg_params_t *params,
                      const bool *has_row)
{
    for (int i = 0; i < c->npts; i++) {
        point_t *pt = &c->pts[i];
        int ki = 0;
        while (c->k[ki] != pt->producers)
            ki++;
        if (params && has_row[ki])
            weft_ok(weft_bg_stall_times(params, pt->producers, pt->bytes, cal_point_gap_us(pt),
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

void cal_report(cal_t *c)
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
