/*
 * test_reduce_host.c - unit test of exec/reduce_host.h: the binary16 / bfloat16 conversions and
 * weft_reduce_host for every dtype and reduction op.
 *
 * Conversions are checked over all 65536 bit patterns of each 16-bit format, at every rounding
 * boundary between neighbouring 16-bit values, on a strided sweep of all float32 bit patterns
 * and on named values, against a reference that decodes with ldexp and rounds in double
 * arithmetic with floor() (a different method from the bit manipulation under test).
 * Reductions are checked on a grid (dtype x op x sources x count), out of place and in place,
 * on random inputs, against a per-element reference that combines the sources in order
 * (integers as 64-bit words masked to their width). Outputs are poisoned first and guard
 * elements after the end must stay untouched. A throughput line is printed, not asserted.
 *
 * Usage: test_reduce_host [seed]. Single-threaded.
 */
#include "exec/reduce_host.h"

#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce_test.h"
#include "util/clock.h"

#define MAX_SRCS 8
#define GUARD 16    /* poisoned elements after each output */
#define POISON 0xa5 /* byte written to outputs before each call */

/* ---------------------------------------------------------------------------------------------
 * Reference conversions. A 16-bit float format: mant_bits of mantissa, exp_bits of exponent.
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    int mant_bits;
    int exp_bits;
} fmt16_t;

static const fmt16_t HALF = {10, 5};
static const fmt16_t BF16 = {7, 8};

static int fmt_bias(fmt16_t f)
{
    return (1 << (f.exp_bits - 1)) - 1;
}

static bool ref_is_nan16(fmt16_t f, uint16_t v)
{
    int e = (v >> f.mant_bits) & ((1 << f.exp_bits) - 1);
    return e == (1 << f.exp_bits) - 1 && (v & ((1u << f.mant_bits) - 1)) != 0;
}

/* The value of a non-NaN 16-bit float, by its definition. */
static double ref_value16(fmt16_t f, uint16_t v)
{
    int e = (v >> f.mant_bits) & ((1 << f.exp_bits) - 1);
    int m = v & ((1 << f.mant_bits) - 1);
    double mag;
    if (e == (1 << f.exp_bits) - 1)
        mag = INFINITY;
    else if (e == 0)
        mag = ldexp(m, 1 - fmt_bias(f) - f.mant_bits);
    else
        mag = ldexp((1 << f.mant_bits) + m, e - fmt_bias(f) - f.mant_bits);
    return (v & 0x8000u) ? -mag : mag;
}

/* Widening reference: exact value; NaNs become quiet float NaNs with the payload on top. */
static float ref_to_float(fmt16_t f, uint16_t v)
{
    if (ref_is_nan16(f, v)) {
        uint32_t payload = (uint32_t)(v & ((1u << f.mant_bits) - 1)) << (23 - f.mant_bits);
        return bitsf(((uint32_t)(v & 0x8000u) << 16) | 0x7fc00000u | payload);
    }
    return (float)ref_value16(f, v);
}

/* The nearest value of the format to |x| (ties to even), or INFINITY past the largest plus
 * half an ulp; computed in double, where every step here is exact. */
static double ref_round_mag(fmt16_t f, double x)
{
    int emin = 1 - fmt_bias(f);
    double largest = ldexp(2.0 - ldexp(1.0, -f.mant_bits), fmt_bias(f));
    double half_ulp_top = ldexp(1.0, fmt_bias(f) - f.mant_bits - 1);
    x = fabs(x);
    if (x >= largest + half_ulp_top)
        return INFINITY;
    int e;
    (void)frexp(x, &e); /* x = m 2^e, m in [0.5, 1): the leading bit has weight 2^(e-1) */
    int lead = x == 0.0 || e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, lead - f.mant_bits);
    double q = x / ulp;
    double n = floor(q);
    double r = q - n;
    if (r > 0.5 || (r == 0.5 && fmod(n, 2.0) == 1.0))
        n += 1.0;
    return n * ulp;
}

/* Encode a magnitude that is exactly a value of the format (or infinity). */
static uint16_t ref_encode_mag(fmt16_t f, double mag)
{
    int emax_field = (1 << f.exp_bits) - 1;
    if (isinf(mag))
        return (uint16_t)(emax_field << f.mant_bits);
    if (mag == 0.0)
        return 0;
    int e;
    (void)frexp(mag, &e);
    int lead = e - 1;
    int emin = 1 - fmt_bias(f);
    if (lead < emin) /* subnormal: a multiple of the smallest subnormal */
        return (uint16_t)ldexp(mag, f.mant_bits - emin);
    double frac = ldexp(mag, -lead) - 1.0; /* in [0, 1) */
    return (uint16_t)(((lead + fmt_bias(f)) << f.mant_bits) | (int)ldexp(frac, f.mant_bits));
}

/* Narrowing reference: round to nearest even; NaNs stay NaN, quiet, top of the payload kept. */
static uint16_t ref_from_float(fmt16_t f, float x)
{
    uint32_t b = fbits(x);
    uint16_t sign = (uint16_t)((b >> 16) & 0x8000u);
    if (isnan(x)) {
        uint16_t exp_all = (uint16_t)(((1 << f.exp_bits) - 1) << f.mant_bits);
        uint16_t quiet = (uint16_t)(1u << (f.mant_bits - 1));
        uint16_t payload = (uint16_t)((b & 0x7fffffu) >> (23 - f.mant_bits));
        return (uint16_t)(sign | exp_all | quiet | payload);
    }
    return (uint16_t)(sign | ref_encode_mag(f, ref_round_mag(f, (double)x)));
}

