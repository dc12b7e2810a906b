/*
 * gpu_collectives.c - every collective on the CUDA backend, stream-ordered, checked exactly.
 *
 * Under each registration mode (roa, jit, staged; one communicator after another), first an
 * all_reduce of 4 MiB as the communicator's first mesh operation, with the last rank's input
 * written on its stream only after a 30 ms host callback (every rank's kernel must wait for it,
 * whatever WEFT_SEQ_START says), then with weft, interior and cuda (cudaMalloc: the staged
 * path) buffers:
 *   all_reduce, reduce_scatter  every dtype x reduction (the buffer kinds of a mode share out
 *                               the 50 combinations, so each kind and each mode sees all of
 *                               them), in place and out of place; then float16 and bfloat16
 *                               SUM and AVG again with spread inputs (harness.h: partial sums
 *                               exact in float32, not in 16 bits) on every kind;
 *   all_gather, all_to_all      every dtype (shared out likewise), all_gather in place too;
 *   broadcast                   every root, in place and out of place (non-roots pass NULL as
 *                               sendbuf in every other case);
 *   all_to_allv                 random count matrices with zeros (a quarter of the blocks, a
 *                               rank sending nothing, a rank receiving nothing, all zero),
 *                               rotated or reversed displacements with gaps that must keep
 *                               their poison;
 *   barrier                     stream order: one rank's stream is held 30 ms by a host
 *                               callback before the barrier; host callbacks before and after
 *                               the barrier on every rank stamp the shared monotonic clock, and
 *                               no rank's stream may leave before the last one entered; then
 *                               barriers back to back.
 * at counts {0, 1, n+1, 4099}, then a subset at 1M+3 and 64M/esize+5 elements (fresh
 * allocations; two-shot all-reduce from 3 ranks; staging scratch growth), spread 16-bit sums
 * among them.
 *
 * Every call goes to one non-blocking stream; its output is poisoned (cudaMemsetAsync 0xA5)
 * first, its buffers carry guard zones, and after cudaStreamSynchronize the whole region comes
 * back to the host: every element is compared bit for bit with the expected value, inputs of
 * out-of-place calls must be unchanged, guards intact. weft_get_stats around each call: the
 * operation counted exactly once, and for payloads of 4 KiB and more on the path weft.h
 * documents (zero-copy for weft memory in roa/jit mode, staged otherwise; a broadcast's
 * non-roots copy nothing for their peers), and whether an all-gather or all-to-all stored into
 * its peers' outputs (remote_store_ops). In roa mode, all-gathers and all-to-alls where one
 * rank's buffer is cudaMalloc'd and the others' are weft memory.
 *
 * Small cases reuse buffers carved from slabs allocated once per mode (registration is not what
 * this program measures; gpu_registration is), large cases allocate fresh ones.
 */
#include "../mp/cases.h"
#include "gpu_harness.h"

#include <inttypes.h>
#include <stdio.h>

#define SLAB_BYTES ((size_t)2 << 20)
#define SMALL_COUNT 4099
#define BIG_BYTES ((size_t)64 << 20)
#define LATE_MS 30.0
#define BACK_TO_BACK_BARRIERS 20

/* Slabs of one mode: [kind][0] for inputs, [kind][1] for outputs. */
typedef struct pool {
    gpu_slab_t slab[GPU_NUM_BUF_KINDS][2];
} pool_t;

static const gpu_slab_t *slab(const pool_t *pool, gpu_buf_kind_t kind, int which)
{
    return pool ? &pool->slab[kind][which] : NULL;
}

static void pool_create(gpu_ctx_t *g, pool_t *pool)
{
    for (int k = 0; k < GPU_NUM_BUF_KINDS; k++)
        for (int w = 0; w < 2; w++)
            gpu_slab_create(g, &pool->slab[k][w], k != GPU_BUF_CUDA, SLAB_BYTES);
}

static void pool_destroy(gpu_ctx_t *g, pool_t *pool)
{
    for (int k = 0; k < GPU_NUM_BUF_KINDS; k++)
        for (int w = 0; w < 2; w++)
            gpu_slab_destroy(g, &pool->slab[k][w]);
}

static const char *place_name(int inplace)
{
    return inplace ? "in-place" : "out-of-place";
}

/* Copy back every buffer of a case and wait; then the checks may read the host mirrors. */
static void pull_all(gpu_ctx_t *g, const char *what, gpu_buf_t *a, gpu_buf_t *b)
{
    if (a && a->base)
        gpu_buf_pull(g, a);
    if (b && b->base)
        gpu_buf_pull(g, b);
    gpu_sync(g, what);
}

