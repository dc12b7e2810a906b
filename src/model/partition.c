/*
 * partition.c - cutting remote slices into units and assigning them to workers: LPT with a
 * per-peer fan-out cap, and the naive one-slice-per-worker baseline.
 *
 * Design. A slice of b bytes in tier t is cut at multiples of c, the largest multiple of
 * granule_bytes that is <= unit_bytes of t (at least one granule), raised for a slice that would
 * make more than WEFT_PARTITION_UNITS_PER_WORKER * nworkers units to the smallest multiple of
 * granule_bytes that makes at most that many (so the plan's size follows the worker count, not
 * b / unit_bytes): b / c full units and at most one shorter tail unit. All full units of a slice
 * cost the same, so a slice contributes at most
 * two runs (equal units at consecutive offsets), generated in (slice, offset) order. A stable
 * merge sort of the runs by descending cost then gives exactly the LPT order of the units (cost
 * descending, ties by slice then offset) while sorting at most 2 * nslices items, not every unit.
 * The naive baseline goes through the same pipeline with an infinite cut and the round-robin
 * rule, so its plan has the same shape (units grouped by worker, in LPT order in each worker).
 *
 * Assignment walks the units in that order. Peers are mapped to dense indices with an
 * open-addressing hash table (so peer ranks need no upper bound), and each peer keeps a singly
 * linked list of the distinct workers that hold its units: one node per (peer, worker) pair, so
 * at most one per unit. A unit of tier t whose peer has fewer than H_t workers may go to any
 * worker: the least loaded one (lowest index on ties) is the root of a min-heap of the workers
 * ordered by (load, index). Otherwise it goes to the least loaded worker of its peer's list (same
 * order), found by scanning the list. Each unit costs O(log nworkers + L), L the length of its
 * peer's list (at most min(nworkers, largest H_t)). The units are then grouped by worker with a
 * counting sort that keeps the LPT order inside each worker; worker_begin serves as the scatter
 * cursor.
 *
 * Memory: the plan's public arrays and one scratch block (runs, sort buffer, peer table, lists,
 * the worker of each unit) grow geometrically and are reused, so a warm plan allocates nothing.
 * On failure the plan is left empty (no units, no workers) with valid arrays.
 *
 * Thread safety: none inside; a plan must not be used by two threads at once. Distinct plans are
 * independent. Errors are recorded with weft_error(), the only output of this file.
 */
#include "model/partition.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/log.h"

/* Indices of units, list nodes and slices are 32-bit in the scratch arrays and weft_unit_t. */
#define MAX_UNITS ((uint64_t)UINT32_MAX)
#define NONE UINT32_MAX
#define SORT_BLOCK 8 /* runs sorted by insertion before merging */

/* A run: count equal units of one slice, at offset, offset + bytes, offset + 2 * bytes, ... */
typedef struct run {
    double cost_us;
    uint64_t offset;
    uint64_t bytes;
    uint64_t count;
    uint32_t slice;
} run_t;

typedef struct peer_slot {
    int peer;       /* -1: empty */
    uint32_t index; /* dense peer index */
} peer_slot_t;

/* How the slices are cut: each tier's cut, raised per slice so that no slice makes more than
 * max_units units (slice_cut). */
typedef struct cuts {
    uint64_t tier_bytes[WEFT_NUM_TIERS]; /* each tier's cut: a multiple of granule_bytes */
    uint64_t max_units;                  /* >= 1: most units one slice makes */
    uint64_t granule_bytes;              /* >= 1 */
} cuts_t;

/* The scratch block carved for one call. */
typedef struct scratch {
    run_t *runs;        /* nruns, in (slice, offset) order, then sorted */
    run_t *runs_tmp;    /* nruns: merge buffer */
    peer_slot_t *table; /* 1 << table_bits slots (LPT only) */
    unsigned table_bits;
    uint32_t *slice_peer;   /* nslices: dense peer index of each non-empty slice */
    uint32_t *peer_head;    /* per dense peer: first list node, or NONE */
    uint32_t *peer_workers; /* per dense peer: distinct workers in its list */
    uint32_t *node_next;    /* per list node: next node of the same peer, or NONE */
    uint32_t *node_worker;  /* per list node: the worker */
    uint32_t *unit_worker;  /* nunits: worker of each unit, in LPT order */
    uint32_t *heap;         /* nworkers: min-heap of workers by (load, index) (LPT only) */
    uint32_t *heap_pos;     /* nworkers: position of each worker in heap */
} scratch_t;

