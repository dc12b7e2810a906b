/*
 * harness.c - shared helpers of the multi-process tests: communicators, seed, buffers with guard
 * zones, verifiable data and exact expected values, failure reports (contracts in harness.h).
 *
 * Design. Every random choice is mp_hash(seed + case, ...), so any rank can regenerate any
 * peer's input. Reduction inputs per dtype and operation:
 *   SUM, AVG  integers in [-B, B] (unsigned: [0, B]) with B = limit / nranks, where limit bounds
 *             |partial sums| so that they are exact in the dtype: 120 (int8), 240 (uint8),
 *             2040 (float16), 248 (bfloat16), 2^24 (float32), 2^53 (float64), 2^30..2^63 for
 *             the wider integers;
 *   PROD      +-1 (unsigned: 1) except on two ranks per element (chosen per element), whose
 *             factors are bounded so that their product is exact;
 *   MAX, MIN  full-range integers, and random finite non-zero floating-point bit patterns
 *             (subnormals included; zeros excluded because max(-0, +0) is not specified).
 * Those are the MP_RED_SMALL inputs. Under MP_RED_SPREAD, float16 and bfloat16 SUM and AVG take
 * significands of the dtype's full width spread over exponents (harness.h has the bounds): every
 * partial sum of any subset of ranks is exact in float32 but not in 16 bits, which the small
 * integers (all partial sums exact in 16 bits) cannot tell from a reduction in 16 bits.
 * Expected AVG: integer types truncate the exact sum toward zero; float16, bfloat16 and float32
 * divide the float32 sum by nranks in float32 and round once to the dtype (nearest even);
 * float64 divides in double. The float16/bfloat16 conversions are written here (not taken from
 * the library) so that the expected values are independent of the code under test.
 *
 * Checks regenerate expected elements in chunks on the stack and compare bytes, so a 1M-element
 * case needs no second full-size buffer.
 *
 * Thread safety: an mp_ctx_t belongs to one thread; the functions without a context are pure.
 */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/parse_bytes.h"

#define POISON_BYTE 0xA5
#define GUARD_BYTE 0x5A
#define GUARD_BACK_BYTES ((size_t)64)
/* Front guard of interior and unregistered buffers: non-zero and a multiple of every element
 * size (8 * 17), so that the pointer stays element-aligned. */
#define GUARD_FRONT_BYTES ((size_t)136)
#define CHECK_CHUNK_ELEMS 2048
#define MAX_FAIL_LINES 40
#define MAX_DETAILS 3

typedef enum { CAT_SIGNED, CAT_UNSIGNED, CAT_FLOAT } category_t;

typedef struct dtype_info {
    const char *name;
    size_t bytes;
    category_t cat;
    uint64_t sum_limit;   /* bound on the sum of |inputs| for SUM and AVG */
    uint64_t prod_factor; /* bound on |factor| of each of the two special PROD ranks */
} dtype_info_t;

static const dtype_info_t dtype_table[WEFT_NUM_DTYPES] = {
    [WEFT_INT8] = {"int8", 1, CAT_SIGNED, 120, 11},
    [WEFT_UINT8] = {"uint8", 1, CAT_UNSIGNED, 240, 15},
    [WEFT_INT32] = {"int32", 4, CAT_SIGNED, (uint64_t)1 << 30, (uint64_t)1 << 15},
    [WEFT_UINT32] = {"uint32", 4, CAT_UNSIGNED, (uint64_t)1 << 31, 65535},
    [WEFT_INT64] = {"int64", 8, CAT_SIGNED, (uint64_t)1 << 62, (uint64_t)1 << 31},
    [WEFT_UINT64] = {"uint64", 8, CAT_UNSIGNED, (uint64_t)1 << 63, 0xffffffffu},
    [WEFT_FLOAT16] = {"float16", 2, CAT_FLOAT, 2040, 45},
    [WEFT_BFLOAT16] = {"bfloat16", 2, CAT_FLOAT, 248, 16},
    [WEFT_FLOAT32] = {"float32", 4, CAT_FLOAT, (uint64_t)1 << 24, 4096},
    [WEFT_FLOAT64] = {"float64", 8, CAT_FLOAT, (uint64_t)1 << 53, (uint64_t)1 << 26},
};

/* A value in the arithmetic of its category (only the field of the category is meaningful). */
typedef struct num {
    int64_t i;
    uint64_t u;
    double f;
} num_t;

/* ---------------------------------------------------------------------------------------------
 * Names, sizes, time, hashing
 * ------------------------------------------------------------------------------------------- */
const char *mp_dtype_name(weft_dtype_t dt)
{
    return (unsigned)dt < WEFT_NUM_DTYPES ? dtype_table[dt].name : "dtype?";
}

const char *mp_op_name(weft_redop_t op)
{
    static const char *const names[WEFT_NUM_REDOPS] = {"sum", "prod", "max", "min", "avg"};
    return (unsigned)op < WEFT_NUM_REDOPS ? names[op] : "op?";
}

const char *mp_reg_name(weft_registration_t reg)
{
    static const char *const names[MP_NUM_REG_MODES] = {"roa", "jit", "staged"};
    return (unsigned)reg < MP_NUM_REG_MODES ? names[reg] : "reg?";
}

const char *mp_buf_kind_name(mp_buf_kind_t kind)
{
    static const char *const names[MP_NUM_BUF_KINDS] = {"registered", "interior", "unregistered"};
    return (unsigned)kind < MP_NUM_BUF_KINDS ? names[kind] : "kind?";
}

size_t mp_dtype_bytes(weft_dtype_t dt)
{
    return (unsigned)dt < WEFT_NUM_DTYPES ? dtype_table[dt].bytes : 0;
}

double mp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mp_sleep_ms(double ms)
{
    double end = mp_now_s() + ms * 1e-3;
    for (;;) {
        double left = end - mp_now_s();
        if (left <= 0)
            return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

uint64_t mp_hash(uint64_t seed, uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = mix64(seed + 0x9e3779b97f4a7c15ULL);
    x = mix64(x ^ a);
    x = mix64(x + b * 0x9e3779b97f4a7c15ULL);
    return mix64(x ^ c);
}

/* ---------------------------------------------------------------------------------------------
 * 16-bit floating point, written independently of the library
 * ------------------------------------------------------------------------------------------- */
static uint32_t float_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return x;
}

static float bits_float(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* float32 -> float16, round to nearest even. */
uint16_t mp_f32_to_f16(float f)
{
    uint32_t x = float_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: a multiple of 2^-24, rounded (rintf: nearest even) */
        float m = rintf(bits_float(a) * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)m); /* m == 1024 is the smallest normal */
    }
    uint32_t h = (a - 0x38000000u) >> 13; /* rebias the exponent by 127 - 15 */
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

float mp_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = ldexpf((float)m, -24);
        return sign ? -v : v;
    }
    if (e == 31)
        return bits_float(sign | 0x7f800000u | (m << 13));
    return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