/* Check the guards of the case's buffers that were allocated, then give both back. */
static void put_all(gpu_ctx_t *g, gpu_buf_t *send, gpu_buf_t *recv)
{
    if (send->base)
        gpu_buf_check_guards(g, send, "sendbuf");
    if (recv->base)
        gpu_buf_check_guards(g, recv, "recvbuf");
    gpu_buf_put(g, send);
    gpu_buf_put(g, recv);
}

/* ---------------------------------------------------------------------------------------------
 * Reductions
 * ------------------------------------------------------------------------------------------- */
static void run_all_reduce(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, size_t count,
                           weft_dtype_t dt, weft_redop_t op, int inplace)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt), bytes = count * es;
    mp_case(ctx, "all_reduce %s count=%zu %s %s %s", gpu_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op), place_name(inplace));
    gpu_buf_t send = {0}, recv;
    gpu_buf_get(g, &recv, slab(pool, kind, 1), kind, bytes, es);
    gpu_buf_t *in = &recv;
    if (!inplace) {
        gpu_buf_get(g, &send, slab(pool, kind, 0), kind, bytes, es);
        in = &send;
    }
    mp_red_fill(ctx, dt, op, ctx->rank, 0, count, in->host);
    gpu_buf_push(g, in, 0, bytes);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_reduce(ctx->comm, in->ptr, recv.ptr, count, dt, op, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_all_reduce");
    pull_all(g, "all_reduce", &send, &recv);
    if (ok) {
        mp_red_check_result(ctx, "recvbuf", recv.host, dt, op, 0, count);
        if (!inplace)
            mp_red_check_input(ctx, "sendbuf", send.host, dt, op, ctx->rank, 0, count);
        if (count > 0) {
            gpu_check_path(g, &s0, &s1, kind, bytes, 1);
            gpu_check_stores(g, &s0, &s1, bytes,
                             gpu_expect_zero_copy(g, kind) &&
                                 mp_expect_twoshot_stores(ctx, bytes, inplace));
        }
    }
    put_all(g, &send, &recv);
}

static void run_reduce_scatter(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, size_t count,
                               weft_dtype_t dt, weft_redop_t op, int inplace)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks, bytes = count * es;
    mp_case(ctx, "reduce_scatter %s recvcount=%zu %s %s %s", gpu_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op), place_name(inplace));
    gpu_buf_t send, recv = {0};
    gpu_buf_get(g, &send, slab(pool, kind, 0), kind, n * bytes, es);
    mp_red_fill(ctx, dt, op, ctx->rank, 0, n * count, send.host);
    gpu_buf_push(g, &send, 0, n * bytes);
    size_t mine = (size_t)ctx->rank * bytes;
    if (!inplace)
        gpu_buf_get(g, &recv, slab(pool, kind, 1), kind, bytes, es);
    unsigned char *out = inplace ? send.ptr + mine : recv.ptr;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_reduce_scatter(ctx->comm, send.ptr, out, count, dt, op, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_reduce_scatter");
    pull_all(g, "reduce_scatter", &send, &recv);
    if (ok) {
        const unsigned char *got = inplace ? send.host + mine : recv.host;
        mp_red_check_result(ctx, "recvbuf", got, dt, op, (size_t)ctx->rank * count, count);
        if (!inplace)
            mp_red_check_input(ctx, "sendbuf", send.host, dt, op, ctx->rank, 0, n * count);
        if (count > 0)
            gpu_check_path(g, &s0, &s1, kind, bytes, 1);
    }
    put_all(g, &send, &recv);
}

/* ---------------------------------------------------------------------------------------------
 * Data movement
 * ------------------------------------------------------------------------------------------- */
/* One all-gather with this rank's input (out of place) and output of the given kinds. */
static void gather(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t send_kind,
                   gpu_buf_kind_t recv_kind, size_t count, weft_dtype_t dt, int inplace,
                   int all_registered)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks, bytes = count * es;
    size_t mine = (size_t)ctx->rank * bytes;
    gpu_buf_t send = {0}, recv;
    gpu_buf_get(g, &recv, slab(pool, recv_kind, 1), recv_kind, n * bytes, es);
    if (inplace) {
        mp_raw_fill(ctx, dt, ctx->rank, 0, count, recv.host + mine);
        gpu_buf_push(g, &recv, mine, bytes);
    } else {
        gpu_buf_get(g, &send, slab(pool, send_kind, 0), send_kind, bytes, es);
        mp_raw_fill(ctx, dt, ctx->rank, 0, count, send.host);
        gpu_buf_push(g, &send, 0, bytes);
    }
    const void *in = inplace ? recv.ptr + mine : send.ptr;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_gather(ctx->comm, in, recv.ptr, count, dt, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_all_gather");
    pull_all(g, "all_gather", &send, &recv);
    if (ok) {
        for (int p = 0; p < ctx->nranks; p++) {
            char what[64];
            snprintf(what, sizeof what, "recvbuf block %d", p);
            mp_raw_check(ctx, what, recv.host + (size_t)p * bytes, dt, p, 0, count);
        }
        if (!inplace)
            mp_raw_check(ctx, "sendbuf", send.host, dt, ctx->rank, 0, count);
        if (count > 0) {
            gpu_check_path(g, &s0, &s1, inplace ? recv_kind : send_kind, bytes, 1);
            gpu_check_stores(g, &s0, &s1, bytes,
                             all_registered &&
                                 !gpu_copy_engine_takes(g, (inplace ? n - 1 : n) * bytes));
        }
    }
    put_all(g, &send, &recv);
}

