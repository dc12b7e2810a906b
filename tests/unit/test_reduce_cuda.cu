/*
 * test_reduce_cuda.cu - unit test of exec/reduce_cuda.cuh on a CUDA device: the 16-bit float
 * conversions, weft_dev_reduce for every dtype and reduction op, weft_dev_copy and
 * weft_dev_copy_fanout, compared bit for bit with the host (exec/reduce_host.h, the source
 * bytes).
 *
 * Conversions: every 16-bit pattern widened, and narrowing, alone and two at a time, of every
 * rounding boundary between neighbouring 16-bit values (the midpoint and one float32 ulp either
 * side, both signs) and of a strided sweep over all float32 bit patterns, against
 * weft_half_to_float ... on the host.
 * Reductions: a grid of dtype x op x sources {1,2,3,8} x count {0,1,7,4099,2^20+3} x alignment
 * (everything aligned; dst one element off; every source one element off; all one element off,
 * which takes the vector path after a scalar head; only the last source off, which takes the
 * scalar path), out of place and in place (dst is the first or the last source). Inputs are
 * random, with NaNs (random payloads, signalling and quiet), infinities, zeros of both signs,
 * subnormals and repeated values for floats, and extreme values for integers. Each run is a
 * kernel of two groups of blocks reducing disjoint ranges cut at an unaligned element. Results
 * must equal weft_reduce_host's bit for bit, except where one float operation met two NaNs: the
 * host's payload is not defined there (reduce_cuda.cuh), and the result must instead be the one
 * documented for the device (the accumulator's NaN), computed here step by step.
 * Copies: every size 0..4099 and 64 MiB, at offsets that select each access width; fan-outs to
 * three destinations, every size 0..4099 and 8 MiB + 13, with destinations that share the
 * source's alignment and ones that do not.
 * Outputs are poisoned with 0xA5 first, and guards on both sides must stay untouched.
 * Throughput lines are printed, not asserted.
 *
 * Usage: test_reduce_cuda [seed]. Exits 77 (skipped) without a CUDA device.
 */
extern "C" {
#include "exec/reduce_host.h"
#include "util/clock.h"
}
#include "exec/reduce_cuda.cuh"

#include <cuda_runtime.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce_test.h"

#define SKIP_STATUS 77
#define MAX_SRCS 8
#define GUARD 16        /* poisoned elements on each side of a reduction's output */
#define COPY_GUARD 64   /* poisoned bytes on each side of a copy's output */
#define POISON 0xa5     /* byte written to outputs before each run */
#define MAX_BAD_ELEMS 3 /* elements printed per failed run */
#define BIG_COUNT (((size_t)1 << 20) + 3)
#define THREADS 96 /* threads per block of the checking kernels: not a power of two */

static size_t nan_pairs_accepted; /* elements where the host took another operand's NaN */

/* A CUDA runtime call that must succeed; the test cannot go on without it. */
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const void *p[MAX_SRCS];
} srcs_arg_t;

/* Two groups of blocks_per_group blocks: the first reduces elements [0, split), the second
 * [split, count), each through its own offset pointers. */
__global__ void reduce_kernel(void *dst, srcs_arg_t srcs, int nsrcs, size_t count, size_t split,
                              size_t esize, int dtype, int op, int avg_divisor,
                              unsigned blocks_per_group)
{
    unsigned group = blockIdx.x / blocks_per_group;
    size_t tid = (size_t)(blockIdx.x % blocks_per_group) * blockDim.x + threadIdx.x;
    size_t nthreads = (size_t)blocks_per_group * blockDim.x;
    size_t begin = group == 0 ? 0 : split;
    size_t end = group == 0 ? split : count;
    const void *s[MAX_SRCS];
    for (int i = 0; i < nsrcs; i++)
        s[i] = (const char *)srcs.p[i] + begin * esize;
    weft_dev_reduce((char *)dst + begin * esize, s, nsrcs, end - begin, dtype, op, avg_divisor, tid,
                    nthreads);
}

/* Copies for every size 0..nsizes-1 at once: size z from src to dst + z * slot, by a group of
 * blocks_per_case blocks. */
__global__ void copy_sizes_kernel(unsigned char *dst, size_t slot, const unsigned char *src,
                                  unsigned blocks_per_case)
{
    size_t size = blockIdx.x / blocks_per_case;
    size_t tid = (size_t)(blockIdx.x % blocks_per_case) * blockDim.x + threadIdx.x;
    weft_dev_copy(dst + size * slot, src, size, tid, (size_t)blocks_per_case * blockDim.x);
}