/* ---------------------------------------------------------------------------------------------
 * Conversion tests
 * ------------------------------------------------------------------------------------------- */
typedef float (*to_float_fn)(uint16_t);
typedef uint16_t (*from_float_fn)(float);

static void check_from_float(const char *name, fmt16_t f, from_float_fn from, float x)
{
    uint16_t got = from(x);
    uint16_t want = ref_from_float(f, x);
    CHECK(got == want, "%s(%a = 0x%08" PRIx32 ") = 0x%04x, want 0x%04x", name, (double)x, fbits(x),
          got, want);
}

/* Every 16-bit pattern: widening against the reference, and the round trip. */
static void test_all_patterns(const char *name, fmt16_t f, to_float_fn to, from_float_fn from)
{
    for (uint32_t v = 0; v <= 0xffffu; v++) {
        uint16_t h = (uint16_t)v;
        float got = to(h);
        float want = ref_to_float(f, h);
        CHECK(fbits(got) == fbits(want), "%s_to_float(0x%04x) = 0x%08" PRIx32 ", want 0x%08" PRIx32,
              name, h, fbits(got), fbits(want));
        uint16_t back = from(got);
        uint16_t quiet = (uint16_t)(1u << (f.mant_bits - 1));
        uint16_t expect = ref_is_nan16(f, h) ? (uint16_t)(h | quiet) : h;
        CHECK(back == expect, "%s round trip 0x%04x -> 0x%04x, want 0x%04x", name, h, back, expect);
    }
}

/* Every rounding boundary: the midpoint between neighbouring non-negative values (exact in
 * float32), one float ulp either side, and a random point between them; both signs. */
static void test_boundaries(const char *name, fmt16_t f, from_float_fn from)
{
    uint16_t inf = (uint16_t)(((1 << f.exp_bits) - 1) << f.mant_bits);
    for (uint16_t h = 0; h < inf; h++) {
        double lo = ref_value16(f, h);
        /* Past the largest value the next step is where infinity would sit. */
        double hi = h + 1 < inf ? ref_value16(f, (uint16_t)(h + 1)) : ldexp(1.0, fmt_bias(f) + 1);
        float mid = (float)((lo + hi) / 2);
        CHECK((double)mid == (lo + hi) / 2, "%s midpoint after 0x%04x not exact", name, h);
        float probes[4] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY),
                           (float)(lo + (hi - lo) * (double)(rng_next() >> 11) * 0x1p-53)};
        for (int i = 0; i < 4; i++) {
            check_from_float(name, f, from, probes[i]);
            check_from_float(name, f, from, -probes[i]);
        }
    }
}

/* A strided sweep over all float32 bit patterns (every sign, exponent, NaN and subnormal). */
static void test_float_sweep(const char *name, fmt16_t f, from_float_fn from)
{
    const uint64_t stride = 1021;
    for (uint64_t b = rng_below((uint32_t)stride); b <= 0xffffffffull; b += stride)
        check_from_float(name, f, from, bitsf((uint32_t)b));
}

typedef struct {
    uint32_t in; /* float32 bits */
    uint16_t out;
} conv_case_t;