static void run_all_gather(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, size_t count,
                           weft_dtype_t dt, int inplace)
{
    mp_case(&g->mp, "all_gather %s sendcount=%zu %s %s", gpu_buf_kind_name(kind), count,
            mp_dtype_name(dt), place_name(inplace));
    gather(g, pool, kind, kind, count, dt, inplace, gpu_expect_zero_copy(g, kind));
}

/* Ranks whose buffers differ in kind (roa, 1M+3 elements, fresh buffers): one rank's cudaMalloc
 * output, or one rank's staged input, makes every rank read its peers' inputs instead of
 * storing into their outputs; then every buffer weft memory, which stores. */
static void run_all_gather_mixed(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    const gpu_buf_kind_t W = GPU_BUF_WEFT, C = GPU_BUF_CUDA;
    int last = ctx->nranks - 1;
    size_t count = MP_LARGE_COUNT;
    mp_case(ctx, "all_gather mixed: rank 0's output cudaMalloc'd");
    gather(g, NULL, W, ctx->rank == 0 ? C : W, count, WEFT_UINT32, 0, 0);
    mp_case(ctx, "all_gather mixed: rank %d's input cudaMalloc'd", last);
    gather(g, NULL, ctx->rank == last ? C : W, W, count, WEFT_UINT32, 0, 0);
    mp_case(ctx, "all_gather mixed: rank 0's buffer cudaMalloc'd, in place");
    gather(g, NULL, W, ctx->rank == 0 ? C : W, count, WEFT_FLOAT16, 1, 0);
    mp_case(ctx, "all_gather mixed: every buffer weft memory (16-byte multiples per rank)");
    gather(g, NULL, W, W, count + 1, WEFT_UINT32, 0, 1);
}

static void run_broadcast(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, size_t count,
                          weft_dtype_t dt, int root, int inplace)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt), bytes = count * es;
    mp_case(ctx, "broadcast %s count=%zu %s root=%d %s", gpu_buf_kind_name(kind), count,
            mp_dtype_name(dt), root, place_name(inplace));
    int is_root = ctx->rank == root;
    int null_send = !inplace && !is_root && (ctx->case_id & 1);
    gpu_buf_t send = {0}, recv;
    gpu_buf_get(g, &recv, slab(pool, kind, 1), kind, bytes, es);
    if (inplace && is_root) {
        mp_raw_fill(ctx, dt, root, 0, count, recv.host);
        gpu_buf_push(g, &recv, 0, bytes);
    }
    if (!inplace && !null_send) {
        /* The root's input; elsewhere a buffer of this rank's data that must stay untouched. */
        gpu_buf_get(g, &send, slab(pool, kind, 0), kind, bytes, es);
        mp_raw_fill(ctx, dt, ctx->rank, 0, count, send.host);
        gpu_buf_push(g, &send, 0, bytes);
    }
    const void *sendbuf = inplace ? recv.ptr : null_send ? NULL : send.ptr;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_broadcast(ctx->comm, sendbuf, recv.ptr, count, dt, root, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_broadcast");
    pull_all(g, "broadcast", &send, &recv);
    if (ok) {
        mp_raw_check(ctx, "recvbuf", recv.host, dt, root, 0, count);
        if (send.base)
            mp_raw_check(ctx, "sendbuf", send.host, dt, ctx->rank, 0, count);
        if (count > 0)
            gpu_check_path(g, &s0, &s1, kind, bytes, is_root);
    }
    put_all(g, &send, &recv);
}

/* count elements per peer, this rank's input and output of the given kinds. Block p of rank r's
 * input holds elements (r, p * count + i); block p of its result must hold rank p's elements
 * (p, r * count + i). all_registered: every rank's buffers are weft memory (the store form). */
