/*
 * gpu_registration.c - registration of device memory seen through the public API, under each
 * registration mode, on the CUDA backend.
 *
 *   many buffers (roa: 1000, jit: 200; quick: 100, 50): allocate them all, each larger than
 *     everything registered so far divided by their number (so that they cannot all fit in
 *     memory registered before); in roa mode wait until every registration is acknowledged and
 *     report how long that took; then one all_gather from each buffer, all queued back to back
 *     on the stream, each result checked; peer_mappings must have grown by at least one mapping
 *     per peer and at most one per peer and buffer; then an all_reduce on fresh buffers still
 *     gives exact results with all those mappings in place.
 *   alloc-then-use: fresh weft or interior buffers of many sizes, filled and used by an
 *     all_reduce right after weft_malloc, freed right after; results must be exact, the path
 *     zero-copy in roa/jit mode and staged in staged mode.
 *   address reuse: weft_free then weft_malloc of the same size, many times, each time with new
 *     data that peers read (all_gather); a stale peer mapping would show old data.
 *   first-use waits: allocate, barrier, then in roa mode poll the stats until every
 *     registration started has been acknowledged (deadline REGISTER_WAIT_S, however slow the
 *     registrar is under load) and use: first_use_waits must not move; in jit mode sleep 50 ms
 *     and use: the first use registers and must count a wait, and a second use of the same
 *     buffers must not.
 *   counters: registrations_completed <= registrations_started; a fresh allocation larger than
 *     everything registered so far raises registrations_started, registrations_completed and
 *     bytes_registered once used (roa: by at least its size; jit: nothing before first use).
 *   another thread: a thread that has no current CUDA context (it never used CUDA), and one
 *     whose current device is another GPU (with two or more visible), each allocate with
 *     weft_malloc, fill the buffer, all-reduce it on the test's stream and free it: every call
 *     succeeds, the memory is on the communicator's device, the result is exact, and after each
 *     weft call the thread's context is what it was: none, or the other GPU's (weft makes the
 *     communicator's context current for each call and gives the caller's back, as NCCL does;
 *     a thread without one must not be left with device 0's, which would create a context
 *     there).
 *   PyTorch's allocator entry points (roa only): while one thread's weft_torch_free waits for the
 *     device (held busy by a host function on a side stream until the test releases it, at most
 *     TORCH_GATE_S), another thread's weft_torch_alloc returns at once; an unbind started then
 *     returns only after that free has finished; every call succeeds. In every mode: a
 *     weft_torch_free of a pointer that is not weft's (cudaMalloc) fails and leaves PyTorch's
 *     segment count as it was: with one segment still held, binding the communicator again
 *     after an unbind is refused.
 *   another GPU (two or more visible): a last communicator on which each rank takes the rank of
 *     its mirror image, and so another GPU; a weft_malloc all-gather there is exact.
 * Registration is seen through remote reads of user buffers, which weft's push path (small
 * payloads stored into the peers' control blocks) never makes: main turns it off
 * (WEFT_CUDA_PUSH_BYTES=0, before weft reads its configuration). The counters and first-use
 * cases count registrations per allocation: main also sets WEFT_CUDA_CHUNK_BYTES=0 (a chunk,
 * registered by itself, per allocation).
 * On each communicator the counters come first (later tests register more than their 1 GiB
 * cap), then the many buffers, before the tests that free many buffers: peers' unmaps still
 * under way would lower peer_mappings while it is compared (one freed buffer per peer, as the
 * counters test leaves, is within the bounds).
 */
#include "gpu_harness.h"

#include <cuda.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft_torch.h"

#define SLEEP_BEFORE_USE_MS 50.0
#define BIG_CAP_BYTES ((uint64_t)1 << 30)
#define MANY_ROA 1000
#define MANY_JIT 200
#define MANY_ROA_QUICK 100
#define MANY_JIT_QUICK 50
#define MANY_MIN_BYTES ((size_t)64 << 10)
#define MANY_ELEMS 64 /* uint64 gathered from each buffer: 512 bytes, more than travels inline */
#define REGISTER_WAIT_S 120.0
#define TORCH_GATE_S 20.0 /* below WEFT_TIMEOUT_S: an unbind waits that long for a free */
#define TORCH_BYTES ((ssize_t)64 << 10)

static const size_t use_sizes[] = {1, 3, 255, 1024, 4099, 65537, 300001};
static const weft_dtype_t use_dtypes[] = {WEFT_INT32,   WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_INT8,
                                          WEFT_FLOAT64, WEFT_UINT64,  WEFT_FLOAT16};
#define NUM_USE_DTYPES (sizeof use_dtypes / sizeof use_dtypes[0])

/* All ranks agree on a value: the maximum of theirs (through device memory). */
static uint64_t agree_max(gpu_ctx_t *g, uint64_t mine)
{
    gpu_buf_t b;
    gpu_buf_get(g, &b, NULL, GPU_BUF_WEFT, 2 * sizeof(uint64_t), 8);
    memcpy(b.host, &mine, sizeof mine);
    gpu_buf_push(g, &b, 0, sizeof mine);
    mp_ok(&g->mp,
          weft_all_reduce(g->mp.comm, b.ptr, b.ptr + 8, 1, WEFT_UINT64, WEFT_MAX, g->stream),
          "weft_all_reduce");
    gpu_buf_pull(g, &b);
    gpu_sync(g, "agreeing on a value");
    uint64_t agreed;
    memcpy(&agreed, b.host + 8, sizeof agreed);
    gpu_buf_put(g, &b);
    return agreed;
}

