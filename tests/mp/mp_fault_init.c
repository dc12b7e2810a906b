/*
 * mp_fault_init.c - one rank fails weft_comm_init on its own: nobody waits for the timeout.
 *
 * The failing rank (MP_INIT_FAIL_RANK, a test-only variable: "first", rank 0, which hosts the
 * rendezvous store, the default; or "last") asks for a staging scratch (1 TiB) larger than its
 * window slice, so its weft_comm_init fails with WEFT_ERR_NO_MEMORY after the control sockets
 * are up and before it publishes its part of the next all-gather over the store. The others
 * wait on the store for that part, which will never come. With a timeout of TIMEOUT_S, every
 * rank must return within INIT_LIMIT_S: the failing rank with WEFT_ERR_NO_MEMORY (rank 0 must
 * not wait for its peers to leave its store), the others with WEFT_ERR_PEER_LOST (the failing
 * rank told the store, which answers no wait for a key that does not exist). Needs at least 2
 * ranks. Does not use mp_init, whose communicator would fail on that rank.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_S 30.0
#define INIT_LIMIT_S 5.0

int main(void)
{
    mp_ctx_t ctx;
    mp_init_without_comm(&ctx, "mp_fault_init");
    const char *which = getenv("MP_INIT_FAIL_RANK");
    if (which && *which && strcmp(which, "first") != 0 && strcmp(which, "last") != 0)
        mp_fatal(&ctx, "MP_INIT_FAIL_RANK=%s is not first or last", which);
    int failing = which && strcmp(which, "last") == 0 ? ctx.nranks - 1 : 0;
    /* Before the first weft call: the configuration is read once per process. */
    if (ctx.rank == failing && setenv("WEFT_STAGING_BYTES", "1T", 1) != 0)
        mp_fatal(&ctx, "setenv");

    mp_case(&ctx, "weft_comm_init (timeout %.0f s) while rank %d fails on its own", TIMEOUT_S,
            failing);
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    cfg.timeout_s = TIMEOUT_S;
    weft_comm_t comm = NULL;
    double t0 = mp_now_s();
    weft_status_t st = weft_comm_init(&comm, &cfg);
    double dt = mp_now_s() - t0;
    weft_status_t want = ctx.rank == failing ? WEFT_ERR_NO_MEMORY : WEFT_ERR_PEER_LOST;
    mp_check(&ctx, st == want, "weft_comm_init returned %s, expected %s: %s",
             weft_status_string(st), weft_status_string(want), weft_last_error());
    mp_check(&ctx, dt < INIT_LIMIT_S, "weft_comm_init took %.1f s (limit %.0f s, timeout %.0f s)",
             dt, INIT_LIMIT_S, TIMEOUT_S);
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
    return mp_finish(&ctx);
}
