/*
 * mp_all_gather.c - weft_all_gather over the grid: every dtype at the small counts (sendcount), in
 * place (sendbuf == recvbuf + rank * sendcount) and out of place, with registered, interior and
 * unregistered buffers, under each registration mode; the 1M+3 count for a representative
 * subset.
 *
 * Block p of the result must hold rank p's input (random bytes per element, so a misplaced or
 * truncated element is caught whatever its dtype). Each case also checks the guard zones, that
 * an out-of-place input is left untouched, the zero-copy/staged path in the stats and whether
 * the remote-store form ran (remote_store_ops; only with WEFT_REMOTE_STORES=1, which CTest
 * runs as mp_all_gather.stores). Last, mixed cases where one rank's buffer is unregistered and
 * the others' are weft memory.
 */
#include "harness.h"

#include <stdio.h>

static const mp_large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, MP_BUF_INTERIOR, 0, WEFT_FLOAT32, WEFT_SUM},
    {WEFT_REGISTRATION_JIT, MP_BUF_REGISTERED, 1, WEFT_BFLOAT16, WEFT_SUM},
    {WEFT_REGISTRATION_STAGED, MP_BUF_UNREGISTERED, 0, WEFT_INT8, WEFT_SUM},
};

/* One all-gather with this rank's input (out of place) and output of the given kinds; checks
 * the result, the guard zones, the untouched input, the path (zero-copy unless this rank's
 * input is staged) and whether the remote-store form ran. */
static void gather(mp_ctx_t *ctx, mp_buf_kind_t send_kind, mp_buf_kind_t recv_kind, size_t count,
                   weft_dtype_t dt, int inplace, int want_stores)
{
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    size_t bytes = count * es;
    mp_buf_t send = {0}, recv;
    mp_buf_alloc(ctx, &recv, recv_kind, n * bytes);
    unsigned char *in = recv.ptr + (size_t)ctx->rank * bytes;
    if (!inplace) {
        mp_buf_alloc(ctx, &send, send_kind, bytes);
        in = send.ptr;
    }
    mp_raw_fill(ctx, dt, ctx->rank, 0, count, in);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_gather(ctx->comm, in, recv.ptr, count, dt, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_gather")) {
        for (int p = 0; p < ctx->nranks; p++) {
            char what[64];
            snprintf(what, sizeof what, "recvbuf block %d", p);
            mp_raw_check(ctx, what, recv.ptr + (size_t)p * bytes, dt, p, 0, count);
        }
        if (!inplace)
            mp_raw_check(ctx, "sendbuf", send.ptr, dt, ctx->rank, 0, count);
        mp_check_path(ctx, &s0, &s1, inplace ? recv_kind : send_kind, bytes);
        mp_check_remote_stores(ctx, &s0, &s1, want_stores, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

/* One case of the grid (mp_grid_fn); op is WEFT_SUM and unused: nothing is reduced. */
static void run_case(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                     weft_redop_t op, int inplace)
{
    (void)op;
    mp_case(ctx, "all_gather %s sendcount=%zu %s %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), inplace ? "in-place" : "out-of-place");
    gather(ctx, kind, kind, count, dt, inplace, mp_expect_zero_copy(ctx, kind));
}

/* Ranks whose buffers differ in kind (roa): one rank's unregistered output, or one rank's
 * staged input, makes every rank take the load form, with exact results. */
static void run_mixed(mp_ctx_t *ctx)
{
    const size_t count = 4099;
    const mp_buf_kind_t R = MP_BUF_REGISTERED, U = MP_BUF_UNREGISTERED;
    int last = ctx->nranks - 1;
    mp_comm_open(ctx, WEFT_REGISTRATION_ROA);
    mp_case(ctx, "all_gather mixed: rank 0's output unregistered");
    gather(ctx, R, ctx->rank == 0 ? U : R, count, WEFT_UINT32, 0, 0);
    mp_case(ctx, "all_gather mixed: rank %d's input unregistered", last);
    gather(ctx, ctx->rank == last ? U : R, R, count, WEFT_UINT32, 0, 0);
    mp_case(ctx, "all_gather mixed: rank 0's buffer unregistered, in place");
    gather(ctx, R, ctx->rank == 0 ? U : R, count, WEFT_UINT32, 1, 0);
    mp_case(ctx, "all_gather mixed: every buffer registered");
    gather(ctx, R, R, count, WEFT_UINT32, 0, 1);
    mp_comm_close(ctx);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_all_gather");
    mp_run_grid(&ctx, 0, run_case, large_cases, sizeof large_cases / sizeof large_cases[0]);
    run_mixed(&ctx);
    return mp_finish(&ctx);
}