/* One all_reduce (float32 sum) on fresh weft buffers of count elements; checks the result. */
static void fresh_all_reduce(gpu_ctx_t *g, size_t count, const char *what)
{
    mp_ctx_t *ctx = &g->mp;
    mp_case(ctx, "%s: all_reduce of %zu float32 on fresh buffers", what, count);
    gpu_buf_t send, recv;
    gpu_buf_get(g, &send, NULL, GPU_BUF_WEFT, count * 4, 4);
    gpu_buf_get(g, &recv, NULL, GPU_BUF_INTERIOR, count * 4, 4);
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, send.host);
    gpu_buf_push(g, &send, 0, count * 4);
    int ok = mp_ok(
        ctx,
        weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, WEFT_FLOAT32, WEFT_SUM, g->stream),
        "weft_all_reduce");
    gpu_buf_pull(g, &recv);
    gpu_sync(g, "all_reduce");
    if (ok)
        mp_red_check_result(ctx, "recvbuf", recv.host, WEFT_FLOAT32, WEFT_SUM, 0, count);
    gpu_buf_check_guards(g, &recv, "recvbuf");
    gpu_buf_put(g, &send);
    gpu_buf_put(g, &recv);
}

/* ---------------------------------------------------------------------------------------------
 * Many buffers
 * ------------------------------------------------------------------------------------------- */
static uint64_t many_value(const mp_ctx_t *ctx, int rank, int i, int j)
{
    return mp_hash(ctx->seed + ctx->case_id, (uint64_t)rank, (uint64_t)i * MANY_ELEMS + (uint64_t)j,
                   13);
}

/* Poll the stats until every registration this rank started is acknowledged by all peers, for
 * at most REGISTER_WAIT_S (a failure if that runs out). Returns the seconds it took, or -1. */
static double settle_registrations(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    double t0 = mp_now_s();
    weft_stats_t s;
    for (;;) {
        mp_stats(ctx, &s);
        if (s.registrations_completed >= s.registrations_started)
            return mp_now_s() - t0;
        if (mp_now_s() - t0 > REGISTER_WAIT_S) {
            mp_fail(ctx,
                    "%" PRIu64 " of %" PRIu64 " registrations still unacknowledged after %.0f s",
                    s.registrations_started - s.registrations_completed, s.registrations_started,
                    REGISTER_WAIT_S);
            return -1;
        }
        mp_sleep_ms(5);
    }
}

/* Wait until every registration this rank started is acknowledged by all peers. */
static void wait_registered(gpu_ctx_t *g, int k)
{
    double dt = settle_registrations(g);
    if (dt >= 0)
        mp_note(&g->mp, "reg=%s: %d allocations registered with %d peers in %.2f s (rank 0)",
                mp_reg_name(g->mp.reg), k, g->mp.nranks - 1, dt);
}

