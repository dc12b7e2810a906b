/*
 * bench_data.c - weft-bench's inputs whose results are exact, and the expected results.
 *
 * Design (the contracts are in bench_data.h):
 * - Values are small integers encoded into the dtype; the 16-bit floats are encoded here, with
 *   rounding to nearest even, so that the tool depends on the public API only.
 * - Copy collectives (all-gather, broadcast, all-to-all(v)) move values that cycle with a prime
 *   period, so that a block delivered to the wrong place or at the wrong offset differs.
 * - Reductions take inputs whose every partial result, in any order, stays within the dtype's
 *   exact limit (dtypes[].limit): SUM adds pseudo-random values below limit/nranks + 1 (a
 *   formula linear in the rank would give every element the same sum whenever nranks is a
 *   multiple of its period); PROD multiplies +-1 and a single 2; MAX/MIN need no headroom: the
 *   extreme of each element sits on one rank, rotating with the element, with a value that
 *   varies along the buffer, every other rank holding a pseudo-random value from the other half
 *   of the range (so the result is that rank's value, not a saturated bound); AVG pairs ranks
 *   with +1/-1 around a common base, so that the sum is exactly nranks * base and the division
 *   is exact.
 * - Except float16 and bfloat16 SUM and AVG, which must add in float32 and round once (weft.h):
 *   values exact in 16 bits whose partial sums are not, so that a reduction rounding partial sums
 *   to 16 bits is caught. Integers +-m * 2^e, m of the full significand width p (11 bits for
 *   half, 8 for bfloat16: m in [2^(p-1), 2^p)), e in [0, w], and any sum of nranks of them below
 *   2^15 for half (finite) or 2^24 for bfloat16: every partial sum in any order is then exact in
 *   float32, and the expected value is the exact sum (AVG: divided by nranks in float32) rounded
 *   once to nearest even. From 3 ranks, rounding after each addition changes 15-50% of the
 *   elements; with 2 there is one addition, and rounding it early changes nothing.
 * - Past the limit (8-bit integers from 128 or 256 ranks, where SUM would add only zeros and AVG
 *   of a base of 1 already exceeds it), integer SUM and AVG take values that make the sum wrap:
 *   integers wrap exactly in any order (weft.h: SUM wraps; AVG divides the wrapped SUM,
 *   truncating), so the expected value is the exact sum wrapped to the dtype (AVG: then divided).
 * - The expected value of an element is recomputed from every rank's input formula, so checking
 *   needs no communication; a rank counts its own wrong elements.
 *
 * Thread safety: pure computation over the caller's buffers; the tables are constant.
 */
#include <string.h>

#include "bench_data.h"

/* Copy-collective inputs cycle through this many values (prime, so blocks differ). */
#define COPY_MODULUS 101
/* Reduction inputs of SUM, MAX and MIN cycle through at most this many values. */
#define REDUCE_MODULUS 64
/* Bases of integer AVG inputs when n * base must wrap (more ranks than the limit allows). */
#define AVG_WRAP_BASES 8

const dtype_info_t dtypes[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = {"int8", "int8", 1, true, 127},
    [WEFT_UINT8] = {"uint8", "uint8", 1, false, 255},
    [WEFT_INT32] = {"int32", "int32", 4, true, 1 << 20},
    [WEFT_UINT32] = {"uint32", "uint32", 4, false, 1 << 20},
    [WEFT_INT64] = {"int64", "int64", 8, true, 1 << 20},
    [WEFT_UINT64] = {"uint64", "uint64", 8, false, 1 << 20},
    [WEFT_FLOAT16] = {"half", "float16", 2, true, 2048},
    [WEFT_BFLOAT16] = {"bfloat16", "bf16", 2, true, 256},
    [WEFT_FLOAT32] = {"float", "float32", 4, true, 1 << 20},
    [WEFT_FLOAT64] = {"double", "float64", 8, true, 1 << 20},
};

/* ---------------------------------------------------------------------------------------------
 * Encoding into a dtype
 * ------------------------------------------------------------------------------------------- */

/* IEEE binary16 of f, rounded to nearest even. */
static uint16_t half_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u); /* NaN */
    if (a >= 0x47800000u)
        return (uint16_t)(sign | 0x7c00u); /* 65536 and up (or inf): inf */
    if (a < 0x38800000u) {
        /* Below 2^-14: a subnormal half, counted in units of 2^-24; rint rounds to even. */
        float af;
        memcpy(&af, &a, sizeof af);
        return (uint16_t)(sign | (uint32_t)__builtin_rintf(af * 16777216.0f));
    }
    uint32_t h = (a >> 13) - (112u << 10); /* rebias the exponent from 127 to 15 */
    uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is the correct result, up to inf */
    return (uint16_t)(sign | h);
}