void weft_plan_init(weft_plan_t *plan)
{
    *plan = (weft_plan_t){0};
}

void weft_plan_fini(weft_plan_t *plan)
{
    free(plan->units);
    free(plan->worker_begin);
    free(plan->worker_load_us);
    free(plan->scratch);
    weft_plan_init(plan);
}

static void plan_clear(weft_plan_t *plan)
{
    plan->nunits = 0;
    plan->nworkers = 0;
    plan->makespan_us = 0.0;
}

static weft_status_t check_args(const char *fn, const weft_cost_model_t *model,
                                const weft_slice_t *slices, size_t nslices, int nworkers,
                                weft_plan_t *plan)
{
    if (plan == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: plan is NULL", fn);
    plan_clear(plan);
    if (model == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: model is NULL", fn);
    if (weft_cost_model_check(model) != 0)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "%s: model has a tier parameter out of range (need finite lat_us >= 0, "
                          "finite bw_gbps > 0, unit_bytes > 0, fanout >= 1)",
                          fn);
    if (nworkers < 1)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: nworkers %d must be >= 1", fn, nworkers);
    if (nslices > 0 && slices == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: slices is NULL with nslices %zu", fn,
                          nslices);
    if ((uint64_t)nslices > (uint64_t)UINT32_MAX)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: nslices %zu exceeds %u", fn, nslices,
                          (unsigned)UINT32_MAX);
    for (size_t s = 0; s < nslices; s++) {
        if ((unsigned)slices[s].tier >= WEFT_NUM_TIERS)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: slices[%zu].tier %d is not a tier",
                              fn, s, (int)slices[s].tier);
        if (slices[s].peer < 0)
            return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: slices[%zu].peer %d is negative", fn,
                              s, slices[s].peer);
    }
    return WEFT_SUCCESS;
}

/* The cut of one non-empty slice: its tier's cut, or, where that makes more than max_units
 * units, the smallest multiple of the granule that makes at most max_units (at least the slice:
 * one unit, where rounding up to the granule overflows). */
static uint64_t slice_cut(const cuts_t *cuts, const weft_slice_t *slice)
{
    uint64_t bytes = slice->bytes, cut = cuts->tier_bytes[slice->tier];
    uint64_t units = bytes / cut + (bytes % cut != 0);
    if (units <= cuts->max_units)
        return cut;
    /* ceil(bytes / max_units) bytes per unit make at most max_units units, and so does any
     * larger cut; rounding up to the granule keeps the cuts on granule boundaries. */
    uint64_t least = bytes / cuts->max_units + (bytes % cuts->max_units != 0);
    uint64_t over = least % cuts->granule_bytes;
    if (over != 0) {
        if (least > UINT64_MAX - (cuts->granule_bytes - over))
            return bytes;
        least += cuts->granule_bytes - over;
    }
    return least;
}

/* Count the runs and units the cuts produce; false if the units exceed MAX_UNITS. */
static bool count_units(const weft_slice_t *slices, size_t nslices, const cuts_t *cuts,
                        size_t *nruns_out, size_t *nunits_out, size_t *nbusy_out)
{
    size_t nruns = 0, nbusy = 0;
    uint64_t nunits = 0;
    for (size_t s = 0; s < nslices; s++) {
        uint64_t bytes = slices[s].bytes;
        if (bytes == 0)
            continue;
        uint64_t cut = slice_cut(cuts, &slices[s]);
        uint64_t full = bytes / cut, tail = bytes % cut != 0;
        if (full + tail > MAX_UNITS - nunits)
            return false;
        nunits += full + tail;
        nruns += (full != 0) + (size_t)tail;
        nbusy++;
    }
    *nruns_out = nruns;
    *nunits_out = (size_t)nunits;
    *nbusy_out = nbusy;
    return true;
}

/* Replace *array by a block of at least need elements (contents are not kept). On failure the
 * old block and *cap stay as they were. */
static bool reserve(void **array, size_t *cap, size_t need, size_t elem_bytes)
{
    if (need <= *cap)
        return true;
    size_t n = *cap > SIZE_MAX / 2 ? need : *cap * 2;
    if (n < need)
        n = need;
    if (n > SIZE_MAX / elem_bytes)
        return false;
    void *block = malloc(n * elem_bytes);
    if (block == NULL)
        return false;
    free(*array);
    *array = block;
    *cap = n;
    return true;
}