static void many_buffers(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    if (ctx->nranks < 2 || ctx->reg == WEFT_REGISTRATION_STAGED)
        return;
    int roa = ctx->reg == WEFT_REGISTRATION_ROA;
    int k =
        roa ? (ctx->quick ? MANY_ROA_QUICK : MANY_ROA) : (ctx->quick ? MANY_JIT_QUICK : MANY_JIT);
    int n = ctx->nranks;
    weft_stats_t s0, s1, s2;
    mp_stats(ctx, &s0);
    /* Together larger than everything registered so far, on every rank. */
    uint64_t each = s0.bytes_registered / (uint64_t)k + 4096;
    each = each < MANY_MIN_BYTES ? MANY_MIN_BYTES : (each + 4095) / 4096 * 4096;
    size_t bytes = (size_t)agree_max(g, each);
    mp_case(ctx, "%d buffers of %zu bytes, one all_gather from each", k, bytes);
    /* No peer allocates before this rank has read its counters. */
    mp_stats(ctx, &s0);
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "barrier");

    void **bufs = calloc((size_t)k, sizeof *bufs);
    uint64_t *vals = calloc((size_t)k * MANY_ELEMS, sizeof *vals);
    if (!bufs || !vals)
        mp_fatal(ctx, "out of memory");
    double t0 = mp_now_s();
    for (int i = 0; i < k; i++) {
        weft_status_t st = weft_malloc(ctx->comm, &bufs[i], bytes);
        if (st != WEFT_SUCCESS || !bufs[i])
            mp_fatal(ctx, "weft_malloc #%d (%zu bytes) returned %s: %s", i, bytes,
                     weft_status_string(st), weft_last_error());
        uint64_t *v = vals + (size_t)i * MANY_ELEMS;
        for (int j = 0; j < MANY_ELEMS; j++)
            v[j] = many_value(ctx, ctx->rank, i, j);
        gpu_h2d(g, bufs[i], v, MANY_ELEMS * sizeof *v);
    }
    mp_note(ctx, "reg=%s: %d weft_malloc calls of %zu bytes in %.3f s (rank 0)",
            mp_reg_name(ctx->reg), k, bytes, mp_now_s() - t0);
    if (roa)
        wait_registered(g, k);

    /* The results go to cudaMalloc memory: nothing peers map. */
    gpu_buf_t out;
    size_t row = (size_t)n * MANY_ELEMS * 8; /* the results of one all_gather */
    gpu_buf_get(g, &out, NULL, GPU_BUF_CUDA, (size_t)k * row, 8);
    int failed = 0;
    for (int i = 0; i < k && !failed; i++) {
        weft_status_t st = weft_all_gather(ctx->comm, bufs[i], out.ptr + (size_t)i * row,
                                           MANY_ELEMS, WEFT_UINT64, g->stream);
        failed = !mp_ok(ctx, st, "weft_all_gather");
    }
    gpu_buf_pull(g, &out);
    gpu_sync(g, "all_gathers from the buffers");
    if (!failed) {
        size_t bad = 0;
        int first_i = -1, first_p = -1;
        for (int i = 0; i < k; i++)
            for (int p = 0; p < n; p++)
                for (int j = 0; j < MANY_ELEMS; j++) {
                    uint64_t got;
                    memcpy(&got, out.host + (size_t)i * row + ((size_t)p * MANY_ELEMS + j) * 8, 8);
                    if (got != many_value(ctx, p, i, j) && bad++ == 0) {
                        first_i = i;
                        first_p = p;
                    }
                }
        mp_check(ctx, bad == 0, "%zu of %d gathered values wrong (first: buffer %d from rank %d)",
                 bad, k * n * MANY_ELEMS, first_i, first_p);
    }
    gpu_buf_check_guards(g, &out, "gathered values");
    mp_stats(ctx, &s1);
    /* After the first barrier every rank has used all its buffers, so every peer has mapped
     * them (or the chunks holding them); the second keeps peers from allocating (and so
     * registering) anything new until this rank has read its counters. */
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "barrier");
    mp_stats(ctx, &s2);
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "barrier");
    mp_check_registration_invariants(ctx, &s1, "after the all_gathers");
    uint64_t grown = s2.peer_mappings - s0.peer_mappings;
    uint64_t lo = (uint64_t)(n - 1), hi = (uint64_t)(n - 1) * (uint64_t)k;
    mp_check(ctx, s2.peer_mappings >= s0.peer_mappings && grown >= lo && grown <= hi,
             "peer_mappings went from %" PRIu64 " to %" PRIu64 " after %d peers' %d buffers each "
             "were used (expected +%" PRIu64 "..+%" PRIu64 ")",
             s0.peer_mappings, s2.peer_mappings, n - 1, k, lo, hi);
    mp_note(ctx, "reg=%s: peer_mappings %" PRIu64 " -> %" PRIu64 " (%d peers x %d buffers)",
            mp_reg_name(ctx->reg), s0.peer_mappings, s2.peer_mappings, n - 1, k);

    fresh_all_reduce(g, ctx->quick ? 4099 : MP_LARGE_COUNT, "with many peer mappings");
    gpu_buf_put(g, &out);
    for (int i = 0; i < k; i++)
        mp_ok(ctx, weft_free(ctx->comm, bufs[i]), "weft_free");
    free(bufs);
    free(vals);
}

/* ---------------------------------------------------------------------------------------------
 * Allocate, use at once, free
 * ------------------------------------------------------------------------------------------- */
static void alloc_then_use(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    int rounds = ctx->quick ? 1 : 3;
    unsigned k = 0;
    for (int round = 0; round < rounds; round++)
        for (size_t i = 0; i < sizeof use_sizes / sizeof use_sizes[0]; i++, k++) {
            gpu_buf_kind_t kind = k % 2 ? GPU_BUF_INTERIOR : GPU_BUF_WEFT;
            size_t count = use_sizes[i];
            weft_dtype_t dt = use_dtypes[k % NUM_USE_DTYPES];
            weft_redop_t op = (weft_redop_t)(k % WEFT_NUM_REDOPS);
            size_t es = mp_dtype_bytes(dt), bytes = count * es;
            mp_case(ctx, "alloc-then-use %s count=%zu %s %s", gpu_buf_kind_name(kind), count,
                    mp_dtype_name(dt), mp_op_name(op));
            gpu_buf_t send, recv;
            gpu_buf_get(g, &send, NULL, kind, bytes, es);
            gpu_buf_get(g, &recv, NULL, kind, bytes, es);
            mp_red_fill(ctx, dt, op, ctx->rank, 0, count, send.host);
            gpu_buf_push(g, &send, 0, bytes);
            weft_stats_t s0, s1;
            mp_stats(ctx, &s0);
            weft_status_t st =
                weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, dt, op, g->stream);
            mp_stats(ctx, &s1);
            int ok = mp_ok(ctx, st, "weft_all_reduce");
            gpu_buf_pull(g, &recv);
            gpu_sync(g, "all_reduce");
            if (ok) {
                mp_red_check_result(ctx, "recvbuf", recv.host, dt, op, 0, count);
                gpu_check_path(g, &s0, &s1, kind, bytes, 1);
            }
            gpu_buf_check_guards(g, &recv, "recvbuf");
            gpu_buf_put(g, &send);
            gpu_buf_put(g, &recv);
        }
}