static void a2a(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t send_kind,
                gpu_buf_kind_t recv_kind, size_t count, weft_dtype_t dt, int all_registered)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks, bytes = count * es;
    gpu_buf_t send, recv;
    gpu_buf_get(g, &send, slab(pool, send_kind, 0), send_kind, n * bytes, es);
    gpu_buf_get(g, &recv, slab(pool, recv_kind, 1), recv_kind, n * bytes, es);
    mp_raw_fill(ctx, dt, ctx->rank, 0, n * count, send.host);
    gpu_buf_push(g, &send, 0, n * bytes);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_to_all(ctx->comm, send.ptr, recv.ptr, count, dt, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_all_to_all");
    pull_all(g, "all_to_all", &send, &recv);
    if (ok) {
        mp_a2a_check(ctx, dt, count, send.host, recv.host);
        if (count > 0) {
            gpu_check_path(g, &s0, &s1, send_kind, bytes, 1);
            gpu_check_stores(g, &s0, &s1, bytes,
                             all_registered && !gpu_copy_engine_takes(g, n * bytes));
        }
    }
    put_all(g, &send, &recv);
}

static void run_all_to_all(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, size_t count,
                           weft_dtype_t dt)
{
    mp_case(&g->mp, "all_to_all %s count=%zu %s", gpu_buf_kind_name(kind), count,
            mp_dtype_name(dt));
    a2a(g, pool, kind, kind, count, dt, gpu_expect_zero_copy(g, kind));
}

/* As run_all_gather_mixed, for all_to_all (1M+3 elements per peer). */
static void run_all_to_all_mixed(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    const gpu_buf_kind_t W = GPU_BUF_WEFT, C = GPU_BUF_CUDA;
    int last = ctx->nranks - 1;
    size_t count = MP_LARGE_COUNT;
    mp_case(ctx, "all_to_all mixed: rank 0's output cudaMalloc'd");
    a2a(g, NULL, W, ctx->rank == 0 ? C : W, count, WEFT_UINT32, 0);
    mp_case(ctx, "all_to_all mixed: rank %d's input cudaMalloc'd", last);
    a2a(g, NULL, ctx->rank == last ? C : W, W, count, WEFT_FLOAT16, 0);
    mp_case(ctx, "all_to_all mixed: every buffer weft memory");
    a2a(g, NULL, W, W, count, WEFT_UINT32, 1);
}

/* ---------------------------------------------------------------------------------------------
 * all_to_allv
 * ------------------------------------------------------------------------------------------- */
