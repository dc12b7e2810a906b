/*
 * mp_moe.c - weft_moe_dispatch, weft_moe_combine and weft_moe_handle_destroy.
 *
 * Every rank regenerates every rank's routing from the shared seed and computes, without the
 * library, what it must receive (source rank, then token order; local expert ids or -1; the
 * sender's weights or 0.0f; per-expert counts) and what combine must return. The grid: tokens
 * per rank T in {0, 1, 7, 300} (and one case with a different T per rank), hidden H in
 * {1, 7, 128}, topk in {1, 2, 8} (at most E), experts E in {n, 8n}, and four routings: uniform,
 * Zipf-skewed (expert e drawn with weight 1/(e+1)), all-to-one (every expert on one rank) and
 * masked (a third of the slots -1, every fifth token fully masked). Each case runs in float32 or
 * bfloat16 on weft_malloc or malloc buffers (alternating over the grid), under each registration
 * mode, with a capacity above the need (the rows past *num_recv_tokens must keep their poison);
 * the stats must show the zero-copy path exactly when the buffers peers read (x, then y) are
 * weft_malloc memory outside the staged mode; one case in eight sets max_recv_tokens one below the
 * largest rank's need, which must fail with WEFT_ERR_INVALID_ARGUMENT on every rank and write
 * nothing.
 *
 * Values are exact: x holds integers in [-8, 8], rank d's combine input for a token is its row
 * times d + 1, so out[t] = x[t] * sum(d + 1) over the ranks that received t, exact in bfloat16.
 * Finally the argument checks: each bad argument must give WEFT_ERR_INVALID_ARGUMENT naming the
 * call, and leave the communicator usable; and combine with handles of different dispatches on
 * the ranks must give WEFT_ERR_MISMATCH on every rank.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"

typedef enum { ROUTE_UNIFORM, ROUTE_ZIPF, ROUTE_ALL_TO_ONE, ROUTE_MASKED, ROUTE_COUNT } route_t;
static const char *const route_names[] = {"uniform", "zipf", "all_to_one", "masked"};

typedef struct moe_case {
    size_t tokens[64]; /* tokens per rank (n <= 64 in these tests) */
    size_t hidden;
    int topk, experts;
    route_t route;
    weft_dtype_t dt;
    mp_buf_kind_t kind;
    int overflow;
} moe_case_t;

static int64_t expert_of(const mp_ctx_t *ctx, const moe_case_t *c, int r, size_t t, int j)
{
    uint64_t h = mp_hash(ctx->seed, ctx->case_id, (uint64_t)r, t * (uint64_t)c->topk + (uint64_t)j);
    int E = c->experts, epr = E / ctx->nranks;
    switch (c->route) {
    case ROUTE_ZIPF: {
        double total = 0, u;
        for (int e = 0; e < E; e++)
            total += 1.0 / (e + 1);
        u = (double)(h >> 11) / 9007199254740992.0 * total;
        for (int e = 0; e < E; e++) {
            u -= 1.0 / (e + 1);
            if (u < 0)
                return e;
        }
        return E - 1;
    }
    case ROUTE_ALL_TO_ONE:
        return (int64_t)(ctx->case_id % (uint64_t)ctx->nranks) * epr + (int64_t)(h % (uint64_t)epr);
    case ROUTE_MASKED:
        if (t % 5 == 0 || h % 3 == 0)
            return -1;
        return (int64_t)((h >> 8) % (uint64_t)E);
    default:
        return (int64_t)(h % (uint64_t)E);
    }
}

static float weight_of(const mp_ctx_t *ctx, int r, size_t t, int j)
{
    return (float)(mp_hash(ctx->seed, ctx->case_id, 1000 + (uint64_t)r, t * 64 + (uint64_t)j) %
                   16) /
           8.0f;
}

