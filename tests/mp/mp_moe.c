/*
 * mp_moe.c - weft_moe_dispatch, weft_moe_combine and weft_moe_handle_destroy on the host backend.
 *
 * Every rank regenerates every rank's routing from the shared seed and computes, without the
 * library, what it must receive and what combine must return: the reference model of moe_ref.h
 * (shared with tests/gpu/gpu_moe.c). The grid: tokens per rank T in {0, 1, 7, 300} (and one case
 * with a different T per rank), hidden H in {1, 7, 128}, topk in {1, 2, 8} (at most E), experts
 * E in {n, 8n}, and the four routings of the model (uniform, Zipf, all-to-one, masked), plus
 * two large cases per mode (T = 4096 with E = 32n and Zipf routing, bfloat16; H = 7168,
 * float16). Each case runs in float32, bfloat16 or float16 on weft_malloc or malloc buffers
 * (cycling over the grid, so that each buffer kind sees each dtype), under each registration
 * mode, with a capacity above the need (the rows past *num_recv_tokens must keep their poison),
 * or in every other case where no rank receives anything, max_recv_tokens 0 with NULL receive
 * arrays; inputs must be left unchanged; the stats must show the zero-copy path exactly when the
 * buffers peers read (x, then y) are weft_malloc memory outside the staged mode; one case in
 * eight sets max_recv_tokens one below the largest rank's need, which must fail with
 * WEFT_ERR_INVALID_ARGUMENT on every rank, naming the first such rank and its counts, and write
 * nothing. y has rows to spare, which must keep their poison; y and out are NULL where the API
 * lets them be. Then, per mode and dtype, a spread case (moe_ref.h: y whose float32 sum depends
 * on the order, and on rounding each step to 16 bits; from 3 ranks the case checks that it
 * does), and max_recv_tokens 0 with nothing received, every token masked, and tokens sent.
 *
 * After each successful case, the backward pass: a dispatch of new rows reusing the handle's
 * layout (WEFT_MOE_REUSE; the routing outputs asked for in every other case, else they must keep
 * their poison) and a combine of new y, checked against the model as the first.
 *
 * Finally the argument checks: each bad argument must give WEFT_ERR_INVALID_ARGUMENT naming the
 * call, and leave the communicator usable; combine with handles of different dispatches on
 * the ranks must give WEFT_ERR_MISMATCH on every rank; and a reuse with a wrong handle, shape or
 * capacity, or on some ranks only, must fail as documented and leave the handle usable. Last,
 * in each mode, handles kept past their communicator's destruction: destroying one then
 * succeeds, with or without a communicator open, and the next communicator refuses one
 * (WEFT_ERR_INVALID_ARGUMENT naming the handle's destroyed communicator), even where that one
 * reuses the old one's address; a handle passed to another live communicator (a second one
 * opened beside it), refused there both ways; and handles destroyed on a thread while the
 * communicator is.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "moe_ref.h"

#define CAP_SPARE 3 /* receive rows (and rows of y) beyond the need */

typedef struct moe_case {
    moe_shape_t shape;
    mp_buf_kind_t kind;
    int overflow;
    int zero_cap; /* max_recv_tokens 0 (and NULL receive arrays) where nothing is received */
} moe_case_t;

/* An array the API lets be NULL: NULL when the call passes none of it. */
static void *or_null(mp_buf_t *b, size_t count)
{
    return count > 0 ? b->ptr : NULL;
}

/* mp_check_path of a MoE call whose bytes may be 0 (no tokens or no received rows on this
 * rank): unlike a collective of count 0 it still takes part in the exchange, so it counts once
 * (and nothing the host backend lacks), but not as an inline operation. */
static void moe_check_path(mp_ctx_t *ctx, const weft_stats_t *s0, const weft_stats_t *s1,
                           mp_buf_kind_t kind, size_t bytes)
{
    if (bytes > 0) {
        mp_check_path(ctx, s0, s1, kind, bytes);
        return;
    }
    mp_check(ctx, s1->sm_blocks == s0->sm_blocks && s1->copy_engine_ops == s0->copy_engine_ops,
             "stats: the host backend counted sm_blocks +%" PRIu64 ", copy_engine_ops +%" PRIu64,
             s1->sm_blocks - s0->sm_blocks, s1->copy_engine_ops - s0->copy_engine_ops);
    mp_check_counted_once(ctx, s0, s1);
}

/* The backward pass: a dispatch of new rows reusing the layout of handle (the routing outputs
 * asked for in every other case), then a combine of new y with the same handle. */
static void run_reuse(mp_ctx_t *ctx, const moe_case_t *c, moe_ref_t *ref, weft_moe_handle_t handle,
                      mp_buf_t *x, mp_buf_t *rx, mp_buf_t *ridx, mp_buf_t *rw, mp_buf_t *rcnt,
                      mp_buf_t *y, mp_buf_t *out, size_t cap)
{
    const moe_shape_t *sh = &c->shape;
    size_t T = sh->tokens[ctx->rank];
    int routing = (int)(ctx->case_id % 2);
    ref->x_round++;
    moe_ref_fill_inputs(ref, x->ptr, NULL, NULL);
    mp_buf_poison(rx);
    mp_buf_poison(ridx);
    mp_buf_poison(rw);
    mp_buf_poison(rcnt);
    int64_t num_recv = -5;
    weft_moe_handle_t again = handle;
    weft_status_t st = weft_moe_dispatch(
        ctx->comm, x->ptr, T, sh->hidden, sh->dt, NULL, NULL, WEFT_MOE_REUSE, 0, or_null(rx, cap),
        routing ? (int64_t *)or_null(ridx, cap) : NULL, routing ? (float *)or_null(rw, cap) : NULL,
        routing ? (int64_t *)rcnt->ptr : NULL, cap, &num_recv, &again, NULL);
    if (!mp_ok(ctx, st, "weft_moe_dispatch reusing the layout"))
        return;
    mp_check(ctx, again == handle, "a reusing dispatch changed *handle");
    moe_ref_check_dispatch(ctx, ref, num_recv, rx->ptr, routing ? ridx->ptr : NULL,
                           routing ? rw->ptr : NULL, routing ? rcnt->ptr : NULL, cap);
    if (!routing) {
        mp_check_poison(ctx, "recv_topk_idx (not asked for)", ridx->ptr, ridx->bytes);
        mp_check_poison(ctx, "recv_topk_weights (not asked for)", rw->ptr, rw->bytes);
        mp_check_poison(ctx, "recv_expert_counts (not asked for)", rcnt->ptr, rcnt->bytes);
    }
    mp_buf_poison(y);
    moe_ref_fill_y(ref, y->ptr);
    mp_buf_poison(out);
    size_t need = ref->recv[ctx->rank], row = sh->hidden * mp_dtype_bytes(sh->dt);
    if (mp_ok(ctx, weft_moe_combine(ctx->comm, handle, or_null(y, need), or_null(out, T), NULL),
              "weft_moe_combine after the reuse")) {
        moe_ref_check_combine(ctx, ref, out->ptr);
        mp_check_poison(ctx, "y past the received rows", y->ptr + need * row,
                        y->bytes - need * row);
    }
}

