/*
 * moe_cuda.cu - the kernels of MoE dispatch and combine on the CUDA backend (see moe_cuda.h).
 *
 * Layout: one block per destination d scans the tokens in order, a block-wide prefix sum (CUB)
 * giving each token bound for d its place, so every list comes out sorted by token as the host
 * backend's. Gather: every block reads the n x n count matrix and every rank's bad flag from the
 * peers' headers, so all ranks take the same verdict without another signal; accepted, each warp
 * copies whole rows (16-byte vectors where the alignment allows, weft_dev_copy), the k expert
 * slots and weights, and counts received slots per expert with atomics. Combine: each warp sums
 * one output token over the ranks that received it, in float32, in rank order (the host's
 * order), and rounds once; it first lists the token's rows (a ballot over the ranks' positions)
 * so that each lane issues its loads of every row before the first add. The receive offsets
 * every rank published in its header tell a peer where its rows sit in that rank's y; a rank
 * that received rows but posted no y makes every rank's combine write zeros and report it (the
 * host cannot see the received count). Neither kernel waits for a peer, so their grids may fill
 * the rank's share of the GPU.
 *
 * Failures (moe_cuda.h): the staging, gather and combine kernels start with one load of the
 * rank's failed flag by thread 0, as the collective kernel does (exec_cuda.cu, collective()),
 * and the whole block returns when it is set, before any __syncthreads that would follow. The
 * bounds of peers' values: a count, checked by thread 0 of every block while it takes the
 * verdict (the block returns as one, no block waits for another); a listed token or an expert
 * id, checked by each lane that reads it, which alone returns (no __syncthreads comes after the
 * gather's row loop, and weft_dev_copy has no warp-wide step); a receive block, checked by
 * thread d of each combine block before the block's last __syncthreads, after which the block
 * returns as one.
 *
 * Thread safety: launches are stream-ordered; the kernels write only this rank's memory.
 */
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "exec/fail_cuda.cuh"
#include "exec/launch_cuda.cuh"
#include "exec/moe_cuda.h"
#include "exec/reduce_cuda.cuh"
extern "C" {
#include "util/log.h"
}

#define MOE_THREADS 512
#define WARP 32

/* Whether a kernel of this rank failed before (the entry kernel just ahead, an earlier
 * operation's, a replayed graph's); thread 0 reads it for its block. */
static __device__ __forceinline__ bool failed_before(const weft_moe_dev_fail_t &f)
{
    return weft_dev_failed(f.ctl);
}

/* Fail the rank with status as a failed wait does: every later kernel of the rank, the closing
 * signal's included, posts and moves nothing. */
static __device__ void fail_rank(const weft_moe_dev_fail_t &f, int32_t status)
{
    weft_dev_fail(f.status, f.ctl, status);
}

/* ---------------------------------------------------------------------------------------------
 * Layout
 * ------------------------------------------------------------------------------------------- */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_layout(const __grid_constant__ weft_moe_dev_args_t a)
{
    typedef cub::BlockScan<int, MOE_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage temp;
    __shared__ int running;
    const int d = blockIdx.x, me = a.rank, n = a.nranks, k = a.topk;
    const uint64_t T = a.tokens[me];
    uint8_t *base = a.base[me];
    weft_moe_dev_header_t *h = (weft_moe_dev_header_t *)base;
    weft_moe_dev_layout_t l = weft_moe_dev_layout(T, n, k);
    int32_t *pos = (int32_t *)(base + l.pos);
    uint8_t *list = base + l.lists + (size_t)d * l.list_bytes;
    int64_t *tokens = (int64_t *)list;
    int64_t *idx = (int64_t *)(list + l.idx);
    float *w = (float *)(list + l.weights);
    const int64_t lo = (int64_t)d * a.experts_per_rank, hi = lo + a.experts_per_rank;
    if (threadIdx.x == 0)
        running = 0;
    __syncthreads();
    for (uint64_t first = 0; first < T; first += MOE_THREADS) {
        uint64_t t = first + threadIdx.x;
        int mine = 0, bad = 0;
        if (t < T) {
            for (int j = 0; j < k; j++) {
                int64_t e = a.topk_idx[t * k + j];
                bad |= e < -1 || e >= a.num_experts;
                mine |= e >= lo && e < hi;
            }
        }
        if (bad)
            h->bad = 1; /* a plain store of the same value from any thread */
        int at, total;
        scan_t(temp).ExclusiveSum(mine, at, total);
        at += running;
        if (t < T) {
            pos[t * n + d] = mine ? at : -1;
            if (mine) {
                tokens[at] = (int64_t)t;
                for (int j = 0; j < k; j++) {
                    int64_t e = a.topk_idx[t * k + j];
                    int here = e >= lo && e < hi;
                    idx[(size_t)at * k + j] = here ? e - lo : -1;
                    w[(size_t)at * k + j] = here ? a.topk_weights[t * k + j] : 0.0f;
                }
            }
        }
        __syncthreads(); /* everyone has read running and the scan's storage */
        if (threadIdx.x == 0)
            running += total;
        __syncthreads();
    }
    if (threadIdx.x == 0)
        h->count[d] = (uint64_t)running;
}

