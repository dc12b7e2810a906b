/*
 * moe_bench.cu - moe-bench: weft_moe_dispatch and weft_moe_combine against the baseline a user
 * would write with weft's own all-to-all-v, side by side in one run, on the CUDA backend,
 * bfloat16 tokens. Built with CUDA only. C written as C++ only where nvcc needs it: the kernels
 * and their launches.
 *
 *   weftrun -n N moe-bench [-T 4096] [-H 7168] [-k 8] [-E 256] [--route uniform|zipf]
 *                          [-n ITERS] [-w WARMUP] [--json FILE]
 *
 * Every rank has T tokens of H bfloat16 elements, each routed to k distinct experts of E (rank r
 * owns experts [r E/n, (r + 1) E/n)): uniform, or Zipf (expert e drawn with weight 1/(e + 1),
 * exponent 1.0, so the first ranks' experts get most tokens). A token goes to each rank that owns
 * one of its experts, once; the rows a rank receives include its own tokens. The routing is drawn
 * on the host from a fixed seed (printed), x holds integers in [-8, 8].
 *
 * Four operations, each measured on one non-blocking stream:
 *
 *   weft dispatch      weft_moe_dispatch (capacity n T rows), then weft_moe_handle kept
 *   weft combine       weft_moe_combine of y = recv_x with that handle
 *   (weft reuse        weft_moe_dispatch of x again reusing that handle's layout: WEFT_MOE_REUSE,
 *                      no routing outputs, as the backward pass sends gradients)
 *   baseline dispatch  (a) layout: a kernel computes, per destination rank, which tokens go
 *                          there and their positions (a stable scan) and the per-destination
 *                          counts; weft_all_to_all of the counts; the counts copied to the host
 *                          and the stream synchronised (the user needs them on the host for the
 *                          all-to-all-v arguments, as PyTorch's .tolist() does);
 *                      (b) permute: a kernel gathers the rows into a send buffer grouped by
 *                          destination, each token once per destination rank;
 *                      (c) weft_all_to_allv of the rows.
 *   baseline combine   weft_all_to_allv of the received rows back, then an un-permute kernel
 *                      summing each token's returned rows in float32 (in rank order) into out,
 *                      rounded once to bfloat16.
 * The baseline moves only the rows: unlike weft_moe_dispatch it delivers no expert ids, weights
 * or per-expert counts to the receivers, which favours it.
 *
 * Timing: per call, weft_barrier and cudaStreamSynchronize first, then the host clock
 * (CLOCK_MONOTONIC) from just before the call until cudaStreamSynchronize returns after it; the
 * four operations interleave in every iteration; WARMUP untimed iterations first. Reported: the
 * maximum over ranks (weft_all_reduce MAX) of each rank's median. GB/s: rows received per rank
 * (dispatch) or sent back per rank (combine, the same rows), averaged over ranks, times H times
 * 2 bytes, over that time. base/weft: the baseline's time over weft's (above 1: weft is faster).
 *
 * Check, once after the warm-up: on every rank weft's *num_recv_tokens equals the rows the
 * baseline received, weft's recv_x equals the baseline's receive buffer bit for bit (same rows,
 * same order: source rank, then source token), both combine outputs are equal, and equal to x
 * times the number of ranks each token went to (exact). A verdict line is printed; a mismatch
 * makes the exit status 1.
 *
 * Buffers come from weft_malloc (registration-on-allocation, the zero-copy path). Output: a
 * table on rank 0 (lines starting with # are comments) and, with --json FILE, one JSON object per
 * table row, one per line. Exit status: 0 on success, 1 on a failed call or a failed check, 2
 * on an argument error, 77 without a CUDA device ("SKIP: no CUDA device (<reason>)").
 *
 * Thread safety: single-threaded.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"
#include "bench_util.h"
#include "gpu_prog.h"
extern "C" {
#include "util/clock.h"
#include "util/splitmix.h"
}

#define SEED 0x6d6f652d62656e63ull /* routing and data */
#define MAX_RANKS 64               /* the kernels keep a row index per rank in shared memory */
#define MAX_TOKENS (1 << 24)
#define MAX_HIDDEN (1 << 20)
#define LAYOUT_THREADS 1024
#define ROW_THREADS 256
#define VEC 8 /* bfloat16 elements per 16-byte vector */

typedef enum { ROUTE_UNIFORM, ROUTE_ZIPF } route_t;
static const char *const route_names[] = {"uniform", "zipf"};

typedef struct setup {
    size_t T, H;
    int k, E;
    route_t route;
    int iters, warmup;
    const char *json;
} setup_t;

/* The four measured operations, the layout part of the baseline dispatch, and weft's dispatch
 * reusing a layout. */
enum {
    M_WEFT_DISPATCH,
    M_WEFT_COMBINE,
    M_BASE_DISPATCH,
    M_BASE_COMBINE,
    M_BASE_LAYOUT,
    M_WEFT_REUSE,
    NUM_M
};

/* Values reduced over ranks at the end: the medians, then rows received and its negation. */
#define NUM_VALS (NUM_M + 2)

