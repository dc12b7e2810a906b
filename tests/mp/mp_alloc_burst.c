/*
 * mp_alloc_burst.c - a burst of allocations under a low limit of open files.
 *
 * Each rank lowers its soft RLIMIT_NOFILE to NOFILE_LIMIT, then, under roa and again under jit,
 * opens a communicator and allocates BURST buffers of 4 KiB back to back with weft_malloc. On
 * the host backend each is registered by exporting a descriptor to every peer over the control
 * sockets. Under roa the registrations all start at once: a registrar that holds a descriptor
 * per queued registration, or one per peer message, runs out of descriptors long before the
 * burst ends and the communicator fails on every rank; under jit, allocations that each held a
 * descriptor until their first use (a memfd per allocation) made weft_malloc itself fail. The
 * limit must hold instead, and weft_malloc must never wait (WEFT_REGISTRATION_BACKLOG bounds
 * what the registrar sends, not the caller). Then an in-place all-reduce (uint32 SUM, exact)
 * runs on every buffer (under jit, each registers its buffer), and every registration that
 * started must complete.
 */
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define NOFILE_LIMIT 128
#define BURST 2000          /* many times NOFILE_LIMIT */
#define ELEMS 1024          /* per buffer: 4 KiB of uint32, above the inline limit */
#define SETTLE_LIMIT_S 30.0 /* acknowledgements of the last registrations */

static uint32_t input(const mp_ctx_t *ctx, int buf, int rank, int e)
{
    return (uint32_t)mp_hash(ctx->seed, (uint64_t)buf, (uint64_t)rank, (uint64_t)e);
}

static void burst(mp_ctx_t *ctx, weft_registration_t mode, uint32_t **bufs)
{
    mp_comm_open(ctx, mode);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);

    mp_case(ctx, "%s: %d weft_malloc of %zu bytes back to back, %d open files at most",
            mp_reg_name(mode), BURST, ELEMS * sizeof **bufs, NOFILE_LIMIT);
    int n = 0;
    for (; n < BURST; n++) {
        if (!mp_ok(ctx, weft_malloc(ctx->comm, (void **)&bufs[n], ELEMS * sizeof **bufs),
                   "weft_malloc"))
            break;
        for (int e = 0; e < ELEMS; e++)
            bufs[n][e] = input(ctx, n, ctx->rank, e);
    }

    mp_case(ctx, "%s: in-place all_reduce (uint32 sum) on each of the %d buffers",
            mp_reg_name(mode), n);
    for (int i = 0; i < n && ctx->failures == 0; i++) {
        mp_ok(ctx, weft_all_reduce(ctx->comm, bufs[i], bufs[i], ELEMS, WEFT_UINT32, WEFT_SUM, NULL),
              "weft_all_reduce");
        size_t wrong = 0;
        for (int e = 0; e < ELEMS; e++) {
            uint32_t want = 0;
            for (int r = 0; r < ctx->nranks; r++)
                want += input(ctx, i, r, e);
            wrong += bufs[i][e] != want;
        }
        mp_check(ctx, wrong == 0, "buffer %d: %zu elements wrong", i, wrong);
    }

    mp_case(ctx, "%s: registrations after the burst", mp_reg_name(mode));
    mp_check_registrations_settle(ctx, &s0, BURST, SETTLE_LIMIT_S, &s1);
    for (int i = 0; i < n; i++)
        mp_ok(ctx, weft_free(ctx->comm, bufs[i]), "weft_free");
    mp_comm_close(ctx);
}

int main(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur < NOFILE_LIMIT) {
        printf("FAIL mp_alloc_burst: RLIMIT_NOFILE is below %d already (%s)\n", NOFILE_LIMIT,
               strerror(errno));
        return 1;
    }
    lim.rlim_cur = NOFILE_LIMIT;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
        printf("FAIL mp_alloc_burst: setrlimit(RLIMIT_NOFILE, %d): %s\n", NOFILE_LIMIT,
               strerror(errno));
        return 1;
    }
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_alloc_burst");
    uint32_t **bufs = calloc(BURST, sizeof *bufs);
    if (!bufs)
        mp_fatal(&ctx, "calloc");
    burst(&ctx, WEFT_REGISTRATION_ROA, bufs);
    if (ctx.failures == 0)
        burst(&ctx, WEFT_REGISTRATION_JIT, bufs);
    free(bufs);
    return mp_finish(&ctx);
}
