/*
 * gpu_moe.c - weft_moe_dispatch and weft_moe_combine on the CUDA backend, stream-ordered and
 * captured in a CUDA graph, checked exactly against the reference model of tests/mp/moe_ref.h
 * (the one mp_moe uses on the host backend).
 *
 * Every array argument is device memory and both calls are asynchronous: a case pushes its
 * inputs, calls dispatch then combine on the test's stream, copies every buffer back and checks
 * after cudaStreamSynchronize. Buffers are weft, interior or cuda (cudaMalloc: the staged path)
 * buffers of gpu_harness.h, poisoned (0xA5) before the calls, with guard zones checked after.
 *
 * The grid (as mp_moe): tokens per rank T in {0, 1, 7, 300} and one point with a different T
 * per rank (one of them 0); hidden H in {1, 7, 128}; topk k in {1, 2, 8} (at most E); experts
 * E in {n, 8n, 32n}; uniform, Zipf, all-to-one and masked routing; float32, float16 and
 * bfloat16 and the three buffer kinds cycling over the grid (each kind sees each dtype);
 * max_recv_tokens the need plus 3 (the rows past *num_recv_tokens must keep their poison), or
 * exactly the need in one case in five; NULL for the empty arrays the API lets be NULL (x,
 * topk_idx, topk_weights and out when T is 0, the receive arrays when max_recv_tokens is 0, y
 * when nothing was received) in every other case that has them. roa runs the whole grid, jit and
 * staged a quarter each. Then a case with T = 4096 and one with H = 7168 per mode (fresh
 * allocations), and one with topk = 40 (more slots than a warp has lanes). Every case checks:
 * *num_recv_tokens, every received row, local expert id and weight, recv_expert_counts, the
 * combine output (sums of y = recv_x * (rank + 1): exact), inputs (x, routing, y) unchanged,
 * y's 3 rows past the received ones still poisoned, guards.
 *
 * After each case of the grid, the backward pass: new x and y through a dispatch reusing the
 * handle's layout (WEFT_MOE_REUSE; the routing outputs asked for in every other case, else they
 * must keep their poison) and a combine with the same handle, checked as the first pair.
 *
 * Rejected dispatches (roa; weft and interior buffers, so that no staging scratch has to grow):
 * a capacity overflow (the rank receiving the most gets max_recv_tokens one below its need, the
 * others room to spare), an expert id num_experts on the last rank, -2 on the first; and a
 * rejected combine: y NULL on the rank receiving the most. The verdict is the device's: a host
 * callback holds the stream until both dispatch and combine are enqueued (so the host cannot
 * have seen it yet), then on every rank *num_recv_tokens must be -1, recv_expert_counts all 0,
 * the receive arrays untouched (a rejected combine: the dispatch's outputs exact), and
 * combine's out all zeros. After a stream synchronisation and a weft_barrier on every rank,
 * the next MoE call (a valid dispatch, or a combine with the handle) must return
 * WEFT_ERR_INVALID_ARGUMENT naming the call, the argument, the rank and the counts, and change
 * nothing; the call after that, a valid dispatch and combine, must be exact.
 *
 * CUDA graph (per mode): one eager dispatch + combine, then the pair captured (relaxed mode) and
 * replayed 20 times, an eager pair, 3 more replays. Before each execution fresh inputs of a new
 * case (the routing cycling through the four kinds) are written into the same buffers and the
 * outputs poisoned; each execution is synchronised and checked exactly. y can be written ahead:
 * the model knows each rank's receive order. Then a dispatch captured with the last rank
 * passing another num_experts: WEFT_ERR_MISMATCH on every rank, and the capture still ends
 * cleanly (the failed dispatch must not wait for the device, which a capture forbids).
 *
 * Invalid arguments (roa): topk, NULL outputs, sizes past 2^56 bytes and past INT32_MAX tokens,
 * each WEFT_ERR_INVALID_ARGUMENT naming the argument; a valid pair follows.
 *
 * Handles past their communicator (per mode): the communicator is destroyed while two handles
 * live; destroying one then must succeed, and the next communicator must refuse the other
 * (WEFT_ERR_INVALID_ARGUMENT) before it is destroyed too. Then 16 handles destroyed on a thread
 * while the communicator is destroyed, their pairs still queued: every destroy succeeds, the last
 * pair is exact.
 *
 * Spread cases (per mode, each dtype): y of moe_ref.h's spread kind, whose float32 sum depends on
 * the order and on rounding each step to 16 bits; from 3 ranks each case checks that it does, so
 * that a combine summing out of rank order or in 16 bits fails them.
 *
 * GPU_TEST_QUICK: a third of the grid, no large cases, 5 replays. GPU_TEST_SANITIZER (set by
 * run.sh for its compute-sanitizer runs): no rejected dispatches (their gate relies on kernel
 * launches that return before the kernels run, which the sanitizer's are not).
 */
#include "../mp/moe_ref.h"
#include "gpu_harness.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISON_BYTE 0xA5  /* the harness's poison (gpu_harness.h) */
#define CAP_SPARE 3       /* receive rows beyond the need */
#define SMALL_T 300       /* the largest T of the grid (the different-T point stays below) */
#define SMALL_H 128       /* the largest H of the grid */
#define MAX_K 8           /* the largest topk */
#define MAX_EPR 32        /* the most experts per rank (E = 32n) */
#define GUARD_SLACK 256   /* guard zones of a buffer carved from a slab (front 136 + 2, back 64) */
#define GATE_LIMIT_S 10.0 /* the stream is held at most this long by the gate */
#define REPLAYS 20
#define REPLAYS_AFTER 3
#define QUICK_REPLAYS 5

/* The buffers of one dispatch and combine. */
enum { B_X, B_IDX, B_W, B_RX, B_RIDX, B_RW, B_RCNT, B_NRECV, B_Y, B_OUT, NUM_BUFS };
static const char *const buf_names[NUM_BUFS] = {"x",
                                                "topk_idx",
                                                "topk_weights",
                                                "recv_x",
                                                "recv_topk_idx",
                                                "recv_topk_weights",
                                                "recv_expert_counts",
                                                "num_recv_tokens",
                                                "y",
                                                "out"};

/* Slabs of one mode, one per buffer kind and buffer, for the small cases. */
typedef struct pool {
    gpu_slab_t slab[GPU_NUM_BUF_KINDS][NUM_BUFS];
} pool_t;

/* A case: what is dispatched, in which buffers, with how much room. */
typedef struct gcase {
    moe_shape_t shape;
    gpu_buf_kind_t kind;
    int tight; /* max_recv_tokens exactly the need (else the need + CAP_SPARE) */
} gcase_t;

/* Device buffers of a case; rows: receive rows allocated. */
typedef struct moe_bufs {
    gpu_buf_t b[NUM_BUFS];
    size_t rows;
} moe_bufs_t;

/* Sizes and element sizes of the buffers of a case. */
static void buf_sizes(const moe_shape_t *s, int epr, size_t T, size_t rows, size_t yrows,
                      size_t bytes[NUM_BUFS], size_t es_out[NUM_BUFS])
{
    size_t es = mp_dtype_bytes(s->dt), H = s->hidden, k = (size_t)s->topk;
    const size_t b[NUM_BUFS] = {T * H * es,     T * k * 8,    T * k * 4,       rows * H * es,
                                rows * k * 8,   rows * k * 4, (size_t)epr * 8, 8,
                                yrows * H * es, T * H * es};
    const size_t e[NUM_BUFS] = {es, 8, 4, es, 8, 4, 8, 8, es, es};
    memcpy(bytes, b, sizeof b);
    memcpy(es_out, e, sizeof e);
}

