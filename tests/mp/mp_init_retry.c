/*
 * mp_init_retry.c - every weft_comm_init call counts, however it fails: the k-th call of each
 * rank meets the k-th of the others in the rendezvous store (weft.h).
 *
 * Two rounds. In each, rank 1 makes a call that fails at once on its own (round 1: a config
 * with host_workers 0; round 2: a NULL comm pointer) while the other ranks make a valid call
 * with a timeout of SHORT_TIMEOUT_S: they wait in the store for rank 1 and fail too (a timeout,
 * or PEER_LOST once rank 0 has given up and told the store). Rank 1 retries at once with a valid
 * call, the others after their failure; that call must succeed on every rank, and an all_reduce
 * on it must be exact. A call that consumed no number (as a failed argument check once did) made
 * rank 1's retry join its peers' failed call (which then succeeded where it must fail), or, had
 * it come later, a store of another number: every later weft_comm_init of the job failed.
 * Needs at least 2 ranks. Does not use mp_init, so that the calls under test are the process's
 * first.
 */
#include "harness.h"

#include <stdio.h>
#include <string.h>

#define SHORT_TIMEOUT_S 1.0
#define FAIL_LIMIT_S 10.0 /* the failed calls: SHORT_TIMEOUT_S, with room for a loaded host */
#define COUNT 1000        /* elements of the all_reduce on the communicator that must work */

/* Round `round`'s failing call on rank 1, or its peers' valid call with a short timeout. */
static void failed_call(mp_ctx_t *ctx, int round)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    weft_comm_t comm = NULL;
    const char *how = round == 1 ? "host_workers 0" : "a NULL comm";
    mp_case(ctx, "round %d: weft_comm_init with %s on rank 1, timeout %.0f s elsewhere", round, how,
            SHORT_TIMEOUT_S);
    double t0 = mp_now_s();
    weft_status_t st;
    if (ctx->rank == 1) {
        if (round == 1)
            cfg.host_workers = 0;
        st = weft_comm_init(round == 1 ? &comm : NULL, &cfg);
        mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT,
                         round == 1 ? "host_workers" : "comm is NULL", how);
    } else {
        cfg.timeout_s = SHORT_TIMEOUT_S;
        st = weft_comm_init(&comm, &cfg);
        mp_check(ctx, mp_lost_peer(st),
                 "weft_comm_init returned %s while rank 1's call failed, expected a timeout or "
                 "a lost peer: %s",
                 weft_status_string(st), weft_last_error());
    }
    double dt = mp_now_s() - t0;
    mp_check(ctx, dt < FAIL_LIMIT_S, "the failed weft_comm_init took %.1f s (limit %.0f s)", dt,
             FAIL_LIMIT_S);
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
}

/* The next call of every rank: it must succeed, and so must an all_reduce on it. */
static void valid_call(mp_ctx_t *ctx, int round)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    mp_case(ctx, "round %d: weft_comm_init on every rank after the failed one", round);
    mp_comm_open_cfg(ctx, &cfg); /* exits on failure */
    mp_case(ctx, "round %d: all_reduce of %d float32 elements", round, COUNT);
    float *in = NULL, *out = NULL;
    mp_ok(ctx, weft_malloc(ctx->comm, (void **)&in, COUNT * sizeof *in), "weft_malloc");
    mp_ok(ctx, weft_malloc(ctx->comm, (void **)&out, COUNT * sizeof *out), "weft_malloc");
    if (!in || !out)
        mp_fatal(ctx, "weft_malloc returned NULL");
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, COUNT, in);
    memset(out, 0xA5, COUNT * sizeof *out);
    weft_status_t st = weft_all_reduce(ctx->comm, in, out, COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", out, WEFT_FLOAT32, WEFT_SUM, 0, COUNT);
    mp_ok(ctx, weft_free(ctx->comm, in), "weft_free");
    mp_ok(ctx, weft_free(ctx->comm, out), "weft_free");
    mp_comm_close(ctx);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init_without_comm(&ctx, "mp_init_retry");
    for (int round = 1; round <= 2; round++) {
        failed_call(&ctx, round);
        valid_call(&ctx, round);
    }
    return mp_finish(&ctx);
}