/* One copy by the whole grid. */
__global__ void copy_kernel(void *dst, const void *src, size_t bytes)
{
    weft_dev_copy(dst, src, bytes, (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                  (size_t)gridDim.x * blockDim.x);
}

#define FANOUT_DSTS 3

/* Fan-out copies for every size 0..nsizes-1 at once (nsizes 0: one copy of bytes by the whole
 * grid): size z from src to dst + k * region + offs.v[k] + z * slot for k < FANOUT_DSTS. */
struct fanout_offs {
    size_t v[FANOUT_DSTS];
};
__global__ void fanout_kernel(unsigned char *dst, size_t region, fanout_offs offs, size_t slot,
                              const unsigned char *src, size_t bytes, unsigned blocks_per_case)
{
    uint8_t *dsts[FANOUT_DSTS];
    for (int k = 0; k < FANOUT_DSTS; k++)
        dsts[k] = dst + k * region + offs.v[k];
    if (bytes > 0) {
        weft_dev_copy_fanout(dsts, FANOUT_DSTS, 0, src, bytes,
                             (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                             (size_t)gridDim.x * blockDim.x);
        return;
    }
    size_t size = blockIdx.x / blocks_per_case;
    size_t tid = (size_t)(blockIdx.x % blocks_per_case) * blockDim.x + threadIdx.x;
    weft_dev_copy_fanout(dsts, FANOUT_DSTS, size * slot, src, size, tid,
                         (size_t)blocks_per_case * blockDim.x);
}

__global__ void widen_kernel(uint32_t *out, const uint16_t *in, size_t n, int bf16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float f = bf16 ? weft_dev_bf16_to_float(in[i]) : weft_dev_half_to_float(in[i]);
        out[i] = __float_as_uint(f);
    }
}

/* Value i narrowed alone (out[3i]), and paired with value i ^ 1 as the low half (out[3i + 1]) and
 * as the high half (out[3i + 2]) where neither is NaN (else copies of out[3i]). n is even. */
__global__ void narrow_kernel(uint16_t *out, const uint32_t *in, size_t n, int bf16)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float f = __uint_as_float(in[i]);
        float g = __uint_as_float(in[i ^ 1]);
        uint16_t alone = bf16 ? weft_dev_float_to_bf16(f) : weft_dev_float_to_half(f);
        out[3 * i] = alone;
        out[3 * i + 1] = alone;
        out[3 * i + 2] = alone;
        if (f == f && g == g) {
            out[3 * i + 1] = (uint16_t)(bf16 ? weft_dev_float2_to_bf162_nonan(f, g)
                                             : weft_dev_float2_to_half2_nonan(f, g));
            out[3 * i + 2] = (uint16_t)((bf16 ? weft_dev_float2_to_bf162_nonan(g, f)
                                              : weft_dev_float2_to_half2_nonan(g, f)) >>
                                        16);
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Conversions
 * ------------------------------------------------------------------------------------------- */

/* Every 16-bit pattern widened on the device and on the host. */
static void test_widen(int bf16)
{
    const size_t n = 65536;
    uint16_t *in = (uint16_t *)malloc(n * sizeof *in);
    uint32_t *out = (uint32_t *)malloc(n * sizeof *out);
    uint16_t *d_in;
    uint32_t *d_out;
    if (in == NULL || out == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        in[i] = (uint16_t)i;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof *in));
    CUDA_OK(cudaMalloc(&d_out, n * sizeof *out));
    CUDA_OK(cudaMemcpy(d_in, in, n * sizeof *in, cudaMemcpyHostToDevice));
    widen_kernel<<<64, 256>>>(d_out, d_in, n, bf16);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(out, d_out, n * sizeof *out, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        float want = bf16 ? weft_bf16_to_float(in[i]) : weft_half_to_float(in[i]);
        CHECK(out[i] == fbits(want),
              "device %s_to_float(0x%04x) = 0x%08" PRIx32 ", want 0x%08" PRIx32,
              bf16 ? "bf16" : "half", in[i], out[i], fbits(want));
    }
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    free(in);
    free(out);
}

/* Narrowing on the device, alone and in pairs, and on the host: every rounding boundary (the
 * midpoint between neighbouring non-negative 16-bit values, exact in float32, and one ulp either
 * side, both signs; past the largest value, the point where infinity starts) and a strided sweep
 * over all float32 bit patterns. */
static void test_narrow(int bf16)
{
    const uint64_t stride = 1021;
    size_t cap = 6 * 0x8000 + (size_t)((1ull << 32) / stride) + 2;
    uint32_t *in = (uint32_t *)malloc(cap * sizeof *in);
    uint16_t *out = (uint16_t *)malloc(3 * cap * sizeof *out);
    if (in == NULL || out == NULL)
        abort();
    size_t n = 0;
    uint16_t inf = bf16 ? 0x7f80u : 0x7c00u;
    for (uint32_t h = 0; h < inf; h++) {
        double lo = bf16 ? weft_bf16_to_float((uint16_t)h) : weft_half_to_float((uint16_t)h);
        double hi;
        if (h + 1 < inf)
            hi = bf16 ? weft_bf16_to_float((uint16_t)(h + 1))
                      : weft_half_to_float((uint16_t)(h + 1));
        else
            hi = bf16 ? ldexp(1.0, 128) : 65536.0;
        uint32_t mid = fbits((float)((lo + hi) / 2));
        const uint32_t probes[3] = {mid - 1, mid, mid + 1};
        for (int p = 0; p < 3; p++) {
            in[n++] = probes[p];
            in[n++] = probes[p] | 0x80000000u;
        }
    }
    for (uint64_t b = rng_below((uint32_t)stride); b <= 0xffffffffull; b += stride)
        in[n++] = (uint32_t)b;
    if (n % 2 != 0)
        in[n++] = 0x3f800000u;

    uint32_t *d_in;
    uint16_t *d_out;
    CUDA_OK(cudaMalloc(&d_in, n * sizeof *in));
    CUDA_OK(cudaMalloc(&d_out, 3 * n * sizeof *out));
    CUDA_OK(cudaMemcpy(d_in, in, n * sizeof *in, cudaMemcpyHostToDevice));
    narrow_kernel<<<256, 256>>>(d_out, d_in, n, bf16);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(out, d_out, 3 * n * sizeof *out, cudaMemcpyDeviceToHost));
    static const char *const how[3] = {"alone", "paired low", "paired high"};
    for (size_t i = 0; i < n; i++) {
        uint16_t want = bf16 ? weft_float_to_bf16(bitsf(in[i])) : weft_float_to_half(bitsf(in[i]));
        for (int k = 0; k < 3; k++)
            CHECK(out[3 * i + k] == want,
                  "device float_to_%s(0x%08" PRIx32 ") %s = 0x%04x, want 0x%04x",
                  bf16 ? "bf16" : "half", in[i], how[k], out[3 * i + k], want);
    }
    CUDA_OK(cudaFree(d_in));
    CUDA_OK(cudaFree(d_out));
    free(in);
    free(out);
}