static void pool_create(gpu_ctx_t *g, pool_t *pool)
{
    int n = g->mp.nranks;
    moe_shape_t s = {.hidden = SMALL_H, .topk = MAX_K, .dt = WEFT_FLOAT32};
    size_t rows = (size_t)n * SMALL_T + CAP_SPARE, bytes[NUM_BUFS], es[NUM_BUFS];
    buf_sizes(&s, MAX_EPR, SMALL_T, rows, rows, bytes, es);
    for (int k = 0; k < GPU_NUM_BUF_KINDS; k++)
        for (int i = 0; i < NUM_BUFS; i++)
            gpu_slab_create(g, &pool->slab[k][i], k != GPU_BUF_CUDA, bytes[i] + GUARD_SLACK);
}

static void pool_destroy(gpu_ctx_t *g, pool_t *pool)
{
    for (int k = 0; k < GPU_NUM_BUF_KINDS; k++)
        for (int i = 0; i < NUM_BUFS; i++)
            gpu_slab_destroy(g, &pool->slab[k][i]);
}

/* Get the buffers of a case of ref's shape with `rows` receive rows (poisoned, guarded); from
 * the pool when it fits, else fresh. */
static void bufs_get(gpu_ctx_t *g, const pool_t *pool, gpu_buf_kind_t kind, const moe_ref_t *ref,
                     size_t rows, size_t yrows, moe_bufs_t *mb)
{
    size_t bytes[NUM_BUFS], es[NUM_BUFS];
    buf_sizes(&ref->shape, ref->epr, ref->shape.tokens[ref->rank], rows, yrows, bytes, es);
    mb->rows = rows;
    for (int i = 0; i < NUM_BUFS; i++)
        gpu_buf_get(g, &mb->b[i], pool ? &pool->slab[kind][i] : NULL, kind, bytes[i], es[i]);
}

static void bufs_put(gpu_ctx_t *g, moe_bufs_t *mb)
{
    for (int i = 0; i < NUM_BUFS; i++)
        gpu_buf_put(g, &mb->b[i]);
}

static void bufs_pull(gpu_ctx_t *g, const moe_bufs_t *mb)
{
    for (int i = 0; i < NUM_BUFS; i++)
        gpu_buf_pull(g, &mb->b[i]);
}

static void bufs_check_guards(gpu_ctx_t *g, const moe_bufs_t *mb)
{
    for (int i = 0; i < NUM_BUFS; i++)
        gpu_buf_check_guards(g, &mb->b[i], buf_names[i]);
}

/* Queue the poison fill of a buffer's payload again. */
static void poison(gpu_ctx_t *g, const gpu_buf_t *b)
{
    if (b->bytes > 0)
        gpu_cuda_ok(g, cudaMemsetAsync(b->ptr, POISON_BYTE, b->bytes, g->stream),
                    "cudaMemsetAsync(poison)");
}

static void poison_outputs(gpu_ctx_t *g, const moe_bufs_t *mb)
{
    static const int outs[] = {B_RX, B_RIDX, B_RW, B_RCNT, B_NRECV, B_OUT};
    for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
        poison(g, &mb->b[outs[i]]);
}

/* Write this rank's inputs and y (its received rows; the rest of y is left as it is) into the
 * host mirrors and queue their copies. */
static void push_inputs(gpu_ctx_t *g, const moe_ref_t *ref, const moe_bufs_t *mb)
{
    const gpu_buf_t *b = mb->b;
    moe_ref_fill_inputs(ref, b[B_X].host, b[B_IDX].host, b[B_W].host);
    moe_ref_fill_y(ref, b[B_Y].host);
    static const int ins[] = {B_X, B_IDX, B_W};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++)
        gpu_buf_push(g, &b[ins[i]], 0, b[ins[i]].bytes);
    gpu_buf_push(g, &b[B_Y], 0,
                 ref->recv[ref->rank] * ref->shape.hidden * mp_dtype_bytes(ref->shape.dt));
}

static int64_t num_recv_of(const moe_bufs_t *mb)
{
    int64_t v;
    memcpy(&v, mb->b[B_NRECV].host, sizeof v);
    return v;
}

/* Check the outputs of a successful dispatch (cap: its max_recv_tokens) and of its combine; and
 * that the inputs are unchanged: x, the routing, and y (its rows past the need keep their
 * poison). After bufs_pull and gpu_sync. */
static void check_results(gpu_ctx_t *g, const moe_ref_t *ref, const moe_bufs_t *mb, size_t cap)
{
    mp_ctx_t *ctx = &g->mp;
    const gpu_buf_t *b = mb->b;
    moe_ref_check_dispatch(ctx, ref, num_recv_of(mb), b[B_RX].host, b[B_RIDX].host, b[B_RW].host,
                           b[B_RCNT].host, cap);
    moe_ref_check_combine(ctx, ref, b[B_OUT].host);
    moe_ref_check_inputs(ctx, ref, b[B_X].host, b[B_IDX].host, b[B_W].host);
    size_t ybytes = ref->recv[ref->rank] * ref->shape.hidden * mp_dtype_bytes(ref->shape.dt);
    unsigned char *want = malloc(ybytes + 1);
    if (!want)
        mp_fatal(ctx, "malloc(%zu) failed", ybytes + 1);
    moe_ref_fill_y(ref, want);
    mp_check(ctx, memcmp(want, b[B_Y].host, ybytes) == 0, "combine changed its input y");
    free(want);
    mp_check_poison(ctx, "y past the received rows", b[B_Y].host + ybytes, b[B_Y].bytes - ybytes);
}

/* The argument the API lets be NULL when `empty`, in every other case (odd case numbers). */
static void *maybe_null(const gpu_ctx_t *g, void *p, int empty)
{
    return empty && (g->mp.case_id & 1) ? NULL : p;
}

/* Queue dispatch and combine with max_recv_tokens cap; *handle receives dispatch's handle.
 * Returns 1 if both calls succeeded. */
static int enqueue_pair(gpu_ctx_t *g, const moe_ref_t *ref, const moe_bufs_t *mb, size_t cap,
                        weft_moe_handle_t *handle)
{
    mp_ctx_t *ctx = &g->mp;
    const moe_shape_t *s = &ref->shape;
    const gpu_buf_t *b = mb->b;
    size_t T = s->tokens[ref->rank];
    int no_t = T == 0, no_cap = cap == 0;
    *handle = NULL;
    weft_status_t st = weft_moe_dispatch(
        ctx->comm, maybe_null(g, b[B_X].ptr, no_t), T, s->hidden, s->dt,
        maybe_null(g, b[B_IDX].ptr, no_t), maybe_null(g, b[B_W].ptr, no_t), s->topk, s->experts,
        maybe_null(g, b[B_RX].ptr, no_cap), maybe_null(g, b[B_RIDX].ptr, no_cap),
        maybe_null(g, b[B_RW].ptr, no_cap), (int64_t *)b[B_RCNT].ptr, cap,
        (int64_t *)b[B_NRECV].ptr, handle, g->stream);
    if (!mp_ok(ctx, st, "weft_moe_dispatch"))
        return 0;
    if (!mp_check(ctx, *handle != NULL, "weft_moe_dispatch succeeded without a handle"))
        return 0;
    st = weft_moe_combine(ctx->comm, *handle, maybe_null(g, b[B_Y].ptr, ref->recv[ref->rank] == 0),
                          maybe_null(g, b[B_OUT].ptr, no_t), g->stream);
    return mp_ok(ctx, st, "weft_moe_combine");
}