/* ---------------------------------------------------------------------------------------------
 * Address reuse
 * ------------------------------------------------------------------------------------------- */
static void address_reuse(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    int iters = ctx->quick ? 15 : 40;
    const size_t count = 16387; /* uint32 elements: 64 KiB + 12 bytes */
    size_t bytes = count * 4, n = (size_t)ctx->nranks;
    void *prev = NULL;
    int reused = 0;
    for (int it = 0; it < iters; it++) {
        mp_case(ctx, "address reuse iteration %d", it);
        gpu_buf_t send, recv;
        gpu_buf_get(g, &send, NULL, GPU_BUF_WEFT, bytes, 4);
        gpu_buf_get(g, &recv, NULL, GPU_BUF_WEFT, n * bytes, 4);
        reused += send.owned == prev;
        prev = send.owned;
        mp_raw_fill(ctx, WEFT_UINT32, ctx->rank, 0, count, send.host);
        gpu_buf_push(g, &send, 0, bytes);
        weft_status_t st =
            weft_all_gather(ctx->comm, send.ptr, recv.ptr, count, WEFT_UINT32, g->stream);
        int ok = mp_ok(ctx, st, "weft_all_gather");
        gpu_buf_pull(g, &recv);
        gpu_sync(g, "all_gather");
        if (ok)
            for (int p = 0; p < ctx->nranks; p++) {
                char what[64];
                snprintf(what, sizeof what, "recvbuf block %d", p);
                mp_raw_check(ctx, what, recv.host + (size_t)p * bytes, WEFT_UINT32, p, 0, count);
            }
        gpu_buf_check_guards(g, &recv, "recvbuf");
        gpu_buf_put(g, &send);
        gpu_buf_put(g, &recv);
    }
    mp_note(ctx, "reg=%s: address reuse: %d of %d allocations got the previous address",
            mp_reg_name(ctx->reg), reused, iters);
}

/* ---------------------------------------------------------------------------------------------
 * First-use waits
 * ------------------------------------------------------------------------------------------- */
static void first_use_waits(gpu_ctx_t *g)
{
    static const size_t sizes[] = {4096, 1 << 20, 9 << 20};
    mp_ctx_t *ctx = &g->mp;
    if (ctx->nranks < 2 || ctx->reg == WEFT_REGISTRATION_STAGED)
        return;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t bytes = sizes[i], count = bytes / 4;
        int roa = ctx->reg == WEFT_REGISTRATION_ROA;
        if (roa)
            mp_case(ctx, "first use after weft_malloc's registrations completed, %zu bytes", bytes);
        else
            mp_case(ctx, "first use %.0f ms after weft_malloc, %zu bytes", SLEEP_BEFORE_USE_MS,
                    bytes);
        gpu_buf_t send, recv;
        gpu_buf_get(g, &send, NULL, GPU_BUF_WEFT, bytes, 4);
        gpu_buf_get(g, &recv, NULL, GPU_BUF_WEFT, bytes, 4);
        mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, send.host);
        gpu_buf_push(g, &send, 0, bytes);
        mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
        gpu_sync(g, "barrier");
        if (roa) {
            /* Wait for the registrations of weft_malloc to complete, not for a time (a
             * registration counted as completed is acknowledged already: registry.c,
             * handle_ack); the second barrier lines the ranks up, as the jit branch's does. */
            settle_registrations(g);
            mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
            gpu_sync(g, "barrier after the registrations");
        } else {
            mp_sleep_ms(SLEEP_BEFORE_USE_MS);
        }
        weft_stats_t s0, s1, s2;
        mp_stats(ctx, &s0);
        int ok = mp_ok(ctx,
                       weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, WEFT_FLOAT32, WEFT_SUM,
                                       g->stream),
                       "weft_all_reduce");
        mp_stats(ctx, &s1);
        gpu_buf_pull(g, &recv);
        gpu_sync(g, "first use");
        if (ok)
            mp_red_check_result(ctx, "recvbuf (first use)", recv.host, WEFT_FLOAT32, WEFT_SUM, 0,
                                count);
        gpu_cuda_ok(g, cudaMemsetAsync(recv.ptr, 0xA5, bytes, g->stream), "cudaMemsetAsync");
        ok = mp_ok(ctx,
                   weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, WEFT_FLOAT32, WEFT_SUM,
                                   g->stream),
                   "weft_all_reduce");
        mp_stats(ctx, &s2);
        gpu_buf_pull(g, &recv);
        gpu_sync(g, "second use");
        if (ok)
            mp_red_check_result(ctx, "recvbuf (second use)", recv.host, WEFT_FLOAT32, WEFT_SUM, 0,
                                count);
        mp_check(ctx,
                 s1.first_use_waits >= s0.first_use_waits &&
                     s2.first_use_waits >= s1.first_use_waits &&
                     s1.first_use_wait_ns >= s0.first_use_wait_ns,
                 "first_use_waits or first_use_wait_ns went down");
        mp_check_first_use_waits(ctx, &s0, &s1, &s2);
        gpu_buf_put(g, &send);
        gpu_buf_put(g, &recv);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Counters
 * ------------------------------------------------------------------------------------------- */
