/*
 * mp_fault_kill.c - a rank dies (SIGKILL) in the middle of a job.
 *
 * After a barrier the last rank sleeps 200 ms and kills itself with SIGKILL while the others are
 * waiting in an all_reduce. Every survivor's pending all_reduce and its next operation must
 * return WEFT_ERR_PEER_LOST (or WEFT_ERR_TIMEOUT) within 10 s (the suite runs it with
 * WEFT_TIMEOUT_S=60, so only detection of the dead peer can make it that fast), and
 * weft_comm_destroy must then return promptly. Survivors print a PASS line and exit 0; weftrun
 * exits 137 (the victim's SIGKILL). Run through mp_fault.sh, which checks exactly that and that
 * nothing is left behind in /dev/shm or /tmp. Needs at least 2 ranks.
 */
#include "harness.h"

#include <signal.h>
#include <unistd.h>

#define DETECT_LIMIT_S 10.0
#define COUNT 4099

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_kill");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
    int victim = ctx.nranks - 1;
    void *buf = NULL;
    mp_ok(&ctx, weft_malloc(ctx.comm, &buf, COUNT * 4), "weft_malloc");
    if (!buf)
        mp_fatal(&ctx, "weft_malloc returned NULL");
    mp_case(&ctx, "barrier before the kill");
    mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier");
    if (ctx.rank == victim) {
        mp_sleep_ms(200);
        kill(getpid(), SIGKILL);
    }

    mp_case(&ctx, "pending all_reduce while rank %d dies", victim);
    double t0 = mp_now_s();
    weft_status_t st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    double dt = mp_now_s() - t0;
    mp_check(&ctx, mp_lost_peer(st), "all_reduce returned %s, expected peer lost or timed out: %s",
             weft_status_string(st), weft_last_error());
    mp_check(&ctx, dt < DETECT_LIMIT_S, "all_reduce took %.2f s to notice the dead peer", dt);

    mp_case(&ctx, "next operation after the peer died");
    t0 = mp_now_s();
    st = weft_barrier(ctx.comm, NULL);
    dt = mp_now_s() - t0;
    mp_check(&ctx, mp_lost_peer(st), "barrier returned %s, expected peer lost or timed out: %s",
             weft_status_string(st), weft_last_error());
    mp_check(&ctx, dt < DETECT_LIMIT_S, "barrier took %.2f s", dt);
    t0 = mp_now_s();
    st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    dt = mp_now_s() - t0;
    mp_check(&ctx, mp_lost_peer(st),
             "second all_reduce returned %s, expected peer lost or timed out",
             weft_status_string(st));
    mp_check(&ctx, dt < DETECT_LIMIT_S, "second all_reduce took %.2f s", dt);

    /* weft_comm_destroy frees the weft_malloc buffer too. */
    mp_case(&ctx, "weft_comm_destroy after the peer died");
    mp_comm_close_within(&ctx, DETECT_LIMIT_S);
    return mp_finish(&ctx);
}
