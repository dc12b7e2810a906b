/*
 * mp_alloc_burst.c - a burst of allocations under a low limit of open files.
 *
 * Each rank lowers its soft RLIMIT_NOFILE to NOFILE_LIMIT, opens a communicator (roa) and
 * allocates BURST buffers of 4 KiB back to back with weft_malloc. On the host backend each is a
 * memfd that its registration exports to every peer over the control sockets, so a registrar
 * that holds a descriptor per queued registration, or one per peer message, runs out of
 * descriptors long before the burst ends and the communicator fails on every rank. The limit
 * must hold instead (WEFT_REGISTRATION_BACKLOG makes weft_malloc wait for acknowledgements).
 * Then an in-place all-reduce (uint32 SUM, exact) runs on every buffer, and every registration
 * that started must complete. Under roa.
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
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
    uint32_t **bufs = calloc(BURST, sizeof *bufs);
    if (!bufs)
        mp_fatal(&ctx, "calloc");
    weft_stats_t s0, s1;
    mp_stats(&ctx, &s0);

    mp_case(&ctx, "%d weft_malloc of %zu bytes back to back, %d open files at most", BURST,
            ELEMS * sizeof **bufs, NOFILE_LIMIT);
    int n = 0;
    for (; n < BURST; n++) {
        if (!mp_ok(&ctx, weft_malloc(ctx.comm, (void **)&bufs[n], ELEMS * sizeof **bufs),
                   "weft_malloc"))
            break;
        for (int e = 0; e < ELEMS; e++)
            bufs[n][e] = input(&ctx, n, ctx.rank, e);
    }

    mp_case(&ctx, "in-place all_reduce (uint32 sum) on each of the %d buffers", n);
    for (int i = 0; i < n && ctx.failures == 0; i++) {
        mp_ok(&ctx, weft_all_reduce(ctx.comm, bufs[i], bufs[i], ELEMS, WEFT_UINT32, WEFT_SUM, NULL),
              "weft_all_reduce");
        size_t wrong = 0;
        for (int e = 0; e < ELEMS; e++) {
            uint32_t want = 0;
            for (int r = 0; r < ctx.nranks; r++)
                want += input(&ctx, i, r, e);
            wrong += bufs[i][e] != want;
        }
        mp_check(&ctx, wrong == 0, "buffer %d: %zu elements wrong", i, wrong);
    }

    mp_case(&ctx, "registrations after the burst");
    mp_check_registrations_settle(&ctx, &s0, BURST, SETTLE_LIMIT_S, &s1);
    for (int i = 0; i < n; i++)
        mp_ok(&ctx, weft_free(ctx.comm, bufs[i]), "weft_free");
    free(bufs);
    return mp_finish(&ctx);
}
