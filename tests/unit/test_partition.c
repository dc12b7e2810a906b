/*
 * test_partition.c - the partitioner against hand-computed golden plans, invalid arguments, plan
 * reuse, and properties on random inputs: exact-once byte coverage, cuts on multiples of the cut
 * size, fan-out cap, LPT order inside each worker, loads and makespan, a makespan bound, and an
 * exact comparison with a straightforward reference implementation of the contract (qsort of
 * every unit, bitmask fan-out bookkeeping). The seed is printed; pass one as argv[1] to replay.
 */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/partition.h"
#include "util/log.h"
#include "check.h"

#define SELF WEFT_TIER_SELF
#define PEER WEFT_TIER_PEER
#define NUMA WEFT_TIER_REMOTE_NUMA

/*
 * Models of the golden cases. Costs are exact in binary: a full unit costs 0.5 + 8000 / 4000 =
 * 2.5 us (SELF), 1 + 4000 / 1000 = 5 us (PEER), 2 + 1000 / 500 = 4 us (NUMA).
 */
static const weft_cost_model_t model_open = {{
    /*              lat_us bw_gbps unit_bytes fanout */
    [SELF] = {0.5, 4.0, 8000, 256},
    [PEER] = {1.0, 1.0, 4000, 256},
    [NUMA] = {2.0, 0.5, 1000, 256},
}};
static const weft_cost_model_t model_capped = {{
    [SELF] = {0.5, 4.0, 8000, 8},
    [PEER] = {1.0, 1.0, 4000, 2},
    [NUMA] = {2.0, 0.5, 1000, 1},
}};
static const weft_cost_model_t model_fan1 = {{
    [SELF] = {0.5, 4.0, 8000, 1},
    [PEER] = {1.0, 1.0, 4000, 1},
    [NUMA] = {2.0, 0.5, 1000, 1},
}};

#define GOLDEN_MAX_SLICES 8
#define GOLDEN_MAX_UNITS 16
#define GOLDEN_MAX_WORKERS 8

typedef struct golden {
    const char *name;
    const weft_cost_model_t *model;
    bool naive; /* weft_partition_naive instead of weft_partition (granule unused) */
    size_t nslices;
    weft_slice_t slices[GOLDEN_MAX_SLICES]; /* {peer, tier, bytes} */
    int nworkers;
    uint64_t granule_bytes;
    size_t nunits;
    weft_unit_t units[GOLDEN_MAX_UNITS]; /* plan order: {slice, worker, offset, bytes, cost_us} */
    double load_us[GOLDEN_MAX_WORKERS];
    double makespan_us;
    double imbalance;
} golden_t;

/*
 * In each row the units are listed in plan order (by worker, LPT order inside a worker), and the
 * comment replays the LPT steps: "u(cost)->w" with the loads after the step.
 */
