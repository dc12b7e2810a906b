/*
 * test_plan_cache.c - the plan cache against weft_partition and a reference LRU.
 *
 * Every plan the cache returns is compared field by field with a fresh weft_partition of the
 * same inputs; its hit and miss counts are compared with a reference least-recently-used list
 * over random calls drawn from a pool of keys larger than the cache (so entries are evicted and
 * recomputed). Also: keys that differ in one field only, invalid arguments (reported, and no
 * entry changed), a cache without entries, and a plan that stays valid until the next call. The
 * seed is printed; pass one as argv[1] to replay.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/plan_cache.h"
#include "util/splitmix.h"
#include "check.h"

#define MAX_SLICES 16
#define POOL 13

typedef struct key {
    weft_cost_model_t model;
    weft_slice_t slices[MAX_SLICES];
    size_t nslices;
    int nworkers;
    uint64_t granule;
} key_t_;

static uint64_t rng_state;

static uint64_t rng(void)
{
    return weft_splitmix64_next(&rng_state);
}

static key_t_ random_key(void)
{
    key_t_ k;
    memset(&k, 0, sizeof k);
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        k.model.tier[t] = (weft_tier_params_t){.lat_us = (double)(rng() % 8) * 0.25,
                                               .bw_gbps = 1.0 + (double)(rng() % 64),
                                               .unit_bytes = 64 * (1 + rng() % 64),
                                               .fanout = 1 + (int)(rng() % 4)};
    k.nslices = rng() % (MAX_SLICES + 1);
    for (size_t s = 0; s < k.nslices; s++)
        k.slices[s] = (weft_slice_t){.peer = (int)(rng() % 8),
                                     .tier = (weft_tier_t)(rng() % WEFT_NUM_TIERS),
                                     .bytes = rng() % 3 == 0 ? 0 : rng() % 20000};
    k.nworkers = 1 + (int)(rng() % 12);
    k.granule = rng() % 2 ? 64 : 16;
    return k;
}

/* The cached plan equals a fresh partition of the same key, field by field. */
static void check_plan(const weft_plan_t *got, const key_t_ *k, const char *what)
{
    weft_plan_t want;
    weft_plan_init(&want);
    weft_status_t st =
        weft_partition(&k->model, k->slices, k->nslices, k->nworkers, k->granule, &want);
    CHECK(st == WEFT_SUCCESS, "%s: reference partition failed: %s", what, weft_last_error());
    CHECK(got != NULL, "%s: no plan", what);
    if (st != WEFT_SUCCESS || got == NULL) {
        weft_plan_fini(&want);
        return;
    }
    CHECK(got->nunits == want.nunits, "%s: %zu units, want %zu", what, got->nunits, want.nunits);
    CHECK(got->nworkers == want.nworkers, "%s: %d workers, want %d", what, got->nworkers,
          want.nworkers);
    CHECK(got->makespan_us == want.makespan_us, "%s: makespan %g, want %g", what, got->makespan_us,
          want.makespan_us);
    for (size_t u = 0; u < got->nunits && u < want.nunits; u++) {
        const weft_unit_t *a = &got->units[u], *b = &want.units[u];
        CHECK(a->slice == b->slice && a->worker == b->worker && a->offset == b->offset &&
                  a->bytes == b->bytes && a->cost_us == b->cost_us,
              "%s: unit %zu is (%u, %u, %" PRIu64 ", %" PRIu64 "), want (%u, %u, %" PRIu64
              ", %" PRIu64 ")",
              what, u, a->slice, a->worker, a->offset, a->bytes, b->slice, b->worker, b->offset,
              b->bytes);
    }
    for (int w = 0; w <= got->nworkers && w <= want.nworkers; w++)
        CHECK(got->worker_begin[w] == want.worker_begin[w], "%s: worker_begin[%d] %zu, want %zu",
              what, w, got->worker_begin[w], want.worker_begin[w]);
    for (int w = 0; w < got->nworkers && w < want.nworkers; w++)
        CHECK(got->worker_load_us[w] == want.worker_load_us[w], "%s: load[%d] %g, want %g", what, w,
              got->worker_load_us[w], want.worker_load_us[w]);
    weft_plan_fini(&want);
}

static const weft_plan_t *lookup(weft_plan_cache_t *c, const key_t_ *k, weft_status_t *st)
{
    const weft_plan_t *plan = NULL;
    *st = weft_plan_cache_partition(c, &k->model, k->slices, k->nslices, k->nworkers, k->granule,
                                    &plan);
    return plan;
}