static void run_case(mp_ctx_t *ctx, const moe_case_t *c)
{
    const moe_shape_t *sh = &c->shape;
    int me = ctx->rank, k = sh->topk, epr = sh->experts / ctx->nranks;
    size_t T = sh->tokens[me], H = sh->hidden, es = mp_dtype_bytes(sh->dt);
    mp_case(ctx, "moe T=%zu H=%zu k=%d E=%d %s %s %s%s%s", T, H, k, sh->experts,
            moe_route_name(sh->route), mp_dtype_name(sh->dt), mp_buf_kind_name(c->kind),
            c->overflow ? " overflow" : "", sh->spread ? " spread" : "");
    moe_ref_t ref;
    moe_ref_create(ctx, sh, &ref);
    size_t need = ref.recv[me];
    int overflow = c->overflow && ref.most > 0;
    size_t cap = overflow ? ref.most - 1 : ref.most == 0 && c->zero_cap ? 0 : ref.most + CAP_SPARE;
    if (sh->spread && ctx->nranks >= 3) {
        /* The values must tell the right combine from one that sums in another order or
         * rounds each step to 16 bits (moe_ref.h), or the case proves nothing about them. */
        size_t reversed, stepwise;
        moe_ref_spread_misses(&ref, &reversed, &stepwise);
        mp_check(ctx, reversed > 0 && (stepwise > 0 || sh->dt == WEFT_FLOAT32),
                 "spread values: a reversed sum misses %zu and a stepwise one %zu of %zu outputs: "
                 "the case cannot tell them from the right sum",
                 reversed, stepwise, T * H);
    }

    mp_buf_t x, idx, w, rx, ridx, rw, rcnt;
    mp_buf_alloc(ctx, &x, c->kind, T * H * es);
    mp_buf_alloc(ctx, &idx, c->kind, T * (size_t)k * 8);
    mp_buf_alloc(ctx, &w, c->kind, T * (size_t)k * 4);
    mp_buf_alloc(ctx, &rx, c->kind, cap * H * es);
    mp_buf_alloc(ctx, &ridx, c->kind, cap * (size_t)k * 8);
    mp_buf_alloc(ctx, &rw, c->kind, cap * (size_t)k * 4);
    mp_buf_alloc(ctx, &rcnt, c->kind, (size_t)epr * 8);
    moe_ref_fill_inputs(&ref, x.ptr, idx.ptr, w.ptr);
    int64_t num_recv = -5;
    weft_moe_handle_t handle = NULL;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_moe_dispatch(ctx->comm, x.ptr, T, H, sh->dt, (const int64_t *)idx.ptr,
                                         (const float *)w.ptr, k, sh->experts, or_null(&rx, cap),
                                         (int64_t *)or_null(&ridx, cap), (float *)or_null(&rw, cap),
                                         (int64_t *)rcnt.ptr, cap, &num_recv, &handle, NULL);
    if (overflow) {
        /* Every rank names the argument and the first rank that overflows, with its counts. */
        char want[160];
        snprintf(want, sizeof want,
                 "weft_moe_dispatch: max_recv_tokens: rank %d would receive %zu tokens, more than "
                 "its max_recv_tokens (%zu)",
                 ref.most_rank, ref.most, cap);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want, "overflow");
        mp_check(ctx, num_recv == -5 && handle == NULL, "outputs set on failure");
        mp_check_poison(ctx, "recv_x", rx.ptr, rx.bytes);
        mp_check_poison(ctx, "recv_topk_idx", ridx.ptr, ridx.bytes);
        mp_check_poison(ctx, "recv_topk_weights", rw.ptr, rw.bytes);
        mp_check_poison(ctx, "recv_expert_counts", rcnt.ptr, rcnt.bytes);
    } else if (mp_ok(ctx, st, "weft_moe_dispatch")) {
        mp_stats(ctx, &s1);
        moe_check_path(ctx, &s0, &s1, c->kind, T * H * es);
        moe_ref_check_dispatch(ctx, &ref, num_recv, rx.ptr, ridx.ptr, rw.ptr, rcnt.ptr, cap);
        moe_ref_check_inputs(ctx, &ref, x.ptr, idx.ptr, w.ptr);

        /* Combine: out[t] = the sum over receiving ranks d of y_d[t] (moe_ref.h). y has rows
         * to spare, poisoned: combine must neither write them nor read them into out. */
        mp_buf_t y, out;
        mp_buf_alloc(ctx, &y, c->kind, (need + CAP_SPARE) * H * es);
        moe_ref_fill_y(&ref, y.ptr);
        mp_buf_alloc(ctx, &out, c->kind, T * H * es);
        mp_stats(ctx, &s0);
        st = weft_moe_combine(ctx->comm, handle, or_null(&y, need), or_null(&out, T), NULL);
        if (mp_ok(ctx, st, "weft_moe_combine")) {
            mp_stats(ctx, &s1);
            moe_check_path(ctx, &s0, &s1, c->kind, need * H * es);
            moe_ref_check_combine(ctx, &ref, out.ptr);
            mp_check_poison(ctx, "y past the received rows", y.ptr + need * H * es,
                            CAP_SPARE * H * es);
        }
        run_reuse(ctx, c, &ref, handle, &x, &rx, &ridx, &rw, &rcnt, &y, &out, cap);
        mp_ok(ctx, weft_moe_handle_destroy(handle), "weft_moe_handle_destroy");
        mp_buf_free(ctx, &out, "out");
        mp_buf_free(ctx, &y, "y");
    }
    mp_buf_free(ctx, &rcnt, "recv_expert_counts");
    mp_buf_free(ctx, &rw, "recv_topk_weights");
    mp_buf_free(ctx, &ridx, "recv_topk_idx");
    mp_buf_free(ctx, &rx, "recv_x");
    mp_buf_free(ctx, &w, "topk_weights");
    mp_buf_free(ctx, &idx, "topk_idx");
    mp_buf_free(ctx, &x, "x");
    moe_ref_destroy(&ref);
}