/* The backward pass after a checked case: new rows dispatched reusing h's layout
 * (WEFT_MOE_REUSE; the routing outputs asked for in every other case, else they must keep their
 * poison), then a combine of new y with h, checked as the first pair. */
static void run_reuse(gpu_ctx_t *g, moe_ref_t *ref, const moe_bufs_t *mb, size_t cap,
                      weft_moe_handle_t h)
{
    mp_ctx_t *ctx = &g->mp;
    const moe_shape_t *s = &ref->shape;
    const gpu_buf_t *b = mb->b;
    size_t T = s->tokens[ref->rank];
    int routing = (int)(ctx->case_id / 2 % 2);
    ref->x_round++;
    push_inputs(g, ref, mb);
    poison_outputs(g, mb);
    weft_moe_handle_t again = h;
    weft_status_t st = weft_moe_dispatch(
        ctx->comm, maybe_null(g, b[B_X].ptr, T == 0), T, s->hidden, s->dt, NULL, NULL,
        WEFT_MOE_REUSE, 0, maybe_null(g, b[B_RX].ptr, cap == 0),
        routing ? (int64_t *)b[B_RIDX].ptr : NULL, routing ? (float *)b[B_RW].ptr : NULL,
        routing ? (int64_t *)b[B_RCNT].ptr : NULL, cap, (int64_t *)b[B_NRECV].ptr, &again,
        g->stream);
    int ok = mp_ok(ctx, st, "weft_moe_dispatch reusing the layout") &&
             mp_check(ctx, again == h, "a reusing dispatch changed *handle");
    if (ok)
        ok = mp_ok(ctx,
                   weft_moe_combine(ctx->comm, h,
                                    maybe_null(g, b[B_Y].ptr, ref->recv[ref->rank] == 0),
                                    maybe_null(g, b[B_OUT].ptr, T == 0), g->stream),
                   "weft_moe_combine after the reuse");
    bufs_pull(g, mb);
    gpu_sync(g, "moe dispatch reusing the layout, and combine");
    if (!ok)
        return;
    moe_ref_check_dispatch(ctx, ref, num_recv_of(mb), b[B_RX].host, routing ? b[B_RIDX].host : NULL,
                           routing ? b[B_RW].host : NULL, routing ? b[B_RCNT].host : NULL, cap);
    moe_ref_check_combine(ctx, ref, b[B_OUT].host);
    if (!routing) {
        mp_check_poison(ctx, "recv_topk_idx (not asked for)", b[B_RIDX].host, b[B_RIDX].bytes);
        mp_check_poison(ctx, "recv_topk_weights (not asked for)", b[B_RW].host, b[B_RW].bytes);
        mp_check_poison(ctx, "recv_expert_counts (not asked for)", b[B_RCNT].host, b[B_RCNT].bytes);
    }
}

/* ---------------------------------------------------------------------------------------------
 * The grid
 * ------------------------------------------------------------------------------------------- */
static void run_case(gpu_ctx_t *g, const pool_t *pool, const gcase_t *c)
{
    mp_ctx_t *ctx = &g->mp;
    const moe_shape_t *s = &c->shape;
    mp_case(ctx, "moe T=%zu H=%zu k=%d E=%d %s %s %s%s%s", s->tokens[ctx->rank], s->hidden, s->topk,
            s->experts, moe_route_name(s->route), mp_dtype_name(s->dt), gpu_buf_kind_name(c->kind),
            c->tight ? " tight" : "", s->spread ? " spread" : "");
    moe_ref_t ref;
    moe_ref_create(ctx, s, &ref);
    if (s->spread && ctx->nranks >= 3) {
        /* The values must tell the right combine from one that sums in another order or
         * rounds each step to 16 bits (moe_ref.h), or the case proves nothing about them. */
        size_t reversed, stepwise;
        moe_ref_spread_misses(&ref, &reversed, &stepwise);
        mp_check(ctx, reversed > 0 && (stepwise > 0 || s->dt == WEFT_FLOAT32),
                 "spread values: a reversed sum misses %zu and a stepwise one %zu of %zu outputs: "
                 "the case cannot tell them from the right sum",
                 reversed, stepwise, s->tokens[ctx->rank] * s->hidden);
    }
    size_t need = ref.recv[ctx->rank], cap = c->tight ? need : need + CAP_SPARE;
    moe_bufs_t mb;
    /* y has CAP_SPARE rows past the received ones, poisoned: combine must not write them
     * (check_results), nor read them into out. */
    bufs_get(g, pool, c->kind, &ref, cap, need + CAP_SPARE, &mb);
    push_inputs(g, &ref, &mb);
    weft_moe_handle_t h;
    int ok = enqueue_pair(g, &ref, &mb, cap, &h);
    bufs_pull(g, &mb);
    gpu_sync(g, "moe dispatch and combine");
    if (ok)
        check_results(g, &ref, &mb, cap);
    if (ok)
        run_reuse(g, &ref, &mb, cap, h);
    bufs_check_guards(g, &mb);
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
    bufs_put(g, &mb);
    moe_ref_destroy(&ref);
}

static void run_grid(gpu_ctx_t *g, const pool_t *pool, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    static const size_t Ts[] = {0, 1, 7, SMALL_T}, Hs[] = {1, 7, SMALL_H};
    static const int ks[] = {1, 2, MAX_K}, ems[] = {1, 8, MAX_EPR};
    static const weft_dtype_t dts[] = {WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_FLOAT16};
    unsigned combo = 0, ran = 0;
    for (int ti = 0; ti < 5; ti++)
        for (int hi = 0; hi < 3; hi++)
            for (int ki = 0; ki < 3; ki++)
                for (int ei = 0; ei < 3; ei++)
                    for (int route = 0; route < MOE_NUM_ROUTES; route++) {
                        gcase_t c = {.shape = {.hidden = Hs[hi],
                                               .topk = ks[ki],
                                               .experts = ems[ei] * ctx->nranks,
                                               .route = (moe_route_t)route}};
                        if (c.shape.topk > c.shape.experts)
                            continue;
                        unsigned v = combo++;
                        if (reg != WEFT_REGISTRATION_ROA && v % 4 != (unsigned)reg)
                            continue;
                        if (ctx->quick && v % 3 != 0)
                            continue;
                        /* ti == 4: a different T per rank (rank 0 has none). */
                        for (int r = 0; r < ctx->nranks; r++)
                            c.shape.tokens[r] = ti < 4 ? Ts[ti] : (size_t)(r * 37 % 101);
                        c.shape.dt = dts[v % 3];
                        c.kind = (gpu_buf_kind_t)((v / 3) % GPU_NUM_BUF_KINDS);
                        c.tight = v % 5 == 0;
                        run_case(g, pool, &c);
                        ran++;
                    }
    mp_note(ctx, "reg=%s: %u grid cases", mp_reg_name(reg), ran);
}

/* The large cases of a mode: T = 4096 or H = 7168, fresh allocations. */
typedef struct large_case {
    weft_registration_t reg;
    size_t T, H;
    int k, em;
    moe_route_t route;
    weft_dtype_t dt;
    gpu_buf_kind_t kind;
} large_case_t;

