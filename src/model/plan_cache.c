/*
 * plan_cache.c - a small least-recently-used cache of partitioner plans (see plan_cache.h).
 *
 * Layout: the entries' hashes sit in one array of their own, so a lookup reads one or two cache
 * lines before it touches the single entry it compares in full. A hash of 0 marks an empty
 * entry (a computed 0 is stored as 1). Entries are few (8 by default): a linear scan is the
 * fastest search there is at that size. A miss partitions into the spare plan `own` and, on
 * success, swaps it with the victim entry's plan, so a failed partition leaves every entry as it
 * was and no arrays are allocated once warm.
 */
#include "model/plan_cache.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

typedef struct entry {
    weft_cost_model_t model;
    int nworkers;
    uint64_t granule_bytes;
    size_t nslices;
    weft_slice_t *slices; /* a copy of the key's slices */
    size_t slices_cap;
    weft_plan_t plan;
} entry_t;

struct weft_plan_cache {
    int nentries;
    uint64_t clock; /* advances on every call; last_use orders the entries */
    uint64_t hits, misses;
    uint64_t *hash;     /* nentries: the key's hash, 0 when empty */
    uint64_t *last_use; /* nentries */
    entry_t *entries;   /* nentries */
    weft_plan_t own;    /* the plan of a cache without entries, and of invalid arguments */
};

weft_status_t weft_plan_cache_create(int entries, weft_plan_cache_t **out)
{
    static const char fn[] = "weft_plan_cache_create";
    if (out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    *out = NULL;
    if (entries < 0 || entries > WEFT_PLAN_CACHE_MAX_ENTRIES)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: entries %d is not in 0..%d", fn, entries,
                          WEFT_PLAN_CACHE_MAX_ENTRIES);
    weft_plan_cache_t *c = calloc(1, sizeof *c);
    size_t n = entries > 0 ? (size_t)entries : 1; /* calloc(0) may return NULL */
    if (c) {
        c->hash = calloc(n, sizeof *c->hash);
        c->last_use = calloc(n, sizeof *c->last_use);
        c->entries = calloc(n, sizeof *c->entries);
    }
    if (!c || !c->hash || !c->last_use || !c->entries) {
        weft_plan_cache_destroy(c);
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: calloc of %d entries", fn, entries);
    }
    c->nentries = entries;
    for (int i = 0; i < entries; i++)
        weft_plan_init(&c->entries[i].plan);
    weft_plan_init(&c->own);
    *out = c;
    return WEFT_SUCCESS;
}

void weft_plan_cache_destroy(weft_plan_cache_t *cache)
{
    if (!cache)
        return;
    if (cache->entries) {
        for (int i = 0; i < cache->nentries; i++) {
            weft_plan_fini(&cache->entries[i].plan);
            free(cache->entries[i].slices);
        }
    }
    weft_plan_fini(&cache->own);
    free(cache->hash);
    free(cache->last_use);
    free(cache->entries);
    free(cache);
}

/* FNV-1a over 64-bit words. */
static uint64_t mix(uint64_t h, uint64_t word)
{
    return (h ^ word) * 0x100000001b3ull;
}

static uint64_t double_bits(double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}

static uint64_t key_hash(const weft_cost_model_t *model, const weft_slice_t *slices, size_t nslices,
                         int nworkers, uint64_t granule_bytes)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = mix(h, (uint64_t)nslices);
    h = mix(h, (uint64_t)(uint32_t)nworkers);
    h = mix(h, granule_bytes);
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        const weft_tier_params_t *p = &model->tier[t];
        h = mix(h, double_bits(p->lat_us));
        h = mix(h, double_bits(p->bw_gbps));
        h = mix(h, p->unit_bytes);
        h = mix(h, (uint64_t)(uint32_t)p->fanout);
    }
    for (size_t s = 0; s < nslices; s++) {
        h = mix(h, (uint64_t)(uint32_t)slices[s].peer << 32 | (uint32_t)slices[s].tier);
        h = mix(h, slices[s].bytes);
    }
    return h != 0 ? h : 1;
}

