/*
 * exec_cuda.cu - the collective kernel and its launcher (see exec_cuda.h for the protocol).
 *
 * One kernel serves every collective: the host describes the step as a work item (copy or
 * reduce slices, cut into units by the partitioner and assigned to blocks) plus the signals to
 * run around it. Data movement uses the vectorised primitives of reduce_cuda.cuh.
 *
 * Memory ordering: flags are written with st.release.sys after a system-scope fence and read
 * with ld.acquire.sys; a block's other threads are ordered after the polling thread's acquire
 * by __syncthreads. Block completion is counted with a device-scope atomic after a fence, so the
 * last block sees every block's writes before it signals "done" to the peers; that fence is
 * system-scope where the blocks stored into peers' memory (stores_to_peers), so that those stores
 * have landed before the peers see "done".
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdio.h>

#include "exec/exec_cuda.h"
#include "exec/fail_cuda.cuh"
#include "exec/launch_cuda.cuh"
#include "exec/reduce_cuda.cuh"
extern "C" {
#include "util/log.h"
}

#define POLLS_PER_CHECK 256

static __device__ __forceinline__ uint64_t flag_load(const uint64_t *p)
{
    uint64_t v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void flag_store(uint64_t *p, uint64_t v)
{
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

static __device__ __forceinline__ uint64_t globaltimer_ns()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Record this rank's failure (fail_cuda.cuh). */
static __device__ void report(const weft_cuda_params_t &p, int32_t status)
{
    weft_dev_fail(p.status, p.ctl[p.rank], status);
}

/* Called after every poll of a wait: every POLLS_PER_CHECK polls, the status that ends the wait
 * (the host's abort, an error another block reported, the deadline that the first check sets in
 * *deadline, 0 before), else 0. */
static __device__ __forceinline__ int32_t wait_ended(const weft_cuda_params_t &p, unsigned polls,
                                                     uint64_t *deadline)
{
    if (polls % POLLS_PER_CHECK != POLLS_PER_CHECK - 1)
        return 0;
    if (*(volatile const int32_t *)p.abort)
        return WEFT_ERR_PEER_LOST;
    if (*(volatile const int32_t *)p.status)
        return *(volatile const int32_t *)p.status;
    uint64_t now = globaltimer_ns();
    if (*deadline == 0)
        *deadline = now + p.timeout_ns;
    else if (now > *deadline)
        return WEFT_ERR_TIMEOUT;
    return 0;
}

/* Wait until *flag reached seq. Returns 0, or the status that ended the wait. */
static __device__ int32_t wait_flag(const weft_cuda_params_t &p, const uint64_t *flag, uint64_t seq)
{
    uint64_t deadline = 0;
    for (unsigned polls = 0;; polls++) {
        if (flag_load(flag) >= seq)
            return 0;
        int32_t st = wait_ended(p, polls, &deadline);
        if (st != 0)
            return st;
    }
}

/* Threads 0..n-1 of the block: unless !post, set flags[me] = seq in every peer's block (kind
 * selects the flag array), then wait for every peer's; with self, in this rank's block too.
 * Returns the status that ended a wait, or 0. */
static __device__ int32_t exchange(const weft_cuda_params_t &p, int kind, uint64_t seq, int post,
                                   int self)
{
    __shared__ int32_t failed;
    int t = threadIdx.x;
    __syncthreads(); /* every thread has read the previous exchange's result before the reset */
    if (t == 0)
        failed = 0;
    __syncthreads();
    if (t < p.nranks && (t != p.rank || self)) {
        weft_cuda_ctl_t *peer = p.ctl[t], *me = p.ctl[p.rank];
        weft_cuda_flag_t *out = kind == 0 ? peer->ready : kind == 1 ? peer->phase : peer->done;
        weft_cuda_flag_t *in = kind == 0 ? me->ready : kind == 1 ? me->phase : me->done;
        if (post) {
            __threadfence_system();
            flag_store(&out[p.rank].v, seq);
        }
        int32_t st = wait_flag(p, &in[t].v, seq);
        if (st != 0) {
            report(p, st);
            atomicExch(&failed, st);
        }
    }
    __syncthreads();
    return failed;
}

/* This block's share [*lo, *hi) of bytes split over every block (16-byte multiples, so shares
 * stay aligned); false when it has none. */