/* float32 -> bfloat16, round to nearest even (inputs are never NaN here). */
uint16_t mp_f32_to_bf16(float f)
{
    uint32_t x = float_bits(f);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

float mp_bf16_to_f32(uint16_t b)
{
    return bits_float((uint32_t)b << 16);
}

/* ---------------------------------------------------------------------------------------------
 * Elements: encode, decode, format
 * ------------------------------------------------------------------------------------------- */
static void encode(weft_dtype_t dt, const num_t *v, void *out)
{
    switch (dt) {
    case WEFT_INT8: {
        int8_t x = (int8_t)v->i;
        memcpy(out, &x, 1);
        break;
    }
    case WEFT_UINT8: {
        uint8_t x = (uint8_t)v->u;
        memcpy(out, &x, 1);
        break;
    }
    case WEFT_INT32: {
        int32_t x = (int32_t)v->i;
        memcpy(out, &x, 4);
        break;
    }
    case WEFT_UINT32: {
        uint32_t x = (uint32_t)v->u;
        memcpy(out, &x, 4);
        break;
    }
    case WEFT_INT64:
        memcpy(out, &v->i, 8);
        break;
    case WEFT_UINT64:
        memcpy(out, &v->u, 8);
        break;
    case WEFT_FLOAT16: {
        uint16_t x = mp_f32_to_f16((float)v->f);
        memcpy(out, &x, 2);
        break;
    }
    case WEFT_BFLOAT16: {
        uint16_t x = mp_f32_to_bf16((float)v->f);
        memcpy(out, &x, 2);
        break;
    }
    case WEFT_FLOAT32: {
        float x = (float)v->f;
        memcpy(out, &x, 4);
        break;
    }
    case WEFT_FLOAT64:
        memcpy(out, &v->f, 8);
        break;
    }
}

/* Print one element as its value and its bits. */
static void format_elem(weft_dtype_t dt, const void *p, char *out, size_t cap)
{
    uint64_t bits = 0;
    size_t es = mp_dtype_bytes(dt);
    memcpy(&bits, p, es); /* little-endian host */
    switch (dt) {
    case WEFT_INT8:
        snprintf(out, cap, "%d (0x%02" PRIx64 ")", (int)(int8_t)bits, bits);
        break;
    case WEFT_UINT8:
    case WEFT_UINT32:
    case WEFT_UINT64:
        snprintf(out, cap, "%" PRIu64 " (0x%" PRIx64 ")", bits, bits);
        break;
    case WEFT_INT32:
        snprintf(out, cap, "%d (0x%08" PRIx64 ")", (int)(int32_t)(uint32_t)bits, bits);
        break;
    case WEFT_INT64:
        snprintf(out, cap, "%" PRId64 " (0x%" PRIx64 ")", (int64_t)bits, bits);
        break;
    case WEFT_FLOAT16:
        snprintf(out, cap, "%.9g (0x%04" PRIx64 ")", (double)mp_f16_to_f32((uint16_t)bits), bits);
        break;
    case WEFT_BFLOAT16:
        snprintf(out, cap, "%.9g (0x%04" PRIx64 ")", (double)mp_bf16_to_f32((uint16_t)bits), bits);
        break;
    case WEFT_FLOAT32:
        snprintf(out, cap, "%.9g (0x%08" PRIx64 ")", (double)bits_float((uint32_t)bits), bits);
        break;
    case WEFT_FLOAT64: {
        double d;
        memcpy(&d, &bits, 8);
        snprintf(out, cap, "%.17g (0x%016" PRIx64 ")", d, bits);
        break;
    }
    default:
        snprintf(out, cap, "0x%" PRIx64, bits);
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Reports
 * ------------------------------------------------------------------------------------------- */
static void vreport(mp_ctx_t *ctx, const char *fmt, va_list ap) MP_PRINTF(2, 0);

static void vreport(mp_ctx_t *ctx, const char *fmt, va_list ap)
{
    if (ctx->fail_lines >= MAX_FAIL_LINES) {
        if (ctx->fail_lines++ == MAX_FAIL_LINES)
            printf("FAIL %s rank=%d: further failures of this rank are counted, not printed\n",
                   ctx->test, ctx->rank);
        return;
    }
    ctx->fail_lines++;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    printf("FAIL %s rank=%d n=%d seed=%" PRIu64 " reg=%s case=%" PRIu64 " (%s): %s\n", ctx->test,
           ctx->rank, ctx->nranks, ctx->seed, ctx->comm ? mp_reg_name(ctx->reg) : "-", ctx->case_id,
           ctx->where, msg);
}

void mp_fail(mp_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    ctx->checks++;
    ctx->failures++;
    va_start(ap, fmt);
    vreport(ctx, fmt, ap);
    va_end(ap);
}

int mp_check(mp_ctx_t *ctx, int cond, const char *fmt, ...)
{
    ctx->checks++;
    if (cond)
        return 1;
    ctx->failures++;
    va_list ap;
    va_start(ap, fmt);
    vreport(ctx, fmt, ap);
    va_end(ap);
    return 0;
}

void mp_fatal(mp_ctx_t *ctx, const char *fmt, ...)
{
    va_list ap;
    ctx->failures++;
    ctx->fail_lines = 0; /* the reason for stopping is always printed */
    va_start(ap, fmt);
    vreport(ctx, fmt, ap);
    va_end(ap);
    printf("FAIL %s rank=%d n=%d seed=%" PRIu64 ": stopping (reproduce with WEFT_TEST_SEED=%" PRIu64
           ")\n",
           ctx->test, ctx->rank, ctx->nranks, ctx->seed, ctx->seed);
    fflush(stdout);
    if (ctx->comm) {
        weft_comm_abort(ctx->comm);
        weft_comm_destroy(ctx->comm);
        ctx->comm = NULL;
    }
    exit(1);
}

int mp_ok(mp_ctx_t *ctx, weft_status_t st, const char *call)
{
    if (st == WEFT_SUCCESS) {
        ctx->checks++;
        return 1;
    }
    if (st == WEFT_ERR_INVALID_ARGUMENT || st == WEFT_ERR_UNSUPPORTED) {
        mp_fail(ctx, "%s returned %s (%d): %s", call, weft_status_string(st), (int)st,
                weft_last_error());
        return 0;
    }
    mp_fatal(ctx, "%s returned %s (%d): %s", call, weft_status_string(st), (int)st,
             weft_last_error());
}

int mp_lost_peer(weft_status_t st)
{
    return st == WEFT_ERR_PEER_LOST || st == WEFT_ERR_TIMEOUT;
}

int mp_expect_status(mp_ctx_t *ctx, weft_status_t st, weft_status_t want, const char *name,
                     const char *what)
{
    const char *le = weft_last_error();
    if (!mp_check(ctx, st == want, "%s: returned %s (%d), expected %s (last error: \"%s\")", what,
                  weft_status_string(st), (int)st, weft_status_string(want), le ? le : "(null)"))
        return 0;
    if (want == WEFT_SUCCESS)
        return 1;
    if (!mp_check(ctx, le != NULL && le[0] != '\0', "%s: weft_last_error() is empty", what))
        return 0;
    if (name)
        return mp_check(ctx, strstr(le, name) != NULL,
                        "%s: weft_last_error() \"%s\" does not name %s", what, le, name);
    return 1;
}

void mp_note(const mp_ctx_t *ctx, const char *fmt, ...)
{
    if (ctx->rank != 0)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("%s: %s\n", ctx->test, msg);
}

void mp_case(mp_ctx_t *ctx, const char *fmt, ...)
{
    ctx->case_id++;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->where, sizeof ctx->where, fmt, ap);
    va_end(ap);
    if (ctx->red_data == MP_RED_SPREAD) {
        size_t len = strlen(ctx->where);
        snprintf(ctx->where + len, sizeof ctx->where - len, " spread");
    }
}

/* ---------------------------------------------------------------------------------------------
 * Set-up and communicators
 * ------------------------------------------------------------------------------------------- */
static uint64_t env_u64(const char *name, int *found)
{
    /* Test-only variables; the library's variables go through its configuration table. */
    const char *s = getenv(name);
    *found = s != NULL && s[0] != '\0';
    return *found ? strtoull(s, NULL, 0) : 0;
}

void mp_init_without_comm(mp_ctx_t *ctx, const char *test)
{
    memset(ctx, 0, sizeof *ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    ctx->test = test;
    ctx->start_s = mp_now_s();
    snprintf(ctx->where, sizeof ctx->where, "set-up");
    ctx->rank = mp_env_int(ctx, "WEFT_RANK", -1);
    ctx->nranks = mp_env_int(ctx, "WEFT_NRANKS", -1);
    if (ctx->nranks < 2 || ctx->rank < 0 || ctx->rank >= ctx->nranks)
        mp_fatal(ctx, "needs WEFT_RANK and WEFT_NRANKS (>= 2): run under weftrun -n 2 or more");
}

void mp_init(mp_ctx_t *ctx, const char *test)
{
    memset(ctx, 0, sizeof *ctx);
    setvbuf(stdout, NULL, _IOLBF, 0);
    ctx->test = test;
    ctx->start_s = mp_now_s();
    ctx->rank = -1;
    snprintf(ctx->where, sizeof ctx->where, "set-up");
    int found;
    ctx->quick = env_u64("WEFT_TEST_QUICK", &found) != 0;
    uint64_t seed_env = env_u64("WEFT_TEST_SEED", &found);

    weft_comm_t comm;
    weft_status_t st = weft_comm_init(&comm, NULL);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_comm_init(NULL config) returned %s: %s", weft_status_string(st),
                 weft_last_error());
    ctx->comm = comm;
    ctx->reg = WEFT_REGISTRATION_ROA;
    ctx->rank = weft_comm_rank(comm);
    ctx->nranks = weft_comm_size(comm);
    if (ctx->rank < 0 || ctx->nranks < 1 || ctx->rank >= ctx->nranks)
        mp_fatal(ctx, "weft_comm_rank/size gave rank %d of %d", ctx->rank, ctx->nranks);

    uint64_t seed = 0;
    if (ctx->rank == 0)
        seed = found ? seed_env
                     : mix64(((uint64_t)time(NULL) << 20) ^ ((uint64_t)getpid() << 40) ^
                             (uint64_t)(mp_now_s() * 1e9));
    st = weft_broadcast(comm, &seed, &seed, 1, WEFT_UINT64, 0, NULL);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_broadcast of the seed returned %s: %s", weft_status_string(st),
                 weft_last_error());
    ctx->seed = seed;
    uint64_t lo = 0, hi = 0;
    st = weft_all_reduce(comm, &seed, &lo, 1, WEFT_UINT64, WEFT_MIN, NULL);
    if (st == WEFT_SUCCESS)
        st = weft_all_reduce(comm, &seed, &hi, 1, WEFT_UINT64, WEFT_MAX, NULL);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_all_reduce of the seed returned %s: %s", weft_status_string(st),
                 weft_last_error());
    if (lo != seed || hi != seed)
        mp_fatal(ctx,
                 "ranks disagree on the seed after weft_broadcast (min %" PRIu64 ", max %" PRIu64
                 ", mine %" PRIu64 ")",
                 lo, hi, seed);
    st = weft_comm_destroy(comm);
    ctx->comm = NULL;
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_comm_destroy returned %s: %s", weft_status_string(st),
                 weft_last_error());
    mp_note(ctx, "n=%d seed=%" PRIu64 "%s", ctx->nranks, ctx->seed, ctx->quick ? " quick" : "");
}