extern "C" weft_status_t weft_moe_dev_layout_launch(const weft_moe_dev_args_t *a, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    /* bad, rejected and num_recv start at 0; the kernel writes the counts. */
    cudaError_t err = cudaMemsetAsync(a->base[a->rank], 0, sizeof(weft_moe_dev_header_t), s);
    if (err != cudaSuccess)
        return weft_error(WEFT_ERR_CUDA, "weft_moe_dispatch: cudaMemsetAsync: %s",
                          cudaGetErrorString(err));
    weft_status_t st = weft_moe_dev_counts_clear(a, stream);
    if (st != WEFT_SUCCESS)
        return st;
    return weft_cuda_launch_kernel("weft_moe_dispatch: layout", moe_layout, a->nranks, MOE_THREADS,
                                   s, *a);
}

extern "C" weft_status_t weft_moe_dev_counts_clear(const weft_moe_dev_args_t *a, void *stream)
{
    if (!a->recv_expert_counts || a->experts_per_rank == 0)
        return WEFT_SUCCESS;
    cudaError_t err =
        cudaMemsetAsync(a->recv_expert_counts, 0, (size_t)a->experts_per_rank * sizeof(int64_t),
                        (cudaStream_t)stream);
    if (err != cudaSuccess)
        return weft_error(WEFT_ERR_CUDA, "weft_moe_dispatch: cudaMemsetAsync: %s",
                          cudaGetErrorString(err));
    return WEFT_SUCCESS;
}

/* ---------------------------------------------------------------------------------------------
 * Gather (dispatch)
 * ------------------------------------------------------------------------------------------- */

/* The verdict and this rank's receive offsets, from every rank's header (each thread 0 of a
 * block computes it; the headers are complete: the entry signal ordered them). failed: the rank
 * failed before (VERDICT_FAILED_BEFORE: the headers were not read) or a peer's count is above
 * its num_tokens (VERDICT_OUT_OF_BOUNDS: off and cnt are not to be used). */
enum { VERDICT_FAILED_BEFORE = 1, VERDICT_OUT_OF_BOUNDS = 2 };
struct verdict {
    int failed, rejected, rank, bad;
    uint64_t need, cap;
};