/* max_recv_tokens 0, with the receive arrays NULL (the API lets them be): with no tokens
 * anywhere (x, the routing and out NULL too), and with every token masked, the dispatch succeeds
 * receiving nothing (counts zero) and combine gives zeros; with one token to rank 0 on every
 * rank, every rank gets WEFT_ERR_INVALID_ARGUMENT naming rank 0's need and capacity 0. */
static void run_zero_capacity(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe max_recv_tokens 0");
    enum { T = 3, H = 2 };
    float x[T * H] = {1, 2, 3, 4, 5, 6}, w[T] = {1, 1, 1}, out[T * H];
    int64_t masked[T] = {-1, -1, -1}, to_first[T] = {0, -1, -1}, rcnt[2] = {-5, -5}, num = -5;
    weft_moe_handle_t h = NULL;
    weft_comm_t cm = ctx->comm;
    for (int tokens = 0; tokens <= T; tokens += T) {
        num = -5;
        rcnt[0] = rcnt[1] = -5;
        weft_status_t st = weft_moe_dispatch(cm, tokens ? x : NULL, (size_t)tokens, H, WEFT_FLOAT16,
                                             tokens ? masked : NULL, tokens ? w : NULL, 1, 2 * n,
                                             NULL, NULL, NULL, rcnt, 0, &num, &h, NULL);
        if (!mp_ok(ctx, st,
                   tokens ? "weft_moe_dispatch, every token masked, max_recv_tokens 0"
                          : "weft_moe_dispatch, no tokens, max_recv_tokens 0"))
            continue;
        mp_check(ctx, num == 0 && rcnt[0] == 0 && rcnt[1] == 0,
                 "max_recv_tokens 0: num_recv_tokens %lld, recv_expert_counts {%lld, %lld}",
                 (long long)num, (long long)rcnt[0], (long long)rcnt[1]);
        memset(out, 0xA5, sizeof out);
        if (mp_ok(ctx, weft_moe_combine(cm, h, NULL, tokens ? out : NULL, NULL),
                  "weft_moe_combine with y NULL, nothing received")) {
            size_t nonzero = 0;
            for (size_t i = 0; i < (size_t)tokens * H; i++) /* float16 elements */
                nonzero += ((const uint16_t *)out)[i] != 0;
            mp_check(ctx, nonzero == 0, "combine of masked tokens: %zu elements not zero", nonzero);
        }
        mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
        h = NULL;
    }
    char want[160];
    snprintf(want, sizeof want,
             "weft_moe_dispatch: max_recv_tokens: rank 0 would receive %d tokens, more than its "
             "max_recv_tokens (0)",
             n);
    num = -5;
    weft_status_t st = weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT16, to_first, w, 1, 2 * n, NULL,
                                         NULL, NULL, rcnt, 0, &num, &h, NULL);
    mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want, "max_recv_tokens 0, tokens sent");
    mp_check(ctx, h == NULL && num == -5, "a rejected dispatch set *handle or *num_recv_tokens");
    mp_ok(ctx, weft_barrier(cm, NULL), "weft_barrier after the rejection");
}