void mp_comm_open_cfg(mp_ctx_t *ctx, const weft_config_t *cfg)
{
    weft_comm_t comm;
    snprintf(ctx->where, sizeof ctx->where, "weft_comm_init reg=%s",
             mp_reg_name(cfg->registration));
    weft_status_t st = weft_comm_init(&comm, cfg);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_comm_init returned %s: %s", weft_status_string(st), weft_last_error());
    ctx->comm = comm;
    ctx->reg = cfg->registration;
    if (weft_comm_rank(comm) != ctx->rank || weft_comm_size(comm) != ctx->nranks)
        mp_fatal(ctx, "communicator says rank %d of %d, the first one said %d of %d",
                 weft_comm_rank(comm), weft_comm_size(comm), ctx->rank, ctx->nranks);
    if (weft_comm_backend(comm) != WEFT_BACKEND_HOST)
        mp_fatal(ctx, "communicator backend is %d, expected the host backend",
                 (int)weft_comm_backend(comm));
    if (weft_comm_device(comm) != -1 || weft_comm_device(NULL) != -1)
        mp_fatal(ctx, "weft_comm_device is %d on the host backend and %d for NULL, expected -1",
                 weft_comm_device(comm), weft_comm_device(NULL));
}

/* The defaults, on the host backend. */
static weft_config_t host_config(void)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    return cfg;
}

