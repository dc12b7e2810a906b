/*
 * test_wait_cap.c - the cap of a wait context (core/comm.h, weft_wait_ctx_t.cap_ns): the bound of
 * a call made of several waits, each of which otherwise gets the whole timeout from its own
 * first slow poll (weft_wait_begin). weft_comm_init is such a call: its registration waits each
 * took a fresh WEFT_TIMEOUT_S, so it could return two or three timeouts after it began, against
 * weft.h ("on error, within the timeout").
 *
 * The waits here are weft_comm_check polled every millisecond, as weft_flag_wait polls it once
 * spinning is over, on a communicator of which the check reads only the timeout and the failure
 * words. Cases: waits under a cap that comes before their timeout end at the cap, also when each
 * began afresh (weft_wait_begin keeps the cap); a cap later than the timeout changes nothing;
 * without a cap every wait gets the whole timeout again.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/comm.h"
#include "util/clock.h"
#include "util/log.h"

#define CHECK_TRAILER() printf(" [last error: %s]\n", weft_last_error())
#include "check.h"

static double since_s(uint64_t t0)
{
    return (double)(weft_now_ns() - t0) / 1e9;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One wait of ctx that polls for at most wait_s: WEFT_SUCCESS if no check failed by then, else
 * the failing check's status. */
static weft_status_t wait_for(weft_wait_ctx_t *ctx, double wait_s)
{
    uint64_t t0 = weft_now_ns();
    weft_wait_begin(ctx);
    while (since_s(t0) < wait_s) {
        weft_status_t st = weft_comm_check(ctx);
        if (st != WEFT_SUCCESS)
            return st;
        sleep_ms(1);
    }
    return WEFT_SUCCESS;
}

int main(void)
{
    setenv("WEFT_LOG_LEVEL", "none", 1); /* the timeouts below are expected */
    struct weft_comm *comm = calloc(1, sizeof *comm);
    if (!comm) {
        printf("FAIL: calloc\n");
        return 1;
    }

    /* Three waits under a timeout of 10 s and a cap 1 s away: the first two (0.3 s each) end
     * well, the third at the cap, long before its own deadline. */
    comm->timeout_s = 10.0;
    uint64_t t0 = weft_now_ns();
    weft_wait_ctx_t ctx = {.comm = comm, .cap_ns = weft_deadline_after_s(1.0), .what = "capped"};
    uint64_t cap = ctx.cap_ns;
    weft_status_t st = wait_for(&ctx, 0.3);
    CHECK(st == WEFT_SUCCESS, "first wait: %s", weft_status_string(st));
    st = wait_for(&ctx, 0.3);
    CHECK(st == WEFT_SUCCESS, "second wait: %s", weft_status_string(st));
    CHECK(ctx.cap_ns == cap, "weft_wait_begin changed the cap");
    st = wait_for(&ctx, 5.0);
    double dt = since_s(t0);
    CHECK(st == WEFT_ERR_TIMEOUT, "third wait: %s", weft_status_string(st));
    CHECK(dt >= 1.0 && dt < 3.0, "the capped waits ended after %.3f s (cap 1 s, timeout 10 s)", dt);
    CHECK(strstr(weft_last_error(), "capped") && strstr(weft_last_error(), "timeout"),
          "the message names neither the call nor the timeout");
    CHECK(atomic_load(&comm->failure_returned) == 1, "failure_returned not set");

    /* A cap past the timeout: the wait ends at its own deadline. */
    atomic_store(&comm->failure_returned, 0);
    comm->timeout_s = 0.2;
    t0 = weft_now_ns();
    ctx = (weft_wait_ctx_t){.comm = comm, .cap_ns = weft_deadline_after_s(10.0), .what = "late"};
    st = wait_for(&ctx, 5.0);
    dt = since_s(t0);
    CHECK(st == WEFT_ERR_TIMEOUT && dt >= 0.2 && dt < 2.0,
          "a wait whose cap is past its timeout: %s after %.3f s (timeout 0.2 s)",
          weft_status_string(st), dt);

    /* No cap (operations): every wait gets the whole timeout afresh, however long the earlier
     * ones took. */
    ctx = weft_comm_wait_ctx(comm, "uncapped");
    t0 = weft_now_ns();
    for (int i = 0; i < 3; i++) {
        st = wait_for(&ctx, 0.15);
        CHECK(st == WEFT_SUCCESS, "uncapped wait %d of 0.15 s (timeout 0.2 s each): %s", i,
              weft_status_string(st));
    }
    CHECK(since_s(t0) > 0.4, "the uncapped waits took %.3f s in all", since_s(t0));

    free(comm);
    printf("test_wait_cap: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
