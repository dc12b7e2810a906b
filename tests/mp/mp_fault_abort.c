/*
 * mp_fault_abort.c - weft_comm_abort on one rank.
 *
 * After a barrier rank 0 waits 100 ms (the others are then inside an all_reduce) and calls
 * weft_comm_abort, which must return at once (< 100 ms); its own next operations must return
 * WEFT_ERR_ABORTED. Every other rank's pending all_reduce and next operation must return
 * WEFT_ERR_PEER_LOST within 10 s; on every rank an all_reduce of 0 elements and weft_malloc
 * then return the same status (the suite runs it with WEFT_TIMEOUT_S=60). All ranks then
 * destroy the communicator and exit 0, each printing a PASS line (mp_fault.sh checks them).
 */
#include "harness.h"

#define ABORT_LIMIT_S 0.1
#define DETECT_LIMIT_S 10.0
#define COUNT 4099

static void expect_fast(mp_ctx_t *ctx, weft_status_t st, weft_status_t want, double dt,
                        double limit, const char *what)
{
    mp_check(ctx, st == want, "%s returned %s, expected %s: %s", what, weft_status_string(st),
             weft_status_string(want), weft_last_error());
    mp_check(ctx, dt < limit, "%s took %.3f s (limit %.3f s)", what, dt, limit);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_abort");
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
    void *buf = NULL;
    mp_ok(&ctx, weft_malloc(ctx.comm, &buf, COUNT * 4), "weft_malloc");
    if (!buf)
        mp_fatal(&ctx, "weft_malloc returned NULL");
    mp_case(&ctx, "barrier before the abort");
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");

    weft_status_t want = ctx.rank == 0 ? WEFT_ERR_ABORTED : WEFT_ERR_PEER_LOST;
    double limit = ctx.rank == 0 ? 1.0 : DETECT_LIMIT_S;
    if (ctx.rank == 0) {
        mp_sleep_ms(100);
        mp_case(&ctx, "weft_comm_abort");
        double t0 = mp_now_s();
        weft_status_t st = weft_comm_abort(ctx.comm);
        expect_fast(&ctx, st, WEFT_SUCCESS, mp_now_s() - t0, ABORT_LIMIT_S, "weft_comm_abort");
    }
    mp_case(&ctx, "all_reduce %s", ctx.rank == 0 ? "after aborting" : "while rank 0 aborts");
    double t0 = mp_now_s();
    weft_status_t st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    expect_fast(&ctx, st, want, mp_now_s() - t0, limit, "all_reduce");

    mp_case(&ctx, "next operations");
    t0 = mp_now_s();
    st = weft_barrier(ctx.comm, NULL);
    expect_fast(&ctx, st, want, mp_now_s() - t0, limit, "barrier");
    t0 = mp_now_s();
    st = weft_broadcast(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, 0, NULL);
    expect_fast(&ctx, st, want, mp_now_s() - t0, limit, "broadcast");
    /* Calls that communicate nothing report it too: a count of 0, an allocation. */
    st = weft_all_reduce(ctx.comm, buf, buf, 0, WEFT_FLOAT32, WEFT_SUM, NULL);
    expect_fast(&ctx, st, want, 0.0, limit, "all_reduce of 0 elements");
    void *more = NULL;
    st = weft_malloc(ctx.comm, &more, 4096);
    expect_fast(&ctx, st, want, 0.0, limit, "weft_malloc");
    mp_check(&ctx, more == NULL, "weft_malloc on an unusable communicator returned %p", more);

    /* weft_comm_destroy frees the weft_malloc buffer too. */
    mp_case(&ctx, "weft_comm_destroy after the abort");
    t0 = mp_now_s();
    st = weft_comm_destroy(ctx.comm);
    ctx.comm = NULL;
    expect_fast(&ctx, st, WEFT_SUCCESS, mp_now_s() - t0, DETECT_LIMIT_S, "weft_comm_destroy");
    return mp_finish(&ctx);
}