/* Bad arguments: rejected on every rank before any communication. */
static void run_invalid(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe invalid arguments");
    float x[4] = {1, 2, 3, 4}, w[2] = {1, 1}, rx[64], rw[64], y[4];
    int64_t idx[2] = {0, 0}, ridx[64], rcnt[64], num;
    int64_t bad_idx[2] = {0, (int64_t)n};
    weft_moe_handle_t h = NULL;
    weft_comm_t cm = ctx->comm;
#define BAD_DISPATCH(what, ...)                                                                    \
    mp_expect_status(ctx, weft_moe_dispatch(__VA_ARGS__), WEFT_ERR_INVALID_ARGUMENT,               \
                     "weft_moe_dispatch", what)
    BAD_DISPATCH("comm NULL", NULL, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8,
                 &num, &h, NULL);
    BAD_DISPATCH("x NULL", cm, NULL, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8, &num,
                 &h, NULL);
    BAD_DISPATCH("topk_idx NULL", cm, x, 1, 2, WEFT_FLOAT32, NULL, w, 2, n, rx, ridx, rw, rcnt, 8,
                 &num, &h, NULL);
    BAD_DISPATCH("recv_x NULL", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, NULL, ridx, rw, rcnt, 8,
                 &num, &h, NULL);
    BAD_DISPATCH("handle NULL", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8,
                 &num, NULL, NULL);
    BAD_DISPATCH("topk 0", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 0, n, rx, ridx, rw, rcnt, 8, &num, &h,
                 NULL);
    BAD_DISPATCH("num_experts not a multiple of n", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 1,
                 n > 1 ? 2 * n + 1 : 0, rx, ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_DISPATCH("expert id out of range", cm, x, 1, 2, WEFT_FLOAT32, bad_idx, w, 2, n, rx, ridx,
                 rw, rcnt, 8, &num, &h, NULL);
    BAD_DISPATCH("dtype int32", cm, x, 1, 2, WEFT_INT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8, &num,
                 &h, NULL);
    BAD_DISPATCH("hidden 0", cm, x, 1, 0, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8, &num,
                 &h, NULL);
    const int64_t *idx_off = (const int64_t *)((const char *)idx + 4);
    BAD_DISPATCH("topk_idx misaligned", cm, x, 1, 2, WEFT_FLOAT32, idx_off, w, 2, n, rx, ridx, rw,
                 rcnt, 8, &num, &h, NULL);
    BAD_DISPATCH("recv_x misaligned", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, (char *)rx + 2, ridx,
                 rw, rcnt, 8, &num, &h, NULL);
    BAD_DISPATCH("recv_x is x", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, x, ridx, rw, rcnt, 1, &num,
                 &h, NULL);
    BAD_DISPATCH("recv_topk_idx overlaps topk_idx", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx,
                 idx, rw, rcnt, 8, &num, &h, NULL);
    BAD_DISPATCH("stream not NULL", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8,
                 &num, &h, (void *)x);
#undef BAD_DISPATCH
    /* The argument named first in the message ("call: argument ..."). */
#define BAD_ARG(what, named, ...)                                                                  \
    mp_expect_status(ctx, weft_moe_dispatch(__VA_ARGS__), WEFT_ERR_INVALID_ARGUMENT,               \
                     "weft_moe_dispatch: " named, what)
    BAD_ARG("topk -1", "topk", cm, x, 1, 2, WEFT_FLOAT32, idx, w, -1, 2 * n, rx, ridx, rw, rcnt, 8,
            &num, &h, NULL);
    BAD_ARG("topk > num_experts", "topk", cm, x, 1, 2, WEFT_FLOAT32, idx, w, n + 1, n, rx, ridx, rw,
            rcnt, 8, &num, &h, NULL);
    BAD_ARG("recv_topk_idx NULL", "recv_topk_idx", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, 2 * n, rx,
            NULL, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("recv_topk_weights NULL", "recv_topk_weights", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2,
            2 * n, rx, ridx, NULL, rcnt, 8, &num, &h, NULL);
    BAD_ARG("recv_expert_counts NULL", "recv_expert_counts", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2,
            2 * n, rx, ridx, rw, NULL, 8, &num, &h, NULL);
    BAD_ARG("num_recv_tokens NULL", "num_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, 2 * n,
            rx, ridx, rw, rcnt, 8, NULL, &h, NULL);
    /* Sizes past what a process can address (2^56 bytes, as the collectives), not only past
     * SIZE_MAX; the arrays are small, so a size that got through would be read or written far
     * out of bounds. */
    const size_t limit = (size_t)1 << 56;
    BAD_ARG("num_tokens SIZE_MAX", "num_tokens", cm, x, SIZE_MAX, 2, WEFT_FLOAT32, idx, w, 2, 2 * n,
            rx, ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("x past 2^56 bytes", "num_tokens", cm, x, limit / 8 + 1, 2, WEFT_FLOAT32, idx, w, 2,
            2 * n, rx, ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("hidden SIZE_MAX", "hidden", cm, x, 1, SIZE_MAX, WEFT_FLOAT32, idx, w, 2, 2 * n, rx,
            ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("a row past 2^56 bytes", "hidden", cm, x, 1, limit / 2 + 1, WEFT_BFLOAT16, idx, w, 2,
            2 * n, rx, ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("topk_idx past 2^56 bytes", "num_tokens", cm, x, limit / 16 + 1, 1, WEFT_FLOAT32, idx,
            w, 2, 2 * n, rx, ridx, rw, rcnt, 8, &num, &h, NULL);
    BAD_ARG("max_recv_tokens SIZE_MAX", "max_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2,
            2 * n, rx, ridx, rw, rcnt, SIZE_MAX, &num, &h, NULL);
    BAD_ARG("recv_x past 2^56 bytes", "max_recv_tokens", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2,
            2 * n, rx, ridx, rw, rcnt, limit / 8 + 1, &num, &h, NULL);
    BAD_ARG("recv_topk_idx past 2^56 bytes", "max_recv_tokens", cm, x, 1, 1, WEFT_FLOAT32, idx, w,
            2, 2 * n, rx, ridx, rw, rcnt, limit / 16 + 1, &num, &h, NULL);
    /* Every array within the limit (topk_idx exactly 2^56 bytes), but not the layout the
     * dispatch builds from them: per destination, 8 + 12 topk bytes a token. */
    BAD_ARG("layout past 2^56 bytes", "num_tokens", cm, x, (size_t)1 << 30, 1, WEFT_FLOAT32, idx, w,
            1 << 23, (1 << 23) * n, rx, ridx, rw, rcnt, 8, &num, &h, NULL);
#undef BAD_ARG
    mp_expect_status(ctx, weft_moe_combine(cm, NULL, y, x, NULL), WEFT_ERR_INVALID_ARGUMENT,
                     "weft_moe_combine", "combine handle NULL");
    mp_check(ctx, h == NULL, "a handle was set by a failed call");
    mp_ok(ctx, weft_moe_handle_destroy(NULL), "weft_moe_handle_destroy(NULL)");

    /* Combine's NULL arrays: every rank keeps its token (expert `rank`), so each has a row of y
     * and of out. */
    int64_t mine[1] = {ctx->rank};
    if (!mp_ok(ctx,
               weft_moe_dispatch(cm, x, 1, 2, WEFT_FLOAT32, mine, w, 1, n, rx, ridx, rw, rcnt, 1,
                                 &num, &h, NULL),
               "weft_moe_dispatch"))
        return;
    mp_expect_status(ctx, weft_moe_combine(cm, h, NULL, y, NULL), WEFT_ERR_INVALID_ARGUMENT,
                     "weft_moe_combine: y", "combine: y NULL with a received row");
    mp_expect_status(ctx, weft_moe_combine(cm, h, rx, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
                     "weft_moe_combine: out", "combine: out NULL with a token");
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
}

/* Combine with handles of different dispatches (n >= 2): rank 0 passes the handle of a dispatch
 * that sent everything to rank 0, the others that of one that sent everything to rank n - 1. The
 * block lengths disagree, so every rank must get WEFT_ERR_MISMATCH, and the communicator must
 * stay usable. */
static void run_handle_mismatch(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    if (n < 2)
        return;
    mp_case(ctx, "moe combine with mismatched handles");
    enum { T = 4, H = 2 };
    float x[T * H], w[T], y[64 * T * H], out[T * H], rx[64 * T * H], rw[64 * T];
    int64_t to_first[T], to_last[T], ridx[64 * T], rcnt[1], num[2];
    for (int t = 0; t < T; t++) {
        to_first[t] = 0;
        to_last[t] = n - 1;
        w[t] = 1.0f;
        x[2 * t] = x[2 * t + 1] = (float)t;
    }
    for (size_t i = 0; i < sizeof y / sizeof y[0]; i++)
        y[i] = 1.0f;
    weft_moe_handle_t h[2] = {NULL, NULL};
    size_t cap = (size_t)n * T;
    for (int i = 0; i < 2; i++)
        mp_ok(ctx,
              weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, i ? to_last : to_first, w, 1, n,
                                rx, ridx, rw, rcnt, cap, &num[i], &h[i], NULL),
              "weft_moe_dispatch");
    if (h[0] && h[1]) {
        weft_status_t st = weft_moe_combine(ctx->comm, h[ctx->rank == 0 ? 0 : 1], y, out, NULL);
        mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_combine", "mismatched handles");
        mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier after the mismatch");
    }
    mp_ok(ctx, weft_moe_handle_destroy(h[1]), "weft_moe_handle_destroy after the mismatch");
    mp_ok(ctx, weft_moe_handle_destroy(h[0]), "weft_moe_handle_destroy after the mismatch");
}

/* Ranks that disagree on num_experts (rank 0 has n experts, the others 2n) or on topk must all
 * get WEFT_ERR_MISMATCH before anything moves (a receiver would index its expert counts with the
 * sender's numbering), and the communicator must stay usable. */
static void run_routing_mismatch(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    if (n < 2)
        return;
    mp_case(ctx, "moe dispatch with ranks disagreeing on num_experts or topk");
    enum { T = 2, H = 2, K = 2 };
    float x[T * H] = {1, 2, 3, 4}, w[T * K] = {1, 1, 1, 1}, rx[64 * T * H], rw[64 * T * K];
    int64_t idx[T * K] = {0, 1, 1, 0}, ridx[64 * T * K], rcnt[2 * 64], num = -5;
    weft_moe_handle_t h = NULL;
    weft_comm_t cm = ctx->comm;
    size_t cap = (size_t)n * T;
    int experts = ctx->rank == 0 ? n : 2 * n;
    weft_status_t st = weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, idx, w, K, experts, rx, ridx,
                                         rw, rcnt, cap, &num, &h, NULL);
    mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_dispatch", "num_experts differs");
    int topk = ctx->rank == 0 ? 1 : K;
    st = weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, idx, w, topk, 2 * n, rx, ridx, rw, rcnt, cap,
                           &num, &h, NULL);
    mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_dispatch", "topk differs");
    mp_check(ctx, h == NULL && num == -5,
             "a mismatched dispatch wrote *handle or *num_recv_tokens");
    mp_ok(ctx, weft_barrier(cm, NULL), "weft_barrier after the mismatches");
}

/* A combine whose out overlaps its y (every rank receives a token from every rank, so y has rows
 * everywhere) is rejected on every rank; a correct combine follows. */
static void run_combine_overlap(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe combine with out overlapping y");
    enum { H = 2, MAXN = 64 };
    if (n > MAXN)
        return;
    float x[MAXN * H], w[MAXN], y[MAXN * H], rw[MAXN], out[MAXN * H];
    int64_t idx[MAXN], ridx[MAXN], rcnt[1], num = -5;
    for (int t = 0; t < n; t++) {
        idx[t] = t; /* token t to expert t, on rank t */
        w[t] = 1.0f;
        x[H * t] = x[H * t + 1] = (float)(ctx->rank * n + t);
    }
    weft_comm_t cm = ctx->comm;
    weft_moe_handle_t h = NULL;
    if (!mp_ok(ctx,
               weft_moe_dispatch(cm, x, (size_t)n, H, WEFT_FLOAT32, idx, w, 1, n, y, ridx, rw, rcnt,
                                 (size_t)n, &num, &h, NULL),
               "weft_moe_dispatch"))
        return;
    mp_expect_status(ctx, weft_moe_combine(cm, h, y, y + 1, NULL), WEFT_ERR_INVALID_ARGUMENT,
                     "weft_moe_combine", "combine: out overlaps y");
    if (mp_ok(ctx, weft_moe_combine(cm, h, y, out, NULL), "weft_moe_combine after the rejection")) {
        size_t bad = 0;
        for (int t = 0; t < n * H; t++)
            bad += out[t] != (float)(ctx->rank * n + t / H);
        mp_check(ctx, bad == 0, "combine after the rejection: %zu of %d values wrong", bad, n * H);
    }
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
}

/* Ranks reusing handles of different dispatches whose token counts per pair agree (dispatch A
 * sends every rank's token 0 to rank 0, dispatch B its token 1): rank 0 reuses A's handle, the
 * others B's. Nothing but the dispatch tells them apart, so every rank must get
 * WEFT_ERR_MISMATCH (rank 0 would pull token 0 from peers that send token 1, or read past a peer's
 * rows), then the same for a combine, and the communicator must stay usable. */
static void run_reuse_other_dispatch(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    if (n < 2)
        return;
    mp_case(ctx, "moe reuse and combine with handles of different dispatches, equal counts");
    enum { T = 2, H = 2 };
    float x[T * H] = {1, 2, 3, 4}, w[T] = {1, 1}, rx[64 * H], rw[64], y[64 * H] = {0}, out[T * H];
    int64_t a[T] = {0, -1}, b[T] = {-1, 0}, ridx[64], rcnt[1], num = -5;
    weft_moe_handle_t h[2] = {NULL, NULL};
    size_t cap = (size_t)n;
    for (int i = 0; i < 2; i++)
        mp_ok(ctx,
              weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, i ? b : a, w, 1, n, rx, ridx, rw,
                                rcnt, cap, &num, &h[i], NULL),
              "weft_moe_dispatch");
    if (h[0] && h[1]) {
        weft_moe_handle_t mine = h[ctx->rank == 0 ? 0 : 1];
        weft_status_t st =
            weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
                              NULL, NULL, NULL, cap, &num, &mine, NULL);
        mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_dispatch",
                         "reuse of another dispatch's handle");
        st = weft_moe_combine(ctx->comm, mine, y, out, NULL);
        mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "weft_moe_combine",
                         "combine with another dispatch's handle");
        mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier after the mismatches");
    }
    mp_ok(ctx, weft_moe_handle_destroy(h[1]), "weft_moe_handle_destroy after the mismatches");
    mp_ok(ctx, weft_moe_handle_destroy(h[0]), "weft_moe_handle_destroy after the mismatches");
}