/* clang-format off: one golden row reads as a table */
static const golden_t golden[] = {
    /* 10000 PEER bytes cut at 4000: 4000 (5), 4000 (5), 2000 (3). u0->w0 [5,0]; u1->w1 [5,5];
     * u2: tie at 5, lowest index -> w0 [8,5]. Mean over 2 workers 6.5: imbalance 8/6.5 - 1. */
    {.name = "one slice, 3 units, 2 workers",
     .model = &model_open,
     .nslices = 1,
     .slices = {{1, PEER, 10000}},
     .nworkers = 2,
     .granule_bytes = 1,
     .nunits = 3,
     .units = {{0, 0, 0, 4000, 5.0}, {0, 0, 8000, 2000, 3.0}, {0, 1, 4000, 4000, 5.0}},
     .load_us = {8.0, 5.0},
     .makespan_us = 8.0,
     .imbalance = 8.0 / 6.5 - 1.0},
    /* 16000 PEER bytes: four units of 5. u0..u2 -> w0..w2; u3: all at 5 -> w0 [10,5,5]. */
    {.name = "one slice, 4 units, 3 workers",
     .model = &model_open,
     .nslices = 1,
     .slices = {{1, PEER, 16000}},
     .nworkers = 3,
     .granule_bytes = 1,
     .nunits = 4,
     .units = {{0, 0, 0, 4000, 5.0},
               {0, 0, 12000, 4000, 5.0},
               {0, 1, 4000, 4000, 5.0},
               {0, 2, 8000, 4000, 5.0}},
     .load_us = {10.0, 5.0, 5.0},
     .makespan_us = 10.0,
     .imbalance = 10.0 / (20.0 / 3.0) - 1.0},
    /* Two units over four workers: w2, w3 idle. Only two workers could have work, so the plan
     * is balanced: imbalance 0. */
    {.name = "one slice, 2 units, 4 workers",
     .model = &model_open,
     .nslices = 1,
     .slices = {{1, PEER, 8000}},
     .nworkers = 4,
     .granule_bytes = 1,
     .nunits = 2,
     .units = {{0, 0, 0, 4000, 5.0}, {0, 1, 4000, 4000, 5.0}},
     .load_us = {5.0, 5.0, 0.0, 0.0},
     .makespan_us = 5.0,
     .imbalance = 0.0},
    /* Fan-out 1: peer 1 (two units) stays on w0, peer 2 goes to the least loaded w1.
     * s0u0(5)->w0 [5,0,0]; s0u1: peer 1 holds w0 only -> w0 [10,0,0]; s1u0 -> w1 [10,5,0].
     * Three units could have used three workers: mean 15 / 3, imbalance 10 / 5 - 1. */
    {.name = "two peers, fan-out 1",
     .model = &model_fan1,
     .nslices = 2,
     .slices = {{1, PEER, 8000}, {2, PEER, 4000}},
     .nworkers = 3,
     .granule_bytes = 1,
     .nunits = 3,
     .units = {{0, 0, 0, 4000, 5.0}, {0, 0, 4000, 4000, 5.0}, {1, 1, 0, 4000, 5.0}},
     .load_us = {10.0, 5.0, 0.0},
     .makespan_us = 10.0,
     .imbalance = 10.0 / 5.0 - 1.0},
    /* Self 16000 (2 x 2.5), peer 6000 (5, 3), NUMA 2500 (4, 4, 3); fan-out 8 / 2 / 1.
     * LPT order: s1u0(5) s2u0(4) s2u1(4) s1u1(3) s2u2(3) s0u0(2.5) s0u1(2.5).
     * s1u0->w0 [5,0,0]; s2u0->w1 [5,4,0]; s2u1: NUMA cap 1, peer 2 on w1 -> w1 [5,8,0];
     * s1u1: peer 1 has 1 < 2 workers -> w2 [5,8,3]; s2u2 -> w1 [5,11,3];
     * s0u0 -> w2 [5,11,5.5]; s0u1 -> w0 [7.5,11,5.5]. */
    {.name = "self + peer + NUMA, capped",
     .model = &model_capped,
     .nslices = 3,
     .slices = {{0, SELF, 16000}, {1, PEER, 6000}, {2, NUMA, 2500}},
     .nworkers = 3,
     .granule_bytes = 1,
     .nunits = 7,
     .units = {{1, 0, 0, 4000, 5.0},
               {0, 0, 8000, 8000, 2.5},
               {2, 1, 0, 1000, 4.0},
               {2, 1, 1000, 1000, 4.0},
               {2, 1, 2000, 500, 3.0},
               {1, 2, 4000, 2000, 3.0},
               {0, 2, 0, 8000, 2.5}},
     .load_us = {7.5, 11.0, 5.5},
     .makespan_us = 11.0,
     .imbalance = 11.0 / 8.0 - 1.0},
    /* The same slices with no cap. s1u0->w0 [5,0,0]; s2u0->w1 [5,4,0]; s2u1->w2 [5,4,4];
     * s1u1: tie w1/w2 -> w1 [5,7,4]; s2u2->w2 [5,7,7]; s0u0->w0 [7.5,7,7];
     * s0u1: tie w1/w2 -> w1 [7.5,9.5,7]. */
    {.name = "self + peer + NUMA, open",
     .model = &model_open,
     .nslices = 3,
     .slices = {{0, SELF, 16000}, {1, PEER, 6000}, {2, NUMA, 2500}},
     .nworkers = 3,
     .granule_bytes = 1,
     .nunits = 7,
     .units = {{1, 0, 0, 4000, 5.0},
               {0, 0, 0, 8000, 2.5},
               {2, 1, 0, 1000, 4.0},
               {1, 1, 4000, 2000, 3.0},
               {0, 1, 8000, 8000, 2.5},
               {2, 2, 1000, 1000, 4.0},
               {2, 2, 2000, 500, 3.0}},
     .load_us = {7.5, 9.5, 7.0},
     .makespan_us = 9.5,
     .imbalance = 9.5 / 8.0 - 1.0},
    /* One peer in two tiers, PEER cap 2 and NUMA cap 1: s0u0(5)->w0, s0u1(5)->w1 (peer 5 now
     * on 2 workers); s1u0(4): NUMA cap reached, peer 5's workers w0/w1 tie at 5 -> w0 [9,5];
     * s1u1 -> w1 [9,9]. w2 and w3 stay idle although they are less loaded: four units could
     * have used all four workers, so the mean is 18 / 4 and the imbalance 9 / 4.5 - 1 = 1. */
    {.name = "one peer in two tiers",
     .model = &model_capped,
     .nslices = 2,
     .slices = {{5, PEER, 8000}, {5, NUMA, 2000}},
     .nworkers = 4,
     .granule_bytes = 1,
     .nunits = 4,
     .units = {{0, 0, 0, 4000, 5.0},
               {1, 0, 0, 1000, 4.0},
               {0, 1, 4000, 4000, 5.0},
               {1, 1, 1000, 1000, 4.0}},
     .load_us = {9.0, 9.0, 0.0, 0.0},
     .makespan_us = 9.0,
     .imbalance = 1.0},
    /* Zipf-like volumes 24000 : 12000 : 8000 : 6000 (1 : 1/2 : 1/3 : 1/4) to four peers.
     * Units in LPT order: #0-#5 s0, #6-#8 s1, #9-#10 s2, #11 s3 (all 5), #12 s3 tail 2000 (3).
     * The twelve units of 5 go round-robin to w0..w3 (15 each), #12 -> w0 (18).
     * The naive plan of the next row has makespan 25: LPT with cuts is 25/18 = 1.39x faster. */
    {.name = "zipf volumes, LPT",
     .model = &model_open,
     .nslices = 4,
     .slices = {{1, PEER, 24000}, {2, PEER, 12000}, {3, PEER, 8000}, {4, PEER, 6000}},
     .nworkers = 4,
     .granule_bytes = 1,
     .nunits = 13,
     .units = {{0, 0, 0, 4000, 5.0},
               {0, 0, 16000, 4000, 5.0},
               {1, 0, 8000, 4000, 5.0},
               {3, 0, 4000, 2000, 3.0},
               {0, 1, 4000, 4000, 5.0},
               {0, 1, 20000, 4000, 5.0},
               {2, 1, 0, 4000, 5.0},
               {0, 2, 8000, 4000, 5.0},
               {1, 2, 0, 4000, 5.0},
               {2, 2, 4000, 4000, 5.0},
               {0, 3, 12000, 4000, 5.0},
               {1, 3, 4000, 4000, 5.0},
               {3, 3, 0, 4000, 5.0}},
     .load_us = {18.0, 15.0, 15.0, 15.0},
     .makespan_us = 18.0,
     .imbalance = 18.0 / 15.75 - 1.0},
    /* Naive: slice i whole on worker i: 1 + 24 = 25, 13, 9, 7. */
    {.name = "zipf volumes, naive",
     .model = &model_open,
     .naive = true,
     .nslices = 4,
     .slices = {{1, PEER, 24000}, {2, PEER, 12000}, {3, PEER, 8000}, {4, PEER, 6000}},
     .nworkers = 4,
     .nunits = 4,
     .units = {{0, 0, 0, 24000, 25.0},
               {1, 1, 0, 12000, 13.0},
               {2, 2, 0, 8000, 9.0},
               {3, 3, 0, 6000, 7.0}},
     .load_us = {25.0, 13.0, 9.0, 7.0},
     .makespan_us = 25.0,
     .imbalance = 25.0 / 13.5 - 1.0},
    /* Naive with more slices than workers: s0->w0 (2), s1->w1 (3), s2->w0 (4); w0 lists s2
     * first (LPT order inside a worker). */
    {.name = "naive, 3 slices on 2 workers",
     .model = &model_open,
     .naive = true,
     .nslices = 3,
     .slices = {{1, PEER, 1000}, {2, PEER, 2000}, {3, PEER, 3000}},
     .nworkers = 2,
     .nunits = 3,
     .units = {{2, 0, 0, 3000, 4.0}, {0, 0, 0, 1000, 2.0}, {1, 1, 0, 2000, 3.0}},
     .load_us = {6.0, 3.0},
     .makespan_us = 6.0,
     .imbalance = 6.0 / 4.5 - 1.0},
    /* Granule 768 does not divide unit_bytes 4000: cut = 5 * 768 = 3840. 8000 bytes ->
     * 3840 (1 + 3.84), 3840, 320 (1 + 0.32). u0->w0, u1->w1, u2: tie -> w0. */
    {.name = "granule 768, unit 4000",
     .model = &model_open,
     .nslices = 1,
     .slices = {{1, PEER, 8000}},
     .nworkers = 2,
     .granule_bytes = 768,
     .nunits = 3,
     .units = {{0, 0, 0, 3840, 4.84}, {0, 0, 7680, 320, 1.32}, {0, 1, 3840, 3840, 4.84}},
     .load_us = {6.16, 4.84},
     .makespan_us = 6.16,
     .imbalance = 6.16 / 5.5 - 1.0},
    /* Granule 5000 > unit_bytes 4000: one granule per unit. 12000 -> 5000 (6), 5000 (6), 2000
     * (3); the last unit holds a partial granule, the end of the slice. */
    {.name = "granule larger than unit",
     .model = &model_open,
     .nslices = 1,
     .slices = {{1, PEER, 12000}},
     .nworkers = 2,
     .granule_bytes = 5000,
     .nunits = 3,
     .units = {{0, 0, 0, 5000, 6.0}, {0, 0, 10000, 2000, 3.0}, {0, 1, 5000, 5000, 6.0}},
     .load_us = {9.0, 6.0},
     .makespan_us = 9.0,
     .imbalance = 9.0 / 7.5 - 1.0},
    /* Zero-byte slices make no units; slice indices still refer to the input array. */
    {.name = "zero-byte slices",
     .model = &model_open,
     .nslices = 3,
     .slices = {{1, PEER, 0}, {2, PEER, 4000}, {3, PEER, 0}},
     .nworkers = 2,
     .granule_bytes = 1,
     .nunits = 1,
     .units = {{1, 0, 0, 4000, 5.0}},
     .load_us = {5.0, 0.0},
     .makespan_us = 5.0,
     .imbalance = 0.0},
    /* Naive keeps slice i on worker i % nworkers even when slice 0 is empty. */
    {.name = "zero-byte slices, naive",
     .model = &model_open,
     .naive = true,
     .nslices = 3,
     .slices = {{1, PEER, 0}, {2, PEER, 4000}, {3, PEER, 0}},
     .nworkers = 2,
     .nunits = 1,
     .units = {{1, 1, 0, 4000, 5.0}},
     .load_us = {0.0, 5.0},
     .makespan_us = 5.0,
     .imbalance = 0.0},
    /* Only empty slices: an empty plan. */
    {.name = "only empty slices",
     .model = &model_open,
     .nslices = 2,
     .slices = {{1, PEER, 0}, {2, SELF, 0}},
     .nworkers = 3,
     .granule_bytes = 1,
     .nunits = 0,
     .load_us = {0.0, 0.0, 0.0},
     .makespan_us = 0.0,
     .imbalance = 0.0},
    /* No slices at all (slices == NULL). */
    {.name = "no slices",
     .model = &model_open,
     .nslices = 0,
     .nworkers = 2,
     .granule_bytes = 1,
     .nunits = 0,
     .load_us = {0.0, 0.0},
     .makespan_us = 0.0,
     .imbalance = 0.0},
};
/* clang-format on */