static void test_named_values(void)
{
    static const conv_case_t half_cases[] = {
        {0x477fe000u, 0x7bffu}, /* 65504, the largest half */
        {0x477fefffu, 0x7bffu}, /* just below 65520 */
        {0x477ff000u, 0x7c00u}, /* 65520: the tie rounds to even, which is infinity */
        {0x49742400u, 0x7c00u}, /* 1e6 */
        {0x7f7fffffu, 0x7c00u}, /* FLT_MAX */
        {0x7f800000u, 0x7c00u}, /* +inf */
        {0xff800000u, 0xfc00u}, /* -inf */
        {0x33800000u, 0x0001u}, /* 2^-24, the smallest subnormal */
        {0x33000000u, 0x0000u}, /* 2^-25: tie between 0 and 1, to even 0 */
        {0x33000001u, 0x0001u}, /* just above 2^-25 */
        {0x33c00000u, 0x0002u}, /* 1.5 * 2^-24: tie, to even 2 */
        {0x34200000u, 0x0002u}, /* 2.5 * 2^-24: tie, to even 2 */
        {0x387fc000u, 0x03ffu}, /* the largest subnormal */
        {0x387fe000u, 0x0400u}, /* halfway between it and 2^-14: to even */
        {0x38800000u, 0x0400u}, /* 2^-14, the smallest normal */
        {0x3f801000u, 0x3c00u}, /* 1 + 2^-11: tie, to even 1 */
        {0x3f803000u, 0x3c02u}, /* 1 + 3 * 2^-11: tie, to even 1 + 2^-9 */
        {0x3f801001u, 0x3c01u}, /* just above the tie */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x00000001u, 0x0000u}, /* the smallest float32 subnormal */
        {0x80000001u, 0x8000u}, /* and its negative */
        {0x7fc00000u, 0x7e00u}, /* quiet NaN */
        {0x7f800001u, 0x7e00u}, /* signalling NaN, payload below the half's mantissa */
        {0xff802000u, 0xfe01u}, /* negative signalling NaN with a payload */
    };
    static const conv_case_t bf16_cases[] = {
        {0x7f7f0000u, 0x7f7fu}, /* the largest bfloat16 */
        {0x7f7f7fffu, 0x7f7fu}, /* just below the tie */
        {0x7f7f8000u, 0x7f80u}, /* the tie rounds to even, which is infinity */
        {0x7f7fffffu, 0x7f80u}, /* FLT_MAX */
        {0xff800000u, 0xff80u}, /* -inf */
        {0x3f808000u, 0x3f80u}, /* 1 + 2^-8: tie, to even 1 */
        {0x3f818000u, 0x3f82u}, /* 1 + 3 * 2^-8: tie, to even */
        {0x3f808001u, 0x3f81u}, /* just above the tie */
        {0x00000001u, 0x0000u}, /* float32 subnormal below half a bfloat16 ulp */
        {0x00008000u, 0x0000u}, /* tie between 0 and the smallest subnormal: to even 0 */
        {0x00018000u, 0x0002u}, /* tie between 1 and 2 subnormal steps: to even 2 */
        {0x00010000u, 0x0001u}, /* the smallest bfloat16 subnormal */
        {0x007fffffu, 0x0080u}, /* the largest float32 subnormal rounds up to 2^-126 */
        {0x80000000u, 0x8000u}, /* -0 */
        {0x7f800001u, 0x7fc0u}, /* signalling NaN, payload below the bfloat16 mantissa */
        {0xffa00000u, 0xffe0u}, /* negative signalling NaN with a payload */
    };
    for (size_t i = 0; i < sizeof half_cases / sizeof half_cases[0]; i++) {
        uint16_t got = weft_float_to_half(bitsf(half_cases[i].in));
        CHECK(got == half_cases[i].out, "weft_float_to_half(0x%08" PRIx32 ") = 0x%04x, want 0x%04x",
              half_cases[i].in, got, half_cases[i].out);
    }
    for (size_t i = 0; i < sizeof bf16_cases / sizeof bf16_cases[0]; i++) {
        uint16_t got = weft_float_to_bf16(bitsf(bf16_cases[i].in));
        CHECK(got == bf16_cases[i].out, "weft_float_to_bf16(0x%08" PRIx32 ") = 0x%04x, want 0x%04x",
              bf16_cases[i].in, got, bf16_cases[i].out);
    }
    /* Widening of specials and subnormals, by value. */
    CHECK(weft_half_to_float(0x0001u) == 0x1p-24f, "half 0x0001 is not 2^-24");
    CHECK(weft_half_to_float(0x03ffu) == 0x1.ff8p-15f, "half 0x03ff is not the largest subnormal");
    CHECK(weft_half_to_float(0x7bffu) == 65504.0f, "half 0x7bff is not 65504");
    CHECK(weft_half_to_float(0xfc00u) == -INFINITY, "half 0xfc00 is not -inf");
    CHECK(fbits(weft_half_to_float(0x8000u)) == 0x80000000u, "half 0x8000 is not -0");
    CHECK(fbits(weft_half_to_float(0x7c01u)) == 0x7fc02000u, "half sNaN 0x7c01 not quieted");
    CHECK(weft_bf16_to_float(0x0001u) == 0x1p-133f, "bf16 0x0001 is not 2^-133");
    CHECK(fbits(weft_bf16_to_float(0xff81u)) == 0xffc10000u, "bf16 sNaN 0xff81 not quieted");
}

static void test_conversions(void)
{
    test_all_patterns("half", HALF, weft_half_to_float, weft_float_to_half);
    test_all_patterns("bf16", BF16, weft_bf16_to_float, weft_float_to_bf16);
    test_boundaries("weft_float_to_half", HALF, weft_float_to_half);
    test_boundaries("weft_float_to_bf16", BF16, weft_float_to_bf16);
    test_float_sweep("weft_float_to_half", HALF, weft_float_to_half);
    test_float_sweep("weft_float_to_bf16", BF16, weft_float_to_bf16);
    test_named_values();
}

/* ---------------------------------------------------------------------------------------------
 * Reference reduction, one element at a time.
 * ------------------------------------------------------------------------------------------- */
static bool is_int(weft_dtype_t dt)
{
    return dt <= WEFT_UINT64;
}

static bool is_signed_int(weft_dtype_t dt)
{
    return dt == WEFT_INT8 || dt == WEFT_INT32 || dt == WEFT_INT64;
}

/* Integer element i as its bit pattern, zero-extended (memcpy: any storage, any alignment). */
static uint64_t load_raw(weft_dtype_t dt, const void *p, size_t i)
{
    const unsigned char *c = p;
    switch (dtype_sizes[dt]) {
    case 1:
        return c[i];
    case 2: {
        uint16_t v;
        memcpy(&v, c + 2 * i, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, c + 4 * i, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, c + 8 * i, 8);
        return v;
    }
    }
}

static void store_raw(weft_dtype_t dt, void *p, size_t i, uint64_t v)
{
    unsigned char *c = p;
    switch (dtype_sizes[dt]) {
    case 1:
        c[i] = (unsigned char)v;
        break;
    case 2: {
        uint16_t x = (uint16_t)v;
        memcpy(c + 2 * i, &x, 2);
        break;
    }
    case 4: {
        uint32_t x = (uint32_t)v;
        memcpy(c + 4 * i, &x, 4);
        break;
    }
    default:
        memcpy(c + 8 * i, &v, 8);
        break;
    }
}

/* The two's complement value of the low `bits` bits of raw. */
static int64_t sign_extend(uint64_t raw, int bits)
{
    if (bits == 64)
        return raw >= (1ull << 63) ? -(int64_t)(~raw) - 1 : (int64_t)raw;
    uint64_t m = (1ull << bits) - 1;
    raw &= m;
    return raw >= (1ull << (bits - 1)) ? (int64_t)raw - (int64_t)(1ull << bits) : (int64_t)raw;
}