/* An expert id out of range on the last rank only: every rank gets WEFT_ERR_INVALID_ARGUMENT
 * naming topk_idx and the last rank (the others from the verdict: they must not wait for the
 * last rank until their timeout), no handle is set, and the communicator stays usable. Then
 * the same with max_recv_tokens 0 on every rank besides (every other rank routes its token to
 * rank 0, which overflows if n > 1): the expert id is named everywhere, as on the CUDA backend. */
static void run_bad_expert_one_rank(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe dispatch with an expert id out of range on the last rank only");
    float x[2] = {1, 2}, w[1] = {1}, rx[64 * 2], rw[64];
    int64_t idx[1] = {ctx->rank == n - 1 ? (int64_t)n : 0}, ridx[64], rcnt[1], num = -5;
    char want[160];
    snprintf(want, sizeof want,
             "weft_moe_dispatch: topk_idx: rank %d's topk_idx[0] = %d is neither -1 nor an expert "
             "in [0, %d)",
             n - 1, n, n);
    for (int tight = 0; tight < 2; tight++) {
        weft_moe_handle_t h = NULL;
        double t0 = mp_now_s();
        weft_status_t st = weft_moe_dispatch(ctx->comm, x, 1, 2, WEFT_FLOAT32, idx, w, 1, n, rx,
                                             ridx, rw, rcnt, tight ? 0 : (size_t)n, &num, &h, NULL);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want,
                         tight ? "expert id n on the last rank, max_recv_tokens 0"
                               : "expert id n on the last rank");
        mp_check(ctx, h == NULL && num == -5,
                 "a rejected dispatch set *handle or *num_recv_tokens");
        mp_check(ctx, mp_now_s() - t0 < 5.0, "the rejection took %.1f s", mp_now_s() - t0);
        mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier after the rejection");
    }
}