/* bfloat16 of f, rounded to nearest even. */
static uint16_t bf16_from_float(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

void encode(weft_dtype_t dtype, int64_t v, void *dst)
{
    switch (dtype) {
    case WEFT_INT8:
        *(int8_t *)dst = (int8_t)v;
        break;
    case WEFT_UINT8:
        *(uint8_t *)dst = (uint8_t)v;
        break;
    case WEFT_INT32:
        *(int32_t *)dst = (int32_t)v;
        break;
    case WEFT_UINT32:
        *(uint32_t *)dst = (uint32_t)v;
        break;
    case WEFT_INT64:
        *(int64_t *)dst = v;
        break;
    case WEFT_UINT64:
        *(uint64_t *)dst = (uint64_t)v;
        break;
    case WEFT_FLOAT16: {
        uint16_t h = half_from_float((float)v);
        memcpy(dst, &h, sizeof h);
        break;
    }
    case WEFT_BFLOAT16: {
        uint16_t h = bf16_from_float((float)v);
        memcpy(dst, &h, sizeof h);
        break;
    }
    case WEFT_FLOAT32:
        *(float *)dst = (float)v;
        break;
    case WEFT_FLOAT64:
        *(double *)dst = (double)v;
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Input values and exact results
 * ------------------------------------------------------------------------------------------- */

/* float32 value f as one element of a 16-bit float dtype at dst. */
static void encode_f32_as_16(weft_dtype_t dtype, float f, void *dst)
{
    uint16_t h = dtype == WEFT_FLOAT16 ? half_from_float(f) : bf16_from_float(f);
    memcpy(dst, &h, sizeof h);
}

int64_t copy_value(const data_spec_t *spec, int r, size_t i)
{
    int64_t v = (int64_t)(((size_t)r % COPY_MODULUS) * 31 + (i % COPY_MODULUS) * 7) % COPY_MODULUS;
    return dtypes[spec->dtype].is_signed ? v - COPY_MODULUS / 2 : v;
}

static bool is_integer(weft_dtype_t dtype)
{
    return dtype <= WEFT_UINT64;
}

/* v as the integer dtype holds it: wrapped modulo 2^bits (two's complement when signed). */
static int64_t wrap_integer(weft_dtype_t dtype, int64_t v)
{
    switch (dtype) {
    case WEFT_INT8:
        return (int8_t)v;
    case WEFT_UINT8:
        return (uint8_t)v;
    case WEFT_INT32:
        return (int32_t)v;
    case WEFT_UINT32:
        return (uint32_t)v;
    default: /* 64-bit: the sums here stay far below 2^63 */
        return v;
    }
}

/* Whether spec's reduction takes the spread 16-bit inputs (see the file comment). */
static bool spread16(const data_spec_t *spec)
{
    return (spec->dtype == WEFT_FLOAT16 || spec->dtype == WEFT_BFLOAT16) &&
           (spec->op == WEFT_SUM || spec->op == WEFT_AVG);
}

/* 64-bit mix (splitmix64's finaliser): the spread inputs' pseudo-random choices. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Element i of rank r's spread input: +-m * 2^e with n * 2^p * 2^w <= 2^bits (the file comment);
 * past 16 ranks (half) or 2^16 (bfloat16) m narrows to keep the bound. */
static int64_t spread_input(const data_spec_t *spec, int r, size_t i)
{
    int p = spec->dtype == WEFT_FLOAT16 ? 11 : 8, bits = spec->dtype == WEFT_FLOAT16 ? 15 : 24;
    int lg = 0;
    while (lg < 30 && (1L << lg) < (long)spec->nranks)
        lg++;
    int q = bits - lg < p ? bits - lg : p; /* width of m */
    if (q < 1)
        q = 1;
    int w = bits - lg - q > 0 ? bits - lg - q : 0;
    uint64_t h = mix64(mix64((uint64_t)r) ^ (uint64_t)i);
    int64_t half = (int64_t)1 << (q - 1);
    int64_t m = half + (int64_t)((h >> 32) % (uint64_t)half);
    int64_t v = m << (int)((h >> 8) % (uint64_t)(w + 1));
    return (h & 1) ? -v : v;
}

/* Element i of rank r's input to a reduction: every partial result of any order stays within
 * the dtype's exact limit, or for spread16 within float32's (see the file comment). */
static int64_t reduce_input(const data_spec_t *spec, int r, size_t i)
{
    const dtype_info_t *dt = &dtypes[spec->dtype];
    int64_t n = spec->nranks, lim = dt->limit;
    if (spread16(spec))
        return spread_input(spec, r, i);
    switch (spec->op) {
    case WEFT_SUM: {
        int64_t m = lim / n + 1 < REDUCE_MODULUS ? lim / n + 1 : REDUCE_MODULUS;
        if (m < 2 && is_integer(spec->dtype))
            m = REDUCE_MODULUS; /* more ranks than the limit: the sum wraps (file comment) */
        return (int64_t)(mix64(mix64((uint64_t)r) ^ (uint64_t)i) % (uint64_t)m);
    }
    case WEFT_PROD: {
        int64_t v = (int64_t)(i % (size_t)n) == r ? 2 : 1;
        return dt->is_signed && (int64_t)((i / (size_t)n + (size_t)r) % 3) == 0 ? -v : v;
    }
    case WEFT_MAX:
    case WEFT_MIN: {
        int64_t half = REDUCE_MODULUS / 2;
        bool winner = (size_t)r == i % (size_t)n;
        int64_t v = winner ? (int64_t)(i % (size_t)half)
                           : (int64_t)(mix64(mix64((uint64_t)r) ^ (uint64_t)i) % (uint64_t)half);
        if (winner == (spec->op == WEFT_MAX))
            v += half;
        return dt->is_signed ? v - half : v;
    }
    case WEFT_AVG: {
        int64_t m = lim / n - 1 > 1 ? lim / n - 1 : 1;
        if (m < 2 && is_integer(spec->dtype))
            m = AVG_WRAP_BASES; /* n * base wraps before the division (file comment) */
        int64_t base = 1 + ((int64_t)(i % (size_t)m) * 7) % m;
        int64_t d = (r % 2 == 0 && r + 1 < n) ? 1 : (r % 2 == 1 ? -1 : 0);
        return base + d;
    }
    }
    return 0;
}

/* The exact reduction over all ranks of element i (spread16 AVG: the exact sum, undivided). */
static int64_t reduce_expected(const data_spec_t *spec, size_t i)
{
    int64_t acc = reduce_input(spec, 0, i);
    for (int r = 1; r < spec->nranks; r++) {
        int64_t v = reduce_input(spec, r, i);
        switch (spec->op) {
        case WEFT_SUM:
        case WEFT_AVG:
            acc += v;
            break;
        case WEFT_PROD:
            acc *= v;
            break;
        case WEFT_MAX:
            acc = v > acc ? v : acc;
            break;
        case WEFT_MIN:
            acc = v < acc ? v : acc;
            break;
        }
    }
    if (spread16(spec))
        return acc;
    if (spec->op != WEFT_AVG)
        return acc; /* encode() wraps an integer sum, as the reduction does */
    if (is_integer(spec->dtype))
        acc = wrap_integer(spec->dtype, acc);
    return acc / spec->nranks; /* divisible by construction, unless it wrapped */
}

/* The expected element i of a reduction's result, written at dst. */
static void reduce_expected_elem(const data_spec_t *spec, size_t i, void *dst)
{
    int64_t acc = reduce_expected(spec, i);
    if (spread16(spec) && spec->op == WEFT_AVG) /* the float32 sum (exact) / n, in float32 */
        encode_f32_as_16(spec->dtype, (float)acc / (float)spec->nranks, dst);
    else
        encode(spec->dtype, acc, dst);
}

/* ---------------------------------------------------------------------------------------------
 * All-to-allv layout (the traffic matrix is described at a2av_setup in bench_data.h)
 * ------------------------------------------------------------------------------------------- */

/* f(j): the elements a rank sends to the rank j places after it. */
static size_t a2av_block(size_t per, int n, int j)
{
    size_t nn = (size_t)n;
    if (j == n - 1) {
        size_t sum = 0;
        for (int k = 0; k < n - 1; k++)
            sum += 2 * per * (size_t)(k + 1) / (nn + 1);
        return nn * per - sum;
    }
    return 2 * per * (size_t)(j + 1) / (nn + 1);
}

/* Displacement of rank s's block for rank d within s's send buffer. */
static size_t a2av_sdispl(size_t per, int n, int s, int d)
{
    size_t off = 0;
    for (int k = 0; k < d; k++)
        off += a2av_block(per, n, (k - s + n) % n);
    return off;
}

void a2av_setup(const data_spec_t *spec, size_t per, a2av_layout_t *layout)
{
    int n = spec->nranks, me = spec->rank;
    size_t soff = 0, roff = 0;
    for (int p = 0; p < n; p++) {
        layout->sendcounts[p] = a2av_block(per, n, (p - me + n) % n);
        layout->sdispls[p] = soff;
        soff += layout->sendcounts[p];
        layout->recvcounts[p] = a2av_block(per, n, (me - p + n) % n);
        layout->rdispls[p] = roff;
        roff += layout->recvcounts[p];
    }
}

/* ---------------------------------------------------------------------------------------------
 * Inputs and verification of one call
 * ------------------------------------------------------------------------------------------- */

int verify_passes(weft_dtype_t dtype)
{
    return dtypes[dtype].size == 1 ? 2 : 1;
}

unsigned char verify_poison(int pass)
{
    return pass == 0 ? 0xA5 : 0x5A;
}

void fill_inputs(const data_spec_t *spec, coll_t coll, size_t total, bool inplace, char *sendbuf,
                 char *recvbuf, unsigned char poison)
{
    size_t es = dtypes[spec->dtype].size, per = total / (size_t)spec->nranks;
    weft_dtype_t dt = spec->dtype;
    int me = spec->rank;
    memset(recvbuf, poison, total * es);
    switch (coll) {
    case COLL_ALL_REDUCE: {
        char *in = inplace ? recvbuf : sendbuf;
        for (size_t i = 0; i < total; i++)
            encode(dt, reduce_input(spec, me, i), in + i * es);
        break;
    }
    case COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < total; i++)
            encode(dt, reduce_input(spec, me, i), sendbuf + i * es);
        break;
    case COLL_ALL_GATHER: {
        char *in = inplace ? recvbuf + (size_t)me * per * es : sendbuf;
        for (size_t i = 0; i < per; i++)
            encode(dt, copy_value(spec, me, i), in + i * es);
        break;
    }
    case COLL_BROADCAST: {
        char *in = inplace ? recvbuf : sendbuf;
        if (me == spec->root)
            for (size_t i = 0; i < total; i++)
                encode(dt, copy_value(spec, me, i), in + i * es);
        break;
    }
    case COLL_ALL_TO_ALL:
    case COLL_ALL_TO_ALLV:
        for (size_t i = 0; i < total; i++)
            encode(dt, copy_value(spec, me, i), sendbuf + i * es);
        break;
    case COLL_BARRIER:
    case NUM_COLLS:
        break;
    }
}

uint64_t verify(const data_spec_t *spec, coll_t coll, size_t total, bool inplace,
                const char *sendbuf, const char *recvbuf, const a2av_layout_t *layout)
{
    size_t es = dtypes[spec->dtype].size, per = total / (size_t)spec->nranks;
    int n = spec->nranks, me = spec->rank;
    const char *out = recvbuf;
    size_t out_count = total;
    if (coll == COLL_REDUCE_SCATTER) {
        out = inplace ? sendbuf + (size_t)me * per * es : recvbuf;
        out_count = per;
    }
    uint64_t wrong = 0;
    for (size_t k = 0; k < out_count; k++) {
        unsigned char want[8] = {0};
        switch (coll) {
        case COLL_ALL_REDUCE:
            reduce_expected_elem(spec, k, want);
            break;
        case COLL_REDUCE_SCATTER:
            reduce_expected_elem(spec, (size_t)me * per + k, want);
            break;
        case COLL_ALL_GATHER:
            encode(spec->dtype, copy_value(spec, (int)(k / per), k % per), want);
            break;
        case COLL_BROADCAST:
            encode(spec->dtype, copy_value(spec, spec->root, k), want);
            break;
        case COLL_ALL_TO_ALL:
            encode(spec->dtype, copy_value(spec, (int)(k / per), (size_t)me * per + k % per), want);
            break;
        case COLL_ALL_TO_ALLV: {
            int p = 0;
            while (p + 1 < n && layout->rdispls[p + 1] <= k)
                p++;
            size_t j = k - layout->rdispls[p];
            encode(spec->dtype, copy_value(spec, p, a2av_sdispl(per, n, p, me) + j), want);
            break;
        }
        case COLL_BARRIER:
        case NUM_COLLS:
            encode(spec->dtype, 0, want);
            break;
        }
        if (memcmp(out + k * es, want, es) != 0)
            wrong++;
    }
    return wrong;
}