static const large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, 4096, 128, 8, 32, MOE_ROUTE_ZIPF, WEFT_BFLOAT16, GPU_BUF_WEFT},
    {WEFT_REGISTRATION_ROA, 300, 7168, 8, 8, MOE_ROUTE_UNIFORM, WEFT_BFLOAT16, GPU_BUF_INTERIOR},
    /* More expert slots than a warp has lanes: the gather loops over them. */
    {WEFT_REGISTRATION_ROA, 300, 64, 40, 32, MOE_ROUTE_UNIFORM, WEFT_FLOAT32, GPU_BUF_WEFT},
    {WEFT_REGISTRATION_JIT, 4096, 7, 2, 8, MOE_ROUTE_MASKED, WEFT_FLOAT32, GPU_BUF_CUDA},
    {WEFT_REGISTRATION_STAGED, 7, 7168, 1, 1, MOE_ROUTE_ALL_TO_ONE, WEFT_FLOAT16, GPU_BUF_WEFT},
};

/* Spread y (moe_ref.h) in each dtype, per mode: from 3 ranks, a combine that sums in another
 * order than the ranks', or rounds each step to 16 bits, fails them. */
static void run_spread(gpu_ctx_t *g, const pool_t *pool, weft_registration_t reg)
{
    static const weft_dtype_t dts[] = {WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_FLOAT16};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        gcase_t c = {.shape = {.hidden = 64,
                               .topk = MAX_K,
                               .experts = 8 * g->mp.nranks,
                               .route = MOE_ROUTE_UNIFORM,
                               .dt = dts[i],
                               .spread = 1},
                     .kind = (gpu_buf_kind_t)((i + (size_t)reg) % GPU_NUM_BUF_KINDS)};
        for (int r = 0; r < g->mp.nranks; r++)
            c.shape.tokens[r] = SMALL_T;
        run_case(g, pool, &c);
    }
}