/* Append count elements of elem_bytes to a layout at *end, 8-byte aligned; false on overflow. */
static bool layout_add(size_t *end, size_t *at, size_t count, size_t elem_bytes)
{
    if (count > (SIZE_MAX - 7 - *end) / elem_bytes)
        return false;
    *at = *end;
    *end = (*end + count * elem_bytes + 7) & ~(size_t)7;
    return true;
}

/* Size the plan's arrays and carve the scratch block. nbusy > 0 with lpt: peer bookkeeping for
 * nbusy non-empty slices. */
static weft_status_t plan_reserve(const char *fn, weft_plan_t *plan, size_t nslices, size_t nruns,
                                  size_t nunits, size_t nbusy, int nworkers, bool lpt,
                                  scratch_t *sc)
{
    size_t at_runs = 0, at_tmp = 0, at_unit_worker = 0, at_table = 0, at_slice_peer = 0;
    size_t at_head = 0, at_peer_workers = 0, at_next = 0, at_node_worker = 0, at_heap = 0;
    size_t at_heap_pos = 0, end = 0;
    unsigned bits = 1;
    bool ok = layout_add(&end, &at_runs, nruns, sizeof(run_t)) &&
              layout_add(&end, &at_tmp, nruns, sizeof(run_t)) &&
              layout_add(&end, &at_unit_worker, nunits, sizeof(uint32_t));
    if (lpt) {
        while (bits < 63 && ((size_t)1 << bits) < 2 * nbusy)
            bits++;
        ok = ok && layout_add(&end, &at_table, (size_t)1 << bits, sizeof(peer_slot_t)) &&
             layout_add(&end, &at_slice_peer, nslices, sizeof(uint32_t)) &&
             layout_add(&end, &at_head, nbusy, sizeof(uint32_t)) &&
             layout_add(&end, &at_peer_workers, nbusy, sizeof(uint32_t)) &&
             layout_add(&end, &at_next, nunits, sizeof(uint32_t)) &&
             layout_add(&end, &at_node_worker, nunits, sizeof(uint32_t)) &&
             layout_add(&end, &at_heap, (size_t)nworkers, sizeof(uint32_t)) &&
             layout_add(&end, &at_heap_pos, (size_t)nworkers, sizeof(uint32_t));
    }
    if (!ok)
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: the scratch size of %zu units overflows", fn,
                          nunits);
    /* Never empty, so that the carved pointers are never offsets from NULL. */
    if (end == 0)
        end = sizeof(run_t);
    if (!reserve(&plan->scratch, &plan->scratch_bytes, end, 1))
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of scratch", fn, end);
    if (!reserve((void **)&plan->units, &plan->units_cap, nunits, sizeof(weft_unit_t)))
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: cannot allocate %zu units", fn, nunits);
    if (nworkers > plan->workers_cap) {
        /* Both worker arrays share workers_cap, raised only once both have grown. */
        size_t cap = (size_t)plan->workers_cap, begin_cap = cap + 1, want = (size_t)nworkers;
        if (want < cap * 2 && cap * 2 <= (size_t)INT_MAX)
            want = cap * 2;
        if (!reserve((void **)&plan->worker_begin, &begin_cap, want + 1, sizeof(size_t)) ||
            !reserve((void **)&plan->worker_load_us, &cap, want, sizeof(double)))
            return weft_error(WEFT_ERR_NO_MEMORY, "%s: cannot allocate %d workers", fn, nworkers);
        plan->workers_cap = (int)want;
    }
    char *base = plan->scratch;
    sc->runs = (run_t *)(void *)(base + at_runs);
    sc->runs_tmp = (run_t *)(void *)(base + at_tmp);
    sc->unit_worker = (uint32_t *)(void *)(base + at_unit_worker);
    if (lpt) {
        sc->table = (peer_slot_t *)(void *)(base + at_table);
        sc->table_bits = bits;
        sc->slice_peer = (uint32_t *)(void *)(base + at_slice_peer);
        sc->peer_head = (uint32_t *)(void *)(base + at_head);
        sc->peer_workers = (uint32_t *)(void *)(base + at_peer_workers);
        sc->node_next = (uint32_t *)(void *)(base + at_next);
        sc->node_worker = (uint32_t *)(void *)(base + at_node_worker);
        sc->heap = (uint32_t *)(void *)(base + at_heap);
        sc->heap_pos = (uint32_t *)(void *)(base + at_heap_pos);
    }
    return WEFT_SUCCESS;
}