void mp_comm_open(mp_ctx_t *ctx, weft_registration_t reg)
{
    weft_config_t cfg = host_config();
    cfg.registration = reg;
    mp_comm_open_cfg(ctx, &cfg);
}

void mp_comm_reopen_with_timeout(mp_ctx_t *ctx, double timeout_s)
{
    mp_comm_open(ctx, WEFT_REGISTRATION_ROA);
    mp_case(ctx, "synchronising barrier");
    mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier");
    mp_comm_close(ctx);
    weft_config_t cfg = host_config();
    cfg.timeout_s = timeout_s;
    mp_comm_open_cfg(ctx, &cfg);
}

void mp_comm_close_within(mp_ctx_t *ctx, double limit_s)
{
    double t0 = mp_now_s();
    weft_status_t st = weft_comm_destroy(ctx->comm);
    double dt = mp_now_s() - t0;
    ctx->comm = NULL;
    mp_check(ctx, st == WEFT_SUCCESS, "weft_comm_destroy returned %s: %s", weft_status_string(st),
             weft_last_error());
    mp_check(ctx, dt < limit_s, "weft_comm_destroy took %.2f s", dt);
}

void mp_comm_close(mp_ctx_t *ctx)
{
    if (!ctx->comm)
        return;
    snprintf(ctx->where, sizeof ctx->where, "weft_comm_destroy");
    weft_status_t st = weft_comm_destroy(ctx->comm);
    ctx->comm = NULL;
    mp_check(ctx, st == WEFT_SUCCESS, "weft_comm_destroy returned %s: %s", weft_status_string(st),
             weft_last_error());
}

int mp_finish(mp_ctx_t *ctx)
{
    mp_comm_close(ctx);
    double dt = mp_now_s() - ctx->start_s;
    if (ctx->failures == 0) {
        printf("PASS %s rank=%d n=%d: %" PRIu64 " checks in %.2f s\n", ctx->test, ctx->rank,
               ctx->nranks, ctx->checks, dt);
        return 0;
    }
    printf("FAIL %s rank=%d n=%d seed=%" PRIu64 ": %" PRIu64 " of %" PRIu64
           " checks failed (reproduce with WEFT_TEST_SEED=%" PRIu64 ")\n",
           ctx->test, ctx->rank, ctx->nranks, ctx->seed, ctx->failures, ctx->checks, ctx->seed);
    return 1;
}

/* ---------------------------------------------------------------------------------------------
 * The grid
 * ------------------------------------------------------------------------------------------- */
size_t mp_counts(const mp_ctx_t *ctx, size_t *out)
{
    size_t n = (size_t)ctx->nranks;
    size_t full[] = {0, 1, n - 1, n + 1, 4099};
    size_t quick[] = {0, 1, n + 1, 4099};
    const size_t *src = ctx->quick ? quick : full;
    size_t len = ctx->quick ? sizeof quick / sizeof quick[0] : sizeof full / sizeof full[0];
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup |= out[j] == src[i];
        if (!dup)
            out[k++] = src[i];
    }
    return k;
}

int mp_selected(const mp_ctx_t *ctx, unsigned combo, mp_buf_kind_t kind)
{
    /* The three kinds of a mode take slots 0, 1, 2, and so do the three modes of a kind. */
    unsigned slot = ((unsigned)kind + (unsigned)ctx->reg) % 3;
    if (!ctx->quick)
        return combo % 3 == slot;
    /* Quick: half of the slot's combos, the lower half (combo % 6 == slot) in roa and staged
     * mode, the upper (slot + 3) in jit mode. Each slot is held by one kind in each mode, so both
     * halves of every slot run in some mode: one program run sees every combo, at least once. */
    return combo % 6 == slot + 3 * ((unsigned)ctx->reg % 2);
}

/* The large spread case of mp_run_grid (one: a large reduce-scatter of 8 ranks costs seconds). */
static const mp_large_case_t spread_large = {WEFT_REGISTRATION_ROA, MP_BUF_REGISTERED, 0,
                                             WEFT_FLOAT16, WEFT_AVG};

/* The spread cases of one registration mode (mp_run_grid): the non-zero small counts, then
 * outside quick mode spread_large if it is of this mode. */
static void run_spread(mp_ctx_t *ctx, mp_grid_fn run, const size_t *counts, size_t ncounts)
{
    ctx->red_data = MP_RED_SPREAD;
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
        for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
            if (!mp_red_spread_applies((weft_dtype_t)dt, (weft_redop_t)op))
                continue;
            for (int kind = 0; kind < MP_NUM_BUF_KINDS; kind++)
                for (size_t c = 0; c < ncounts; c++)
                    for (int inplace = 0; counts[c] > 0 && inplace < 2; inplace++)
                        run(ctx, (mp_buf_kind_t)kind, counts[c], (weft_dtype_t)dt, (weft_redop_t)op,
                            inplace);
        }
    const mp_large_case_t *lc = &spread_large;
    if (!ctx->quick && ctx->reg == lc->reg)
        run(ctx, lc->kind, MP_LARGE_COUNT, lc->dt, lc->op, lc->inplace);
    ctx->red_data = MP_RED_SMALL;
}

