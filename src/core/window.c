/*
 * window.c - agreeing on the shadow window's base (see window.h).
 *
 * Protocol, per attempt a (three all-gathers over the store):
 *   offer     every rank finds a free range the provider picks for it (its proposal), then lists
 *             the unmapped ranges of its address space below that proposal's end;
 *   probe     every rank computes the same candidate list - the highest base free in every
 *             rank's list first, then the proposals - tries to reserve each exactly there,
 *             releases it, and all-gathers which worked;
 *   reserve   every rank reserves the first candidate that worked everywhere and all-gathers
 *             the outcome; all ok -> done, else whoever succeeded releases and the next attempt
 *             starts afresh (another thread of some rank mapped into the range meanwhile).
 * Capping each rank's list at its own proposal keeps the window out of the space the kernel
 * leaves for the main thread's stack to grow into. The proposals stay candidates for providers
 * whose reservations the address-space listing does not describe.
 */
#include "core/window.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/log.h"

#define MAX_ATTEMPTS 16
#define MAX_FREE 16                      /* unmapped ranges each rank offers */
#define MAX_CANDIDATES 16                /* the common base, then up to 15 distinct proposals */
#define WINDOW_FLOOR ((uint64_t)1 << 32) /* the low 4 GiB stay for MAP_32BIT and brk heaps */
/* The largest window: 2^56 bytes, the user address space with 5-level page tables (2^47 with
 * 4). Bounding it keeps every sum of a base, a size and an alignment below 2^64. */
#define WINDOW_MAX_BYTES ((size_t)1 << 56)

typedef struct offer {
    uint64_t proposal; /* a free base the provider chose for this rank (0 if none) */
    uint32_t nfree;    /* entries of free[] in use */
    uint32_t pad;
    weft_vrange_t free[MAX_FREE]; /* unmapped, below the proposal's end, highest first */
} offer_t;

/* A free, aligned range of bytes found by reserving anywhere, then releasing. */
static uintptr_t find_free(const weft_mem_ops_t *mem, size_t bytes, size_t align)
{
    void *p;
    if (mem->reserve(NULL, bytes + align, 0, &p) != WEFT_SUCCESS)
        return 0;
    uintptr_t base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    mem->release(p, bytes + align);
    return base;
}

static void make_offer(const weft_mem_ops_t *mem, size_t total, size_t align, offer_t *o)
{
    *o = (offer_t){.proposal = find_free(mem, total, align)};
    if (o->proposal == 0)
        return;
    int n = weft_vm_free_ranges(WINDOW_FLOOR, o->proposal + total, total, o->free, MAX_FREE);
    o->nfree = n > 0 ? (uint32_t)n : 0;
}

static int inside_one(const weft_vrange_t *list, int n, uint64_t base, uint64_t total)
{
    for (int i = 0; i < n; i++)
        if (list[i].lo <= base && base < list[i].hi && total <= list[i].hi - base)
            return 1;
    return 0;
}

uint64_t weft_window_common_base(const weft_vrange_t *const *lists, const int *counts, int nranks,
                                 uint64_t total, uint64_t align)
{
    /* The highest common base sits at the aligned-down top of the lowest-ending range that
     * holds it, so it is among the bases align_down(hi - total) of all the ranges. */
    uint64_t best = 0;
    for (int r = 0; r < nranks; r++) {
        for (int i = 0; i < counts[r]; i++) {
            const weft_vrange_t *c = &lists[r][i];
            if (c->hi - c->lo < total)
                continue;
            uint64_t base = (c->hi - total) & ~(align - 1);
            if (base < c->lo || base <= best)
                continue;
            int ok = 1;
            for (int q = 0; q < nranks && ok; q++)
                ok = inside_one(lists[q], counts[q], base, total);
            if (ok)
                best = base;
        }
    }
    return best;
}

/* The candidates in the order tried - the common base, then the distinct proposals - derived
 * from the all-gathered offers, hence the same on every rank. Returns how many (at most
 * MAX_CANDIDATES), or -1 without memory. */
static int list_candidates(const offer_t *offers, int nranks, uint64_t total, uint64_t align,
                           uint64_t *cand)
{
    const weft_vrange_t **lists = malloc((size_t)nranks * sizeof *lists);
    int *counts = malloc((size_t)nranks * sizeof *counts);
    if (!lists || !counts) {
        free(lists);
        free(counts);
        return -1;
    }
    for (int r = 0; r < nranks; r++) {
        lists[r] = offers[r].free;
        counts[r] = offers[r].nfree <= MAX_FREE ? (int)offers[r].nfree : 0;
    }
    int n = 0;
    uint64_t common = weft_window_common_base(lists, counts, nranks, total, align);
    free(lists);
    free(counts);
    if (common != 0)
        cand[n++] = common;
    for (int r = 0; r < nranks && n < MAX_CANDIDATES; r++) {
        uint64_t p = offers[r].proposal;
        int seen = p == 0;
        for (int i = 0; i < n && !seen; i++)
            seen = cand[i] == p;
        if (!seen)
            cand[n++] = p;
    }
    return n;
}

