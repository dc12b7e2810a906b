/*
 * mp_broadcast.c - weft_broadcast with every root at the small counts, in place
 * (sendbuf == recvbuf) and out of place, with registered, interior and unregistered buffers,
 * under each registration mode; the dtype rotates with the root and the count so that every
 * dtype is covered; the 1M+3 count for a representative subset.
 *
 * Out of place, non-root ranks pass NULL as sendbuf in every other case (the API allows it), and
 * otherwise a buffer of their own data that must be neither read into the result nor modified.
 * Each case checks every element, the guard zones and the zero-copy/staged path in the stats.
 */
#include "harness.h"

typedef struct large_case {
    weft_registration_t reg;
    mp_buf_kind_t kind;
    int inplace;
    weft_dtype_t dt;
    int root_from_end; /* root = nranks - 1 - root_from_end, clamped to 0 */
} large_case_t;

static const large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, MP_BUF_REGISTERED, 0, WEFT_FLOAT32, 0},
    {WEFT_REGISTRATION_JIT, MP_BUF_UNREGISTERED, 1, WEFT_UINT8, 1},
    {WEFT_REGISTRATION_STAGED, MP_BUF_INTERIOR, 0, WEFT_FLOAT64, 2},
};

static void run_case(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt, int root,
                     int inplace)
{
    size_t bytes = count * mp_dtype_bytes(dt);
    mp_case(ctx, "broadcast %s count=%zu %s root=%d %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), root, inplace ? "in-place" : "out-of-place");
    int is_root = ctx->rank == root;
    int null_send = !inplace && !is_root && (ctx->case_id & 1);
    mp_buf_t send = {0}, recv;
    mp_buf_alloc(ctx, &recv, kind, bytes);
    if (inplace && is_root)
        mp_raw_fill(ctx, dt, root, 0, count, recv.ptr);
    if (!inplace && !null_send) {
        mp_buf_alloc(ctx, &send, kind, bytes);
        mp_raw_fill(ctx, dt, ctx->rank, 0, count, send.ptr);
    }
    const void *sendbuf = inplace ? recv.ptr : null_send ? NULL : send.ptr;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_broadcast(ctx->comm, sendbuf, recv.ptr, count, dt, root, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_broadcast")) {
        mp_raw_check(ctx, "recvbuf", recv.ptr, dt, root, 0, count);
        if (send.alloc)
            mp_raw_check(ctx, "sendbuf", send.ptr, dt, ctx->rank, 0, count);
        /* Only the root's input is read by peers: the others take no staged path. */
        int zero_copy = ctx->rank != root || mp_expect_zero_copy(ctx, kind);
        mp_check_path_expect(ctx, &s0, &s1, zero_copy, kind, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_broadcast");
    size_t counts[8];
    size_t ncounts = mp_counts(&ctx, counts);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        for (int kind = 0; kind < MP_NUM_BUF_KINDS; kind++)
            for (size_t c = 0; c < ncounts; c++)
                for (int root = 0; root < ctx.nranks; root++) {
                    int dt = (root * 7 + (int)c * 3 + kind + reg * 5) % WEFT_NUM_DTYPES;
                    for (int inplace = 0; inplace < 2; inplace++) {
                        /* Quick mode keeps one of the two variants, alternating. */
                        if (ctx.quick && inplace != (root + (int)c) % 2)
                            continue;
                        run_case(&ctx, (mp_buf_kind_t)kind, counts[c], (weft_dtype_t)dt, root,
                                 inplace);
                    }
                }
        for (size_t i = 0; !ctx.quick && i < sizeof large_cases / sizeof large_cases[0]; i++) {
            const large_case_t *lc = &large_cases[i];
            int root = ctx.nranks - 1 - lc->root_from_end;
            if (lc->reg == (weft_registration_t)reg)
                run_case(&ctx, lc->kind, MP_LARGE_COUNT, lc->dt, root < 0 ? 0 : root, lc->inplace);
        }
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
