/*
 * mp_reduce_scatter.c - weft_reduce_scatter over the grid: every dtype and reduction at the small
 * counts (recvcount), in place (recvbuf == sendbuf + rank * recvcount) and out of place, with
 * registered, interior and unregistered buffers, under each registration mode; the 1M+3 count for
 * a representative subset.
 *
 * Rank r's block of the result is the reduction over all ranks of elements
 * [r * recvcount, (r + 1) * recvcount) of their inputs. Each case checks it exactly, the guard
 * zones, that an out-of-place input is left untouched, and the zero-copy/staged path in the stats.
 * In place, the other blocks of the buffer are unspecified after the call and are not checked.
 */
#include "harness.h"

static const mp_large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, MP_BUF_REGISTERED, 0, WEFT_FLOAT32, WEFT_SUM},
    {WEFT_REGISTRATION_JIT, MP_BUF_INTERIOR, 1, WEFT_BFLOAT16, WEFT_AVG},
    {WEFT_REGISTRATION_STAGED, MP_BUF_UNREGISTERED, 0, WEFT_INT64, WEFT_MAX},
};

static void run_case(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                     weft_redop_t op, int inplace)
{
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    size_t bytes = count * es;
    mp_case(ctx, "reduce_scatter %s recvcount=%zu %s %s %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op), inplace ? "in-place" : "out-of-place");
    mp_buf_t send, recv = {0};
    mp_buf_alloc(ctx, &send, kind, n * bytes);
    mp_red_fill(ctx, dt, op, ctx->rank, 0, n * count, send.ptr);
    if (!inplace)
        mp_buf_alloc(ctx, &recv, kind, bytes);
    unsigned char *out = inplace ? send.ptr + (size_t)ctx->rank * bytes : recv.ptr;
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_reduce_scatter(ctx->comm, send.ptr, out, count, dt, op, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_reduce_scatter")) {
        mp_red_check_result(ctx, "recvbuf", out, dt, op, (size_t)ctx->rank * count, count);
        if (!inplace)
            mp_red_check_input(ctx, "sendbuf", send.ptr, dt, op, ctx->rank, 0, n * count);
        mp_check_path(ctx, &s0, &s1, kind, bytes);
    }
    mp_buf_free(ctx, &recv, "recvbuf");
    mp_buf_free(ctx, &send, "sendbuf");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_reduce_scatter");
    mp_run_grid(&ctx, 1, run_case, large_cases, sizeof large_cases / sizeof large_cases[0]);
    return mp_finish(&ctx);
}