/* ---------------------------------------------------------------------------------------------
 * Reduction inputs
 * ------------------------------------------------------------------------------------------- */

static bool is_float_dtype(int dtype)
{
    return dtype >= WEFT_FLOAT16;
}

/* Bit layout of a float dtype. */
typedef struct {
    int bits;
    int exp_bits;
    int mant_bits;
} ffmt_t;

static ffmt_t float_fmt(int dtype)
{
    switch (dtype) {
    case WEFT_FLOAT16:
        return ffmt_t{16, 5, 10};
    case WEFT_BFLOAT16:
        return ffmt_t{16, 8, 7};
    case WEFT_FLOAT32:
        return ffmt_t{32, 8, 23};
    default:
        return ffmt_t{64, 11, 52};
    }
}

static uint64_t low_mask(int bits)
{
    return bits == 64 ? ~0ull : (1ull << bits) - 1;
}

static uint64_t random_float(ffmt_t f, const uint64_t *earlier, int nearlier)
{
    uint64_t sign = (rng_next() & 1) ? 1ull << (f.bits - 1) : 0;
    uint64_t mant = rng_next() & low_mask(f.mant_bits);
    uint64_t exp_all = low_mask(f.exp_bits) << f.mant_bits;
    int bias = (1 << (f.exp_bits - 1)) - 1;
    uint32_t kind = rng_below(32);
    switch (kind) {
    case 0: /* NaN, quiet or signalling, random payload */
        return sign | exp_all | (mant != 0 ? mant : 1);
    case 1:
        return sign | exp_all; /* infinity */
    case 2:
        return sign; /* zero */
    case 3:
        return sign | (mant != 0 ? mant : 1); /* subnormal */
    case 4:
        if (nearlier > 0)
            return earlier[rng_below((uint32_t)nearlier)]; /* a repeat: ties, x + x */
        return sign;
    default:
        if (kind < 16) /* magnitudes within 2^+-10: sums round */
            return sign | ((uint64_t)(bias - 10 + (int)rng_below(21)) << f.mant_bits) | mant;
        return rng_next() & low_mask(f.bits); /* any bits, NaN included */
    }
}

static uint64_t random_int(int bits)
{
    switch (rng_below(16)) {
    case 0:
        return 0;
    case 1:
        return low_mask(bits); /* -1 */
    case 2:
        return 1ull << (bits - 1); /* the most negative */
    case 3:
        return low_mask(bits - 1); /* the most positive */
    case 4:
        return 1;
    default:
        return rng_next() & low_mask(bits);
    }
}

/* Host and device copies of MAX_SRCS sources of pool_elems elements of one dtype. */
typedef struct {
    size_t pool_elems;
    unsigned char *host[MAX_SRCS];
    unsigned char *dev[MAX_SRCS];
} pool_t;

static void pool_fill(pool_t *p, int dtype)
{
    size_t es = dtype_sizes[dtype];
    for (size_t i = 0; i < p->pool_elems; i++) {
        uint64_t v[MAX_SRCS];
        for (int s = 0; s < MAX_SRCS; s++) {
            v[s] = is_float_dtype(dtype) ? random_float(float_fmt(dtype), v, s)
                                         : random_int((int)es * 8);
            memcpy(p->host[s] + i * es, &v[s], es); /* little endian: the low bytes */
        }
    }
    for (int s = 0; s < MAX_SRCS; s++)
        CUDA_OK(cudaMemcpy(p->dev[s], p->host[s], p->pool_elems * es, cudaMemcpyHostToDevice));
}

/* ---------------------------------------------------------------------------------------------
 * The device's documented result for one float element, step by step: x86 NaN rules with the
 * accumulator as first operand (reduce_cuda.cuh). *nan_pair is set when an operation met two
 * NaNs, the only case where weft_reduce_host may differ.
 * ------------------------------------------------------------------------------------------- */

static float quiet_f(float x)
{
    return bitsf(fbits(x) | 0x00400000u);
}

static double quiet_d(double x)
{
    return bitsd(dbits(x) | 0x0008000000000000ull);
}