static float x_of(const mp_ctx_t *ctx, int r, size_t t, size_t e)
{
    return (float)(int)(mp_hash(ctx->seed, ctx->case_id, 2000 + (uint64_t)r, (t << 20) + e) % 17) -
           8.0f;
}

static void store(void *buf, size_t i, weft_dtype_t dt, float v)
{
    if (dt == WEFT_FLOAT32) {
        memcpy((float *)buf + i, &v, 4);
    } else { /* bfloat16: the values are exact in its 8-bit significand */
        uint32_t bits;
        memcpy(&bits, &v, 4);
        uint16_t b = (uint16_t)(bits >> 16);
        memcpy((uint16_t *)buf + i, &b, 2);
    }
}

static float fetch(const void *buf, size_t i, weft_dtype_t dt)
{
    float v;
    if (dt == WEFT_FLOAT32) {
        memcpy(&v, (const float *)buf + i, 4);
    } else {
        uint16_t b;
        memcpy(&b, (const uint16_t *)buf + i, 2);
        uint32_t bits = (uint32_t)b << 16;
        memcpy(&v, &bits, 4);
    }
    return v;
}

/* Whether rank d receives token t of rank r. */
static int goes_to(const mp_ctx_t *ctx, const moe_case_t *c, int r, size_t t, int d)
{
    int epr = c->experts / ctx->nranks;
    for (int j = 0; j < c->topk; j++) {
        int64_t e = expert_of(ctx, c, r, t, j);
        if (e >= 0 && e / epr == d)
            return 1;
    }
    return 0;
}

static size_t recv_count(const mp_ctx_t *ctx, const moe_case_t *c, int d)
{
    size_t total = 0;
    for (int r = 0; r < ctx->nranks; r++)
        for (size_t t = 0; t < c->tokens[r]; t++)
            total += (size_t)goes_to(ctx, c, r, t, d);
    return total;
}