/* Reusing a layout wrongly: a missing handle or one of another shape is rejected locally; ranks
 * that disagree on reusing get WEFT_ERR_MISMATCH, and a capacity below the layout's need
 * WEFT_ERR_INVALID_ARGUMENT, on every rank; the handle stays usable after each. Last, a combine
 * with y or out not aligned to its elements is rejected. */
static void run_reuse_errors(mp_ctx_t *ctx)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe layout reuse errors");
    enum { T = 4, H = 2 };
    float x[T * H], w[T], rx[64 * T * H], rw[64 * T];
    int64_t to_first[T], ridx[64 * T], rcnt[2], num = -5;
    for (int t = 0; t < T; t++) {
        to_first[t] = 0;
        w[t] = 1.0f;
        x[2 * t] = x[2 * t + 1] = (float)(ctx->rank * T + t);
    }
    size_t cap = (size_t)n * T;
    weft_comm_t cm = ctx->comm;
    weft_moe_handle_t h = NULL, none = NULL;
    if (!mp_ok(ctx,
               weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, to_first, w, 1, n, rx, ridx, rw, rcnt,
                                 cap, &num, &h, NULL),
               "weft_moe_dispatch"))
        return;
#define BAD_REUSE(what, ...)                                                                       \
    mp_expect_status(ctx, weft_moe_dispatch(__VA_ARGS__), WEFT_ERR_INVALID_ARGUMENT,               \
                     "weft_moe_dispatch", what)
    BAD_REUSE("reuse: handle NULL", cm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
              NULL, NULL, NULL, cap, &num, NULL, NULL);
    BAD_REUSE("reuse: *handle NULL", cm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
              NULL, NULL, NULL, cap, &num, &none, NULL);
    BAD_REUSE("reuse: other num_tokens", cm, x, T - 1, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE,
              0, rx, NULL, NULL, NULL, cap, &num, &h, NULL);
    BAD_REUSE("reuse: other hidden", cm, x, T, H + 1, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0,
              rx, NULL, NULL, NULL, cap, &num, &h, NULL);
    BAD_REUSE("reuse: other dtype", cm, x, T, H, WEFT_BFLOAT16, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
              NULL, NULL, NULL, cap, &num, &h, NULL);
    BAD_REUSE("reuse: x NULL", cm, NULL, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
              NULL, NULL, NULL, cap, &num, &h, NULL);
    /* A reuse writes the routing outputs it is given: they are checked as a dispatch's. */
    BAD_REUSE("reuse: recv_topk_idx overlaps recv_x", cm, x, T, H, WEFT_FLOAT32, NULL, NULL,
              WEFT_MOE_REUSE, 0, rx, (int64_t *)rx, NULL, NULL, cap, &num, &h, NULL);
    BAD_REUSE("reuse: recv_expert_counts misaligned", cm, x, T, H, WEFT_FLOAT32, NULL, NULL,
              WEFT_MOE_REUSE, 0, rx, NULL, NULL, (int64_t *)((char *)rcnt + 4), cap, &num, &h,
              NULL);
#undef BAD_REUSE
    mp_check(ctx, none == NULL && num == n * (ctx->rank == 0) * T,
             "a failed reuse wrote *handle or *num_recv_tokens");
    weft_moe_handle_t keep = h;
    /* Rank 0 receives n * T rows: one less capacity there fails every rank. */
    weft_status_t st = weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0,
                                         rx, NULL, NULL, NULL, cap - 1, &num, &h, NULL);
    char want[160];
    snprintf(want, sizeof want,
             "weft_moe_dispatch: max_recv_tokens: rank 0 would receive %zu tokens, more than its "
             "max_recv_tokens (%zu)",
             cap, cap - 1);
    mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, want, "reuse: overflow");
    if (n >= 2) { /* rank 0 reuses, the others dispatch afresh */
        st = ctx->rank == 0
                 ? weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx,
                                     NULL, NULL, NULL, cap, &num, &h, NULL)
                 : weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, to_first, w, 1, n, rx, ridx, rw,
                                     rcnt, cap, &num, &none, NULL);
        mp_expect_status(ctx, st, WEFT_ERR_MISMATCH, "disagree on WEFT_MOE_REUSE",
                         "reuse on one rank only");
        mp_check(ctx, none == NULL, "a mismatched dispatch set a handle");
    }
    mp_check(ctx, h == keep, "a failed reuse changed *handle");
    /* Still usable: a reuse that fits moves rank r's rows to rank 0. */
    num = -5;
    st = weft_moe_dispatch(cm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE, 0, rx, NULL, NULL,
                           NULL, cap, &num, &h, NULL);
    if (mp_ok(ctx, st, "weft_moe_dispatch reusing after the errors") && ctx->rank == 0) {
        size_t bad = 0;
        for (size_t i = 0; i < (size_t)n * T * H; i++)
            bad += rx[i] != (float)(i / H);
        mp_check(ctx, num == n * T && bad == 0, "reuse after errors: %lld rows, %zu wrong",
                 (long long)num, bad);
    }
    mp_expect_status(ctx, weft_moe_combine(cm, h, (char *)rx + 2, x, NULL),
                     WEFT_ERR_INVALID_ARGUMENT, "weft_moe_combine", "combine: y misaligned");
    mp_expect_status(ctx, weft_moe_combine(cm, h, rx, (char *)x + 2, NULL),
                     WEFT_ERR_INVALID_ARGUMENT, "weft_moe_combine", "combine: out misaligned");
    mp_ok(ctx, weft_moe_handle_destroy(h), "weft_moe_handle_destroy");
}

