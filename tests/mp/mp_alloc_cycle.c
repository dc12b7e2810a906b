/*
 * mp_alloc_cycle.c - many weft_malloc / weft_free cycles hold no resources beyond the live
 * allocations.
 *
 * Each rank allocates, uses (an all-gather from the new buffer, verified) and frees a buffer,
 * CYCLES times, more than the default limit of open files (1024); on the host backend every
 * allocation is a memfd, so a registration that kept its descriptor (or its memory) until
 * weft_comm_destroy fails the loop. Afterwards the process holds no more descriptors than
 * before, and every registration that started has completed (with one rank as well: there is
 * no peer to acknowledge it, so it completes at once). Under roa.
 */
#include "harness.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CYCLES 1500
#define ELEMS 1024          /* per rank: 4 KiB of uint32, above the inline limit */
#define FD_SLACK 4          /* descriptors a run may open for good (logging, caches) */
#define SETTLE_LIMIT_S 30.0 /* acknowledgements of the last registrations */

static int open_fds(mp_ctx_t *ctx)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        mp_fatal(ctx, "opendir /proc/self/fd");
    int n = 0;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_alloc_cycle");
    mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
    int n = ctx.nranks;
    uint32_t *gathered = malloc((size_t)n * ELEMS * sizeof *gathered);
    if (!gathered)
        mp_fatal(&ctx, "malloc");
    weft_stats_t s0, s1;
    mp_stats(&ctx, &s0);
    int fds0 = open_fds(&ctx);

    mp_case(&ctx, "%d cycles of weft_malloc, all_gather from it, weft_free", CYCLES);
    for (int i = 0; i < CYCLES && ctx.failures == 0; i++) {
        uint32_t *buf = NULL;
        if (!mp_ok(&ctx, weft_malloc(ctx.comm, (void **)&buf, ELEMS * sizeof *buf), "weft_malloc"))
            break;
        for (int e = 0; e < ELEMS; e++)
            buf[e] = (uint32_t)mp_hash(ctx.seed, (uint64_t)i, (uint64_t)ctx.rank, (uint64_t)e);
        memset(gathered, 0xa5, (size_t)n * ELEMS * sizeof *gathered);
        mp_ok(&ctx, weft_all_gather(ctx.comm, buf, gathered, ELEMS, WEFT_UINT32, NULL),
              "weft_all_gather");
        size_t wrong = 0;
        for (int r = 0; r < n; r++) {
            for (int e = 0; e < ELEMS; e++)
                wrong += gathered[(size_t)r * ELEMS + (size_t)e] !=
                         (uint32_t)mp_hash(ctx.seed, (uint64_t)i, (uint64_t)r, (uint64_t)e);
        }
        mp_check(&ctx, wrong == 0, "cycle %d: %zu gathered elements wrong", i, wrong);
        mp_ok(&ctx, weft_free(ctx.comm, buf), "weft_free");
    }

    mp_case(&ctx, "resources after the cycles");
    mp_check_registrations_settle(&ctx, &s0, CYCLES, SETTLE_LIMIT_S, &s1);
    int fds1 = open_fds(&ctx);
    mp_check(&ctx, fds1 <= fds0 + FD_SLACK, "open descriptors: %d before the cycles, %d after",
             fds0, fds1);
    free(gathered);
    return mp_finish(&ctx);
}