/* Sum and product modulo 2^64 reduce modulo 2^width once masked: wrap-around at every step. */
static uint64_t ref_int(weft_dtype_t dt, weft_redop_t op, const void *const *srcs, int nsrcs,
                        size_t i, int div)
{
    int bits = (int)dtype_sizes[dt] * 8;
    uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    bool sgn = is_signed_int(dt);
    uint64_t acc = load_raw(dt, srcs[0], i);
    for (int s = 1; s < nsrcs; s++) {
        uint64_t v = load_raw(dt, srcs[s], i);
        switch (op) {
        case WEFT_SUM:
        case WEFT_AVG:
            acc = (acc + v) & mask;
            break;
        case WEFT_PROD:
            acc = (acc * v) & mask;
            break;
        case WEFT_MAX:
            if (sgn ? sign_extend(v, bits) > sign_extend(acc, bits) : v > acc)
                acc = v;
            break;
        case WEFT_MIN:
            if (sgn ? sign_extend(v, bits) < sign_extend(acc, bits) : v < acc)
                acc = v;
            break;
        }
    }
    if (op == WEFT_AVG)
        acc = sgn ? (uint64_t)(sign_extend(acc, bits) / div) & mask : acc / (uint64_t)div;
    return acc;
}

static float ref_float_op(weft_redop_t op, float a, float b)
{
    switch (op) {
    case WEFT_SUM:
    case WEFT_AVG:
        return a + b;
    case WEFT_PROD:
        return a * b;
    case WEFT_MAX: /* a NaN is ignored while a number is there; ties keep the earlier */
        return !isnan(b) && (isnan(a) || b > a) ? b : a;
    case WEFT_MIN:
        return !isnan(b) && (isnan(a) || b < a) ? b : a;
    }
    return NAN;
}

static double ref_double_op(weft_redop_t op, double a, double b)
{
    switch (op) {
    case WEFT_SUM:
    case WEFT_AVG:
        return a + b;
    case WEFT_PROD:
        return a * b;
    case WEFT_MAX: /* a NaN is ignored while a number is there; ties keep the earlier */
        return !isnan(b) && (isnan(a) || b > a) ? b : a;
    case WEFT_MIN:
        return !isnan(b) && (isnan(a) || b < a) ? b : a;
    }
    return NAN;
}

/* Element i of the reduction, written to out[i] (out typed by dt). */
static void ref_element(weft_dtype_t dt, weft_redop_t op, const void *const *srcs, int nsrcs,
                        size_t i, int div, void *out)
{
    if (is_int(dt)) {
        store_raw(dt, out, i, ref_int(dt, op, srcs, nsrcs, i, div));
    } else if (dt == WEFT_FLOAT32) {
        float acc = ((const float *)srcs[0])[i];
        for (int s = 1; s < nsrcs; s++)
            acc = ref_float_op(op, acc, ((const float *)srcs[s])[i]);
        ((float *)out)[i] = op == WEFT_AVG ? acc / (float)div : acc;
    } else if (dt == WEFT_FLOAT64) {
        double acc = ((const double *)srcs[0])[i];
        for (int s = 1; s < nsrcs; s++)
            acc = ref_double_op(op, acc, ((const double *)srcs[s])[i]);
        ((double *)out)[i] = op == WEFT_AVG ? acc / (double)div : acc;
    } else {
        fmt16_t f = dt == WEFT_FLOAT16 ? HALF : BF16;
        float acc = ref_to_float(f, ((const uint16_t *)srcs[0])[i]);
        for (int s = 1; s < nsrcs; s++)
            acc = ref_float_op(op, acc, ref_to_float(f, ((const uint16_t *)srcs[s])[i]));
        ((uint16_t *)out)[i] = ref_from_float(f, op == WEFT_AVG ? acc / (float)div : acc);
    }
}

/* Element i of got equals element i of want: bit for bit, except that after arithmetic any NaN
 * matches any NaN (which NaN operand the hardware propagates is not specified). MAX and MIN only
 * select, so their NaNs must match exactly. */