/* One SUM/PROD step in float32 by the x86 rules. */
static float step_f(int op, float a, float b, bool *nan_pair)
{
    if (isnan(a)) {
        *nan_pair |= isnan(b);
        return quiet_f(a);
    }
    if (isnan(b))
        return quiet_f(b);
    float r = op == WEFT_PROD ? a * b : a + b;
    return isnan(r) ? bitsf(0xffc00000u) : r;
}

static double step_d(int op, double a, double b, bool *nan_pair)
{
    if (isnan(a)) {
        *nan_pair |= isnan(b);
        return quiet_d(a);
    }
    if (isnan(b))
        return quiet_d(b);
    double r = op == WEFT_PROD ? a * b : a + b;
    return isnan(r) ? bitsd(0xfff8000000000000ull) : r;
}

static float widen_f(int dtype, uint64_t v)
{
    if (dtype == WEFT_FLOAT16)
        return weft_half_to_float((uint16_t)v);
    if (dtype == WEFT_BFLOAT16)
        return weft_bf16_to_float((uint16_t)v);
    return bitsf((uint32_t)v);
}

/* MAX/MIN (reduce_host.h): b replaces acc where it is beyond it, or a number where acc is NaN. */
static float select_f(int op, float acc, float b)
{
    bool beyond = op == WEFT_MAX ? b > acc : b < acc;
    return !isnan(b) && (isnan(acc) || beyond) ? b : acc;
}

static double select_d(int op, double acc, double b)
{
    bool beyond = op == WEFT_MAX ? b > acc : b < acc;
    return !isnan(b) && (isnan(acc) || beyond) ? b : acc;
}

static uint64_t expected_float(int dtype, int op, const uint64_t *in, int nsrcs, int divisor,
                               bool *nan_pair)
{
    *nan_pair = false;
    if (dtype == WEFT_FLOAT64) {
        double acc = bitsd(in[0]);
        for (int s = 1; s < nsrcs; s++) {
            double b = bitsd(in[s]);
            if (op == WEFT_MAX || op == WEFT_MIN)
                acc = select_d(op, acc, b);
            else
                acc = step_d(op, acc, b, nan_pair);
        }
        if (op == WEFT_AVG)
            acc = isnan(acc) ? quiet_d(acc) : acc / (double)divisor;
        return dbits(acc);
    }
    float acc = widen_f(dtype, in[0]);
    for (int s = 1; s < nsrcs; s++) {
        float b = widen_f(dtype, in[s]);
        if (op == WEFT_MAX || op == WEFT_MIN)
            acc = select_f(op, acc, b);
        else
            acc = step_f(op, acc, b, nan_pair);
    }
    if (op == WEFT_AVG)
        acc = isnan(acc) ? quiet_f(acc) : acc / (float)divisor;
    if (dtype == WEFT_FLOAT16)
        return weft_float_to_half(acc);
    if (dtype == WEFT_BFLOAT16)
        return weft_float_to_bf16(acc);
    return fbits(acc);
}

/* ---------------------------------------------------------------------------------------------
 * Reductions
 * ------------------------------------------------------------------------------------------- */

/* One configuration: the sources at element offsets offs[] into the pool. */
typedef struct {
    int dtype;
    int op;
    int nsrcs;
    size_t count;
    int divisor;
    size_t offs[MAX_SRCS];
    const char *align; /* name of the alignment case */
} red_case_t;

/* Buffers shared by every run. */
typedef struct {
    pool_t pool;
    unsigned char *ref;   /* host result of weft_reduce_host */
    unsigned char *d_out; /* device output region: guard, dst, guard */
    unsigned char *h_out; /* pinned copy of it */
    size_t out_bytes;
} red_bufs_t;

static uint64_t load_elem(const unsigned char *p, size_t es)
{
    uint64_t v = 0;
    memcpy(&v, p, es);
    return v;
}

static void print_inputs(const red_bufs_t *b, const red_case_t *c, size_t i)
{
    size_t es = dtype_sizes[c->dtype];
    printf("    inputs:");
    for (int s = 0; s < c->nsrcs; s++)
        printf(" 0x%0*" PRIx64, (int)(2 * es),
               load_elem(b->pool.host[s] + (c->offs[s] + i) * es, es));
    printf("\n");
}

/* Checks the output region copied back (guard of GUARD + dst_off elements, count elements,
 * GUARD elements) against the reference. */
