/*
 * steal.c - work stealing over a static plan: one atomic word per worker (see steal.h).
 *
 * Design. Worker w's unclaimed units are plan->units[front .. back), both absolute indices into
 * the plan (< 2^32: the partitioner makes at most UINT32_MAX units), packed into one 64-bit word
 * as front << 32 | back. The owner claims by advancing front, a thief by lowering back, each with
 * a compare-and-swap of the whole word, so front <= back always holds, a range only shrinks
 * during a round, and an empty range (front == back) stays empty. Each word sits on a cache line
 * of its own: the owner's claims do not slow down the other owners.
 *
 * A thief scans every range (starting after its own index, so that thieves facing equal ranges
 * spread over them) and picks the one with the most units left; a failed claim means another
 * worker claimed in the meantime, so it scans again. Every failed compare-and-swap is someone
 * else's successful claim, and there are finitely many units: the round ends (lock-free). A
 * worker returns when a scan finds every range empty, which, as ranges never grow, is final.
 *
 * Memory order: relaxed throughout. The words carry no data: the unit descriptors are written
 * before prepare and only read during the round, prepare's stores are published to the workers
 * by whatever starts them, and the units' results by whatever waits for them (steal.h, "Thread
 * safety"). That every unit is claimed exactly once follows from the atomicity of each
 * read-modify-write on one word, whatever the order: a successful compare-and-swap replaces the
 * latest value of the word, so two claims cannot both take the index they read. A scan may read
 * an older value (never one older than prepare's store), which only holds more units than the
 * current one: it can make a thief try a range that has since emptied (the claim then fails),
 * never skip a range that is not empty.
 *
 * Thread safety: see steal.h. Errors (prepare only) are recorded with weft_error().
 */
#include "exec/steal.h"

#include <assert.h>
#include <limits.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/log.h"

#define STEAL_LINE 64 /* cache line bytes */

struct weft_steal_range {
    alignas(STEAL_LINE) _Atomic uint64_t word; /* front << 32 | back */
};

static inline uint64_t pack(uint32_t front, uint32_t back)
{
    return (uint64_t)front << 32 | back;
}

static inline uint32_t front_of(uint64_t word)
{
    return (uint32_t)(word >> 32);
}

static inline uint32_t back_of(uint64_t word)
{
    return (uint32_t)word;
}

void weft_steal_init(weft_steal_t *s)
{
    *s = (weft_steal_t){0};
}

void weft_steal_fini(weft_steal_t *s)
{
    free(s->ranges);
    weft_steal_init(s);
}

/* Make room for nworkers ranges; contents are not kept. On failure s keeps its old array. */
static bool ranges_reserve(weft_steal_t *s, int nworkers)
{
    if (nworkers <= s->ranges_cap)
        return true;
    int cap = s->ranges_cap <= INT_MAX / 2 ? s->ranges_cap * 2 : nworkers;
    if (cap < nworkers)
        cap = nworkers;
    if ((size_t)cap > SIZE_MAX / sizeof(struct weft_steal_range))
        return false;
    /* The size is a multiple of the alignment, as aligned_alloc requires. */
    struct weft_steal_range *ranges =
        aligned_alloc(STEAL_LINE, (size_t)cap * sizeof(struct weft_steal_range));
    if (ranges == NULL)
        return false;
    free(s->ranges);
    s->ranges = ranges;
    s->ranges_cap = cap;
    return true;
}

weft_status_t weft_steal_prepare(weft_steal_t *s, const weft_plan_t *plan)
{
    s->plan = NULL;
    s->nworkers = 0;
    if (plan == NULL)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_steal_prepare: plan is NULL");
    if (plan->nworkers < 1)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_steal_prepare: the plan has %d workers (need >= 1)",
                          plan->nworkers);
    if ((uint64_t)plan->nunits > UINT32_MAX)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_steal_prepare: the plan has %zu units (at most %u)", plan->nunits,
                          (unsigned)UINT32_MAX);
    if (!ranges_reserve(s, plan->nworkers))
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_steal_prepare: cannot allocate %d ranges",
                          plan->nworkers);
    for (int w = 0; w < plan->nworkers; w++)
        atomic_store_explicit(
            &s->ranges[w].word,
            pack((uint32_t)plan->worker_begin[w], (uint32_t)plan->worker_begin[w + 1]),
            memory_order_relaxed);
    s->plan = plan;
    s->nworkers = plan->nworkers;
    return WEFT_SUCCESS;
}

/* The owner's claim: the front unit of its range. */
static bool claim_front(struct weft_steal_range *range, uint32_t *index_out)
{
    uint64_t word = atomic_load_explicit(&range->word, memory_order_relaxed);
    for (;;) {
        uint32_t front = front_of(word), back = back_of(word);
        if (front == back)
            return false;
        if (atomic_compare_exchange_weak_explicit(&range->word, &word, pack(front + 1, back),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *index_out = front;
            return true;
        }
    }
}

/* A thief's claim: the back unit of a victim's range. */
static bool claim_back(struct weft_steal_range *range, uint32_t *index_out)
{
    uint64_t word = atomic_load_explicit(&range->word, memory_order_relaxed);
    for (;;) {
        uint32_t front = front_of(word), back = back_of(word);
        if (front == back)
            return false;
        if (atomic_compare_exchange_weak_explicit(&range->word, &word, pack(front, back - 1),
                                                  memory_order_relaxed, memory_order_relaxed)) {
            *index_out = back - 1;
            return true;
        }
    }
}

/* The worker other than self with the most units left (the first after self on ties), or -1
 * when every range is empty. */
static int pick_victim(const weft_steal_t *s, int self)
{
    int victim = -1;
    uint32_t most = 0;
    for (int i = 1; i < s->nworkers; i++) {
        int w = (self + i) % s->nworkers;
        uint64_t word = atomic_load_explicit(&s->ranges[w].word, memory_order_relaxed);
        uint32_t left = back_of(word) - front_of(word);
        if (left > most) {
            most = left;
            victim = w;
        }
    }
    return victim;
}

size_t weft_steal_run(weft_steal_t *s, int worker, weft_steal_fn fn, void *ctx)
{
    assert(s->plan != NULL && worker >= 0 && worker < s->nworkers);
    const weft_unit_t *units = s->plan->units;
    uint32_t u;
    while (claim_front(&s->ranges[worker], &u))
        fn(ctx, &units[u]);
    size_t stolen = 0;
    for (;;) {
        int victim = pick_victim(s, worker);
        if (victim < 0)
            return stolen;
        if (claim_back(&s->ranges[victim], &u)) {
            fn(ctx, &units[u]);
            stolen++;
        }
    }
}