/* Field by field: the structs have padding, which memcmp would read. Doubles compare by their
 * bits, as they are hashed. */
static int key_equal(const entry_t *e, const weft_cost_model_t *model, const weft_slice_t *slices,
                     size_t nslices, int nworkers, uint64_t granule_bytes)
{
    if (e->nslices != nslices || e->nworkers != nworkers || e->granule_bytes != granule_bytes)
        return 0;
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        const weft_tier_params_t *a = &e->model.tier[t], *b = &model->tier[t];
        if (double_bits(a->lat_us) != double_bits(b->lat_us) ||
            double_bits(a->bw_gbps) != double_bits(b->bw_gbps) || a->unit_bytes != b->unit_bytes ||
            a->fanout != b->fanout)
            return 0;
    }
    for (size_t s = 0; s < nslices; s++) {
        if (e->slices[s].peer != slices[s].peer || e->slices[s].tier != slices[s].tier ||
            e->slices[s].bytes != slices[s].bytes)
            return 0;
    }
    return 1;
}

/* The entry to partition into: an empty one, else the least recently used. */
static int victim(const weft_plan_cache_t *c)
{
    int v = 0;
    for (int i = 0; i < c->nentries; i++) {
        if (c->hash[i] == 0)
            return i;
        if (c->last_use[i] < c->last_use[v])
            v = i;
    }
    return v;
}

weft_status_t weft_plan_cache_partition(weft_plan_cache_t *cache, const weft_cost_model_t *model,
                                        const weft_slice_t *slices, size_t nslices, int nworkers,
                                        uint64_t granule_bytes, const weft_plan_t **plan_out)
{
    static const char fn[] = "weft_plan_cache_partition";
    if (cache == NULL || plan_out == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                          cache == NULL ? "cache" : "plan_out");
    *plan_out = NULL;
    cache->clock++;
    /* Without entries, or with arguments that cannot be hashed (weft_partition says why),
     * nothing is looked up or kept. */
    int keep = cache->nentries > 0 && model != NULL && (nslices == 0 || slices != NULL);
    uint64_t h = 0;
    if (keep) {
        h = key_hash(model, slices, nslices, nworkers, granule_bytes);
        for (int i = 0; i < cache->nentries; i++) {
            if (cache->hash[i] == h &&
                key_equal(&cache->entries[i], model, slices, nslices, nworkers, granule_bytes)) {
                cache->hits++;
                cache->last_use[i] = cache->clock;
                *plan_out = &cache->entries[i].plan;
                return WEFT_SUCCESS;
            }
        }
    }
    cache->misses++;
    weft_status_t st = weft_partition(model, slices, nslices, nworkers, granule_bytes, &cache->own);
    if (st != WEFT_SUCCESS)
        return st; /* the entries are as they were */
    *plan_out = &cache->own;
    if (!keep)
        return WEFT_SUCCESS;
    int v = victim(cache);
    entry_t *e = &cache->entries[v];
    if (nslices > e->slices_cap) {
        weft_slice_t *grown = malloc(nslices * sizeof *grown);
        if (!grown)
            return WEFT_SUCCESS; /* not kept: caching is only an optimisation */
        free(e->slices);
        e->slices = grown;
        e->slices_cap = nslices;
    }
    /* The new plan moves into the entry; the entry's old arrays become `own`, reused by the
     * next miss. */
    weft_plan_t old = e->plan;
    e->plan = cache->own;
    cache->own = old;
    e->model = *model;
    e->nworkers = nworkers;
    e->granule_bytes = granule_bytes;
    e->nslices = nslices;
    if (nslices > 0)
        memcpy(e->slices, slices, nslices * sizeof *slices);
    cache->hash[v] = h;
    cache->last_use[v] = cache->clock;
    *plan_out = &e->plan;
    return WEFT_SUCCESS;
}

void weft_plan_cache_counts(const weft_plan_cache_t *cache, uint64_t *hits, uint64_t *misses)
{
    if (hits)
        *hits = cache ? cache->hits : 0;
    if (misses)
        *misses = cache ? cache->misses : 0;
}