static __device__ verdict take_verdict(const weft_moe_dev_args_t &a, uint64_t *off, uint64_t *cnt)
{
    verdict v = {0, 0, -1, 0, 0, 0}, capacity = v;
    if (failed_before(a.fail)) {
        v.failed = VERDICT_FAILED_BEFORE;
        return v;
    }
    const int n = a.nranks;
    for (int q = 0; q < n; q++) {
        uint64_t total = 0;
        for (int p = 0; p < n; p++) {
            uint64_t c = ((const weft_moe_dev_header_t *)a.base[p])->count[q];
            if (c > a.tokens[p]) { /* a list holds at most its rank's num_tokens entries */
                v.failed = VERDICT_OUT_OF_BOUNDS;
                return v;
            }
            if (q == a.rank) {
                off[p] = total;
                cnt[p] = c;
            }
            total += c; /* at most n * INT32_MAX (each rank's api layer bounds its num_tokens) */
        }
        if (total > a.capacity[q] && !capacity.rejected)
            capacity = verdict{0, 1, q, 0, total, a.capacity[q]};
    }
    /* An expert id out of range on some rank before an overflow (the host backend's order). */
    for (int p = 0; p < n; p++) {
        const weft_moe_dev_header_t *hp = (const weft_moe_dev_header_t *)a.base[p];
        if (hp->bad && !v.rejected)
            v = verdict{0, 1, p, 1, 0, 0};
    }
    return v.rejected ? v : capacity;
}

__global__ void __launch_bounds__(MOE_THREADS)
    moe_gather(const __grid_constant__ weft_moe_dev_args_t a)
{
    __shared__ uint64_t off[WEFT_CUDA_MAX_RANKS], cnt[WEFT_CUDA_MAX_RANKS];
    __shared__ verdict v;
    const int n = a.nranks, me = a.rank, k = a.topk;
    weft_moe_dev_header_t *h = (weft_moe_dev_header_t *)a.base[me];
    if (threadIdx.x == 0)
        v = take_verdict(a, off, cnt);
    __syncthreads();
    if (v.failed) { /* the whole block: v is shared */
        if (threadIdx.x == 0) {
            if (v.failed == VERDICT_OUT_OF_BOUNDS)
                fail_rank(a.fail, WEFT_ERR_PEER_LOST);
            if (blockIdx.x == 0)
                *a.num_recv_out = -1; /* nothing received; the counts stay zero */
        }
        return;
    }
    uint64_t total = 0;
    for (int p = 0; p < n; p++)
        total += cnt[p];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        h->rejected = (uint64_t)v.rejected;
        h->num_recv = v.rejected ? -1 : (int64_t)total;
        for (int p = 0; p < n; p++) {
            h->recv_off[p] = off[p];
            h->recv_cnt[p] = v.rejected ? 0 : cnt[p];
        }
        *a.num_recv_out = h->num_recv;
        if (v.rejected) {
            weft_moe_dev_report_t *r = a.report;
            r->rank = v.rank;
            r->why = v.bad ? WEFT_MOE_REJECT_EXPERT : WEFT_MOE_REJECT_CAPACITY;
            r->experts = a.num_experts;
            r->need = v.need;
            r->cap = v.cap;
            __threadfence_system();
            *(volatile uint32_t *)&r->count = r->count + 1;
            __threadfence_system();
        }
    }
    if (v.rejected)
        return;

    const size_t row_bytes = a.hidden * (a.dtype == WEFT_FLOAT32 ? 4 : 2);
    const size_t lane = threadIdx.x % WARP;
    const uint64_t warps = (uint64_t)gridDim.x * (MOE_THREADS / WARP);
    for (uint64_t r = blockIdx.x * (MOE_THREADS / WARP) + threadIdx.x / WARP; r < total;
         r += warps) {
        int p = 0;
        while (r >= off[p] + cnt[p])
            p++;
        uint64_t i = r - off[p]; /* below cnt[p] <= tokens[p], the list's length */
        weft_moe_dev_layout_t l = weft_moe_dev_layout(a.tokens[p], n, k);
        const uint8_t *list = a.base[p] + l.lists + (size_t)me * l.list_bytes;
        int64_t t = ((const int64_t *)list)[i];
        if (t < 0 || (uint64_t)t >= a.tokens[p]) { /* a row outside p's x */
            fail_rank(a.fail, WEFT_ERR_PEER_LOST);
            return;
        }
        weft_dev_copy((uint8_t *)a.recv_x + r * row_bytes, a.rows[p] + (uint64_t)t * row_bytes,
                      row_bytes, lane, WARP);
        for (size_t j = lane; j < (size_t)k; j += WARP) { /* k may exceed a warp */
            int64_t e = ((const int64_t *)(list + l.idx))[i * k + j];
            if (e < -1 || e >= a.experts_per_rank) { /* not a local id: no counter of ours */
                fail_rank(a.fail, WEFT_ERR_PEER_LOST);
                return;
            }
            if (a.recv_topk_idx) /* the three are optional when a layout is reused */
                a.recv_topk_idx[r * k + j] = e;
            if (a.recv_topk_weights)
                a.recv_topk_weights[r * k + j] = ((const float *)(list + l.weights))[i * k + j];
            if (e >= 0 && a.recv_expert_counts)
                atomicAdd((unsigned long long *)&a.recv_expert_counts[e], 1ull);
        }
    }
}

