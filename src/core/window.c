/*
 * window.c - agreeing on the shadow window's base (see window.h).
 *
 * Protocol, per attempt a: rank 0 proposes a base (first a free range the kernel picked for it,
 * later the proposal of the lowest rank that failed); every rank tries to reserve exactly
 * there; all ranks all-gather {ok, own proposal}; all ok -> done; else every rank that
 * succeeded releases, and the next attempt starts from the first failing rank's proposal.
 */
#include "core/window.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/log.h"

#define MAX_ATTEMPTS 16

typedef struct outcome {
    uint64_t ok;
    uint64_t proposal; /* a base this rank found free (0 if none) */
} outcome_t;

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

weft_status_t weft_window_reserve(weft_store_t *store, const weft_mem_ops_t *mem, int rank,
                                  int nranks, size_t slice_bytes, weft_window_t *win_out)
{
    size_t gran = mem->granularity();
    size_t align = gran > (2u << 20) ? gran : (2u << 20);
    slice_bytes = (slice_bytes + align - 1) / align * align;
    if (slice_bytes == 0 || slice_bytes > SIZE_MAX / (size_t)nranks)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_comm_init: window slice of %zu bytes",
                          slice_bytes);
    size_t total = slice_bytes * (size_t)nranks;
    outcome_t *all = calloc((size_t)nranks, sizeof *all);
    if (!all)
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");

    weft_status_t st = WEFT_SUCCESS;
    uint64_t candidate = 0;
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        char key[64];
        if (rank == 0) {
            if (candidate == 0)
                candidate = find_free(mem, total, align);
            snprintf(key, sizeof key, "window/candidate/%d", attempt);
            st = weft_store_set(store, key, &candidate, sizeof candidate);
            if (st != WEFT_SUCCESS)
                goto out;
        } else {
            size_t len;
            snprintf(key, sizeof key, "window/candidate/%d", attempt);
            st = weft_store_get(store, key, &candidate, sizeof candidate, &len);
            if (st != WEFT_SUCCESS)
                goto out;
        }
        void *got = NULL;
        outcome_t mine = {0, 0};
        if (candidate != 0 &&
            mem->reserve((void *)(uintptr_t)candidate, total, 1, &got) == WEFT_SUCCESS)
            mine.ok = 1;
        else
            mine.proposal = find_free(mem, total, align);
        snprintf(key, sizeof key, "window/outcome/%d", attempt);
        st = weft_store_allgather(store, key, &mine, sizeof mine, all);
        if (st != WEFT_SUCCESS) {
            if (mine.ok)
                mem->release(got, total);
            goto out;
        }
        int all_ok = 1;
        uint64_t next = 0;
        for (int r = 0; r < nranks; r++) {
            if (!all[r].ok) {
                all_ok = 0;
                if (next == 0)
                    next = all[r].proposal;
            }
        }
        if (all_ok) {
            *win_out = (weft_window_t){.mem = mem,
                                       .base = (uintptr_t)candidate,
                                       .slice_bytes = slice_bytes,
                                       .nranks = nranks};
            WEFT_LOG_DEBUG("window at 0x%" PRIx64 ", %zu bytes per slice (attempt %d)", candidate,
                           slice_bytes, attempt);
            goto out;
        }
        if (mine.ok)
            mem->release(got, total);
        candidate = next;
    }
    st = weft_error(WEFT_ERR_NO_MEMORY,
                    "weft_comm_init: no address range of %zu bytes is free in every rank", total);
out:
    free(all);
    return st;
}

void weft_window_release(weft_window_t *win)
{
    if (win->base != 0)
        win->mem->release((void *)win->base, win->slice_bytes * (size_t)win->nranks);
    win->base = 0;
}
