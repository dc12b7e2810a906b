/*
 * mp_fault_destroy.c - destroying a failed communicator is a loss to its peers, not a close.
 *
 * A first communicator (default timeout) synchronises the ranks and is destroyed; the second
 * has timeout_s = TIMEOUT_S. Rank 0 then sleeps LATE_S before its next barrier, so the others'
 * barrier fails (WEFT_ERR_TIMEOUT, or WEFT_ERR_PEER_LOST once another of them destroyed) and
 * they destroy their failed communicator, which must return promptly, then stay alive for
 * LINGER_S (so that their exit cannot be what tells rank 0). A failed communicator must not say
 * BYE: rank 0's next barrier and the one after must both return WEFT_ERR_PEER_LOST within
 * DETECT_LIMIT_S, where an orderly close would leave the first to succeed on the peers' stale
 * entries and the second to wait out the timeout. All ranks exit 0 with a PASS line
 * (mp_fault.sh checks them). Needs at least 2 ranks.
 */
#include "harness.h"

#define TIMEOUT_S 2.0
#define LATE_S (TIMEOUT_S + 2.0)      /* rank 0 comes back after the others gave up and destroyed */
#define LINGER_S (LATE_S + TIMEOUT_S) /* past rank 0's checks, even had they waited it out */
#define DETECT_LIMIT_S 0.5
#define DESTROY_LIMIT_S 1.0

static void timed_destroy(mp_ctx_t *ctx)
{
    mp_case(ctx, "weft_comm_destroy of the failed communicator");
    mp_comm_close_within(ctx, DESTROY_LIMIT_S);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_destroy");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_reopen_with_timeout(&ctx, TIMEOUT_S);
    mp_case(&ctx, "barrier with a %.0f s timeout, everyone on time", TIMEOUT_S);
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");

    if (ctx.rank != 0) {
        mp_case(&ctx, "barrier while rank 0 is %.0f s late", LATE_S);
        weft_status_t st = weft_barrier(ctx.comm, NULL);
        mp_check(&ctx, st == WEFT_ERR_TIMEOUT || st == WEFT_ERR_PEER_LOST,
                 "barrier returned %s, expected timed out or peer lost: %s", weft_status_string(st),
                 weft_last_error());
        timed_destroy(&ctx);
        mp_sleep_ms(LINGER_S * 1000);
        return mp_finish(&ctx);
    }

    mp_sleep_ms(LATE_S * 1000);
    for (int i = 0; i < 2; i++) {
        mp_case(&ctx, "barrier %d after the peers destroyed their failed communicators", i + 1);
        double t0 = mp_now_s();
        weft_status_t st = weft_barrier(ctx.comm, NULL);
        double dt = mp_now_s() - t0;
        mp_check(&ctx, st == WEFT_ERR_PEER_LOST,
                 "barrier returned %s after %.2f s, expected %s: %s", weft_status_string(st), dt,
                 weft_status_string(WEFT_ERR_PEER_LOST), weft_last_error());
        mp_check(&ctx, dt < DETECT_LIMIT_S, "barrier took %.2f s (limit %.1f s)", dt,
                 DETECT_LIMIT_S);
    }
    timed_destroy(&ctx);
    return mp_finish(&ctx);
}