static void run_case(mp_ctx_t *ctx, const moe_case_t *c)
{
    int n = ctx->nranks, me = ctx->rank, k = c->topk, epr = c->experts / n;
    size_t T = c->tokens[me], H = c->hidden, es = mp_dtype_bytes(c->dt);
    mp_case(ctx, "moe T=%zu H=%zu k=%d E=%d %s %s %s%s", T, H, k, c->experts, route_names[c->route],
            mp_dtype_name(c->dt), mp_buf_kind_name(c->kind), c->overflow ? " overflow" : "");
    size_t need = recv_count(ctx, c, me), most = 0;
    for (int d = 0; d < n; d++) {
        size_t got = recv_count(ctx, c, d);
        most = got > most ? got : most;
    }
    int overflow = c->overflow && most > 0;
    size_t cap = overflow ? most - 1 : most + 3;

    mp_buf_t x, idx, w, rx, ridx, rw, rcnt;
    mp_buf_alloc(ctx, &x, c->kind, T * H * es);
    mp_buf_alloc(ctx, &idx, c->kind, T * (size_t)k * 8);
    mp_buf_alloc(ctx, &w, c->kind, T * (size_t)k * 4);
    mp_buf_alloc(ctx, &rx, c->kind, cap * H * es);
    mp_buf_alloc(ctx, &ridx, c->kind, cap * (size_t)k * 8);
    mp_buf_alloc(ctx, &rw, c->kind, cap * (size_t)k * 4);
    mp_buf_alloc(ctx, &rcnt, c->kind, (size_t)epr * 8);
    for (size_t t = 0; t < T; t++) {
        for (size_t e = 0; e < H; e++)
            store(x.ptr, t * H + e, c->dt, x_of(ctx, me, t, e));
        for (int j = 0; j < k; j++) {
            int64_t ex = expert_of(ctx, c, me, t, j);
            float wt = weight_of(ctx, me, t, j);
            memcpy(idx.ptr + (t * (size_t)k + (size_t)j) * 8, &ex, 8);
            memcpy(w.ptr + (t * (size_t)k + (size_t)j) * 4, &wt, 4);
        }
    }
    int64_t num_recv = -5;
    weft_moe_handle_t handle = NULL;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st =
        weft_moe_dispatch(ctx->comm, x.ptr, T, H, c->dt, (const int64_t *)idx.ptr,
                          (const float *)w.ptr, k, c->experts, rx.ptr, (int64_t *)ridx.ptr,
                          (float *)rw.ptr, (int64_t *)rcnt.ptr, cap, &num_recv, &handle, NULL);
    if (overflow) {
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, "weft_moe_dispatch", "overflow");
        mp_check(ctx, num_recv == -5 && handle == NULL, "outputs set on failure");
        mp_check_poison(ctx, "recv_x", rx.ptr, rx.bytes);
        mp_check_poison(ctx, "recv_topk_idx", ridx.ptr, ridx.bytes);
        mp_check_poison(ctx, "recv_topk_weights", rw.ptr, rw.bytes);
        mp_check_poison(ctx, "recv_expert_counts", rcnt.ptr, rcnt.bytes);
    } else if (mp_ok(ctx, st, "weft_moe_dispatch")) {
        mp_stats(ctx, &s1);
        mp_check_path(ctx, &s0, &s1, c->kind, T * H * es);
        mp_check(ctx, num_recv == (int64_t)need, "num_recv_tokens %lld, expected %zu",
                 (long long)num_recv, need);
        /* The expected receive list, and y = recv_x * (me + 1) from it. */
        int64_t *counts = calloc((size_t)epr, 8);
        mp_buf_t y, out;
        mp_buf_alloc(ctx, &y, c->kind, need * H * es);
        size_t i = 0, bad = 0;
        for (int r = 0; r < n; r++) {
            for (size_t t = 0; t < c->tokens[r]; t++) {
                if (!goes_to(ctx, c, r, t, me))
                    continue;
                for (size_t e = 0; e < H; e++) {
                    float want = x_of(ctx, r, t, e);
                    store(y.ptr, i * H + e, c->dt, want * (float)(me + 1));
                    if (i < (size_t)num_recv && fetch(rx.ptr, i * H + e, c->dt) != want &&
                        bad++ < 3)
                        mp_fail(ctx, "recv_x[%zu][%zu] from rank %d token %zu: %g, expected %g", i,
                                e, r, t, (double)fetch(rx.ptr, i * H + e, c->dt), (double)want);
                }
                for (int j = 0; j < k; j++) {
                    int64_t ex = expert_of(ctx, c, r, t, j), got_e;
                    int local = ex >= 0 && ex / epr == me;
                    int64_t want_e = local ? ex - (int64_t)me * epr : -1;
                    float want_w = local ? weight_of(ctx, r, t, j) : 0.0f, got_w;
                    if (local)
                        counts[want_e]++;
                    if (i >= (size_t)num_recv)
                        continue;
                    memcpy(&got_e, ridx.ptr + (i * (size_t)k + (size_t)j) * 8, 8);
                    memcpy(&got_w, rw.ptr + (i * (size_t)k + (size_t)j) * 4, 4);
                    if ((got_e != want_e || got_w != want_w) && bad++ < 3)
                        mp_fail(ctx,
                                "recv slot [%zu][%d] from rank %d token %zu: (%lld, %g), "
                                "expected (%lld, %g)",
                                i, j, r, t, (long long)got_e, (double)got_w, (long long)want_e,
                                (double)want_w);
                }
                i++;
            }
        }
        mp_check(ctx, bad == 0, "%zu wrong received values", bad);
        for (int e = 0; e < epr; e++) {
            int64_t got;
            memcpy(&got, rcnt.ptr + (size_t)e * 8, 8);
            mp_check(ctx, got == counts[e], "recv_expert_counts[%d] = %lld, expected %lld", e,
                     (long long)got, (long long)counts[e]);
        }
        mp_check_poison(ctx, "recv_x past the tokens", rx.ptr + need * H * es,
                        (cap - need) * H * es);
        mp_check_poison(ctx, "recv_topk_idx past the tokens", ridx.ptr + need * (size_t)k * 8,
                        (cap - need) * (size_t)k * 8);
        free(counts);

        /* Combine: out[t] = x[t] * sum over receiving ranks d of (d + 1). */
        mp_buf_alloc(ctx, &out, c->kind, T * H * es);
        mp_stats(ctx, &s0);
        st = weft_moe_combine(ctx->comm, handle, y.ptr, out.ptr, NULL);
        if (mp_ok(ctx, st, "weft_moe_combine")) {
            mp_stats(ctx, &s1);
            mp_check_path(ctx, &s0, &s1, c->kind, need * H * es);
            bad = 0;
            for (size_t t = 0; t < T; t++) {
                float factor = 0;
                for (int d = 0; d < n; d++)
                    factor += goes_to(ctx, c, me, t, d) ? (float)(d + 1) : 0.0f;
                for (size_t e = 0; e < H; e++) {
                    float want = x_of(ctx, me, t, e) * factor,
                          got = fetch(out.ptr, t * H + e, c->dt);
                    if (got != want && bad++ < 3)
                        mp_fail(ctx, "out[%zu][%zu] = %g, expected %g", t, e, (double)got,
                                (double)want);
                }
            }
            mp_check(ctx, bad == 0, "%zu wrong combined values", bad);
        }
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
    BAD_DISPATCH("stream not NULL", cm, x, 1, 2, WEFT_FLOAT32, idx, w, 2, n, rx, ridx, rw, rcnt, 8,
                 &num, &h, (void *)x);
#undef BAD_DISPATCH
    mp_expect_status(ctx, weft_moe_combine(cm, NULL, y, x, NULL), WEFT_ERR_INVALID_ARGUMENT,
                     "weft_moe_combine", "combine handle NULL");
    mp_check(ctx, h == NULL, "a handle was set by a failed call");
    mp_ok(ctx, weft_moe_handle_destroy(NULL), "weft_moe_handle_destroy(NULL)");
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
    weft_moe_handle_destroy(h[1]);
    weft_moe_handle_destroy(h[0]);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_moe");
    static const size_t Ts[] = {0, 1, 7, 300}, Hs[] = {1, 7, 128};
    static const int ks[] = {1, 2, 8};
    if (ctx.nranks > 64)
        mp_fatal(&ctx, "mp_moe runs with at most 64 ranks");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        unsigned combo = 0;
        for (size_t ti = 0; ti < 5; ti++)
            for (size_t hi = 0; hi < 3; hi++)
                for (size_t ki = 0; ki < 3; ki++)
                    for (int em = 1; em <= 8; em += 7)
                        for (int route = 0; route < ROUTE_COUNT; route++) {
                            moe_case_t c = {.hidden = Hs[hi],
                                            .topk = ks[ki],
                                            .experts = em * ctx.nranks,
                                            .route = (route_t)route};
                            if (c.topk > c.experts)
                                continue;
                            /* ti == 4: a different T per rank, one of them 0. */
                            for (int r = 0; r < ctx.nranks; r++)
                                c.tokens[r] = ti < 4 ? Ts[ti] : (size_t)(r * 37 % 101);
                            unsigned v = combo++ + (unsigned)reg;
                            if (ctx.quick && v % 3 != 0)
                                continue;
                            c.dt = v % 2 ? WEFT_BFLOAT16 : WEFT_FLOAT32;
                            c.kind = (v / 2) % 2 ? MP_BUF_UNREGISTERED : MP_BUF_REGISTERED;
                            c.overflow = v % 8 == 5;
                            run_case(&ctx, &c);
                        }
        run_invalid(&ctx);
        run_handle_mismatch(&ctx);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