/* Handles kept past their communicator's destruction (weft.h: handles may be destroyed before or
 * after it): the destruction detaches them. One is destroyed at once, with no communicator open;
 * the other is passed to the next communicator of the same mode, which refuses it
 * (WEFT_ERR_INVALID_ARGUMENT, naming the handle and its destroyed communicator), even where
 * malloc gave the new communicator the old one's address, and is destroyed after. */
static void run_stale_handle(mp_ctx_t *ctx, weft_registration_t reg)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe handle of a destroyed communicator, reg=%s", mp_reg_name(reg));
    enum { T = 2, H = 2 };
    float x[T * H] = {1, 2, 3, 4}, w[T] = {1, 1}, rx[64 * T * H], rw[64 * T], out[T * H];
    int64_t to_first[T] = {0, 0}, ridx[64 * T], rcnt[1], num = -5;
    weft_moe_handle_t h[2] = {NULL, NULL};
    void *old_comm = ctx->comm;
    for (int i = 0; i < 2; i++)
        mp_ok(ctx,
              weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, to_first, w, 1, n, rx, ridx, rw,
                                rcnt, (size_t)n * T, &num, &h[i], NULL),
              "weft_moe_dispatch");
    mp_comm_close(ctx);
    mp_ok(ctx, weft_moe_handle_destroy(h[0]),
          "weft_moe_handle_destroy after weft_comm_destroy, no communicator open");
    mp_comm_open(ctx, reg);
    printf("rank %d: the new communicator %s the old one's address\n", ctx->rank,
           (void *)ctx->comm == old_comm ? "reuses" : "does not reuse");
    static const char detached[] = "handle belongs to a destroyed communicator";
    mp_expect_status(ctx, weft_moe_combine(ctx->comm, h[1], rx, out, NULL),
                     WEFT_ERR_INVALID_ARGUMENT, detached, "a destroyed communicator's handle");
    mp_expect_status(ctx,
                     weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE,
                                       0, rx, NULL, NULL, NULL, (size_t)n * T, &num, &h[1], NULL),
                     WEFT_ERR_INVALID_ARGUMENT, detached,
                     "reusing a destroyed communicator's handle");
    mp_ok(ctx, weft_moe_handle_destroy(h[1]), "weft_moe_handle_destroy after weft_comm_destroy");
    mp_ok(ctx, weft_barrier(ctx->comm, NULL), "weft_barrier after the refusals");
}

/* A handle passed to another live communicator (weft.h: combine must use the dispatch's): a
 * second communicator of the same mode is opened on every rank (weft_comm_init is collective:
 * after ctx->comm, in the same order everywhere); a combine and a reuse there of a handle from a
 * dispatch on ctx->comm, and the other way round, must each give WEFT_ERR_INVALID_ARGUMENT naming
 * the call and the handle, on every rank, before any communication; both communicators and both
 * handles stay usable (a combine of each on its own communicator, checked). */
static void run_other_comm_handle(mp_ctx_t *ctx, weft_registration_t reg)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe handle passed to another live communicator, reg=%s", mp_reg_name(reg));
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    cfg.registration = reg;
    weft_comm_t other = NULL;
    weft_status_t st = weft_comm_init(&other, &cfg);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_comm_init of a second communicator returned %s: %s",
                 weft_status_string(st), weft_last_error());
    enum { T = 2, H = 2 };
    float x[T * H] = {1, 2, 3, 4}, w[T] = {1, 1}, rx[64 * T * H], rw[64 * T], out[T * H];
    int64_t to_first[T] = {0, 0}, ridx[64 * T], rcnt[1], num = -5;
    weft_comm_t comms[2] = {ctx->comm, other};
    weft_moe_handle_t h[2] = {NULL, NULL}; /* h[i] from a dispatch on comms[i] */
    size_t cap = (size_t)n * T;
    for (int i = 0; i < 2; i++)
        mp_ok(ctx,
              weft_moe_dispatch(comms[i], x, T, H, WEFT_FLOAT32, to_first, w, 1, n, rx, ridx, rw,
                                rcnt, cap, &num, &h[i], NULL),
              "weft_moe_dispatch");
    for (int i = 0; i < 2 && h[0] && h[1]; i++) {
        weft_comm_t wrong = comms[1 - i];
        weft_moe_handle_t keep = h[i];
        mp_expect_status(ctx, weft_moe_combine(wrong, h[i], rx, out, NULL),
                         WEFT_ERR_INVALID_ARGUMENT,
                         "weft_moe_combine: handle comes from a dispatch on another communicator",
                         i ? "combine on the first communicator of the second's handle"
                           : "combine on the second communicator of the first's handle");
        num = -5;
        mp_expect_status(ctx,
                         weft_moe_dispatch(wrong, x, T, H, WEFT_FLOAT32, NULL, NULL, WEFT_MOE_REUSE,
                                           0, rx, NULL, NULL, NULL, cap, &num, &h[i], NULL),
                         WEFT_ERR_INVALID_ARGUMENT,
                         "weft_moe_dispatch: *handle comes from a dispatch on another communicator",
                         i ? "reuse on the first communicator of the second's handle"
                           : "reuse on the second communicator of the first's handle");
        mp_check(ctx, h[i] == keep && num == -5,
                 "a rejected reuse wrote *handle or *num_recv_tokens");
    }
    /* Each handle still combines on its own communicator: rank 0 received every rank's rows
     * (rx, in rank order), so every token's out row is its own x row. */
    for (int i = 0; i < 2 && h[0] && h[1]; i++) {
        memset(out, 0xA5, sizeof out);
        if (mp_ok(ctx, weft_moe_combine(comms[i], h[i], rx, out, NULL), "weft_moe_combine")) {
            size_t bad = 0;
            for (int e = 0; e < T * H; e++)
                bad += out[e] != x[e];
            mp_check(ctx, bad == 0,
                     "combine on communicator %d after the refusals: %zu of %d "
                     "values wrong",
                     i, bad, T * H);
        }
    }
    mp_ok(ctx, weft_moe_handle_destroy(h[1]), "weft_moe_handle_destroy");
    mp_ok(ctx, weft_moe_handle_destroy(h[0]), "weft_moe_handle_destroy");
    st = weft_comm_destroy(other);
    mp_check(ctx, st == WEFT_SUCCESS,
             "weft_comm_destroy of the second communicator returned %s: %s", weft_status_string(st),
             weft_last_error());
}