/* Element i from rank s to rank d is (s, (d << 32) + i); counts and layout from cases.h. */
static void run_all_to_allv(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind,
                            mp_a2av_pattern_t pattern, weft_dtype_t dt)
{
    mp_ctx_t *ctx = &g->mp;
    size_t es = mp_dtype_bytes(dt);
    mp_case(ctx, "all_to_allv %s pattern=%s %s", gpu_buf_kind_name(kind),
            mp_a2av_pattern_name(pattern), mp_dtype_name(dt));
    mp_a2av_plan_t plan;
    mp_a2av_plan_create(ctx, pattern, &plan);
    gpu_buf_t send, recv;
    gpu_buf_get(g, &send, slab(pool, kind, 0), kind, plan.slen * es, es);
    gpu_buf_get(g, &recv, slab(pool, kind, 1), kind, plan.rlen * es, es);
    mp_a2av_fill(ctx, &plan, dt, send.host);
    for (int p = 0; p < ctx->nranks; p++)
        gpu_buf_push(g, &send, plan.sdispls[p] * es, plan.sendcounts[p] * es);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_to_allv(ctx->comm, send.ptr, plan.sendcounts, plan.sdispls,
                                        recv.ptr, plan.recvcounts, plan.rdispls, dt, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_all_to_allv");
    pull_all(g, "all_to_allv", &send, &recv);
    if (ok) {
        mp_a2av_check(ctx, &plan, dt, send.host, recv.host);
        /* Counted once; the push path when every rank's blocks fit it (all ranks decide alike,
         * from every rank's largest block); the mesh's path is not checked (a rank that sends
         * nothing reads nothing). */
        size_t largest = plan.largest * es;
        gpu_check_path(g, &s0, &s1, kind, largest <= gpu_push_limit(g) ? largest : 0, 1);
    }
    put_all(g, &send, &recv);
    mp_a2av_plan_destroy(&plan);
}

/* ---------------------------------------------------------------------------------------------
 * Barrier
 * ------------------------------------------------------------------------------------------- */
typedef struct stamp {
    double delay_ms;   /* the enter callback sleeps this long first */
    uint64_t enter_ns; /* CLOCK_MONOTONIC when this rank's stream reached the barrier */
    uint64_t leave_ns; /* ... and when it got past it */
} stamp_t;

static uint64_t now_ns(void)
{
    return (uint64_t)(mp_now_s() * 1e9);
}

/* Host callbacks (cudaLaunchHostFunc): no CUDA calls in here. */
static void CUDART_CB enter_cb(void *arg)
{
    stamp_t *s = arg;
    if (s->delay_ms > 0)
        mp_sleep_ms(s->delay_ms);
    s->enter_ns = now_ns();
}

static void CUDART_CB leave_cb(void *arg)
{
    stamp_t *s = arg;
    s->leave_ns = now_ns();
}

static void barrier_round(gpu_ctx_t *g, int late)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks;
    mp_case(ctx, "barrier round, rank %d's stream %.0f ms late", late, LATE_MS);
    stamp_t stamp = {.delay_ms = ctx->rank == late ? LATE_MS : 0};
    weft_stats_t s0, s1;
    gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, enter_cb, &stamp), "cudaLaunchHostFunc");
    mp_stats(ctx, &s0);
    weft_status_t st = weft_barrier(ctx->comm, g->stream);
    mp_stats(ctx, &s1);
    int ok = mp_ok(ctx, st, "weft_barrier");
    gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, leave_cb, &stamp), "cudaLaunchHostFunc");
    gpu_sync(g, "barrier");
    if (ok)
        gpu_check_path(g, &s0, &s1, GPU_BUF_WEFT, 0, 1);

    /* Everyone's stamps, through device memory. */
    gpu_buf_t times;
    gpu_buf_get(g, &times, NULL, GPU_BUF_WEFT, (size_t)(n + 1) * 2 * sizeof(uint64_t), 8);
    uint64_t *all = (uint64_t *)times.host;
    all[0] = stamp.enter_ns;
    all[1] = stamp.leave_ns;
    gpu_buf_push(g, &times, 0, 2 * sizeof(uint64_t));
    st = weft_all_gather(ctx->comm, times.ptr, times.ptr + 2 * sizeof(uint64_t), 2, WEFT_UINT64,
                         g->stream);
    ok = mp_ok(ctx, st, "weft_all_gather") && ok;
    gpu_buf_pull(g, &times);
    gpu_sync(g, "all_gather of the barrier stamps");
    if (ok) {
        const uint64_t *t = all + 2;
        uint64_t max_in = 0, min_out = UINT64_MAX;
        int max_in_rank = 0, min_out_rank = 0;
        for (int p = 0; p < n; p++) {
            if (t[2 * p] > max_in) {
                max_in = t[2 * p];
                max_in_rank = p;
            }
            if (t[2 * p + 1] < min_out) {
                min_out = t[2 * p + 1];
                min_out_rank = p;
            }
        }
        mp_check(ctx, t[2 * ctx->rank] == stamp.enter_ns && t[2 * ctx->rank + 1] == stamp.leave_ns,
                 "all_gather of the stamps returned other values for this rank");
        mp_check(ctx, min_out >= max_in,
                 "rank %d's stream left the barrier %.3f ms before rank %d's entered it",
                 min_out_rank, (double)(max_in - min_out) * 1e-6, max_in_rank);
    }
    gpu_buf_put(g, &times);
}

static void barriers(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    int rounds = ctx->quick ? 2 : ctx->nranks;
    for (int r = 0; r < rounds; r++)
        barrier_round(g, r % ctx->nranks);
    mp_case(ctx, "%d barriers back to back", BACK_TO_BACK_BARRIERS);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    for (int i = 0; i < BACK_TO_BACK_BARRIERS; i++)
        mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "barriers back to back");
    mp_stats(ctx, &s1);
    uint64_t counted = (s1.zero_copy_ops - s0.zero_copy_ops) + (s1.staged_ops - s0.staged_ops) +
                       (s1.inline_ops - s0.inline_ops);
    mp_check(ctx, counted == BACK_TO_BACK_BARRIERS,
             "stats: %d barriers counted %" PRIu64 " operations", BACK_TO_BACK_BARRIERS, counted);
}

/* ---------------------------------------------------------------------------------------------
 * Large cases: fresh allocations, 1M+3 and 64M/esize+5 elements
 * ------------------------------------------------------------------------------------------- */
typedef enum { L_ALL_REDUCE, L_REDUCE_SCATTER, L_ALL_GATHER, L_BROADCAST, L_ALL_TO_ALL } lcoll_t;