static bool element_equal(weft_dtype_t dt, weft_redop_t op, const void *got, const void *want,
                          size_t i)
{
    bool any_nan = op != WEFT_MAX && op != WEFT_MIN;
    switch (dt) {
    case WEFT_FLOAT32: {
        float g = ((const float *)got)[i], w = ((const float *)want)[i];
        return fbits(g) == fbits(w) || (any_nan && isnan(g) && isnan(w));
    }
    case WEFT_FLOAT64: {
        double g = ((const double *)got)[i], w = ((const double *)want)[i];
        return dbits(g) == dbits(w) || (any_nan && isnan(g) && isnan(w));
    }
    case WEFT_FLOAT16:
    case WEFT_BFLOAT16: {
        fmt16_t f = dt == WEFT_FLOAT16 ? HALF : BF16;
        uint16_t g = ((const uint16_t *)got)[i], w = ((const uint16_t *)want)[i];
        return g == w || (any_nan && ref_is_nan16(f, g) && ref_is_nan16(f, w));
    }
    default:
        return load_raw(dt, got, i) == load_raw(dt, want, i);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Inputs
 * ------------------------------------------------------------------------------------------- */

/* A float with a random 24-bit mantissa and a binary exponent in [-10, 10]; one in 64 is a
 * special value instead (NaN quiet or signalling, infinity, zero, subnormal). */
static float random_float(void)
{
    uint32_t sign = (uint32_t)(rng_next() & 1) << 31;
    if (rng_below(64) == 0) {
        switch (rng_below(5)) {
        case 0:
            return bitsf(sign | 0x7fc00000u | (uint32_t)(rng_next() & 0x3fffffu));
        case 1:
            return bitsf(sign | 0x7f800000u | (1u + (uint32_t)rng_below(0x3fffffu)));
        case 2:
            return bitsf(sign | 0x7f800000u);
        case 3:
            return bitsf(sign);
        default:
            return bitsf(sign | (1u + (uint32_t)rng_below(0x7fffffu)));
        }
    }
    uint32_t exp = (uint32_t)(127 - 10 + (int)rng_below(21));
    return bitsf(sign | (exp << 23) | (uint32_t)(rng_next() & 0x7fffffu));
}

static void fill_random(weft_dtype_t dt, void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (dt) {
        case WEFT_FLOAT32:
            ((float *)p)[i] = random_float();
            break;
        case WEFT_FLOAT64:
            /* A float32 value spread over the double mantissa, or a double special. */
            ((double *)p)[i] =
                (double)random_float() * (1.0 + (double)(rng_next() >> 11) * 0x1p-53);
            break;
        case WEFT_FLOAT16:
        case WEFT_BFLOAT16: {
            /* Any bit pattern, but only one in eight of those with the all-ones exponent is
             * kept as infinity or NaN; the others lose the exponent's top bit. */
            fmt16_t f = dt == WEFT_FLOAT16 ? HALF : BF16;
            uint16_t v = (uint16_t)rng_next();
            uint16_t exp_all = (uint16_t)(((1 << f.exp_bits) - 1) << f.mant_bits);
            if ((v & exp_all) == exp_all && rng_below(8) != 0)
                v = (uint16_t)(v & ~0x4000u);
            ((uint16_t *)p)[i] = v;
            break;
        }
        default:
            store_raw(dt, p, i, rng_next());
            break;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Reduction tests
 * ------------------------------------------------------------------------------------------- */
typedef struct {
    void *buf[MAX_SRCS];  /* source storage (mutable: a source may be the destination) */
    void *copy[MAX_SRCS]; /* pristine copies of the sources */
    void *out;            /* out-of-place destination, count + GUARD elements */
    void *want;           /* reference result */
    size_t cap;           /* elements each buffer holds */
} bufs_t;

static void bufs_init(bufs_t *b, size_t cap)
{
    b->cap = cap;
    for (int s = 0; s < MAX_SRCS; s++) {
        b->buf[s] = malloc((cap + GUARD) * 8 + 64);
        b->copy[s] = malloc(cap * 8);
    }
    b->out = malloc((cap + GUARD) * 8 + 64);
    b->want = malloc(cap * 8);
    for (int s = 0; s < MAX_SRCS; s++)
        if (b->buf[s] == NULL || b->copy[s] == NULL)
            abort();
    if (b->out == NULL || b->want == NULL)
        abort();
}

static void bufs_fini(bufs_t *b)
{
    for (int s = 0; s < MAX_SRCS; s++) {
        free(b->buf[s]);
        free(b->copy[s]);
    }
    free(b->out);
    free(b->want);
}

/* Check got[0..count) against want and the poisoned guard after it; at most one report for
 * the elements of one case. */
static void check_result(const char *what, weft_dtype_t dt, weft_redop_t op, int nsrcs,
                         size_t count, const unsigned char *got, const void *want)
{
    size_t es = dtype_sizes[dt];
    for (size_t i = 0; i < count; i++) {
        if (!element_equal(dt, op, got, want, i)) {
            uint64_t g = 0, w = 0;
            memcpy(&g, got + i * es, es);
            memcpy(&w, (const unsigned char *)want + i * es, es);
            CHECK(false,
                  "%s %s %s nsrcs=%d count=%zu: element %zu is 0x%" PRIx64 ", want 0x%" PRIx64,
                  what, dtype_names[dt], op_names[op], nsrcs, count, i, g, w);
            return;
        }
    }
    for (size_t i = count * es; i < (count + GUARD) * es; i++) {
        if (got[i] != POISON) {
            CHECK(false, "%s %s %s nsrcs=%d count=%zu: wrote past the end (byte %zu)", what,
                  dtype_names[dt], op_names[op], nsrcs, count, i);
            return;
        }
    }
}

/* Out of place over the whole grid; sources start at a random element offset (misaligned for
 * the vector loops) and must be left unchanged. */
static void test_grid(bufs_t *b)
{
    static const int nsrcs_list[] = {1, 2, 3, 5, 8};
    static const size_t counts[] = {0, 1, 7, 255, 256, 257, 4099};
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
        size_t es = dtype_sizes[dt];
        for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
            for (size_t ni = 0; ni < sizeof nsrcs_list / sizeof nsrcs_list[0]; ni++) {
                int nsrcs = nsrcs_list[ni];
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    size_t count = counts[ci];
                    const void *srcs[MAX_SRCS];
                    const void *copies[MAX_SRCS];
                    for (int s = 0; s < nsrcs; s++) {
                        unsigned char *p = (unsigned char *)b->buf[s] + rng_below(4) * es;
                        fill_random((weft_dtype_t)dt, p, count);
                        memcpy(b->copy[s], p, count * es);
                        srcs[s] = p;
                        copies[s] = b->copy[s];
                    }
                    unsigned char *out = (unsigned char *)b->out + rng_below(4) * es;
                    memset(out, POISON, (count + GUARD) * es);
                    int div = nsrcs;
                    for (size_t i = 0; i < count; i++)
                        ref_element((weft_dtype_t)dt, (weft_redop_t)op, copies, nsrcs, i, div,
                                    b->want);
                    weft_reduce_host(out, srcs, nsrcs, count, (weft_dtype_t)dt, (weft_redop_t)op,
                                     div);
                    check_result("out-of-place", (weft_dtype_t)dt, (weft_redop_t)op, nsrcs, count,
                                 out, b->want);
                    for (int s = 0; s < nsrcs; s++)
                        CHECK(memcmp(srcs[s], copies[s], count * es) == 0,
                              "%s %s nsrcs=%d count=%zu: source %d modified", dtype_names[dt],
                              op_names[op], nsrcs, count, s);
                }
            }
        }
    }
}

/* In place: dst is one of the sources (first, middle, last), and sources repeated in the list.
 * Counts span several accumulator blocks for every element size. */
static void test_in_place(bufs_t *b)
{
    static const int nsrcs_list[] = {1, 2, 3, 5, 8};
    static const size_t counts[] = {257, 4099, 20000};
    enum { ALIAS_FIRST, ALIAS_MIDDLE, ALIAS_LAST, REPEAT_FIRST, REPEAT_ALL, NUM_ARRANGEMENTS };
    static const char *const names[NUM_ARRANGEMENTS] = {
        "dst=srcs[0]", "dst=srcs[mid]", "dst=srcs[last]", "srcs[1]=srcs[0]=dst", "all srcs=dst"};
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
        size_t es = dtype_sizes[dt];
        for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
            for (size_t ni = 0; ni < sizeof nsrcs_list / sizeof nsrcs_list[0]; ni++) {
                int nsrcs = nsrcs_list[ni];
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    size_t count = counts[ci];
                    for (int arr = 0; arr < NUM_ARRANGEMENTS; arr++) {
                        int target = arr == ALIAS_MIDDLE ? nsrcs / 2
                                     : arr == ALIAS_LAST ? nsrcs - 1
                                                         : 0;
                        void *srcs[MAX_SRCS];
                        const void *copies[MAX_SRCS];
                        for (int s = 0; s < nsrcs; s++) {
                            srcs[s] = b->buf[s];
                            fill_random((weft_dtype_t)dt, srcs[s], count + GUARD);
                            copies[s] = b->copy[s];
                        }
                        if (arr == REPEAT_FIRST && nsrcs > 1)
                            srcs[1] = srcs[0];
                        if (arr == REPEAT_ALL)
                            for (int s = 1; s < nsrcs; s++)
                                srcs[s] = srcs[0];
                        for (int s = 0; s < nsrcs; s++)
                            memcpy(b->copy[s], srcs[s], count * es);
                        unsigned char *dst = srcs[target];
                        memset(dst + count * es, POISON, GUARD * es);
                        int div = 1 + (int)rng_below((uint32_t)nsrcs + 2);
                        for (size_t i = 0; i < count; i++)
                            ref_element((weft_dtype_t)dt, (weft_redop_t)op, copies, nsrcs, i, div,
                                        b->want);
                        weft_reduce_host(dst, (const void *const *)srcs, nsrcs, count,
                                         (weft_dtype_t)dt, (weft_redop_t)op, div);
                        check_result(names[arr], (weft_dtype_t)dt, (weft_redop_t)op, nsrcs, count,
                                     dst, b->want);
                        for (int s = 0; s < nsrcs; s++)
                            CHECK(srcs[s] == dst || memcmp(srcs[s], copies[s], count * es) == 0,
                                  "%s %s %s nsrcs=%d: source %d modified", names[arr],
                                  dtype_names[dt], op_names[op], nsrcs, s);
                    }
                }
            }
        }
    }
}