/* Handles destroyed on another thread while this one destroys their communicator: every
 * destroy must succeed, whichever comes first, and nothing may touch freed memory (the sanitizer
 * builds run this). */
static void run_destroy_race(mp_ctx_t *ctx, weft_registration_t reg)
{
    int n = ctx->nranks;
    mp_case(ctx, "moe handles destroyed on a thread while the communicator is, reg=%s",
            mp_reg_name(reg));
    enum { T = 2, H = 2 };
    float x[T * H] = {1, 2, 3, 4}, w[T] = {1, 1}, rx[64 * T * H], rw[64 * T];
    int64_t to_first[T] = {0, 0}, ridx[64 * T], rcnt[1], num = -5;
    moe_race_t r = {.h = {NULL}};
    for (int i = 0; i < MOE_RACE_HANDLES; i++)
        mp_ok(ctx,
              weft_moe_dispatch(ctx->comm, x, T, H, WEFT_FLOAT32, to_first, w, 1, n, rx, ridx, rw,
                                rcnt, (size_t)n * T, &num, &r.h[i], NULL),
              "weft_moe_dispatch");
    moe_race_start(ctx, &r);
    mp_comm_close(ctx);
    moe_race_join(ctx, &r);
    mp_comm_open(ctx, reg);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_moe");
    static const size_t Ts[] = {0, 1, 7, 300}, Hs[] = {1, 7, 128};
    static const int ks[] = {1, 2, 8};
    static const weft_dtype_t dts[] = {WEFT_FLOAT32, WEFT_BFLOAT16, WEFT_FLOAT16};
    if (ctx.nranks > MOE_MAX_RANKS)
        mp_fatal(&ctx, "mp_moe runs with at most %d ranks", MOE_MAX_RANKS);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        unsigned combo = 0;
        for (size_t ti = 0; ti < 5; ti++)
            for (size_t hi = 0; hi < 3; hi++)
                for (size_t ki = 0; ki < 3; ki++)
                    for (int em = 1; em <= 8; em += 7)
                        for (int route = 0; route < MOE_NUM_ROUTES; route++) {
                            moe_case_t c = {.shape = {.hidden = Hs[hi],
                                                      .topk = ks[ki],
                                                      .experts = em * ctx.nranks,
                                                      .route = (moe_route_t)route}};
                            if (c.shape.topk > c.shape.experts)
                                continue;
                            /* ti == 4: a different T per rank, one of them 0. */
                            for (int r = 0; r < ctx.nranks; r++)
                                c.shape.tokens[r] = ti < 4 ? Ts[ti] : (size_t)(r * 37 % 101);
                            unsigned v = combo++ + (unsigned)reg;
                            if (ctx.quick && v % 3 != 0)
                                continue;
                            c.shape.dt = dts[v % 3];
                            c.kind = (v / 3) % 2 ? MP_BUF_UNREGISTERED : MP_BUF_REGISTERED;
                            c.overflow = v % 8 == 5;
                            c.zero_cap = v % 2 == 0;
                            run_case(&ctx, &c);
                        }
        /* The large points, once per mode: T = 4096 with E = 32n, and H = 7168. */
        static const struct {
            size_t T, H;
            int k, em;
            moe_route_t route;
        } large[] = {{4096, 128, 8, 32, MOE_ROUTE_ZIPF}, {64, 7168, 8, 8, MOE_ROUTE_UNIFORM}};
        for (size_t i = 0; i < sizeof large / sizeof large[0]; i++) {
            moe_case_t c = {.shape = {.hidden = large[i].H,
                                      .topk = large[i].k,
                                      .experts = large[i].em * ctx.nranks,
                                      .route = large[i].route,
                                      .dt = i ? WEFT_FLOAT16 : WEFT_BFLOAT16},
                            .kind = i % 2 ? MP_BUF_UNREGISTERED : MP_BUF_REGISTERED};
            for (int r = 0; r < ctx.nranks; r++)
                c.shape.tokens[r] = large[i].T;
            run_case(&ctx, &c);
        }
        /* Spread y (moe_ref.h), in each dtype: from 3 ranks, a combine that sums in another
         * order or rounds each step to 16 bits fails them. */
        for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
            moe_case_t c = {.shape = {.hidden = 64,
                                      .topk = 8,
                                      .experts = 8 * ctx.nranks,
                                      .route = MOE_ROUTE_UNIFORM,
                                      .dt = dts[i],
                                      .spread = 1},
                            .kind =
                                (i + (size_t)reg) % 2 ? MP_BUF_UNREGISTERED : MP_BUF_REGISTERED};
            for (int r = 0; r < ctx.nranks; r++)
                c.shape.tokens[r] = ctx.quick ? 64 : 300;
            run_case(&ctx, &c);
        }
        run_zero_capacity(&ctx);
        run_invalid(&ctx);
        run_handle_mismatch(&ctx);
        run_routing_mismatch(&ctx);
        run_combine_overlap(&ctx);
        run_reuse_errors(&ctx);
        run_reuse_other_dispatch(&ctx);
        run_bad_expert_one_rank(&ctx);
        run_stale_handle(&ctx, (weft_registration_t)reg);
        run_other_comm_handle(&ctx, (weft_registration_t)reg);
        run_destroy_race(&ctx, (weft_registration_t)reg);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