static void counters(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    const size_t use_count = 1024; /* float32 elements used at the start of the allocation */
    weft_stats_t s0, s1, s2;
    mp_stats(ctx, &s0);
    mp_check_registration_invariants(ctx, &s0, "start");
    /* Larger than everything registered so far: it cannot fit in a registered chunk. */
    uint64_t big = s0.bytes_registered + ((uint64_t)1 << 20) + 4096;
    big = big < ((uint64_t)4 << 20) ? (uint64_t)4 << 20 : big;
    uint64_t agreed = agree_max(g, big);
    mp_case(ctx, "registration counters, %" PRIu64 " bytes", agreed);
    /* The counters come first on a fresh communicator: more than the cap registered by then
     * means registration was counted wrong (or a setting made it huge), not a reason to skip. */
    if (!mp_check(ctx, agreed <= BIG_CAP_BYTES,
                  "counters: a fresh allocation larger than everything registered so far "
                  "needs %" PRIu64 " bytes on a fresh communicator, over the %" PRIu64 "-byte cap",
                  agreed, BIG_CAP_BYTES))
        return;
    mp_stats(ctx, &s0);
    void *buf = NULL;
    weft_status_t st = weft_malloc(ctx->comm, &buf, (size_t)agreed);
    if (st != WEFT_SUCCESS || !buf)
        mp_fatal(ctx, "weft_malloc(%" PRIu64 ") returned %s: %s", agreed, weft_status_string(st),
                 weft_last_error());
    mp_stats(ctx, &s1);
    mp_check_registration_invariants(ctx, &s1, "after weft_malloc");
    mp_check_malloc_registered(ctx, &s0, &s1);
    /* Use it: all_reduce from its first use_count floats into the next use_count. */
    unsigned char *in = buf, *out = in + use_count * 4;
    float *host = malloc(use_count * 4);
    if (!host)
        mp_fatal(ctx, "out of memory");
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, use_count, host);
    gpu_h2d(g, in, host, use_count * 4);
    gpu_cuda_ok(g, cudaMemsetAsync(out, 0xA5, use_count * 4, g->stream), "cudaMemsetAsync");
    st = weft_all_reduce(ctx->comm, in, out, use_count, WEFT_FLOAT32, WEFT_SUM, g->stream);
    int ok = mp_ok(ctx, st, "weft_all_reduce");
    mp_stats(ctx, &s2);
    gpu_d2h(g, host, out, use_count * 4);
    gpu_sync(g, "counters all_reduce");
    if (ok)
        mp_red_check_result(ctx, "recvbuf", host, WEFT_FLOAT32, WEFT_SUM, 0, use_count);
    free(host);
    mp_check_registration_invariants(ctx, &s2, "after first use");
    mp_check_use_registered(ctx, &s0, &s2, agreed, 2 * use_count * 4);
    if (ok)
        gpu_check_path(g, &s1, &s2, GPU_BUF_WEFT, use_count * 4, 1);
    mp_ok(ctx, weft_free(ctx->comm, buf), "weft_free");
}

#define THREAD_ELEMS 4099

/* What the other thread saw; the main thread checks it (only it may CHECK). */
typedef struct thread_run {
    gpu_ctx_t *g;
    int device;   /* the thread's own current device (-1: it has no context) */
    int after[3]; /* thread_state() after weft_malloc, weft_all_reduce, weft_free */
    weft_status_t malloc_st, reduce_st, free_st;
    cudaError_t copy_err, sync_err;
    int mem_device; /* where weft_malloc's memory lives */
    float input[THREAD_ELEMS], result[THREAD_ELEMS];
} thread_run_t;

static float thread_value(int rank, size_t i)
{
    return (float)(rank * 1000 + (int)(i % 1000)); /* sums of these are exact in float32 */
}

/* cuCtxGetCurrent and cuCtxSetCurrent, from the driver through the runtime (other_thread). */
static CUresult (*ctx_get)(CUcontext *);
static CUresult (*ctx_set)(CUcontext);

/* The device of the calling thread's current context; -1 when it has none, -2 when it cannot
 * tell. */
static int thread_state(void)
{
    CUcontext c = NULL;
    int d;
    if (ctx_get(&c) != CUDA_SUCCESS)
        return -2;
    return !c ? -1 : cudaGetDevice(&d) == cudaSuccess ? d : -2;
}

/* The test's own calls run with the stream's device current (the runtime refuses a copy into
 * another device's stream); only the weft calls run in the thread's own state. */
static void test_device(const thread_run_t *t, int on)
{
    if (on)
        (void)cudaSetDevice(t->g->device);
    else if (t->device >= 0)
        (void)cudaSetDevice(t->device);
    else
        (void)ctx_set(NULL);
}

