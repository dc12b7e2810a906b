/*
 * mp_fault_timeout.c - an operation that a peer joins too late times out.
 *
 * A first communicator (default timeout) synchronises the ranks and is destroyed; the second is
 * created with timeout_s = 1 in its config. Rank 0 sleeps 3 s before joining an all_reduce: the
 * others must get WEFT_ERR_TIMEOUT after about 1 s (between 0.9 and 2.5 s) - or, from 3 ranks,
 * WEFT_ERR_PEER_LOST at that time, when another waiting rank timed out first and destroyed its
 * failed communicator, which closes its connections - and their next operation must fail as
 * well (the communicator is unusable). Rank 0's late all_reduce must fail
 * too (WEFT_ERR_PEER_LOST or WEFT_ERR_TIMEOUT: its peers have given up), within 2.5 s. All ranks
 * destroy the communicator and exit 0 with a PASS line (mp_fault.sh checks them). Needs at least
 * 2 ranks.
 */
#include "harness.h"

#define TIMEOUT_S 1.0
#define LATE_MS 3000.0
#define COUNT 4099

static int failed(weft_status_t st)
{
    return st == WEFT_ERR_TIMEOUT || st == WEFT_ERR_PEER_LOST;
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_timeout");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_reopen_with_timeout(&ctx, TIMEOUT_S);
    void *buf = NULL;
    mp_ok(&ctx, weft_malloc(ctx.comm, &buf, COUNT * 4), "weft_malloc");
    if (!buf)
        mp_fatal(&ctx, "weft_malloc returned NULL");
    mp_case(&ctx, "barrier with a 1 s timeout, everyone on time");
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");

    if (ctx.rank == 0) {
        mp_sleep_ms(LATE_MS);
        mp_case(&ctx, "all_reduce joined %.0f ms late", LATE_MS);
        double t0 = mp_now_s();
        weft_status_t st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
        double dt = mp_now_s() - t0;
        mp_check(&ctx, failed(st), "late all_reduce returned %s, expected peer lost or timeout",
                 weft_status_string(st));
        mp_check(&ctx, dt < 2.5, "late all_reduce took %.2f s", dt);
    } else {
        mp_case(&ctx, "all_reduce waiting for rank 0 (%.0f ms late)", LATE_MS);
        double t0 = mp_now_s();
        weft_status_t st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
        double dt = mp_now_s() - t0;
        mp_check(&ctx, st == WEFT_ERR_TIMEOUT || (st == WEFT_ERR_PEER_LOST && ctx.nranks > 2),
                 "all_reduce returned %s, expected %s: %s", weft_status_string(st),
                 weft_status_string(WEFT_ERR_TIMEOUT), weft_last_error());
        mp_check(&ctx, dt >= 0.9 * TIMEOUT_S && dt < 2.5,
                 "all_reduce gave up after %.2f s with a %.1f s timeout", dt, TIMEOUT_S);
        mp_case(&ctx, "next operation after the timeout");
        t0 = mp_now_s();
        st = weft_barrier(ctx.comm, NULL);
        dt = mp_now_s() - t0;
        mp_check(&ctx, failed(st), "barrier after a timeout returned %s", weft_status_string(st));
        mp_check(&ctx, dt < 2.5, "barrier after a timeout took %.2f s", dt);
    }
    /* weft_comm_destroy frees the weft_malloc buffer too; after the error it is local. */
    mp_case(&ctx, "weft_comm_destroy after the timeout");
    mp_comm_close_within(&ctx, 2.5);
    return mp_finish(&ctx);
}