void mp_run_grid(mp_ctx_t *ctx, int with_ops, mp_grid_fn run, const mp_large_case_t *large,
                 size_t nlarge)
{
    size_t counts[8];
    size_t ncounts = mp_counts(ctx, counts);
    int nops = with_ops ? WEFT_NUM_REDOPS : 1;
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(ctx, (weft_registration_t)reg);
        for (int kind = 0; kind < MP_NUM_BUF_KINDS; kind++)
            for (size_t c = 0; c < ncounts; c++)
                for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
                    for (int op = 0; op < nops; op++) {
                        if (!mp_selected(ctx, (unsigned)(dt * nops + op), (mp_buf_kind_t)kind))
                            continue;
                        for (int inplace = 0; inplace < 2; inplace++)
                            run(ctx, (mp_buf_kind_t)kind, counts[c], (weft_dtype_t)dt,
                                (weft_redop_t)op, inplace);
                    }
        for (size_t i = 0; !ctx->quick && i < nlarge; i++) {
            const mp_large_case_t *lc = &large[i];
            if (lc->reg == (weft_registration_t)reg)
                run(ctx, lc->kind, MP_LARGE_COUNT, lc->dt, lc->op, lc->inplace);
        }
        if (with_ops)
            run_spread(ctx, run, counts, ncounts);
        mp_comm_close(ctx);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------------------------- */
void mp_buf_alloc(mp_ctx_t *ctx, mp_buf_t *b, mp_buf_kind_t kind, size_t bytes)
{
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->bytes = bytes;
    b->front = kind == MP_BUF_REGISTERED ? 0 : GUARD_FRONT_BYTES;
    b->back = GUARD_BACK_BYTES;
    b->alloc_bytes = b->front + bytes + b->back;
    if (kind == MP_BUF_UNREGISTERED) {
        b->alloc = malloc(b->alloc_bytes);
        if (!b->alloc)
            mp_fatal(ctx, "malloc(%zu) failed", b->alloc_bytes);
    } else {
        weft_status_t st = weft_malloc(ctx->comm, &b->alloc, b->alloc_bytes);
        if (st != WEFT_SUCCESS || !b->alloc)
            mp_fatal(ctx, "weft_malloc(%zu) returned %s, pointer %p: %s", b->alloc_bytes,
                     weft_status_string(st), b->alloc, weft_last_error());
    }
    b->ptr = (unsigned char *)b->alloc + b->front;
    memset(b->alloc, GUARD_BYTE, b->front);
    memset(b->ptr, POISON_BYTE, bytes);
    memset(b->ptr + bytes, GUARD_BYTE, b->back);
}

void mp_buf_poison(mp_buf_t *b)
{
    memset(b->ptr, POISON_BYTE, b->bytes);
}

static size_t first_not(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return i;
    return n;
}

void mp_buf_check_guards(mp_ctx_t *ctx, const mp_buf_t *b, const char *name)
{
    const unsigned char *front = b->alloc;
    const unsigned char *back = b->ptr + b->bytes;
    size_t i = first_not(front, b->front, GUARD_BYTE);
    mp_check(ctx, i == b->front, "%s (%s, %zu bytes): guard byte %zu before the buffer is 0x%02x",
             name, mp_buf_kind_name(b->kind), b->bytes, b->front - i, i < b->front ? front[i] : 0);
    i = first_not(back, b->back, GUARD_BYTE);
    mp_check(ctx, i == b->back, "%s (%s, %zu bytes): guard byte %zu after the buffer is 0x%02x",
             name, mp_buf_kind_name(b->kind), b->bytes, i, i < b->back ? back[i] : 0);
}

void mp_buf_free(mp_ctx_t *ctx, mp_buf_t *b, const char *name)
{
    if (!b->alloc)
        return;
    mp_buf_check_guards(ctx, b, name);
    if (b->kind == MP_BUF_UNREGISTERED)
        free(b->alloc);
    else
        mp_ok(ctx, weft_free(ctx->comm, b->alloc), "weft_free");
    memset(b, 0, sizeof *b);
}

void mp_check_poison(mp_ctx_t *ctx, const char *what, const void *p, size_t bytes)
{
    const unsigned char *c = p;
    size_t i = first_not(c, bytes, POISON_BYTE);
    if (i == bytes) {
        ctx->checks++;
        return;
    }
    size_t bad = 0;
    for (size_t j = i; j < bytes; j++)
        bad += c[j] != POISON_BYTE;
    mp_fail(ctx,
            "%s: %zu of %zu bytes that must stay untouched were written (first at byte %zu: "
            "0x%02x)",
            what, bad, bytes, i, c[i]);
}

/* ---------------------------------------------------------------------------------------------
 * Comparison
 * ------------------------------------------------------------------------------------------- */
typedef struct compare_state {
    size_t bad;
    int details;
    char text[600];
} compare_state_t;

/* Compare count elements of got (whose first element is element `pos` of the checked range)
 * against expected; record mismatches. */
static void compare_chunk(compare_state_t *cs, weft_dtype_t dt, const unsigned char *got,
                          const unsigned char *expected, size_t pos, size_t count)
{
    size_t es = mp_dtype_bytes(dt);
    if (memcmp(got, expected, es * count) == 0)
        return;
    for (size_t k = 0; k < count; k++) {
        if (memcmp(got + k * es, expected + k * es, es) == 0)
            continue;
        cs->bad++;
        if (cs->details++ >= MAX_DETAILS)
            continue;
        char e[64], g[64];
        format_elem(dt, expected + k * es, e, sizeof e);
        format_elem(dt, got + k * es, g, sizeof g);
        size_t len = strlen(cs->text);
        snprintf(cs->text + len, sizeof cs->text - len, "%s[%zu] expected %s got %s",
                 len ? "; " : "", pos + k, e, g);
    }
}

static void compare_report(mp_ctx_t *ctx, const compare_state_t *cs, const char *what,
                           weft_dtype_t dt, size_t count)
{
    mp_check(ctx, cs->bad == 0, "%s (%s): %zu of %zu elements wrong: %s%s", what, mp_dtype_name(dt),
             cs->bad, count, cs->text, cs->bad > MAX_DETAILS ? "; ..." : "");
}

/* ---------------------------------------------------------------------------------------------
 * Data: reductions
 * ------------------------------------------------------------------------------------------- */
static uint64_t red_salt(const mp_ctx_t *ctx, weft_dtype_t dt, weft_redop_t op)
{
    return ctx->seed + ctx->case_id * 0x632be59bd9b4e019ULL + ((uint64_t)dt << 8) + (uint64_t)op;
}

/* A random finite non-zero value of a floating-point dtype, as a double (exact). */
static double random_float(weft_dtype_t dt, uint64_t h)
{
    int neg = (int)(h >> 63);
    double v;
    switch (dt) {
    case WEFT_FLOAT16: {
        uint16_t e = (uint16_t)(h % 31), m = (uint16_t)((h >> 8) & 0x3ffu);
        if (e == 0 && m == 0)
            m = 1;
        v = (double)mp_f16_to_f32((uint16_t)((e << 10) | m));
        break;
    }
    case WEFT_BFLOAT16: {
        uint16_t e = (uint16_t)(h % 255), m = (uint16_t)((h >> 8) & 0x7fu);
        if (e == 0 && m == 0)
            m = 1;
        v = (double)mp_bf16_to_f32((uint16_t)((e << 7) | m));
        break;
    }
    case WEFT_FLOAT32: {
        uint32_t e = (uint32_t)(h % 255), m = (uint32_t)((h >> 8) & 0x7fffffu);
        if (e == 0 && m == 0)
            m = 1;
        v = (double)bits_float((e << 23) | m);
        break;
    }
    default: {
        uint64_t e = h % 2047, m = (h >> 11) & 0xfffffffffffffULL;
        if (e == 0 && m == 0)
            m = 1;
        uint64_t bits = (e << 52) | m;
        memcpy(&v, &bits, 8);
        break;
    }
    }
    return neg ? -v : v;
}

/* A uniform integer in [-b, b] (signed) or [0, b] (unsigned) as num_t of the category. */
static void bounded(const dtype_info_t *di, uint64_t h, uint64_t b, num_t *v)
{
    if (di->cat == CAT_UNSIGNED) {
        v->u = b == UINT64_MAX ? h : h % (b + 1);
        return;
    }
    int64_t x = (int64_t)(h % (2 * b + 1) - b); /* wraps in uint64_t, no signed overflow */
    v->i = x;
    v->f = (double)x;
}

int mp_red_spread_applies(weft_dtype_t dt, weft_redop_t op)
{
    return (dt == WEFT_FLOAT16 || dt == WEFT_BFLOAT16) && (op == WEFT_SUM || op == WEFT_AVG);
}

/* A spread input (MP_RED_SPREAD in harness.h) of a 16-bit float: +-m * 2^(b + e) with m of the
 * full significand width p (m in [2^(p-1), 2^p)), b drawn per element from hb (the same on every
 * rank), e in [0, w] from h (this rank's). Returns 0, and sets nothing, when nranks is too large
 * for a float32-exact window (w < 0: more than 2^13 ranks for float16, 2^16 for bfloat16). */
static int spread_input(weft_dtype_t dt, int nranks, uint64_t h, uint64_t hb, num_t *v)
{
    int p = dt == WEFT_FLOAT16 ? 11 : 8;
    int lg = 0;
    while (lg < 31 && (1L << lg) < (long)nranks)
        lg++;
    int w = 24 - p - lg;
    if (w < 0)
        return 0;
    /* float16: b in [-24, -10], so inputs are multiples of 2^-24 (exact, subnormals included) and
     * sums stay below 2^(b + 24) <= 2^14 (finite). bfloat16: b in [-20, 20], normal values. */
    int b = dt == WEFT_FLOAT16 ? -24 + (int)(hb % 15) : -20 + (int)(hb % 41);
    int e = (int)((h >> 8) % (uint64_t)(w + 1));
    uint64_t half = (uint64_t)1 << (p - 1);
    double m = (double)(half + ((h >> 32) % half));
    v->f = ldexp((h >> 63) ? -m : m, b + e);
    return 1;
}

/* Input element idx of rank r, of kind data. */
static void red_input(uint64_t salt, mp_red_data_t data, int nranks, weft_dtype_t dt,
                      weft_redop_t op, int r, uint64_t idx, num_t *v)
{
    const dtype_info_t *di = &dtype_table[dt];
    uint64_t h = mp_hash(salt, (uint64_t)r, idx, 0);
    memset(v, 0, sizeof *v);
    switch (op) {
    case WEFT_SUM:
    case WEFT_AVG:
        if (data == MP_RED_SPREAD && mp_red_spread_applies(dt, op) &&
            spread_input(dt, nranks, h, mp_hash(salt, UINT64_MAX, idx, 3), v))
            break;
        bounded(di, h, di->sum_limit / (uint64_t)nranks, v);
        break;
    case WEFT_PROD: {
        uint64_t hs = mp_hash(salt, UINT64_MAX, idx, 1);
        int a = (int)(hs % (uint64_t)nranks);
        int b =
            nranks > 1 ? (int)((a + 1 + (int)((hs >> 32) % (uint64_t)(nranks - 1))) % nranks) : -1;
        if (r == a || r == b) {
            bounded(di, h, di->prod_factor, v);
        } else if (di->cat == CAT_UNSIGNED) {
            v->u = 1;
        } else {
            v->i = (h & 1) ? -1 : 1;
            v->f = (double)v->i;
        }
        break;
    }
    case WEFT_MAX:
    case WEFT_MIN:
        if (di->cat == CAT_FLOAT) {
            v->f = random_float(dt, h);
        } else if (di->cat == CAT_UNSIGNED) {
            v->u = di->bytes == 8 ? h : h & ((UINT64_C(1) << (8 * di->bytes)) - 1);
        } else {
            v->i = di->bytes == 1 ? (int8_t)h : di->bytes == 4 ? (int32_t)h : (int64_t)h;
        }
        break;
    }
}

/* The expected result element idx: the reduction over all ranks of their inputs. */
static void red_expected(uint64_t salt, mp_red_data_t data, int nranks, weft_dtype_t dt,
                         weft_redop_t op, uint64_t idx, num_t *acc)
{
    const dtype_info_t *di = &dtype_table[dt];
    red_input(salt, data, nranks, dt, op, 0, idx, acc);
    for (int r = 1; r < nranks; r++) {
        num_t v;
        red_input(salt, data, nranks, dt, op, r, idx, &v);
        switch (op) {
        case WEFT_SUM:
        case WEFT_AVG:
            acc->i += v.i;
            acc->u += v.u;
            acc->f += v.f; /* exact: the float sums are exact in float32 (spread ones included) */
            break;
        case WEFT_PROD:
            acc->i *= v.i;
            acc->u *= v.u;
            acc->f *= v.f;
            break;
        case WEFT_MAX:
            if (di->cat == CAT_SIGNED     ? v.i > acc->i
                : di->cat == CAT_UNSIGNED ? v.u > acc->u
                                          : v.f > acc->f)
                *acc = v;
            break;
        case WEFT_MIN:
            if (di->cat == CAT_SIGNED     ? v.i < acc->i
                : di->cat == CAT_UNSIGNED ? v.u < acc->u
                                          : v.f < acc->f)
                *acc = v;
            break;
        }
    }
    if (op != WEFT_AVG)
        return;
    if (di->cat == CAT_SIGNED)
        acc->i /= nranks; /* C division truncates toward zero */
    else if (di->cat == CAT_UNSIGNED)
        acc->u /= (uint64_t)nranks;
    else if (dt == WEFT_FLOAT64)
        acc->f /= (double)nranks;
    else
        acc->f = (double)((float)acc->f / (float)nranks);
}

void mp_red_fill(const mp_ctx_t *ctx, weft_dtype_t dt, weft_redop_t op, int rank, size_t first,
                 size_t count, void *dst)
{
    uint64_t salt = red_salt(ctx, dt, op);
    size_t es = mp_dtype_bytes(dt);
    unsigned char *out = dst;
    for (size_t i = 0; i < count; i++) {
        num_t v;
        red_input(salt, ctx->red_data, ctx->nranks, dt, op, rank, first + i, &v);
        encode(dt, &v, out + i * es);
    }
}

void mp_red_check_input(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt,
                        weft_redop_t op, int rank, size_t first, size_t count)
{
    unsigned char expected[CHECK_CHUNK_ELEMS * 8];
    size_t es = mp_dtype_bytes(dt);
    compare_state_t cs = {0};
    for (size_t pos = 0; pos < count; pos += CHECK_CHUNK_ELEMS) {
        size_t k = count - pos < CHECK_CHUNK_ELEMS ? count - pos : CHECK_CHUNK_ELEMS;
        mp_red_fill(ctx, dt, op, rank, first + pos, k, expected);
        compare_chunk(&cs, dt, (const unsigned char *)got + pos * es, expected, pos, k);
    }
    compare_report(ctx, &cs, what, dt, count);
}

void mp_red_check_result(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt,
                         weft_redop_t op, size_t first, size_t count)
{
    unsigned char expected[CHECK_CHUNK_ELEMS * 8];
    uint64_t salt = red_salt(ctx, dt, op);
    size_t es = mp_dtype_bytes(dt);
    compare_state_t cs = {0};
    for (size_t pos = 0; pos < count; pos += CHECK_CHUNK_ELEMS) {
        size_t k = count - pos < CHECK_CHUNK_ELEMS ? count - pos : CHECK_CHUNK_ELEMS;
        for (size_t j = 0; j < k; j++) {
            num_t v;
            red_expected(salt, ctx->red_data, ctx->nranks, dt, op, first + pos + j, &v);
            encode(dt, &v, expected + j * es);
        }
        compare_chunk(&cs, dt, (const unsigned char *)got + pos * es, expected, pos, k);
    }
    compare_report(ctx, &cs, what, dt, count);
}

/* ---------------------------------------------------------------------------------------------
 * Data: movement
 * ------------------------------------------------------------------------------------------- */
void mp_raw_fill(const mp_ctx_t *ctx, weft_dtype_t dt, int rank, uint64_t first, size_t count,
                 void *dst)
{
    uint64_t salt = ctx->seed + ctx->case_id * 0x632be59bd9b4e019ULL;
    size_t es = mp_dtype_bytes(dt);
    unsigned char *out = dst;
    for (size_t i = 0; i < count; i++) {
        uint64_t h = mp_hash(salt, (uint64_t)rank, first + i, 2);
        memcpy(out + i * es, &h, es);
    }
}

void mp_raw_check(mp_ctx_t *ctx, const char *what, const void *got, weft_dtype_t dt, int rank,
                  uint64_t first, size_t count)
{
    unsigned char expected[CHECK_CHUNK_ELEMS * 8];
    size_t es = mp_dtype_bytes(dt);
    compare_state_t cs = {0};
    for (size_t pos = 0; pos < count; pos += CHECK_CHUNK_ELEMS) {
        size_t k = count - pos < CHECK_CHUNK_ELEMS ? count - pos : CHECK_CHUNK_ELEMS;
        mp_raw_fill(ctx, dt, rank, first + pos, k, expected);
        compare_chunk(&cs, dt, (const unsigned char *)got + pos * es, expected, pos, k);
    }
    compare_report(ctx, &cs, what, dt, count);
}

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */
void mp_stats(mp_ctx_t *ctx, weft_stats_t *out)
{
    memset(out, 0, sizeof *out);
    weft_status_t st = weft_get_stats(ctx->comm, out);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_get_stats returned %s: %s", weft_status_string(st), weft_last_error());
}

void mp_check_registrations_settle(mp_ctx_t *ctx, const weft_stats_t *before, uint64_t expected,
                                   double limit_s, weft_stats_t *out)
{
    mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier");
    double t0 = mp_now_s();
    do {
        mp_stats(ctx, out);
        if (out->registrations_completed == out->registrations_started)
            break;
        mp_sleep_ms(10);
    } while (mp_now_s() - t0 < limit_s);
    mp_check(ctx, out->registrations_started - before->registrations_started >= expected,
             "%" PRIu64 " registrations started for %" PRIu64 " allocations",
             out->registrations_started - before->registrations_started, expected);
    mp_check(ctx, out->registrations_completed == out->registrations_started,
             "registrations: %" PRIu64 " started, %" PRIu64 " completed after %.0f s",
             out->registrations_started, out->registrations_completed, limit_s);
}

int mp_expect_zero_copy(const mp_ctx_t *ctx, mp_buf_kind_t kind)
{
    return kind != MP_BUF_UNREGISTERED && ctx->reg != WEFT_REGISTRATION_STAGED;
}

void mp_check_path(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                   mp_buf_kind_t kind, size_t bytes)
{
    mp_check_path_expect(ctx, before, after, mp_expect_zero_copy(ctx, kind), kind, bytes);
}

int mp_check_counted_once(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after)
{
    uint64_t dz = after->zero_copy_ops - before->zero_copy_ops;
    uint64_t ds = after->staged_ops - before->staged_ops;
    uint64_t di = after->inline_ops - before->inline_ops;
    /* Each difference is checked on its own: their sum alone would let a counter that went
     * down (a huge difference) make up for one that grew twice. */
    return mp_check(ctx, dz <= 1 && ds <= 1 && di <= 1 && dz + ds + di == 1,
                    "stats: the operation did not count exactly once: zero_copy_ops +%" PRIu64
                    ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64,
                    dz, ds, di);
}

void mp_check_path_expect(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                          int zero_copy, mp_buf_kind_t kind, size_t bytes)
{
    mp_check(
        ctx,
        after->sm_blocks == before->sm_blocks && after->copy_engine_ops == before->copy_engine_ops,
        "stats: the host backend counted sm_blocks +%" PRIu64 ", copy_engine_ops +%" PRIu64,
        after->sm_blocks - before->sm_blocks, after->copy_engine_ops - before->copy_engine_ops);
    if (!mp_check_counted_once(ctx, before, after))
        return;
    uint64_t dz = after->zero_copy_ops - before->zero_copy_ops;
    uint64_t ds = after->staged_ops - before->staged_ops;
    uint64_t di = after->inline_ops - before->inline_ops;
    /* A count of 0 moves nothing but takes its turn in the handshake, a round of flags with no
     * payload (weft_select_empty, coll_inline.c): an inline operation, with any number of
     * ranks. */
    if (bytes == 0) {
        mp_check(ctx, di == 1,
                 "stats: a count of 0 did not count in inline_ops: zero_copy_ops +%" PRIu64
                 ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64,
                 dz, ds, di);
        return;
    }
    if (ctx->nranks < 2 || bytes < MP_PATH_CHECK_BYTES)
        return;
    mp_check(ctx, zero_copy ? dz == 1 : ds == 1,
             "stats: expected the %s path (%s buffers, reg=%s): zero_copy_ops +%" PRIu64
             ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64,
             zero_copy ? "zero-copy" : "staged", mp_buf_kind_name(kind), mp_reg_name(ctx->reg), dz,
             ds, di);
}

uint64_t mp_env_bytes(mp_ctx_t *ctx, const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    uint64_t v;
    if (s == NULL || s[0] == '\0' || strcasecmp(s, "auto") == 0)
        return dflt;
    if (weft_parse_bytes(s, &v) != 0)
        mp_fatal(ctx, "%s=%s is not a byte size", name, s);
    return v;
}

int mp_env_int(mp_ctx_t *ctx, const char *name, int dflt)
{
    const char *s = getenv(name);
    if (s == NULL || s[0] == '\0')
        return dflt;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX)
        mp_fatal(ctx, "%s=%s is not an integer", name, s);
    return (int)v;
}