static void *other_thread_main(void *arg)
{
    thread_run_t *t = arg;
    const mp_ctx_t *ctx = &t->g->mp;
    if (t->device >= 0)
        (void)cudaSetDevice(t->device);
    for (size_t i = 0; i < THREAD_ELEMS; i++)
        t->input[i] = thread_value(ctx->rank, i);
    float *p = NULL;
    t->malloc_st = weft_malloc(ctx->comm, (void **)&p, sizeof t->input);
    t->after[0] = thread_state();
    if (t->malloc_st != WEFT_SUCCESS)
        return NULL;
    test_device(t, 1);
    struct cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) == cudaSuccess)
        t->mem_device = attr.device;
    t->copy_err =
        cudaMemcpyAsync(p, t->input, sizeof t->input, cudaMemcpyHostToDevice, t->g->stream);
    test_device(t, 0);
    t->reduce_st =
        weft_all_reduce(ctx->comm, p, p, THREAD_ELEMS, WEFT_FLOAT32, WEFT_SUM, t->g->stream);
    t->after[1] = thread_state();
    test_device(t, 1);
    if (t->copy_err == cudaSuccess)
        t->copy_err =
            cudaMemcpyAsync(t->result, p, sizeof t->result, cudaMemcpyDeviceToHost, t->g->stream);
    t->sync_err = gpu_stream_wait(t->g->stream, t->g->sync_limit_s);
    test_device(t, 0);
    t->free_st = weft_free(ctx->comm, p);
    t->after[2] = thread_state();
    return NULL;
}

/* weft calls from a thread on device (-1: with no context). */
static void other_thread_on(gpu_ctx_t *g, int device)
{
    mp_ctx_t *ctx = &g->mp;
    static thread_run_t t;
    memset(&t, 0, sizeof t);
    t.g = g;
    t.device = device;
    t.mem_device = -1;
    mp_case(ctx, "weft_malloc, all_reduce, weft_free from a thread on %s",
            t.device >= 0 ? "another device" : "no context");
    pthread_t th;
    if (pthread_create(&th, NULL, other_thread_main, &t) != 0)
        mp_fatal(ctx, "pthread_create");
    pthread_join(th, NULL);
    static const char *const calls[3] = {"weft_malloc", "weft_all_reduce", "weft_free"};
    for (int i = 0; i < 3; i++)
        mp_check(ctx, t.after[i] == t.device || (i > 0 && t.malloc_st != WEFT_SUCCESS),
                 "after %s the other thread's context is device %d's, not device %d's (-1: "
                 "none)",
                 calls[i], t.after[i], t.device);
    mp_ok(ctx, t.malloc_st, "weft_malloc on the other thread");
    if (t.malloc_st != WEFT_SUCCESS)
        return;
    mp_check(ctx, t.mem_device == g->device, "weft_malloc's memory is on device %d, not %d",
             t.mem_device, g->device);
    mp_ok(ctx, t.reduce_st, "weft_all_reduce on the other thread");
    mp_ok(ctx, t.free_st, "weft_free on the other thread");
    mp_check(ctx, t.copy_err == cudaSuccess && t.sync_err == cudaSuccess,
             "copies or stream wait on the other thread: %s, %s", cudaGetErrorName(t.copy_err),
             cudaGetErrorName(t.sync_err));
    size_t wrong = 0;
    for (size_t i = 0; i < THREAD_ELEMS; i++) {
        float want = 0;
        for (int r = 0; r < ctx->nranks; r++)
            want += thread_value(r, i);
        wrong += t.result[i] != want;
    }
    mp_check(ctx, wrong == 0, "%zu of %d all-reduced elements wrong", wrong, THREAD_ELEMS);
}

/* weft calls from a thread with no context, and from one on another device (two or more
 * visible). */
static void other_thread(gpu_ctx_t *g)
{
    int visible = 0;
    gpu_cuda_ok(g, cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
    enum cudaDriverEntryPointQueryResult found;
    void *get = NULL, *set = NULL;
    gpu_cuda_ok(
        g,
        cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &get, 12000, cudaEnableDefault, &found),
        "cudaGetDriverEntryPointByVersion(cuCtxGetCurrent)");
    gpu_cuda_ok(
        g,
        cudaGetDriverEntryPointByVersion("cuCtxSetCurrent", &set, 12000, cudaEnableDefault, &found),
        "cudaGetDriverEntryPointByVersion(cuCtxSetCurrent)");
    if (!get || !set)
        mp_fatal(&g->mp, "cuCtxGetCurrent or cuCtxSetCurrent not found");
    memcpy(&ctx_get, &get, sizeof get);
    memcpy(&ctx_set, &set, sizeof set);
    other_thread_on(g, -1);
    if (visible > 1)
        other_thread_on(g, (g->device + 1) % visible);
}

/* A thread's weft_torch_free (ptr set) or weft_torch_bind(NULL) (ptr NULL). */
typedef struct torch_call {
    void *ptr;
    int device;
    _Atomic int started, done;
    char error[256]; /* weft_last_error() after the call */
} torch_call_t;

static void *torch_call_main(void *arg)
{
    torch_call_t *c = arg;
    atomic_store(&c->started, 1);
    if (c->ptr)
        weft_torch_free(c->ptr, TORCH_BYTES, c->device, NULL); /* errors: weft_last_error() */
    else
        (void)weft_torch_bind(NULL);
    snprintf(c->error, sizeof c->error, "%s", weft_last_error());
    atomic_store(&c->done, 1);
    return NULL;
}

/* Start c on a thread and give it SLEEP_BEFORE_USE_MS to reach its wait once started (a slower
 * thread makes the test pass without showing anything, never fail). */
