/*
 * mp_mismatch.c - ranks that disagree on the operation are detected at the entry handshake.
 *
 * The mismatched calls of tests/mp/cases.h (mp_mismatch_run, shared with gpu_invalid): every
 * rank must get WEFT_ERR_MISMATCH, nothing may move (both buffers keep their contents on every
 * rank, also the ranks outside an all_to_allv pair whose counts differ; the input too, which
 * one case uses in place), and the communicator must stay usable: a valid all_reduce
 * right after each case gives the exact result, with a small count (inline in the handshake)
 * and with MESH_COUNT elements (the mesh). Under each registration mode, with the default
 * all-reduce thresholds. Needs at least 2 ranks.
 */
#include "cases.h"
#include "harness.h"

#include <string.h>

/* Small payloads take the flag path; MESH_COUNT float32 elements (16 KiB) the mesh. */
#define SMALL_COUNT 64
#define MESH_COUNT 4099

#define A_BYTE 0x11 /* the contents of a and b during a mismatched call */
#define B_BYTE 0xA5

typedef struct {
    mp_ctx_t *ctx;
    void *a, *b;  /* weft_malloc, bytes each */
    size_t bytes; /* mp_mismatch_bytes(nranks) */
} fixture_t;

/* A valid all_reduce of count float32 elements: it must succeed and be exact. */
static void valid_all_reduce(const fixture_t *f, size_t count, const char *after)
{
    mp_ctx_t *ctx = f->ctx;
    mp_case(ctx, "valid all_reduce of %zu elements after: %s", count, after);
    memset(f->b, 0xA5, count * 4);
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, count, f->a);
    weft_status_t st = weft_all_reduce(ctx->comm, f->a, f->b, count, WEFT_FLOAT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", f->b, WEFT_FLOAT32, WEFT_SUM, 0, count);
}

/* Both buffers as every mismatched call must leave them. */
static void fill_buffers(const fixture_t *f)
{
    memset(f->a, A_BYTE, f->bytes);
    memset(f->b, B_BYTE, f->bytes);
}

/* Bytes of p[0, bytes) other than value. */
static size_t count_changed(const void *p, int value, size_t bytes)
{
    size_t changed = 0;
    for (size_t i = 0; i < bytes; i++)
        changed += ((const unsigned char *)p)[i] != (unsigned char)value;
    return changed;
}

/* After each case: nothing moved, then a valid all_reduce on both paths. */
static void after_case(void *arg, const char *what)
{
    const fixture_t *f = arg;
    size_t a = count_changed(f->a, A_BYTE, f->bytes), b = count_changed(f->b, B_BYTE, f->bytes);
    mp_check(f->ctx, a == 0 && b == 0,
             "%s: the mismatched call changed %zu bytes of the input and %zu of the output", what,
             a, b);
    valid_all_reduce(f, SMALL_COUNT, what);
    valid_all_reduce(f, MESH_COUNT, what);
    fill_buffers(f);
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_mismatch");
    if (ctx.nranks < 2) {
        mp_note(&ctx, "SKIP: needs at least 2 ranks");
        return mp_finish(&ctx);
    }
    size_t bytes = mp_mismatch_bytes(ctx.nranks);
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        fixture_t f = {.ctx = &ctx, .bytes = bytes};
        mp_ok(&ctx, weft_malloc(ctx.comm, &f.a, bytes), "weft_malloc");
        mp_ok(&ctx, weft_malloc(ctx.comm, &f.b, bytes), "weft_malloc");
        if (!f.a || !f.b)
            mp_fatal(&ctx, "weft_malloc returned NULL");
        fill_buffers(&f);
        mp_mismatch_run(&ctx, f.a, f.b, NULL, after_case, &f);
        mp_ok(&ctx, weft_free(ctx.comm, f.a), "weft_free");
        mp_ok(&ctx, weft_free(ctx.comm, f.b), "weft_free");
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
