/*
 * reduce_cuda.cuh - device-side data primitives of the CUDA collective kernels: a copy, and an
 * element-wise reduction of several sources into one destination, for every dtype and reduction
 * op. Header-only CUDA C++, included by the backend's .cu files.
 *
 * Semantics are those of reduce_host.h, and the results are bit-identical to weft_reduce_host
 * on the same inputs wherever the host's result is itself defined:
 * - integers reduce in their own type, SUM/PROD wrapping around (signed types computed in the
 *   unsigned type of the same width); AVG truncates toward zero;
 * - float32 and float64 reduce in their own type, float16 and bfloat16 in float32 with one
 *   rounding to nearest even at the end; AVG divides the sum in the accumulation type;
 * - MAX/MIN keep the earlier value unless a later source compares strictly greater / smaller
 *   or, on floats, is not NaN where the earlier value is (a NaN is ignored unless every source
 *   holds one, as fmaxf/fminf); pure selection: NaN and signed-zero bits pass through unchanged;
 * - sources are combined in order srcs[0], srcs[1], ...
 * NaN results of float arithmetic follow the host (x86-64 SSE) rules rather than the GPU's
 * canonical NaN: a NaN operand is returned with its quiet bit set and its payload kept, and an
 * invalid operation on non-NaN operands (inf - inf, 0 * inf) gives the default NaN, sign bit set
 * (0xffc00000 for float32). When both operands of one operation are NaN, x86 returns its first
 * operand and the host compiler orders the operands freely (its vectorised loops and scalar
 * tails differ), so the host's payload is not defined there; this code returns the accumulator's
 * (the earlier sources'). 16-bit conversions are those of the host (weft_float_to_half ...):
 * NaNs come out quiet with the top of their payload, where the CUDA intrinsics (__half2float,
 * __float2half_rn, __float2bfloat16_rn) would return a canonical NaN. Float arithmetic and
 * comparisons are written in inline PTX without .ftz, so neither -ftz=true, --use_fast_math nor
 * FMA contraction in the including file changes a result: subnormals are always kept.
 *
 * Speed. The hot loops use plain IEEE arithmetic and the conversion instructions (two elements
 * per instruction when narrowing to 16 bits), which are exact for every non-NaN value; each
 * vector of results is tested for NaN at once (a compare per two elements), and a vector that
 * holds one is redone element by element with the NaN rules above. NaNs thus cost time only
 * where they occur. weft_dev_reduce holds the loops of every dtype and op, and a kernel calling
 * it needs 75 to 106 registers per thread (by caller) unless bounded: declare such kernels with
 * __launch_bounds__(256, 4) (64 registers; the few spills fall in rarely used paths). Kernels
 * templated on the dtype and op can call weft_dev_reduce_typed, which needs 50-76 registers by
 * dtype. Measured on an H200, SUM of two 256 MiB sources by a full grid (2 reads + 1 write):
 * weft_dev_reduce_typed 3.9-4.0 TB/s for float32, float64, float16 and bfloat16;
 * weft_dev_reduce with those bounds about 4.0 TB/s (float32, bfloat16) and 3.7 TB/s (float16),
 * without them 3.2-3.6 TB/s for the 16-bit floats; device-to-device cudaMemcpy 4.2 TB/s.
 *
 * Work partition. Each call is made by a group of nthreads threads (possibly spread over several
 * blocks) that the caller chose, each passing its index tid in [0, nthreads) and otherwise the
 * same arguments. A call returns when the calling thread's share is done; nothing inside
 * synchronises, so the caller orders the group's completion with later readers (a barrier, a
 * flag). Callers partition larger jobs themselves (a range of elements per group of blocks) by
 * offsetting the pointers. Element (byte) i is read and written by exactly one thread of the
 * group, which reads it from every source before writing it: dst may therefore alias any source
 * exactly (in place), but must not overlap one partially.
 *
 * Memory and alignment. Every data pointer addresses global memory: the local GPU's or a peer's
 * mapped into this address space (never shared or local memory); the srcs array itself may live
 * anywhere. Loads are plain weak ld.global (cached, never .nc: peer data is written by other GPUs
 * between calls); the caller's acquire makes them see a peer's stores. Reduction pointers must be
 * aligned to the element size. Vectors are 16 bytes (uint4):
 * - weft_dev_reduce uses them when dst and every source have the same address modulo 16: a
 *   scalar head of under 16 bytes brings them to 16-byte alignment, then each thread reduces 16
 *   bytes of every source per step (4 float32, 8 float16, 16 int8 ...), then a scalar tail.
 *   Otherwise every element takes the scalar path (several times slower for small types), so
 *   callers should keep buffers 16-byte aligned and cut ranges at multiples of 16 bytes.
 * - weft_dev_copy uses the widest unit (16, 8, 4, 2 or 1 bytes) that divides dst - src, after a
 *   head that aligns dst to it, then a tail of single bytes.
 *
 * Thread safety: pure device functions of their arguments; no state.
 */
#ifndef WEFT_EXEC_REDUCE_CUDA_CUH
#define WEFT_EXEC_REDUCE_CUDA_CUH

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "weft.h"

