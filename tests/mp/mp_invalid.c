/*
 * mp_invalid.c - argument checking at the API boundary.
 *
 * A table of bad calls, made by all ranks in lockstep: each must return
 * WEFT_ERR_INVALID_ARGUMENT at once with a weft_last_error() text that names the function, and
 * leave the communicator usable: a valid all_reduce right after each row must give the exact
 * result. The table covers a NULL communicator, NULL buffers with a non-zero count, dtype and
 * reduction out of range, root out of range, a stream on the host backend, count * element size
 * overflowing size_t, all_to_all with overlapping buffers, all_to_allv with NULL count or
 * displacement arrays, weft_free of memory weft_malloc did not return, and NULL output pointers.
 * A second table holds valid edge cases that must succeed (count 0 with NULL buffers, a 0-byte
 * weft_malloc, weft_free(NULL)). Also the local helpers: weft_comm_rank/size of NULL,
 * weft_dtype_size, weft_status_string. Under each registration mode.
 */
#include "harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIX_ELEMS 64                      /* elements of the fixture buffers (float64: 512 bytes) */
#define OVERFLOW_COUNT (SIZE_MAX / 4 + 1) /* times 8 (float64) overflows size_t */
#define BAD_DTYPE ((weft_dtype_t)42)
#define BAD_OP ((weft_redop_t)42)

/* Buffers the rows use; count arrays hold 1 per peer, displacements 0, 1, 2, ... */
typedef struct fixture {
    weft_comm_t comm;
    int nranks;
    void *reg;      /* weft_malloc, 2 * FIX_ELEMS float64 */
    void *reg2;     /* weft_malloc, 2 * FIX_ELEMS float64 */
    void *plain;    /* malloc, FIX_ELEMS float64 */
    size_t *ones;   /* nranks counts of 1 */
    size_t *zeros;  /* nranks counts of 0 */
    size_t *displs; /* nranks displacements 0, 1, ..., nranks - 1 */
} fixture_t;

typedef enum {
    ROW_AR_NULL_COMM,
    ROW_AG_NULL_COMM,
    ROW_RS_NULL_COMM,
    ROW_BC_NULL_COMM,
    ROW_A2A_NULL_COMM,
    ROW_A2AV_NULL_COMM,
    ROW_BARRIER_NULL_COMM,
    ROW_MALLOC_NULL_COMM,
    ROW_FREE_NULL_COMM,
    ROW_STATS_NULL_COMM,
    ROW_AR_NULL_SEND,
    ROW_AR_NULL_RECV,
    ROW_AG_NULL_SEND,
    ROW_AG_NULL_RECV,
    ROW_RS_NULL_SEND,
    ROW_RS_NULL_RECV,
    ROW_BC_NULL_RECV,
    ROW_BC_NULL_SEND_ROOT, /* only meaningful when every rank is the root: nranks == 1 */
    ROW_A2A_NULL_SEND,
    ROW_A2A_NULL_RECV,
    ROW_A2AV_NULL_SEND,
    ROW_A2AV_NULL_RECV,
    ROW_A2AV_NULL_SENDCOUNTS,
    ROW_A2AV_NULL_SDISPLS,
    ROW_A2AV_NULL_RECVCOUNTS,
    ROW_A2AV_NULL_RDISPLS,
    ROW_AR_BAD_DTYPE,
    ROW_AR_NEGATIVE_DTYPE,
    ROW_AG_BAD_DTYPE,
    ROW_RS_BAD_DTYPE,
    ROW_BC_BAD_DTYPE,
    ROW_A2A_BAD_DTYPE,
    ROW_A2AV_BAD_DTYPE,
    ROW_AR_BAD_OP,
    ROW_AR_NEGATIVE_OP,
    ROW_RS_BAD_OP,
    ROW_BC_NEGATIVE_ROOT,
    ROW_BC_ROOT_TOO_LARGE,
    ROW_AR_STREAM,
    ROW_AG_STREAM,
    ROW_RS_STREAM,
    ROW_BC_STREAM,
    ROW_A2A_STREAM,
    ROW_A2AV_STREAM,
    ROW_BARRIER_STREAM,
    ROW_AR_OVERFLOW,
    ROW_AG_OVERFLOW,
    ROW_RS_OVERFLOW,
    ROW_BC_OVERFLOW,
    ROW_A2A_OVERFLOW,
    ROW_A2A_OVERLAP,
    ROW_FREE_MALLOCED,
    ROW_FREE_INTERIOR,
    ROW_MALLOC_NULL_OUT,
    ROW_STATS_NULL_OUT,
    NUM_ROWS
} row_t;