/* Bit i set: this rank could reserve candidate i (released again at once). */
static uint32_t probe(const weft_mem_ops_t *mem, const uint64_t *cand, int n, size_t total)
{
    uint32_t mask = 0;
    for (int i = 0; i < n; i++) {
        void *got;
        if (mem->reserve((void *)(uintptr_t)cand[i], total, 1, &got) == WEFT_SUCCESS) {
            mem->release(got, total);
            mask |= 1u << i;
        }
    }
    return mask;
}

/* The bitwise AND of every rank's mine under tag/attempt (an all-gather over the store; flags
 * holds nranks values). */
static weft_status_t and_over_ranks(weft_store_t *store, const char *tag, int attempt,
                                    uint32_t mine, int nranks, uint32_t *flags, uint32_t *out)
{
    char key[64];
    snprintf(key, sizeof key, "window/%s/%d", tag, attempt);
    weft_status_t st = weft_store_allgather(store, key, &mine, sizeof mine, flags);
    *out = UINT32_MAX;
    for (int r = 0; r < nranks; r++)
        *out &= flags[r];
    return st;
}

weft_status_t weft_window_reserve(weft_store_t *store, const weft_mem_ops_t *mem, int nranks,
                                  size_t slice_bytes, weft_window_t *win_out)
{
    weft_error_clear();
    size_t gran = mem->granularity();
    if (gran == 0) { /* the provider's reason, if it gave one, is in the last error */
        char why[256];
        snprintf(why, sizeof why, "%s", weft_last_error());
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "weft_comm_init: the memory provider reports no mapping granularity%s%s",
                          why[0] ? ": " : "", why);
    }
    size_t align = gran > (2u << 20) ? gran : (2u << 20);
    if (slice_bytes == 0 || slice_bytes > WINDOW_MAX_BYTES / (size_t)nranks)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_comm_init: WEFT_WINDOW_SLICE_BYTES: %d slices of %zu bytes are "
                          "more than an address space holds (2^56 bytes)",
                          nranks, slice_bytes);
    slice_bytes = (slice_bytes + align - 1) / align * align;
    size_t total = slice_bytes * (size_t)nranks;
    offer_t *offers = calloc((size_t)nranks, sizeof *offers);
    uint32_t *flags = calloc((size_t)nranks, sizeof *flags);
    weft_status_t st = WEFT_SUCCESS;
    if (!offers || !flags) {
        st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
        goto out;
    }

    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        char key[64];
        offer_t mine;
        make_offer(mem, total, align, &mine);
        snprintf(key, sizeof key, "window/offer/%d", attempt);
        st = weft_store_allgather(store, key, &mine, sizeof mine, offers);
        if (st != WEFT_SUCCESS)
            goto out;
        uint64_t cand[MAX_CANDIDATES];
        int ncand = list_candidates(offers, nranks, total, align, cand);
        if (ncand < 0) {
            st = weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: malloc");
            goto out;
        }

        uint32_t everywhere;
        st = and_over_ranks(store, "probe", attempt, probe(mem, cand, ncand, total), nranks, flags,
                            &everywhere);
        if (st != WEFT_SUCCESS)
            goto out;
        int pick = 0;
        while (pick < ncand && !(everywhere & (1u << pick)))
            pick++;
        if (pick == ncand) {
            WEFT_LOG_DEBUG("window attempt %d: none of %d candidates is free in every rank",
                           attempt, ncand);
            continue;
        }

        uint64_t base = cand[pick];
        void *got = NULL;
        uint32_t ok = mem->reserve((void *)(uintptr_t)base, total, 1, &got) == WEFT_SUCCESS;
        uint32_t all_ok;
        st = and_over_ranks(store, "reserve", attempt, ok, nranks, flags, &all_ok);
        if (st == WEFT_SUCCESS && all_ok) {
            *win_out = (weft_window_t){
                .mem = mem, .base = (uintptr_t)base, .slice_bytes = slice_bytes, .nranks = nranks};
            WEFT_LOG_DEBUG("window at 0x%" PRIx64 ", %zu bytes per slice (attempt %d, "
                           "candidate %d of %d)",
                           base, slice_bytes, attempt, pick, ncand);
            goto out;
        }
        if (ok)
            mem->release(got, total);
        if (st != WEFT_SUCCESS)
            goto out;
    }
    st = weft_error(WEFT_ERR_NO_MEMORY,
                    "weft_comm_init: no address range of %zu bytes is free in every rank "
                    "(WEFT_WINDOW_SLICE_BYTES sets the %zu bytes per rank)",
                    total, slice_bytes);
out:
    free(offers);
    free(flags);
    return st;
}

void weft_window_release(weft_window_t *win)
{
    if (win->base != 0)
        win->mem->release((void *)win->base, win->slice_bytes * (size_t)win->nranks);
    win->base = 0;
}