static __device__ bool block_share(uint64_t bytes, uint64_t *lo, uint64_t *hi)
{
    uint64_t share = (bytes + gridDim.x - 1) / gridDim.x;
    share = (share + 15) / 16 * 16;
    *lo = (uint64_t)blockIdx.x * share;
    *hi = *lo + share < bytes ? *lo + share : bytes;
    return *lo < bytes;
}

/* This block's share of the launch's local copy. */
static __device__ void run_pre_copy(const weft_cuda_params_t &p)
{
    uint64_t lo, hi;
    if (block_share(p.pre_bytes, &lo, &hi))
        weft_dev_copy(p.pre_dst + lo, p.pre_src + lo, hi - lo, threadIdx.x, blockDim.x);
}

#define ARRIVE_FAILED (1ull << 32) /* added to an arrival counter by a block that failed */
enum { ARRIVED_LAST = 1, ARRIVED_LAST_FAILED = 2 };

/* Whether this block is the last of the launch to arrive at counter (which it then resets for
 * the next launch: every block has counted by then): 0 if not; ARRIVED_LAST; or
 * ARRIVED_LAST_FAILED when some block, this one included, arrived with failed set. Orders every
 * block's writes before the last block's later signals; with sys, at system scope (the block
 * stored into peers' memory, which a gpu-scope fence does not wait for). Each block's fence
 * before its add releases its writes; to acquire them, thread 0 of the last block (which read
 * the counter) must fence before a barrier after which another of its threads signals (the
 * closing path's fence and exchange()'s first barrier; the pre-copy path fences itself). The push
 * path's last block only stores its own operation number, and pays no fence. */
static __device__ int arrive_last(weft_cuda_flag_t *counter, bool sys = false, bool failed = false)
{
    __shared__ int arrived;
    __syncthreads();
    if (threadIdx.x == 0) {
        if (sys)
            __threadfence_system();
        else
            __threadfence();
        unsigned long long add = failed ? ARRIVE_FAILED + 1 : 1;
        unsigned long long now = atomicAdd((unsigned long long *)&counter->v, add) + add;
        arrived = (uint32_t)now != gridDim.x ? 0 : now >> 32 ? ARRIVED_LAST_FAILED : ARRIVED_LAST;
        if (arrived)
            counter->v = 0;
    }
    __syncthreads();
    return arrived;
}

static __device__ __forceinline__ size_t elem_size(int32_t dtype)
{
    return dtype == WEFT_INT8 || dtype == WEFT_UINT8                              ? 1
           : dtype == WEFT_FLOAT16 || dtype == WEFT_BFLOAT16                      ? 2
           : dtype == WEFT_INT64 || dtype == WEFT_UINT64 || dtype == WEFT_FLOAT64 ? 8
                                                                                  : 4;
}

static __device__ void run_units(const weft_cuda_params_t &p)
{
    size_t tid = threadIdx.x, nthreads = blockDim.x;
    for (int u = p.block_begin[blockIdx.x]; u < p.block_begin[blockIdx.x + 1]; u++) {
        const weft_cuda_unit_t &unit = p.units[u];
        if (p.kind == WEFT_WORK_COPY) {
            weft_dev_copy(p.dst[unit.slice] + unit.offset, p.src[unit.slice] + unit.offset,
                          unit.bytes, tid, nthreads);
            continue;
        }
        uint64_t off = p.off[unit.slice] + unit.offset;
        if (p.kind == WEFT_WORK_FANOUT) {
            weft_dev_copy_fanout(p.dst, p.ndsts, off, p.src[0] + off, unit.bytes, tid, nthreads);
            continue;
        }
        const void *srcs[WEFT_CUDA_MAX_RANKS];
        for (int r = 0; r < p.nsrcs; r++)
            srcs[r] = p.src[r] + off;
        weft_dev_reduce(p.dst[0] + off, srcs, p.nsrcs, unit.bytes / elem_size(p.dtype), p.dtype,
                        p.redop, p.avg_divisor, tid, nthreads);
        if (p.ndsts > 1) { /* copy the unit's result (in L2) to the other destinations */
            __syncthreads();
            weft_dev_copy_fanout(p.dst + 1, p.ndsts - 1, off, p.dst[0] + off, unit.bytes, tid,
                                 nthreads);
        }
    }
}