typedef struct row_info {
    const char *what;
    const char *fn; /* the function weft_last_error() must name */
} row_info_t;

static const row_info_t rows[NUM_ROWS] = {
    [ROW_AR_NULL_COMM] = {"all_reduce with a NULL communicator", "weft_all_reduce"},
    [ROW_AG_NULL_COMM] = {"all_gather with a NULL communicator", "weft_all_gather"},
    [ROW_RS_NULL_COMM] = {"reduce_scatter with a NULL communicator", "weft_reduce_scatter"},
    [ROW_BC_NULL_COMM] = {"broadcast with a NULL communicator", "weft_broadcast"},
    [ROW_A2A_NULL_COMM] = {"all_to_all with a NULL communicator", "weft_all_to_all"},
    [ROW_A2AV_NULL_COMM] = {"all_to_allv with a NULL communicator", "weft_all_to_allv"},
    [ROW_BARRIER_NULL_COMM] = {"barrier with a NULL communicator", "weft_barrier"},
    [ROW_MALLOC_NULL_COMM] = {"weft_malloc with a NULL communicator", "weft_malloc"},
    [ROW_FREE_NULL_COMM] = {"weft_free with a NULL communicator", "weft_free"},
    [ROW_STATS_NULL_COMM] = {"weft_get_stats with a NULL communicator", "weft_get_stats"},
    [ROW_AR_NULL_SEND] = {"all_reduce NULL sendbuf, count 64", "weft_all_reduce"},
    [ROW_AR_NULL_RECV] = {"all_reduce NULL recvbuf, count 64", "weft_all_reduce"},
    [ROW_AG_NULL_SEND] = {"all_gather NULL sendbuf, count 8", "weft_all_gather"},
    [ROW_AG_NULL_RECV] = {"all_gather NULL recvbuf, count 8", "weft_all_gather"},
    [ROW_RS_NULL_SEND] = {"reduce_scatter NULL sendbuf, count 8", "weft_reduce_scatter"},
    [ROW_RS_NULL_RECV] = {"reduce_scatter NULL recvbuf, count 8", "weft_reduce_scatter"},
    [ROW_BC_NULL_RECV] = {"broadcast NULL recvbuf, count 64", "weft_broadcast"},
    [ROW_BC_NULL_SEND_ROOT] = {"broadcast NULL sendbuf on the root, count 64", "weft_broadcast"},
    [ROW_A2A_NULL_SEND] = {"all_to_all NULL sendbuf, count 8", "weft_all_to_all"},
    [ROW_A2A_NULL_RECV] = {"all_to_all NULL recvbuf, count 8", "weft_all_to_all"},
    [ROW_A2AV_NULL_SEND] = {"all_to_allv NULL sendbuf, counts 1", "weft_all_to_allv"},
    [ROW_A2AV_NULL_RECV] = {"all_to_allv NULL recvbuf, counts 1", "weft_all_to_allv"},
    [ROW_A2AV_NULL_SENDCOUNTS] = {"all_to_allv NULL sendcounts", "weft_all_to_allv"},
    [ROW_A2AV_NULL_SDISPLS] = {"all_to_allv NULL sdispls", "weft_all_to_allv"},
    [ROW_A2AV_NULL_RECVCOUNTS] = {"all_to_allv NULL recvcounts", "weft_all_to_allv"},
    [ROW_A2AV_NULL_RDISPLS] = {"all_to_allv NULL rdispls", "weft_all_to_allv"},
    [ROW_AR_BAD_DTYPE] = {"all_reduce dtype 42", "weft_all_reduce"},
    [ROW_AR_NEGATIVE_DTYPE] = {"all_reduce dtype -1", "weft_all_reduce"},
    [ROW_AG_BAD_DTYPE] = {"all_gather dtype 42", "weft_all_gather"},
    [ROW_RS_BAD_DTYPE] = {"reduce_scatter dtype 42", "weft_reduce_scatter"},
    [ROW_BC_BAD_DTYPE] = {"broadcast dtype 42", "weft_broadcast"},
    [ROW_A2A_BAD_DTYPE] = {"all_to_all dtype 42", "weft_all_to_all"},
    [ROW_A2AV_BAD_DTYPE] = {"all_to_allv dtype 42", "weft_all_to_allv"},
    [ROW_AR_BAD_OP] = {"all_reduce op 42", "weft_all_reduce"},
    [ROW_AR_NEGATIVE_OP] = {"all_reduce op -1", "weft_all_reduce"},
    [ROW_RS_BAD_OP] = {"reduce_scatter op 42", "weft_reduce_scatter"},
    [ROW_BC_NEGATIVE_ROOT] = {"broadcast root -1", "weft_broadcast"},
    [ROW_BC_ROOT_TOO_LARGE] = {"broadcast root == nranks", "weft_broadcast"},
    [ROW_AR_STREAM] = {"all_reduce with a stream on the host backend", "weft_all_reduce"},
    [ROW_AG_STREAM] = {"all_gather with a stream on the host backend", "weft_all_gather"},
    [ROW_RS_STREAM] = {"reduce_scatter with a stream on the host backend", "weft_reduce_scatter"},
    [ROW_BC_STREAM] = {"broadcast with a stream on the host backend", "weft_broadcast"},
    [ROW_A2A_STREAM] = {"all_to_all with a stream on the host backend", "weft_all_to_all"},
    [ROW_A2AV_STREAM] = {"all_to_allv with a stream on the host backend", "weft_all_to_allv"},
    [ROW_BARRIER_STREAM] = {"barrier with a stream on the host backend", "weft_barrier"},
    [ROW_AR_OVERFLOW] = {"all_reduce count * 8 overflows size_t", "weft_all_reduce"},
    [ROW_AG_OVERFLOW] = {"all_gather sendcount * 8 overflows size_t", "weft_all_gather"},
    [ROW_RS_OVERFLOW] = {"reduce_scatter recvcount * 8 overflows size_t", "weft_reduce_scatter"},
    [ROW_BC_OVERFLOW] = {"broadcast count * 8 overflows size_t", "weft_broadcast"},
    [ROW_A2A_OVERFLOW] = {"all_to_all count * 8 overflows size_t", "weft_all_to_all"},
    [ROW_A2A_OVERLAP] = {"all_to_all with sendbuf == recvbuf", "weft_all_to_all"},
    [ROW_FREE_MALLOCED] = {"weft_free of malloc'd memory", "weft_free"},
    [ROW_FREE_INTERIOR] = {"weft_free of an interior pointer", "weft_free"},
    [ROW_MALLOC_NULL_OUT] = {"weft_malloc with a NULL ptr out", "weft_malloc"},
    [ROW_STATS_NULL_OUT] = {"weft_get_stats with a NULL out", "weft_get_stats"},
};

