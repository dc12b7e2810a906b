/*
 * test_steal.c - work stealing over partitioner plans (exec/steal.h), with real threads: every
 * unit runs exactly once (an atomic count per unit), each worker runs a prefix of its own range
 * in plan order and then only other workers' units, thieves take each victim's units from the
 * back, and the reported steal counts match what each worker ran. Plans come from
 * weft_partition on random slices with 1..8 workers, including workers with no units, plans with
 * one unit and empty plans. In "sleeper" rounds one worker starts only after all the others
 * returned, so the result does not depend on timing: its units must all have been stolen, each
 * exactly once. Also prepare's statuses and the reuse of a warm weft_steal_t across plans. The
 * seed is printed; pass one as argv[1] to replay.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/steal.h"
#include "model/partition.h"
#include "util/log.h"
#include "util/splitmix.h"
#include "check.h"

#define MAX_WORKERS 8
#define MAX_SLICES 12
#define RANDOM_ROUNDS 300
#define NO_SLEEPER (-1)

/* One round: a plan run by nworkers threads through one weft_steal_t. */
typedef struct round {
    weft_steal_t *steal;
    const weft_plan_t *plan;
    int nworkers;
    int sleeper;            /* worker that starts after all others returned, or NO_SLEEPER */
    _Atomic uint32_t *runs; /* per unit: how many times it ran */
    _Atomic int returned;   /* workers that returned from weft_steal_run */
    pthread_barrier_t start;
    size_t stolen[MAX_WORKERS];      /* weft_steal_run's result per worker */
    uint32_t *log[MAX_WORKERS];      /* per worker: the units it ran, in order (nunits room) */
    size_t nlog[MAX_WORKERS];        /* entries written to log (at most nunits) */
    size_t log_overrun[MAX_WORKERS]; /* calls past nunits: a unit ran more than once */
} round_t;

typedef struct worker_ctx {
    round_t *round;
    int worker;
} worker_ctx_t;

static void run_unit(void *arg, const weft_unit_t *unit)
{
    worker_ctx_t *c = arg;
    round_t *r = c->round;
    size_t u = (size_t)(unit - r->plan->units);
    atomic_fetch_add_explicit(&r->runs[u], 1, memory_order_relaxed);
    if (r->nlog[c->worker] < r->plan->nunits)
        r->log[c->worker][r->nlog[c->worker]++] = (uint32_t)u;
    else
        r->log_overrun[c->worker]++;
}

static void *worker_main(void *arg)
{
    worker_ctx_t *c = arg;
    round_t *r = c->round;
    pthread_barrier_wait(&r->start);
    if (c->worker == r->sleeper) {
        while (atomic_load_explicit(&r->returned, memory_order_acquire) < r->nworkers - 1)
            sched_yield();
    }
    r->stolen[c->worker] = weft_steal_run(r->steal, c->worker, run_unit, c);
    atomic_fetch_add_explicit(&r->returned, 1, memory_order_release);
    return NULL;
}