typedef struct bench {
    const setup_t *s;
    weft_comm_t comm;
    cudaStream_t stream;
    int rank, nranks, epr;
    size_t cap; /* receive rows: n T, every token of every rank */
    /* weft_moe_dispatch / weft_moe_combine (weft_malloc) */
    __nv_bfloat16 *x, *rx, *out_w;
    int64_t *idx, *ridx, *rcnt, *nrecv;
    float *w, *rw;
    /* baseline (weft_malloc, except the host arrays) */
    int32_t *pos;       /* n x T: position of token t among those sent to rank d, or -1 */
    int64_t *cnt;       /* 2n: rows sent to each rank, then rows received from each rank */
    int64_t *h_cnt;     /* pinned host copy of cnt */
    __nv_bfloat16 *snd; /* rows grouped by destination */
    __nv_bfloat16 *rcv; /* rows grouped by source */
    __nv_bfloat16 *bck; /* rows returned by combine's all-to-all-v, grouped like snd */
    __nv_bfloat16 *out_b;
    size_t *sc, *sd, *rc, *rd; /* all-to-all-v counts and displacements (elements) */
    size_t base_rows;          /* rows the baseline received */
    /* host */
    uint16_t *h_x;    /* x as bfloat16 bits */
    int64_t *h_idx;   /* routing */
    float *h_w;       /* weights */
    uint64_t *h_dest; /* destination ranks of each token (bit mask) */
    double *t_us[NUM_M];
    double *d_vals; /* cudaMalloc, 2 x NUM_VALS: values reduced over ranks, and the results */
    FILE *json;
    char device[256];
} bench_t;

/* ---------------------------------------------------------------------------------------------
 * Kernels of the baseline
 * ------------------------------------------------------------------------------------------- */

/* Whether token t (k expert ids) goes to rank d. */
static __device__ int goes_to(const int64_t *idx, long long t, int k, int epr, int d)
{
    for (int j = 0; j < k; j++) {
        int64_t e = idx[t * k + j];
        if (e >= 0 && e / epr == d)
            return 1;
    }
    return 0;
}

/* Block d: the tokens going to rank d, in token order. pos[d T + t] = their rank among them or
 * -1; counts[d] = how many. Each thread takes a contiguous run of tokens; one block scan. */
static __global__ void layout_kernel(const int64_t *idx, long long T, int k, int epr, int32_t *pos,
                                     int64_t *counts)
{
    __shared__ int scan[LAYOUT_THREADS];
    int d = blockIdx.x, me = threadIdx.x;
    long long per = (T + blockDim.x - 1) / blockDim.x;
    long long t0 = me * per, t1 = t0 + per < T ? t0 + per : T;
    int c = 0;
    for (long long t = t0; t < t1; t++)
        c += goes_to(idx, t, k, epr, d);
    scan[me] = c;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {
        int v = me >= off ? scan[me - off] : 0;
        __syncthreads();
        scan[me] += v;
        __syncthreads();
    }
    int next = scan[me] - c;
    int32_t *p = pos + (long long)d * T;
    for (long long t = t0; t < t1; t++)
        p[t] = goes_to(idx, t, k, epr, d) ? next++ : -1;
    if (me == (int)blockDim.x - 1)
        counts[d] = scan[me];
}

/* Row of token t in the by-destination buffer for each rank (or -1), into rows[] (shared). */
static __device__ void rows_of_token(const int32_t *pos, const int64_t *counts, int n, long long T,
                                     long long t, long long *rows)
{
    if (threadIdx.x == 0) {
        long long displ = 0;
        for (int d = 0; d < n; d++) {
            int32_t p = pos[(long long)d * T + t];
            rows[d] = p >= 0 ? displ + p : -1;
            displ += counts[d];
        }
    }
    __syncthreads();
}

/* Block t: copy x's row t to its row in snd for every destination. V: the unit copied (uint4
 * when a row is a multiple of 16 bytes, else one bfloat16); units: V per row. */
template <typename V>
static __global__ void permute_kernel(const V *x, long long units, const int32_t *pos,
                                      const int64_t *counts, int n, long long T, V *snd)
{
    __shared__ long long rows[MAX_RANKS];
    long long t = blockIdx.x;
    rows_of_token(pos, counts, n, T, t, rows);
    const V *src = x + t * units;
    for (int d = 0; d < n; d++) {
        if (rows[d] < 0)
            continue;
        V *dst = snd + rows[d] * units;
        for (long long i = threadIdx.x; i < units; i += blockDim.x)
            dst[i] = src[i];
    }
}

/* Block t: out row t = the sum, in float32 and rank order, of token t's rows in bck, rounded
 * once to bfloat16. VEC_N: elements per thread step (VEC with 16-byte rows, else 1). */