static void run_large(gpu_ctx_t *g, weft_registration_t reg)
{
    for (size_t i = 0; i < sizeof large_cases / sizeof large_cases[0]; i++) {
        const large_case_t *lc = &large_cases[i];
        if (lc->reg != reg)
            continue;
        gcase_t c = {.shape = {.hidden = lc->H,
                               .topk = lc->k,
                               .experts = lc->em * g->mp.nranks,
                               .route = lc->route,
                               .dt = lc->dt},
                     .kind = lc->kind};
        for (int r = 0; r < g->mp.nranks; r++)
            c.shape.tokens[r] = lc->T;
        run_case(g, NULL, &c);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Rejected dispatches
 * ------------------------------------------------------------------------------------------- */

typedef enum { REJECT_OVERFLOW, REJECT_EXPERT_HIGH, REJECT_EXPERT_LOW, REJECT_Y_NULL } reject_t;

typedef struct reject_case {
    reject_t why;
    size_t T; /* tokens per rank; 0: rank r has 1 + r * 37 % 101 */
    size_t H;
    int k, em;
    moe_route_t route;
    weft_dtype_t dt;
    gpu_buf_kind_t kind;
    int next_is_combine; /* the call that must report the rejection: combine, else dispatch */
} reject_case_t;

static const reject_case_t reject_cases[] = {
    {REJECT_OVERFLOW, 300, 128, 2, 8, MOE_ROUTE_UNIFORM, WEFT_BFLOAT16, GPU_BUF_WEFT, 0},
    {REJECT_EXPERT_HIGH, 7, 7, 8, 8, MOE_ROUTE_ZIPF, WEFT_FLOAT32, GPU_BUF_INTERIOR, 1},
    {REJECT_EXPERT_LOW, 300, 1, 1, 1, MOE_ROUTE_MASKED, WEFT_FLOAT16, GPU_BUF_WEFT, 0},
    {REJECT_OVERFLOW, 0, 7, 8, 8, MOE_ROUTE_ALL_TO_ONE, WEFT_FLOAT16, GPU_BUF_INTERIOR, 1},
    {REJECT_Y_NULL, 300, 128, 2, 8, MOE_ROUTE_UNIFORM, WEFT_BFLOAT16, GPU_BUF_WEFT, 1},
    {REJECT_Y_NULL, 7, 7, 8, 8, MOE_ROUTE_ZIPF, WEFT_FLOAT32, GPU_BUF_INTERIOR, 0},
};

static const char *reject_name(reject_t why)
{
    return why == REJECT_OVERFLOW      ? "capacity overflow"
           : why == REJECT_EXPERT_HIGH ? "expert id num_experts on the last rank"
           : why == REJECT_EXPERT_LOW  ? "expert id -2 on the first rank"
                                       : "combine's y NULL on the rank receiving the most";
}

/* Elements of a 16- or 32-bit float buffer that are not zero; the first one in *first. */
static size_t nonzero_values(const void *p, size_t elems, weft_dtype_t dt, size_t *first)
{
    size_t bad = 0;
    for (size_t i = 0; i < elems; i++)
        if (moe_ref_fetch(p, i, dt) != 0.0f && bad++ == 0)
            *first = i;
    return bad;
}

static void check_zero_counts(mp_ctx_t *ctx, const void *p, int epr)
{
    for (int e = 0; e < epr; e++) {
        int64_t v;
        memcpy(&v, (const unsigned char *)p + (size_t)e * 8, 8);
        mp_check(ctx, v == 0, "recv_expert_counts[%d] = %lld after a rejected dispatch, expected 0",
                 e, (long long)v);
    }
}

static void run_rejected(gpu_ctx_t *g, const reject_case_t *rc)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks, me = ctx->rank;
    gcase_t c = {.shape = {.hidden = rc->H,
                           .topk = rc->k,
                           .experts = rc->em * n,
                           .route = rc->route,
                           .dt = rc->dt},
                 .kind = rc->kind};
    for (int r = 0; r < n; r++)
        c.shape.tokens[r] = rc->T ? rc->T : 1 + (size_t)(r * 37 % 101);
    const moe_shape_t *s = &c.shape;
    size_t T = s->tokens[me], H = s->hidden;
    mp_case(ctx, "moe rejected (%s) T=%zu H=%zu k=%d E=%d %s %s %s, reported by the next %s",
            reject_name(rc->why), T, H, s->topk, s->experts, moe_route_name(s->route),
            mp_dtype_name(s->dt), gpu_buf_kind_name(c.kind),
            rc->next_is_combine ? "combine" : "dispatch");
    moe_ref_t ref;
    moe_ref_create(ctx, s, &ref);
    int bad_expert = rc->why == REJECT_EXPERT_HIGH || rc->why == REJECT_EXPERT_LOW;
    if (!bad_expert && ref.most == 0)
        mp_fatal(ctx, "the %s case receives nothing", reject_name(rc->why));
    size_t need = ref.recv[me], room = need + CAP_SPARE, cap = room;
    if (rc->why == REJECT_OVERFLOW && me == ref.most_rank)
        cap = need - 1;
    moe_bufs_t mb;
    bufs_get(g, NULL, c.kind, &ref, room, room, &mb);
    gpu_buf_t *b = mb.b;
    push_inputs(g, &ref, &mb);
    int bad_rank = rc->why == REJECT_EXPERT_HIGH ? n - 1 : 0;
    if (bad_expert && me == bad_rank) {
        int64_t bad = rc->why == REJECT_EXPERT_HIGH ? s->experts : -2;
        size_t slot = (T / 2) * (size_t)s->topk + (size_t)(s->topk - 1);
        memcpy(b[B_IDX].host + slot * 8, &bad, 8);
        gpu_buf_push(g, &b[B_IDX], slot * 8, 8);
    }

    /* 1. Dispatch and combine enqueued behind the gate: both must be accepted. */
    gpu_gate_t gate;
    gpu_gate_init(&gate, GATE_LIMIT_S);
    gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, gpu_gate_hold, &gate), "cudaLaunchHostFunc(gate)");
    weft_moe_handle_t h = NULL;
    weft_status_t st =
        weft_moe_dispatch(ctx->comm, b[B_X].ptr, T, H, s->dt, (const int64_t *)b[B_IDX].ptr,
                          (const float *)b[B_W].ptr, s->topk, s->experts, b[B_RX].ptr,
                          (int64_t *)b[B_RIDX].ptr, (float *)b[B_RW].ptr, (int64_t *)b[B_RCNT].ptr,
                          cap, (int64_t *)b[B_NRECV].ptr, &h, g->stream);
    int ok = mp_ok(ctx, st, "weft_moe_dispatch (rejected on the device)") &&
             mp_check(ctx, h != NULL, "weft_moe_dispatch succeeded without a handle");
    /* REJECT_Y_NULL: the rank receiving the most passes no y; the device must see it. */
    int y_null = rc->why == REJECT_Y_NULL && me == ref.most_rank;
    if (ok)
        ok = mp_ok(
            ctx,
            weft_moe_combine(ctx->comm, h, y_null ? NULL : b[B_Y].ptr, b[B_OUT].ptr, g->stream),
            "weft_moe_combine (rejected on the device, or after a rejected dispatch)");
    gpu_gate_open(&gate);
    bufs_pull(g, &mb);
    gpu_sync(g, "rejected dispatch");
    mp_check(ctx, !atomic_load(&gate.timed_out),
             "the stream was held %.0f s: a MoE call waited for its own stream", GATE_LIMIT_S);
    if (ok && rc->why == REJECT_Y_NULL) { /* the dispatch was fine */
        moe_ref_check_dispatch(ctx, &ref, num_recv_of(&mb), b[B_RX].host, b[B_RIDX].host,
                               b[B_RW].host, b[B_RCNT].host, room);
    } else if (ok) {
        mp_check(ctx, num_recv_of(&mb) == -1,
                 "num_recv_tokens %lld after a rejected dispatch, "
                 "expected -1",
                 (long long)num_recv_of(&mb));
        check_zero_counts(ctx, b[B_RCNT].host, ref.epr);
        mp_check_poison(ctx, "recv_x of a rejected dispatch", b[B_RX].host, b[B_RX].bytes);
        mp_check_poison(ctx, "recv_topk_idx of a rejected dispatch", b[B_RIDX].host,
                        b[B_RIDX].bytes);
        mp_check_poison(ctx, "recv_topk_weights of a rejected dispatch", b[B_RW].host,
                        b[B_RW].bytes);
    }
    if (ok) {
        size_t first = 0, nz = nonzero_values(b[B_OUT].host, T * H, s->dt, &first);
        mp_check(ctx, nz == 0,
                 "rejected combine: %zu of %zu out values not zero (first [%zu] = %g)", nz, T * H,
                 first, nz ? (double)moe_ref_fetch(b[B_OUT].host, first, s->dt) : 0.0);
    }
    bufs_check_guards(g, &mb);

    /* 2. Every rank's host has the verdict: the next MoE call reports it and does nothing. */
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier after the rejected dispatch");
    gpu_sync(g, "barrier after the rejected dispatch");
    if (bad_expert && me == bad_rank) { /* the next calls route validly */
        moe_ref_fill_inputs(&ref, b[B_X].host, b[B_IDX].host, b[B_W].host);
        gpu_buf_push(g, &b[B_IDX], 0, b[B_IDX].bytes);
    }
    poison(g, &b[B_OUT]);
    /* Every rank names the argument and the rank (the host backend's words, moe_dispatch.c). */
    char want[256];
    const char *next = rc->next_is_combine ? "weft_moe_combine" : "weft_moe_dispatch";
    if (rc->why == REJECT_OVERFLOW)
        snprintf(want, sizeof want,
                 "%s: an earlier weft_moe_dispatch was rejected: max_recv_tokens: rank %d would "
                 "receive %zu tokens, more than its max_recv_tokens (%zu)",
                 next, ref.most_rank, ref.most, ref.most - 1);
    else if (rc->why == REJECT_Y_NULL)
        snprintf(want, sizeof want,
                 "%s: an earlier weft_moe_combine was rejected: y: rank %d passed y NULL but "
                 "received %zu tokens",
                 next, ref.most_rank, ref.most);
    else
        snprintf(want, sizeof want,
                 "%s: an earlier weft_moe_dispatch was rejected: topk_idx: rank %d's topk_idx "
                 "holds an id that is neither -1 nor an expert in [0, %d)",
                 next, bad_rank, s->experts);
    if (rc->next_is_combine && h) {
        st = weft_moe_combine(ctx->comm, h, b[B_Y].ptr, b[B_OUT].ptr, g->stream);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want,
                         "the combine after a rejected dispatch");
    } else if (!rc->next_is_combine) {
        weft_moe_handle_t h2 = NULL;
        st = weft_moe_dispatch(ctx->comm, b[B_X].ptr, T, H, s->dt, (const int64_t *)b[B_IDX].ptr,
                               (const float *)b[B_W].ptr, s->topk, s->experts, b[B_RX].ptr,
                               (int64_t *)b[B_RIDX].ptr, (float *)b[B_RW].ptr,
                               (int64_t *)b[B_RCNT].ptr, room, (int64_t *)b[B_NRECV].ptr, &h2,
                               g->stream);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want,
                         "the dispatch after a rejected dispatch");
        mp_check(ctx, h2 == NULL, "a failed weft_moe_dispatch set its handle");
        if (h2)
            weft_moe_handle_destroy(h2);
    }
    bufs_pull(g, &mb);
    gpu_sync(g, "the call after the rejected dispatch");
    if (ok && rc->why == REJECT_Y_NULL) { /* the accepted dispatch's outputs stay */
        moe_ref_check_dispatch(ctx, &ref, num_recv_of(&mb), b[B_RX].host, b[B_RIDX].host,
                               b[B_RW].host, b[B_RCNT].host, room);
    } else if (ok) {
        mp_check(ctx, num_recv_of(&mb) == -1,
                 "num_recv_tokens changed from -1 to %lld by a call that failed",
                 (long long)num_recv_of(&mb));
        check_zero_counts(ctx, b[B_RCNT].host, ref.epr);
        mp_check_poison(ctx, "recv_x after a failed call", b[B_RX].host, b[B_RX].bytes);
        mp_check_poison(ctx, "recv_topk_idx after a failed call", b[B_RIDX].host, b[B_RIDX].bytes);
        mp_check_poison(ctx, "recv_topk_weights after a failed call", b[B_RW].host, b[B_RW].bytes);
    }
    if (ok)
        mp_check_poison(ctx, "out after a failed call", b[B_OUT].host, b[B_OUT].bytes);
    bufs_check_guards(g, &mb);
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");

    /* 3. The call after that works: the same routing, valid, with room on every rank. */
    poison_outputs(g, &mb);
    weft_moe_handle_t h3;
    ok = enqueue_pair(g, &ref, &mb, room, &h3);
    bufs_pull(g, &mb);
    gpu_sync(g, "dispatch and combine after the rejection");
    if (ok)
        check_results(g, &ref, &mb, room);
    bufs_check_guards(g, &mb);
    mp_ok(ctx, weft_moe_handle_destroy(h3), "weft_moe_handle_destroy");
    bufs_put(g, &mb);
    moe_ref_destroy(&ref);
}

