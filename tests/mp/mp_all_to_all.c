/*
 * mp_all_to_all.c - weft_all_to_all and weft_all_to_allv.
 *
 * all_to_all: every dtype over the small counts (count per peer), with registered, interior and
 * unregistered buffers, under each registration mode, plus the 1M+3 count once per mode. Block p
 * of rank r's input holds elements (r, p * count + i); block p of its result must hold rank p's
 * elements (p, r * count + i).
 *
 * all_to_allv: random count matrices shared by all ranks (drawn from the seed), with zeros
 * (about a quarter of the blocks, a rank that sends nothing, a rank that receives nothing, an
 * all-zero call), and displacements that are neither in rank order nor dense: the blocks are
 * rotated or reversed and separated by gaps, which must keep their poison. Element i from rank s
 * to rank d is (s, (d << 32) + i).
 *
 * Each case checks every element, the guard zones and that the input is left untouched;
 * all_to_all also checks the zero-copy/staged path in the stats.
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------
 * all_to_all
 * ------------------------------------------------------------------------------------------- */
static void run_a2a(mp_ctx_t *ctx, mp_buf_kind_t kind, size_t count, weft_dtype_t dt)
{
    size_t es = mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    size_t bytes = count * es;
    mp_case(ctx, "all_to_all %s count=%zu %s", mp_buf_kind_name(kind), count, mp_dtype_name(dt));
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, kind, n * bytes);
    mp_buf_alloc(ctx, &recv, kind, n * bytes);
    mp_raw_fill(ctx, dt, ctx->rank, 0, n * count, send.ptr);
    weft_stats_t s0, s1;
    mp_stats(ctx, &s0);
    weft_status_t st = weft_all_to_all(ctx->comm, send.ptr, recv.ptr, count, dt, NULL);
    mp_stats(ctx, &s1);
    if (mp_ok(ctx, st, "weft_all_to_all")) {
        for (int p = 0; p < ctx->nranks; p++) {
            char what[64];
            snprintf(what, sizeof what, "recvbuf block %d", p);
            mp_raw_check(ctx, what, recv.ptr + (size_t)p * bytes, dt, p,
                         (uint64_t)ctx->rank * count, count);
        }
        mp_raw_check(ctx, "sendbuf", send.ptr, dt, ctx->rank, 0, n * count);
        mp_check_path(ctx, &s0, &s1, kind, bytes);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
}

/* ---------------------------------------------------------------------------------------------
 * all_to_allv
 * ------------------------------------------------------------------------------------------- */
typedef enum {
    PATTERN_SMALL,  /* counts in [0, 7] */
    PATTERN_MEDIUM, /* counts in [0, 300] */
    PATTERN_SKEWED, /* rank 0 sends nothing, the last rank receives nothing, others [1, 50] */
    PATTERN_LARGE,  /* counts in [0, 5000] */
    PATTERN_ZERO,   /* every count 0 */
    PATTERN_HUGE,   /* counts in [0, 200000] (not in quick mode) */
    NUM_PATTERNS
} pattern_t;

static const char *const pattern_names[NUM_PATTERNS] = {"small", "medium", "skewed",
                                                        "large", "zero",   "huge"};

/* Elements rank s sends to rank d in the current case; the same on every rank. */
static size_t a2av_count(const mp_ctx_t *ctx, pattern_t pattern, int s, int d)
{
    uint64_t h = mp_hash(ctx->seed + ctx->case_id, (uint64_t)s, (uint64_t)d, 7);
    int zero = (h & 3) == 0; /* about a quarter of the blocks */
    h >>= 2;
    switch (pattern) {
    case PATTERN_SMALL:
        return zero ? 0 : h % 8;
    case PATTERN_MEDIUM:
        return zero ? 0 : h % 301;
    case PATTERN_SKEWED:
        return s == 0 || d == ctx->nranks - 1 ? 0 : 1 + h % 50;
    case PATTERN_LARGE:
        return zero ? 0 : h % 5001;
    case PATTERN_ZERO:
        return 0;
    default:
        return zero ? 0 : h % 200001;
    }
}

/* Place the blocks of counts[] in a buffer: rotated (and sometimes reversed) order with gaps of
 * 0-2 elements before each block. Sets displs[] and returns the buffer's length in elements. */