extern "C" weft_status_t weft_moe_dev_gather_launch(const weft_moe_dev_args_t *a, int nblocks,
                                                    void *stream)
{
    return weft_cuda_launch_kernel("weft_moe_dispatch: gather", moe_gather, nblocks, MOE_THREADS,
                                   (cudaStream_t)stream, *a);
}

/* ---------------------------------------------------------------------------------------------
 * Combine
 * ------------------------------------------------------------------------------------------- */
__global__ void __launch_bounds__(MOE_THREADS)
    moe_stage(uint8_t *dst, const uint8_t *y, const weft_moe_dev_header_t *h, size_t row_bytes,
              uint64_t max_rows, weft_moe_dev_fail_t fail)
{
    __shared__ int64_t rows;
    if (threadIdx.x == 0) {
        rows = failed_before(fail) ? 0 : h->num_recv;
        if (rows > 0 && (uint64_t)rows > max_rows) { /* more than dst and y hold: a bug */
            fail_rank(fail, WEFT_ERR_INTERNAL);
            rows = 0;
        }
    }
    __syncthreads();
    if (rows <= 0)
        return;
    size_t nthreads = (size_t)gridDim.x * blockDim.x;
    weft_dev_copy(dst, y, (size_t)rows * row_bytes, blockIdx.x * blockDim.x + threadIdx.x,
                  nthreads);
}

extern "C" weft_status_t weft_moe_dev_stage_launch(void *dst, const void *y, const uint8_t *base,
                                                   size_t row_bytes, uint64_t max_rows,
                                                   weft_moe_dev_fail_t fail, void *stream)
{
    return weft_cuda_launch_kernel("weft_moe_combine: staging", moe_stage, WEFT_MOE_STAGE_BLOCKS,
                                   MOE_THREADS, (cudaStream_t)stream, (uint8_t *)dst,
                                   (const uint8_t *)y, (const weft_moe_dev_header_t *)base,
                                   row_bytes, max_rows, fail);
}

/* The 16-bit and 32-bit float element types of MoE rows: loads to float32, stores rounding once
 * to nearest even (reduce_cuda.cuh's host-identical conversions). */