static void check_output(red_bufs_t *b, const red_case_t *c, size_t dst_off, int in_place)
{
    size_t es = dtype_sizes[c->dtype];
    size_t front = (GUARD + dst_off) * es;
    size_t data = c->count * es;
    const unsigned char *out = b->h_out;
    int bad_guard = 0;
    for (size_t i = 0; i < front; i++)
        bad_guard += out[i] != POISON;
    for (size_t i = front + data; i < front + data + GUARD * es; i++)
        bad_guard += out[i] != POISON;
    CHECK(bad_guard == 0, "%s %s nsrcs %d count %zu %s dst+%zu in_place %d: %d guard bytes changed",
          dtype_names[c->dtype], op_names[c->op], c->nsrcs, c->count, c->align, dst_off, in_place,
          bad_guard);
    if (memcmp(out + front, b->ref, data) == 0)
        return;
    int bad = 0;
    for (size_t i = 0; i < c->count; i++) {
        uint64_t got = load_elem(out + front + i * es, es);
        uint64_t want = load_elem(b->ref + i * es, es);
        if (got == want)
            continue;
        if (is_float_dtype(c->dtype)) {
            uint64_t in[MAX_SRCS] = {0};
            for (int s = 0; s < c->nsrcs; s++)
                in[s] = load_elem(b->pool.host[s] + (c->offs[s] + i) * es, es);
            bool nan_pair;
            uint64_t documented =
                expected_float(c->dtype, c->op, in, c->nsrcs, c->divisor, &nan_pair);
            if (nan_pair && got == documented) {
                nan_pairs_accepted++;
                continue;
            }
        }
        if (++bad <= MAX_BAD_ELEMS) {
            CHECK(false,
                  "%s %s nsrcs %d count %zu %s dst+%zu in_place %d divisor %d: element %zu = "
                  "0x%0*" PRIx64 ", want 0x%0*" PRIx64,
                  dtype_names[c->dtype], op_names[c->op], c->nsrcs, c->count, c->align, dst_off,
                  in_place, c->divisor, i, (int)(2 * es), got, (int)(2 * es), want);
            if (failures <= CHECK_MAX_REPORTS)
                print_inputs(b, c, i);
        }
    }
    if (bad > MAX_BAD_ELEMS)
        printf("    ... %d more wrong elements in this run\n", bad - MAX_BAD_ELEMS);
}

/* One device run: dst at element dst_off of the output region (after GUARD poisoned elements);
 * in_place >= 0 makes dst that source, holding a copy of its data. */
static void run_reduce(red_bufs_t *b, const red_case_t *c, size_t dst_off, int in_place)
{
    size_t es = dtype_sizes[c->dtype];
    size_t region = (2 * GUARD + dst_off + c->count) * es;
    unsigned char *dst = b->d_out + (GUARD + dst_off) * es;
    srcs_arg_t srcs;
    memset(&srcs, 0, sizeof srcs);
    for (int s = 0; s < c->nsrcs; s++)
        srcs.p[s] = b->pool.dev[s] + c->offs[s] * es;
    CUDA_OK(cudaMemset(b->d_out, POISON, region));
    if (in_place >= 0) {
        CUDA_OK(cudaMemcpy(dst, srcs.p[in_place], c->count * es, cudaMemcpyDeviceToDevice));
        srcs.p[in_place] = dst;
    }
    unsigned blocks_per_group = c->count > 100000 ? 16 : 2;
    size_t split = c->count * 5 / 11; /* an unaligned element for most counts */
    reduce_kernel<<<2 * blocks_per_group, THREADS>>>(dst, srcs, c->nsrcs, c->count, split, es,
                                                     c->dtype, c->op, c->divisor, blocks_per_group);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(b->h_out, b->d_out, region, cudaMemcpyDeviceToHost));
    check_output(b, c, dst_off, in_place);
}

static void test_reduce_case(red_bufs_t *b, red_case_t *c)
{
    static const char *const align_names[3] = {"aligned", "srcs+1", "last-src+1"};
    const void *hsrcs[MAX_SRCS];
    size_t es = dtype_sizes[c->dtype];
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && c->nsrcs == 1)
            continue; /* the same as mode 1 */
        for (int s = 0; s < c->nsrcs; s++) {
            c->offs[s] = mode == 0 ? 0 : mode == 1 ? 1 : (s == c->nsrcs - 1 ? 1 : 0);
            hsrcs[s] = b->pool.host[s] + c->offs[s] * es;
        }
        c->align = align_names[mode];
        weft_reduce_host(b->ref, hsrcs, c->nsrcs, c->count, (weft_dtype_t)c->dtype,
                         (weft_redop_t)c->op, c->divisor);
        run_reduce(b, c, 0, -1);
        run_reduce(b, c, 1, -1);
        /* In place, dst where the first and the last source are in this mode. */
        run_reduce(b, c, c->offs[0], 0);
        if (c->nsrcs > 1)
            run_reduce(b, c, c->offs[c->nsrcs - 1], c->nsrcs - 1);
    }
}