/* Whether the launch's blocks store into peers' memory (a store form: an all-gather's fan-out,
 * a two-shot all-reduce's reduction with several destinations, an all-to-all's copies): the
 * closing signal must then order their stores at system scope. */
static __device__ __forceinline__ bool stores_to_peers(const weft_cuda_params_t &p)
{
    return (p.sync & WEFT_SYNC_STORES) != 0;
}

/* ---- the push path (exec_cuda.h): LL words {4 payload bytes, seq} ------------------------ */

static __device__ __forceinline__ void ll_store(uint8_t *word, uint32_t data, uint32_t seq)
{
    asm volatile("st.volatile.global.v2.u32 [%0], {%1, %2};" ::"l"(word), "r"(data), "r"(seq)
                 : "memory");
}

static __device__ __forceinline__ uint2 ll_load(const uint8_t *word)
{
    uint2 v;
    asm volatile("ld.volatile.global.v2.u32 {%0, %1}, [%2];"
                 : "=r"(v.x), "=r"(v.y)
                 : "l"(word)
                 : "memory");
    return v;
}

/* The push path's regions behind rank owner's control block: per parity and sender a header
 * word and an LL slot (two words per 4 payload bytes), then this rank's unpacked payloads. */
static __device__ uint8_t *ll_base(const weft_cuda_params_t &p, int owner)
{
    return reinterpret_cast<uint8_t *>(p.ctl[owner] + 1);
}

static __device__ uint8_t *ll_header(const weft_cuda_params_t &p, int owner, uint32_t seq,
                                     int sender)
{
    return ll_base(p, owner) + ((uint64_t)(seq & 1) * p.nranks + sender) * 8;
}

static __device__ uint8_t *ll_slot(const weft_cuda_params_t &p, int owner, uint32_t seq, int sender)
{
    uint64_t slot = (uint64_t)(seq & 1) * (uint64_t)p.nranks + (uint64_t)sender;
    return ll_base(p, owner) + p.push_headers_bytes + slot * 2 * p.push_slot_bytes;
}

static __device__ uint8_t *ll_unpacked(const weft_cuda_params_t &p, int sender)
{
    return ll_base(p, p.rank) + p.push_headers_bytes +
           ((uint64_t)4 * p.nranks + (uint64_t)sender) * p.push_slot_bytes;
}

/* The 4 payload bytes of lane i of [src, src + bytes) (zero past the end), and their store. */
static __device__ __forceinline__ uint32_t lane_get(const uint8_t *src, uint64_t i, uint64_t bytes)
{
    const uint8_t *a = src + 4 * i;
    if (4 * i + 4 <= bytes && (reinterpret_cast<uintptr_t>(a) & 3) == 0)
        return *reinterpret_cast<const uint32_t *>(a);
    uint32_t v = 0;
    for (int b = 0; b < 4 && 4 * i + b < bytes; b++)
        v |= (uint32_t)a[b] << (8 * b);
    return v;
}

static __device__ __forceinline__ void lane_put(uint8_t *dst, uint64_t i, uint64_t bytes,
                                                uint32_t v)
{
    uint8_t *a = dst + 4 * i;
    if (4 * i + 4 <= bytes && (reinterpret_cast<uintptr_t>(a) & 3) == 0) {
        *reinterpret_cast<uint32_t *>(a) = v;
        return;
    }
    for (int b = 0; b < 4 && 4 * i + b < bytes; b++)
        a[b] = (uint8_t)(v >> (8 * b));
}

/* Wait until the LL word holds seq; its payload in *data. Returns 0 or the status that ended
 * the wait (deadline, abort, an error another block reported). */
static __device__ int32_t ll_wait(const weft_cuda_params_t &p, const uint8_t *word, uint32_t seq,
                                  uint32_t *data)
{
    uint64_t deadline = 0;
    for (unsigned polls = 0;; polls++) {
        uint2 v = ll_load(word);
        if (v.y == seq) {
            *data = v.x;
            return 0;
        }
        int32_t st = wait_ended(p, polls, &deadline);
        if (st != 0)
            return st;
    }
}

