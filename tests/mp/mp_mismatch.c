/*
 * mp_mismatch.c - ranks that disagree on the operation are detected at the entry handshake.
 *
 * Each case has the ranks call different collectives, or the same collective with different
 * counts (0 on one rank included), dtypes (of the same element size, so the byte counts agree),
 * reductions or roots, or
 * all_to_allv with sendcounts[p] on rank r different from recvcounts[r] on rank p. Every rank
 * must get WEFT_ERR_MISMATCH (with a non-empty weft_last_error()), and the communicator must stay
 * usable: a valid all_reduce right after each case gives the exact result, with a small count
 * (inline in the handshake) and with MESH_COUNT elements (the mesh). Most cases move at most 136
 * bytes per pair, so they travel inline; the *_MESH cases move 16 KiB and more on every rank, and
 * CASE_ALL_REDUCE_INLINE_VS_MESH has rank 0 inline while the others take the mesh.
 * CASE_ALL_REDUCE_INPLACE_MIXED agrees on every argument, but rank 0 is in place and the others
 * are not, at a size where the default thresholds (docs/config.md) give in place the two-shot
 * form and out of place the one-shot form: the forms cannot meet, so every rank must get
 * WEFT_ERR_MISMATCH, not a timeout. Under each registration mode. Needs at least 2 ranks.
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

#define ELEMS 64         /* per-peer capacity of the buffers, in elements of up to 8 bytes */
#define MESH_COUNT 4099  /* elements of 4 bytes: 16 KiB, far beyond the inline payload */
#define BIG_COUNT 100000 /* elements of 4 bytes of CASE_ALL_REDUCE_INLINE_VS_MESH */
/* Elements of 4 bytes of CASE_ALL_REDUCE_INPLACE_MIXED: 1.5 MiB, from the in-place two-shot
 * threshold (1 MiB) up and below the out-of-place one (2 MiB; never with 2 ranks). */
#define MIXED_COUNT ((size_t)3 << 17)

typedef enum {
    CASE_ALL_REDUCE_VS_ALL_GATHER,
    CASE_ALL_REDUCE_VS_BARRIER,
    CASE_BROADCAST_VS_ALL_TO_ALL,
    CASE_REDUCE_SCATTER_VS_ALL_REDUCE,
    CASE_ALL_REDUCE_COUNT,
    CASE_ALL_GATHER_COUNT,
    CASE_ALL_TO_ALL_COUNT,
    CASE_ALL_REDUCE_DTYPE,
    CASE_BROADCAST_DTYPE,
    CASE_ALL_REDUCE_OP,
    CASE_REDUCE_SCATTER_OP,
    CASE_BROADCAST_ROOT,
    CASE_ALL_TO_ALLV_COUNTS,
    CASE_ALL_REDUCE_COUNT_MESH,
    CASE_ALL_GATHER_COUNT_MESH,
    CASE_ALL_REDUCE_INLINE_VS_MESH,
    CASE_ALL_REDUCE_ZERO,
    CASE_BROADCAST_ZERO_MESH,
    CASE_ALL_REDUCE_INPLACE_MIXED,
    NUM_CASES
} case_t;

static const char *const case_names[NUM_CASES] = {
    [CASE_ALL_REDUCE_VS_ALL_GATHER] = "even ranks all_reduce, odd ranks all_gather",
    [CASE_ALL_REDUCE_VS_BARRIER] = "rank 0 barrier, others all_reduce",
    [CASE_BROADCAST_VS_ALL_TO_ALL] = "last rank all_to_all, others broadcast",
    [CASE_REDUCE_SCATTER_VS_ALL_REDUCE] = "rank 1 reduce_scatter, others all_reduce",
    [CASE_ALL_REDUCE_COUNT] = "all_reduce, rank 0 count 17, others 16",
    [CASE_ALL_GATHER_COUNT] = "all_gather, last rank count 9, others 8",
    [CASE_ALL_TO_ALL_COUNT] = "all_to_all, rank 1 count 5, others 4",
    [CASE_ALL_REDUCE_DTYPE] = "all_reduce, rank 1 float32, others int32",
    [CASE_BROADCAST_DTYPE] = "broadcast, rank 0 bfloat16, others float16",
    [CASE_ALL_REDUCE_OP] = "all_reduce, rank 0 max, others sum",
    [CASE_REDUCE_SCATTER_OP] = "reduce_scatter, last rank min, others sum",
    [CASE_BROADCAST_ROOT] = "broadcast, rank 0 root 0, others root 1",
    [CASE_ALL_TO_ALLV_COUNTS] = "all_to_allv, rank 0 expects 3 elements from rank 1, it sends 2",
    [CASE_ALL_REDUCE_COUNT_MESH] = "all_reduce on the mesh, rank 0 count 4100, others 4099",
    [CASE_ALL_GATHER_COUNT_MESH] = "all_gather on the mesh, last rank count 4099, others 4100",
    [CASE_ALL_REDUCE_INLINE_VS_MESH] = "all_reduce, rank 0 count 16 (inline), others 100000 (mesh)",
    [CASE_ALL_REDUCE_ZERO] = "all_reduce, rank 0 count 0, others 16",
    [CASE_BROADCAST_ZERO_MESH] = "broadcast, last rank count 0, others 4099 (mesh)",
    [CASE_ALL_REDUCE_INPLACE_MIXED] =
        "all_reduce of 1.5 MiB, rank 0 in place (two-shot), others out of place (one-shot)",
};

