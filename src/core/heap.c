/*
 * heap.c - slice bookkeeping: free ranges, chunks, allocations (see heap.h).
 *
 * Tables are sorted arrays searched by bisection: a registry holds tens to thousands of
 * allocations, and lookups (every collective's readiness check) dominate insertions.
 */
#include "core/heap.h"

#include <stdlib.h>
#include <string.h>

#include "util/array.h"

static size_t round_up(size_t v, size_t to)
{
    return (v + to - 1) / to * to;
}

/* First fit of bytes at an address aligned to align (a power of two). */
static int range_take(weft_range_list_t *l, size_t bytes, size_t align, uintptr_t *addr_out)
{
    for (size_t i = 0; i < l->n; i++) {
        weft_range_t *r = &l->data[i];
        uintptr_t start = round_up(r->addr, align);
        if (start - r->addr > r->bytes || r->bytes - (start - r->addr) < bytes)
            continue;
        uintptr_t end = start + bytes, rend = r->addr + r->bytes;
        if (start > r->addr && end < rend) { /* split in two */
            if (weft_array_grow((void **)&l->data, &l->cap, l->n + 1, sizeof *l->data) != 0)
                return -1;
            r = &l->data[i];
            memmove(r + 2, r + 1, (l->n - i - 1) * sizeof *r);
            l->n++;
            r[1] = (weft_range_t){end, rend - end};
            r->bytes = start - r->addr;
        } else if (start > r->addr) {
            r->bytes = start - r->addr;
        } else if (end < rend) {
            r->addr = end;
            r->bytes = rend - end;
        } else {
            memmove(r, r + 1, (l->n - i - 1) * sizeof *r);
            l->n--;
        }
        *addr_out = start;
        return 0;
    }
    return -1;
}

static int range_give(weft_range_list_t *l, uintptr_t addr, size_t bytes)
{
    size_t i = 0;
    while (i < l->n && l->data[i].addr < addr)
        i++;
    weft_range_t *prev = i > 0 ? &l->data[i - 1] : NULL;
    weft_range_t *next = i < l->n ? &l->data[i] : NULL;
    if (prev && prev->addr + prev->bytes == addr) {
        prev->bytes += bytes;
        if (next && addr + bytes == next->addr) {
            prev->bytes += next->bytes;
            memmove(next, next + 1, (l->n - i - 1) * sizeof *next);
            l->n--;
        }
        return 0;
    }
    if (next && addr + bytes == next->addr) {
        next->addr = addr;
        next->bytes += bytes;
        return 0;
    }
    if (weft_array_grow((void **)&l->data, &l->cap, l->n + 1, sizeof *l->data) != 0)
        return -1;
    memmove(&l->data[i + 1], &l->data[i], (l->n - i) * sizeof *l->data);
    l->data[i] = (weft_range_t){addr, bytes};
    l->n++;
    return 0;
}

int weft_heap_init(weft_heap_t *h, uintptr_t base, size_t bytes, size_t gran, size_t chunk_min,
                   size_t chunk_max)
{
    memset(h, 0, sizeof *h);
    h->gran = gran;
    h->chunk_min = chunk_min ? round_up(chunk_min, gran) : 0;
    h->chunk_max = chunk_max > h->chunk_min ? round_up(chunk_max, gran) : h->chunk_min;
    h->chunk_next = h->chunk_min;
    return range_give(&h->slice_free, base, bytes);
}

void weft_heap_fini(weft_heap_t *h)
{
    for (size_t i = 0; i < h->nchunks; i++) {
        free(h->chunks[i]->free.data);
        free(h->chunks[i]);
    }
    free(h->chunks);
    free(h->allocs);
    free(h->slice_free.data);
    memset(h, 0, sizeof *h);
}

size_t weft_heap_alloc_size(const weft_heap_t *h, size_t bytes)
{
    return round_up(bytes, h->chunk_min ? WEFT_HEAP_ALIGN : h->gran);
}

/* Index of the first entry of a sorted table (addr at offset 0 of each entry) above addr. */
#define UPPER_BOUND(table, n, key_of, addr)                                                        \
    ({                                                                                             \
        size_t lo_ = 0, hi_ = (n);                                                                 \
        while (lo_ < hi_) {                                                                        \
            size_t mid_ = (lo_ + hi_) / 2;                                                         \
            if (key_of((table)[mid_]) <= (addr))                                                   \
                lo_ = mid_ + 1;                                                                    \
            else                                                                                   \
                hi_ = mid_;                                                                        \
        }                                                                                          \
        lo_;                                                                                       \
    })
#define CHUNK_ADDR(c) ((c)->addr)
#define ALLOC_ADDR(a) ((a).addr)

weft_chunk_t *weft_heap_find_chunk(const weft_heap_t *h, uintptr_t addr)
{
    size_t i = UPPER_BOUND(h->chunks, h->nchunks, CHUNK_ADDR, addr);
    if (i == 0)
        return NULL;
    weft_chunk_t *c = h->chunks[i - 1];
    return addr - c->addr < c->bytes ? c : NULL;
}