static weft_status_t bad_call(fixture_t *f, row_t row)
{
    weft_comm_t c = f->comm, none = NULL;
    void *a = f->reg, *b = f->reg2, *stream = (void *)(uintptr_t)0x1000;
    const weft_dtype_t d = WEFT_FLOAT64;
    weft_stats_t stats;
    switch (row) {
    case ROW_AR_NULL_COMM:
        return weft_all_reduce(none, a, b, 8, d, WEFT_SUM, NULL);
    case ROW_AG_NULL_COMM:
        return weft_all_gather(none, a, b, 1, d, NULL);
    case ROW_RS_NULL_COMM:
        return weft_reduce_scatter(none, a, b, 1, d, WEFT_SUM, NULL);
    case ROW_BC_NULL_COMM:
        return weft_broadcast(none, a, b, 8, d, 0, NULL);
    case ROW_A2A_NULL_COMM:
        return weft_all_to_all(none, a, b, 1, d, NULL);
    case ROW_A2AV_NULL_COMM:
        return weft_all_to_allv(none, a, f->ones, f->displs, b, f->ones, f->displs, d, NULL);
    case ROW_BARRIER_NULL_COMM:
        return weft_barrier(none, NULL);
    case ROW_MALLOC_NULL_COMM: {
        void *p = &stats;
        weft_status_t st = weft_malloc(none, &p, 64);
        return p == &stats ? st : WEFT_ERR_INTERNAL; /* the output must stay untouched */
    }
    case ROW_FREE_NULL_COMM:
        return weft_free(none, a);
    case ROW_STATS_NULL_COMM:
        return weft_get_stats(none, &stats);
    case ROW_AR_NULL_SEND:
        return weft_all_reduce(c, NULL, b, FIX_ELEMS, d, WEFT_SUM, NULL);
    case ROW_AR_NULL_RECV:
        return weft_all_reduce(c, a, NULL, FIX_ELEMS, d, WEFT_SUM, NULL);
    case ROW_AG_NULL_SEND:
        return weft_all_gather(c, NULL, b, 1, d, NULL);
    case ROW_AG_NULL_RECV:
        return weft_all_gather(c, a, NULL, 1, d, NULL);
    case ROW_RS_NULL_SEND:
        return weft_reduce_scatter(c, NULL, b, 1, d, WEFT_SUM, NULL);
    case ROW_RS_NULL_RECV:
        return weft_reduce_scatter(c, a, NULL, 1, d, WEFT_SUM, NULL);
    case ROW_BC_NULL_RECV:
        return weft_broadcast(c, a, NULL, FIX_ELEMS, d, 0, NULL);
    case ROW_BC_NULL_SEND_ROOT:
        return weft_broadcast(c, NULL, b, FIX_ELEMS, d, 0, NULL);
    case ROW_A2A_NULL_SEND:
        return weft_all_to_all(c, NULL, b, 1, d, NULL);
    case ROW_A2A_NULL_RECV:
        return weft_all_to_all(c, a, NULL, 1, d, NULL);
    case ROW_A2AV_NULL_SEND:
        return weft_all_to_allv(c, NULL, f->ones, f->displs, b, f->ones, f->displs, d, NULL);
    case ROW_A2AV_NULL_RECV:
        return weft_all_to_allv(c, a, f->ones, f->displs, NULL, f->ones, f->displs, d, NULL);
    case ROW_A2AV_NULL_SENDCOUNTS:
        return weft_all_to_allv(c, a, NULL, f->displs, b, f->ones, f->displs, d, NULL);
    case ROW_A2AV_NULL_SDISPLS:
        return weft_all_to_allv(c, a, f->ones, NULL, b, f->ones, f->displs, d, NULL);
    case ROW_A2AV_NULL_RECVCOUNTS:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, NULL, f->displs, d, NULL);
    case ROW_A2AV_NULL_RDISPLS:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, NULL, d, NULL);
    case ROW_AR_BAD_DTYPE:
        return weft_all_reduce(c, a, b, 8, BAD_DTYPE, WEFT_SUM, NULL);
    case ROW_AR_NEGATIVE_DTYPE:
        return weft_all_reduce(c, a, b, 8, (weft_dtype_t)-1, WEFT_SUM, NULL);
    case ROW_AG_BAD_DTYPE:
        return weft_all_gather(c, a, b, 1, BAD_DTYPE, NULL);
    case ROW_RS_BAD_DTYPE:
        return weft_reduce_scatter(c, a, b, 1, BAD_DTYPE, WEFT_SUM, NULL);
    case ROW_BC_BAD_DTYPE:
        return weft_broadcast(c, a, b, 8, BAD_DTYPE, 0, NULL);
    case ROW_A2A_BAD_DTYPE:
        return weft_all_to_all(c, a, b, 1, BAD_DTYPE, NULL);
    case ROW_A2AV_BAD_DTYPE:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->displs, BAD_DTYPE, NULL);
    case ROW_AR_BAD_OP:
        return weft_all_reduce(c, a, b, 8, d, BAD_OP, NULL);
    case ROW_AR_NEGATIVE_OP:
        return weft_all_reduce(c, a, b, 8, d, (weft_redop_t)-1, NULL);
    case ROW_RS_BAD_OP:
        return weft_reduce_scatter(c, a, b, 1, d, BAD_OP, NULL);
    case ROW_BC_NEGATIVE_ROOT:
        return weft_broadcast(c, a, b, 8, d, -1, NULL);
    case ROW_BC_ROOT_TOO_LARGE:
        return weft_broadcast(c, a, b, 8, d, f->nranks, NULL);
    case ROW_AR_STREAM:
        return weft_all_reduce(c, a, b, 8, d, WEFT_SUM, stream);
    case ROW_AG_STREAM:
        return weft_all_gather(c, a, b, 1, d, stream);
    case ROW_RS_STREAM:
        return weft_reduce_scatter(c, a, b, 1, d, WEFT_SUM, stream);
    case ROW_BC_STREAM:
        return weft_broadcast(c, a, b, 8, d, 0, stream);
    case ROW_A2A_STREAM:
        return weft_all_to_all(c, a, b, 1, d, stream);
    case ROW_A2AV_STREAM:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->displs, d, stream);
    case ROW_BARRIER_STREAM:
        return weft_barrier(c, stream);
    case ROW_AR_OVERFLOW:
        return weft_all_reduce(c, a, b, OVERFLOW_COUNT, d, WEFT_SUM, NULL);
    case ROW_AG_OVERFLOW:
        return weft_all_gather(c, a, b, OVERFLOW_COUNT, d, NULL);
    case ROW_RS_OVERFLOW:
        return weft_reduce_scatter(c, a, b, OVERFLOW_COUNT, d, WEFT_SUM, NULL);
    case ROW_BC_OVERFLOW:
        return weft_broadcast(c, a, b, OVERFLOW_COUNT, d, 0, NULL);
    case ROW_A2A_OVERFLOW:
        return weft_all_to_all(c, a, b, OVERFLOW_COUNT, d, NULL);
    case ROW_A2A_OVERLAP:
        return weft_all_to_all(c, a, a, 1, d, NULL);
    case ROW_FREE_MALLOCED:
        return weft_free(c, f->plain);
    case ROW_FREE_INTERIOR:
        return weft_free(c, (char *)f->reg + 8);
    case ROW_MALLOC_NULL_OUT:
        return weft_malloc(c, NULL, 64);
    case ROW_STATS_NULL_OUT:
        return weft_get_stats(c, NULL);
    case NUM_ROWS:
        break;
    }
    return WEFT_ERR_INTERNAL;
}