/* One lookup of k, whose plan must be right and which must be a hit (want_hit) or a miss. */
static void check_lookup(weft_plan_cache_t *c, const key_t_ *k, int want_hit, const char *what)
{
    uint64_t hits0, misses0, hits1, misses1;
    weft_plan_cache_counts(c, &hits0, &misses0);
    weft_status_t st;
    check_plan(lookup(c, k, &st), k, what);
    weft_plan_cache_counts(c, &hits1, &misses1);
    int hit = hits1 == hits0 + 1 && misses1 == misses0;
    int miss = misses1 == misses0 + 1 && hits1 == hits0;
    CHECK(want_hit ? hit : miss, "%s: want a %s, got hits +%" PRIu64 ", misses +%" PRIu64, what,
          want_hit ? "hit" : "miss", hits1 - hits0, misses1 - misses0);
}

/* Random calls over a pool of POOL keys against a reference LRU list of `entries` keys. */
static void test_random_lru(int entries, int calls)
{
    key_t_ pool[POOL];
    for (int i = 0; i < POOL; i++)
        pool[i] = random_key();
    /* Random keys may repeat; a distinct one per pool index keeps the reference exact. */
    for (int i = 0; i < POOL; i++) {
        pool[i].slices[0].peer = 100 + i;
        if (pool[i].nslices == 0)
            pool[i].nslices = 1;
    }
    weft_plan_cache_t *c = NULL;
    CHECK(weft_plan_cache_create(entries, &c) == WEFT_SUCCESS, "create(%d): %s", entries,
          weft_last_error());
    if (!c)
        return;
    int lru[POOL], nlru = 0; /* pool indices, most recent first */
    uint64_t want_hits = 0, want_misses = 0;
    for (int n = 0; n < calls; n++) {
        int i = (int)(rng() % POOL);
        int at = -1;
        for (int j = 0; j < nlru; j++)
            if (lru[j] == i)
                at = j;
        if (at >= 0) {
            want_hits++;
        } else {
            want_misses++;
            at = nlru < entries ? nlru++ : nlru - 1; /* the last one is evicted */
        }
        if (entries > 0) {
            memmove(&lru[1], &lru[0], (size_t)at * sizeof lru[0]);
            lru[0] = i;
        }
        weft_status_t st;
        const weft_plan_t *plan = lookup(c, &pool[i], &st);
        CHECK(st == WEFT_SUCCESS, "call %d (key %d): %s", n, i, weft_last_error());
        char what[64];
        snprintf(what, sizeof what, "entries %d, call %d, key %d", entries, n, i);
        check_plan(plan, &pool[i], what);
    }
    uint64_t hits, misses;
    weft_plan_cache_counts(c, &hits, &misses);
    CHECK(hits == want_hits && misses == want_misses,
          "entries %d: %" PRIu64 " hits / %" PRIu64 " misses, want %" PRIu64 " / %" PRIu64, entries,
          hits, misses, want_hits, want_misses);
    weft_plan_cache_destroy(c);
}

/* A key and its copy with one field changed must not share a plan. */
static void test_one_field_differs(void)
{
    key_t_ base = random_key();
    base.nslices = 4;
    for (size_t s = 0; s < base.nslices; s++)
        base.slices[s] = (weft_slice_t){.peer = (int)s, .tier = WEFT_TIER_PEER, .bytes = 4096};
    base.nworkers = 3;
    base.granule = 64;
    key_t_ v[11];
    for (int i = 0; i < 11; i++)
        v[i] = base;
    v[0].slices[2].peer = 0;
    v[1].slices[1].tier = WEFT_TIER_SELF;
    v[2].slices[3].bytes = 4160;
    v[3].nslices = 3;
    v[4].nworkers = 2;
    v[5].granule = 128;
    v[6].model.tier[WEFT_TIER_PEER].lat_us += 1.0;
    v[7].model.tier[WEFT_TIER_PEER].bw_gbps *= 2.0;
    v[8].model.tier[WEFT_TIER_PEER].unit_bytes += 64;
    v[9].model.tier[WEFT_TIER_PEER].fanout += 1;
    v[10].model.tier[WEFT_TIER_REMOTE_NUMA].unit_bytes += 64; /* a tier no slice uses */
    weft_plan_cache_t *c = NULL;
    CHECK(weft_plan_cache_create(16, &c) == WEFT_SUCCESS, "create(16): %s", weft_last_error());
    if (!c)
        return;
    check_lookup(c, &base, 0, "base");
    for (int i = 0; i < 11; i++) {
        char what[32];
        snprintf(what, sizeof what, "variant %d", i);
        check_lookup(c, &v[i], 0, what);
    }
    check_lookup(c, &base, 1, "base again");
    weft_plan_cache_destroy(c);
}