static void torch_call_start(mp_ctx_t *ctx, torch_call_t *c, pthread_t *th)
{
    if (pthread_create(th, NULL, torch_call_main, c) != 0)
        mp_fatal(ctx, "pthread_create");
    while (!atomic_load(&c->started))
        mp_sleep_ms(1);
    mp_sleep_ms(SLEEP_BEFORE_USE_MS);
}

/* A free waiting for the device holds up no allocation on another thread; an unbind waits for
 * the free. */
static void torch_allocator_threads(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    mp_case(ctx, "weft_torch_alloc while another thread's weft_torch_free waits for the device");
    mp_ok(ctx, weft_torch_bind(ctx->comm), "weft_torch_bind");
    void *p = weft_torch_alloc(TORCH_BYTES, g->device, NULL);
    if (!mp_check(ctx, p != NULL, "weft_torch_alloc: %s", weft_last_error())) {
        mp_ok(ctx, weft_torch_bind(NULL), "weft_torch_bind(NULL)");
        return;
    }
    static gpu_gate_t gate;
    gpu_gate_init(&gate, TORCH_GATE_S);
    cudaStream_t side;
    gpu_cuda_ok(g, cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreate");
    gpu_cuda_ok(g, cudaLaunchHostFunc(side, gpu_gate_hold, &gate), "cudaLaunchHostFunc");
    static torch_call_t freeing, unbinding;
    memset(&freeing, 0, sizeof freeing);
    memset(&unbinding, 0, sizeof unbinding);
    freeing.ptr = p;
    freeing.device = g->device;
    pthread_t free_th, bind_th;
    torch_call_start(ctx, &freeing, &free_th);
    void *q = weft_torch_alloc(TORCH_BYTES, g->device, NULL);
    mp_check(ctx, q != NULL, "weft_torch_alloc: %s", weft_last_error());
    mp_check(ctx, gpu_gate_holding(&gate),
             "weft_torch_alloc returned only once the device was idle: it waited for the other "
             "thread's free");
    torch_call_start(ctx, &unbinding, &bind_th);
    int unbind_waited = !atomic_load(&unbinding.done) && gpu_gate_holding(&gate);
    gpu_gate_open(&gate);
    pthread_join(free_th, NULL);
    pthread_join(bind_th, NULL);
    gpu_cuda_ok(g, cudaStreamSynchronize(side), "cudaStreamSynchronize(side)");
    gpu_cuda_ok(g, cudaStreamDestroy(side), "cudaStreamDestroy(side)");
    mp_check(ctx, !atomic_load(&gate.timed_out), "the device gate timed out after %.0f s",
             TORCH_GATE_S);
    mp_check(ctx, unbind_waited, "weft_torch_bind(NULL) returned while a free was in flight");
    mp_check(ctx, freeing.error[0] == '\0', "weft_torch_free on another thread: %s", freeing.error);
    mp_check(ctx, unbinding.error[0] == '\0', "weft_torch_bind(NULL) on a third thread: %s",
             unbinding.error);
    /* Unbound now: q's free does nothing (its memory goes with the communicator). */
    weft_torch_free(q, TORCH_BYTES, g->device, NULL);
}

/* A free of memory that is not weft's counts no segment as given back: while PyTorch holds one,
 * binding again after an unbind is refused (the count guards address reuse across binds). */
static void torch_free_foreign(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    mp_case(ctx, "weft_torch_free of a cudaMalloc pointer");
    mp_ok(ctx, weft_torch_bind(ctx->comm), "weft_torch_bind");
    void *held = weft_torch_alloc(TORCH_BYTES, g->device, NULL);
    void *foreign = NULL;
    gpu_cuda_ok(g, cudaMalloc(&foreign, TORCH_BYTES), "cudaMalloc");
    if (mp_check(ctx, held != NULL, "weft_torch_alloc: %s", weft_last_error())) {
        weft_torch_free(foreign, TORCH_BYTES, g->device, NULL);
        mp_check(ctx, strstr(weft_last_error(), "weft_free") != NULL,
                 "weft_torch_free of a cudaMalloc pointer: weft_last_error() is \"%s\"",
                 weft_last_error());
        mp_ok(ctx, weft_torch_bind(NULL), "weft_torch_bind(NULL)");
        weft_status_t st = weft_torch_bind(ctx->comm);
        mp_check(ctx, st == WEFT_ERR_INVALID_ARGUMENT,
                 "binding again while PyTorch holds a segment returned %s (%s)",
                 weft_status_string(st), weft_last_error());
        weft_torch_free(held, TORCH_BYTES, g->device, NULL); /* unbound: counted as given back */
        mp_ok(ctx, weft_torch_bind(ctx->comm), "weft_torch_bind once every segment is back");
        mp_ok(ctx, weft_torch_bind(NULL), "weft_torch_bind(NULL)");
    } else {
        mp_ok(ctx, weft_torch_bind(NULL), "weft_torch_bind(NULL)");
    }
    gpu_cuda_ok(g, cudaFree(foreign), "cudaFree");
}

/* A communicator on another GPU than the process's first one: with two or more GPUs visible,
 * no LOCAL_RANK (main unsets it, so cfg.rank picks the device) and every rank taking the rank
 * (and so the GPU) of its mirror image, n - 1 - rank. The registrar of the new communicator must
 * map the peers' memory for the new device: before, the provider kept the process's first
 * device, the peers' buffers were mapped with access for that one only, and the all-gather's
 * remote reads faulted. A weft_malloc all-gather, checked exactly. */
static void other_device(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    int ngpu = 0;
    gpu_cuda_ok(g, cudaGetDeviceCount(&ngpu), "cudaGetDeviceCount");
    int n = ctx->nranks, mirror = n - 1 - ctx->rank;
    /* Every rank decides alike: only if every rank's mirror is on another GPU than its own (an
     * odd n keeps the middle rank on its GPU), else the others would wait for it in init. */
    int every = ngpu >= 2;
    for (int r = 0; every && r < n; r++)
        every = (n - 1 - r) % ngpu != r % ngpu;
    if (!every) {
        printf("gpu_registration: rank %d: the communicator on another GPU skipped (%d GPU(s) "
               "visible, %d ranks: some rank's mirror shares its GPU)\n",
               ctx->rank, ngpu, n);
        return;
    }
    mp_case(ctx, "a communicator on another GPU than the first (rank %d as %d)", ctx->rank, mirror);
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_CUDA;
    cfg.rank = mirror;
    cfg.nranks = n;
    weft_comm_t comm;
    if (!mp_ok(ctx, weft_comm_init(&comm, &cfg), "weft_comm_init as the mirror rank"))
        return;
    int device = weft_comm_device(comm);
    mp_check(ctx, device == mirror % ngpu && device != g->device,
             "weft_comm_device %d: expected %d (the first communicator's: %d)", device,
             mirror % ngpu, g->device);
    enum { COUNT = 4099 };
    size_t bytes = COUNT * sizeof(float);
    float *host = malloc(bytes * (size_t)n);
    void *send = NULL, *recv = NULL;
    cudaStream_t stream = NULL;
    if (!host)
        mp_fatal(ctx, "malloc");
    gpu_cuda_ok(g, cudaSetDevice(device), "cudaSetDevice (the new communicator's)");
    gpu_cuda_ok(g, cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    int ok = mp_ok(ctx, weft_malloc(comm, &send, bytes), "weft_malloc (send)") &&
             mp_ok(ctx, weft_malloc(comm, &recv, bytes * (size_t)n), "weft_malloc (recv)");
    if (ok) {
        for (size_t i = 0; i < COUNT; i++)
            host[i] = thread_value(mirror, i);
        gpu_cuda_ok(g, cudaMemcpy(send, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        gpu_cuda_ok(g, cudaMemset(recv, 0xA5, bytes * (size_t)n), "cudaMemset");
        ok = mp_ok(ctx, weft_all_gather(comm, send, recv, COUNT, WEFT_FLOAT32, stream),
                   "weft_all_gather on the other GPU");
    }
    if (ok) {
        gpu_cuda_ok(g, cudaStreamSynchronize(stream), "cudaStreamSynchronize (other GPU)");
        gpu_cuda_ok(g, cudaMemcpy(host, recv, bytes * (size_t)n, cudaMemcpyDeviceToHost),
                    "cudaMemcpy");
        size_t wrong = 0;
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < COUNT; i++)
                wrong += host[(size_t)r * COUNT + i] != thread_value(r, i);
        mp_check(ctx, wrong == 0, "all-gather on the other GPU: %zu of %zu elements wrong", wrong,
                 (size_t)n * COUNT);
    }
    mp_ok(ctx, weft_free(comm, send), "weft_free (send)");
    mp_ok(ctx, weft_free(comm, recv), "weft_free (recv)");
    mp_ok(ctx, weft_comm_destroy(comm), "weft_comm_destroy (other GPU)");
    gpu_cuda_ok(g, cudaStreamDestroy(stream), "cudaStreamDestroy");
    gpu_cuda_ok(g, cudaSetDevice(g->device), "cudaSetDevice (back)");
    free(host);
}

int main(void)
{
    /* The device follows cfg.rank, not the launcher's local rank, for other_device (which is
     * what it is on one host anyway: weftrun's local rank is the rank). */
    unsetenv("LOCAL_RANK");
    unsetenv("WEFT_LOCAL_RANK");
    setenv("WEFT_CUDA_PUSH_BYTES", "0", 1);
    setenv("WEFT_CUDA_CHUNK_BYTES", "0", 1); /* a chunk per allocation: counted one by one */
    gpu_ctx_t g;
    gpu_init(&g, "gpu_registration");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        gpu_comm_open(&g, (weft_registration_t)reg);
        counters(&g);
        many_buffers(&g);
        alloc_then_use(&g);
        address_reuse(&g);
        first_use_waits(&g);
        other_thread(&g);
        if (reg == WEFT_REGISTRATION_ROA)
            torch_allocator_threads(&g);
        torch_free_foreign(&g);
        mp_case(&g.mp, "final barrier reg=%s", mp_reg_name((weft_registration_t)reg));
        mp_ok(&g.mp, weft_barrier(g.mp.comm, g.stream), "weft_barrier");
        gpu_sync(&g, "final barrier");
        mp_comm_close(&g.mp);
    }
    other_device(&g);
    return gpu_finish(&g);
}