static void test_reductions(void)
{
    static const int nsrcs_list[] = {1, 2, 3, 8};
    static const size_t counts[] = {0, 1, 7, 4099, BIG_COUNT};
    static const int divisors[] = {1, 2, 3, 7, 255, 256, 1000003, 2147483647};
    red_bufs_t b;
    b.pool.pool_elems = BIG_COUNT + 1;
    b.out_bytes = (2 * GUARD + 1 + BIG_COUNT) * 8;
    for (int s = 0; s < MAX_SRCS; s++) {
        b.pool.host[s] = (unsigned char *)malloc(b.pool.pool_elems * 8);
        if (b.pool.host[s] == NULL)
            abort();
        CUDA_OK(cudaMalloc(&b.pool.dev[s], b.pool.pool_elems * 8));
    }
    b.ref = (unsigned char *)malloc(BIG_COUNT * 8);
    if (b.ref == NULL)
        abort();
    CUDA_OK(cudaMalloc(&b.d_out, b.out_bytes));
    CUDA_OK(cudaMallocHost(&b.h_out, b.out_bytes));

    for (int dtype = 0; dtype < WEFT_NUM_DTYPES; dtype++) {
        pool_fill(&b.pool, dtype);
        for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
            for (size_t ni = 0; ni < sizeof nsrcs_list / sizeof nsrcs_list[0]; ni++) {
                for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                    red_case_t c;
                    memset(&c, 0, sizeof c);
                    c.dtype = dtype;
                    c.op = op;
                    c.nsrcs = nsrcs_list[ni];
                    c.count = counts[ci];
                    c.divisor = op == WEFT_AVG
                                    ? divisors[rng_below(sizeof divisors / sizeof divisors[0])]
                                    : 1;
                    test_reduce_case(&b, &c);
                }
            }
        }
    }

    for (int s = 0; s < MAX_SRCS; s++) {
        free(b.pool.host[s]);
        CUDA_OK(cudaFree(b.pool.dev[s]));
    }
    free(b.ref);
    CUDA_OK(cudaFree(b.d_out));
    CUDA_OK(cudaFreeHost(b.h_out));
}

/* ---------------------------------------------------------------------------------------------
 * Copies
 * ------------------------------------------------------------------------------------------- */

/* Fan-out cases: the source's byte offset, then each destination's, from 16-byte aligned bases:
 * all congruent modulo 16 (one load per unit: with and without a head), and not (one copy per
 * destination). */
static const size_t fanout_offsets[][1 + FANOUT_DSTS] = {
    {0, 0, 0, 0}, {5, 5, 5, 5}, {12, 12, 12, 12}, {3, 3, 3, 7}, {0, 8, 0, 0}, {4, 1, 2, 3}};
#define NUM_FANOUT_OFFSETS (sizeof fanout_offsets / sizeof fanout_offsets[0])

/* (dst, src) byte offsets from 16-byte aligned bases: units of 16 bytes (with and without a
 * head), 8, 4, 2 and 1. */
static const size_t copy_offsets[][2] = {{0, 0}, {5, 5}, {8, 0}, {4, 12}, {6, 2}, {3, 1}, {1, 0}};
#define NUM_COPY_OFFSETS (sizeof copy_offsets / sizeof copy_offsets[0])

/* Bytes [0, n) of out equal to src, and the poisoned guards around them untouched. */
static void check_copy(const unsigned char *out, size_t front, size_t n, size_t back,
                       const unsigned char *src, size_t dst_off, size_t src_off)
{
    int bad_guard = 0;
    for (size_t i = 0; i < front; i++)
        bad_guard += out[i] != POISON;
    for (size_t i = front + n; i < front + n + back; i++)
        bad_guard += out[i] != POISON;
    CHECK(bad_guard == 0, "copy of %zu bytes dst+%zu src+%zu: %d guard bytes changed", n, dst_off,
          src_off, bad_guard);
    if (memcmp(out + front, src, n) == 0)
        return;
    size_t i = 0;
    while (out[front + i] == src[i])
        i++;
    CHECK(false, "copy of %zu bytes dst+%zu src+%zu: byte %zu = 0x%02x, want 0x%02x", n, dst_off,
          src_off, i, out[front + i], src[i]);
}

/* Every size 0..4099 in one launch per offset pair, two blocks per size. */
static void test_copy_sizes(void)
{
    const size_t nsizes = 4100;
    const size_t slot = 4096 + 4 * COPY_GUARD; /* a multiple of 16 */
    const size_t src_bytes = nsizes + 16;
    unsigned char *src = (unsigned char *)malloc(src_bytes);
    unsigned char *out = (unsigned char *)malloc(nsizes * slot);
    unsigned char *d_src, *d_dst;
    if (src == NULL || out == NULL)
        abort();
    for (size_t i = 0; i < src_bytes; i++)
        src[i] = (unsigned char)rng_next();
    CUDA_OK(cudaMalloc(&d_src, src_bytes));
    CUDA_OK(cudaMalloc(&d_dst, nsizes * slot));
    CUDA_OK(cudaMemcpy(d_src, src, src_bytes, cudaMemcpyHostToDevice));
    for (size_t k = 0; k < NUM_COPY_OFFSETS; k++) {
        size_t dst_off = copy_offsets[k][0], src_off = copy_offsets[k][1];
        CUDA_OK(cudaMemset(d_dst, POISON, nsizes * slot));
        copy_sizes_kernel<<<(unsigned)nsizes * 2, 64>>>(d_dst + dst_off, slot, d_src + src_off, 2);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(out, d_dst, nsizes * slot, cudaMemcpyDeviceToHost));
        for (size_t z = 0; z < nsizes; z++)
            check_copy(out + z * slot, dst_off, z, slot - dst_off - z, src + src_off, dst_off,
                       src_off);
    }
    CUDA_OK(cudaFree(d_src));
    CUDA_OK(cudaFree(d_dst));
    free(src);
    free(out);
}

/* weft_dev_copy_fanout at every offset case: every size 0..4099 (two blocks per size), then
 * 8 MiB + 13 bytes by a grid of many blocks; each destination region checked with its guards. */