typedef struct {
    weft_dtype_t dt;
    weft_redop_t op;
    int div;
    int nsrcs;
    int64_t in[3];
    int64_t want; /* the expected result, as the element type's value */
} int_case_t;

/* Wrap-around and truncation toward zero on values chosen by hand. */
static void test_int_cases(void)
{
    static const int_case_t cases[] = {
        {WEFT_INT32, WEFT_SUM, 1, 2, {INT32_MAX, 1}, INT32_MIN},
        {WEFT_UINT32, WEFT_SUM, 1, 2, {UINT32_MAX, 2}, 1},
        {WEFT_INT8, WEFT_SUM, 1, 2, {127, 1}, -128},
        {WEFT_UINT8, WEFT_SUM, 1, 2, {200, 100}, 44},
        {WEFT_INT64, WEFT_SUM, 1, 2, {INT64_MAX, INT64_MAX}, -2},
        {WEFT_UINT64, WEFT_SUM, 1, 3, {-1, -1, 3}, 1},
        {WEFT_INT8, WEFT_PROD, 1, 2, {16, 16}, 0},
        {WEFT_INT8, WEFT_PROD, 1, 2, {-128, -1}, -128},
        {WEFT_UINT8, WEFT_PROD, 1, 3, {255, 255, 255}, 255},
        {WEFT_INT32, WEFT_PROD, 1, 2, {65536, 65536}, 0},
        {WEFT_INT32, WEFT_PROD, 1, 2, {INT32_MIN, -1}, INT32_MIN},
        {WEFT_INT64, WEFT_PROD, 1, 2, {1ll << 32, 1ll << 32}, 0},
        {WEFT_UINT64, WEFT_PROD, 1, 2, {INT64_MIN, 3}, INT64_MIN},
        {WEFT_INT8, WEFT_MAX, 1, 3, {-128, -1, -5}, -1},
        {WEFT_UINT8, WEFT_MAX, 1, 2, {1, 255}, 255},
        {WEFT_INT64, WEFT_MIN, 1, 2, {5, INT64_MIN}, INT64_MIN},
        {WEFT_UINT64, WEFT_MIN, 1, 2, {-1, 7}, 7},
        {WEFT_INT32, WEFT_AVG, 2, 2, {-7, 0}, -3},
        {WEFT_INT32, WEFT_AVG, 2, 1, {-1}, 0},
        {WEFT_INT32, WEFT_AVG, 3, 3, {-5, -2, 0}, -2},
        {WEFT_INT8, WEFT_AVG, 2, 2, {-128, -1}, 63}, /* the sum wraps to 127 first */
        {WEFT_INT8, WEFT_AVG, 2, 2, {-3, -2}, -2},
        {WEFT_INT8, WEFT_AVG, 4, 1, {-127}, -31},
        {WEFT_INT64, WEFT_AVG, 3, 2, {-7, 0}, -2},
        {WEFT_INT64, WEFT_AVG, 2, 2, {INT64_MIN, 0}, INT64_MIN / 2},
        {WEFT_INT64, WEFT_AVG, 4, 1, {-9}, -2},
        {WEFT_UINT32, WEFT_AVG, 2, 2, {UINT32_MAX, 1}, 0}, /* the sum wraps to 0 */
        {WEFT_UINT32, WEFT_AVG, 3, 1, {UINT32_MAX}, 1431655765},
        {WEFT_UINT32, WEFT_AVG, INT32_MAX, 1, {0xfffffffe}, 2},
        {WEFT_UINT32, WEFT_AVG, INT32_MAX, 1, {0xfffffffd}, 1},
        {WEFT_INT32, WEFT_AVG, INT32_MAX, 1, {INT32_MIN}, -1},
        {WEFT_INT32, WEFT_AVG, INT32_MAX, 1, {INT32_MIN + 1}, -1},
        {WEFT_INT32, WEFT_AVG, INT32_MAX, 1, {INT32_MIN + 2}, 0},
        {WEFT_INT32, WEFT_AVG, 5, 2, {INT32_MIN, INT32_MIN + 5}, 1}, /* the sum wraps to 5 */
        {WEFT_UINT64, WEFT_AVG, 3, 1, {-1}, 6148914691236517205ll},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int_case_t *k = &cases[c];
        uint64_t in[3][4];
        const void *srcs[3];
        for (int s = 0; s < k->nsrcs; s++) {
            for (int i = 0; i < 4; i++)
                store_raw(k->dt, in[s], (size_t)i, (uint64_t)k->in[s]);
            srcs[s] = in[s];
        }
        uint64_t out[4 + 1];
        memset(out, POISON, sizeof out);
        weft_reduce_host(out, srcs, k->nsrcs, 4, k->dt, k->op, k->div);
        uint64_t want = (uint64_t)k->want;
        int bits = (int)dtype_sizes[k->dt] * 8;
        uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
        for (size_t i = 0; i < 4; i++) {
            uint64_t got = load_raw(k->dt, out, i);
            CHECK(got == (want & mask),
                  "case %zu: %s %s /%d: element %zu is 0x%" PRIx64 ", want 0x%" PRIx64, c,
                  dtype_names[k->dt], op_names[k->op], k->div, i, got, want & mask);
        }
        CHECK(load_raw(k->dt, out, 4) == (0xa5a5a5a5a5a5a5a5ull & mask),
              "case %zu: wrote past the end", c);
    }
}