/* ---------------------------------------------------------------------------------------------
 * CUDA graph
 * ------------------------------------------------------------------------------------------- */
typedef struct graph_case {
    weft_registration_t reg;
    size_t T, H;
    int k, em;
    weft_dtype_t dt;
    gpu_buf_kind_t kind;
} graph_case_t;

static const graph_case_t graph_cases[] = {
    {WEFT_REGISTRATION_ROA, 300, 128, 8, 8, WEFT_BFLOAT16, GPU_BUF_WEFT},
    {WEFT_REGISTRATION_ROA, 97, 7, 2, 32, WEFT_FLOAT16, GPU_BUF_CUDA},
    {WEFT_REGISTRATION_JIT, 64, 33, 1, 1, WEFT_FLOAT32, GPU_BUF_INTERIOR},
    {WEFT_REGISTRATION_STAGED, 300, 128, 8, 8, WEFT_BFLOAT16, GPU_BUF_WEFT},
};

/* Execution e's case: a new case number, the routing cycling through the four kinds. */
static void graph_ref(gpu_ctx_t *g, const graph_case_t *gc, int e, const char *phase,
                      moe_ref_t *ref)
{
    mp_ctx_t *ctx = &g->mp;
    moe_shape_t s = {.hidden = gc->H,
                     .topk = gc->k,
                     .experts = gc->em * ctx->nranks,
                     .route = (moe_route_t)(e % MOE_NUM_ROUTES),
                     .dt = gc->dt};
    for (int r = 0; r < ctx->nranks; r++)
        s.tokens[r] = gc->T;
    mp_case(ctx, "moe graph reg=%s T=%zu H=%zu k=%d E=%d %s %s %s: execution %d (%s)",
            mp_reg_name(ctx->reg), gc->T, gc->H, gc->k, s.experts, moe_route_name(s.route),
            mp_dtype_name(gc->dt), gpu_buf_kind_name(gc->kind), e, phase);
    moe_ref_create(ctx, &s, ref);
}

/* Pull everything back, wait, check the execution exactly. */
static void graph_check(gpu_ctx_t *g, const moe_ref_t *ref, const moe_bufs_t *mb, int ok,
                        const char *what)
{
    bufs_pull(g, mb);
    gpu_sync(g, what);
    if (ok)
        check_results(g, ref, mb, mb->rows);
    bufs_check_guards(g, mb);
}