int mp_expect_twoshot(mp_ctx_t *ctx, size_t bytes, int inplace)
{
    if (ctx->nranks < 2)
        return 0;
    /* The defaults (docs/config.md) depend on whether the ranks span GPUs; out of place, two
     * ranks on one GPU (or host) keep one-shot at every size. */
    uint64_t dflt = inplace            ? (ctx->spans_gpus ? 128u << 10 : 1u << 20)
                    : ctx->nranks == 2 ? (ctx->spans_gpus ? 4u << 20 : UINT64_MAX)
                    : ctx->spans_gpus  ? 512u << 10
                                       : 2u << 20;
    return bytes >= mp_env_bytes(ctx,
                                 inplace ? "WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES"
                                         : "WEFT_ALLREDUCE_TWOSHOT_BYTES",
                                 dflt);
}

int mp_expect_twoshot_stores(mp_ctx_t *ctx, size_t bytes, int inplace)
{
    return mp_expect_twoshot(ctx, bytes, inplace) && (!ctx->spans_gpus || bytes < (256u << 20));
}

int mp_remote_stores_enabled(void)
{
    const char *v = getenv("WEFT_REMOTE_STORES");
    return v != NULL && strcmp(v, "1") == 0;
}

void mp_check_remote_stores(mp_ctx_t *ctx, const weft_stats_t *before, const weft_stats_t *after,
                            int want, size_t bytes)
{
    if (ctx->nranks < 2 || bytes < MP_PATH_CHECK_BYTES)
        return;
    want = want && mp_remote_stores_enabled();
    uint64_t d = after->remote_store_ops - before->remote_store_ops;
    mp_check(ctx, d == (uint64_t)want, "stats: remote_store_ops +%" PRIu64 ", expected +%d", d,
             want);
}

