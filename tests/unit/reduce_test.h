/*
 * reduce_test.h - what the reduction unit tests share (test_reduce_host.c, test_reduce_cuda.cu):
 * the failure counter and its CHECK (check.h), the names and sizes of the dtypes and reduction ops,
 * a seeded splitmix64 generator and the bit casts of float and double. Compiles as C and as C++.
 *
 * Each test is one translation unit and includes this once: failures and rng_state are that
 * test's own. Single-threaded.
 */
#ifndef WEFT_TESTS_UNIT_REDUCE_TEST_H
#define WEFT_TESTS_UNIT_REDUCE_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "util/splitmix.h"
#include "weft.h"

static const char *const dtype_names[WEFT_NUM_DTYPES] = {"int8",    "uint8",  "int32",   "uint32",
                                                         "int64",   "uint64", "float16", "bfloat16",
                                                         "float32", "float64"};
static const size_t dtype_sizes[WEFT_NUM_DTYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const op_names[WEFT_NUM_REDOPS] = {"sum", "prod", "max", "min", "avg"};

/* Random numbers: splitmix64 from rng_state, which the test seeds. */
static uint64_t rng_state;

static inline uint64_t rng_next(void)
{
    return weft_splitmix64_next(&rng_state);
}

/* Uniform in [0, n), n > 0 (the modulo bias is immaterial here). */
static inline uint32_t rng_below(uint32_t n)
{
    return (uint32_t)(rng_next() % n);
}

static inline uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static inline double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

#endif /* WEFT_TESTS_UNIT_REDUCE_TEST_H */