typedef struct large_case {
    weft_registration_t reg;
    lcoll_t coll;
    gpu_buf_kind_t kind;
    int inplace;
    weft_dtype_t dt;
    weft_redop_t op;   /* reductions */
    int big;           /* 0: 1M+3 elements, 1: 64M/esize+5 (all_to_all: per rank, in total) */
    int root_from_end; /* broadcast: root = nranks - 1 - root_from_end, clamped to 0 */
} large_case_t;

static const large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, L_ALL_REDUCE, GPU_BUF_WEFT, 0, WEFT_FLOAT32, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_ROA, L_ALL_REDUCE, GPU_BUF_INTERIOR, 1, WEFT_BFLOAT16, WEFT_AVG, 0, 0},
    {WEFT_REGISTRATION_ROA, L_ALL_REDUCE, GPU_BUF_INTERIOR, 1, WEFT_FLOAT64, WEFT_AVG, 1, 0},
    {WEFT_REGISTRATION_ROA, L_ALL_REDUCE, GPU_BUF_CUDA, 0, WEFT_FLOAT64, WEFT_MIN, 0, 0},
    {WEFT_REGISTRATION_JIT, L_ALL_REDUCE, GPU_BUF_CUDA, 1, WEFT_FLOAT16, WEFT_PROD, 0, 0},
    {WEFT_REGISTRATION_STAGED, L_ALL_REDUCE, GPU_BUF_WEFT, 0, WEFT_INT64, WEFT_MAX, 1, 0},
    {WEFT_REGISTRATION_ROA, L_REDUCE_SCATTER, GPU_BUF_WEFT, 0, WEFT_FLOAT32, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_JIT, L_REDUCE_SCATTER, GPU_BUF_INTERIOR, 1, WEFT_INT64, WEFT_SUM, 1, 0},
    {WEFT_REGISTRATION_STAGED, L_REDUCE_SCATTER, GPU_BUF_CUDA, 0, WEFT_BFLOAT16, WEFT_MAX, 0, 0},
    {WEFT_REGISTRATION_ROA, L_ALL_GATHER, GPU_BUF_INTERIOR, 0, WEFT_UINT8, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_ROA, L_ALL_GATHER, GPU_BUF_CUDA, 0, WEFT_FLOAT32, WEFT_SUM, 1, 0},
    {WEFT_REGISTRATION_JIT, L_ALL_GATHER, GPU_BUF_WEFT, 1, WEFT_FLOAT64, WEFT_SUM, 1, 0},
    {WEFT_REGISTRATION_STAGED, L_ALL_GATHER, GPU_BUF_CUDA, 0, WEFT_INT32, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_ROA, L_BROADCAST, GPU_BUF_WEFT, 0, WEFT_FLOAT32, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_JIT, L_BROADCAST, GPU_BUF_CUDA, 1, WEFT_UINT8, WEFT_SUM, 1, 1},
    {WEFT_REGISTRATION_STAGED, L_BROADCAST, GPU_BUF_INTERIOR, 0, WEFT_FLOAT64, WEFT_SUM, 0, 2},
    {WEFT_REGISTRATION_ROA, L_ALL_TO_ALL, GPU_BUF_WEFT, 0, WEFT_FLOAT32, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_JIT, L_ALL_TO_ALL, GPU_BUF_CUDA, 0, WEFT_UINT64, WEFT_SUM, 1, 0},
    {WEFT_REGISTRATION_STAGED, L_ALL_TO_ALL, GPU_BUF_INTERIOR, 0, WEFT_BFLOAT16, WEFT_SUM, 0, 0},
};

/* Large float16/bfloat16 SUM and AVG cases with spread inputs (MP_RED_SPREAD), one per mode. */
static const large_case_t spread_large_cases[] = {
    {WEFT_REGISTRATION_ROA, L_ALL_REDUCE, GPU_BUF_WEFT, 0, WEFT_FLOAT16, WEFT_SUM, 0, 0},
    {WEFT_REGISTRATION_JIT, L_REDUCE_SCATTER, GPU_BUF_INTERIOR, 1, WEFT_BFLOAT16, WEFT_AVG, 0, 0},
    {WEFT_REGISTRATION_STAGED, L_ALL_REDUCE, GPU_BUF_CUDA, 1, WEFT_BFLOAT16, WEFT_SUM, 0, 0},
};

