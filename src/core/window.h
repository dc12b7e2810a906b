/*
 * window.h - the shadow window: one virtual-address range reserved at the same address in
 * every rank; rank r places its own allocations in slice r = [base + r*slice, base + (r+1)*slice).
 * A pointer into the window therefore means the same bytes on every rank once registered.
 */
#ifndef WEFT_CORE_WINDOW_H
#define WEFT_CORE_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "core/bootstrap.h"
#include "mem/mem.h"
#include "util/vmmap.h"

typedef struct weft_window {
    const weft_mem_ops_t *mem;
    uintptr_t base;     /* aligned to the provider's granularity */
    size_t slice_bytes; /* a multiple of the granularity */
    int nranks;
} weft_window_t;

/* Agree on a base free in every rank and reserve it (collective over the store): the ranks
 * all-gather what is unmapped in each address space (util/vmmap.h) and a free range the provider
 * picked for each, probe the same candidate list - the highest base free in every rank first -
 * with exact reservations (MAP_FIXED_NOREPLACE semantics), and reserve the first that worked
 * everywhere; a rank that loses the range to a concurrent mapping makes all of them start over,
 * up to a bounded number of attempts. Never falls back to per-peer address translation.
 * Statuses: WEFT_ERR_INVALID_ARGUMENT (slice_bytes 0, or nranks slices beyond 2^56 bytes),
 * WEFT_ERR_NO_MEMORY (no common range found), store errors. */
weft_status_t weft_window_reserve(weft_store_t *store, const weft_mem_ops_t *mem, int nranks,
                                  size_t slice_bytes, weft_window_t *win_out);

/* The highest base, a multiple of align (a power of two), of total bytes inside one range of
 * each of the nranks lists (lists[r] has counts[r] ranges); 0 if there is none. Pure: every rank
 * computes it from the same all-gathered lists. Exposed for the unit test. */
uint64_t weft_window_common_base(const weft_vrange_t *const *lists, const int *counts, int nranks,
                                 uint64_t total, uint64_t align);

/* Give the reservation back (after every mapping inside it was unmapped). */
void weft_window_release(weft_window_t *win);

static inline uintptr_t weft_window_slice(const weft_window_t *win, int rank)
{
    return win->base + (uintptr_t)rank * win->slice_bytes;
}

/* The rank whose slice holds addr, or -1 if addr is outside the window. */
static inline int weft_window_owner(const weft_window_t *win, uintptr_t addr)
{
    if (addr < win->base || addr - win->base >= (uintptr_t)win->nranks * win->slice_bytes)
        return -1;
    return (int)((addr - win->base) / win->slice_bytes);
}

#endif /* WEFT_CORE_WINDOW_H */
