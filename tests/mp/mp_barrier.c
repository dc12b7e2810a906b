/*
 * mp_barrier.c - weft_barrier must not return on any rank before every rank has entered it.
 *
 * CLOCK_MONOTONIC is one clock for all processes of a host, so each rank records when it
 * entered and when it left the barrier; after each round the ranks all-gather these times and
 * check min(left) >= max(entered). In each round one rank (rotating) arrives 30 ms late, so a
 * barrier that does not wait is caught. Then many barriers back to back. Under each
 * registration mode.
 */
#include "harness.h"

#include <inttypes.h>
#include <stdlib.h>

#define LATE_MS 30.0

static uint64_t now_ns(void)
{
    return (uint64_t)(mp_now_s() * 1e9);
}

static void timed_round(mp_ctx_t *ctx, int late)
{
    int n = ctx->nranks;
    mp_case(ctx, "barrier round, rank %d late", late);
    uint64_t mine[2];
    uint64_t *all = malloc(2 * (size_t)n * sizeof *all);
    if (!all)
        mp_fatal(ctx, "out of memory");
    if (ctx->rank == late)
        mp_sleep_ms(LATE_MS);
    mine[0] = now_ns();
    weft_status_t st = weft_barrier(ctx->comm, NULL);
    mine[1] = now_ns();
    mp_ok(ctx, st, "weft_barrier");
    mp_ok(ctx, weft_all_gather(ctx->comm, mine, all, 2, WEFT_UINT64, NULL), "weft_all_gather");
    uint64_t max_in = 0, min_out = UINT64_MAX;
    int max_in_rank = 0, min_out_rank = 0;
    for (int p = 0; p < n; p++) {
        if (all[2 * p] > max_in) {
            max_in = all[2 * p];
            max_in_rank = p;
        }
        if (all[2 * p + 1] < min_out) {
            min_out = all[2 * p + 1];
            min_out_rank = p;
        }
    }
    mp_check(ctx, all[2 * ctx->rank] == mine[0] && all[2 * ctx->rank + 1] == mine[1],
             "all_gather of the times returned other values for this rank");
    mp_check(ctx, min_out >= max_in, "rank %d left the barrier %.3f ms before rank %d entered it",
             min_out_rank, (double)(max_in - min_out) * 1e-6, max_in_rank);
    free(all);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_barrier");
    int rounds = ctx.quick ? 2 : ctx.nranks;
    int burst = ctx.quick ? 50 : 300;
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        for (int r = 0; r < rounds; r++)
            timed_round(&ctx, (r + reg) % ctx.nranks);
        mp_case(&ctx, "%d barriers back to back", burst);
        double t0 = mp_now_s();
        for (int i = 0; i < burst; i++)
            if (!mp_ok(&ctx, weft_barrier(ctx.comm, NULL), "weft_barrier"))
                break;
        mp_note(&ctx, "reg=%s: %.1f us per barrier", mp_reg_name(ctx.reg),
                (mp_now_s() - t0) * 1e6 / burst);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