static void run_graph(gpu_ctx_t *g, const graph_case_t *gc)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks;
    int replays = ctx->quick ? QUICK_REPLAYS : REPLAYS;
    /* Any rank may receive every token: the capacity never overflows. y has room for as many
     * rows; those past an execution's need stay poisoned. */
    size_t rows = (size_t)n * gc->T + CAP_SPARE;
    moe_ref_t ref;
    moe_bufs_t mb;

    /* Execution 0, eager (registers and stages what the graph will use). */
    graph_ref(g, gc, 0, "eager", &ref);
    bufs_get(g, NULL, gc->kind, &ref, rows, rows, &mb);
    push_inputs(g, &ref, &mb);
    weft_moe_handle_t h;
    int ok = enqueue_pair(g, &ref, &mb, rows, &h);
    graph_check(g, &ref, &mb, ok, "graph: eager execution");
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
    moe_ref_destroy(&ref);
    if (!ok) {
        bufs_put(g, &mb);
        return;
    }

    /* Capture. The pointers, sizes and capacity are fixed; the data change. */
    snprintf(ctx->where, sizeof ctx->where, "moe graph reg=%s: capture", mp_reg_name(ctx->reg));
    gpu_cuda_ok(g, cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed),
                "cudaStreamBeginCapture(relaxed)");
    const gpu_buf_t *b = mb.b;
    weft_moe_handle_t hg = NULL;
    weft_status_t st = weft_moe_dispatch(ctx->comm, b[B_X].ptr, gc->T, gc->H, gc->dt,
                                         (const int64_t *)b[B_IDX].ptr, (const float *)b[B_W].ptr,
                                         gc->k, gc->em * n, b[B_RX].ptr, (int64_t *)b[B_RIDX].ptr,
                                         (float *)b[B_RW].ptr, (int64_t *)b[B_RCNT].ptr, rows,
                                         (int64_t *)b[B_NRECV].ptr, &hg, g->stream);
    const char *failed = "weft_moe_dispatch";
    if (st == WEFT_SUCCESS) {
        st = weft_moe_combine(ctx->comm, hg, b[B_Y].ptr, b[B_OUT].ptr, g->stream);
        failed = "weft_moe_combine";
    }
    cudaGraph_t graph = NULL;
    cudaError_t end = cudaStreamEndCapture(g->stream, &graph);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "capture: %s returned %s: %s", failed, weft_status_string(st),
                 weft_last_error());
    gpu_cuda_ok(g, end, "cudaStreamEndCapture");
    if (!graph)
        mp_fatal(ctx, "cudaStreamEndCapture returned no graph");
    cudaGraphExec_t exec = NULL;
    gpu_cuda_ok(g, cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

    /* Replays, an eager pair, replays; each with fresh inputs, synchronised and checked. */
    int total = 1 + replays + 1 + REPLAYS_AFTER;
    for (int e = 1; e < total; e++) {
        int eager = e == replays + 1;
        graph_ref(g, gc, e, eager ? "eager after the replays" : "replay", &ref);
        poison(g, &mb.b[B_Y]);
        poison_outputs(g, &mb);
        push_inputs(g, &ref, &mb);
        h = NULL;
        ok = 1;
        if (eager)
            ok = enqueue_pair(g, &ref, &mb, rows, &h);
        else
            gpu_cuda_ok(g, cudaGraphLaunch(exec, g->stream), "cudaGraphLaunch");
        graph_check(g, &ref, &mb, ok, eager ? "graph: eager execution" : "graph: replay");
        mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
        moe_ref_destroy(&ref);
    }
    mp_note(ctx, "reg=%s: moe graph %s %s: %d replays, an eager pair, %d replays, all checked",
            mp_reg_name(ctx->reg), mp_dtype_name(gc->dt), gpu_buf_kind_name(gc->kind), replays,
            REPLAYS_AFTER);
    gpu_cuda_ok(g, cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    gpu_cuda_ok(g, cudaGraphDestroy(graph), "cudaGraphDestroy");
    mp_ok(ctx, weft_moe_handle_destroy(hg), "weft_moe_handle_destroy (captured)");

    /* A dispatch that fails inside a capture leaves the capture usable. */
    mp_case(ctx, "moe graph reg=%s: a mismatched dispatch captured", mp_reg_name(ctx->reg));
    gpu_cuda_ok(g, cudaStreamBeginCapture(g->stream, cudaStreamCaptureModeRelaxed),
                "cudaStreamBeginCapture(relaxed)");
    int experts = gc->em * n * (ctx->rank == n - 1 ? 2 : 1);
    hg = NULL;
    st = weft_moe_dispatch(ctx->comm, b[B_X].ptr, gc->T, gc->H, gc->dt,
                           (const int64_t *)b[B_IDX].ptr, (const float *)b[B_W].ptr, gc->k, experts,
                           b[B_RX].ptr, (int64_t *)b[B_RIDX].ptr, (float *)b[B_RW].ptr,
                           (int64_t *)b[B_RCNT].ptr, rows, (int64_t *)b[B_NRECV].ptr, &hg,
                           g->stream);
    graph = NULL;
    end = cudaStreamEndCapture(g->stream, &graph);
    mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_dispatch", "captured, num_experts");
    mp_check(ctx, hg == NULL, "a mismatched dispatch set *handle");
    mp_check(ctx, end == cudaSuccess, "cudaStreamEndCapture after the failed dispatch: %s",
             cudaGetErrorName(end));
    if (graph)
        gpu_cuda_ok(g, cudaGraphDestroy(graph), "cudaGraphDestroy");
    (void)cudaGetLastError(); /* clear what a broken capture leaves (reported above) */
    bufs_put(g, &mb);
}

/* ---------------------------------------------------------------------------------------------
 * Invalid arguments
 * ------------------------------------------------------------------------------------------- */

/* Bad arguments, each rejected with WEFT_ERR_INVALID_ARGUMENT before any communication, with a
 * message naming the call and the argument ("weft_moe_dispatch: num_tokens ..."): topk -1 and
 * past num_experts; each required output NULL; sizes past what a process can address (2^56
 * bytes: x, a row, topk_idx, recv_x, recv_topk_idx, the handle memory) and past the CUDA
 * backend's INT32_MAX tokens; combine's out NULL with tokens. Device buffers of a small valid
 * shape (T = 1, H = 2, k = 2, E = 2n); a valid dispatch and combine on them follow. */
static void run_invalid(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks;
    mp_case(ctx, "moe invalid arguments");
    moe_shape_t s = {
        .hidden = 2, .topk = 2, .experts = 2 * n, .route = MOE_ROUTE_UNIFORM, .dt = WEFT_FLOAT32};
    for (int r = 0; r < n; r++)
        s.tokens[r] = 1;
    moe_ref_t ref;
    moe_ref_create(ctx, &s, &ref);
    size_t cap = ref.recv[ctx->rank] + CAP_SPARE;
    moe_bufs_t mb;
    bufs_get(g, NULL, GPU_BUF_WEFT, &ref, cap, cap, &mb);
    const gpu_buf_t *b = mb.b;
    push_inputs(g, &ref, &mb);
    weft_comm_t cm = ctx->comm;
    const void *x = b[B_X].ptr;
    const int64_t *idx = (const int64_t *)b[B_IDX].ptr;
    const float *w = (const float *)b[B_W].ptr;
    void *rx = b[B_RX].ptr;
    int64_t *ridx = (int64_t *)b[B_RIDX].ptr, *rcnt = (int64_t *)b[B_RCNT].ptr;
    int64_t *num = (int64_t *)b[B_NRECV].ptr;
    float *rw = (float *)b[B_RW].ptr;
    cudaStream_t st = g->stream;
    weft_moe_handle_t h = NULL;
    int E = 2 * n;
#define BAD_ARG(what, named, ...)                                                                  \
    mp_expect_status(ctx, weft_moe_dispatch(__VA_ARGS__), WEFT_ERR_INVALID_ARGUMENT,               \
                     "weft_moe_dispatch: " named, what)
    BAD_ARG("topk -1", "topk", cm, x, 1, 2, WEFT_FLOAT32, idx, w, -1, E, rx, ridx, rw, rcnt, cap,
            num, &h, st);
    BAD_ARG("topk > num_experts", "topk", cm, x, 1, 2, WEFT_FLOAT32, idx, w, n + 1, n, rx, ridx, rw,
            rcnt, cap, num, &h, st);
    BAD_ARG("recv_topk_idx NULL", "recv_topk_idx", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, E, rx,
            NULL, rw, rcnt, cap, num, &h, st);
    BAD_ARG("recv_topk_weights NULL", "recv_topk_weights", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, E,
            rx, ridx, NULL, rcnt, cap, num, &h, st);
    BAD_ARG("recv_expert_counts NULL", "recv_expert_counts", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2,
            E, rx, ridx, rw, NULL, cap, num, &h, st);
    BAD_ARG("num_recv_tokens NULL", "num_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, E, rx,
            ridx, rw, rcnt, cap, NULL, &h, st);
    const size_t limit = (size_t)1 << 56, int32_past = (size_t)INT32_MAX + 1;
    BAD_ARG("num_tokens SIZE_MAX", "num_tokens", cm, x, SIZE_MAX, 2, WEFT_FLOAT32, idx, w, 2, E, rx,
            ridx, rw, rcnt, cap, num, &h, st);
    BAD_ARG("x past 2^56 bytes", "num_tokens", cm, x, limit / 8 + 1, 2, WEFT_FLOAT32, idx, w, 2, E,
            rx, ridx, rw, rcnt, cap, num, &h, st);
    BAD_ARG("hidden SIZE_MAX", "hidden", cm, x, 1, SIZE_MAX, WEFT_FLOAT32, idx, w, 2, E, rx, ridx,
            rw, rcnt, cap, num, &h, st);
    BAD_ARG("a row past 2^56 bytes", "hidden", cm, x, 1, limit / 2 + 1, WEFT_BFLOAT16, idx, w, 2, E,
            rx, ridx, rw, rcnt, cap, num, &h, st);
    BAD_ARG("topk_idx past 2^56 bytes", "num_tokens", cm, x, limit / 16 + 1, 1, WEFT_FLOAT32, idx,
            w, 2, E, rx, ridx, rw, rcnt, cap, num, &h, st);
    BAD_ARG("max_recv_tokens SIZE_MAX", "max_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, E,
            rx, ridx, rw, rcnt, SIZE_MAX, num, &h, st);
    BAD_ARG("recv_x past 2^56 bytes", "max_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, E,
            rx, ridx, rw, rcnt, limit / 8 + 1, num, &h, st);
    BAD_ARG("recv_topk_idx past 2^56 bytes", "max_recv_tokens", cm, x, 1, 1, WEFT_FLOAT32, idx, w,
            2, E, rx, ridx, rw, rcnt, limit / 16 + 1, num, &h, st);
    BAD_ARG("num_tokens past INT32_MAX", "num_tokens", cm, x, int32_past, 1, WEFT_FLOAT32, idx, w,
            1, n, rx, ridx, rw, rcnt, cap, num, &h, st);
    BAD_ARG("max_recv_tokens past INT32_MAX", "max_recv_tokens", cm, x, 1, 1, WEFT_FLOAT32, idx, w,
            1, n, rx, ridx, rw, rcnt, int32_past, num, &h, st);
    /* Every array within the limits (topk_idx exactly 2^56 bytes), but not the handle memory:
     * n lists of 8 + 12 topk bytes a token. */
    BAD_ARG("handle memory past 2^56 bytes", "num_tokens", cm, x, (size_t)1 << 30, 1, WEFT_FLOAT32,
            idx, w, 1 << 23, (1 << 23) * n, rx, ridx, rw, rcnt, 0, num, &h, st);
#undef BAD_ARG
    mp_check(ctx, h == NULL, "a handle was set by a failed call");
    weft_moe_handle_t h2 = NULL;
    int ok = enqueue_pair(g, &ref, &mb, cap, &h2);
    if (ok) {
        weft_status_t bad = weft_moe_combine(cm, h2, b[B_Y].ptr, NULL, st);
        mp_expect_status(ctx, bad, WEFT_ERR_INVALID_ARGUMENT, "weft_moe_combine: out",
                         "combine: out NULL with a token");
    }
    bufs_pull(g, &mb);
    gpu_sync(g, "moe dispatch and combine after the invalid arguments");
    if (ok)
        check_results(g, &ref, &mb, cap);
    bufs_check_guards(g, &mb);
    mp_ok(ctx, weft_moe_handle_destroy(h2), "weft_moe_handle_destroy");
    bufs_put(g, &mb);
    moe_ref_destroy(&ref);
}

/* ---------------------------------------------------------------------------------------------
 * Handles past their communicator
 * ------------------------------------------------------------------------------------------- */

/* Two checked dispatch and combine pairs on cudaMalloc buffers (which outlive the communicator),
 * then the communicator is destroyed with both handles alive. Destroying one right after, with
 * no communicator open, must succeed (the destruction detached it; before, this read the freed
 * communicator); the next communicator of the mode must refuse the other, in a combine and in a
 * reusing dispatch (WEFT_ERR_INVALID_ARGUMENT naming the handle's destroyed communicator), and
 * destroying it must succeed too. */
static void run_stale_handle(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks;
    moe_shape_t s = {
        .hidden = 7, .topk = 2, .experts = 2 * n, .route = MOE_ROUTE_UNIFORM, .dt = WEFT_FLOAT32};
    for (int r = 0; r < n; r++)
        s.tokens[r] = 5;
    mp_case(ctx, "moe handles of a destroyed communicator, reg=%s", mp_reg_name(reg));
    moe_ref_t ref;
    moe_ref_create(ctx, &s, &ref);
    size_t cap = ref.recv[ctx->rank] + CAP_SPARE;
    moe_bufs_t mb;
    bufs_get(g, NULL, GPU_BUF_CUDA, &ref, cap, cap, &mb);
    const gpu_buf_t *b = mb.b;
    push_inputs(g, &ref, &mb);
    weft_moe_handle_t h[2] = {NULL, NULL};
    int ok = enqueue_pair(g, &ref, &mb, cap, &h[0]) && enqueue_pair(g, &ref, &mb, cap, &h[1]);
    bufs_pull(g, &mb);
    gpu_sync(g, "two dispatch and combine pairs");
    if (ok)
        check_results(g, &ref, &mb, cap);
    mp_comm_close(ctx);
    mp_ok(ctx, weft_moe_handle_destroy(h[0]),
          "weft_moe_handle_destroy after weft_comm_destroy, no communicator open");
    gpu_comm_open(g, reg);
    static const char detached[] = "handle belongs to a destroyed communicator";
    if (h[1]) {
        weft_status_t st = weft_moe_combine(ctx->comm, h[1], b[B_Y].ptr, b[B_OUT].ptr, g->stream);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, detached,
                         "combine with a destroyed communicator's handle");
        weft_moe_handle_t again = h[1];
        st = weft_moe_dispatch(ctx->comm, b[B_X].ptr, s.tokens[ctx->rank], s.hidden, s.dt, NULL,
                               NULL, WEFT_MOE_REUSE, 0, b[B_RX].ptr, NULL, NULL, NULL, cap,
                               (int64_t *)b[B_NRECV].ptr, &again, g->stream);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, detached,
                         "reusing a destroyed communicator's handle");
        mp_check(ctx, again == h[1], "a refused reuse changed *handle");
    }
    mp_ok(ctx, weft_moe_handle_destroy(h[1]), "weft_moe_handle_destroy after weft_comm_destroy");
    gpu_sync(g, "the refused calls");
    bufs_put(g, &mb);
    moe_ref_destroy(&ref);
}