static weft_status_t mismatched_call(mp_ctx_t *ctx, case_t c, void *a, void *b, size_t *arrays)
{
    weft_comm_t comm = ctx->comm;
    int r = ctx->rank, last = ctx->nranks - 1, n = ctx->nranks;
    switch (c) {
    case CASE_ALL_REDUCE_VS_ALL_GATHER:
        return r % 2 == 0 ? weft_all_reduce(comm, a, b, 16, WEFT_INT32, WEFT_SUM, NULL)
                          : weft_all_gather(comm, a, b, 16, WEFT_INT32, NULL);
    case CASE_ALL_REDUCE_VS_BARRIER:
        return r == 0 ? weft_barrier(comm, NULL)
                      : weft_all_reduce(comm, a, b, 16, WEFT_INT32, WEFT_SUM, NULL);
    case CASE_BROADCAST_VS_ALL_TO_ALL:
        return r == last ? weft_all_to_all(comm, a, b, 4, WEFT_INT32, NULL)
                         : weft_broadcast(comm, a, b, 4, WEFT_INT32, 0, NULL);
    case CASE_REDUCE_SCATTER_VS_ALL_REDUCE:
        return r == 1 ? weft_reduce_scatter(comm, a, b, 4, WEFT_FLOAT32, WEFT_SUM, NULL)
                      : weft_all_reduce(comm, a, b, 4, WEFT_FLOAT32, WEFT_SUM, NULL);
    case CASE_ALL_REDUCE_COUNT:
        return weft_all_reduce(comm, a, b, r == 0 ? 17 : 16, WEFT_INT32, WEFT_SUM, NULL);
    case CASE_ALL_GATHER_COUNT:
        return weft_all_gather(comm, a, b, r == last ? 9 : 8, WEFT_INT64, NULL);
    case CASE_ALL_TO_ALL_COUNT:
        return weft_all_to_all(comm, a, b, r == 1 ? 5 : 4, WEFT_UINT8, NULL);
    case CASE_ALL_REDUCE_DTYPE:
        return weft_all_reduce(comm, a, b, 16, r == 1 ? WEFT_FLOAT32 : WEFT_INT32, WEFT_SUM, NULL);
    case CASE_BROADCAST_DTYPE:
        return weft_broadcast(comm, a, b, 16, r == 0 ? WEFT_BFLOAT16 : WEFT_FLOAT16, 0, NULL);
    case CASE_ALL_REDUCE_OP:
        return weft_all_reduce(comm, a, b, 16, WEFT_INT32, r == 0 ? WEFT_MAX : WEFT_SUM, NULL);
    case CASE_REDUCE_SCATTER_OP:
        return weft_reduce_scatter(comm, a, b, 4, WEFT_INT32, r == last ? WEFT_MIN : WEFT_SUM,
                                   NULL);
    case CASE_BROADCAST_ROOT:
        return weft_broadcast(comm, a, b, 16, WEFT_INT32, r == 0 ? 0 : 1, NULL);
    case CASE_ALL_TO_ALLV_COUNTS: {
        size_t *sendcounts = arrays, *recvcounts = arrays + n, *displs = arrays + 2 * n;
        for (int p = 0; p < n; p++) {
            sendcounts[p] = 2;
            recvcounts[p] = r == 0 && p == 1 ? 3 : 2;
            displs[p] = (size_t)p * 4;
        }
        return weft_all_to_allv(comm, a, sendcounts, displs, b, recvcounts, displs, WEFT_INT32,
                                NULL);
    }
    case CASE_ALL_REDUCE_COUNT_MESH:
        return weft_all_reduce(comm, a, b, r == 0 ? MESH_COUNT + 1 : MESH_COUNT, WEFT_INT32,
                               WEFT_SUM, NULL);
    case CASE_ALL_GATHER_COUNT_MESH:
        return weft_all_gather(comm, a, b, r == last ? MESH_COUNT : MESH_COUNT + 1, WEFT_INT32,
                               NULL);
    case CASE_ALL_REDUCE_INLINE_VS_MESH:
        return weft_all_reduce(comm, a, b, r == 0 ? 16 : BIG_COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    case CASE_ALL_REDUCE_ZERO:
        return weft_all_reduce(comm, a, b, r == 0 ? 0 : 16, WEFT_INT32, WEFT_SUM, NULL);
    case CASE_BROADCAST_ZERO_MESH:
        return weft_broadcast(comm, a, b, r == last ? 0 : MESH_COUNT, WEFT_INT32, 0, NULL);
    case CASE_ALL_REDUCE_INPLACE_MIXED:
        return weft_all_reduce(comm, a, r == 0 ? a : b, MIXED_COUNT, WEFT_FLOAT32, WEFT_SUM, NULL);
    case NUM_CASES:
        break;
    }
    return WEFT_ERR_INTERNAL;
}

/* A valid all_reduce of count float32 elements: it must succeed and be exact. */
static void valid_all_reduce(mp_ctx_t *ctx, void *a, void *b, size_t count, const char *after)
{
    mp_case(ctx, "valid all_reduce of %zu elements after: %s", count, after);
    memset(b, 0xA5, count * 4);
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, a);
    weft_status_t st = weft_all_reduce(ctx->comm, a, b, count, WEFT_FLOAT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", b, WEFT_FLOAT32, WEFT_SUM, 0, count);
}

static size_t max_size(size_t x, size_t y)
{
    return x > y ? x : y;
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_mismatch");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    /* Room for the largest call: all_to_all(v) of ELEMS per peer, the all_gather of
     * MESH_COUNT + 1 per rank, the all_reduces of BIG_COUNT and MIXED_COUNT. */
    size_t n = (size_t)ctx.nranks;
    size_t bytes = max_size(max_size(n * ELEMS * 8, n * (MESH_COUNT + 1) * 4),
                            max_size(BIG_COUNT, MIXED_COUNT) * 4);
    size_t *arrays = calloc(3 * (size_t)ctx.nranks, sizeof *arrays);
    if (!arrays)
        mp_fatal(&ctx, "out of memory");
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        void *a = NULL, *b = NULL;
        mp_ok(&ctx, weft_malloc(ctx.comm, &a, bytes), "weft_malloc");
        mp_ok(&ctx, weft_malloc(ctx.comm, &b, bytes), "weft_malloc");
        if (!a || !b)
            mp_fatal(&ctx, "weft_malloc returned NULL");
        memset(a, 0x11, bytes);
        for (int c = 0; c < NUM_CASES; c++) {
            mp_case(&ctx, "%s", case_names[c]);
            weft_status_t st = mismatched_call(&ctx, (case_t)c, a, b, arrays);
            mp_expect_status(&ctx, st, WEFT_ERR_MISMATCH, NULL, case_names[c]);
            if (st != WEFT_SUCCESS && st != WEFT_ERR_MISMATCH && st != WEFT_ERR_INVALID_ARGUMENT)
                mp_fatal(&ctx, "%s returned %s: the communicator is unusable", case_names[c],
                         weft_status_string(st));
            valid_all_reduce(&ctx, a, b, ELEMS, case_names[c]);
            valid_all_reduce(&ctx, a, b, MESH_COUNT, case_names[c]);
        }
        mp_ok(&ctx, weft_free(ctx.comm, a), "weft_free");
        mp_ok(&ctx, weft_free(ctx.comm, b), "weft_free");
        mp_comm_close(&ctx);
    }
    free(arrays);
    return mp_finish(&ctx);
}