weft_chunk_t *weft_heap_empty_chunk(const weft_heap_t *h)
{
    for (size_t i = 0; i < h->nchunks; i++) {
        if (h->chunks[i]->live == 0)
            return h->chunks[i];
    }
    return NULL;
}

int weft_heap_alloc(weft_heap_t *h, size_t size, int internal, uintptr_t *addr_out,
                    weft_chunk_t **chunk_out)
{
    if (weft_array_grow((void **)&h->allocs, &h->allocs_cap, h->nallocs + 1, sizeof *h->allocs) !=
        0)
        return -1;
    for (size_t i = 0; i < h->nchunks; i++) {
        weft_chunk_t *c = h->chunks[i];
        uintptr_t addr;
        if (c->internal != internal || range_take(&c->free, size, WEFT_HEAP_ALIGN, &addr) != 0)
            continue;
        size_t j = UPPER_BOUND(h->allocs, h->nallocs, ALLOC_ADDR, addr);
        memmove(&h->allocs[j + 1], &h->allocs[j], (h->nallocs - j) * sizeof *h->allocs);
        h->allocs[j] = (weft_alloc_t){addr, size};
        h->nallocs++;
        c->live++;
        *addr_out = addr;
        *chunk_out = c;
        return 0;
    }
    return -1;
}

size_t weft_heap_chunk_bytes(const weft_heap_t *h, size_t size, int smallest)
{
    size_t need = round_up(size, h->gran);
    if (h->chunk_min == 0 || smallest)
        return need;
    return h->chunk_next > need ? h->chunk_next : need;
}

void weft_heap_grow(weft_heap_t *h)
{
    if (h->chunk_next < h->chunk_max)
        h->chunk_next = h->chunk_next * 2 < h->chunk_max ? h->chunk_next * 2 : h->chunk_max;
}

int weft_heap_take_range(weft_heap_t *h, size_t bytes, uintptr_t *addr_out)
{
    return range_take(&h->slice_free, bytes, h->gran, addr_out);
}

int weft_heap_give_range(weft_heap_t *h, uintptr_t addr, size_t bytes)
{
    return range_give(&h->slice_free, addr, bytes);
}

weft_chunk_t *weft_heap_add_chunk(weft_heap_t *h, uintptr_t addr, size_t bytes, weft_mem_seg_t seg,
                                  uint64_t ticket, int internal)
{
    if (weft_array_grow((void **)&h->chunks, &h->chunks_cap, h->nchunks + 1, sizeof *h->chunks) !=
        0)
        return NULL;
    weft_chunk_t *c = calloc(1, sizeof *c);
    if (!c || range_give(&c->free, addr, bytes) != 0) {
        free(c);
        return NULL;
    }
    c->addr = addr;
    c->bytes = bytes;
    c->seg = seg;
    c->ticket = ticket;
    c->internal = internal;
    size_t i = UPPER_BOUND(h->chunks, h->nchunks, CHUNK_ADDR, addr);
    memmove(&h->chunks[i + 1], &h->chunks[i], (h->nchunks - i) * sizeof *h->chunks);
    h->chunks[i] = c;
    h->nchunks++;
    return c;
}

int weft_heap_free(weft_heap_t *h, uintptr_t addr, weft_chunk_t **chunk_out)
{
    size_t j = UPPER_BOUND(h->allocs, h->nallocs, ALLOC_ADDR, addr);
    if (j == 0 || h->allocs[j - 1].addr != addr)
        return WEFT_HEAP_NOT_ALLOC;
    weft_alloc_t a = h->allocs[j - 1];
    weft_chunk_t *c = weft_heap_find_chunk(h, addr);
    if (!c)
        return WEFT_HEAP_NOT_ALLOC;
    if (range_give(&c->free, a.addr, a.bytes) != 0)
        return WEFT_HEAP_NO_MEMORY;
    memmove(&h->allocs[j - 1], &h->allocs[j], (h->nallocs - j) * sizeof *h->allocs);
    h->nallocs--;
    c->live--;
    *chunk_out = c;
    return 0;
}

int weft_heap_should_release(const weft_heap_t *h, const weft_chunk_t *chunk)
{
    if (chunk->live > 0)
        return 0;
    if (h->chunk_min == 0 || chunk->bytes > h->chunk_max)
        return 1;
    for (size_t i = 0; i < h->nchunks; i++) {
        const weft_chunk_t *c = h->chunks[i];
        if (c != chunk && c->live == 0 && c->internal == chunk->internal)
            return 1;
    }
    return 0;
}

weft_range_t weft_heap_remove_chunk(weft_heap_t *h, weft_chunk_t *chunk)
{
    weft_range_t r = {chunk->addr, chunk->bytes};
    for (size_t i = 0; i < h->nchunks; i++) {
        if (h->chunks[i] == chunk) {
            memmove(&h->chunks[i], &h->chunks[i + 1], (h->nchunks - i - 1) * sizeof *h->chunks);
            h->nchunks--;
            break;
        }
    }
    free(chunk->free.data);
    free(chunk);
    return r;
}