/* Runs of every non-empty slice, in (slice, offset) order. */
static void make_runs(const weft_cost_model_t *model, const weft_slice_t *slices, size_t nslices,
                      const cuts_t *cuts, run_t *runs)
{
    size_t n = 0;
    for (size_t s = 0; s < nslices; s++) {
        uint64_t bytes = slices[s].bytes;
        if (bytes == 0)
            continue;
        uint64_t cut = slice_cut(cuts, &slices[s]);
        uint64_t full = bytes / cut, tail = bytes % cut;
        if (full != 0)
            runs[n++] = (run_t){.cost_us = weft_cost_us(model, slices[s].tier, cut),
                                .offset = 0,
                                .bytes = cut,
                                .count = full,
                                .slice = (uint32_t)s};
        if (tail != 0)
            runs[n++] = (run_t){.cost_us = weft_cost_us(model, slices[s].tier, tail),
                                .offset = full * cut,
                                .bytes = tail,
                                .count = 1,
                                .slice = (uint32_t)s};
    }
}

/* Merge src[lo, mid) and src[mid, hi) into dst[lo, hi) by descending cost; left first on ties. */
static void merge_runs(const run_t *src, size_t lo, size_t mid, size_t hi, run_t *dst)
{
    size_t i = lo, j = mid, k = lo;
    while (i < mid && j < hi)
        dst[k++] = src[j].cost_us > src[i].cost_us ? src[j++] : src[i++];
    while (i < mid)
        dst[k++] = src[i++];
    while (j < hi)
        dst[k++] = src[j++];
}

/* Stable sort of runs[0, n) by descending cost, using tmp; returns the array holding the
 * result (runs or tmp). */