static size_t a2av_layout(const mp_ctx_t *ctx, int side, const size_t *counts, size_t *displs)
{
    int n = ctx->nranks;
    uint64_t h = mp_hash(ctx->seed + ctx->case_id, (uint64_t)ctx->rank, (uint64_t)side, 11);
    int rot = (int)(h % (uint64_t)n), rev = (int)((h >> 32) & 1);
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        int p = rev ? (rot + n - k) % n : (rot + k) % n;
        off += (size_t)(mp_hash(h, (uint64_t)p, 0, 0) % 3);
        displs[p] = off;
        off += counts[p];
    }
    return off + 1;
}

static void run_a2av(mp_ctx_t *ctx, mp_buf_kind_t kind, pattern_t pattern, weft_dtype_t dt)
{
    int n = ctx->nranks, me = ctx->rank;
    size_t es = mp_dtype_bytes(dt);
    mp_case(ctx, "all_to_allv %s pattern=%s %s", mp_buf_kind_name(kind), pattern_names[pattern],
            mp_dtype_name(dt));
    size_t *arrays = calloc(4 * (size_t)n, sizeof *arrays);
    if (!arrays)
        mp_fatal(ctx, "out of memory");
    size_t *sendcounts = arrays, *sdispls = arrays + n;
    size_t *recvcounts = arrays + 2 * n, *rdispls = arrays + 3 * n;
    for (int p = 0; p < n; p++) {
        sendcounts[p] = a2av_count(ctx, pattern, me, p);
        recvcounts[p] = a2av_count(ctx, pattern, p, me);
    }
    size_t slen = a2av_layout(ctx, 0, sendcounts, sdispls);
    size_t rlen = a2av_layout(ctx, 1, recvcounts, rdispls);
    mp_buf_t send, recv;
    mp_buf_alloc(ctx, &send, kind, slen * es);
    mp_buf_alloc(ctx, &recv, kind, rlen * es);
    for (int p = 0; p < n; p++)
        mp_raw_fill(ctx, dt, me, (uint64_t)p << 32, sendcounts[p], send.ptr + sdispls[p] * es);
    weft_status_t st = weft_all_to_allv(ctx->comm, send.ptr, sendcounts, sdispls, recv.ptr,
                                        recvcounts, rdispls, dt, NULL);
    if (mp_ok(ctx, st, "weft_all_to_allv")) {
        char what[64];
        for (int p = 0; p < n; p++) {
            snprintf(what, sizeof what, "recvbuf block from rank %d", p);
            mp_raw_check(ctx, what, recv.ptr + rdispls[p] * es, dt, p, (uint64_t)me << 32,
                         recvcounts[p]);
            snprintf(what, sizeof what, "sendbuf block to rank %d", p);
            mp_raw_check(ctx, what, send.ptr + sdispls[p] * es, dt, me, (uint64_t)p << 32,
                         sendcounts[p]);
        }
        /* The gaps between receive blocks were never a destination. */
        unsigned char *covered = calloc(rlen, 1);
        if (!covered)
            mp_fatal(ctx, "out of memory");
        for (int p = 0; p < n; p++)
            memset(covered + rdispls[p], 1, recvcounts[p]);
        for (size_t i = 0; i < rlen; i++) {
            if (covered[i])
                continue;
            snprintf(what, sizeof what, "recvbuf gap element %zu", i);
            mp_check_poison(ctx, what, recv.ptr + i * es, es);
        }
        free(covered);
    }
    mp_buf_free(ctx, &send, "sendbuf");
    mp_buf_free(ctx, &recv, "recvbuf");
    free(arrays);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_all_to_all");
    size_t counts[8];
    size_t ncounts = mp_counts(&ctx, counts);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        for (int kind = 0; kind < MP_NUM_BUF_KINDS; kind++) {
            for (size_t c = 0; c < ncounts; c++)
                for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
                    if (mp_selected(&ctx, (unsigned)dt, (mp_buf_kind_t)kind))
                        run_a2a(&ctx, (mp_buf_kind_t)kind, counts[c], (weft_dtype_t)dt);
            for (int pat = 0; pat < NUM_PATTERNS; pat++) {
                if (pat == PATTERN_HUGE && (ctx.quick || kind != (reg + 1) % MP_NUM_BUF_KINDS))
                    continue;
                int dt = (pat * 3 + kind + reg * 7) % WEFT_NUM_DTYPES;
                run_a2av(&ctx, (mp_buf_kind_t)kind, (pattern_t)pat, (weft_dtype_t)dt);
            }
        }
        if (!ctx.quick)
            run_a2a(&ctx, (mp_buf_kind_t)reg, MP_LARGE_COUNT,
                    reg == 0   ? WEFT_FLOAT32
                    : reg == 1 ? WEFT_UINT8
                               : WEFT_BFLOAT16);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