template <int VEC_N>
static __global__ void unpermute_kernel(const __nv_bfloat16 *bck, long long H, const int32_t *pos,
                                        const int64_t *counts, int n, long long T,
                                        __nv_bfloat16 *out)
{
    __shared__ long long rows[MAX_RANKS];
    long long t = blockIdx.x;
    rows_of_token(pos, counts, n, T, t, rows);
    for (long long c = threadIdx.x; c < H / VEC_N; c += blockDim.x) {
        float acc[VEC_N];
        for (int i = 0; i < VEC_N; i++)
            acc[i] = 0.0f;
        for (int d = 0; d < n; d++) {
            if (rows[d] < 0)
                continue;
            const __nv_bfloat16 *src = bck + rows[d] * H + c * VEC_N;
            if constexpr (VEC_N == VEC) {
                uint4 u = *(const uint4 *)src;
                const __nv_bfloat162 *h2 = (const __nv_bfloat162 *)&u;
                for (int i = 0; i < VEC_N / 2; i++) {
                    float2 f = __bfloat1622float2(h2[i]);
                    acc[2 * i] += f.x;
                    acc[2 * i + 1] += f.y;
                }
            } else {
                for (int i = 0; i < VEC_N; i++)
                    acc[i] += __bfloat162float(src[i]);
            }
        }
        __nv_bfloat16 *dst = out + t * H + c * VEC_N;
        for (int i = 0; i < VEC_N; i++)
            dst[i] = __float2bfloat16_rn(acc[i]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Set-up
 * ------------------------------------------------------------------------------------------- */
static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return weft_splitmix64(weft_splitmix64(weft_splitmix64(SEED ^ a) ^ b) ^ c);
}

/* Expert for draw `draw` of token t: uniform, or Zipf from the cumulative weights cum[E]. */
static int draw_expert(const bench_t *m, const double *cum, size_t t, uint64_t draw)
{
    uint64_t h = hash3((uint64_t)m->rank, t, draw);
    int E = m->s->E;
    if (m->s->route == ROUTE_UNIFORM)
        return (int)(h % (uint64_t)E);
    double u = (double)(h >> 11) / 9007199254740992.0 * cum[E - 1];
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (u < cum[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* This rank's routing (k distinct experts per token), weights, x and destination masks. */
static void make_inputs(bench_t *m)
{
    const setup_t *s = m->s;
    size_t T = s->T, H = s->H, k = (size_t)s->k;
    double *cum = (double *)malloc((size_t)s->E * sizeof(double));
    if (!cum)
        fatal("malloc: out of memory");
    double total = 0;
    for (int e = 0; e < s->E; e++) {
        total += 1.0 / (e + 1);
        cum[e] = total;
    }
    for (size_t t = 0; t < T; t++) {
        uint64_t draw = 0, dest = 0;
        for (size_t j = 0; j < k; j++) {
            int e, dup;
            do {
                e = draw_expert(m, cum, t, draw++);
                dup = 0;
                for (size_t i = 0; i < j; i++)
                    dup |= m->h_idx[t * k + i] == e;
            } while (dup);
            m->h_idx[t * k + j] = e;
            m->h_w[t * k + j] = (float)(hash3((uint64_t)m->rank + 1000, t, j) % 16) / 8.0f;
            dest |= 1ull << (e / m->epr);
        }
        m->h_dest[t] = dest;
        for (size_t e = 0; e < H; e++) {
            float v = (float)(int)(hash3((uint64_t)m->rank + 2000, t, e) % 17) - 8.0f;
            uint32_t bits;
            memcpy(&bits, &v, 4);
            m->h_x[t * H + e] = (uint16_t)(bits >> 16); /* exact: small integers */
        }
    }
    free(cum);
}

static void *dev_alloc(bench_t *m, size_t bytes, const char *what)
{
    void *p = NULL;
    weft_ok(weft_malloc(m->comm, &p, bytes ? bytes : 1), what);
    return p;
}

static void *host_alloc(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    if (!p)
        fatal("calloc(%zu): out of memory", bytes);
    return p;
}

static void bench_open(bench_t *m, const setup_t *s)
{
    memset(m, 0, sizeof *m);
    m->s = s;
    m->comm = gpu_prog_comm_open(WEFT_REGISTRATION_ROA);
    m->rank = gpu_prog_rank;
    m->nranks = weft_comm_size(m->comm);
    int n = m->nranks;
    if (n > MAX_RANKS)
        fatal("moe-bench runs with at most %d ranks, not %d", MAX_RANKS, n);
    if (s->E % n != 0)
        fatal("-E %d is not a multiple of the rank count %d", s->E, n);
    m->epr = s->E / n;
    m->cap = (size_t)n * s->T;
    /* gpu_prog_comm_open made the rank's device current on this thread. */
    cuda_ok(cudaStreamCreateWithFlags(&m->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    snprintf(m->device, sizeof m->device, "unknown");
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(m->device, sizeof m->device, "%s", prop.name);

    size_t T = s->T, H = s->H, k = (size_t)s->k, row = H * sizeof(__nv_bfloat16);
    m->x = (__nv_bfloat16 *)dev_alloc(m, T * row, "weft_malloc (x)");
    m->idx = (int64_t *)dev_alloc(m, T * k * 8, "weft_malloc (topk_idx)");
    m->w = (float *)dev_alloc(m, T * k * 4, "weft_malloc (topk_weights)");
    m->rx = (__nv_bfloat16 *)dev_alloc(m, m->cap * row, "weft_malloc (recv_x)");
    m->ridx = (int64_t *)dev_alloc(m, m->cap * k * 8, "weft_malloc (recv_topk_idx)");
    m->rw = (float *)dev_alloc(m, m->cap * k * 4, "weft_malloc (recv_topk_weights)");
    m->rcnt = (int64_t *)dev_alloc(m, (size_t)m->epr * 8, "weft_malloc (recv_expert_counts)");
    m->nrecv = (int64_t *)dev_alloc(m, 8, "weft_malloc (num_recv_tokens)");
    m->out_w = (__nv_bfloat16 *)dev_alloc(m, T * row, "weft_malloc (out)");
    m->pos = (int32_t *)dev_alloc(m, (size_t)n * T * 4, "weft_malloc (positions)");
    m->cnt = (int64_t *)dev_alloc(m, 2 * (size_t)n * 8, "weft_malloc (counts)");
    m->snd = (__nv_bfloat16 *)dev_alloc(m, m->cap * row, "weft_malloc (send rows)");
    m->rcv = (__nv_bfloat16 *)dev_alloc(m, m->cap * row, "weft_malloc (received rows)");
    m->bck = (__nv_bfloat16 *)dev_alloc(m, m->cap * row, "weft_malloc (returned rows)");
    m->out_b = (__nv_bfloat16 *)dev_alloc(m, T * row, "weft_malloc (baseline out)");
    cuda_ok(cudaMallocHost((void **)&m->h_cnt, 2 * (size_t)n * 8), "cudaMallocHost");
    cuda_ok(cudaMalloc((void **)&m->d_vals, 2 * NUM_VALS * sizeof(double)), "cudaMalloc");
    m->sc = (size_t *)host_alloc((size_t)n * sizeof(size_t));
    m->sd = (size_t *)host_alloc((size_t)n * sizeof(size_t));
    m->rc = (size_t *)host_alloc((size_t)n * sizeof(size_t));
    m->rd = (size_t *)host_alloc((size_t)n * sizeof(size_t));
    m->h_x = (uint16_t *)host_alloc(T * row);
    m->h_idx = (int64_t *)host_alloc(T * k * 8);
    m->h_w = (float *)host_alloc(T * k * 4);
    m->h_dest = (uint64_t *)host_alloc(T * 8);
    for (int i = 0; i < NUM_M; i++)
        m->t_us[i] = (double *)host_alloc((size_t)s->iters * sizeof(double));
    make_inputs(m);
    cuda_ok(cudaMemcpyAsync(m->x, m->h_x, T * row, cudaMemcpyHostToDevice, m->stream),
            "cudaMemcpyAsync (x)");
    cuda_ok(cudaMemcpyAsync(m->idx, m->h_idx, T * k * 8, cudaMemcpyHostToDevice, m->stream),
            "cudaMemcpyAsync (topk_idx)");
    cuda_ok(cudaMemcpyAsync(m->w, m->h_w, T * k * 4, cudaMemcpyHostToDevice, m->stream),
            "cudaMemcpyAsync (topk_weights)");
    cuda_ok(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize (inputs)");
    if (m->rank == 0 && s->json && !(m->json = fopen(s->json, "w")))
        fatal("--json %s: %s", s->json, strerror(errno));
}

static void bench_close(bench_t *m)
{
    cuda_ok(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize");
    void *bufs[] = {m->x,     m->idx, m->w,   m->rx,  m->ridx, m->rw,  m->rcnt, m->nrecv,
                    m->out_w, m->pos, m->cnt, m->snd, m->rcv,  m->bck, m->out_b};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        weft_ok(weft_free(m->comm, bufs[i]), "weft_free");
    weft_ok(weft_comm_destroy(m->comm), "weft_comm_destroy");
    cuda_ok(cudaFreeHost(m->h_cnt), "cudaFreeHost");
    cuda_ok(cudaFree(m->d_vals), "cudaFree");
    cuda_ok(cudaStreamDestroy(m->stream), "cudaStreamDestroy");
    free(m->sc);
    free(m->sd);
    free(m->rc);
    free(m->rd);
    free(m->h_x);
    free(m->h_idx);
    free(m->h_w);
    free(m->h_dest);
    for (int i = 0; i < NUM_M; i++)
        free(m->t_us[i]);
    if (m->json && fclose(m->json) != 0)
        fatal("--json %s: %s", m->s->json, strerror(errno));
}

/* ---------------------------------------------------------------------------------------------
 * The operations
 * ------------------------------------------------------------------------------------------- */
static void barrier(bench_t *m)
{
    weft_ok(weft_barrier(m->comm, m->stream), "weft_barrier");
    cuda_ok(cudaStreamSynchronize(m->stream), "cudaStreamSynchronize after weft_barrier");
}

static void sync_stream(bench_t *m, const char *what)
{
    cuda_ok(cudaStreamSynchronize(m->stream), what);
}

static double us_since(uint64_t t0)
{
    return (double)(weft_now_ns() - t0) / 1e3;
}

static double weft_dispatch(bench_t *m, weft_moe_handle_t *h)
{
    const setup_t *s = m->s;
    barrier(m);
    uint64_t t0 = weft_now_ns();
    weft_ok(weft_moe_dispatch(m->comm, m->x, s->T, s->H, WEFT_BFLOAT16, m->idx, m->w, s->k, s->E,
                              m->rx, m->ridx, m->rw, m->rcnt, m->cap, m->nrecv, h, m->stream),
            "weft_moe_dispatch");
    sync_stream(m, "cudaStreamSynchronize after weft_moe_dispatch");
    return us_since(t0);
}

/* The backward pass's dispatch: the same rows along h's layout (WEFT_MOE_REUSE), no routing
 * outputs. */
static double weft_dispatch_reuse(bench_t *m, weft_moe_handle_t h)
{
    const setup_t *s = m->s;
    barrier(m);
    uint64_t t0 = weft_now_ns();
    weft_ok(weft_moe_dispatch(m->comm, m->x, s->T, s->H, WEFT_BFLOAT16, NULL, NULL, WEFT_MOE_REUSE,
                              0, m->rx, NULL, NULL, NULL, m->cap, m->nrecv, &h, m->stream),
            "weft_moe_dispatch reusing the layout");
    sync_stream(m, "cudaStreamSynchronize after weft_moe_dispatch (reuse)");
    return us_since(t0);
}

static double weft_combine(bench_t *m, weft_moe_handle_t h)
{
    barrier(m);
    uint64_t t0 = weft_now_ns();
    weft_ok(weft_moe_combine(m->comm, h, m->rx, m->out_w, m->stream), "weft_moe_combine");
    sync_stream(m, "cudaStreamSynchronize after weft_moe_combine");
    return us_since(t0);
}

/* Whether rows of H bfloat16 elements can be moved as 16-byte vectors (weft_malloc pointers
 * are aligned far beyond 16 bytes). */
static int vector_rows(const bench_t *m)
{
    return m->s->H % VEC == 0;
}

/* Baseline dispatch; *layout_us: the part up to the counts on the host. */
static double base_dispatch(bench_t *m, double *layout_us)
{
    const setup_t *s = m->s;
    int n = m->nranks;
    long long T = (long long)s->T, H = (long long)s->H;
    barrier(m);
    uint64_t t0 = weft_now_ns();
    /* (a) layout */
    layout_kernel<<<n, LAYOUT_THREADS, 0, m->stream>>>(m->idx, T, s->k, m->epr, m->pos, m->cnt);
    cuda_ok(cudaGetLastError(), "layout_kernel launch");
    weft_ok(weft_all_to_all(m->comm, m->cnt, m->cnt + n, 1, WEFT_INT64, m->stream),
            "weft_all_to_all (counts)");
    cuda_ok(cudaMemcpyAsync(m->h_cnt, m->cnt, 2 * (size_t)n * 8, cudaMemcpyDeviceToHost, m->stream),
            "cudaMemcpyAsync (counts to the host)");
    sync_stream(m, "cudaStreamSynchronize (counts)");
    *layout_us = us_since(t0);
    size_t so = 0, ro = 0;
    for (int p = 0; p < n; p++) {
        m->sc[p] = (size_t)m->h_cnt[p] * s->H;
        m->rc[p] = (size_t)m->h_cnt[n + p] * s->H;
        m->sd[p] = so;
        m->rd[p] = ro;
        so += m->sc[p];
        ro += m->rc[p];
    }
    m->base_rows = ro / s->H;
    /* (b) permute */
    if (vector_rows(m))
        permute_kernel<uint4><<<(unsigned)T, ROW_THREADS, 0, m->stream>>>(
            (const uint4 *)m->x, H / VEC, m->pos, m->cnt, n, T, (uint4 *)m->snd);
    else
        permute_kernel<__nv_bfloat16>
            <<<(unsigned)T, ROW_THREADS, 0, m->stream>>>(m->x, H, m->pos, m->cnt, n, T, m->snd);
    cuda_ok(cudaGetLastError(), "permute_kernel launch");
    /* (c) all-to-all-v of the rows */
    weft_ok(weft_all_to_allv(m->comm, m->snd, m->sc, m->sd, m->rcv, m->rc, m->rd, WEFT_BFLOAT16,
                             m->stream),
            "weft_all_to_allv (dispatch)");
    sync_stream(m, "cudaStreamSynchronize after the baseline dispatch");
    return us_since(t0);
}

/* Baseline combine with the dispatch's layout: rows back, then the un-permute. */
static double base_combine(bench_t *m)
{
    const setup_t *s = m->s;
    int n = m->nranks;
    long long T = (long long)s->T, H = (long long)s->H;
    barrier(m);
    uint64_t t0 = weft_now_ns();
    weft_ok(weft_all_to_allv(m->comm, m->rcv, m->rc, m->rd, m->bck, m->sc, m->sd, WEFT_BFLOAT16,
                             m->stream),
            "weft_all_to_allv (combine)");
    if (vector_rows(m))
        unpermute_kernel<VEC>
            <<<(unsigned)T, ROW_THREADS, 0, m->stream>>>(m->bck, H, m->pos, m->cnt, n, T, m->out_b);
    else
        unpermute_kernel<1>
            <<<(unsigned)T, ROW_THREADS, 0, m->stream>>>(m->bck, H, m->pos, m->cnt, n, T, m->out_b);
    cuda_ok(cudaGetLastError(), "unpermute_kernel launch");
    sync_stream(m, "cudaStreamSynchronize after the baseline combine");
    return us_since(t0);
}

/* One iteration: the four operations in turn; times into slot i, or nowhere when i < 0. */
static void iteration(bench_t *m, int i)
{
    weft_moe_handle_t h = NULL;
    double t[NUM_M];
    t[M_WEFT_DISPATCH] = weft_dispatch(m, &h);
    t[M_WEFT_COMBINE] = weft_combine(m, h);
    t[M_WEFT_REUSE] = weft_dispatch_reuse(m, h);
    weft_ok(weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
    t[M_BASE_DISPATCH] = base_dispatch(m, &t[M_BASE_LAYOUT]);
    t[M_BASE_COMBINE] = base_combine(m);
    if (i >= 0)
        for (int k = 0; k < NUM_M; k++)
            m->t_us[k][i] = t[k];
}

/* ---------------------------------------------------------------------------------------------
 * Check
 * ------------------------------------------------------------------------------------------- */
static float bf16_value(uint16_t b)
{
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Copy n_bytes of device memory to a new host buffer (the stream synchronised). */
static uint16_t *fetch(bench_t *m, const void *dev, size_t n_bytes)
{
    uint16_t *h = (uint16_t *)host_alloc(n_bytes);
    if (n_bytes > 0)
        cuda_ok(cudaMemcpyAsync(h, dev, n_bytes, cudaMemcpyDeviceToHost, m->stream),
                "cudaMemcpyAsync (check)");
    sync_stream(m, "cudaStreamSynchronize (check)");
    return h;
}

/* The outputs of the last iteration (weft's and the baseline's) on this rank: the number of
 * failed comparisons, each described on stdout. */
static int check_rank(bench_t *m)
{
    const setup_t *s = m->s;
    size_t T = s->T, H = s->H, row = H * 2;
    int bad = 0;
    int64_t nrecv = -1;
    cuda_ok(cudaMemcpyAsync(&nrecv, m->nrecv, 8, cudaMemcpyDeviceToHost, m->stream),
            "cudaMemcpyAsync (num_recv_tokens)");
    sync_stream(m, "cudaStreamSynchronize (check)");
    if (nrecv < 0 || (size_t)nrecv != m->base_rows) {
        printf("# check: rank %d: weft received %lld rows, the baseline %zu\n", m->rank,
               (long long)nrecv, m->base_rows);
        return 1;
    }
    uint16_t *wr = fetch(m, m->rx, m->base_rows * row), *br = fetch(m, m->rcv, m->base_rows * row);
    if (memcmp(wr, br, m->base_rows * row) != 0) {
        size_t i = 0;
        while (wr[i] == br[i])
            i++;
        printf("# check: rank %d: recv_x differs from the baseline's rows: first at row %zu "
               "element %zu (%g, baseline %g)\n",
               m->rank, i / H, i % H, (double)bf16_value(wr[i]), (double)bf16_value(br[i]));
        bad++;
    }
    free(wr);
    free(br);
    uint16_t *wo = fetch(m, m->out_w, T * row), *bo = fetch(m, m->out_b, T * row);
    size_t wrong_w = 0, wrong_b = 0, first_w = 0, first_b = 0;
    for (size_t i = 0; i < T * H; i++) {
        float want = bf16_value(m->h_x[i]) * (float)__builtin_popcountll(m->h_dest[i / H]);
        if (bf16_value(wo[i]) != want && wrong_w++ == 0)
            first_w = i;
        if (bf16_value(bo[i]) != want && wrong_b++ == 0)
            first_b = i;
    }
    if (wrong_w)
        printf("# check: rank %d: weft combine: %zu wrong values, first out[%zu][%zu] = %g, "
               "expected %g\n",
               m->rank, wrong_w, first_w / H, first_w % H, (double)bf16_value(wo[first_w]),
               (double)(bf16_value(m->h_x[first_w]) *
                        (float)__builtin_popcountll(m->h_dest[first_w / H])));
    if (wrong_b)
        printf("# check: rank %d: baseline combine: %zu wrong values, first out[%zu][%zu] = %g\n",
               m->rank, wrong_b, first_b / H, first_b % H, (double)bf16_value(bo[first_b]));
    free(wo);
    free(bo);
    return bad + (wrong_w > 0) + (wrong_b > 0);
}

/* ---------------------------------------------------------------------------------------------
 * Report
 * ------------------------------------------------------------------------------------------- */
/* Reduce vals[0..count) (count <= NUM_VALS) over ranks with op, in place (through device
 * memory). */
static void reduce(bench_t *m, double *vals, int count, weft_redop_t op)
{
    size_t bytes = (size_t)count * sizeof(double);
    cuda_ok(cudaMemcpyAsync(m->d_vals, vals, bytes, cudaMemcpyHostToDevice, m->stream),
            "cudaMemcpyAsync (values to the device)");
    weft_ok(weft_all_reduce(m->comm, m->d_vals, m->d_vals + count, (size_t)count, WEFT_FLOAT64, op,
                            m->stream),
            "weft_all_reduce of the results");
    cuda_ok(cudaMemcpyAsync(vals, m->d_vals + count, bytes, cudaMemcpyDeviceToHost, m->stream),
            "cudaMemcpyAsync (results to the host)");
    sync_stream(m, "cudaStreamSynchronize after the results");
}

/* One JSON line; ratio <= 0 is written as null. */
static void json_row(bench_t *m, const char *op, const char *impl, double us, double gbps,
                     double rows_avg, double ratio, int check_ok)
{
    const setup_t *s = m->s;
    fprintf(m->json, "{\"bench\":\"moe\",\"op\":\"%s\",\"impl\":\"%s\",\"device\":", op, impl);
    bench_json_string(m->json, m->device);
    fprintf(m->json,
            ",\"ranks\":%d,\"tokens\":%zu,\"hidden\":%zu,\"topk\":%d,\"experts\":%d,"
            "\"route\":\"%s\",\"dtype\":\"bfloat16\",\"iters\":%d,\"warmup\":%d,"
            "\"time_us\":%.3f,\"gbps\":%.3f,\"rows_per_rank\":%.1f,\"baseline_over_weft\":",
            m->nranks, s->T, s->H, s->k, s->E, route_names[s->route], s->iters, s->warmup, us, gbps,
            rows_avg);
    if (ratio > 0)
        fprintf(m->json, "%.4f", ratio);
    else
        fprintf(m->json, "null");
    fprintf(m->json, ",\"check\":%s}\n", check_ok ? "true" : "false");
}

static void report(bench_t *m, int check_ok)
{
    const setup_t *s = m->s;
    /* Max over ranks of the medians, and of rows and -rows (for the range); the rows' sum. */
    double mx[NUM_VALS], sum[1] = {(double)m->base_rows};
    for (int k = 0; k < NUM_M; k++)
        mx[k] = bench_median_double(m->t_us[k], (size_t)s->iters);
    mx[NUM_M] = (double)m->base_rows;
    mx[NUM_M + 1] = -(double)m->base_rows;
    reduce(m, mx, NUM_VALS, WEFT_MAX);
    reduce(m, sum, 1, WEFT_SUM);
    if (m->rank != 0)
        return;
    double rows_avg = sum[0] / m->nranks, bytes = rows_avg * (double)s->H * 2.0;
    printf("# moe-bench: %d ranks, %s, tokens/rank %zu, hidden %zu, topk %d, experts %d (%d per "
           "rank), route %s, bfloat16, iters %d, warmup %d, seed 0x%llx\n",
           m->nranks, m->device, s->T, s->H, s->k, s->E, m->epr, route_names[s->route], s->iters,
           s->warmup, (unsigned long long)SEED);
    printf("# rows received per rank: avg %.1f, min %.0f, max %.0f (each token once per "
           "destination rank, its own rank included)\n",
           rows_avg, -mx[NUM_M + 1], mx[NUM_M]);
    printf("# time: per call after a barrier, until cudaStreamSynchronize returns; median over "
           "iters, max over ranks\n"
           "# GB/s: rows received (dispatch) or sent back (combine) per rank, averaged over "
           "ranks, x hidden x 2 B / time\n");
    printf("#%9s %9s %11s %9s %10s\n", "op", "impl", "time_us", "GB/s", "base/weft");
    static const char *const ops[2] = {"dispatch", "combine"};
    for (int op = 0; op < 2; op++) {
        double tw = mx[op == 0 ? M_WEFT_DISPATCH : M_WEFT_COMBINE];
        double tb = mx[op == 0 ? M_BASE_DISPATCH : M_BASE_COMBINE];
        double ratio = tw > 0 ? tb / tw : 0;
        printf("%10s %9s %11.2f %9.2f %10s\n", ops[op], "weft", tw, bytes / tw / 1e3, "-");
        printf("%10s %9s %11.2f %9.2f %10.3f\n", ops[op], "baseline", tb, bytes / tb / 1e3, ratio);
        if (m->json) {
            json_row(m, ops[op], "weft", tw, bytes / tw / 1e3, rows_avg, -1, check_ok);
            json_row(m, ops[op], "baseline", tb, bytes / tb / 1e3, rows_avg, ratio, check_ok);
        }
    }
    double tr = mx[M_WEFT_REUSE], rr = tr > 0 ? mx[M_BASE_DISPATCH] / tr : 0;
    printf("%10s %9s %11.2f %9.2f %10.3f\n", "dispatch", "reuse", tr, bytes / tr / 1e3, rr);
    if (m->json)
        json_row(m, "dispatch", "weft-reuse", tr, bytes / tr / 1e3, rows_avg, rr, check_ok);
    printf("# reuse: weft_moe_dispatch of the same rows reusing the first dispatch's layout "
           "(WEFT_MOE_REUSE, no routing outputs); base/weft against the baseline dispatch\n");
    printf("# baseline dispatch: layout (kernel, all_to_all of the counts, counts to the host) "
           "%.2f us of %.2f us\n",
           mx[M_BASE_LAYOUT], mx[M_BASE_DISPATCH]);
    fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------------------------- */
static void usage(FILE *f)
{
    fprintf(
        f, "usage: weftrun -n N moe-bench [-T TOKENS] [-H HIDDEN] [-k TOPK] [-E EXPERTS]\n"
           "                              [--route uniform|zipf] [-n ITERS] [-w WARMUP]\n"
           "                              [--json FILE]\n"
           "  -T, --tokens N     tokens per rank (default 4096)\n"
           "  -H, --hidden N     bfloat16 elements per token (default 7168)\n"
           "  -k, --topk N       distinct experts per token (default 8)\n"
           "  -E, --experts N    experts in all, a multiple of the rank count (default 256)\n"
           "      --route R      uniform, or zipf: expert e with weight 1/(e+1) (default uniform)\n"
           "  -n, --iters N      timed iterations (default 20)\n"
           "  -w, --warmup N     untimed iterations first (default 5)\n"
           "      --json FILE    also write the rows as JSON lines (rank 0)\n");
}

/* Parse the command line into s. Returns 0, 1 (help printed) or 2 (usage error). */
static int parse_args(int argc, char **argv, setup_t *s)
{
    static const struct option longopts[] = {
        {"tokens", required_argument, NULL, 'T'}, {"hidden", required_argument, NULL, 'H'},
        {"topk", required_argument, NULL, 'k'},   {"experts", required_argument, NULL, 'E'},
        {"route", required_argument, NULL, 'r'},  {"iters", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'w'}, {"json", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
    memset(s, 0, sizeof *s);
    s->T = 4096;
    s->H = 7168;
    s->k = 8;
    s->E = 256;
    s->route = ROUTE_UNIFORM;
    s->iters = 20;
    s->warmup = 5;
    int opt;
    while ((opt = getopt_long(argc, argv, "T:H:k:E:n:w:h", longopts, NULL)) != -1) {
        int v = 0;
        int bad = 0;
        switch (opt) {
        case 'T':
            bad = bench_parse_int(optarg, 1, MAX_TOKENS, &v);
            s->T = (size_t)v;
            break;
        case 'H':
            bad = bench_parse_int(optarg, 1, MAX_HIDDEN, &v);
            s->H = (size_t)v;
            break;
        case 'k':
            bad = bench_parse_int(optarg, 1, 64, &v);
            s->k = (int)v;
            break;
        case 'E':
            bad = bench_parse_int(optarg, 1, 1 << 20, &v);
            s->E = (int)v;
            break;
        case 'r':
            if (strcmp(optarg, "uniform") == 0)
                s->route = ROUTE_UNIFORM;
            else if (strcmp(optarg, "zipf") == 0)
                s->route = ROUTE_ZIPF;
            else
                bad = 1;
            break;
        case 'n':
            bad = bench_parse_int(optarg, 1, 1000000, &v);
            s->iters = (int)v;
            break;
        case 'w':
            bad = bench_parse_int(optarg, 0, 1000000, &v);
            s->warmup = (int)v;
            break;
        case 'j':
            s->json = optarg;
            break;
        case 'h':
            usage(stdout);
            return 1;
        default:
            bad = 1;
        }
        if (bad) {
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc || s->k > s->E) {
        if (s->k > s->E)
            fprintf(stderr, "moe-bench: -k %d is more than -E %d\n", s->k, s->E);
        usage(stderr);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    gpu_prog_name = "moe-bench";
    setup_t s;
    int pa = parse_args(argc, argv, &s);
    if (pa != 0)
        return pa == 1 ? 0 : 2;

    require_device();

    bench_t m;
    bench_open(&m, &s);
    for (int i = 0; i < s.warmup; i++)
        iteration(&m, -1);
    /* The check: one more iteration, its outputs compared on every rank. */
    iteration(&m, -1);
    double bad[1] = {(double)check_rank(&m)};
    reduce(&m, bad, 1, WEFT_MAX);
    int check_ok = bad[0] == 0;
    for (int i = 0; i < s.iters; i++)
        iteration(&m, i);
    report(&m, check_ok);
    if (m.rank == 0) {
        if (check_ok)
            printf("# check: PASS: on every rank weft's recv_x equals the baseline's received "
                   "rows (same rows, same order) and both combine outputs equal x times the "
                   "number of receiving ranks\n");
        else
            printf("# check: FAIL: weft and the baseline disagree on some rank (lines above)\n");
        fflush(stdout);
    }
    bench_close(&m);
    return check_ok ? 0 : 1;
}