/* A valid all_reduce (int32 SUM) on the fixture buffers; checks the result exactly. */
static void valid_all_reduce(mp_ctx_t *ctx, fixture_t *f, const char *after)
{
    mp_case(ctx, "valid all_reduce after: %s", after);
    memset(f->reg2, 0xA5, FIX_ELEMS * 4);
    mp_red_fill(ctx, WEFT_INT32, WEFT_SUM, ctx->rank, 0, FIX_ELEMS, f->reg);
    weft_status_t st =
        weft_all_reduce(ctx->comm, f->reg, f->reg2, FIX_ELEMS, WEFT_INT32, WEFT_SUM, NULL);
    if (mp_ok(ctx, st, "weft_all_reduce"))
        mp_red_check_result(ctx, "recvbuf", f->reg2, WEFT_INT32, WEFT_SUM, 0, FIX_ELEMS);
}

/* Valid edge cases: each must succeed. */
static void valid_edges(mp_ctx_t *ctx, fixture_t *f)
{
    weft_comm_t c = ctx->comm;
    const weft_dtype_t d = WEFT_FLOAT32;
    mp_case(ctx, "count 0 with NULL buffers");
    mp_expect_status(ctx, weft_all_reduce(c, NULL, NULL, 0, d, WEFT_SUM, NULL), WEFT_SUCCESS, NULL,
                     "all_reduce(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_all_gather(c, NULL, NULL, 0, d, NULL), WEFT_SUCCESS, NULL,
                     "all_gather(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_reduce_scatter(c, NULL, NULL, 0, d, WEFT_MAX, NULL), WEFT_SUCCESS,
                     NULL, "reduce_scatter(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_broadcast(c, NULL, NULL, 0, d, 0, NULL), WEFT_SUCCESS, NULL,
                     "broadcast(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_all_to_all(c, NULL, NULL, 0, d, NULL), WEFT_SUCCESS, NULL,
                     "all_to_all(NULL, NULL, 0)");
    mp_expect_status(
        ctx, weft_all_to_allv(c, NULL, f->zeros, f->displs, NULL, f->zeros, f->displs, d, NULL),
        WEFT_SUCCESS, NULL, "all_to_allv(NULL, zero counts, NULL, zero counts)");
    valid_all_reduce(ctx, f, "count 0 calls");

    mp_case(ctx, "weft_malloc of 0 bytes, weft_free(NULL)");
    void *p = &p;
    mp_expect_status(ctx, weft_malloc(c, &p, 0), WEFT_SUCCESS, NULL, "weft_malloc(0)");
    mp_check(ctx, p == NULL, "weft_malloc(0) set the pointer to %p, expected NULL", p);
    mp_expect_status(ctx, weft_free(c, NULL), WEFT_SUCCESS, NULL, "weft_free(NULL)");
}