/* AVG of 32-bit integers with random divisors up to INT32_MAX (the double path's edge). */
static void test_int_avg_divisors(bufs_t *b)
{
    const size_t count = 4099;
    static const weft_dtype_t dts[] = {WEFT_INT8,   WEFT_UINT8, WEFT_INT32,
                                       WEFT_UINT32, WEFT_INT64, WEFT_UINT64};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        for (int trial = 0; trial < 8; trial++) {
            int div = trial == 0 ? INT32_MAX : 1 + (int)(rng_next() >> (33 + trial * 4));
            const void *srcs[2] = {b->buf[0], b->buf[1]};
            fill_random(dts[d], b->buf[0], count);
            fill_random(dts[d], b->buf[1], count);
            for (size_t i = 0; i < count; i++)
                ref_element(dts[d], WEFT_AVG, srcs, 2, i, div, b->want);
            memset(b->out, POISON, (count + GUARD) * 8);
            weft_reduce_host(b->out, srcs, 2, count, dts[d], WEFT_AVG, div);
            check_result("avg divisor", dts[d], WEFT_AVG, 2, count, b->out, b->want);
        }
    }
}

/* MAX and MIN select deterministically: srcs[0] unless a later source is strictly beyond or
 * is a number where srcs[0] is NaN; a NaN comes out only where every source is one. */
