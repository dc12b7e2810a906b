/*
 * burst_gap_test.h - what the Burst-Gap model's unit tests (test_burst_gap.c,
 * test_burst_gap_check.c) share: the golden parameters, the poison for outputs, a relative
 * comparison, seeded random numbers and random valid parameter tables.
 *
 * Golden parameters: R = 2 GB/s = 2000 bytes/us. Row K=4: T_iss0 goes 1.0 us at 1000 bytes to
 * 2.0 us at 9000 bytes (1/8000 us per byte), Q = 4000 bytes. Row K=8: half those times (0.5 ->
 * 1.0 us), Q = 8000 bytes. K=6 sits halfway: T_iss0 the mean of the two rows, Q 6000.
 */
#ifndef WEFT_TESTS_UNIT_BURST_GAP_TEST_H
#define WEFT_TESTS_UNIT_BURST_GAP_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "model/burst_gap.h"

static inline weft_bg_params_t golden_params(void)
{
    weft_bg_params_t p;
    memset(&p, 0, sizeof p);
    p.drain_gbps = 2.0;
    p.nrows = 2;
    p.row[0] = (weft_bg_row_t){.producers = 4, .npoints = 2, .capacity_bytes = 4000.0};
    p.row[0].bytes[0] = 1000;
    p.row[0].bytes[1] = 9000;
    p.row[0].t_iss0_us[0] = 1.0;
    p.row[0].t_iss0_us[1] = 2.0;
    p.row[1] = (weft_bg_row_t){.producers = 8, .npoints = 2, .capacity_bytes = 8000.0};
    p.row[1].bytes[0] = 1000;
    p.row[1].bytes[1] = 9000;
    p.row[1].t_iss0_us[0] = 0.5;
    p.row[1].t_iss0_us[1] = 1.0;
    return p;
}

/* Written to outputs before a call, so that one left unwritten shows. */
#define POISON (-12345.0)

static inline bool close_to(double got, double want, double rel)
{
    return fabs(got - want) <= rel * fmax(1.0, fabs(want));
}

/* Randomness: splitmix64, uniform in [0, 1), standard normal by Box-Muller. */
static inline uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline double uniform(uint64_t *state)
{
    return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

static inline double normal(uint64_t *state)
{
    double u = 1.0 - uniform(state), v = uniform(state);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Random valid parameters: 1..4 rows, 1..6 points each, nondecreasing times. Capacities are
 * 1e4 to 1.01e6 bytes; with zero_capacities, 0 in one row in eight and 0 to 1e6 bytes in the
 * others. */
static inline weft_bg_params_t random_params(uint64_t *rng, bool zero_capacities)
{
    weft_bg_params_t p;
    memset(&p, 0, sizeof p);
    p.drain_gbps = 1.0 + 200.0 * uniform(rng);
    p.nrows = 1 + (int)(next_u64(rng) % 4);
    int k = 0;
    for (int r = 0; r < p.nrows; r++) {
        weft_bg_row_t *row = &p.row[r];
        k += 1 + (int)(next_u64(rng) % 16);
        row->producers = k;
        row->npoints = 1 + (int)(next_u64(rng) % 6);
        if (zero_capacities)
            row->capacity_bytes = next_u64(rng) % 8 == 0 ? 0.0 : 1e6 * uniform(rng);
        else
            row->capacity_bytes = 1e4 + 1e6 * uniform(rng);
        uint64_t b = 1 + next_u64(rng) % 4096;
        double t = 0.1 + 5.0 * uniform(rng);
        for (int i = 0; i < row->npoints; i++) {
            row->bytes[i] = b;
            row->t_iss0_us[i] = t;
            b += 1 + next_u64(rng) % (1u << 20);
            t += uniform(rng) < 0.2 ? 0.0 : 10.0 * uniform(rng);
        }
    }
    return p;
}

#endif /* WEFT_TESTS_UNIT_BURST_GAP_TEST_H */