/* Units each thread keeps in flight per loop step (loads issued before the first use). The
 * reduction unrolls fewer units when each holds many accumulator registers (weft_dev_unit), so
 * that no dtype needs many more than 64 registers per thread. */
#define WEFT_DEV_COPY_UNROLL 4
#define WEFT_DEV_REDUCE_UNROLL_MAX 4
#define WEFT_DEV_REDUCE_UNROLL_REGS 16 /* accumulator registers per thread across its units */

/* ---------------------------------------------------------------------------------------------
 * Global memory access: plain weak loads and stores of W-byte units.
 * ------------------------------------------------------------------------------------------- */

template <int W> struct weft_dev_raw;
template <> struct weft_dev_raw<1> {
    typedef uint8_t type;
};
template <> struct weft_dev_raw<2> {
    typedef uint16_t type;
};
template <> struct weft_dev_raw<4> {
    typedef uint32_t type;
};
template <> struct weft_dev_raw<8> {
    typedef uint2 type;
};
template <> struct weft_dev_raw<16> {
    typedef uint4 type;
};

/* *p, a unit of type R from global memory (p aligned to sizeof(R)), with ld.global. */
template <typename R> static __device__ __forceinline__ R weft_dev_load(const void *p)
{
    __builtin_assume(__isGlobal(p));
    return *(const R *)p;
}

/* *p = v, to global memory (p aligned to sizeof(R)), with st.global. */
template <typename R> static __device__ __forceinline__ void weft_dev_store(void *p, R v)
{
    __builtin_assume(__isGlobal(p));
    *(R *)p = v;
}

/* ---------------------------------------------------------------------------------------------
 * 16-bit float conversions, bit-identical to reduce_host.h's (exact widening, narrowing to
 * nearest even, NaNs quiet with the top of their payload). The conversion instructions handle
 * every non-NaN value exactly as IEEE specifies (no .ftz: subnormals kept); NaNs are rebuilt.
 * ------------------------------------------------------------------------------------------- */

/* IEEE binary16 bits to float32 by the conversion instruction: exact, except that a NaN becomes
 * the canonical NaN (payload lost). */