/* One push-path operation. Every block owns the payload bytes [lo, hi) (block_share of the
 * largest payload) of every pair of ranks, as far as that pair's payload reaches: it stores them
 * as LL words into the peers' slots, waits for the peers' words of the same bytes, unpacks them
 * (into this rank's unpacked area to reduce, or straight into the destination to copy) and
 * computes its bytes of the result, so no block waits for another and no fence orders anything:
 * every word carries its own flag (the one after the stores is for their timing, see there).
 * Block 0 also exchanges a header word with every peer, so that no operation completes before
 * every peer has started it (the slot reuse rule of exec_cuda.h holds for ranks that send no
 * payload, a broadcast's receivers). */
static __device__ void push_collective(const weft_cuda_params_t &p, uint32_t seq /* low 32 bits */)
{
    __shared__ int32_t failed;
    int me = p.rank, n = p.nranks;
    size_t tid = threadIdx.x, nthreads = blockDim.x;
    int32_t st = 0; /* this thread's: a failed wait ends its waits (the others see the status) */
    if (tid == 0)
        failed = 0;
    __syncthreads();
    if (blockIdx.x == 0 && tid < (size_t)n && (int)tid != me)
        ll_store(ll_header(p, (int)tid, seq, me), 0, seq);
    uint64_t lo, hi;
    bool mine = block_share(p.push_bytes, &lo, &hi);
    uint64_t lane_lo = lo / 4;
    if (mine) {
        for (int i = 1; i < n; i++) {
            int r = (me + i) % n;
            uint64_t bytes = p.push_send[r], lane_hi = (weft_dev_min(hi, bytes) + 3) / 4;
            uint8_t *slot = ll_slot(p, r, seq, me);
            for (uint64_t l = lane_lo + tid; l < lane_hi; l += nthreads)
                ll_store(slot + 8 * l, lane_get(p.src[r], l, bytes), seq);
        }
        /* Not for ordering (every LL word carries its flag) but for time: after 50 ms or more
         * without traffic between two GPUs, stores into the peer GPU landed about 1 ms late
         * unless the storing thread fenced (block 0's header stores included); a gpu-scope
         * fence per thread was the cheapest that helped, 0.4-0.7 us per call
         * (docs/results/2026-11-30-h200-s8.md, section 3). */
        __threadfence();
        for (int i = 1; i < n && st == 0; i++) {
            int r = (me + n - i) % n;
            uint64_t bytes = p.push_recv[r], lane_hi = (weft_dev_min(hi, bytes) + 3) / 4;
            const uint8_t *slot = ll_slot(p, me, seq, r);
            uint8_t *out = p.kind == WEFT_WORK_REDUCE ? ll_unpacked(p, r) : p.dst[r];
            for (uint64_t l = lane_lo + tid; l < lane_hi && st == 0; l += nthreads) {
                uint32_t v;
                st = ll_wait(p, slot + 8 * l, seq, &v);
                if (st == 0)
                    lane_put(out, l, bytes, v);
            }
        }
    }
    if (st == 0 && blockIdx.x == 0 && tid < (size_t)n && (int)tid != me) {
        uint32_t v;
        st = ll_wait(p, ll_header(p, me, seq, (int)tid), seq, &v);
    }
    if (st != 0) {
        report(p, st);
        atomicExch(&failed, st);
    }
    __syncthreads();
    if (mine && !failed) {
        if (p.kind == WEFT_WORK_REDUCE) {
            const void *srcs[WEFT_CUDA_MAX_RANKS];
            for (int r = 0; r < n; r++)
                srcs[r] = (r == me ? p.src[me] : ll_unpacked(p, r)) + lo;
            weft_dev_reduce(p.dst[0] + lo, srcs, n, (hi - lo) / elem_size(p.dtype), p.dtype,
                            p.redop, p.avg_divisor, tid, nthreads);
        } else if (p.src[me] != NULL && p.src[me] != p.dst[me] && lo < p.push_send[me]) {
            uint64_t end = weft_dev_min(hi, (uint64_t)p.push_send[me]);
            weft_dev_copy(p.dst[me] + lo, p.src[me] + lo, end - lo, tid, nthreads);
        }
    }
}

