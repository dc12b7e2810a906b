/*
 * heap.h - the bookkeeping of a rank's slice of the shadow window: which address ranges are
 * free, which chunks of physical memory are mapped there, and which allocations live in each
 * chunk (the provider registers large chunks and sub-allocates from them).
 *
 * Pure data structure: no system calls, no provider calls, no locking (the registry holds its
 * mutex around every call and does the mapping and registration itself).
 *
 * With chunk_min == 0 every allocation gets a chunk of its own, exactly its size rounded to the
 * granularity (the host backend: one range of the rank's memfd per allocation). Otherwise chunks
 * are at least chunk_min bytes, each new one twice the last up to chunk_max (or the allocation's
 * own size if larger), and allocations are carved out of them on 256-byte boundaries, first fit.
 */
#ifndef WEFT_CORE_HEAP_H
#define WEFT_CORE_HEAP_H

#include <stddef.h>
#include <stdint.h>

#include "mem/mem.h"

#define WEFT_HEAP_ALIGN 256 /* allocations inside a chunk start on this boundary */

typedef struct weft_range {
    uintptr_t addr;
    size_t bytes;
} weft_range_t;

/* Sorted by address, neighbours coalesced. */
typedef struct weft_range_list {
    weft_range_t *data;
    size_t n, cap;
} weft_range_list_t;

typedef struct weft_chunk {
    uintptr_t addr;
    size_t bytes;
    weft_mem_seg_t seg; /* kept while it may still be registered (jit); else given away */
    size_t file_offset; /* sparse providers: where it lies in the rank's memfd (registry.c) */
    uint64_t ticket;    /* registration ticket; 0: not registered */
    int internal;       /* holds weft's own allocations (registered whatever the mode) */
    size_t live;        /* allocations inside */
    weft_range_list_t free;
} weft_chunk_t;

typedef struct weft_alloc {
    uintptr_t addr;
    size_t bytes;
} weft_alloc_t;

typedef struct weft_heap {
    size_t gran, chunk_min, chunk_max, chunk_next;
    weft_range_list_t slice_free; /* address ranges of the slice holding no chunk */
    weft_chunk_t **chunks;        /* sorted by address */
    size_t nchunks, chunks_cap;
    weft_alloc_t *allocs; /* sorted by address */
    size_t nallocs, allocs_cap;
} weft_heap_t;

/* A heap over the slice [base, base + bytes). Returns 0, or -1 when out of memory. */
int weft_heap_init(weft_heap_t *h, uintptr_t base, size_t bytes, size_t gran, size_t chunk_min,
                   size_t chunk_max);
/* Free the bookkeeping (not the chunks' memory: the caller unmaps them first). */
void weft_heap_fini(weft_heap_t *h);

/* The size an allocation of bytes occupies (rounded to WEFT_HEAP_ALIGN, or to the granularity
 * when every allocation has its own chunk). */
size_t weft_heap_alloc_size(const weft_heap_t *h, size_t bytes);

/* Carve size bytes (from weft_heap_alloc_size) out of an existing chunk of the same class and
 * record the allocation. Returns 0 and sets *addr_out and *chunk_out, or -1 when no chunk has
 * room (or the tables cannot grow). */
int weft_heap_alloc(weft_heap_t *h, size_t size, int internal, uintptr_t *addr_out,
                    weft_chunk_t **chunk_out);

/* The size of a new chunk that will hold an allocation of size bytes: the growth's next size,
 * or the allocation's own (rounded to the granularity) when larger or when smallest is set (the
 * fallback when memory or address space is short). */
size_t weft_heap_chunk_bytes(const weft_heap_t *h, size_t size, int smallest);
/* A chunk of the growth's size was made: the next one is twice as large, up to chunk_max. */
void weft_heap_grow(weft_heap_t *h);

/* Take bytes (a multiple of the granularity) of free slice address space, or -1. */
int weft_heap_take_range(weft_heap_t *h, size_t bytes, uintptr_t *addr_out);
/* Give address space back to the slice (a chunk released, its peers done with it). */
int weft_heap_give_range(weft_heap_t *h, uintptr_t addr, size_t bytes);

/* Record a new chunk (its whole range free for allocations). Returns it, or NULL when out of
 * memory (the caller still owns everything then). */
weft_chunk_t *weft_heap_add_chunk(weft_heap_t *h, uintptr_t addr, size_t bytes, weft_mem_seg_t seg,
                                  uint64_t ticket, int internal);

/* The chunk containing addr, or NULL. */
weft_chunk_t *weft_heap_find_chunk(const weft_heap_t *h, uintptr_t addr);

/* A chunk holding no allocation (a spare, of either class), or NULL. */
weft_chunk_t *weft_heap_empty_chunk(const weft_heap_t *h);

/* Free the allocation starting exactly at addr: its range goes back to its chunk. Returns 0 and
 * sets *chunk_out; WEFT_HEAP_NOT_ALLOC if no allocation starts at addr; WEFT_HEAP_NO_MEMORY if
 * the chunk's list of free ranges cannot grow to take it (nothing changed: the allocation is
 * still recorded, and freeing it again may succeed). */
enum { WEFT_HEAP_NOT_ALLOC = -1, WEFT_HEAP_NO_MEMORY = -2 };
int weft_heap_free(weft_heap_t *h, uintptr_t addr, weft_chunk_t **chunk_out);

/* Whether an empty chunk should be released now: always without chunking, and a chunk larger
 * than chunk_max (made for one allocation of its size: keeping it would hold that memory on
 * every rank); otherwise when another empty chunk of the same class is kept already (one spare
 * per class avoids creating and registering a chunk anew on every malloc/free cycle). */
int weft_heap_should_release(const weft_heap_t *h, const weft_chunk_t *chunk);

/* Forget a chunk (empty, or at teardown) and free its bookkeeping; returns its range. */
weft_range_t weft_heap_remove_chunk(weft_heap_t *h, weft_chunk_t *chunk);

#endif /* WEFT_CORE_HEAP_H */