template <int Dtype> struct moe_elem;
template <> struct moe_elem<WEFT_FLOAT32> {
    static const int per16 = 4; /* elements in 16 bytes */
    static __device__ __forceinline__ float load(const uint8_t *row, size_t e)
    {
        return ((const float *)row)[e];
    }
    static __device__ __forceinline__ void store(uint8_t *row, size_t e, float v)
    {
        ((float *)row)[e] = v;
    }
    static __device__ __forceinline__ void unpack(uint4 v, float *f)
    {
        f[0] = __uint_as_float(v.x);
        f[1] = __uint_as_float(v.y);
        f[2] = __uint_as_float(v.z);
        f[3] = __uint_as_float(v.w);
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                          __float_as_uint(f[3]));
    }
};
template <int Dtype> struct moe_elem16 {
    static const int per16 = 8;
    static __device__ __forceinline__ float to_float(uint16_t v)
    {
        return Dtype == WEFT_FLOAT16 ? weft_dev_half_to_float(v) : weft_dev_bf16_to_float(v);
    }
    static __device__ __forceinline__ uint16_t from_float(float v)
    {
        return Dtype == WEFT_FLOAT16 ? weft_dev_float_to_half(v) : weft_dev_float_to_bf16(v);
    }
    static __device__ __forceinline__ float load(const uint8_t *row, size_t e)
    {
        return to_float(((const uint16_t *)row)[e]);
    }
    static __device__ __forceinline__ void store(uint8_t *row, size_t e, float v)
    {
        ((uint16_t *)row)[e] = from_float(v);
    }
    static __device__ __forceinline__ void unpack(uint4 v, float *f)
    {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            f[2 * i] = to_float((uint16_t)(w[i] & 0xffffu));
            f[2 * i + 1] = to_float((uint16_t)(w[i] >> 16));
        }
    }
    static __device__ __forceinline__ uint4 pack(const float *f)
    {
        uint32_t w[4];
#pragma unroll
        for (int i = 0; i < 4; i++)
            w[i] = (uint32_t)from_float(f[2 * i]) | (uint32_t)from_float(f[2 * i + 1]) << 16;
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
};
template <> struct moe_elem<WEFT_FLOAT16> : moe_elem16<WEFT_FLOAT16> {
};
template <> struct moe_elem<WEFT_BFLOAT16> : moe_elem16<WEFT_BFLOAT16> {
};

/* Rows of one token whose 16-byte vectors a lane loads before the first add (they are
 * independent loads; one at a time left the kernel latency-bound at a third of the memory
 * bandwidth). With 8 the 16-bit kernels fit 64 registers, so two blocks share an SM. */
#define COMBINE_ROWS 8