static void test_copy_fanout(void)
{
    const size_t nsizes = 4100, slot = 4096 + 4 * COPY_GUARD, big = ((size_t)8 << 20) + 13;
    const size_t region =
        nsizes * slot > big + 2 * COPY_GUARD ? nsizes * slot : big + 2 * COPY_GUARD;
    const size_t src_bytes = big + 16;
    unsigned char *src = (unsigned char *)malloc(src_bytes);
    unsigned char *out;
    unsigned char *d_src, *d_dst;
    if (src == NULL)
        abort();
    for (size_t i = 0; i < src_bytes; i++)
        src[i] = (unsigned char)rng_next();
    CUDA_OK(cudaMallocHost(&out, FANOUT_DSTS * region));
    CUDA_OK(cudaMalloc(&d_src, src_bytes));
    CUDA_OK(cudaMalloc(&d_dst, FANOUT_DSTS * region));
    CUDA_OK(cudaMemcpy(d_src, src, src_bytes, cudaMemcpyHostToDevice));
    for (size_t c = 0; c < NUM_FANOUT_OFFSETS; c++) {
        size_t src_off = fanout_offsets[c][0];
        fanout_offs offs;
        for (int k = 0; k < FANOUT_DSTS; k++)
            offs.v[k] = fanout_offsets[c][1 + k];
        for (int large = 0; large < 2; large++) {
            CUDA_OK(cudaMemset(d_dst, POISON, FANOUT_DSTS * region));
            if (large) {
                fanout_offs guarded = offs;
                for (int k = 0; k < FANOUT_DSTS; k++)
                    guarded.v[k] += COPY_GUARD;
                fanout_kernel<<<128, 256>>>(d_dst, region, guarded, 0, d_src + src_off, big, 0);
            } else {
                fanout_kernel<<<(unsigned)nsizes * 2, 64>>>(d_dst, region, offs, slot,
                                                            d_src + src_off, 0, 2);
            }
            CUDA_OK(cudaGetLastError());
            CUDA_OK(cudaMemcpy(out, d_dst, FANOUT_DSTS * region, cudaMemcpyDeviceToHost));
            for (int k = 0; k < FANOUT_DSTS; k++) {
                const unsigned char *o = out + k * region;
                size_t off = offs.v[k];
                if (large) {
                    check_copy(o, COPY_GUARD + off, big, COPY_GUARD - off, src + src_off, off,
                               src_off);
                    continue;
                }
                for (size_t z = 0; z < nsizes; z++)
                    check_copy(o + z * slot, off, z, slot - off - z, src + src_off, off, src_off);
            }
        }
    }
    CUDA_OK(cudaFree(d_src));
    CUDA_OK(cudaFree(d_dst));
    CUDA_OK(cudaFreeHost(out));
    free(src);
}

/* 64 MiB at every offset pair, by a grid of many blocks. */
static void test_copy_large(void)
{
    const size_t n = (size_t)64 << 20;
    const size_t span = n + 2 * COPY_GUARD;
    unsigned char *src = (unsigned char *)malloc(span);
    unsigned char *out;
    unsigned char *d_src, *d_dst;
    if (src == NULL)
        abort();
    for (size_t i = 0; i < span; i += 8) {
        uint64_t r = rng_next();
        memcpy(src + i, &r, 8);
    }
    CUDA_OK(cudaMallocHost(&out, span));
    CUDA_OK(cudaMalloc(&d_src, span));
    CUDA_OK(cudaMalloc(&d_dst, span));
    CUDA_OK(cudaMemcpy(d_src, src, span, cudaMemcpyHostToDevice));
    for (size_t k = 0; k < NUM_COPY_OFFSETS; k++) {
        size_t dst_off = copy_offsets[k][0], src_off = copy_offsets[k][1];
        CUDA_OK(cudaMemset(d_dst, POISON, span));
        copy_kernel<<<128, 256>>>(d_dst + COPY_GUARD + dst_off, d_src + src_off, n);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaMemcpy(out, d_dst, span, cudaMemcpyDeviceToHost));
        check_copy(out, COPY_GUARD + dst_off, n, COPY_GUARD - dst_off, src + src_off, dst_off,
                   src_off);
    }
    CUDA_OK(cudaFree(d_src));
    CUDA_OK(cudaFree(d_dst));
    CUDA_OK(cudaFreeHost(out));
    free(src);
}

/* ---------------------------------------------------------------------------------------------
 * Throughput (printed, not asserted)
 * ------------------------------------------------------------------------------------------- */

/* Kernels timed below, the whole grid one group: SUM of two sources through
 * weft_dev_reduce_typed (dtype known at compile time), and through weft_dev_reduce with the
 * launch bounds that reduce_cuda.cuh recommends. */
template <int Dtype>
__global__ void __launch_bounds__(256) sum2_typed_kernel(void *dst, srcs_arg_t srcs, size_t count)
{
    weft_dev_reduce_typed<Dtype, WEFT_SUM>(dst, srcs.p, 2, count, 1,
                                           (size_t)blockIdx.x * blockDim.x + threadIdx.x,
                                           (size_t)gridDim.x * blockDim.x);
}

