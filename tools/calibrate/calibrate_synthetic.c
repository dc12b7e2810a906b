/*
 * calibrate_synthetic.c - weft-calibrate --synthetic: the points of every sweep drawn from a
 * built-in platform instead of measured (calibrate.h), so that the sweeps' bookkeeping, the fits,
 * the check and the JSON run anywhere, with no GPU and no communicator.
 *
 * The platform: pattern p drains at syn_drain_gbps[p]; K producers issue at min(50 K, 600) GB/s
 * after a 2 us latency (T_iss0 = 2 us + V / that rate), with Q(K) = 2 MiB * min(K, 32) / 32
 * outstanding at most. The gap loop adds 0.3 us to every gap. Measured times are the stall times
 * of that model (weft_bg_stall_times) with 1% noise, uniform; period = issue time + gap. Small K
 * issues slower than the drain: no knee, so those rows do not fit and their points stay
 * unpredicted, as on a GPU whose few SMs cannot outpace the drain. The noise is splitmix64 from
 * the seed, drawn in a fixed order, so a seed gives the same points every time. The device name,
 * synthetic (seed SEED, "no GPU"), has quotes in it, which the JSON must escape.
 *
 * Thread safety: single-threaded (the noise's state is in cal_t).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_prog.h"
#include "calibrate.h"

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

void cal_synthesize(cal_t *c, int pattern, int K, const uint64_t *bytes, const double *gap_us,
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

void cal_synthetic_machine(cal_t *c)
{
    c->rank = 0;
    gpu_prog_rank = 0;
    c->nranks = SYN_RANKS;
    c->sms = SYN_SMS;
    c->ranks_per_gpu = 1;
    c->ngpus = SYN_RANKS;
    c->iters_per_us = NAN;
    c->rng = c->s->synthetic_seed;
    /* Quoted words in the name, so that --synthetic runs the JSON's string escaping too. */
    snprintf(c->device, sizeof c->device, "synthetic (seed %llu, \"no GPU\")",
             (unsigned long long)c->s->synthetic_seed);
    snprintf(c->driver, sizeof c->driver, "none");
}
