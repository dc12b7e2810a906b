/*
 * test_cost_model.c - golden values of tau(s) = alpha_t + s / beta_t, the range check of
 * weft_cost_model_check field by field, and properties (tau(0) = alpha, monotone, linear) on
 * random sizes. The seed is printed; pass one as argv[1] to replay a run.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/cost_model.h"
#include "check.h"

/* Parameters chosen so that every golden cost below is exact in binary floating point. */
static const weft_cost_model_t golden_model = {{
    /*                        lat_us bw_gbps unit_bytes fanout */
    [WEFT_TIER_SELF] = {0.5, 4.0, 8000, 8},
    [WEFT_TIER_PEER] = {1.0, 1.0, 4000, 2},
    [WEFT_TIER_REMOTE_NUMA] = {2.0, 0.5, 1000, 1},
}};

static void test_golden_costs(void)
{
    static const struct {
        weft_tier_t tier;
        uint64_t bytes;
        double cost_us;
    } rows[] = {
        {WEFT_TIER_SELF, 0, 0.5},                       /* no bytes: only the latency */
        {WEFT_TIER_SELF, 4000, 1.5},                    /* 4 GB/s moves 4000 bytes per us */
        {WEFT_TIER_SELF, 1000000, 250.5},               /* 1 MB at 4 GB/s: 250 us */
        {WEFT_TIER_PEER, 1, 1.001},                     /* one byte at 1 GB/s: 1 ns */
        {WEFT_TIER_PEER, 1000, 2.0},                    /* 1000 bytes at 1 GB/s: 1 us */
        {WEFT_TIER_PEER, 4000, 5.0},                    /* one full PEER unit */
        {WEFT_TIER_REMOTE_NUMA, 500, 3.0},              /* 0.5 GB/s: 500 bytes per us */
        {WEFT_TIER_REMOTE_NUMA, 1000000000, 2000002.0}, /* 1 GB at 0.5 GB/s: 2 s */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double got = weft_cost_us(&golden_model, rows[i].tier, rows[i].bytes);
        /* 1.001 is not exact in binary: allow one rounding of the sum. */
        CHECK(fabs(got - rows[i].cost_us) <= 1e-15 * rows[i].cost_us,
              "golden row %zu: tier %d, %" PRIu64 " bytes: %.17g us, expected %.17g", i,
              (int)rows[i].tier, rows[i].bytes, got, rows[i].cost_us);
    }
    /* The largest size stays finite and proportional: 2^64 - 1 bytes at 1 GB/s. */
    double big = weft_cost_us(&golden_model, WEFT_TIER_PEER, UINT64_MAX);
    CHECK(isfinite(big) && fabs(big - 18446744073709551.615) <= 1e-12 * big,
          "UINT64_MAX bytes: %.17g us", big);
}

static void test_check(void)
{
    CHECK(weft_cost_model_check(&golden_model) == 0, "golden model rejected");
    CHECK(weft_cost_model_check(NULL) == -1, "NULL model accepted");

    /* Smallest values in range are accepted. */
    weft_cost_model_t edge = golden_model;
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        edge.tier[t] = (weft_tier_params_t){0.0, 1e-9, 1, 1};
    CHECK(weft_cost_model_check(&edge) == 0, "boundary model (lat 0, unit 1, fanout 1) rejected");

    /* Each bad value, in each tier, alone: rejected. */
    static const struct {
        const char *what;
        weft_tier_params_t p;
    } bad[] = {
        {"lat_us -1", {-1.0, 1.0, 4000, 2}},       {"lat_us NaN", {NAN, 1.0, 4000, 2}},
        {"lat_us inf", {INFINITY, 1.0, 4000, 2}},  {"bw_gbps 0", {1.0, 0.0, 4000, 2}},
        {"bw_gbps -1", {1.0, -1.0, 4000, 2}},      {"bw_gbps NaN", {1.0, NAN, 4000, 2}},
        {"bw_gbps inf", {1.0, INFINITY, 4000, 2}}, {"unit_bytes 0", {1.0, 1.0, 0, 2}},
        {"fanout 0", {1.0, 1.0, 4000, 0}},         {"fanout -3", {1.0, 1.0, 4000, -3}},
    };
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            weft_cost_model_t m = golden_model;
            m.tier[t] = bad[i].p;
            CHECK(weft_cost_model_check(&m) == -1, "tier %d with %s accepted", t, bad[i].what);
        }
    }
}

static uint64_t rng_next(uint64_t *state)
{
    /* splitmix64 */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void test_random(uint64_t seed)
{
    uint64_t rng = seed;
    for (int iter = 0; iter < 10000; iter++) {
        weft_cost_model_t m;
        for (int t = 0; t < WEFT_NUM_TIERS; t++)
            m.tier[t] = (weft_tier_params_t){(double)(rng_next(&rng) % 10000) / 100.0,
                                             0.01 + (double)(rng_next(&rng) % 100000) / 100.0,
                                             1 + rng_next(&rng) % 100000, 1};
        CHECK(weft_cost_model_check(&m) == 0, "seed %" PRIu64 " iter %d: random model rejected",
              seed, iter);
        weft_tier_t tier = (weft_tier_t)(rng_next(&rng) % WEFT_NUM_TIERS);
        uint64_t a = rng_next(&rng) >> (rng_next(&rng) % 64);
        uint64_t b = rng_next(&rng) >> (rng_next(&rng) % 64);
        if (a > b) {
            uint64_t t = a;
            a = b;
            b = t;
        }
        double lat = m.tier[tier].lat_us;
        double ca = weft_cost_us(&m, tier, a), cb = weft_cost_us(&m, tier, b);
        CHECK(weft_cost_us(&m, tier, 0) == lat, "seed %" PRIu64 " iter %d: tau(0) != lat_us", seed,
              iter);
        CHECK(ca <= cb, "seed %" PRIu64 " iter %d: tau(%" PRIu64 ") %.17g > tau(%" PRIu64 ") %.17g",
              seed, iter, a, ca, b, cb);
        /* Linear above the latency: the two-part cost of b equals the cost of a plus the cost of
         * b - a, to rounding. */
        double expected = (ca - lat) + (weft_cost_us(&m, tier, b - a) - lat);
        CHECK(fabs((cb - lat) - expected) <= 1e-9 * (cb - lat) + 1e-9,
              "seed %" PRIu64 " iter %d: not linear: %.17g vs %.17g", seed, iter, cb - lat,
              expected);
    }
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    printf("test_cost_model: seed %" PRIu64 "\n", seed);
    test_golden_costs();
    test_check();
    test_random(seed);
    if (failures != 0)
        printf("test_cost_model: %d checks failed\n", failures);
    return failures != 0;
}
