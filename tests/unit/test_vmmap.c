/*
 * test_vmmap.c - the unmapped ranges of an address space (src/util/vmmap.c): gaps of a
 * synthetic /proc/<pid>/maps with exact bounds, clipping to [floor, ceil), the size filter, the
 * cap keeping the highest, rejected text; then this process's own map, checked by mapping into
 * the top range it reports and reading the map again.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "util/vmmap.h"
#include "check.h"

#define GiB ((uint64_t)1 << 30)
#define TOP ((uint64_t)1 << 47)

static const char MAPS[] =
    "00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/prog\n"
    "00651000-00652000 rw-p 00051000 08:02 173521      /usr/bin/prog\n"
    "7f0000000000-7f0000100000 r--p 00000000 00:00 0\n"
    "7f0010000000-7f0010001000 rw-p 00000000 00:00 0 \n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
    "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";

/* Parse text with the given bounds; returns the count and fills out. */
static int parse(const char *text, uint64_t floor, uint64_t ceil, uint64_t min, weft_vrange_t *out,
                 int max)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) {
        CHECK(f != NULL, "fmemopen");
        return -2;
    }
    int n = weft_vm_free_ranges_from(f, floor, ceil, min, out, max);
    fclose(f);
    return n;
}

static void expect(const char *what, const weft_vrange_t *got, int n, const weft_vrange_t *want,
                   int nwant)
{
    CHECK(n == nwant, "%s: %d ranges, expected %d", what, n, nwant);
    for (int i = 0; i < n && i < nwant; i++)
        CHECK(got[i].lo == want[i].lo && got[i].hi == want[i].hi,
              "%s: range %d is [0x%" PRIx64 ", 0x%" PRIx64 "), expected [0x%" PRIx64 ", 0x%" PRIx64
              ")",
              what, i, got[i].lo, got[i].hi, want[i].lo, want[i].hi);
}

static void test_synthetic(void)
{
    weft_vrange_t out[8];
    const weft_vrange_t all[] = {
        {0x7ffd00021000, TOP},
        {0x7f0010001000, 0x7ffd00000000},
        {0x7f0000100000, 0x7f0010000000},
        {0x652000, 0x7f0000000000},
        {0x452000, 0x651000},
        {0x1000, 0x400000},
    };
    int n = parse(MAPS, 0x1000, TOP, 0, out, 8);
    expect("every gap", out, n, all, 6);

    /* The cap keeps the highest ranges. */
    n = parse(MAPS, 0x1000, TOP, 0, out, 2);
    expect("the two highest", out, n, all, 2);

    /* At least 1 GiB: above and below the stack, and the big one above the program. */
    const weft_vrange_t big[] = {
        {0x7ffd00021000, TOP}, {0x7f0010001000, 0x7ffd00000000}, {0x652000, 0x7f0000000000}};
    n = parse(MAPS, 0x1000, TOP, GiB, out, 8);
    expect(">= 1 GiB", out, n, big, 3);

    /* Clipped to [4 GiB, 0x7f0000080000): a bound inside a mapping drops what lies past it. */
    const weft_vrange_t clipped[] = {{4 * GiB, 0x7f0000000000}};
    n = parse(MAPS, 4 * GiB, 0x7f0000080000, 0, out, 8);
    expect("clipped", out, n, clipped, 1);

    /* An empty map is one range, [floor, ceil). */
    const weft_vrange_t whole[] = {{4 * GiB, TOP}};
    n = parse("", 4 * GiB, TOP, 0, out, 8);
    expect("empty map", out, n, whole, 1);

    /* Text that is not a map, or mappings out of order, is refused. */
    CHECK(parse("garbage\n", 0, TOP, 0, out, 8) == -1, "a line without start-end");
    CHECK(parse("7f0000000000-7f0000100000 r--p\n00400000-00452000 r-xp\n", 0, TOP, 0, out, 8) ==
              -1,
          "descending mappings");
    CHECK(parse("00452000-00400000 r-xp\n", 0, TOP, 0, out, 8) == -1, "end below start");
}

/* This process, below where the kernel places 1 GiB (as the window's offer caps it): map 1 GiB
 * at the top of the highest range reported, then read again. */
static void test_live(void)
{
    weft_vrange_t out[16];
    void *k = mmap(NULL, GiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(k != MAP_FAILED, "mmap of 1 GiB anywhere");
    if (k == MAP_FAILED)
        return;
    munmap(k, GiB);
    uint64_t ceil = (uint64_t)(uintptr_t)k + GiB;
    int n = weft_vm_free_ranges(4 * GiB, ceil, GiB, out, 16);
    CHECK(n > 0, "weft_vm_free_ranges returned %d", n);
    if (n <= 0)
        return;
    for (int i = 1; i < n; i++)
        CHECK(out[i].hi <= out[i - 1].lo, "range %d not below range %d", i, i - 1);
    uint64_t at = (out[0].hi - GiB) & ~(GiB - 1);
    CHECK(at >= out[0].lo, "no aligned GiB in the top range");
    void *p = mmap((void *)(uintptr_t)at, GiB, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(p == (void *)(uintptr_t)at, "mmap at 0x%" PRIx64 " (reported free) gave %p", at, p);
    if (p == MAP_FAILED)
        return;
    n = weft_vm_free_ranges(4 * GiB, ceil, 0, out, 16);
    CHECK(n > 0, "second read returned %d", n);
    for (int i = 0; i < n; i++)
        CHECK(out[i].hi <= at || out[i].lo >= at + GiB,
              "[0x%" PRIx64 ", 0x%" PRIx64 ") reported free overlaps the mapping at 0x%" PRIx64,
              out[i].lo, out[i].hi, at);
    munmap(p, GiB);
}

int main(void)
{
    test_synthetic();
    test_live();
    if (failures == 0)
        printf("test_vmmap: ok\n");
    return failures != 0;
}