static run_t *sort_runs(run_t *runs, run_t *tmp, size_t n)
{
    for (size_t lo = 0; lo < n; lo += SORT_BLOCK) {
        size_t hi = n - lo < SORT_BLOCK ? n : lo + SORT_BLOCK;
        for (size_t i = lo + 1; i < hi; i++) {
            run_t x = runs[i];
            size_t j = i;
            for (; j > lo && runs[j - 1].cost_us < x.cost_us; j--)
                runs[j] = runs[j - 1];
            runs[j] = x;
        }
    }
    run_t *src = runs, *dst = tmp;
    for (size_t width = SORT_BLOCK; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = n - lo < width ? n : lo + width;
            size_t hi = n - mid < width ? n : mid + width;
            merge_runs(src, lo, mid, hi, dst);
        }
        run_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* Map every non-empty slice's peer to a dense index and empty the peers' worker lists. */
static void index_peers(const weft_slice_t *slices, size_t nslices, scratch_t *sc)
{
    size_t nslots = (size_t)1 << sc->table_bits;
    for (size_t i = 0; i < nslots; i++)
        sc->table[i].peer = -1;
    uint32_t npeers = 0;
    for (size_t s = 0; s < nslices; s++) {
        if (slices[s].bytes == 0)
            continue;
        int peer = slices[s].peer;
        /* Fibonacci hashing: the top table_bits bits of the product. */
        size_t i =
            (size_t)(((uint64_t)(uint32_t)peer * 0x9E3779B97F4A7C15ull) >> (64 - sc->table_bits));
        while (sc->table[i].peer != -1 && sc->table[i].peer != peer)
            i = (i + 1) & (nslots - 1);
        if (sc->table[i].peer == -1) {
            sc->table[i] = (peer_slot_t){.peer = peer, .index = npeers};
            sc->peer_head[npeers] = NONE;
            sc->peer_workers[npeers] = 0;
            npeers++;
        }
        sc->slice_peer[s] = sc->table[i].index;
    }
}

/* Whether worker a comes before worker b: less loaded, or as loaded with a lower index. */
static inline bool before(const double *load_us, uint32_t a, uint32_t b)
{
    return load_us[a] < load_us[b] || (load_us[a] == load_us[b] && a < b);
}

/* Restore the heap below position i after the load of the worker there grew. */
static void heap_sift_down(const double *load_us, uint32_t *heap, uint32_t *heap_pos,
                           uint32_t nworkers, uint32_t i)
{
    uint32_t w = heap[i];
    for (;;) {
        uint32_t child = 2 * i + 1;
        if (child >= nworkers)
            break;
        if (child + 1 < nworkers && before(load_us, heap[child + 1], heap[child]))
            child++;
        if (!before(load_us, heap[child], w))
            break;
        heap[i] = heap[child];
        heap_pos[heap[i]] = i;
        i = child;
    }
    heap[i] = w;
    heap_pos[w] = i;
}

/* The first worker of a peer's list in before() order. The list is not empty. */
static uint32_t least_loaded_of(const scratch_t *sc, uint32_t node, const double *load_us)
{
    uint32_t best = sc->node_worker[node];
    for (node = sc->node_next[node]; node != NONE; node = sc->node_next[node])
        if (before(load_us, sc->node_worker[node], best))
            best = sc->node_worker[node];
    return best;
}

/* LPT under the fan-out cap: fills sc->unit_worker and the loads (all zero on entry). The
 * workers sit in a binary min-heap in before() order, so the least loaded worker (lowest index
 * on ties) is the root, and a worker whose load grows sinks in O(log nworkers). */
static void assign_lpt(const weft_cost_model_t *model, const weft_slice_t *slices,
                       const run_t *runs, size_t nruns, uint32_t nworkers, double *load_us,
                       scratch_t *sc)
{
    /* Equal loads: index order is a valid heap. */
    for (uint32_t w = 0; w < nworkers; w++) {
        sc->heap[w] = w;
        sc->heap_pos[w] = w;
    }
    uint32_t u = 0, nnodes = 0;
    for (size_t r = 0; r < nruns; r++) {
        const run_t *run = &runs[r];
        uint32_t p = sc->slice_peer[run->slice];
        uint32_t cap = (uint32_t)model->tier[slices[run->slice].tier].fanout;
        for (uint64_t i = 0; i < run->count; i++) {
            uint32_t w;
            if (sc->peer_workers[p] < cap) {
                w = sc->heap[0];
                uint32_t node = sc->peer_head[p];
                while (node != NONE && sc->node_worker[node] != w)
                    node = sc->node_next[node];
                if (node == NONE) {
                    sc->node_worker[nnodes] = w;
                    sc->node_next[nnodes] = sc->peer_head[p];
                    sc->peer_head[p] = nnodes++;
                    sc->peer_workers[p]++;
                }
            } else {
                w = least_loaded_of(sc, sc->peer_head[p], load_us);
            }
            load_us[w] += run->cost_us;
            heap_sift_down(load_us, sc->heap, sc->heap_pos, nworkers, sc->heap_pos[w]);
            sc->unit_worker[u++] = w;
        }
    }
}

/* Naive: every run is one whole slice, on worker slice % nworkers. */
static void assign_naive(const run_t *runs, size_t nruns, int nworkers, double *load_us,
                         scratch_t *sc)
{
    for (size_t r = 0; r < nruns; r++) {
        uint32_t w = runs[r].slice % (uint32_t)nworkers;
        load_us[w] += runs[r].cost_us;
        sc->unit_worker[r] = w;
    }
}

/* Group the units (LPT order in sc->unit_worker) by worker into plan->units, keeping LPT order
 * inside each worker, and fill worker_begin and the makespan. */
static void group_by_worker(const run_t *runs, size_t nruns, size_t nunits, int nworkers,
                            const scratch_t *sc, weft_plan_t *plan)
{
    size_t *begin = plan->worker_begin;
    for (int w = 0; w <= nworkers; w++)
        begin[w] = 0;
    for (size_t u = 0; u < nunits; u++)
        begin[sc->unit_worker[u] + 1]++;
    /* begin[w + 1] := first position of worker w; the scatter advances it to the end of w,
     * which is the first position of w + 1. */
    size_t start = 0;
    for (int w = 0; w < nworkers; w++) {
        size_t count = begin[w + 1];
        begin[w + 1] = start;
        start += count;
    }
    size_t u = 0;
    for (size_t r = 0; r < nruns; r++) {
        const run_t *run = &runs[r];
        for (uint64_t i = 0; i < run->count; i++) {
            uint32_t w = sc->unit_worker[u++];
            plan->units[begin[w + 1]++] = (weft_unit_t){.slice = run->slice,
                                                        .worker = w,
                                                        .offset = run->offset + i * run->bytes,
                                                        .bytes = run->bytes,
                                                        .cost_us = run->cost_us};
        }
    }
    double makespan = 0.0;
    for (int w = 0; w < nworkers; w++)
        if (plan->worker_load_us[w] > makespan)
            makespan = plan->worker_load_us[w];
    plan->nunits = nunits;
    plan->nworkers = nworkers;
    plan->makespan_us = makespan;
}

/* The shared pipeline: cut, sort, assign (LPT or naive), group. */
static weft_status_t plan_build(const char *fn, const weft_cost_model_t *model,
                                const weft_slice_t *slices, size_t nslices, int nworkers,
                                const cuts_t *cuts, bool lpt, weft_plan_t *plan)
{
    size_t nruns, nunits, nbusy;
    if (!count_units(slices, nslices, cuts, &nruns, &nunits, &nbusy))
        return weft_error(WEFT_ERR_NO_MEMORY, "%s: the slices make more than %llu units", fn,
                          (unsigned long long)MAX_UNITS);
    scratch_t sc = {0};
    weft_status_t status =
        plan_reserve(fn, plan, nslices, nruns, nunits, nbusy, nworkers, lpt, &sc);
    if (status != WEFT_SUCCESS)
        return status;

    make_runs(model, slices, nslices, cuts, sc.runs);
    const run_t *sorted = sort_runs(sc.runs, sc.runs_tmp, nruns);
    for (int w = 0; w < nworkers; w++)
        plan->worker_load_us[w] = 0.0;
    if (lpt) {
        index_peers(slices, nslices, &sc);
        assign_lpt(model, slices, sorted, nruns, (uint32_t)nworkers, plan->worker_load_us, &sc);
    } else {
        assign_naive(sorted, nruns, nworkers, plan->worker_load_us, &sc);
    }
    group_by_worker(sorted, nruns, nunits, nworkers, &sc, plan);
    return WEFT_SUCCESS;
}

/* The cuts of weft_partition: each tier's unit size rounded down to the granule (at least one
 * granule), and at most WEFT_PARTITION_UNITS_PER_WORKER * nworkers units per slice. */
static void lpt_cuts(const weft_cost_model_t *model, int nworkers, uint64_t granule_bytes,
                     cuts_t *cuts)
{
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        uint64_t cut = model->tier[t].unit_bytes / granule_bytes * granule_bytes;
        cuts->tier_bytes[t] = cut != 0 ? cut : granule_bytes;
    }
    cuts->max_units = (uint64_t)WEFT_PARTITION_UNITS_PER_WORKER * (uint64_t)nworkers;
    cuts->granule_bytes = granule_bytes;
}