static bool near(double got, double expected)
{
    return fabs(got - expected) <= 1e-12 * (fabs(expected) > 1.0 ? fabs(expected) : 1.0);
}

/* Fill every array of a plan with garbage, so that a call must write all it reports. */
static void poison(weft_plan_t *plan)
{
    if (plan->units != NULL)
        memset(plan->units, 0xA5, plan->units_cap * sizeof(weft_unit_t));
    if (plan->worker_begin != NULL)
        memset(plan->worker_begin, 0xA5, ((size_t)plan->workers_cap + 1) * sizeof(size_t));
    for (int w = 0; w < plan->workers_cap; w++)
        plan->worker_load_us[w] = NAN;
    plan->nunits = 12345;
    plan->nworkers = 678;
    plan->makespan_us = NAN;
}

static weft_status_t run_golden(const golden_t *g, weft_plan_t *plan)
{
    const weft_slice_t *slices = g->nslices != 0 ? g->slices : NULL;
    if (g->naive)
        return weft_partition_naive(g->model, slices, g->nslices, g->nworkers, plan);
    return weft_partition(g->model, slices, g->nslices, g->nworkers, g->granule_bytes, plan);
}

static void check_golden(const golden_t *g, const char *how, const weft_plan_t *plan)
{
    CHECK(plan->nunits == g->nunits, "%s (%s): %zu units, expected %zu", g->name, how, plan->nunits,
          g->nunits);
    CHECK(plan->nworkers == g->nworkers, "%s (%s): nworkers %d, expected %d", g->name, how,
          plan->nworkers, g->nworkers);
    if (plan->nunits != g->nunits || plan->nworkers != g->nworkers)
        return;
    for (size_t u = 0; u < g->nunits; u++) {
        const weft_unit_t *a = &plan->units[u], *e = &g->units[u];
        CHECK(a->slice == e->slice && a->worker == e->worker && a->offset == e->offset &&
                  a->bytes == e->bytes && near(a->cost_us, e->cost_us),
              "%s (%s): unit %zu is {slice %u, worker %u, offset %" PRIu64 ", %" PRIu64
              " bytes, %.17g us}, expected {%u, %u, %" PRIu64 ", %" PRIu64 ", %.17g}",
              g->name, how, u, a->slice, a->worker, a->offset, a->bytes, a->cost_us, e->slice,
              e->worker, e->offset, e->bytes, e->cost_us);
    }
    size_t begin = 0;
    for (int w = 0; w <= g->nworkers; w++) {
        CHECK(plan->worker_begin[w] == begin, "%s (%s): worker_begin[%d] %zu, expected %zu",
              g->name, how, w, plan->worker_begin[w], begin);
        while (begin < g->nunits && (int)g->units[begin].worker == w)
            begin++;
    }
    for (int w = 0; w < g->nworkers; w++)
        CHECK(near(plan->worker_load_us[w], g->load_us[w]),
              "%s (%s): load of worker %d %.17g us, expected %.17g", g->name, how, w,
              plan->worker_load_us[w], g->load_us[w]);
    CHECK(near(plan->makespan_us, g->makespan_us), "%s (%s): makespan %.17g us, expected %.17g",
          g->name, how, plan->makespan_us, g->makespan_us);
    double imbalance = weft_plan_imbalance(plan);
    CHECK(near(imbalance, g->imbalance), "%s (%s): imbalance %.17g, expected %.17g", g->name, how,
          imbalance, g->imbalance);
}