/* Check one finished round; name identifies it in failure messages. */
static void check_round(const round_t *r, const char *name)
{
    const weft_plan_t *plan = r->plan;
    size_t total_logged = 0, total_stolen = 0, foreign = 0;
    for (size_t u = 0; u < plan->nunits; u++) {
        uint32_t n = atomic_load_explicit(&r->runs[u], memory_order_relaxed);
        CHECK(n == 1, "%s: unit %zu ran %u times", name, u, n);
    }
    for (int w = 0; w < r->nworkers; w++) {
        size_t begin = plan->worker_begin[w], end = plan->worker_begin[w + 1];
        CHECK(r->log_overrun[w] == 0, "%s: worker %d ran %zu units past the plan's %zu", name, w,
              r->log_overrun[w], plan->nunits);
        /* Its own units first, as a prefix of its range in plan order... */
        size_t own = 0;
        while (own < r->nlog[w] && begin + own < end && r->log[w][own] == begin + own)
            own++;
        /* ...then only units of other workers, each victim's from the back. */
        uint32_t last_from[MAX_WORKERS];
        for (int v = 0; v < MAX_WORKERS; v++)
            last_from[v] = UINT32_MAX;
        for (size_t i = own; i < r->nlog[w]; i++) {
            uint32_t u = r->log[w][i];
            int v = (int)plan->units[u].worker;
            CHECK(v != w, "%s: worker %d ran its own unit %u after stealing (position %zu)", name,
                  w, u, i);
            CHECK(v >= 0 && v < r->nworkers && u < last_from[v],
                  "%s: worker %d stole unit %u of worker %d after unit %u: not from the back", name,
                  w, u, v, last_from[v]);
            if (v >= 0 && v < MAX_WORKERS)
                last_from[v] = u;
        }
        CHECK(r->stolen[w] == r->nlog[w] - own, "%s: worker %d reports %zu stolen, ran %zu", name,
              w, r->stolen[w], r->nlog[w] - own);
        for (size_t i = 0; i < r->nlog[w]; i++)
            foreign += plan->units[r->log[w][i]].worker != (uint32_t)w;
        total_logged += r->nlog[w];
        total_stolen += r->stolen[w];
    }
    CHECK(total_logged == plan->nunits, "%s: %zu unit runs for %zu units", name, total_logged,
          plan->nunits);
    CHECK(total_stolen == foreign, "%s: %zu reported stolen, %zu ran off their planned worker",
          name, total_stolen, foreign);
    if (r->sleeper != NO_SLEEPER) {
        /* Everybody else returned before it started: nothing was left for it, and all its own
         * units went to thieves. */
        size_t mine = plan->worker_begin[r->sleeper + 1] - plan->worker_begin[r->sleeper];
        CHECK(r->nlog[r->sleeper] == 0 && r->stolen[r->sleeper] == 0,
              "%s: the sleeper %d ran %zu units (%zu stolen), expected none", name, r->sleeper,
              r->nlog[r->sleeper], r->stolen[r->sleeper]);
        CHECK(total_stolen >= mine, "%s: %zu units stolen, the sleeper %d alone had %zu", name,
              total_stolen, r->sleeper, mine);
    }
}

/* Prepare s for plan and run it on plan->nworkers threads; false if it could not run. */
static bool run_round(weft_steal_t *s, const weft_plan_t *plan, int sleeper, const char *name)
{
    int nworkers = plan->nworkers;
    round_t r = {.steal = s, .plan = plan, .nworkers = nworkers, .sleeper = sleeper};
    weft_status_t status = weft_steal_prepare(s, plan);
    CHECK(status == WEFT_SUCCESS, "%s: prepare: %s", name, weft_status_string(status));
    if (status != WEFT_SUCCESS)
        return false;
    size_t nunits = plan->nunits != 0 ? plan->nunits : 1;
    r.runs = calloc(nunits, sizeof *r.runs);
    bool ok = r.runs != NULL;
    for (int w = 0; w < nworkers; w++) {
        r.log[w] = malloc(nunits * sizeof *r.log[w]);
        ok = ok && r.log[w] != NULL;
    }
    if (!ok || pthread_barrier_init(&r.start, NULL, (unsigned)nworkers) != 0) {
        printf("test_steal: out of memory\n");
        exit(1);
    }
    pthread_t threads[MAX_WORKERS];
    worker_ctx_t ctx[MAX_WORKERS];
    for (int w = 0; w < nworkers; w++) {
        ctx[w] = (worker_ctx_t){&r, w};
        if (pthread_create(&threads[w], NULL, worker_main, &ctx[w]) != 0) {
            /* The started threads wait at a barrier that can no longer fill. */
            printf("test_steal: pthread_create failed\n");
            exit(1);
        }
    }
    for (int w = 0; w < nworkers; w++)
        pthread_join(threads[w], NULL);
    pthread_barrier_destroy(&r.start);
    check_round(&r, name);
    for (int w = 0; w < nworkers; w++)
        free(r.log[w]);
    free(r.runs);
    return true;
}

/* A model whose PEER tier cuts at unit_bytes with at most fanout workers per peer. */
static weft_cost_model_t peer_model(uint64_t unit_bytes, int fanout)
{
    weft_cost_model_t m;
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        m.tier[t] = (weft_tier_params_t){1.0, 1.0, unit_bytes, fanout};
    return m;
}

