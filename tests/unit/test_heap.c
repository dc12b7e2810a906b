/*
 * test_heap.c - the slice bookkeeping (src/core/heap.c): chunk sizes and growth, sub-allocation
 * alignment and reuse, the spare-chunk policy, lookups, a free that runs out of memory, and a
 * random allocate/free run checked against a shadow model (no overlap, every byte inside its
 * chunk, ranges conserved).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/heap.h"
#include "check.h"

#define MiB ((size_t)1 << 20)
#define BASE ((uintptr_t)1 << 40)
static const weft_mem_seg_t no_seg = {.fd = -1};

/* Allocate like the registry: carve from a chunk, else add a chunk and carve from it. */
static uintptr_t heap_malloc(weft_heap_t *h, size_t bytes, int internal)
{
    size_t size = weft_heap_alloc_size(h, bytes);
    uintptr_t addr;
    weft_chunk_t *c;
    if (weft_heap_alloc(h, size, internal, &addr, &c) == 0)
        return addr;
    size_t cbytes = weft_heap_chunk_bytes(h, size, 0);
    uintptr_t caddr;
    if (weft_heap_take_range(h, cbytes, &caddr) != 0)
        return 0;
    weft_heap_grow(h);
    if (!weft_heap_add_chunk(h, caddr, cbytes, no_seg, 0, internal))
        return 0;
    return weft_heap_alloc(h, size, internal, &addr, &c) == 0 ? addr : 0;
}

static void heap_free(weft_heap_t *h, uintptr_t addr)
{
    weft_chunk_t *c;
    CHECK(weft_heap_free(h, addr, &c) == 0, "free of %#" PRIxPTR, addr);
    if (weft_heap_should_release(h, c)) {
        weft_range_t r = weft_heap_remove_chunk(h, c);
        CHECK(weft_heap_give_range(h, r.addr, r.bytes) == 0, "give range");
    }
}

static void test_unchunked(void)
{
    weft_heap_t h;
    CHECK(weft_heap_init(&h, BASE, 64 * MiB, 4096, 0, 0) == 0, "init");
    uintptr_t a = heap_malloc(&h, 8, 0), b = heap_malloc(&h, 5000, 0);
    CHECK(a == BASE, "first allocation at the slice base");
    CHECK(b == BASE + 4096, "second allocation after a whole page: %#" PRIxPTR, b);
    CHECK(h.nchunks == 2, "one chunk per allocation: %zu", h.nchunks);
    CHECK(weft_heap_find_chunk(&h, b + 8191)->addr == b, "interior lookup");
    CHECK(weft_heap_find_chunk(&h, b + 8192) == NULL, "past the end");
    weft_chunk_t *c;
    CHECK(weft_heap_free(&h, a + 8, &c) != 0, "an interior pointer is not an allocation");
    heap_free(&h, a);
    CHECK(h.nchunks == 1, "unchunked: the empty chunk is released at once");
    CHECK(heap_malloc(&h, 100, 0) == BASE, "the freed range is reused first");
    weft_heap_fini(&h);
}

static void test_chunked(void)
{
    weft_heap_t h;
    CHECK(weft_heap_init(&h, BASE, 8192 * MiB, 2 * MiB, 64 * MiB, 256 * MiB) == 0, "init");
    uintptr_t a = heap_malloc(&h, 1, 0), b = heap_malloc(&h, 300, 0), c = heap_malloc(&h, 1, 1);
    CHECK(a == BASE, "first");
    CHECK(b == BASE + WEFT_HEAP_ALIGN, "256-byte steps inside a chunk: %#" PRIxPTR, b);
    CHECK(h.nchunks == 2, "internal allocations get their own chunk: %zu", h.nchunks);
    CHECK(c == BASE + 64 * MiB, "the second chunk follows the first");
    /* Growth: 64, 128 (internal), then 256, 256 (capped) MiB. */
    uintptr_t big = heap_malloc(&h, 100 * MiB, 0);
    CHECK(weft_heap_find_chunk(&h, big)->bytes == 256 * MiB, "third chunk: %zu MiB",
          weft_heap_find_chunk(&h, big)->bytes / MiB);
    uintptr_t huge = heap_malloc(&h, 600 * MiB, 0);
    CHECK(weft_heap_find_chunk(&h, huge)->bytes == 600 * MiB, "an allocation above the cap");
    /* Spare policy: a chunk above the cap is never kept; the first empty user chunk stays, a
     * second is released. */
    size_t n = h.nchunks;
    heap_free(&h, huge);
    CHECK(h.nchunks == n - 1, "an empty chunk above the cap is released at once");
    heap_free(&h, big);
    CHECK(h.nchunks == n - 1, "one empty chunk is kept as a spare");
    heap_free(&h, a);
    CHECK(h.nchunks == n - 1, "the first chunk still holds b");
    heap_free(&h, b);
    CHECK(h.nchunks == n - 2, "the first chunk, empty too, is released: the spare stays");
    CHECK(heap_malloc(&h, 64, 0) == big, "the next allocation lands in the spare chunk");
    weft_heap_fini(&h);
}

