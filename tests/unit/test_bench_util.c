/*
 * test_bench_util.c - the benchmark programs' helpers (tools/bench_util.c): medians of odd and
 * even counts (and the sorted array they leave), JSON string escaping, integer option values at
 * and past their bounds, and comma-separated lists (empty tokens, no token, a refused token, a
 * list too long).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "check.h"

static void test_medians(void)
{
    double d1[] = {7.5};
    CHECK(bench_median_double(d1, 1) == 7.5, "median of one");
    double d3[] = {3, -1, 2};
    CHECK(bench_median_double(d3, 3) == 2, "median of three");
    CHECK(d3[0] == -1 && d3[1] == 2 && d3[2] == 3, "three not left sorted");
    double d4[] = {4, 1, 3, 2};
    CHECK(bench_median_double(d4, 4) == 2.5, "median of four");
    CHECK(d4[0] == 1 && d4[3] == 4, "four not left sorted");

    uint64_t u1[] = {UINT64_MAX};
    CHECK(bench_median_u64(u1, 1) == (double)UINT64_MAX, "u64 median of one");
    uint64_t u5[] = {50, 10, 40, 20, 30};
    CHECK(bench_median_u64(u5, 5) == 30, "u64 median of five");
    CHECK(u5[0] == 10 && u5[4] == 50, "five not left sorted");
    uint64_t u2[] = {1000000000000000001ull, 3};
    CHECK(bench_median_u64(u2, 2) == ((double)3 + (double)1000000000000000001ull) / 2.0,
          "u64 median of two");
    CHECK(u2[0] == 3, "two not left sorted");
}

static void json_case(const char *in, const char *want)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) {
        CHECK(0, "open_memstream failed");
        return;
    }
    bench_json_string(f, in);
    fclose(f);
    CHECK(strcmp(buf, want) == 0, "JSON of \"%s\": %s, expected %s", in, buf, want);
    free(buf);
}

static void test_json(void)
{
    json_case("", "\"\"");
    json_case("NVIDIA H200", "\"NVIDIA H200\"");
    json_case("a\"b\\c", "\"a\\\"b\\\\c\"");
    json_case("tab\there\nnl\x01\x1f", "\"tab\\u0009here\\u000anl\\u0001\\u001f\"");
    json_case("caf\xc3\xa9 \x7f", "\"caf\xc3\xa9 \x7f\"");
}

static void int_case(const char *s, int lo, int hi, int want_rc, int want)
{
    int v = -12345;
    int rc = bench_parse_int(s, lo, hi, &v);
    CHECK(rc == want_rc && v == (want_rc == 0 ? want : -12345),
          "\"%s\" in [%d, %d]: returned %d, value %d", s, lo, hi, rc, v);
}

static void test_parse_int(void)
{
    int_case("0", 0, 10, 0, 0);
    int_case("10", 0, 10, 0, 10);
    int_case("-3", -5, 5, 0, -3);
    int_case("11", 0, 10, -1, 0);
    int_case("-1", 0, 10, -1, 0);
    int_case("", 0, 10, -1, 0);
    int_case("5x", 0, 10, -1, 0);
    int_case("x5", 0, 10, -1, 0);
    int_case("2147483647", 0, 2147483647, 0, 2147483647);
    int_case("2147483648", 0, 2147483647, -1, 0);
    int_case("99999999999999999999", 0, 2147483647, -1, 0);
}

typedef struct list_ctx {
    char seen[8][16];
    int n;
} list_ctx_t;

/* Records each token; refuses "bad". */
static int take(const char *token, void *ctx)
{
    list_ctx_t *c = ctx;
    if (strcmp(token, "bad") == 0 || c->n == 8)
        return -1;
    snprintf(c->seen[c->n++], sizeof c->seen[0], "%s", token);
    return 0;
}

static void test_parse_list(void)
{
    list_ctx_t c = {.n = 0};
    CHECK(bench_parse_list("64K,,16M,", take, &c) == 0 && c.n == 2 &&
              strcmp(c.seen[0], "64K") == 0 && strcmp(c.seen[1], "16M") == 0,
          "empty tokens: %d tokens", c.n);
    c.n = 0;
    CHECK(bench_parse_list("one", take, &c) == 0 && c.n == 1, "one token");
    c.n = 0;
    CHECK(bench_parse_list("", take, &c) == -1 && c.n == 0, "empty list accepted");
    CHECK(bench_parse_list(",,", take, &c) == -1 && c.n == 0, "list of commas accepted");
    CHECK(bench_parse_list("a,bad,c", take, &c) == -1 && c.n == 1,
          "refused token: returned 0 or went on (%d tokens)", c.n);
    char long_list[1100];
    memset(long_list, 'a', sizeof long_list - 1);
    long_list[sizeof long_list - 1] = '\0';
    c.n = 0;
    CHECK(bench_parse_list(long_list, take, &c) == -1 && c.n == 0, "list of 1099 bytes accepted");
}

int main(void)
{
    test_medians();
    test_json();
    test_parse_int();
    test_parse_list();
    if (failures)
        printf("test_bench_util: %d failure(s)\n", failures);
    else
        printf("PASS: test_bench_util\n");
    return failures != 0;
}