/* Edge cases whose outcome the sleeper makes exact. */
static void test_fixed(weft_steal_t *s)
{
    weft_plan_t plan;
    weft_plan_init(&plan);
    char name[96];

    /* One unit, on worker 0, for 1, 2 and 8 workers; with 2 and 8 worker 0 sleeps, so exactly
     * one unit is stolen. */
    const weft_slice_t one[] = {{1, WEFT_TIER_PEER, 4000}};
    weft_cost_model_t m = peer_model(4096, 2);
    const int counts[] = {1, 2, 8};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        int n = counts[i];
        if (weft_partition(&m, one, 1, n, 64, &plan) != WEFT_SUCCESS) {
            CHECK(0, "one unit, %d workers: partition: %s", n, weft_last_error());
            continue;
        }
        CHECK(plan.nunits == 1 && plan.worker_begin[1] == 1, "one unit, %d workers: bad plan", n);
        snprintf(name, sizeof name, "one unit, %d workers", n);
        run_round(s, &plan, NO_SLEEPER, name);
        if (n > 1) {
            snprintf(name, sizeof name, "one unit, %d workers, worker 0 asleep", n);
            run_round(s, &plan, 0, name);
        }
    }

    /* No units: every worker returns at once. */
    if (weft_partition(&m, NULL, 0, 4, 64, &plan) == WEFT_SUCCESS)
        run_round(s, &plan, NO_SLEEPER, "empty plan, 4 workers");
    else
        CHECK(0, "empty plan: partition: %s", weft_last_error());

    /* Fan-out 1 and one peer: all 64 units on worker 0, seven workers with none. Asleep, worker
     * 0 leaves all 64 to the thieves. */
    const weft_slice_t big[] = {{3, WEFT_TIER_PEER, 64 * 1024}};
    m = peer_model(1024, 1);
    if (weft_partition(&m, big, 1, 8, 64, &plan) == WEFT_SUCCESS) {
        CHECK(plan.nunits == 64 && plan.worker_begin[1] == 64 && plan.worker_begin[8] == 64,
              "one peer, fan-out 1: bad plan");
        run_round(s, &plan, NO_SLEEPER, "one peer, fan-out 1, 8 workers");
        run_round(s, &plan, 0, "one peer, fan-out 1, 8 workers, worker 0 asleep");
        /* A worker without units asleep: it finds nothing left. */
        run_round(s, &plan, 5, "one peer, fan-out 1, 8 workers, worker 5 asleep");
    } else {
        CHECK(0, "one peer: partition: %s", weft_last_error());
    }
    weft_plan_fini(&plan);
}

/* Random slices, models and worker counts; every other round has a random sleeper. */
static void test_random(weft_steal_t *s, uint64_t seed)
{
    static const int worker_counts[] = {1, 2, 3, 4, 5, 8};
    uint64_t rng = seed;
    weft_plan_t plan;
    weft_plan_init(&plan);
    char name[128];
    size_t sleeper_rounds = 0, stolen_in_sleeper_rounds = 0;
    for (int round = 0; round < RANDOM_ROUNDS; round++) {
        int nworkers =
            worker_counts[weft_splitmix64_next(&rng) % (sizeof worker_counts / sizeof(int))];
        size_t nslices = (size_t)(weft_splitmix64_next(&rng) % (MAX_SLICES + 1));
        weft_slice_t slices[MAX_SLICES];
        for (size_t i = 0; i < nslices; i++) {
            uint64_t bytes =
                weft_splitmix64_next(&rng) % 5 == 0 ? 0 : weft_splitmix64_next(&rng) % (64 * 1024);
            slices[i] =
                (weft_slice_t){.peer = (int)(weft_splitmix64_next(&rng) % 6),
                               .tier = (weft_tier_t)(weft_splitmix64_next(&rng) % WEFT_NUM_TIERS),
                               .bytes = bytes};
        }
        weft_cost_model_t m;
        for (int t = 0; t < WEFT_NUM_TIERS; t++)
            m.tier[t] = (weft_tier_params_t){
                (double)(weft_splitmix64_next(&rng) % 100) / 10.0,
                0.5 + (double)(weft_splitmix64_next(&rng) % 100),
                256 + weft_splitmix64_next(&rng) % 8192,
                1 + (int)(weft_splitmix64_next(&rng) % (uint64_t)(nworkers + 2))};
        uint64_t granule = weft_splitmix64_next(&rng) % 2 ? 64 : 1;
        weft_status_t status =
            weft_partition(&m, nslices ? slices : NULL, nslices, nworkers, granule, &plan);
        CHECK(status == WEFT_SUCCESS, "round %d: partition: %s", round, weft_last_error());
        if (status != WEFT_SUCCESS)
            continue;
        int sleeper = NO_SLEEPER;
        if (nworkers > 1 && round % 2 == 1) {
            /* A worker with units if there is one, so that stealing is forced. */
            sleeper = (int)(weft_splitmix64_next(&rng) % (uint64_t)nworkers);
            for (int i = 0; i < nworkers; i++) {
                int w = (sleeper + i) % nworkers;
                if (plan.worker_begin[w + 1] > plan.worker_begin[w]) {
                    sleeper = w;
                    break;
                }
            }
        }
        snprintf(name, sizeof name, "round %d (%d workers, %zu units, sleeper %d)", round, nworkers,
                 plan.nunits, sleeper);
        if (run_round(s, &plan, sleeper, name) && sleeper != NO_SLEEPER) {
            sleeper_rounds++;
            stolen_in_sleeper_rounds += plan.worker_begin[sleeper + 1] - plan.worker_begin[sleeper];
        }
    }
    printf("test_steal: %d random rounds, %zu with a sleeper (%zu of its units stolen)\n",
           RANDOM_ROUNDS, sleeper_rounds, stolen_in_sleeper_rounds);
    weft_plan_fini(&plan);
}

