/*
 * test_parse_bytes.c - byte sizes as text (src/util/parse_bytes.c): every form the configuration
 * table and the benchmarks accept, with its value; what is rejected, with *out left alone; the
 * overflow bound of each unit.
 */
#include <inttypes.h>
#include <stdio.h>

#include "util/parse_bytes.h"
#include "check.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)
#define UNTOUCHED ((uint64_t)0x5a5a5a5a5a5a5a5a)

static void accepts(const char *s, uint64_t want)
{
    uint64_t got = UNTOUCHED;
    int rc = weft_parse_bytes(s, &got);
    CHECK(rc == 0 && got == want, "\"%s\": returned %d, value %" PRIu64 ", expected %" PRIu64, s,
          rc, got, want);
}

static void rejects(const char *s)
{
    uint64_t got = UNTOUCHED;
    int rc = weft_parse_bytes(s, &got);
    CHECK(rc == -1 && got == UNTOUCHED, "\"%s\": returned %d, value %" PRIu64 ", expected -1", s,
          rc, got);
}

int main(void)
{
    /* The configuration table's forms (defaults such as "4M", "256K", "20000"). */
    accepts("0", 0);
    accepts("4096", 4096);
    accepts("256K", 256 * KiB);
    accepts("4M", 4 * MiB);
    accepts("1G", GiB);
    accepts("2T", 2 * TiB);
    accepts("64KiB", 64 * KiB);
    accepts("64Ki", 64 * KiB);
    accepts("3MB", 3 * MiB);
    /* The benchmarks' forms: either case, a bare B or b. */
    accepts("8B", 8);
    accepts("8b", 8);
    accepts("64k", 64 * KiB);
    accepts("16m", 16 * MiB);
    accepts("1g", GiB);
    accepts("1t", TiB);
    accepts("2Kb", 2 * KiB);
    accepts("2kib", 2 * KiB);
    /* What strtoull lets through before the digits. */
    accepts("+5", 5);
    accepts(" 7K", 7 * KiB);
    /* Bounds: the largest value of each unit, and one past it. */
    accepts("18446744073709551615", UINT64_MAX);
    rejects("18446744073709551616");
    accepts("16777215T", 16777215 * TiB);
    rejects("16777216T");
    accepts("17179869183G", 17179869183 * GiB);
    rejects("17179869184G");

    rejects("");
    rejects("K");
    rejects("B");
    rejects("-1");
    rejects(" -1");
    rejects("-0");
    rejects("1X");
    rejects("1KK");
    rejects("1iB");
    rejects("1KiBB");
    rejects("1KBi");
    rejects("1 K");
    rejects("1K ");
    rejects("0x10");
    rejects("1.5M");

    if (failures)
        printf("test_parse_bytes: %d failure(s)\n", failures);
    else
        printf("PASS: test_parse_bytes\n");
    return failures != 0;
}