static void test_golden(void)
{
    weft_plan_t warm;
    weft_plan_init(&warm);
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        const golden_t *g = &golden[i];
        weft_plan_t fresh;
        weft_plan_init(&fresh);
        weft_status_t status = run_golden(g, &fresh);
        CHECK(status == WEFT_SUCCESS, "%s (fresh plan): status %s", g->name,
              weft_status_string(status));
        if (status == WEFT_SUCCESS)
            check_golden(g, "fresh plan", &fresh);
        weft_plan_fini(&fresh);

        /* The same on a plan warmed by the previous rows and poisoned. */
        poison(&warm);
        status = run_golden(g, &warm);
        CHECK(status == WEFT_SUCCESS, "%s (warm plan): status %s", g->name,
              weft_status_string(status));
        if (status == WEFT_SUCCESS)
            check_golden(g, "warm plan", &warm);
    }
    weft_plan_fini(&warm);

    /* The factor the Zipf rows illustrate, computed from the two plans. */
    weft_plan_t lpt, naive;
    weft_plan_init(&lpt);
    weft_plan_init(&naive);
    const weft_slice_t zipf[] = {
        {1, PEER, 24000}, {2, PEER, 12000}, {3, PEER, 8000}, {4, PEER, 6000}};
    if (weft_partition(&model_open, zipf, 4, 4, 1, &lpt) == WEFT_SUCCESS &&
        weft_partition_naive(&model_open, zipf, 4, 4, &naive) == WEFT_SUCCESS)
        CHECK(naive.makespan_us / lpt.makespan_us == 25.0 / 18.0,
              "zipf: naive / LPT makespan %.17g, expected 25/18",
              naive.makespan_us / lpt.makespan_us);
    else
        CHECK(0, "zipf: partition failed: %s", weft_last_error());
    weft_plan_fini(&lpt);
    weft_plan_fini(&naive);
}

static void expect_invalid(const char *what, weft_status_t status, const char *fn,
                           const weft_plan_t *plan)
{
    CHECK(status == WEFT_ERR_INVALID_ARGUMENT, "%s: status %s, expected invalid argument", what,
          weft_status_string(status));
    CHECK(strstr(weft_last_error(), fn) != NULL, "%s: last error \"%s\" does not name %s", what,
          weft_last_error(), fn);
    if (plan != NULL)
        CHECK(plan->nunits == 0 && plan->nworkers == 0,
              "%s: failed call left %zu units, %d workers", what, plan->nunits, plan->nworkers);
}

static void test_invalid(void)
{
    const weft_slice_t ok[] = {{1, PEER, 4000}, {2, NUMA, 3000}};
    weft_plan_t plan;
    weft_plan_init(&plan);
    /* Warm the plan, so that the failed calls below must reset it. */
    CHECK(weft_partition(&model_open, ok, 2, 2, 1, &plan) == WEFT_SUCCESS, "warm-up failed: %s",
          weft_last_error());

    static const char lpt[] = "weft_partition", nv[] = "weft_partition_naive";
    weft_error_clear();
    expect_invalid("nworkers 0", weft_partition(&model_open, ok, 2, 0, 1, &plan), lpt, &plan);
    weft_error_clear();
    expect_invalid("nworkers -1", weft_partition(&model_open, ok, 2, -1, 1, &plan), lpt, &plan);
    weft_error_clear();
    expect_invalid("granule 0", weft_partition(&model_open, ok, 2, 2, 0, &plan), lpt, &plan);
    weft_error_clear();
    expect_invalid("model NULL", weft_partition(NULL, ok, 2, 2, 1, &plan), lpt, &plan);
    weft_error_clear();
    expect_invalid("slices NULL", weft_partition(&model_open, NULL, 2, 2, 1, &plan), lpt, &plan);
    weft_error_clear();
    expect_invalid("plan NULL", weft_partition(&model_open, ok, 2, 2, 1, NULL), lpt, NULL);

    weft_slice_t bad_tier[] = {{1, PEER, 4000}, {2, WEFT_NUM_TIERS, 3000}};
    weft_error_clear();
    expect_invalid("tier out of range", weft_partition(&model_open, bad_tier, 2, 2, 1, &plan), lpt,
                   &plan);
    weft_slice_t bad_peer[] = {{1, PEER, 4000}, {-1, PEER, 3000}};
    weft_error_clear();
    expect_invalid("negative peer", weft_partition(&model_open, bad_peer, 2, 2, 1, &plan), lpt,
                   &plan);

    /* A bad model: each field of each tier. */
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        for (int field = 0; field < 4; field++) {
            weft_cost_model_t m = model_open;
            if (field == 0)
                m.tier[t].lat_us = -1.0;
            else if (field == 1)
                m.tier[t].bw_gbps = 0.0;
            else if (field == 2)
                m.tier[t].unit_bytes = 0;
            else
                m.tier[t].fanout = 0;
            char what[64];
            snprintf(what, sizeof what, "bad model, tier %d field %d", t, field);
            weft_error_clear();
            expect_invalid(what, weft_partition(&m, ok, 2, 2, 1, &plan), lpt, &plan);
            weft_error_clear();
            expect_invalid(what, weft_partition_naive(&m, ok, 2, 2, &plan), nv, &plan);
        }
    }

    weft_error_clear();
    expect_invalid("naive nworkers 0", weft_partition_naive(&model_open, ok, 2, 0, &plan), nv,
                   &plan);
    weft_error_clear();
    expect_invalid("naive model NULL", weft_partition_naive(NULL, ok, 2, 2, &plan), nv, &plan);
    weft_error_clear();
    expect_invalid("naive slices NULL", weft_partition_naive(&model_open, NULL, 1, 2, &plan), nv,
                   &plan);
    weft_error_clear();
    expect_invalid("naive plan NULL", weft_partition_naive(&model_open, ok, 2, 2, NULL), nv, NULL);
    weft_error_clear();
    expect_invalid("naive tier out of range",
                   weft_partition_naive(&model_open, bad_tier, 2, 2, &plan), nv, &plan);

    /* More units than the plan can index: refused before any allocation. With 2^31 - 1
     * workers the per-slice bound (64 per worker) is above 2^32. */
    weft_cost_model_t tiny = model_open;
    tiny.tier[PEER].unit_bytes = 1;
    const weft_slice_t huge[] = {{1, PEER, UINT64_MAX}};
    weft_status_t status = weft_partition(&tiny, huge, 1, INT32_MAX, 1, &plan);
    CHECK(status == WEFT_ERR_NO_MEMORY, "2^37 units: status %s, expected out of memory",
          weft_status_string(status));
    /* The naive plan of the same slice is one unit. */
    status = weft_partition_naive(&tiny, huge, 1, 2, &plan);
    CHECK(status == WEFT_SUCCESS && plan.nunits == 1 && plan.units[0].bytes == UINT64_MAX,
          "naive plan of a 2^64 - 1 byte slice: status %s, %zu units", weft_status_string(status),
          plan.nunits);

    /* After failures the plan is still usable. */
    status = weft_partition(&model_open, ok, 2, 2, 1, &plan);
    CHECK(status == WEFT_SUCCESS && plan.nunits == 4, "plan unusable after failures: %s, %zu",
          weft_status_string(status), plan.nunits);
    weft_plan_fini(&plan);
    CHECK(plan.units == NULL && plan.scratch == NULL && plan.nunits == 0,
          "weft_plan_fini left arrays");
}