static void expect_invalid(weft_status_t st, const char *what, const char *needle)
{
    CHECK(st == WEFT_ERR_INVALID_ARGUMENT, "%s: status %d", what, (int)st);
    CHECK(strstr(weft_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what,
          weft_last_error(), needle);
}

static void test_invalid(void)
{
    weft_plan_cache_t *c = NULL;
    expect_invalid(weft_plan_cache_create(-1, &c), "create(-1)", "weft_plan_cache_create");
    CHECK(c == NULL, "create(-1) returned a cache");
    expect_invalid(weft_plan_cache_create(WEFT_PLAN_CACHE_MAX_ENTRIES + 1, &c), "create(257)",
                   "entries 257");
    expect_invalid(weft_plan_cache_create(4, NULL), "create(NULL)", "out is NULL");
    CHECK(weft_plan_cache_create(2, &c) == WEFT_SUCCESS, "create(2): %s", weft_last_error());
    if (!c)
        return;
    key_t_ k = random_key();
    check_lookup(c, &k, 0, "valid key");
    const weft_plan_t *plan = NULL;
    expect_invalid(weft_plan_cache_partition(NULL, &k.model, k.slices, k.nslices, 1, 64, &plan),
                   "NULL cache", "cache is NULL");
    expect_invalid(weft_plan_cache_partition(c, &k.model, k.slices, k.nslices, 1, 64, NULL),
                   "NULL plan_out", "plan_out is NULL");
    expect_invalid(weft_plan_cache_partition(c, NULL, k.slices, k.nslices, 1, 64, &plan),
                   "NULL model", "model is NULL");
    CHECK(plan == NULL, "a failed call returned a plan");
    expect_invalid(weft_plan_cache_partition(c, &k.model, NULL, 3, 1, 64, &plan), "NULL slices",
                   "slices is NULL");
    expect_invalid(weft_plan_cache_partition(c, &k.model, k.slices, k.nslices, 0, 64, &plan),
                   "nworkers 0", "nworkers 0");
    expect_invalid(weft_plan_cache_partition(c, &k.model, k.slices, k.nslices, 1, 0, &plan),
                   "granule 0", "granule_bytes");
    key_t_ bad = k;
    bad.nslices = 2;
    bad.slices[1].tier = (weft_tier_t)7;
    weft_status_t st;
    CHECK(lookup(c, &bad, &st) == NULL, "bad tier: a plan was returned");
    expect_invalid(st, "bad tier", "is not a tier");
    /* The failed calls changed no entry: the valid key is still there, and still right. */
    check_lookup(c, &k, 1, "valid key after the failures");
    weft_plan_cache_destroy(c);
    weft_plan_cache_destroy(NULL);
}

/* A hit returns the entry's own plan, and the least recently used entry is the one a miss
 * replaces. */
static void test_plan_lifetime(void)
{
    weft_plan_cache_t *c = NULL;
    CHECK(weft_plan_cache_create(2, &c) == WEFT_SUCCESS, "create(2): %s", weft_last_error());
    if (!c)
        return;
    key_t_ a = random_key(), b = random_key(), d = random_key();
    a.nslices = b.nslices = d.nslices = 5;
    a.slices[0].peer = 1;
    b.slices[0].peer = 2;
    d.slices[0].peer = 3;
    weft_status_t st;
    const weft_plan_t *pa = lookup(c, &a, &st);
    check_plan(pa, &a, "a");
    check_lookup(c, &b, 0, "b");
    CHECK(lookup(c, &a, &st) == pa, "a hit returned another plan");
    check_lookup(c, &d, 0, "d (evicts b, the least recently used)");
    check_lookup(c, &a, 1, "a after d");
    check_lookup(c, &b, 0, "b after d");
    weft_plan_cache_destroy(c);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    rng_state = seed;
    printf("test_plan_cache: seed %" PRIu64 "\n", seed);
    test_invalid();
    test_one_field_differs();
    test_plan_lifetime();
    test_random_lru(0, 200);
    test_random_lru(1, 500);
    test_random_lru(8, 4000);
    test_random_lru(POOL, 1000);
    printf("%s (%d failures)\n", failures ? "FAIL" : "PASS", failures);
    return failures != 0;
}