template <int Dtype>
__global__ void __launch_bounds__(MOE_THREADS, 2)
    moe_combine(const __grid_constant__ weft_moe_dev_args_t a)
{
    typedef moe_elem<Dtype> E;
    __shared__ const uint8_t *src[WEFT_CUDA_MAX_RANKS]; /* rank d's row 0 of this rank's block */
    __shared__ const uint8_t *rows[MOE_THREADS / WARP][WEFT_CUDA_MAX_RANKS]; /* per warp */
    __shared__ int failed, bogus, rejected, vec; /* bogus: a receive block out of bounds */
    const int n = a.nranks, me = a.rank;
    const uint64_t T = a.tokens[me], H = a.hidden;
    const size_t row_bytes = H * (16 / E::per16);
    const weft_moe_dev_header_t *mine = (const weft_moe_dev_header_t *)a.base[me];
    if (threadIdx.x == 0) {
        failed = failed_before(a.fail);
        bogus = 0;
        rejected = failed || (int)mine->rejected; /* failed: the loop below reads no header */
        vec = row_bytes % 16 == 0 && (uintptr_t)a.out % 16 == 0;
        /* A rank that received rows but gave no y: every rank reads the same headers and
         * posted addresses, so every rank rejects the combine alike (zeros), and block 0
         * reports it; a dispatch rejected already (num_recv -1) was reported by its gather. */
        for (int p = 0; p < n && !rejected; p++) {
            int64_t got = ((const weft_moe_dev_header_t *)a.base[p])->num_recv;
            if (a.rows[p] || got <= 0)
                continue;
            rejected = 1;
            if (blockIdx.x == 0) {
                weft_moe_dev_report_t *r = a.report;
                r->rank = p;
                r->why = WEFT_MOE_REJECT_Y_NULL;
                r->need = (uint64_t)got;
                r->cap = 0;
                __threadfence_system();
                *(volatile uint32_t *)&r->count = r->count + 1;
                __threadfence_system();
            }
        }
    }
    __syncthreads();
    if (failed) /* the whole block: failed is shared */
        return;
    if (threadIdx.x < n) { /* NULL: that rank received nothing (else rejected above) */
        const int d = (int)threadIdx.x;
        const weft_moe_dev_header_t *hd = (const weft_moe_dev_header_t *)a.base[d];
        const uint8_t *y = a.rows[d];
        src[d] = NULL;
        if (y && !rejected) {
            /* d's block of rows from this rank: as long as this rank's list for d (pos below
             * indexes it), inside the rows d received, which its y holds (at most its
             * capacity rows: what d posted, registered or staged, for peers to read). */
            uint64_t off = hd->recv_off[me], cnt = hd->recv_cnt[me];
            int64_t got = hd->num_recv;
            if (got < 0 || (uint64_t)got > a.capacity[d] || cnt != mine->count[d] ||
                off > (uint64_t)got || cnt > (uint64_t)got - off) {
                fail_rank(a.fail, WEFT_ERR_PEER_LOST);
                bogus = 1; /* not failed, which other warps may still be reading */
            }
            src[d] = y + off * row_bytes;
        }
        if (y && (uintptr_t)y % 16 != 0)
            vec = 0;
    }
    __syncthreads();
    if (bogus) /* the whole block: no row is read */
        return;
    const int32_t *pos = (const int32_t *)(a.base[me] + weft_moe_dev_layout(T, n, a.topk).pos);
    const unsigned full = 0xffffffffu;
    const int lane = (int)(threadIdx.x % WARP), warp = (int)(threadIdx.x / WARP);
    const uint8_t **my_rows = rows[warp];
    const uint64_t warps = (uint64_t)gridDim.x * (MOE_THREADS / WARP);
    for (uint64_t t = blockIdx.x * (MOE_THREADS / WARP) + warp; t < T; t += warps) {
        /* The rows of token t, in rank order: my_rows[0 .. m). */
        int32_t i = lane < n && !rejected && src[lane] ? pos[t * n + lane] : -1;
        unsigned have = __ballot_sync(full, i >= 0);
        const int m = __popc(have);
        __syncwarp(); /* the previous token's reads of my_rows are done */
        if (i >= 0)
            my_rows[__popc(have & ((1u << lane) - 1u))] = src[lane] + (uint64_t)i * row_bytes;
        __syncwarp();
        uint8_t *o = (uint8_t *)a.out + t * row_bytes;
        if (!vec) {
            for (uint64_t e = (uint64_t)lane; e < H; e += WARP) {
                float acc = 0.0f;
                for (int j = 0; j < m; j++)
                    acc = weft_dev_add_rn(acc, E::load(my_rows[j], e));
                E::store(o, e, acc);
            }
            continue;
        }
        const uint64_t nvec = row_bytes / 16;
        for (uint64_t c = (uint64_t)lane; c < nvec; c += WARP) {
            float acc[E::per16];
#pragma unroll
            for (int e = 0; e < E::per16; e++)
                acc[e] = 0.0f;
            for (int j0 = 0; j0 < m; j0 += COMBINE_ROWS) {
                uint4 v[COMBINE_ROWS];
#pragma unroll
                for (int r = 0; r < COMBINE_ROWS; r++)
                    if (j0 + r < m)
                        v[r] = *(const uint4 *)(my_rows[j0 + r] + c * 16);
#pragma unroll
                for (int r = 0; r < COMBINE_ROWS; r++) {
                    if (j0 + r >= m)
                        break;
                    float f[E::per16];
                    E::unpack(v[r], f);
#pragma unroll
                    for (int e = 0; e < E::per16; e++)
                        acc[e] = weft_dev_add_rn(acc[e], f[e]);
                }
            }
            *(uint4 *)(o + c * 16) = E::pack(acc);
        }
    }
}

extern "C" weft_status_t weft_moe_dev_combine_launch(const weft_moe_dev_args_t *a, int nblocks,
                                                     void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    const char *what = "weft_moe_combine";
    if (a->dtype == WEFT_FLOAT32)
        return weft_cuda_launch_kernel(what, moe_combine<WEFT_FLOAT32>, nblocks, MOE_THREADS, s,
                                       *a);
    if (a->dtype == WEFT_FLOAT16)
        return weft_cuda_launch_kernel(what, moe_combine<WEFT_FLOAT16>, nblocks, MOE_THREADS, s,
                                       *a);
    return weft_cuda_launch_kernel(what, moe_combine<WEFT_BFLOAT16>, nblocks, MOE_THREADS, s, *a);
}