/* ------------------------------------------------------------------------------------------ */
/* Random inputs                                                                              */
/* ------------------------------------------------------------------------------------------ */

#define MAX_PEER 4096
#define MAX_RANDOM_WORKERS 64 /* the reference keeps a 64-bit worker mask per peer */

static uint64_t rng_next(uint64_t *state)
{
    /* splitmix64 */
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A tier's cut: its unit size rounded down to the granule, at least one granule. */
static uint64_t tier_cut_of(const weft_cost_model_t *m, weft_tier_t tier, uint64_t granule)
{
    uint64_t cut = m->tier[tier].unit_bytes - m->tier[tier].unit_bytes % granule;
    return cut != 0 ? cut : granule;
}

/* A slice's cut: its tier's, or where that makes more than WEFT_PARTITION_UNITS_PER_WORKER *
 * nworkers units, the least multiple of the granule that makes at most that many (the slice
 * itself where that multiple overflows). Written as a search over multiples of the granule. */
static uint64_t cut_of(const weft_cost_model_t *m, const weft_slice_t *sl, int nworkers,
                       uint64_t granule)
{
    uint64_t max_units = (uint64_t)WEFT_PARTITION_UNITS_PER_WORKER * (uint64_t)nworkers;
    uint64_t cut = tier_cut_of(m, sl->tier, granule);
    if (sl->bytes == 0 || (sl->bytes - 1) / cut + 1 <= max_units)
        return cut;
    /* Units of k granules: the least k with ceil(bytes / (k * granule)) <= max_units. */
    uint64_t lo = cut / granule, hi = UINT64_MAX / granule;
    if ((sl->bytes - 1) / (hi * granule) + 1 > max_units)
        return sl->bytes;
    while (lo + 1 < hi) {
        uint64_t k = lo + (hi - lo) / 2;
        if ((sl->bytes - 1) / (k * granule) + 1 <= max_units)
            hi = k;
        else
            lo = k;
    }
    return hi * granule;
}

static int cmp_offset(const void *pa, const void *pb)
{
    const weft_unit_t *a = pa, *b = pb;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

static int cmp_lpt(const void *pa, const void *pb)
{
    const weft_unit_t *a = pa, *b = pb;
    if (a->cost_us != b->cost_us)
        return a->cost_us > b->cost_us ? -1 : 1;
    if (a->slice != b->slice)
        return a->slice < b->slice ? -1 : 1;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/*
 * The contract written out plainly: every unit listed and sorted, fan-out tracked with a worker
 * mask per peer. Fills units (plan order) and loads; returns the number of units.
 * naive: one whole unit per slice on worker slice % nworkers.
 */
static size_t reference_plan(const weft_cost_model_t *m, const weft_slice_t *slices, size_t n,
                             int nworkers, uint64_t granule, bool naive, weft_unit_t *units,
                             weft_unit_t *tmp, double *load_us)
{
    static uint64_t mask[MAX_PEER];
    memset(mask, 0, sizeof mask);
    size_t nunits = 0;
    for (size_t s = 0; s < n; s++) {
        uint64_t cut = naive ? slices[s].bytes : cut_of(m, &slices[s], nworkers, granule);
        for (uint64_t off = 0; off < slices[s].bytes; off += cut) {
            uint64_t bytes = slices[s].bytes - off < cut ? slices[s].bytes - off : cut;
            tmp[nunits++] =
                (weft_unit_t){(uint32_t)s, 0, off, bytes, weft_cost_us(m, slices[s].tier, bytes)};
        }
    }
    qsort(tmp, nunits, sizeof *tmp, cmp_lpt);
    for (int w = 0; w < nworkers; w++)
        load_us[w] = 0.0;
    for (size_t u = 0; u < nunits; u++) {
        const weft_slice_t *sl = &slices[tmp[u].slice];
        int best = -1;
        if (naive) {
            best = (int)(tmp[u].slice % (uint32_t)nworkers);
        } else {
            bool open = __builtin_popcountll(mask[sl->peer]) < m->tier[sl->tier].fanout;
            for (int w = 0; w < nworkers; w++)
                if ((open || (mask[sl->peer] >> w & 1)) && (best < 0 || load_us[w] < load_us[best]))
                    best = w;
            mask[sl->peer] |= 1ull << best;
        }
        tmp[u].worker = (uint32_t)best;
        load_us[best] += tmp[u].cost_us;
    }
    size_t k = 0;
    for (int w = 0; w < nworkers; w++)
        for (size_t u = 0; u < nunits; u++)
            if ((int)tmp[u].worker == w)
                units[k++] = tmp[u];
    return k;
}

/* Invariants of any plan from weft_partition (naive: the baseline's). Returns false on failure
 * (after printing). */
static bool check_invariants(const char *tag, const weft_cost_model_t *m,
                             const weft_slice_t *slices, size_t n, int nworkers, uint64_t granule,
                             bool naive, const weft_plan_t *plan)
{
    int before = failures;
    CHECK(plan->nworkers == nworkers, "%s: nworkers %d", tag, plan->nworkers);
    CHECK(plan->worker_begin[0] == 0 && plan->worker_begin[nworkers] == plan->nunits,
          "%s: worker_begin spans [%zu, %zu), %zu units", tag, plan->worker_begin[0],
          plan->worker_begin[nworkers], plan->nunits);
    if (failures != before)
        return false;

    /* Index of the first unit of each slice in a global numbering: slice s has
     * ceil(bytes / cut) units, unit k at offset k * cut. */
    static size_t first[4096];
    static unsigned char seen[1 << 17];
    size_t total_units = 0;
    for (size_t s = 0; s < n; s++) {
        uint64_t cut = naive ? slices[s].bytes : cut_of(m, &slices[s], nworkers, granule);
        first[s] = total_units;
        total_units += slices[s].bytes == 0 ? 0 : (slices[s].bytes + cut - 1) / cut;
    }
    CHECK(plan->nunits == total_units, "%s: %zu units, expected %zu", tag, plan->nunits,
          total_units);
    if (plan->nunits != total_units || total_units > sizeof seen)
        return false;
    memset(seen, 0, total_units);

    static uint64_t mask[MAX_PEER];
    static int max_fanout[MAX_PEER];
    memset(mask, 0, sizeof mask);
    memset(max_fanout, 0, sizeof max_fanout);
    double total_us = 0.0, max_unit_us = 0.0, max_load_us = 0.0;
    int min_fanout = nworkers;
    for (int w = 0; w < nworkers; w++) {
        size_t b = plan->worker_begin[w], e = plan->worker_begin[w + 1];
        CHECK(b <= e, "%s: worker_begin decreases at %d", tag, w);
        double load_us = 0.0;
        for (size_t u = b; u < e && u < plan->nunits; u++) {
            const weft_unit_t *x = &plan->units[u];
            CHECK(x->worker == (uint32_t)w, "%s: unit %zu in worker %d's range says %u", tag, u, w,
                  x->worker);
            if (x->slice >= n) {
                CHECK(0, "%s: unit %zu: slice %u out of range", tag, u, x->slice);
                continue;
            }
            const weft_slice_t *sl = &slices[x->slice];
            uint64_t cut = naive ? sl->bytes : cut_of(m, sl, nworkers, granule);
            /* Exactly-once coverage: the unit is the k-th cut of its slice, with the exact
             * length that cut has, and no other unit is. */
            CHECK(x->bytes > 0 && x->offset % cut == 0 && x->offset < sl->bytes &&
                      x->bytes == (sl->bytes - x->offset < cut ? sl->bytes - x->offset : cut),
                  "%s: unit %zu {slice %u, offset %" PRIu64 ", %" PRIu64 " bytes} is not a cut "
                  "of %" PRIu64 " (slice of %" PRIu64 " bytes)",
                  tag, u, x->slice, x->offset, x->bytes, cut, sl->bytes);
            if (x->offset < sl->bytes && x->offset % cut == 0) {
                size_t g = first[x->slice] + (size_t)(x->offset / cut);
                CHECK(!seen[g], "%s: slice %u offset %" PRIu64 " covered twice", tag, x->slice,
                      x->offset);
                seen[g] = 1;
            }
            CHECK(x->cost_us == weft_cost_us(m, sl->tier, x->bytes), "%s: unit %zu cost %.17g", tag,
                  u, x->cost_us);
            if (u > b) {
                const weft_unit_t *p = &plan->units[u - 1];
                CHECK(cmp_lpt(p, x) < 0, "%s: units %zu and %zu of worker %d not in LPT order", tag,
                      u - 1, u, w);
            }
            load_us += x->cost_us;
            total_us += x->cost_us;
            max_unit_us = x->cost_us > max_unit_us ? x->cost_us : max_unit_us;
            mask[sl->peer] |= 1ull << w;
            int h = m->tier[sl->tier].fanout;
            max_fanout[sl->peer] = h > max_fanout[sl->peer] ? h : max_fanout[sl->peer];
            min_fanout = h < min_fanout ? h : min_fanout;
        }
        CHECK(near(plan->worker_load_us[w], load_us),
              "%s: load of worker %d %.17g, units sum "
              "%.17g",
              tag, w, plan->worker_load_us[w], load_us);
        max_load_us = plan->worker_load_us[w] > max_load_us ? plan->worker_load_us[w] : max_load_us;
    }
    for (size_t g = 0; g < total_units; g++)
        CHECK(seen[g], "%s: a cut of the slices (global unit %zu) is missing", tag, g);
    CHECK(plan->makespan_us == max_load_us, "%s: makespan %.17g, max load %.17g", tag,
          plan->makespan_us, max_load_us);
    if (total_units != 0) {
        /* Lower bounds of any schedule. */
        CHECK(plan->makespan_us >= max_unit_us &&
                  plan->makespan_us >= total_us / nworkers * (1 - 1e-12),
              "%s: makespan %.17g below the lower bound max(%.17g, %.17g)", tag, plan->makespan_us,
              max_unit_us, total_us / nworkers);
    }
    if (!naive && total_units != 0) {
        /* Fan-out: a new worker joins a peer only while the peer has fewer than H_t, so a peer
         * never exceeds the largest H_t among its slices' tiers. */
        for (size_t s = 0; s < n; s++) {
            int peer = slices[s].peer;
            CHECK(__builtin_popcountll(mask[peer]) <= max_fanout[peer],
                  "%s: peer %d on %d workers, cap %d", tag, peer, __builtin_popcountll(mask[peer]),
                  max_fanout[peer]);
        }
        /* Greedy bound. When unit j is placed, at least m = min(nworkers, min H_t) workers are
         * allowed (all of them, or the peer's >= H_t workers), and the least loaded of them
         * holds at most (total - p_j) / m. So makespan <= total / m + (1 - 1/m) * max unit.
         * With no cap (m = nworkers) this is Graham's list-scheduling bound. */
        double mw = min_fanout < nworkers ? min_fanout : nworkers;
        double bound = total_us / mw + (1.0 - 1.0 / mw) * max_unit_us;
        CHECK(plan->makespan_us <= bound * (1 + 1e-12),
              "%s: makespan %.17g above the greedy bound %.17g", tag, plan->makespan_us, bound);
    }
    size_t busy = (size_t)nworkers < total_units ? (size_t)nworkers : total_units;
    double imbalance = weft_plan_imbalance(plan);
    double expected = busy == 0 ? 0.0 : plan->makespan_us / (total_us / (double)busy) - 1.0;
    CHECK(imbalance >= 0.0 && fabs(imbalance - (expected > 0 ? expected : 0.0)) <= 1e-9,
          "%s: imbalance %.17g, expected %.17g", tag, imbalance, expected);
    return failures == before;
}

static void compare_reference(const char *tag, const weft_unit_t *ref, size_t nref,
                              const double *ref_load, const weft_plan_t *plan)
{
    CHECK(plan->nunits == nref, "%s: %zu units, reference %zu", tag, plan->nunits, nref);
    if (plan->nunits != nref)
        return;
    for (size_t u = 0; u < nref; u++) {
        const weft_unit_t *a = &plan->units[u], *e = &ref[u];
        if (a->slice != e->slice || a->worker != e->worker || a->offset != e->offset ||
            a->bytes != e->bytes || a->cost_us != e->cost_us) {
            CHECK(0,
                  "%s: unit %zu {slice %u, worker %u, offset %" PRIu64
                  "}, reference {%u, %u, %" PRIu64 "}",
                  tag, u, a->slice, a->worker, a->offset, e->slice, e->worker, e->offset);
            return;
        }
    }
    for (int w = 0; w < plan->nworkers; w++)
        CHECK(plan->worker_load_us[w] == ref_load[w], "%s: load %d %.17g, reference %.17g", tag, w,
              plan->worker_load_us[w], ref_load[w]);
}

/* The units of the plan's slice s, sorted by offset, cover [0, bytes) exactly once: each starts
 * where the one before ends. Checked without a per-unit table, so it holds for any slice size. */
static void check_tiling(const char *tag, const weft_plan_t *plan, uint32_t s, uint64_t bytes,
                         uint64_t granule)
{
    static weft_unit_t mine[4096];
    size_t n = 0;
    for (size_t u = 0; u < plan->nunits; u++) {
        if (plan->units[u].slice != s)
            continue;
        if (n == sizeof mine / sizeof mine[0]) {
            CHECK(0, "%s: slice %u has more than %zu units", tag, s, n);
            return;
        }
        mine[n++] = plan->units[u];
    }
    qsort(mine, n, sizeof mine[0], cmp_offset);
    uint64_t end = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(mine[i].offset == end && mine[i].bytes > 0 && mine[i].bytes <= bytes - end,
              "%s: slice %u unit %zu {offset %" PRIu64 ", %" PRIu64
              " bytes} does not start at %" PRIu64,
              tag, s, i, mine[i].offset, mine[i].bytes, end);
        CHECK(mine[i].offset % granule == 0, "%s: slice %u offset %" PRIu64 " is off the granule",
              tag, s, mine[i].offset);
        end = mine[i].offset + mine[i].bytes;
    }
    CHECK(end == bytes, "%s: slice %u covered up to %" PRIu64 " of %" PRIu64 " bytes", tag, s, end,
          bytes);
}

/*
 * The unit bound: however small the unit size, one slice makes at most
 * WEFT_PARTITION_UNITS_PER_WORKER * nworkers units (a 64-byte unit size once cut a 128 MiB slice
 * into 2^21 units, and refused a slice of 2^38 bytes as more than 2^32), still covering every
 * byte once, on granule boundaries, under the fan-out cap, and as weft_partition_units counts.
 */
static void test_unit_bound(void)
{
    weft_cost_model_t tiny;
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        tiny.tier[t] = (weft_tier_params_t){1.0, 1.0, 1, 2};
    const struct {
        const char *name;
        size_t nslices;
        weft_slice_t slices[4];
        int nworkers;
        uint64_t granule;
    } cases[] = {
        {"128 MiB, 2 workers", 1, {{1, PEER, 128ull << 20}}, 2, 64},
        {"2^38 + 3 bytes, 3 workers", 1, {{1, PEER, (1ull << 38) + 3}}, 3, 64},
        {"2^64 - 1 bytes, granule 1, 2 workers", 1, {{1, PEER, UINT64_MAX}}, 2, 1},
        {"2^64 - 1 bytes, granule 2^63, 2 workers", 1, {{1, PEER, UINT64_MAX}}, 2, 1ull << 63},
        {"four slices, two peers, 8 workers",
         4,
         {{1, PEER, 1ull << 30}, {2, NUMA, (1ull << 33) + 64}, {1, SELF, 4096}, {2, PEER, 100}},
         8,
         64},
    };
    weft_plan_t plan;
    weft_plan_init(&plan);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *tag = cases[c].name;
        const weft_slice_t *slices = cases[c].slices;
        size_t n = cases[c].nslices;
        int nworkers = cases[c].nworkers;
        uint64_t granule = cases[c].granule, bound = 64 * (uint64_t)nworkers;
        weft_status_t status = weft_partition(&tiny, slices, n, nworkers, granule, &plan);
        CHECK(status == WEFT_SUCCESS, "%s: status %s: %s", tag, weft_status_string(status),
              weft_last_error());
        if (status != WEFT_SUCCESS)
            continue;
        CHECK(plan.nunits <= n * bound, "%s: %zu units, more than %" PRIu64 " per slice", tag,
              plan.nunits, bound);
        CHECK(weft_partition_units(&tiny, slices, n, nworkers, granule) == plan.nunits,
              "%s: weft_partition_units %" PRIu64 ", the plan %zu", tag,
              weft_partition_units(&tiny, slices, n, nworkers, granule), plan.nunits);
        for (size_t s = 0; s < n; s++) {
            size_t units = 0;
            for (size_t u = 0; u < plan.nunits; u++)
                units += plan.units[u].slice == s;
            CHECK(units <= bound, "%s: slice %zu makes %zu units, more than %" PRIu64, tag, s,
                  units, bound);
            check_tiling(tag, &plan, (uint32_t)s, slices[s].bytes, granule);
        }
        /* Exact cuts, LPT order, loads and the fan-out cap, as for every plan (check_invariants
         * rounds bytes up to whole cuts, which overflows near 2^64). */
        bool small = true;
        for (size_t s = 0; s < n; s++)
            small = small && slices[s].bytes <= UINT64_MAX / 2;
        if (small)
            (void)check_invariants(tag, &tiny, slices, n, nworkers, granule, false, &plan);
    }
    weft_plan_fini(&plan);
}

static void random_model(uint64_t *rng, weft_cost_model_t *m, int nworkers)
{
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        weft_tier_params_t *p = &m->tier[t];
        p->lat_us = rng_next(rng) % 4 == 0 ? 0.0 : (double)(rng_next(rng) % 1000) / 100.0;
        p->bw_gbps = 0.1 + (double)(rng_next(rng) % 1000) / 10.0;
        p->unit_bytes = 1 + rng_next(rng) % 65536;
        p->fanout = rng_next(rng) % 4 == 0 ? nworkers + (int)(rng_next(rng) % 8)
                                           : 1 + (int)(rng_next(rng) % 8);
    }
}

