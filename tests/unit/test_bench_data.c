/*
 * test_bench_data.c - weft-bench's verified data (tools/bench_data.c) against the host reduction
 * (src/exec/reduce_host.c), for every integer dtype and float32/float64, every reduction, and
 * rank counts up to 300: past 127 (int8) and 255 (uint8) ranks the sums must wrap as weft's do.
 *
 * For each case: every rank's all-reduce input is written by fill_inputs, reduced in rank order
 * by weft_reduce_host (the semantics weft.h gives), and rank 0's verify must find 0 wrong
 * elements; one element changed by one must then be found. The results of every reduction but
 * PROD (+-1 and 2 by design) must take several values: a check whose expected results are all
 * equal verifies little. An output never written (all poison) must fail verification in at
 * least one of the passes weft-bench makes (verify_passes, one poison byte each) in every
 * element: a one-byte sum can equal the first poison.
 */
#include <stdlib.h>
#include <string.h>

#include "bench_data.h"
#include "exec/reduce_host.h"
#include "check.h"

#define TOTAL 257 /* elements of the all-reduce: odd, more than REDUCE_MODULUS */

/* Distinct values among count elements of size es at p (at most 16 counted). */
static int distinct(const char *p, size_t count, size_t es)
{
    const char *seen[16];
    int n = 0;
    for (size_t i = 0; i < count && n < 16; i++) {
        int found = 0;
        for (int k = 0; k < n && !found; k++)
            found = memcmp(seen[k], p + i * es, es) == 0;
        if (!found)
            seen[n++] = p + i * es;
    }
    return n;
}

static void check_case(weft_dtype_t dtype, weft_redop_t op, int nranks)
{
    size_t es = dtypes[dtype].size;
    char *send = malloc((size_t)nranks * TOTAL * es), *recv = malloc(TOTAL * es);
    char *scratch = malloc(TOTAL * es), *result = malloc(TOTAL * es);
    const void **srcs = malloc((size_t)nranks * sizeof *srcs);
    if (!send || !recv || !scratch || !result || !srcs) {
        CHECK(0, "out of memory");
        goto out;
    }
    for (int r = 0; r < nranks; r++) {
        data_spec_t spec = {.dtype = dtype, .op = op, .rank = r, .nranks = nranks};
        fill_inputs(&spec, COLL_ALL_REDUCE, TOTAL, false, send + (size_t)r * TOTAL * es, scratch,
                    verify_poison(0));
        srcs[r] = send + (size_t)r * TOTAL * es;
    }
    weft_reduce_host(result, srcs, nranks, TOTAL, dtype, op, nranks);
    data_spec_t spec0 = {.dtype = dtype, .op = op, .rank = 0, .nranks = nranks};
    uint64_t wrong = verify(&spec0, COLL_ALL_REDUCE, TOTAL, false, send, result, NULL);
    CHECK(wrong == 0, "%s op %d, %d ranks: %llu of %d elements differ from the host reduction",
          dtypes[dtype].alias, (int)op, nranks, (unsigned long long)wrong, TOTAL);
    /* An 8-bit mean spans only limit / nranks values, and over more ranks than the largest
     * wrapped sum (128 for int8, 255 for uint8) every mean truncates to 0. */
    int want = op == WEFT_PROD || nranks == 1                                      ? 1
               : op != WEFT_AVG                                                    ? 4
               : es > 1 || nranks <= dtypes[dtype].limit + dtypes[dtype].is_signed ? 2
                                                                                   : 1;
    CHECK(distinct(result, TOTAL, es) >= want, "%s op %d, %d ranks: %d distinct results",
          dtypes[dtype].alias, (int)op, nranks, distinct(result, TOTAL, es));
    /* One element off by one: verify must see it. */
    memcpy(recv, result, TOTAL * es);
    recv[(TOTAL / 2) * es] ^= 1;
    wrong = verify(&spec0, COLL_ALL_REDUCE, TOTAL, false, send, recv, NULL);
    CHECK(wrong == 1, "%s op %d, %d ranks: a changed element counted %llu times",
          dtypes[dtype].alias, (int)op, nranks, (unsigned long long)wrong);
    /* An output left as poisoned: verify counts exactly the elements whose result differs from
     * the pass's poison, and every element differs in some pass. */
    char *left = malloc(TOTAL * es);
    if (!left) {
        CHECK(0, "out of memory");
        goto out;
    }
    size_t escaped = TOTAL; /* elements equal to the poison in every pass so far */
    char *escapes = calloc(TOTAL, 1);
    for (int pass = 0; escapes && pass < verify_passes(dtype); pass++) {
        memset(left, verify_poison(pass), TOTAL * es);
        uint64_t differ = 0;
        escaped = 0;
        for (size_t i = 0; i < TOTAL; i++) {
            int same = memcmp(left + i * es, result + i * es, es) == 0;
            differ += !same;
            escapes[i] = (pass == 0 || escapes[i]) && same;
            escaped += escapes[i];
        }
        wrong = verify(&spec0, COLL_ALL_REDUCE, TOTAL, false, send, left, NULL);
        CHECK(wrong == differ,
              "%s op %d, %d ranks: an unwritten output (poison 0x%02x) counted "
              "%llu wrong, %llu differ",
              dtypes[dtype].alias, (int)op, nranks, verify_poison(pass), (unsigned long long)wrong,
              (unsigned long long)differ);
    }
    CHECK(escapes && escaped == 0,
          "%s op %d, %d ranks: %zu element(s) of an unwritten output pass every verified call",
          dtypes[dtype].alias, (int)op, nranks, escaped);
    free(escapes);
    free(left);
out:
    free(send);
    free(recv);
    free(scratch);
    free(result);
    free(srcs);
}

int main(void)
{
    static const weft_dtype_t types[] = {WEFT_INT8,  WEFT_UINT8,  WEFT_INT32,   WEFT_UINT32,
                                         WEFT_INT64, WEFT_UINT64, WEFT_FLOAT32, WEFT_FLOAT64};
    static const int counts[] = {1, 2, 3, 64, 127, 128, 200, 255, 256, 300};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        for (int op = WEFT_SUM; op <= WEFT_AVG; op++)
            for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
                check_case(types[t], (weft_redop_t)op, counts[c]);
    printf("test_bench_data: %s\n", failures ? "FAILED" : "passed");
    return failures != 0;
}