static void run_large(gpu_ctx_t *g, const large_case_t *lc)
{
    int n = g->mp.nranks;
    size_t es = mp_dtype_bytes(lc->dt);
    size_t count = lc->big ? BIG_BYTES / es + 5 : MP_LARGE_COUNT;
    switch (lc->coll) {
    case L_ALL_REDUCE:
        run_all_reduce(g, NULL, lc->kind, count, lc->dt, lc->op, lc->inplace);
        break;
    case L_REDUCE_SCATTER:
        run_reduce_scatter(g, NULL, lc->kind, count, lc->dt, lc->op, lc->inplace);
        break;
    case L_ALL_GATHER:
        run_all_gather(g, NULL, lc->kind, count, lc->dt, lc->inplace);
        break;
    case L_BROADCAST: {
        int root = n - 1 - lc->root_from_end;
        run_broadcast(g, NULL, lc->kind, count, lc->dt, root < 0 ? 0 : root, lc->inplace);
        break;
    }
    case L_ALL_TO_ALL:
        run_all_to_all(g, NULL, lc->kind, lc->big ? BIG_BYTES / es / (size_t)n + 5 : count, lc->dt);
        break;
    }
}

/* ---------------------------------------------------------------------------------------------
 * The grid
 * ------------------------------------------------------------------------------------------- */

/* Small counts: {0, 1, n+1, 4099}; quick: {0, n+1, 4099}. Returns how many. */
static size_t small_counts(const mp_ctx_t *ctx, size_t *out)
{
    size_t k = 0;
    out[k++] = 0;
    if (!ctx->quick)
        out[k++] = 1;
    out[k++] = (size_t)ctx->nranks + 1;
    out[k++] = SMALL_COUNT;
    return k;
}

/* Quick mode runs one of in place / out of place per grid point, alternating. */
static int place_selected(const mp_ctx_t *ctx, int inplace, unsigned salt)
{
    return !ctx->quick || inplace == (int)(salt % 2);
}

/* The pairs of mp_red_spread_applies (float16/bfloat16 SUM and AVG) with spread inputs: every
 * kind, the non-zero small counts, all_reduce and reduce_scatter in both placements (quick:
 * one, alternating). */
static void run_spread(gpu_ctx_t *g, const pool_t *pool, const size_t *counts, size_t ncounts)
{
    mp_ctx_t *ctx = &g->mp;
    ctx->red_data = MP_RED_SPREAD;
    for (int kind = 0; kind < GPU_NUM_BUF_KINDS; kind++)
        for (size_t c = 0; c < ncounts; c++)
            for (int dt = 0; counts[c] > 0 && dt < WEFT_NUM_DTYPES; dt++)
                for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
                    if (!mp_red_spread_applies((weft_dtype_t)dt, (weft_redop_t)op))
                        continue;
                    for (int ip = 0; ip < 2; ip++) {
                        if (!place_selected(ctx, ip, (unsigned)(dt + op + kind + (int)c)))
                            continue;
                        run_all_reduce(g, pool, (gpu_buf_kind_t)kind, counts[c], (weft_dtype_t)dt,
                                       (weft_redop_t)op, ip);
                        run_reduce_scatter(g, pool, (gpu_buf_kind_t)kind, counts[c],
                                           (weft_dtype_t)dt, (weft_redop_t)op, ip);
                    }
                }
    ctx->red_data = MP_RED_SMALL;
}

/* The communicator's first mesh operation (its ready flags never set yet), with the last rank's
 * input written LATE_MS late on its stream: every rank's kernel must wait for that rank's ready
 * flag, whatever the operation number (WEFT_SEQ_START), and the sum must be exact. The late
 * input is a device-to-device copy after a host callback, so that only the stream is late: a
 * copy from pageable host memory would hold the host too, and the host handshake would then
 * order everything. */
static void late_input(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    const size_t count = (size_t)1 << 20, bytes = count * 4; /* 4 MiB: past the push path */
    int late = ctx->nranks - 1;
    mp_case(ctx, "first mesh all_reduce, rank %d's input written %.0f ms late on its stream", late,
            LATE_MS);
    gpu_buf_t src, send, recv;
    gpu_buf_get(g, &src, NULL, GPU_BUF_CUDA, bytes, 4);
    gpu_buf_get(g, &send, NULL, GPU_BUF_WEFT, bytes, 4); /* poisoned */
    gpu_buf_get(g, &recv, NULL, GPU_BUF_WEFT, bytes, 4);
    mp_red_fill(ctx, WEFT_INT32, WEFT_SUM, ctx->rank, 0, count, src.host);
    gpu_buf_push(g, &src, 0, bytes);
    gpu_sync(g, "late input's source");
    stamp_t stamp = {.delay_ms = LATE_MS};
    if (ctx->rank == late)
        gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, enter_cb, &stamp), "cudaLaunchHostFunc");
    gpu_cuda_ok(g, cudaMemcpyAsync(send.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice, g->stream),
                "cudaMemcpyAsync");
    weft_status_t st =
        weft_all_reduce(ctx->comm, send.ptr, recv.ptr, count, WEFT_INT32, WEFT_SUM, g->stream);
    int ok = mp_ok(ctx, st, "weft_all_reduce");
    pull_all(g, "late input", &send, &recv);
    if (ok) {
        mp_red_check_result(ctx, "recvbuf", recv.host, WEFT_INT32, WEFT_SUM, 0, count);
        mp_red_check_input(ctx, "sendbuf", send.host, WEFT_INT32, WEFT_SUM, ctx->rank, 0, count);
    }
    put_all(g, &send, &recv);
    gpu_buf_put(g, &src);
}