static void test_random(uint64_t seed)
{
    static const uint64_t granules[] = {1, 2, 4, 8, 16, 64, 256, 768, 1000, 4096};
    static weft_slice_t slices[4096];
    static weft_unit_t ref[1 << 17], tmp[1 << 17];
    static double ref_load[MAX_RANDOM_WORKERS];
    uint64_t rng = seed;
    weft_plan_t plan, naive;
    weft_plan_init(&plan);
    weft_plan_init(&naive);
    const int iters = 3000;
    for (int iter = 0; iter < iters && failures < 100; iter++) {
        char tag[96];
        snprintf(tag, sizeof tag, "seed %" PRIu64 " iter %d", seed, iter);
        int nworkers = 1 + (int)(rng_next(&rng) % MAX_RANDOM_WORKERS);
        uint64_t granule = granules[rng_next(&rng) % (sizeof granules / sizeof granules[0])];
        weft_cost_model_t m;
        random_model(&rng, &m, nworkers);
        /* Mostly collective-sized inputs; every 50th has thousands of slices of few units. */
        bool wide = iter % 50 == 49;
        /* Every 7th has slices of up to 400 units on 1 to 4 workers: the per-slice unit bound
         * (64 per worker) cuts the longer ones coarser. */
        bool capped = !wide && iter % 7 == 3;
        if (capped)
            nworkers = 1 + nworkers % 4;
        size_t n = wide ? 1000 + rng_next(&rng) % 3000 : rng_next(&rng) % 65;
        int pool[16], npool = 1 + (int)(rng_next(&rng) % 16);
        for (int i = 0; i < npool; i++)
            pool[i] = (int)(rng_next(&rng) % MAX_PEER);
        for (size_t s = 0; s < n; s++) {
            weft_tier_t tier = (weft_tier_t)(rng_next(&rng) % WEFT_NUM_TIERS);
            uint64_t cut = tier_cut_of(&m, tier, granule);
            uint64_t max_units = wide ? 3 : capped ? 400 : 40;
            slices[s].peer =
                wide ? (int)(rng_next(&rng) % MAX_PEER) : pool[rng_next(&rng) % (uint64_t)npool];
            slices[s].tier = tier;
            slices[s].bytes = rng_next(&rng) % 8 == 0 ? 0 : rng_next(&rng) % (max_units * cut + 1);
        }

        poison(&plan);
        weft_status_t status = weft_partition(&m, slices, n, nworkers, granule, &plan);
        CHECK(status == WEFT_SUCCESS, "%s: status %s: %s", tag, weft_status_string(status),
              weft_last_error());
        if (status != WEFT_SUCCESS)
            continue;
        if (!check_invariants(tag, &m, slices, n, nworkers, granule, false, &plan))
            continue;
        size_t nref = reference_plan(&m, slices, n, nworkers, granule, false, ref, tmp, ref_load);
        compare_reference(tag, ref, nref, ref_load, &plan);

        poison(&naive);
        status = weft_partition_naive(&m, slices, n, nworkers, &naive);
        CHECK(status == WEFT_SUCCESS, "%s: naive status %s", tag, weft_status_string(status));
        if (status != WEFT_SUCCESS ||
            !check_invariants(tag, &m, slices, n, nworkers, 1, true, &naive))
            continue;
        nref = reference_plan(&m, slices, n, nworkers, 1, true, ref, tmp, ref_load);
        compare_reference(tag, ref, nref, ref_load, &naive);

        /* When no slice is cut, nothing is capped and every slice has its own worker, LPT and
         * the naive plan both put each slice alone on a worker: equal makespans. */
        if (!wide) {
            size_t k = n < (size_t)nworkers ? n : (size_t)nworkers;
            uint64_t largest = 1;
            for (size_t s = 0; s < k; s++)
                largest = slices[s].bytes > largest ? slices[s].bytes : largest;
            weft_cost_model_t whole = m;
            for (int t = 0; t < WEFT_NUM_TIERS; t++) {
                whole.tier[t].unit_bytes = largest;
                whole.tier[t].fanout = nworkers;
            }
            status = weft_partition(&whole, slices, k, nworkers, 1, &plan);
            weft_status_t status2 = weft_partition_naive(&whole, slices, k, nworkers, &naive);
            CHECK(status == WEFT_SUCCESS && status2 == WEFT_SUCCESS &&
                      plan.makespan_us == naive.makespan_us,
                  "%s: uncut, uncapped, %zu slices on %d workers: LPT %.17g, naive %.17g", tag, k,
                  nworkers, plan.makespan_us, naive.makespan_us);
        }
    }
    weft_plan_fini(&plan);
    weft_plan_fini(&naive);
}