static void test_prepare(void)
{
    weft_steal_t s;
    weft_steal_init(&s);
    weft_status_t status = weft_steal_prepare(&s, NULL);
    CHECK(status == WEFT_ERR_INVALID_ARGUMENT, "NULL plan: %s", weft_status_string(status));

    weft_plan_t empty;
    weft_plan_init(&empty); /* no workers */
    status = weft_steal_prepare(&s, &empty);
    CHECK(status == WEFT_ERR_INVALID_ARGUMENT, "plan with no workers: %s",
          weft_status_string(status));

    size_t begin[2] = {0, 0};
    weft_plan_t huge = {.nunits = (size_t)UINT32_MAX + 1, .worker_begin = begin, .nworkers = 1};
    status = weft_steal_prepare(&s, &huge);
    CHECK(status == WEFT_ERR_INVALID_ARGUMENT, "plan of 2^32 units: %s",
          weft_status_string(status));
    CHECK(s.plan == NULL && s.nworkers == 0, "a failed prepare leaves a round");

    /* Warm reuse: a smaller plan after a larger one keeps the array. */
    weft_plan_t plan;
    weft_plan_init(&plan);
    const weft_slice_t one[] = {{1, WEFT_TIER_PEER, 8192}};
    weft_cost_model_t m = peer_model(1024, 8);
    if (weft_partition(&m, one, 1, 8, 64, &plan) == WEFT_SUCCESS &&
        weft_steal_prepare(&s, &plan) == WEFT_SUCCESS) {
        const void *ranges = s.ranges;
        CHECK(s.ranges_cap >= 8 && s.nworkers == 8, "8 workers: cap %d, nworkers %d", s.ranges_cap,
              s.nworkers);
        if (weft_partition(&m, one, 1, 3, 64, &plan) == WEFT_SUCCESS &&
            weft_steal_prepare(&s, &plan) == WEFT_SUCCESS)
            CHECK(s.ranges == ranges && s.nworkers == 3, "3 after 8 workers: array replaced");
        else
            CHECK(0, "3 workers: %s", weft_last_error());
    } else {
        CHECK(0, "8 workers: %s", weft_last_error());
    }
    weft_plan_fini(&plan);
    weft_steal_fini(&s);
    CHECK(s.ranges == NULL && s.ranges_cap == 0, "fini leaves an array");
    weft_steal_fini(&s); /* twice: a no-op */
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    printf("test_steal: seed %" PRIu64 "\n", seed);
    test_prepare();
    /* One weft_steal_t for every round: it grows and shrinks between worker counts. */
    weft_steal_t s;
    weft_steal_init(&s);
    test_fixed(&s);
    test_random(&s, seed);
    weft_steal_fini(&s);
    if (failures != 0)
        printf("test_steal: %d checks failed\n", failures);
    return failures != 0;
}