/* ---------------------------------------------------------------------------------------------
 * Registration counters
 * ------------------------------------------------------------------------------------------- */
void mp_check_registration_invariants(mp_ctx_t *ctx, const weft_stats_t *s, const char *when)
{
    mp_check(ctx, s->registrations_completed <= s->registrations_started,
             "%s: registrations_completed %" PRIu64 " > registrations_started %" PRIu64, when,
             s->registrations_completed, s->registrations_started);
}

void mp_check_first_use_waits(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1,
                              const weft_stats_t *s2)
{
    uint64_t w1 = s1->first_use_waits - s0->first_use_waits;
    uint64_t w2 = s2->first_use_waits - s1->first_use_waits;
    uint64_t ns1 = s1->first_use_wait_ns - s0->first_use_wait_ns;
    if (ctx->reg == WEFT_REGISTRATION_ROA) {
        mp_check(ctx, w1 == 0 && ns1 == 0,
                 "roa: the first use after every registration had completed waited for "
                 "registration (first_use_waits +%" PRIu64 ", first_use_wait_ns +%" PRIu64 ")",
                 w1, ns1);
    } else {
        mp_check(ctx, w1 == 1,
                 "jit: the first use counted %" PRIu64 " first-use waits, expected 1 (one "
                 "operation, however many of its buffers waited)",
                 w1);
        mp_check(ctx, w1 == 0 || ns1 > 0,
                 "jit: first_use_waits +%" PRIu64 " but first_use_wait_ns did not grow", w1);
    }
    mp_check(ctx, w2 == 0,
             "%s: the second use of the same buffers counted %" PRIu64 " first-use waits",
             mp_reg_name(ctx->reg), w2);
}