__global__ void __launch_bounds__(256, 4)
    sum2_kernel(void *dst, srcs_arg_t srcs, size_t count, int dtype)
{
    weft_dev_reduce(dst, srcs.p, 2, count, dtype, WEFT_SUM, 1,
                    (size_t)blockIdx.x * blockDim.x + threadIdx.x, (size_t)gridDim.x * blockDim.x);
}

/* Blocks of 256 threads that fit on the device at once for kernel k. */
static unsigned full_grid(const void *k)
{
    int dev, sms, per_sm;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, 256, 0));
    return (unsigned)(sms * (per_sm > 0 ? per_sm : 1));
}

/* GB/s of memory traffic (bytes moved per run) of the best of 5 timed runs after a warm-up;
 * kind 0: sum2_typed_kernel, 1: sum2_kernel, 2: copy_kernel (count bytes from srcs.p[0]). */
static double bench(int kind, void *dst, srcs_arg_t srcs, size_t count, int dtype, double bytes)
{
    cudaEvent_t start, stop;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int r = 0; r < 6; r++) {
        CUDA_OK(cudaEventRecord(start));
        if (kind == 2) {
            copy_kernel<<<full_grid((const void *)copy_kernel), 256>>>(dst, srcs.p[0], count);
        } else if (kind == 1) {
            sum2_kernel<<<full_grid((const void *)sum2_kernel), 256>>>(dst, srcs, count, dtype);
        } else if (dtype == WEFT_FLOAT32) {
            sum2_typed_kernel<WEFT_FLOAT32>
                <<<full_grid((const void *)sum2_typed_kernel<WEFT_FLOAT32>), 256>>>(dst, srcs,
                                                                                    count);
        } else {
            sum2_typed_kernel<WEFT_BFLOAT16>
                <<<full_grid((const void *)sum2_typed_kernel<WEFT_BFLOAT16>), 256>>>(dst, srcs,
                                                                                     count);
        }
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaEventRecord(stop));
        CUDA_OK(cudaEventSynchronize(stop));
        float ms;
        CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
        if (r > 0 && ms < best)
            best = ms;
    }
    CUDA_OK(cudaEventDestroy(start));
    CUDA_OK(cudaEventDestroy(stop));
    return bytes / (best * 1e-3) * 1e-9;
}

static void test_throughput(void)
{
    const size_t bytes = (size_t)256 << 20;
    unsigned char *a, *b, *c;
    CUDA_OK(cudaMalloc(&a, bytes));
    CUDA_OK(cudaMalloc(&b, bytes));
    CUDA_OK(cudaMalloc(&c, bytes));
    CUDA_OK(cudaMemset(a, 0x3f, bytes)); /* finite normal values in every float dtype */
    CUDA_OK(cudaMemset(b, 0x40, bytes));
    srcs_arg_t srcs;
    memset(&srcs, 0, sizeof srcs);
    srcs.p[0] = a;
    srcs.p[1] = b;
    static const int dtypes[2] = {WEFT_FLOAT32, WEFT_BFLOAT16};
    for (int i = 0; i < 2; i++) {
        int dt = dtypes[i];
        size_t count = bytes / dtype_sizes[dt];
        printf("throughput: %-8s sum 2 x 256 MiB  %7.1f GB/s weft_dev_reduce_typed, %7.1f GB/s "
               "weft_dev_reduce (2 reads + 1 write)\n",
               dtype_names[dt], bench(0, c, srcs, count, dt, 3.0 * (double)bytes),
               bench(1, c, srcs, count, dt, 3.0 * (double)bytes));
    }
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
    CUDA_OK(cudaFree(c));

    const size_t big = (size_t)1 << 30;
    CUDA_OK(cudaMalloc(&a, big));
    CUDA_OK(cudaMalloc(&b, big));
    CUDA_OK(cudaMemset(a, 0x5a, big));
    srcs.p[0] = a;
    printf("throughput: copy 1 GiB                 %7.1f GB/s (read + write)\n",
           bench(2, b, srcs, big, 0, 2.0 * (double)big));
    CUDA_OK(cudaFree(a));
    CUDA_OK(cudaFree(b));
}

int main(int argc, char **argv)
{
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
        (err == cudaSuccess && ndev == 0)) {
        printf("SKIP: no CUDA device\n");
        return SKIP_STATUS;
    }
    if (err != cudaSuccess) { /* only a machine without a GPU (or driver) skips */
        printf("FAIL: cudaGetDeviceCount: %s\n", cudaGetErrorString(err));
        return 1;
    }
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : weft_now_ns();
    printf("test_reduce_cuda: seed %" PRIu64 " (rerun with: test_reduce_cuda %" PRIu64 ")\n", seed,
           seed);
    rng_state = seed;
    cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    printf("test_reduce_cuda: device 0: %s\n", prop.name);

    test_widen(0);
    test_widen(1);
    test_narrow(0);
    test_narrow(1);
    test_reductions();
    test_copy_sizes();
    test_copy_large();
    test_copy_fanout();
    test_throughput();

    if (failures > CHECK_MAX_REPORTS)
        printf("... %d more failures not printed\n", failures - CHECK_MAX_REPORTS);
    printf("test_reduce_cuda: %zu elements had two NaN operands in one step and matched the "
           "documented device result where the host differed\n",
           nan_pairs_accepted);
    printf("test_reduce_cuda: %s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