weft_status_t weft_partition(const weft_cost_model_t *model, const weft_slice_t *slices,
                             size_t nslices, int nworkers, uint64_t granule_bytes,
                             weft_plan_t *plan)
{
    static const char fn[] = "weft_partition";
    weft_status_t status = check_args(fn, model, slices, nslices, nworkers, plan);
    if (status != WEFT_SUCCESS)
        return status;
    if (granule_bytes == 0)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "%s: granule_bytes must be >= 1", fn);
    cuts_t cuts;
    lpt_cuts(model, nworkers, granule_bytes, &cuts);
    return plan_build(fn, model, slices, nslices, nworkers, &cuts, true, plan);
}

uint64_t weft_partition_units(const weft_cost_model_t *model, const weft_slice_t *slices,
                              size_t nslices, int nworkers, uint64_t granule_bytes)
{
    cuts_t cuts;
    lpt_cuts(model, nworkers, granule_bytes, &cuts);
    size_t nruns, nunits, nbusy;
    if (!count_units(slices, nslices, &cuts, &nruns, &nunits, &nbusy))
        return UINT64_MAX;
    return nunits;
}

weft_status_t weft_partition_naive(const weft_cost_model_t *model, const weft_slice_t *slices,
                                   size_t nslices, int nworkers, weft_plan_t *plan)
{
    static const char fn[] = "weft_partition_naive";
    weft_status_t status = check_args(fn, model, slices, nslices, nworkers, plan);
    if (status != WEFT_SUCCESS)
        return status;
    /* A cut of UINT64_MAX bytes never splits a slice: each non-empty slice is one unit. */
    cuts_t whole = {.max_units = 1, .granule_bytes = 1};
    for (int t = 0; t < WEFT_NUM_TIERS; t++)
        whole.tier_bytes[t] = UINT64_MAX;
    return plan_build(fn, model, slices, nslices, nworkers, &whole, false, plan);
}

double weft_plan_imbalance(const weft_plan_t *plan)
{
    /* At most min(nworkers, nunits) workers can have work: the mean is taken over those. */
    size_t busy = (size_t)plan->nworkers < plan->nunits ? (size_t)plan->nworkers : plan->nunits;
    if (busy == 0)
        return 0.0;
    double total_us = 0.0;
    for (int w = 0; w < plan->nworkers; w++)
        total_us += plan->worker_load_us[w];
    if (!(total_us > 0.0))
        return 0.0;
    double imbalance = plan->makespan_us / (total_us / (double)busy) - 1.0;
    return imbalance > 0.0 ? imbalance : 0.0;
}