static void test_float_select(void)
{
    const float qnan = bitsf(0x7fc00001u), qnan2 = bitsf(0xffc00002u);
    const float cases[][3] = {
        /* a, b, max (and min, but for the last case) */
        {qnan, 1.0f, 1.0f},   {1.0f, qnan, 1.0f},  {qnan, qnan2, qnan},
        {-0.0f, 0.0f, -0.0f}, {0.0f, -0.0f, 0.0f}, {-INFINITY, 2.0f, 2.0f},
    };
    const size_t last = sizeof cases / sizeof cases[0] - 1;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const float a[1] = {cases[c][0]}, bb[1] = {cases[c][1]};
        const void *srcs[2] = {a, bb};
        float out[1];
        weft_reduce_host(out, srcs, 2, 1, WEFT_FLOAT32, WEFT_MAX, 1);
        CHECK(fbits(out[0]) == fbits(cases[c][2]),
              "float32 max case %zu: 0x%08" PRIx32 ", want 0x%08" PRIx32, c, fbits(out[0]),
              fbits(cases[c][2]));
        weft_reduce_host(out, srcs, 2, 1, WEFT_FLOAT32, WEFT_MIN, 1);
        float want_min = c == last ? -INFINITY : cases[c][2];
        CHECK(fbits(out[0]) == fbits(want_min),
              "float32 min case %zu: 0x%08" PRIx32 ", want 0x%08" PRIx32, c, fbits(out[0]),
              fbits(want_min));
    }
    /* float16: a signalling NaN gives way to a number; of two NaNs srcs[0]'s comes out quiet,
     * payload kept. */
    const uint16_t h[3][1] = {{0x7c01u}, {0x3c00u}, {0xfc02u}};
    const void *srcs[2] = {h[0], h[1]};
    uint16_t out[1];
    weft_reduce_host(out, srcs, 2, 1, WEFT_FLOAT16, WEFT_MAX, 1);
    CHECK(out[0] == 0x3c00u, "float16 max(sNaN, 1) = 0x%04x, want 0x3c00", out[0]);
    srcs[1] = h[2];
    weft_reduce_host(out, srcs, 2, 1, WEFT_FLOAT16, WEFT_MIN, 1);
    CHECK(out[0] == 0x7e01u, "float16 min(sNaN, -sNaN) = 0x%04x, want 0x7e01", out[0]);
    /* 16-bit sums round once: 2048 + 1 + 1 in float16 is 2050 (per step it would be 2048). */
    const uint16_t s[3][1] = {{0x6800u}, {0x3c00u}, {0x3c00u}};
    const void *ssrcs[3] = {s[0], s[1], s[2]};
    weft_reduce_host(out, ssrcs, 3, 1, WEFT_FLOAT16, WEFT_SUM, 1);
    CHECK(out[0] == 0x6801u, "float16 2048+1+1 = 0x%04x, want 0x6801 (2050)", out[0]);
}

/* ---------------------------------------------------------------------------------------------
 * Throughput (printed, not asserted)
 * ------------------------------------------------------------------------------------------- */

/* Best of reps runs, in GB/s of memory traffic: every source read once, dst written once. */
static double bench(void *dst, const void *const *srcs, int nsrcs, size_t count, weft_dtype_t dt,
                    weft_redop_t op, int reps)
{
    uint64_t best = UINT64_MAX;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = weft_now_ns();
        weft_reduce_host(dst, srcs, nsrcs, count, dt, op, nsrcs);
        uint64_t t = weft_now_ns() - t0;
        best = t < best ? t : best;
    }
    return (double)(count * dtype_sizes[dt] * (size_t)(nsrcs + 1)) / (double)best;
}

static void test_throughput(void)
{
    const size_t bytes = 64u << 20;
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (a == NULL || b == NULL || c == NULL)
        abort();
    for (size_t i = 0; i < bytes / 4; i++) {
        ((float *)a)[i] = (float)(i & 1023);
        ((float *)b)[i] = 0.5f;
    }
    memset(c, 0, bytes);

    uint64_t best = UINT64_MAX;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = weft_now_ns();
        memcpy(c, a, bytes);
        uint64_t t = weft_now_ns() - t0;
        best = t < best ? t : best;
    }
    printf("throughput: memcpy 64 MiB            %6.2f GB/s (read + write)\n",
           (double)(2 * bytes) / (double)best);

    const void *srcs[2] = {a, b};
    printf("throughput: float32 sum 2 x 64 MiB   %6.2f GB/s out of place (2 reads + 1 write)\n",
           bench(c, srcs, 2, bytes / 4, WEFT_FLOAT32, WEFT_SUM, 5));
    const void *in_place[2] = {c, b};
    printf("throughput: float32 sum 2 x 64 MiB   %6.2f GB/s in place\n",
           bench(c, in_place, 2, bytes / 4, WEFT_FLOAT32, WEFT_SUM, 5));
    printf("throughput: float64 sum 2 x 64 MiB   %6.2f GB/s out of place\n",
           bench(c, srcs, 2, bytes / 8, WEFT_FLOAT64, WEFT_SUM, 3));
    printf("throughput: int32 sum 2 x 64 MiB     %6.2f GB/s out of place\n",
           bench(c, srcs, 2, bytes / 4, WEFT_INT32, WEFT_SUM, 3));
    printf("throughput: int32 avg 2 x 64 MiB     %6.2f GB/s out of place\n",
           bench(c, srcs, 2, bytes / 4, WEFT_INT32, WEFT_AVG, 3));
    printf("throughput: bfloat16 sum 2 x 64 MiB  %6.2f GB/s out of place\n",
           bench(c, srcs, 2, bytes / 2, WEFT_BFLOAT16, WEFT_SUM, 3));
    printf("throughput: float16 sum 2 x 64 MiB   %6.2f GB/s out of place\n",
           bench(c, srcs, 2, bytes / 2, WEFT_FLOAT16, WEFT_SUM, 3));
    const void *eight[8] = {a, b, a, b, a, b, a, b};
    printf("throughput: float32 sum 8 x 16 MiB   %6.2f GB/s out of place (same buffers)\n",
           bench(c, eight, 8, bytes / 16, WEFT_FLOAT32, WEFT_SUM, 3));
    free(a);
    free(b);
    free(c);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : weft_now_ns();
    printf("test_reduce_host: seed %" PRIu64 " (rerun with: test_reduce_host %" PRIu64 ")\n", seed,
           seed);
    rng_state = seed;

    test_conversions();
    bufs_t b;
    bufs_init(&b, 20000 + 8);
    test_int_cases();
    test_float_select();
    test_grid(&b);
    test_in_place(&b);
    test_int_avg_divisors(&b);
    bufs_fini(&b);
    test_throughput();

    if (failures > CHECK_MAX_REPORTS)
        printf("... %d more failures not printed\n", failures - CHECK_MAX_REPORTS);
    printf("test_reduce_host: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