static __device__ __forceinline__ void collective(const weft_cuda_params_t &p)
{
    __shared__ uint64_t seq, failed_before;
    weft_cuda_ctl_t *me = p.ctl[p.rank];
    if (threadIdx.x == 0) { /* two loads in flight together */
        seq = *(volatile uint64_t *)&me->seq.v + 1;
        failed_before = weft_dev_failed(me);
    }
    __syncthreads();
    /* A kernel of this rank failed before (a launch of this operation, an earlier one or a
     * replayed graph's; the host learns it at its next call): post no flag and move no data, so
     * that no peer takes this rank for ready or done and writes into or reads its buffers. The
     * communicator is dead: counters left as they are no longer matter. */
    if (failed_before)
        return;

    if (p.push_bytes > 0) {
        push_collective(p, (uint32_t)seq);
        if (arrive_last(&me->arrive) && threadIdx.x == 0)
            *(volatile uint64_t *)&me->seq.v = seq;
        return;
    }

    int32_t st = 0;
    if (!(p.sync & WEFT_SYNC_CONTINUE)) {
        int post = blockIdx.x == 0;
        if (p.pre_bytes > 0) {
            run_pre_copy(p);
            post = arrive_last(&me->copied);
            /* Acquire every block's copy before exchange() posts (arrive_last). */
            if (post && threadIdx.x == 0)
                __threadfence();
        }
        st = exchange(p, 0, seq, post, p.pre_bytes > 0);
    }
    if (st == 0 && p.kind >= 0)
        run_units(p);

    /* The last block to finish runs the closing signal, unless some block failed (it skipped
     * its units): then peers must not take this rank for done. */
    int arrived = arrive_last(&me->arrive, stores_to_peers(p), st != 0);
    if (!arrived)
        return;
    __threadfence_system();
    if (arrived == ARRIVED_LAST_FAILED)
        st = WEFT_ERR_INTERNAL; /* reported already by the block that failed */
    if (st == 0 && (p.sync & WEFT_SYNC_PHASE))
        st = exchange(p, 1, seq, 1, 0);
    if (st == 0 && (p.sync & (WEFT_SYNC_DONE | WEFT_SYNC_DONE_NOWAIT)))
        st = exchange(p, 2, seq, 1, 0);
    if (threadIdx.x == 0) {
        /* The operation is over unless a phase or another launch of it follows. */
        if (!(p.sync & (WEFT_SYNC_PHASE | WEFT_SYNC_KEEP_SEQ)))
            *(volatile uint64_t *)&me->seq.v = seq;
    }
}

/* The kernel's parameter: weft_cuda_params_t cut after its first UNITS units. The driver copies
 * the whole parameter at every launch (on an H200 a 7.4 KB one costs 1.7 us more per launch than
 * 1 KB), so launches with few units take the short form; the kernel reads no unit past the
 * launch's last (block_begin[gridDim.x]). */
template <int UNITS> struct alignas(alignof(weft_cuda_params_t)) params_head {
    unsigned char bytes[offsetof(weft_cuda_params_t, units) + UNITS * sizeof(weft_cuda_unit_t)];
};
static_assert(sizeof(params_head<WEFT_CUDA_MAX_UNITS>) == sizeof(weft_cuda_params_t),
              "the long form is the whole parameter block");

#define SHORT_UNITS 32 /* units of the short form: small operations, signals only, barriers */

template <int UNITS>
__global__ void __launch_bounds__(WEFT_CUDA_THREADS, 2)
    weft_cuda_collective(const __grid_constant__ params_head<UNITS> head)
{
    collective(*reinterpret_cast<const weft_cuda_params_t *>(&head));
}

template <int UNITS>
static weft_status_t launch(const weft_cuda_params_t *params, int nblocks, cudaStream_t stream)
{
    return weft_cuda_launch_kernel("collective", weft_cuda_collective<UNITS>, nblocks,
                                   WEFT_CUDA_THREADS, stream,
                                   *reinterpret_cast<const params_head<UNITS> *>(params));
}

extern "C" weft_status_t weft_cuda_launch(const weft_cuda_params_t *params, int nblocks,
                                          void *stream)
{
    if (params->block_begin[nblocks] <= SHORT_UNITS)
        return launch<SHORT_UNITS>(params, nblocks, (cudaStream_t)stream);
    return launch<WEFT_CUDA_MAX_UNITS>(params, nblocks, (cudaStream_t)stream);
}
