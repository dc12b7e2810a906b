/*
 * mp_all_reduce.c - weft_all_reduce over the grid: every dtype and reduction at the small counts,
 * in place and out of place, with registered, interior and unregistered buffers, under each
 * registration mode (roa, jit, staged; one communicator after another); the 1M+3 count for a
 * representative subset.
 *
 * Each case checks every element of the result exactly, the guard zones around both buffers,
 * that the input of an out-of-place call is left untouched, and (for payloads of 4 KiB and more)
 * that the stats show the expected path: zero-copy for weft_malloc memory in roa/jit mode,
 * staged otherwise.
 */
#include "harness.h"

static const mp_large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, MP_BUF_REGISTERED, 0, WEFT_FLOAT32, WEFT_SUM},
    {WEFT_REGISTRATION_ROA, MP_BUF_UNREGISTERED, 1, WEFT_FLOAT16, WEFT_PROD},
    {WEFT_REGISTRATION_JIT, MP_BUF_INTERIOR, 1, WEFT_BFLOAT16, WEFT_AVG},
    {WEFT_REGISTRATION_STAGED, MP_BUF_REGISTERED, 0, WEFT_INT64, WEFT_MAX},
};

static void run_case(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                     weft_redop_t op, int inplace)
{
    size_t bytes = count * mp_dtype_bytes(dt);
    mp_case(ctx, "all_reduce %s count=%zu %s %s %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op), inplace ? "in-place" : "out-of-place");
    mp_buf_t send = {0}, recv;
    mp_buf_alloc(ctx, &recv, kind, bytes);
    if (inplace) {
        mp_red_fill(ctx, dt, op, ctx->rank, 0, count, recv.ptr);
    } else {
        mp_buf_alloc(ctx, &send, kind, bytes);
        mp_red_fill(ctx, dt, op, ctx->rank, 0, count, send.ptr);
    }
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st =
        weft_all_reduce(ctx->comm, inplace ? recv.ptr : send.ptr, recv.ptr, count, dt, op, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_reduce")) {
        mp_red_check_result(ctx, "recvbuf", recv.ptr, dt, op, 0, count);
        if (!inplace)
            mp_red_check_input(ctx, "sendbuf", send.ptr, dt, op, ctx->rank, 0, count);
        mp_check_path(ctx, &s0, &s1, kind, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_all_reduce");
    mp_run_grid(&ctx, 1, run_case, large_cases, sizeof large_cases / sizeof large_cases[0]);
    return mp_finish(&ctx);
}