static void run_mode(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    gpu_comm_open(g, reg);
    late_input(g);
    pool_t pool;
    pool_create(g, &pool);
    size_t counts[4];
    size_t ncounts = small_counts(ctx, counts);
    for (int kind = 0; kind < GPU_NUM_BUF_KINDS; kind++) {
        gpu_buf_kind_t k = (gpu_buf_kind_t)kind;
        mp_buf_kind_t sel = (mp_buf_kind_t)kind; /* the mp harness's share-out of the grid */
        for (size_t c = 0; c < ncounts; c++) {
            for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++) {
                for (int op = 0; op < WEFT_NUM_REDOPS; op++) {
                    unsigned combo = (unsigned)(dt * WEFT_NUM_REDOPS + op);
                    if (!mp_selected(ctx, combo, sel))
                        continue;
                    for (int ip = 0; ip < 2; ip++) {
                        if (!place_selected(ctx, ip, combo + (unsigned)c))
                            continue;
                        run_all_reduce(g, &pool, k, counts[c], (weft_dtype_t)dt, (weft_redop_t)op,
                                       ip);
                        run_reduce_scatter(g, &pool, k, counts[c], (weft_dtype_t)dt,
                                           (weft_redop_t)op, ip);
                    }
                }
                if (!mp_selected(ctx, (unsigned)dt, sel))
                    continue;
                for (int ip = 0; ip < 2; ip++)
                    if (place_selected(ctx, ip, (unsigned)(dt + (int)c)))
                        run_all_gather(g, &pool, k, counts[c], (weft_dtype_t)dt, ip);
                run_all_to_all(g, &pool, k, counts[c], (weft_dtype_t)dt);
            }
            for (int root = 0; root < ctx->nranks; root++) {
                int dt = (root * 7 + (int)c * 3 + kind + (int)reg * 5) % WEFT_NUM_DTYPES;
                for (int ip = 0; ip < 2; ip++)
                    if (place_selected(ctx, ip, (unsigned)(root + (int)c)))
                        run_broadcast(g, &pool, k, counts[c], (weft_dtype_t)dt, root, ip);
            }
        }
        for (int pat = 0; pat < MP_A2AV_HUGE; pat++) {
            if (ctx->quick && pat % 2 != kind % 2)
                continue;
            int dt = (pat * 3 + kind + (int)reg * 7) % WEFT_NUM_DTYPES;
            run_all_to_allv(g, &pool, k, (mp_a2av_pattern_t)pat, (weft_dtype_t)dt);
        }
    }
    run_spread(g, &pool, counts, ncounts);
    barriers(g);
    pool_destroy(g, &pool);
    if (!ctx->quick) {
        for (size_t i = 0; i < sizeof large_cases / sizeof large_cases[0]; i++)
            if (large_cases[i].reg == reg)
                run_large(g, &large_cases[i]);
        ctx->red_data = MP_RED_SPREAD;
        for (size_t i = 0; i < sizeof spread_large_cases / sizeof spread_large_cases[0]; i++)
            if (spread_large_cases[i].reg == reg)
                run_large(g, &spread_large_cases[i]);
        ctx->red_data = MP_RED_SMALL;
        int dt = (int)(reg * 3 + 2) % WEFT_NUM_DTYPES;
        run_all_to_allv(g, NULL, (gpu_buf_kind_t)((reg + 1) % GPU_NUM_BUF_KINDS), MP_A2AV_HUGE,
                        (weft_dtype_t)dt);
        if (reg == WEFT_REGISTRATION_ROA) {
            run_all_gather_mixed(g);
            run_all_to_all_mixed(g);
        }
    }
    /* A kernel failure would be reported by the next call: end the mode with one. */
    mp_case(ctx, "final barrier reg=%s", mp_reg_name(reg));
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "final barrier");
    mp_comm_close(ctx);
}

int main(void)
{
    gpu_ctx_t g;
    gpu_init(&g, "gpu_collectives");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++)
        run_mode(&g, (weft_registration_t)reg);
    return gpu_finish(&g);
}