/* Helpers that need no communicator. */
static void local_helpers(mp_ctx_t *ctx)
{
    mp_case(ctx, "local helpers");
    mp_check(ctx, weft_comm_rank(NULL) == -1, "weft_comm_rank(NULL) = %d, expected -1",
             weft_comm_rank(NULL));
    mp_check(ctx, weft_comm_size(NULL) == -1, "weft_comm_size(NULL) = %d, expected -1",
             weft_comm_size(NULL));
    for (int dt = 0; dt < WEFT_NUM_DTYPES; dt++)
        mp_check(ctx, weft_dtype_size((weft_dtype_t)dt) == mp_dtype_bytes((weft_dtype_t)dt),
                 "weft_dtype_size(%s) = %zu, expected %zu", mp_dtype_name((weft_dtype_t)dt),
                 weft_dtype_size((weft_dtype_t)dt), mp_dtype_bytes((weft_dtype_t)dt));
    mp_check(ctx, weft_dtype_size(BAD_DTYPE) == 0, "weft_dtype_size(42) = %zu, expected 0",
             weft_dtype_size(BAD_DTYPE));
    for (int s = WEFT_SUCCESS; s <= WEFT_ERR_INTERNAL; s++) {
        const char *text = weft_status_string((weft_status_t)s);
        mp_check(ctx, text && text[0] && strcmp(text, "unknown status") != 0,
                 "weft_status_string(%d) = \"%s\"", s, text ? text : "(null)");
        for (int t = WEFT_SUCCESS; t < s && text; t++)
            mp_check(ctx, strcmp(text, weft_status_string((weft_status_t)t)) != 0,
                     "weft_status_string(%d) == weft_status_string(%d) = \"%s\"", s, t, text);
    }
    const char *unknown = weft_status_string((weft_status_t)999);
    mp_check(ctx, unknown && strcmp(unknown, "unknown status") == 0,
             "weft_status_string(999) = \"%s\", expected \"unknown status\"",
             unknown ? unknown : "(null)");
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init(&ctx, "mp_invalid");
    local_helpers(&ctx);
    int n = ctx.nranks;
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        mp_comm_open(&ctx, (weft_registration_t)reg);
        fixture_t f = {.comm = ctx.comm, .nranks = n};
        size_t bytes = 2 * FIX_ELEMS * 8;
        mp_ok(&ctx, weft_malloc(ctx.comm, &f.reg, bytes), "weft_malloc");
        mp_ok(&ctx, weft_malloc(ctx.comm, &f.reg2, bytes), "weft_malloc");
        f.plain = malloc(FIX_ELEMS * 8);
        size_t *arrays = calloc(3 * (size_t)n, sizeof *arrays);
        if (!f.reg || !f.reg2 || !f.plain || !arrays)
            mp_fatal(&ctx, "fixture allocation failed");
        f.ones = arrays;
        f.zeros = arrays + n;
        f.displs = arrays + 2 * n;
        for (int p = 0; p < n; p++) {
            f.ones[p] = 1;
            f.displs[p] = (size_t)p;
        }
        valid_all_reduce(&ctx, &f, "communicator creation");
        for (int r = 0; r < NUM_ROWS; r++) {
            if (r == ROW_BC_NULL_SEND_ROOT && n != 1)
                continue; /* non-roots may pass NULL: only the root's call would fail */
            mp_case(&ctx, "%s", rows[r].what);
            weft_status_t st = bad_call(&f, (row_t)r);
            mp_expect_status(&ctx, st, WEFT_ERR_INVALID_ARGUMENT, rows[r].fn, rows[r].what);
            valid_all_reduce(&ctx, &f, rows[r].what);
        }
        valid_edges(&ctx, &f);
        mp_ok(&ctx, weft_free(ctx.comm, f.reg), "weft_free");
        mp_ok(&ctx, weft_free(ctx.comm, f.reg2), "weft_free");
        free(f.plain);
        free(arrays);
        mp_comm_close(&ctx);
    }
    return mp_finish(&ctx);
}