void mp_check_malloc_registered(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1)
{
    if (ctx->reg == WEFT_REGISTRATION_JIT)
        mp_check(ctx,
                 s1->registrations_started == s0->registrations_started &&
                     s1->bytes_registered == s0->bytes_registered,
                 "jit: weft_malloc registered before first use (registrations_started +%" PRIu64
                 ", bytes_registered +%" PRIu64 ")",
                 s1->registrations_started - s0->registrations_started,
                 s1->bytes_registered - s0->bytes_registered);
}

void mp_check_use_registered(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s2,
                             uint64_t bytes, uint64_t used_bytes)
{
    if (ctx->nranks < 2 || ctx->reg == WEFT_REGISTRATION_STAGED)
        return;
    uint64_t want_bytes = ctx->reg == WEFT_REGISTRATION_ROA ? bytes : used_bytes;
    mp_check(ctx,
             s2->registrations_started > s0->registrations_started &&
                 s2->registrations_completed > s0->registrations_completed &&
                 s2->bytes_registered - s0->bytes_registered >= want_bytes,
             "%s: after allocating and using %" PRIu64 " bytes: registrations_started +%" PRIu64
             ", registrations_completed +%" PRIu64 ", bytes_registered +%" PRIu64
             " (expected +1, +1, +%" PRIu64 " at least)",
             mp_reg_name(ctx->reg), bytes, s2->registrations_started - s0->registrations_started,
             s2->registrations_completed - s0->registrations_completed,
             s2->bytes_registered - s0->bytes_registered, want_bytes);
}