static __device__ __forceinline__ float weft_dev_half_to_float_nonan(uint16_t h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

/* IEEE binary16 bits to float32, exactly. */
static __device__ __forceinline__ float weft_dev_half_to_float(uint16_t h)
{
    uint32_t em = h & 0x7fffu; /* exponent and mantissa */
    uint32_t nan = ((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | (em << 13);
    return em > 0x7c00u ? __uint_as_float(nan) : weft_dev_half_to_float_nonan(h);
}

/* float32 to IEEE binary16 bits, rounded to nearest even (overflow to infinity). */
static __device__ __forceinline__ uint16_t weft_dev_float_to_half(float f)
{
    uint16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    uint32_t x = __float_as_uint(f);
    uint32_t nan = ((x >> 16) & 0x8000u) | 0x7e00u | ((x >> 13) & 0x03ffu);
    return (x & 0x7fffffffu) > 0x7f800000u ? (uint16_t)nan : h;
}

/* bfloat16 bits to float32, exactly. */
static __device__ __forceinline__ float weft_dev_bf16_to_float(uint16_t b)
{
    uint32_t quiet = (b & 0x7fffu) > 0x7f80u ? 0x00400000u : 0u;
    return __uint_as_float(((uint32_t)b << 16) | quiet);
}

/* float32 to bfloat16 bits, rounded to nearest even: the carry of the rounding increment turns
 * values from the largest bfloat16 plus half an ulp up into infinity. */
static __device__ __forceinline__ uint16_t weft_dev_float_to_bf16(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    uint32_t nan = (x >> 16) | 0x0040u;
    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* Two float32 values that are not NaN to 16-bit bits, lo in bits 0-15 and hi in bits 16-31,
 * rounded to nearest even: the same bits as two weft_dev_float_to_half / _bf16, in one
 * instruction from sm_80 on. */
static __device__ __forceinline__ uint32_t weft_dev_float2_to_half2_nonan(float lo, float hi)
{
#if __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint32_t)weft_dev_float_to_half(lo) | (uint32_t)weft_dev_float_to_half(hi) << 16;
#endif
}

static __device__ __forceinline__ uint32_t weft_dev_float2_to_bf162_nonan(float lo, float hi)
{
#if __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
#else
    return (uint32_t)weft_dev_float_to_bf16(lo) | (uint32_t)weft_dev_float_to_bf16(hi) << 16;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * Float arithmetic: IEEE round to nearest even with subnormals kept (the _rn forms), and the
 * exact forms whose NaN results follow the x86 rules (file comment), a being the accumulator.
 * ------------------------------------------------------------------------------------------- */

static __device__ __forceinline__ float weft_dev_add_rn(float a, float b)
{
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

static __device__ __forceinline__ float weft_dev_mul_rn(float a, float b)
{
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

static __device__ __forceinline__ float weft_dev_div_rn(float a, float b)
{
    float r;
    asm("div.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

/* float64 has no flush-to-zero mode; the _rn intrinsics are never contracted into an FMA. */
static __device__ __forceinline__ double weft_dev_add_rn(double a, double b)
{
    return __dadd_rn(a, b);
}

static __device__ __forceinline__ double weft_dev_mul_rn(double a, double b)
{
    return __dmul_rn(a, b);
}

static __device__ __forceinline__ double weft_dev_div_rn(double a, double b)
{
    return __ddiv_rn(a, b);
}

/* r = a op b as IEEE computes it, turned into the x86 result when it is NaN. */
static __device__ __forceinline__ float weft_dev_nan_fix(float r, float a, float b)
{
    uint32_t ur = __float_as_uint(r);
    if ((ur & 0x7fffffffu) > 0x7f800000u) {
        uint32_t ua = __float_as_uint(a);
        uint32_t ub = __float_as_uint(b);
        ur = (ua & 0x7fffffffu) > 0x7f800000u   ? ua | 0x00400000u
             : (ub & 0x7fffffffu) > 0x7f800000u ? ub | 0x00400000u
                                                : 0xffc00000u;
    }
    return __uint_as_float(ur);
}

static __device__ __forceinline__ double weft_dev_nan_fix(double r, double a, double b)
{
    const uint64_t abs_mask = 0x7fffffffffffffffull;
    const uint64_t inf = 0x7ff0000000000000ull;
    uint64_t ur = (uint64_t)__double_as_longlong(r);
    if ((ur & abs_mask) > inf) {
        uint64_t ua = (uint64_t)__double_as_longlong(a);
        uint64_t ub = (uint64_t)__double_as_longlong(b);
        ur = (ua & abs_mask) > inf   ? ua | 0x0008000000000000ull
             : (ub & abs_mask) > inf ? ub | 0x0008000000000000ull
                                     : 0xfff8000000000000ull;
    }
    return __longlong_as_double((long long)ur);
}

/* True when any of v[0..n) is a NaN: an unordered compare per pair, which nvcc keeps under
 * --use_fast_math (that flag does not let the compiler assume the absence of NaNs). */
template <typename A, int n> static __device__ __forceinline__ bool weft_dev_any_nan(const A *v)
{
    bool r = false;
#pragma unroll
    for (int i = 0; i < n; i++)
        r |= v[i] != v[i];
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * Operators on the accumulation type: a is the accumulator (earlier sources), b the next
 * source. apply is exact; fast (floats only) is apply without the NaN rules. Integer SUM/PROD
 * wrap around through the unsigned type.
 * ------------------------------------------------------------------------------------------- */

template <typename T> static __device__ __forceinline__ T weft_dev_sum(T a, T b)
{
    typedef typename std::make_unsigned<T>::type U;
    return (T)(U)((U)a + (U)b);
}

template <typename T> static __device__ __forceinline__ T weft_dev_prod(T a, T b)
{
    typedef typename std::make_unsigned<T>::type U;
    return (T)(U)((U)a * (U)b);
}

template <typename T> static __device__ __forceinline__ T weft_dev_max(T a, T b)
{
    return b > a ? b : a;
}

template <typename T> static __device__ __forceinline__ T weft_dev_min(T a, T b)
{
    return b < a ? b : a;
}

static __device__ __forceinline__ float weft_dev_sum(float a, float b)
{
    return weft_dev_nan_fix(weft_dev_add_rn(a, b), a, b);
}

static __device__ __forceinline__ float weft_dev_prod(float a, float b)
{
    return weft_dev_nan_fix(weft_dev_mul_rn(a, b), a, b);
}

static __device__ __forceinline__ double weft_dev_sum(double a, double b)
{
    return weft_dev_nan_fix(weft_dev_add_rn(a, b), a, b);
}

static __device__ __forceinline__ double weft_dev_prod(double a, double b)
{
    return weft_dev_nan_fix(weft_dev_mul_rn(a, b), a, b);
}

/* Float MAX/MIN as compares and a select in PTX, so that no compiler flag can turn them into a
 * max/min instruction (which orders signed zeros and makes NaNs canonical): b is taken where
 * "b > a or unordered" (gtu; ltu for MIN) holds and b is a number (num), that is where b > a,
 * or where a is NaN and b is not. */
static __device__ __forceinline__ float weft_dev_max(float a, float b)
{
    float r;
    asm("{\n\t.reg .pred p, q;\n\tsetp.gtu.f32 p, %2, %1;\n\tsetp.num.f32 q, %2, %2;\n\t"
        "and.pred p, p, q;\n\tselp.f32 %0, %2, %1, p;\n\t}"
        : "=f"(r)
        : "f"(a), "f"(b));
    return r;
}

static __device__ __forceinline__ float weft_dev_min(float a, float b)
{
    float r;
    asm("{\n\t.reg .pred p, q;\n\tsetp.ltu.f32 p, %2, %1;\n\tsetp.num.f32 q, %2, %2;\n\t"
        "and.pred p, p, q;\n\tselp.f32 %0, %2, %1, p;\n\t}"
        : "=f"(r)
        : "f"(a), "f"(b));
    return r;
}

static __device__ __forceinline__ double weft_dev_max(double a, double b)
{
    double r;
    asm("{\n\t.reg .pred p, q;\n\tsetp.gtu.f64 p, %2, %1;\n\tsetp.num.f64 q, %2, %2;\n\t"
        "and.pred p, p, q;\n\tselp.f64 %0, %2, %1, p;\n\t}"
        : "=d"(r)
        : "d"(a), "d"(b));
    return r;
}

static __device__ __forceinline__ double weft_dev_min(double a, double b)
{
    double r;
    asm("{\n\t.reg .pred p, q;\n\tsetp.ltu.f64 p, %2, %1;\n\tsetp.num.f64 q, %2, %2;\n\t"
        "and.pred p, p, q;\n\tselp.f64 %0, %2, %1, p;\n\t}"
        : "=d"(r)
        : "d"(a), "d"(b));
    return r;
}

template <int Op> struct weft_dev_op;
template <> struct weft_dev_op<WEFT_SUM> {
    template <typename A> static __device__ __forceinline__ A apply(A a, A b)
    {
        return weft_dev_sum(a, b);
    }
    template <typename A> static __device__ __forceinline__ A fast(A a, A b)
    {
        return weft_dev_add_rn(a, b);
    }
};
template <> struct weft_dev_op<WEFT_PROD> {
    template <typename A> static __device__ __forceinline__ A apply(A a, A b)
    {
        return weft_dev_prod(a, b);
    }
    template <typename A> static __device__ __forceinline__ A fast(A a, A b)
    {
        return weft_dev_mul_rn(a, b);
    }
};
template <> struct weft_dev_op<WEFT_MAX> {
    template <typename A> static __device__ __forceinline__ A apply(A a, A b)
    {
        return weft_dev_max(a, b);
    }
};
template <> struct weft_dev_op<WEFT_MIN> {
    template <typename A> static __device__ __forceinline__ A apply(A a, A b)
    {
        return weft_dev_min(a, b);
    }
};
template <> struct weft_dev_op<WEFT_AVG> : weft_dev_op<WEFT_SUM> {
};

/* AVG's division by divisor >= 1: integers truncate toward zero (8-bit values divide as int,
 * since the divisor may not fit their type), floats divide in their own type by the divisor
 * rounded to it (to nearest even, as on the host). */
static __device__ __forceinline__ int8_t weft_dev_divide(int8_t a, int divisor)
{
    return (int8_t)((int)a / divisor);
}

static __device__ __forceinline__ uint8_t weft_dev_divide(uint8_t a, int divisor)
{
    return (uint8_t)((int)a / divisor);
}

static __device__ __forceinline__ int32_t weft_dev_divide(int32_t a, int divisor)
{
    return a / divisor;
}

static __device__ __forceinline__ uint32_t weft_dev_divide(uint32_t a, int divisor)
{
    return a / (uint32_t)divisor;
}

static __device__ __forceinline__ int64_t weft_dev_divide(int64_t a, int divisor)
{
    return a / (int64_t)divisor;
}

static __device__ __forceinline__ uint64_t weft_dev_divide(uint64_t a, int divisor)
{
    return a / (uint64_t)divisor;
}

static __device__ __forceinline__ float weft_dev_divide(float a, int divisor)
{
    float d = (float)divisor;
    return weft_dev_nan_fix(weft_dev_div_rn(a, d), a, d);
}

static __device__ __forceinline__ double weft_dev_divide(double a, int divisor)
{
    double d = (double)divisor;
    return weft_dev_nan_fix(weft_dev_div_rn(a, d), a, d);
}

/* The division without the NaN rules (floats only). */
template <typename A> static __device__ __forceinline__ A weft_dev_divide_fast(A a, int divisor)
{
    return weft_dev_div_rn(a, (A)divisor);
}

/* SUM/MAX/MIN on four packed 8-bit lanes (SIMD within a 32-bit word); the same results as the
 * per-lane operators, in a few instructions per word. */
template <int Op, bool Signed>
static __device__ __forceinline__ uint32_t weft_dev_op8x4(uint32_t a, uint32_t b)
{
    static_assert(Op == WEFT_SUM || Op == WEFT_MAX || Op == WEFT_MIN, "no packed form");
    if (Op == WEFT_SUM)
        return __vadd4(a, b);
    if (Op == WEFT_MAX)
        return Signed ? __vmaxs4(a, b) : __vmaxu4(a, b);
    return Signed ? __vmins4(a, b) : __vminu4(a, b);
}

/* ---------------------------------------------------------------------------------------------
 * Element types: E the stored type, A the accumulation type. widen and narrow are exact (the
 * host's conversions); widen_nonan is exact except on NaNs, whose payload it may lose (only
 * where nan_exact is false); narrow2_nonan narrows two values that are not NaN into a word.
 * ------------------------------------------------------------------------------------------- */

template <typename T> struct weft_dev_native {
    typedef T elem;
    typedef T acc;
    static constexpr bool nan_exact = true;
    static __device__ __forceinline__ T widen(T x) { return x; }
    static __device__ __forceinline__ T widen_nonan(T x) { return x; }
    static __device__ __forceinline__ T narrow(T x) { return x; }
};

struct weft_dev_float16 {
    typedef uint16_t elem;
    typedef float acc;
    static constexpr bool nan_exact = false;
    static __device__ __forceinline__ float widen(uint16_t x) { return weft_dev_half_to_float(x); }
    static __device__ __forceinline__ float widen_nonan(uint16_t x)
    {
        return weft_dev_half_to_float_nonan(x);
    }
    static __device__ __forceinline__ uint16_t narrow(float x) { return weft_dev_float_to_half(x); }
    static __device__ __forceinline__ uint32_t narrow2_nonan(float lo, float hi)
    {
        return weft_dev_float2_to_half2_nonan(lo, hi);
    }
};

/* widen_nonan keeps a NaN's payload but not its quiet bit: every path that outputs a NaN sets
 * the quiet bit again (weft_dev_nan_fix, weft_dev_float_to_bf16), so the results are those of
 * widen. */
struct weft_dev_bfloat16 {
    typedef uint16_t elem;
    typedef float acc;
    static constexpr bool nan_exact = true;
    static __device__ __forceinline__ float widen(uint16_t x) { return weft_dev_bf16_to_float(x); }
    static __device__ __forceinline__ float widen_nonan(uint16_t x)
    {
        return __uint_as_float((uint32_t)x << 16);
    }
    static __device__ __forceinline__ uint16_t narrow(float x) { return weft_dev_float_to_bf16(x); }
    static __device__ __forceinline__ uint32_t narrow2_nonan(float lo, float hi)
    {
        return weft_dev_float2_to_bf162_nonan(lo, hi);
    }
};

template <int Dtype> struct weft_dev_dtype;
template <> struct weft_dev_dtype<WEFT_INT8> : weft_dev_native<int8_t> {
};
template <> struct weft_dev_dtype<WEFT_UINT8> : weft_dev_native<uint8_t> {
};
template <> struct weft_dev_dtype<WEFT_INT32> : weft_dev_native<int32_t> {
};
template <> struct weft_dev_dtype<WEFT_UINT32> : weft_dev_native<uint32_t> {
};
template <> struct weft_dev_dtype<WEFT_INT64> : weft_dev_native<int64_t> {
};
template <> struct weft_dev_dtype<WEFT_UINT64> : weft_dev_native<uint64_t> {
};
template <> struct weft_dev_dtype<WEFT_FLOAT16> : weft_dev_float16 {
};
template <> struct weft_dev_dtype<WEFT_BFLOAT16> : weft_dev_bfloat16 {
};
template <> struct weft_dev_dtype<WEFT_FLOAT32> : weft_dev_native<float> {
};
template <> struct weft_dev_dtype<WEFT_FLOAT64> : weft_dev_native<double> {
};

/* ---------------------------------------------------------------------------------------------
 * Reduction of one W-byte unit (W / sizeof(elem) elements) over the sources: init with srcs[0],
 * fold each later source in order, finish (AVG's division, narrowing) into the unit to store.
 * ------------------------------------------------------------------------------------------- */

template <typename D, int Op, int W> struct weft_dev_unit {
    typedef typename weft_dev_raw<W>::type raw;
    typedef typename D::elem E;
    typedef typename D::acc A;
    static constexpr int n = W / (int)sizeof(E);
    /* 8-bit SUM/MAX/MIN on whole words stay packed; everything else goes element by element. */
    static constexpr bool packed =
        sizeof(E) == 1 && W >= 4 && (Op == WEFT_SUM || Op == WEFT_MAX || Op == WEFT_MIN);
    static constexpr int nw = packed ? W / 4 : 1;
    static constexpr bool is_float = std::is_floating_point<A>::value;
    /* Float results that may be NaN by arithmetic: checked per unit (file comment). */
    static constexpr bool arith_nan = is_float && Op != WEFT_MAX && Op != WEFT_MIN;
    /* 16-bit floats narrowed two at a time when the unit has pairs. */
    static constexpr bool narrow_pairs = is_float && sizeof(E) == 2 && n >= 2;
    /* Units per loop step: 4 float32 or float64 units, 2 of 16-bit floats, 1 of unpacked int8. */
    static constexpr int regs = packed ? nw : n * (((int)sizeof(A) + 3) / 4);
    static constexpr int unroll = WEFT_DEV_REDUCE_UNROLL_REGS / regs < 1 ? 1
                                  : WEFT_DEV_REDUCE_UNROLL_REGS / regs > WEFT_DEV_REDUCE_UNROLL_MAX
                                      ? WEFT_DEV_REDUCE_UNROLL_MAX
                                      : WEFT_DEV_REDUCE_UNROLL_REGS / regs;

    A a[packed ? 1 : n];
    uint32_t w[nw];

    __device__ __forceinline__ void init(raw r)
    {
        if constexpr (packed) {
            memcpy(w, &r, W);
        } else {
            E e[n];
            memcpy(e, &r, W);
#pragma unroll
            for (int i = 0; i < n; i++)
                a[i] = D::widen_nonan(e[i]);
            if constexpr (!D::nan_exact) {
                if (weft_dev_any_nan<A, n>(a)) {
#pragma unroll
                    for (int i = 0; i < n; i++)
                        a[i] = D::widen(e[i]);
                }
            }
        }
    }

    __device__ __forceinline__ void fold(raw r)
    {
        if constexpr (packed) {
            uint32_t b[nw];
            memcpy(b, &r, W);
#pragma unroll
            for (int i = 0; i < nw; i++)
                w[i] = weft_dev_op8x4<Op, std::is_signed<E>::value>(w[i], b[i]);
        } else if constexpr (arith_nan) {
            E e[n];
            A t[n];
            memcpy(e, &r, W);
#pragma unroll
            for (int i = 0; i < n; i++)
                t[i] = weft_dev_op<Op>::fast(a[i], D::widen_nonan(e[i]));
            if (weft_dev_any_nan<A, n>(t)) {
#pragma unroll
                for (int i = 0; i < n; i++)
                    t[i] = weft_dev_op<Op>::apply(a[i], D::widen(e[i]));
            }
#pragma unroll
            for (int i = 0; i < n; i++)
                a[i] = t[i];
        } else {
            /* Integers, and float MAX/MIN: a NaN source is never selected, so its widening
             * need not keep its payload. */
            E e[n];
            memcpy(e, &r, W);
#pragma unroll
            for (int i = 0; i < n; i++)
                a[i] = weft_dev_op<Op>::apply(a[i], D::widen_nonan(e[i]));
        }
    }

    __device__ __forceinline__ raw finish(int avg_divisor)
    {
        raw r;
        if constexpr (packed) {
            memcpy(&r, w, W);
            return r;
        } else {
            if constexpr (Op == WEFT_AVG && is_float) {
                A t[n];
#pragma unroll
                for (int i = 0; i < n; i++)
                    t[i] = weft_dev_divide_fast(a[i], avg_divisor);
                if (weft_dev_any_nan<A, n>(t)) {
#pragma unroll
                    for (int i = 0; i < n; i++)
                        t[i] = weft_dev_divide(a[i], avg_divisor);
                }
#pragma unroll
                for (int i = 0; i < n; i++)
                    a[i] = t[i];
            } else if constexpr (Op == WEFT_AVG) {
#pragma unroll
                for (int i = 0; i < n; i++)
                    a[i] = weft_dev_divide(a[i], avg_divisor);
            }
            E e[n];
            if constexpr (narrow_pairs) {
                if (!weft_dev_any_nan<A, n>(a)) {
                    uint32_t pw[n / 2];
#pragma unroll
                    for (int i = 0; i < n / 2; i++)
                        pw[i] = D::narrow2_nonan(a[2 * i], a[2 * i + 1]);
                    memcpy(&r, pw, W);
                    return r;
                }
            }
#pragma unroll
            for (int i = 0; i < n; i++)
                e[i] = D::narrow(a[i]);
            memcpy(&r, e, W);
            return r;
        }
    }
};

/* Units j in [0, n) of W bytes, unit j at byte offset base + (j < split ? j : j + jump) * W of
 * dst and of every source (the jump lets one loop take a head and a tail), done by the thread with
 * tid == j mod nthreads. Each step takes weft_dev_unit::unroll units, issuing the loads of all
 * of them from one source before folding them. A unit past n reloads the step's first unit
 * (always below n) and stores nothing, so one copy of the loop body serves every step and no load
 * is predicated: with predicated loads the compiler sank each unit's loads after the previous
 * unit's fold on MAX, which cost the two-GPU all-reduce 21-28% of its bandwidth (s19 call A). */
template <typename D, int Op, int W>
static __device__ __forceinline__ void
weft_dev_reduce_units(char *dst, const void *const *srcs, int nsrcs, size_t base, size_t n,
                      size_t split, size_t jump, int avg_divisor, size_t tid, size_t nthreads)
{
    typedef weft_dev_unit<D, Op, W> unit_t;
    typedef typename unit_t::raw raw;
    const int unroll = unit_t::unroll;
    for (size_t u = tid; u < n; u += unroll * nthreads) {
        size_t off[unroll];
        bool live[unroll];
        unit_t acc[unroll];
#pragma unroll
        for (int k = 0; k < unroll; k++) {
            size_t j = u + k * nthreads;
            live[k] = j < n; /* unit 0 always is: j = u < n */
            off[k] = live[k] ? base + (j < split ? j : j + jump) * W : off[0];
        }
        const char *s0 = (const char *)srcs[0];
#pragma unroll
        for (int k = 0; k < unroll; k++)
            acc[k].init(weft_dev_load<raw>(s0 + off[k]));
        for (int s = 1; s < nsrcs; s++) {
            const char *sp = (const char *)srcs[s];
            raw r[unroll];
#pragma unroll
            for (int k = 0; k < unroll; k++)
                r[k] = weft_dev_load<raw>(sp + off[k]);
#pragma unroll
            for (int k = 0; k < unroll; k++)
                acc[k].fold(r[k]);
        }
#pragma unroll
        for (int k = 0; k < unroll; k++) {
            raw out = acc[k].finish(avg_divisor);
            if (live[k])
                weft_dev_store<raw>(dst + off[k], out);
        }
    }
}

/* weft_dev_reduce for a dtype and op known at compile time (Dtype a weft_dtype_t, Op a
 * weft_redop_t value); same contract. */
template <int Dtype, int Op>
static __device__ __forceinline__ void
weft_dev_reduce_typed(void *dst, const void *const *srcs, int nsrcs, size_t count, int avg_divisor,
                      size_t tid, size_t nthreads)
{
    typedef weft_dev_dtype<Dtype> D;
    const size_t esize = sizeof(typename D::elem);
    char *d = (char *)dst;
    uintptr_t mismatch = 0;
    for (int s = 0; s < nsrcs; s++)
        mismatch |= (uintptr_t)srcs[s] ^ (uintptr_t)d;
    /* Elements [0, head) and [tail, count) scalar, the rest in 16-byte vectors. */
    size_t head = count;
    size_t nvec = 0;
    if ((mismatch & 15) == 0) {
        head = (size_t)((0 - (uintptr_t)d) & 15) / esize;
        if (head > count)
            head = count;
        nvec = (count - head) * esize / 16;
    }
    size_t tail = head + nvec * (16 / esize);
    weft_dev_reduce_units<D, Op, 16>(d, srcs, nsrcs, head * esize, nvec, nvec, 0, avg_divisor, tid,
                                     nthreads);
    /* Head and tail in one scalar loop: element j < head is j, the others tail + j - head. */
    weft_dev_reduce_units<D, Op, (int)sizeof(typename D::elem)>(
        d, srcs, nsrcs, 0, head + (count - tail), head, tail - head, avg_divisor, tid, nthreads);
}

template <int Dtype>
static __device__ __forceinline__ void
weft_dev_reduce_dtype(void *dst, const void *const *srcs, int nsrcs, size_t count, int op,
                      int avg_divisor, size_t tid, size_t nthreads)
{
    switch (op) {
    case WEFT_SUM:
        weft_dev_reduce_typed<Dtype, WEFT_SUM>(dst, srcs, nsrcs, count, 0, tid, nthreads);
        break;
    case WEFT_PROD:
        weft_dev_reduce_typed<Dtype, WEFT_PROD>(dst, srcs, nsrcs, count, 0, tid, nthreads);
        break;
    case WEFT_MAX:
        weft_dev_reduce_typed<Dtype, WEFT_MAX>(dst, srcs, nsrcs, count, 0, tid, nthreads);
        break;
    case WEFT_MIN:
        weft_dev_reduce_typed<Dtype, WEFT_MIN>(dst, srcs, nsrcs, count, 0, tid, nthreads);
        break;
    case WEFT_AVG:
        weft_dev_reduce_typed<Dtype, WEFT_AVG>(dst, srcs, nsrcs, count, avg_divisor, tid, nthreads);
        break;
    }
}

/* dst[i] = op(srcs[0][i], ..., srcs[nsrcs-1][i]) for i < count, divided by avg_divisor (>= 1)
 * for WEFT_AVG; semantics, alignment, work partition and launch bounds in the file comment.
 * nsrcs >= 1; dtype (a weft_dtype_t) and op (a weft_redop_t) must be valid: others do nothing.
 * The dtype and op are dispatched once per call; not inlined, since it holds the loops of every
 * dtype and op (one copy per translation unit; a call per group and range costs nothing next to
 * the loops). */
static __device__ __noinline__ void weft_dev_reduce(void *dst, const void *const *srcs, int nsrcs,
                                                    size_t count, int dtype, int op,
                                                    int avg_divisor, size_t tid, size_t nthreads)
{
    switch (dtype) {
    case WEFT_INT8:
        weft_dev_reduce_dtype<WEFT_INT8>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_UINT8:
        weft_dev_reduce_dtype<WEFT_UINT8>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_INT32:
        weft_dev_reduce_dtype<WEFT_INT32>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_UINT32:
        weft_dev_reduce_dtype<WEFT_UINT32>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_INT64:
        weft_dev_reduce_dtype<WEFT_INT64>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_UINT64:
        weft_dev_reduce_dtype<WEFT_UINT64>(dst, srcs, nsrcs, count, op, avg_divisor, tid, nthreads);
        break;
    case WEFT_FLOAT16:
        weft_dev_reduce_dtype<WEFT_FLOAT16>(dst, srcs, nsrcs, count, op, avg_divisor, tid,
                                            nthreads);
        break;
    case WEFT_BFLOAT16:
        weft_dev_reduce_dtype<WEFT_BFLOAT16>(dst, srcs, nsrcs, count, op, avg_divisor, tid,
                                             nthreads);
        break;
    case WEFT_FLOAT32:
        weft_dev_reduce_dtype<WEFT_FLOAT32>(dst, srcs, nsrcs, count, op, avg_divisor, tid,
                                            nthreads);
        break;
    case WEFT_FLOAT64:
        weft_dev_reduce_dtype<WEFT_FLOAT64>(dst, srcs, nsrcs, count, op, avg_divisor, tid,
                                            nthreads);
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Copy.
 * ------------------------------------------------------------------------------------------- */

/* Units [0, n) of W bytes from src to dst (both aligned to W), unit u by the thread with
 * tid == u mod nthreads, WEFT_DEV_COPY_UNROLL loads in flight per step. */
template <int W>
static __device__ __forceinline__ void weft_dev_copy_units(char *dst, const char *src, size_t n,
                                                           size_t tid, size_t nthreads)
{
    typedef typename weft_dev_raw<W>::type raw;
    const int unroll = WEFT_DEV_COPY_UNROLL;
    size_t u = tid;
    for (; u + (unroll - 1) * nthreads < n; u += unroll * nthreads) {
        raw r[unroll];
#pragma unroll
        for (int k = 0; k < unroll; k++)
            r[k] = weft_dev_load<raw>(src + (u + k * nthreads) * W);
#pragma unroll
        for (int k = 0; k < unroll; k++)
            weft_dev_store<raw>(dst + (u + k * nthreads) * W, r[k]);
    }
    for (; u < n; u += nthreads)
        weft_dev_store<raw>(dst + u * W, weft_dev_load<raw>(src + u * W));
}

/* Copies bytes bytes from src to dst (any alignment; the ranges must not overlap), byte i by
 * exactly one thread of the group; alignment and work partition in the file comment. */
static __device__ __forceinline__ void weft_dev_copy(void *dst, const void *src, size_t bytes,
                                                     size_t tid, size_t nthreads)
{
    char *d = (char *)dst;
    const char *s = (const char *)src;
    /* The widest unit dividing d - s: the lowest set bit of their XOR, at most 16. */
    unsigned x = (unsigned)(((uintptr_t)d ^ (uintptr_t)s) & 15u) | 16u;
    unsigned w = x & (0u - x);
    size_t head = (size_t)((0 - (uintptr_t)d) & (w - 1));
    if (head > bytes)
        head = bytes;
    size_t n = (bytes - head) / w;
    size_t tail = head + n * w;
    switch (w) {
    case 16:
        weft_dev_copy_units<16>(d + head, s + head, n, tid, nthreads);
        break;
    case 8:
        weft_dev_copy_units<8>(d + head, s + head, n, tid, nthreads);
        break;
    case 4:
        weft_dev_copy_units<4>(d + head, s + head, n, tid, nthreads);
        break;
    case 2:
        weft_dev_copy_units<2>(d + head, s + head, n, tid, nthreads);
        break;
    default:
        weft_dev_copy_units<1>(d + head, s + head, n, tid, nthreads);
        break;
    }
    /* Head and tail bytes (fewer than 2 w): byte j < head is j, the others tail + j - head. */
    for (size_t j = tid; j < head + (bytes - tail); j += nthreads) {
        size_t i = j < head ? j : tail + j - head;
        weft_dev_store<uint8_t>(d + i, weft_dev_load<uint8_t>(s + i));
    }
}

/* Copies bytes bytes from src to dsts[k] + dst_off for every k < ndsts (no destination may
 * overlap src or another), byte i by exactly one thread of the group. When every destination
 * has src's address modulo 16, src is read once: each 16-byte unit is loaded, then stored to
 * every destination (WEFT_DEV_COPY_UNROLL units in flight); otherwise one weft_dev_copy per
 * destination. */
static __device__ __forceinline__ void weft_dev_copy_fanout(uint8_t *const *dsts, int ndsts,
                                                            uint64_t dst_off, const void *src,
                                                            size_t bytes, size_t tid,
                                                            size_t nthreads)
{
    const char *s = (const char *)src;
    bool together = true;
    for (int k = 0; k < ndsts; k++)
        together = together && (((uintptr_t)(dsts[k] + dst_off) ^ (uintptr_t)s) & 15u) == 0;
    if (!together) {
        for (int k = 0; k < ndsts; k++)
            weft_dev_copy(dsts[k] + dst_off, s, bytes, tid, nthreads);
        return;
    }
    size_t head = (size_t)((0 - (uintptr_t)s) & 15u);
    if (head > bytes)
        head = bytes;
    size_t n = (bytes - head) / 16;
    size_t tail = head + n * 16;
    const int unroll = WEFT_DEV_COPY_UNROLL;
    size_t u = tid;
    for (; u + (unroll - 1) * nthreads < n; u += unroll * nthreads) {
        uint4 r[unroll];
#pragma unroll
        for (int j = 0; j < unroll; j++)
            r[j] = weft_dev_load<uint4>(s + head + (u + j * nthreads) * 16);
        for (int k = 0; k < ndsts; k++) {
            char *d = (char *)dsts[k] + dst_off + head;
#pragma unroll
            for (int j = 0; j < unroll; j++)
                weft_dev_store<uint4>(d + (u + j * nthreads) * 16, r[j]);
        }
    }
    for (; u < n; u += nthreads) {
        uint4 v = weft_dev_load<uint4>(s + head + u * 16);
        for (int k = 0; k < ndsts; k++)
            weft_dev_store<uint4>((char *)dsts[k] + dst_off + head + u * 16, v);
    }
    for (size_t j = tid; j < head + (bytes - tail); j += nthreads) {
        size_t i = j < head ? j : tail + j - head;
        uint8_t v = weft_dev_load<uint8_t>(s + i);
        for (int k = 0; k < ndsts; k++)
            weft_dev_store<uint8_t>(dsts[k] + dst_off + i, v);
    }
}

#endif /* WEFT_EXEC_REDUCE_CUDA_CUH */
