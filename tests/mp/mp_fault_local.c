/*
 * mp_fault_local.c - a rank that fails on its own before its peers hear from it.
 *
 * In a window of 64 MiB per rank (WEFT_WINDOW_SLICE_BYTES, set by the test's environment), the
 * last rank holds 40 MiB of weft_malloc memory and all-reduces 40 MiB of malloc'd memory, which
 * must be copied into staging scratch that no longer fits: it gets WEFT_ERR_NO_MEMORY before its
 * descriptor reaches the peers. The peers, all-reducing registered memory, wait in the handshake
 * for that descriptor: they must get WEFT_ERR_PEER_LOST at once (within 5 s; the communicator's
 * timeout is 60 s), not at the timeout (a peer still in the set-up barrier gets it there). The next
 * operation fails at once on every rank (the last rank's sequence number has moved on without its
 * peers'), and destroy is quick. Needs at least 2 ranks.
 */
#include "harness.h"

#include <stdlib.h>

#define TIMEOUT_S 60.0
#define PROMPT_S 5.0
#define PAUSE_MS 100.0
#define COUNT ((size_t)10 << 20) /* float32: 40 MiB */

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_fault_local");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    mp_comm_reopen_with_timeout(&ctx, TIMEOUT_S);
    int last = ctx.rank == ctx.nranks - 1;
    float *buf = NULL;
    void *hog = NULL;
    if (last) {
        buf = malloc(COUNT * sizeof(float));
        mp_ok(&ctx, weft_malloc(ctx.comm, &hog, COUNT * sizeof(float)), "weft_malloc (hog)");
    } else {
        mp_ok(&ctx, weft_malloc(ctx.comm, (void **)&buf, COUNT * sizeof(float)), "weft_malloc");
    }
    if (!buf)
        mp_fatal(&ctx, "allocation failed");
    for (size_t i = 0; i < COUNT; i++)
        buf[i] = 1.0f;
    /* Everyone is set up before the last rank fails: its failure closes the connections, and a
     * peer still in weft_malloc would get WEFT_ERR_PEER_LOST there. The barrier does not make
     * every rank leave it before the last one fails, though: that rank may leave as soon as it
     * saw every arrival, while a peer still waits for a third rank's post to it. The last rank
     * gives its peers PAUSE_MS to reach the all_reduce's handshake (the wait this test is about);
     * a peer that is still in the barrier then gets the failure there, as promptly. */
    mp_case(&ctx, "set-up barrier");
    double t0 = mp_now_s();
    weft_status_t st = weft_barrier(ctx.comm, NULL);
    int late = !last && st == WEFT_ERR_PEER_LOST;
    if (!late)
        mp_ok(&ctx, st, "weft_barrier (set up)");
    mp_check(&ctx, mp_now_s() - t0 < PROMPT_S, "set-up barrier took %.2f s", mp_now_s() - t0);
    if (last)
        mp_sleep_ms(PAUSE_MS);

    mp_case(&ctx, "all_reduce with the last rank out of staging memory");
    t0 = mp_now_s();
    st = weft_all_reduce(ctx.comm, buf, buf, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    double dt = mp_now_s() - t0;
    weft_status_t want = last ? WEFT_ERR_NO_MEMORY : WEFT_ERR_PEER_LOST;
    mp_check(&ctx, st == want, "all_reduce returned %s, expected %s: %s", weft_status_string(st),
             weft_status_string(want), weft_last_error());
    mp_check(&ctx, dt < PROMPT_S, "all_reduce took %.2f s (timeout %.0f s)", dt, TIMEOUT_S);

    mp_case(&ctx, "the next operation");
    t0 = mp_now_s();
    st = weft_barrier(ctx.comm, NULL);
    dt = mp_now_s() - t0;
    mp_check(&ctx, st != WEFT_SUCCESS, "barrier after the failure succeeded");
    mp_check(&ctx, dt < PROMPT_S, "barrier after the failure took %.2f s", dt);

    mp_case(&ctx, "weft_comm_destroy after the failure");
    mp_comm_close_within(&ctx, PROMPT_S);
    if (last)
        free(buf);
    return mp_finish(&ctx);
}
