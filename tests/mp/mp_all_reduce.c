/*
 * mp_all_reduce.c - weft_all_reduce over the grid: every dtype and reduction at the small counts,
 * in place and out of place, with registered, interior and unregistered buffers, under each
 * registration mode (roa, jit, staged; one communicator after another); the 1M+3 count for a
 * representative subset.
 *
 * Each case checks every element of the result exactly, the guard zones around both buffers,
 * that the input of an out-of-place call is left untouched, and (for payloads of 4 KiB and more)
 * that the stats show the expected path: zero-copy for weft_malloc memory in roa/jit mode,
 * staged otherwise, and whether the two-shot form stored into the peers' outputs
 * (remote_store_ops; with WEFT_REMOTE_STORES=1, which CTest runs as mp_all_reduce.stores with
 * low two-shot thresholds). Last, mixed cases where one rank's buffer is unregistered and the
 * others' are weft memory.
 */
#include "harness.h"

static const mp_large_case_t large_cases[] = {
    {WEFT_REGISTRATION_ROA, MP_BUF_REGISTERED, 0, WEFT_FLOAT32, WEFT_SUM},
    {WEFT_REGISTRATION_ROA, MP_BUF_UNREGISTERED, 1, WEFT_FLOAT16, WEFT_PROD},
    {WEFT_REGISTRATION_JIT, MP_BUF_INTERIOR, 1, WEFT_BFLOAT16, WEFT_AVG},
    {WEFT_REGISTRATION_STAGED, MP_BUF_REGISTERED, 0, WEFT_INT64, WEFT_MAX},
};

/* One all-reduce with this rank's input (out of place) and output of the given kinds; checks the
 * result, the guard zones, the untouched input, the path (this rank's input decides it, and its
 * output too in the two-shot form) and whether the store form ran. */
static void reduce(mp_ctx_t *ctx, mp_buf_kind_t send_kind, mp_buf_kind_t recv_kind, size_t count,
                   weft_dtype_t dt, weft_redop_t op, int inplace, int want_stores)
{
    size_t bytes = count * mp_dtype_bytes(dt);
    mp_buf_t send = {0}, recv;
    mp_buf_alloc(ctx, &recv, recv_kind, bytes);
    if (inplace) {
        mp_red_fill(ctx, dt, op, ctx->rank, 0, count, recv.ptr);
    } else {
        mp_buf_alloc(ctx, &send, send_kind, bytes);
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
        int zero = mp_expect_zero_copy(ctx, inplace ? recv_kind : send_kind) &&
                   (!mp_expect_twoshot(ctx, bytes, inplace) || mp_expect_zero_copy(ctx, recv_kind));
        mp_check_path_expect(ctx, &s0, &s1, zero, inplace ? recv_kind : send_kind, bytes);
        mp_check_remote_stores(ctx, &s0, &s1,
                               want_stores && mp_expect_twoshot_stores(ctx, bytes, inplace), bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

static void run_case(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt,
                     weft_redop_t op, int inplace)
{
    mp_case(ctx, "all_reduce %s count=%zu %s %s %s", mp_buf_kind_name(kind), count,
            mp_dtype_name(dt), mp_op_name(op), inplace ? "in-place" : "out-of-place");
    reduce(ctx, kind, kind, count, dt, op, inplace, mp_expect_zero_copy(ctx, kind));
}

/* Ranks whose buffers differ in kind (roa): one rank's unregistered output makes every rank take
 * the two-phase form; one rank's unregistered input (staged) does not stop the store form. */
static void run_mixed(mp_ctx_t *ctx)
{
    const size_t count = 4099;
    const mp_buf_kind_t R = MP_BUF_REGISTERED, U = MP_BUF_UNREGISTERED;
    int last = ctx->nranks - 1;
    mp_comm_open(ctx, WEFT_REGISTRATION_ROA);
    mp_case(ctx, "all_reduce mixed: rank 0's output unregistered");
    reduce(ctx, R, ctx->rank == 0 ? U : R, count, WEFT_FLOAT32, WEFT_SUM, 0, 0);
    mp_case(ctx, "all_reduce mixed: rank %d's input unregistered", last);
    reduce(ctx, ctx->rank == last ? U : R, R, count, WEFT_INT32, WEFT_MAX, 0, 1);
    mp_case(ctx, "all_reduce mixed: rank 0's buffer unregistered, in place");
    reduce(ctx, R, ctx->rank == 0 ? U : R, count, WEFT_BFLOAT16, WEFT_SUM, 1, 0);
    mp_case(ctx, "all_reduce mixed: every buffer registered, in place");
    reduce(ctx, R, R, count, WEFT_FLOAT64, WEFT_PROD, 1, 1);
    mp_comm_close(ctx);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_all_reduce");
    mp_run_grid(&ctx, 1, run_case, large_cases, sizeof large_cases / sizeof large_cases[0]);
    run_mixed(&ctx);
    return mp_finish(&ctx);
}
