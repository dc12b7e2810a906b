/*
 * mp_window.c - the shadow window's agreement when the ranks' address spaces are fragmented,
 * each differently.
 *
 * Before each communicator every rank reserves a zone of ZONE_WINDOWS windows where the kernel
 * puts large mappings (top-down, below its mmap base, which differs per process), then turns it
 * into blockers: one BLOCKER_BYTES PROT_NONE mapping at a random offset in every half-window
 * chunk, the rest unmapped. No gap of the zone holds a window, so each rank's own free pick lies
 * below its zone, often inside a peer's; the ranks must still agree on a common range. Then an
 * in-place all-gather of WINDOW_COUNT random uint64 elements per rank (32 KiB: far above what
 * travels inline in the handshake) on weft_malloc memory must be exact and take the zero-copy
 * path, so that every peer read this rank's block through the shadow window; and the buffer must
 * lie outside this rank's blockers. A round in which a rank placed no blocker at all fails (it
 * would test nothing); one in which some could not be placed says so. The window size comes from
 * WEFT_WINDOW_SLICE_BYTES (set by CTest).
 */
#include "harness.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define ZONE_WINDOWS 8
#define BLOCKER_BYTES ((size_t)2 << 20)
#define ROUNDS 3
#define WINDOW_COUNT ((size_t)4099) /* uint64 elements per rank */

typedef struct blockers {
    uintptr_t at[2 * ZONE_WINDOWS];
    int n;
} blockers_t;

static size_t window_bytes(mp_ctx_t *ctx)
{
    uint64_t slice = mp_env_bytes(ctx, "WEFT_WINDOW_SLICE_BYTES", 0);
    if (slice == 0)
        slice = (uint64_t)64 << 30; /* the host backend's default */
    return (size_t)slice * (size_t)ctx->nranks;
}

static void fragment(mp_ctx_t *ctx, int round, size_t window, blockers_t *b)
{
    size_t chunk = window / 2, zone = chunk * 2 * ZONE_WINDOWS;
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    void *z = mmap(NULL, zone, PROT_NONE, flags, -1, 0);
    if (z == MAP_FAILED)
        mp_fatal(ctx, "mmap of a %zu-byte zone failed", zone);
    munmap(z, zone);
    b->n = 0;
    for (int i = 0; i < 2 * ZONE_WINDOWS; i++) {
        uint64_t h = mp_hash(ctx->seed, (uint64_t)round, (uint64_t)ctx->rank, (uint64_t)i);
        uintptr_t at = (uintptr_t)z + (size_t)i * chunk +
                       (uintptr_t)(h % ((chunk - BLOCKER_BYTES) / BLOCKER_BYTES)) * BLOCKER_BYTES;
        void *p = mmap((void *)at, BLOCKER_BYTES, PROT_NONE, flags | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == MAP_FAILED)
            continue;          /* another thread took that spot meanwhile: one blocker fewer */
        if (p != (void *)at) { /* kernels before 4.17 ignore MAP_FIXED_NOREPLACE */
            munmap(p, BLOCKER_BYTES);
            continue;
        }
        b->at[b->n++] = at;
    }
}

static void unblock(const blockers_t *b)
{
    for (int i = 0; i < b->n; i++)
        munmap((void *)b->at[i], BLOCKER_BYTES);
}

static void check_round(mp_ctx_t *ctx, const blockers_t *b)
{
    int n = ctx->nranks;
    size_t block = WINDOW_COUNT * sizeof(uint64_t), bytes = (size_t)n * block;
    unsigned char *buf = NULL;
    if (!mp_ok(ctx, weft_malloc(ctx->comm, (void **)&buf, bytes), "weft_malloc"))
        return;
    for (int i = 0; i < b->n; i++)
        mp_check(ctx,
                 (uintptr_t)buf + bytes <= b->at[i] || (uintptr_t)buf >= b->at[i] + BLOCKER_BYTES,
                 "weft_malloc returned %p inside a blocker at 0x%" PRIxPTR, (void *)buf, b->at[i]);
    memset(buf, 0xA5, bytes);
    unsigned char *mine = buf + (size_t)ctx->rank * block;
    mp_raw_fill(ctx, WEFT_UINT64, ctx->rank, 0, WINDOW_COUNT, mine);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_gather(ctx->comm, mine, buf, WINDOW_COUNT, WEFT_UINT64, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_gather")) {
        for (int p = 0; p < n; p++) {
            char what[64];
            snprintf(what, sizeof what, "recvbuf block %d", p);
            mp_raw_check(ctx, what, buf + (size_t)p * block, WEFT_UINT64, p, 0, WINDOW_COUNT);
        }
        /* Zero-copy: the peers read this rank's block in place, through the window. */
        mp_check_path(ctx, &s0, &s1, MP_BUF_REGISTERED, block);
    }
    mp_ok(ctx, weft_free(ctx->comm, buf), "weft_free");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_window");
    size_t window = window_bytes(&ctx);
    for (int round = 0; round < ROUNDS; round++) {
        blockers_t b;
        fragment(&ctx, round, window, &b);
        mp_case(&ctx, "round %d: %d blockers per %zu-byte window", round, b.n, window);
        /* Without blockers this rank's address space is as the kernel left it: the round would
         * pass without testing the agreement it is about. */
        mp_check(&ctx, b.n > 0, "round %d: none of the %d blockers could be placed", round,
                 2 * ZONE_WINDOWS);
        if (b.n > 0 && b.n < 2 * ZONE_WINDOWS)
            printf("mp_window rank=%d: round %d: %d of %d blockers placed (the others' spots were "
                   "taken): the zone may hold a window\n",
                   ctx.rank, round, b.n, 2 * ZONE_WINDOWS);
        mp_comm_open(&ctx, WEFT_REGISTRATION_ROA);
        mp_case(&ctx, "round %d: in-place all-gather of %zu uint64 per rank", round, WINDOW_COUNT);
        check_round(&ctx, &b);
        mp_comm_close(&ctx);
        unblock(&b);
    }
    return mp_finish(&ctx);
}