/* weft_array_grow is wrapped (the link passes -Wl,--wrap=weft_array_grow, see
 * tests/CMakeLists.txt): while fail_growth is set, a growth that needs new memory fails as an
 * exhausted malloc would. */
int __real_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem);
int __wrap_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem);
static int fail_growth;

int __wrap_weft_array_grow(void **data, size_t *cap, size_t need, size_t elem)
{
    if (fail_growth && need > *cap)
        return -1;
    return __real_weft_array_grow(data, cap, need, elem);
}

/* A free whose range needs a new entry in its chunk's free list while memory is exhausted fails
 * with WEFT_HEAP_NO_MEMORY (not "no such allocation") and changes nothing: the same free
 * succeeds once memory is back. */
static void test_free_out_of_memory(void)
{
    weft_heap_t h;
    CHECK(weft_heap_init(&h, BASE, 1024 * MiB, 2 * MiB, 64 * MiB, 64 * MiB) == 0, "init");
    enum { N = 200 };
    uintptr_t addr[N];
    for (int i = 0; i < N; i++)
        addr[i] = heap_malloc(&h, 1, 0);
    CHECK(h.nchunks == 1, "one chunk holds them all: %zu", h.nchunks);
    /* Freeing every other allocation leaves holes that merge with nothing: each needs an entry. */
    int failed_at = -1;
    fail_growth = 1;
    for (int i = 0; i < N && failed_at < 0; i += 2) {
        weft_chunk_t *c;
        int rc = weft_heap_free(&h, addr[i], &c);
        if (rc == WEFT_HEAP_NO_MEMORY)
            failed_at = i;
        else
            CHECK(rc == 0, "free %d: %d", i, rc);
    }
    fail_growth = 0;
    CHECK(failed_at >= 0, "no free needed the free list to grow");
    if (failed_at >= 0) {
        size_t live = weft_heap_find_chunk(&h, addr[failed_at])->live;
        CHECK(live == (size_t)(N - failed_at / 2), "the failed free changed the count: %zu", live);
        heap_free(&h, addr[failed_at]); /* still recorded: freeing it again succeeds */
        weft_chunk_t *c;
        CHECK(weft_heap_free(&h, addr[failed_at], &c) == WEFT_HEAP_NOT_ALLOC,
              "a second free of the same allocation");
    }
    weft_heap_fini(&h);
}

static void test_random(unsigned seed)
{
    srand(seed);
    weft_heap_t h;
    CHECK(weft_heap_init(&h, BASE, 4096 * MiB, 2 * MiB, 4 * MiB, 64 * MiB) == 0, "init");
    enum { N = 200 };
    uintptr_t addr[N] = {0};
    size_t len[N] = {0};
    for (int step = 0; step < 20000; step++) {
        int i = rand() % N;
        if (addr[i]) {
            heap_free(&h, addr[i]);
            addr[i] = 0;
            continue;
        }
        size_t bytes = 1 + (size_t)rand() % (rand() % 8 == 0 ? 8 * MiB : 64 * 1024);
        addr[i] = heap_malloc(&h, bytes, rand() % 5 == 0);
        len[i] = bytes;
        CHECK(addr[i] != 0, "allocation of %zu bytes", bytes);
        CHECK(addr[i] % WEFT_HEAP_ALIGN == 0, "alignment");
        weft_chunk_t *c = weft_heap_find_chunk(&h, addr[i]);
        CHECK(c && addr[i] + bytes <= c->addr + c->bytes, "inside its chunk");
        for (int j = 0; j < N; j++) {
            if (j != i && addr[j] && addr[i] < addr[j] + len[j] && addr[j] < addr[i] + bytes)
                CHECK(0, "allocations %d and %d overlap", i, j);
        }
        if (failures > 20)
            break;
    }
    for (int i = 0; i < N; i++) {
        if (addr[i])
            heap_free(&h, addr[i]);
    }
    /* Everything freed: at most one spare chunk per class remains, and the address space is
     * conserved (free ranges plus chunks cover the slice exactly). */
    CHECK(h.nchunks <= 2, "spares left: %zu", h.nchunks);
    size_t total = 0;
    for (size_t i = 0; i < h.slice_free.n; i++)
        total += h.slice_free.data[i].bytes;
    for (size_t i = 0; i < h.nchunks; i++)
        total += h.chunks[i]->bytes;
    CHECK(total == 4096 * MiB, "address space conserved: %zu MiB", total / MiB);
    weft_heap_fini(&h);
}

int main(int argc, char **argv)
{
    unsigned seed = argc > 1 ? (unsigned)strtoul(argv[1], NULL, 10) : (unsigned)time(NULL);
    printf("test_heap: seed %u\n", seed);
    test_unchunked();
    test_chunked();
    test_free_out_of_memory();
    test_random(seed);
    if (failures)
        printf("test_heap: %d failure(s)\n", failures);
    else
        printf("PASS: test_heap\n");
    return failures != 0;
}