/* Handles destroyed on another thread while this one destroys their communicator (a garbage
 * collector's finalizer, say), with their pairs still queued on the stream: the CUDA handles free
 * device memory through the communicator (after a device synchronisation) unless its destruction
 * detached them first. Every destroy must succeed whichever comes first, the last pair must be
 * exact, and the next communicator of the mode must work (the final barrier of run_mode). */
static void run_destroy_race(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks;
    moe_shape_t s = {
        .hidden = 7, .topk = 2, .experts = 2 * n, .route = MOE_ROUTE_ZIPF, .dt = WEFT_BFLOAT16};
    for (int r = 0; r < n; r++)
        s.tokens[r] = 9;
    mp_case(ctx, "moe handles destroyed on a thread while the communicator is, reg=%s",
            mp_reg_name(reg));
    moe_ref_t ref;
    moe_ref_create(ctx, &s, &ref);
    size_t cap = ref.recv[ctx->rank] + CAP_SPARE;
    moe_bufs_t mb;
    bufs_get(g, NULL, GPU_BUF_CUDA, &ref, cap, cap, &mb);
    push_inputs(g, &ref, &mb);
    moe_race_t r;
    int ok = 1;
    for (int i = 0; i < MOE_RACE_HANDLES; i++) {
        r.h[i] = NULL;
        ok = ok && enqueue_pair(g, &ref, &mb, cap, &r.h[i]);
    }
    bufs_pull(g, &mb); /* still queued when the destroys start */
    moe_race_start(ctx, &r);
    mp_comm_close(ctx);
    moe_race_join(ctx, &r);
    gpu_sync(g, "the pairs before the destroys");
    if (ok)
        check_results(g, &ref, &mb, cap);
    bufs_put(g, &mb);
    moe_ref_destroy(&ref);
    gpu_comm_open(g, reg);
}

/* ---------------------------------------------------------------------------------------------
 * One registration mode
 * ------------------------------------------------------------------------------------------- */
static void run_mode(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    gpu_comm_open(g, reg);
    pool_t pool;
    pool_create(g, &pool);
    run_grid(g, &pool, reg);
    run_spread(g, &pool, reg);
    gpu_sync(g, "grid");
    pool_destroy(g, &pool);
    if (!ctx->quick)
        run_large(g, reg);
    /* A sanitizer that completes every launch before returning (compute-sanitizer) would run
     * the rejecting kernels behind the gate's host callback before the test can open it. */
    const char *san = getenv("GPU_TEST_SANITIZER");
    if (reg == WEFT_REGISTRATION_ROA && san && *san && strcmp(san, "0") != 0)
        printf("gpu_moe: rank %d: rejected dispatches skipped under a sanitizer "
               "(GPU_TEST_SANITIZER): their gate needs asynchronous launches\n",
               ctx->rank);
    else if (reg == WEFT_REGISTRATION_ROA)
        for (size_t i = 0; i < sizeof reject_cases / sizeof reject_cases[0]; i++)
            run_rejected(g, &reject_cases[i]);
    for (size_t i = 0; i < sizeof graph_cases / sizeof graph_cases[0]; i++)
        if (graph_cases[i].reg == reg)
            run_graph(g, &graph_cases[i]);
    if (reg == WEFT_REGISTRATION_ROA)
        run_invalid(g);
    run_stale_handle(g, reg);
    run_destroy_race(g, reg);
    /* A kernel failure would be reported by the next call: end the mode with one. */
    mp_case(ctx, "final barrier reg=%s", mp_reg_name(reg));
    mp_ok(ctx, weft_barrier(ctx->comm, g->stream), "weft_barrier");
    gpu_sync(g, "final barrier");
    mp_comm_close(ctx);
}

int main(void)
{
    gpu_ctx_t g;
    gpu_init(&g, "gpu_moe");
    if (g.mp.nranks > MOE_MAX_RANKS)
        mp_fatal(&g.mp, "gpu_moe runs with at most %d ranks", MOE_MAX_RANKS);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++)
        run_mode(&g, (weft_registration_t)reg);
    return gpu_finish(&g);
}