/* A warm plan allocates nothing: the same or smaller inputs keep every array in place. */
static void test_warm_reuse(void)
{
    weft_slice_t slices[64];
    for (int s = 0; s < 64; s++)
        slices[s] = (weft_slice_t){s * 61 % 4096, (weft_tier_t)(s % WEFT_NUM_TIERS),
                                   (uint64_t)(s + 1) * 1500};
    weft_plan_t plan;
    weft_plan_init(&plan);
    CHECK(weft_partition(&model_capped, slices, 64, 32, 16, &plan) == WEFT_SUCCESS, "warm-up: %s",
          weft_last_error());
    void *units = plan.units, *begin = plan.worker_begin, *load = plan.worker_load_us;
    void *scratch = plan.scratch;
    for (int i = 0; i < 3; i++) {
        CHECK(weft_partition(&model_capped, slices, 64 - 20 * (size_t)i, 32 - 10 * i, 16, &plan) ==
                      WEFT_SUCCESS &&
                  weft_partition_naive(&model_capped, slices, 64, 32, &plan) == WEFT_SUCCESS,
              "warm call %d: %s", i, weft_last_error());
        CHECK(plan.units == units && plan.worker_begin == begin && plan.worker_load_us == load &&
                  plan.scratch == scratch,
              "warm call %d reallocated the plan", i);
    }
    weft_plan_fini(&plan);
}

/* Time of a typical call on a warm plan, printed for information (not asserted). */
static void report_speed(void)
{
    weft_slice_t slices[64];
    for (int s = 0; s < 64; s++)
        slices[s] = (weft_slice_t){s, s == 0 ? SELF : (s < 32 ? PEER : NUMA),
                                   (uint64_t)(64 - s) * 1000 + 512};
    weft_plan_t plan;
    weft_plan_init(&plan);
    const int reps = 2000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < reps; i++)
        if (weft_partition(&model_capped, slices, 64, 64, 16, &plan) != WEFT_SUCCESS)
            CHECK(0, "speed run failed: %s", weft_last_error());
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us =
        ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps;
    printf("test_partition: 64 slices, %zu units, 64 workers: %.2f us per call\n", plan.nunits, us);
    weft_plan_fini(&plan);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    printf("test_partition: seed %" PRIu64 "\n", seed);
    test_golden();
    test_invalid();
    test_warm_reuse();
    test_unit_bound();
    test_random(seed);
    report_speed();
    if (failures != 0)
        printf("test_partition: %d checks failed\n", failures);
    return failures != 0;
}
