/*
 * test_window.c - the shadow window's common base (weft_window_common_base, src/core/window.c):
 * hand-made cases with their exact answers, then random range lists checked against a brute
 * force over every aligned base; and weft_window_reserve refusing sizes no address space holds.
 * The seed is printed; pass one as argv[1] to replay.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/window.h"
#include "util/splitmix.h"
#include "check.h"

#define MAX_RANKS 6
#define MAX_LIST 4
#define SPACE 512 /* random ranges lie in [BIAS, BIAS + SPACE) */
#define BIAS 4096

static uint64_t common(weft_vrange_t lists[][MAX_LIST], const int *counts, int nranks,
                       uint64_t total, uint64_t align)
{
    const weft_vrange_t *ptrs[MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        ptrs[r] = lists[r];
    return weft_window_common_base(ptrs, counts, nranks, total, align);
}

static void test_cases(void)
{
    /* Rank 0 free in [1000, 5000) and [8192, 20000); rank 1 in [4000, 16384): the common part
     * [8192, 16384) holds 4096 bytes at 12288 at most. */
    weft_vrange_t a[2][MAX_LIST] = {{{8192, 20000}, {1000, 5000}}, {{4000, 16384}}};
    int ca[2] = {2, 1};
    uint64_t got = common(a, ca, 2, 4096, 4096);
    CHECK(got == 12288, "two ranks: %" PRIu64 ", expected 12288", got);
    /* 4096-byte alignment within [8192, 16384) with 5000 bytes: 8192 only. */
    got = common(a, ca, 2, 5000, 4096);
    CHECK(got == 8192, "5000 bytes: %" PRIu64 ", expected 8192", got);
    /* Too big for the common part [8192, 16384). */
    got = common(a, ca, 2, 8193, 1);
    CHECK(got == 0, "8193 bytes: %" PRIu64 ", expected none", got);
    /* The common base must lie in one range of each rank, not across two adjacent ones. */
    weft_vrange_t b[2][MAX_LIST] = {{{100, 200}, {0x1000, 0x1100}},
                                    {{0x1000, 0x1080}, {0x1080, 0x1100}}};
    int cb[2] = {2, 2};
    got = common(b, cb, 2, 0x100, 1);
    CHECK(got == 0, "split range: 0x%" PRIx64 ", expected none", got);
    got = common(b, cb, 2, 0x80, 1);
    CHECK(got == 0x1080, "half: 0x%" PRIx64 ", expected 0x1080", got);
    /* A rank that offers nothing leaves no common base. */
    int cz[2] = {2, 0};
    got = common(a, cz, 2, 1, 1);
    CHECK(got == 0, "empty rank: %" PRIu64 ", expected none", got);
    /* One rank: the aligned top of its highest fitting range. */
    got = common(a, ca, 1, 4096, 4096);
    CHECK(got == 12288, "one rank: %" PRIu64 ", expected 12288", got);
}

/* Brute force: the highest multiple of align b with [b, b + total) inside a range of each rank. */
static uint64_t brute(weft_vrange_t lists[][MAX_LIST], const int *counts, int nranks,
                      uint64_t total, uint64_t align)
{
    for (uint64_t b = (BIAS + SPACE) & ~(align - 1); b >= BIAS; b -= align) {
        int ok = 1;
        for (int r = 0; r < nranks && ok; r++) {
            int in = 0;
            for (int i = 0; i < counts[r] && !in; i++)
                in = lists[r][i].lo <= b && b + total <= lists[r][i].hi;
            ok = in;
        }
        if (ok)
            return b;
    }
    return 0;
}

/* Sizes no address space holds are refused before the ranks exchange anything (no store is
 * needed to see it), and nothing is written to the window. */
static void test_reserve_sizes(void)
{
    static const struct {
        int nranks;
        size_t slice;
    } cases[] = {{1, 0},
                 {4, (size_t)1 << 55},
                 {2, SIZE_MAX},
                 {1, SIZE_MAX - 4096},
                 {1024, ((size_t)1 << 46) + 1}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        weft_window_t win = {.base = 0xdead};
        weft_status_t st =
            weft_window_reserve(NULL, &weft_mem_host_ops, cases[i].nranks, cases[i].slice, &win);
        CHECK(st == WEFT_ERR_INVALID_ARGUMENT && win.base == 0xdead,
              "%d slices of %zu bytes: %s, base %#" PRIxPTR, cases[i].nranks, cases[i].slice,
              weft_status_string(st), (uintptr_t)win.base);
    }
}

static void test_random(uint64_t seed)
{
    uint64_t rng = seed;
    for (int iter = 0; iter < 20000; iter++) {
        int nranks = 1 + (int)(weft_splitmix64_next(&rng) % MAX_RANKS);
        weft_vrange_t lists[MAX_RANKS][MAX_LIST];
        int counts[MAX_RANKS];
        for (int r = 0; r < nranks; r++) {
            /* Disjoint ranges, highest first, as weft_vm_free_ranges returns them. */
            int n = (int)(weft_splitmix64_next(&rng) % (MAX_LIST + 1));
            uint64_t top = BIAS + SPACE;
            counts[r] = 0;
            for (int i = 0; i < n && top > BIAS; i++) {
                uint64_t hi = top - weft_splitmix64_next(&rng) % (top - BIAS);
                uint64_t lo = hi - weft_splitmix64_next(&rng) % (hi - BIAS + 1);
                if (lo == hi)
                    continue;
                lists[r][counts[r]++] = (weft_vrange_t){lo, hi};
                top = lo;
            }
        }
        uint64_t total = 1 + weft_splitmix64_next(&rng) % 200;
        uint64_t align = (uint64_t)1 << (weft_splitmix64_next(&rng) % 6);
        uint64_t got = common(lists, counts, nranks, total, align);
        uint64_t want = brute(lists, counts, nranks, total, align);
        CHECK(got == want,
              "seed %" PRIu64 " iter %d: %d ranks, total %" PRIu64 ", align %" PRIu64 ": %" PRIu64
              ", expected %" PRIu64,
              seed, iter, nranks, total, align, got, want);
    }
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)time(NULL);
    printf("test_window: seed %" PRIu64 "\n", seed);
    test_cases();
    test_reserve_sizes();
    test_random(seed);
    if (failures == 0)
        printf("test_window: ok\n");
    return failures != 0;
}
