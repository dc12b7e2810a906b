/*
 * cases.c - case tables shared by the host and GPU test programs: the invalid-argument rows, the
 * mismatched calls and the all_to_all / all_to_allv data checks (contracts in cases.h).
 *
 * Design. The invalid-argument table is an enum of rows, a static description per row (what it
 * does and the function weft_last_error() must name) and one switch that makes the call; the
 * rows that only apply in some settings (a stream on the host backend, a NULL root sendbuf with
 * one rank, the foreign pointers the caller supplies) are filtered by row_runs(). all_to_allv
 * counts and layouts are pure functions of (seed, case, ranks, side), so every rank draws the
 * same count matrix and can check what its peers sent. The mismatched calls are an enum of cases
 * with a name each and one switch, as the invalid rows.
 *
 * Thread safety: as harness.c (an mp_ctx_t belongs to one thread); the table is read-only.
 */
#include "cases.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OVERFLOW_COUNT (SIZE_MAX / 4 + 1) /* times 8 (float64) overflows size_t */
#define HUGE_COUNT ((size_t)1 << 60)      /* bytes no process can address, as float64 or int8 */
#define BAD_OP ((weft_redop_t)42)

/* ---------------------------------------------------------------------------------------------
 * Invalid arguments
 * ------------------------------------------------------------------------------------------- */
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
    ROW_AR_STREAM, /* the ROW_*_STREAM rows pass f->host_stream and run only where it is set */
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
    ROW_A2AV_OVERFLOW,
    ROW_AR_HUGE_INPLACE,
    ROW_BC_HUGE_INPLACE,
    ROW_A2AV_HUGE_DISPL,
    ROW_A2A_OVERLAP,
    ROW_A2AV_OVERLAP,
    ROW_AR_OVERLAP,
    ROW_RS_OVERLAP,
    ROW_BC_OVERLAP,        /* only where every rank is the root: nranks == 1 */
    ROW_A2AV_RECV_OVERLAP, /* needs two receive blocks: nranks >= 2 */
    ROW_AR_MISALIGNED,
    ROW_RS_MISALIGNED,
    ROW_FREE_FOREIGN_0, /* weft_free of f->foreign[0], if the caller supplied it */
    ROW_FREE_FOREIGN_1, /* weft_free of f->foreign[1], likewise */
    ROW_FREE_INTERIOR,
    ROW_MALLOC_NULL_OUT,
    ROW_MALLOC_HUGE,
    ROW_STATS_NULL_OUT,
    NUM_ROWS
} row_t;

_Static_assert(ROW_FREE_FOREIGN_1 - ROW_FREE_FOREIGN_0 + 1 == MP_ARGS_MAX_FOREIGN,
               "one row per foreign pointer");

typedef struct row_info {
    const char *what; /* NULL for the foreign rows: the fixture describes them */
    const char *fn;   /* the function weft_last_error() must name */
    const char *arg;  /* what it must also say of the arguments at fault, or NULL */
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
    [ROW_AG_NULL_SEND] = {"all_gather NULL sendbuf, count 1", "weft_all_gather"},
    [ROW_AG_NULL_RECV] = {"all_gather NULL recvbuf, count 1", "weft_all_gather"},
    [ROW_RS_NULL_SEND] = {"reduce_scatter NULL sendbuf, count 1", "weft_reduce_scatter"},
    [ROW_RS_NULL_RECV] = {"reduce_scatter NULL recvbuf, count 1", "weft_reduce_scatter"},
    [ROW_BC_NULL_RECV] = {"broadcast NULL recvbuf, count 64", "weft_broadcast"},
    [ROW_BC_NULL_SEND_ROOT] = {"broadcast NULL sendbuf on the root, count 64", "weft_broadcast"},
    [ROW_A2A_NULL_SEND] = {"all_to_all NULL sendbuf, count 1", "weft_all_to_all"},
    [ROW_A2A_NULL_RECV] = {"all_to_all NULL recvbuf, count 1", "weft_all_to_all"},
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
    [ROW_A2AV_OVERFLOW] = {"all_to_allv counts * 8 overflow size_t", "weft_all_to_allv"},
    [ROW_AR_HUGE_INPLACE] = {"all_reduce in place, 2^60 elements", "weft_all_reduce"},
    [ROW_BC_HUGE_INPLACE] = {"broadcast in place, 2^60 elements", "weft_broadcast"},
    [ROW_A2AV_HUGE_DISPL] = {"all_to_allv with blocks 2^60 elements in", "weft_all_to_allv"},
    [ROW_A2A_OVERLAP] = {"all_to_all with sendbuf == recvbuf", "weft_all_to_all"},
    [ROW_A2AV_OVERLAP] = {"all_to_allv with send and receive blocks on the same bytes",
                          "weft_all_to_allv"},
    [ROW_AR_OVERLAP] = {"all_reduce with recvbuf 8 bytes past sendbuf", "weft_all_reduce",
                        "sendbuf and recvbuf overlap"},
    [ROW_RS_OVERLAP] = {"reduce_scatter with recvbuf 8 bytes past its in-place block",
                        "weft_reduce_scatter", "recvbuf overlaps sendbuf"},
    [ROW_BC_OVERLAP] = {"broadcast on the root with recvbuf 8 bytes past sendbuf", "weft_broadcast",
                        "sendbuf and recvbuf overlap"},
    [ROW_A2AV_RECV_OVERLAP] = {"all_to_allv with every receive block at displacement 0",
                               "weft_all_to_allv", "receive blocks 0 and 1 overlap"},
    [ROW_AR_MISALIGNED] = {"all_reduce float64 with recvbuf 4 bytes off", "weft_all_reduce"},
    [ROW_RS_MISALIGNED] = {"reduce_scatter float64 with sendbuf 4 bytes off",
                           "weft_reduce_scatter"},
    [ROW_FREE_FOREIGN_0] = {NULL, "weft_free"},
    [ROW_FREE_FOREIGN_1] = {NULL, "weft_free"},
    [ROW_FREE_INTERIOR] = {"weft_free of an interior pointer", "weft_free"},
    [ROW_MALLOC_NULL_OUT] = {"weft_malloc with a NULL ptr out", "weft_malloc"},
    [ROW_MALLOC_HUGE] = {"weft_malloc of SIZE_MAX bytes", "weft_malloc"},
    [ROW_STATS_NULL_OUT] = {"weft_get_stats with a NULL out", "weft_get_stats"},
};

/* Whether row r applies to this job and fixture. */
static int row_runs(const mp_ctx_t *ctx, const mp_args_fixture_t *f, row_t r)
{
    if (r == ROW_BC_NULL_SEND_ROOT || r == ROW_BC_OVERLAP)
        return ctx->nranks == 1; /* non-roots' sendbuf is ignored: only the root's call fails */
    if (r == ROW_A2AV_RECV_OVERLAP)
        return ctx->nranks >= 2;
    if (r >= ROW_AR_STREAM && r <= ROW_BARRIER_STREAM)
        return f->host_stream != NULL;
    if (r >= ROW_FREE_FOREIGN_0 && r <= ROW_FREE_FOREIGN_1)
        return (int)(r - ROW_FREE_FOREIGN_0) < f->nforeign;
    return 1;
}

static const char *row_what(const mp_args_fixture_t *f, row_t r)
{
    return rows[r].what ? rows[r].what : f->foreign[r - ROW_FREE_FOREIGN_0].what;
}

static weft_status_t bad_call(const mp_ctx_t *ctx, const mp_args_fixture_t *f, row_t row)
{
    weft_comm_t c = ctx->comm, none = NULL;
    void *a = f->reg, *b = f->reg2, *s = f->stream, *hs = f->host_stream;
    const weft_dtype_t d = WEFT_FLOAT64;
    weft_stats_t stats;
    switch (row) {
    case ROW_AR_NULL_COMM:
        return weft_all_reduce(none, a, b, 8, d, WEFT_SUM, s);
    case ROW_AG_NULL_COMM:
        return weft_all_gather(none, a, b, 1, d, s);
    case ROW_RS_NULL_COMM:
        return weft_reduce_scatter(none, a, b, 1, d, WEFT_SUM, s);
    case ROW_BC_NULL_COMM:
        return weft_broadcast(none, a, b, 8, d, 0, s);
    case ROW_A2A_NULL_COMM:
        return weft_all_to_all(none, a, b, 1, d, s);
    case ROW_A2AV_NULL_COMM:
        return weft_all_to_allv(none, a, f->ones, f->displs, b, f->ones, f->displs, d, s);
    case ROW_BARRIER_NULL_COMM:
        return weft_barrier(none, s);
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
        return weft_all_reduce(c, NULL, b, MP_ARGS_ELEMS, d, WEFT_SUM, s);
    case ROW_AR_NULL_RECV:
        return weft_all_reduce(c, a, NULL, MP_ARGS_ELEMS, d, WEFT_SUM, s);
    case ROW_AG_NULL_SEND:
        return weft_all_gather(c, NULL, b, 1, d, s);
    case ROW_AG_NULL_RECV:
        return weft_all_gather(c, a, NULL, 1, d, s);
    case ROW_RS_NULL_SEND:
        return weft_reduce_scatter(c, NULL, b, 1, d, WEFT_SUM, s);
    case ROW_RS_NULL_RECV:
        return weft_reduce_scatter(c, a, NULL, 1, d, WEFT_SUM, s);
    case ROW_BC_NULL_RECV:
        return weft_broadcast(c, a, NULL, MP_ARGS_ELEMS, d, 0, s);
    case ROW_BC_NULL_SEND_ROOT:
        return weft_broadcast(c, NULL, b, MP_ARGS_ELEMS, d, 0, s);
    case ROW_A2A_NULL_SEND:
        return weft_all_to_all(c, NULL, b, 1, d, s);
    case ROW_A2A_NULL_RECV:
        return weft_all_to_all(c, a, NULL, 1, d, s);
    case ROW_A2AV_NULL_SEND:
        return weft_all_to_allv(c, NULL, f->ones, f->displs, b, f->ones, f->displs, d, s);
    case ROW_A2AV_NULL_RECV:
        return weft_all_to_allv(c, a, f->ones, f->displs, NULL, f->ones, f->displs, d, s);
    case ROW_A2AV_NULL_SENDCOUNTS:
        return weft_all_to_allv(c, a, NULL, f->displs, b, f->ones, f->displs, d, s);
    case ROW_A2AV_NULL_SDISPLS:
        return weft_all_to_allv(c, a, f->ones, NULL, b, f->ones, f->displs, d, s);
    case ROW_A2AV_NULL_RECVCOUNTS:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, NULL, f->displs, d, s);
    case ROW_A2AV_NULL_RDISPLS:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, NULL, d, s);
    case ROW_AR_BAD_DTYPE:
        return weft_all_reduce(c, a, b, 8, MP_ARGS_BAD_DTYPE, WEFT_SUM, s);
    case ROW_AR_NEGATIVE_DTYPE:
        return weft_all_reduce(c, a, b, 8, (weft_dtype_t)-1, WEFT_SUM, s);
    case ROW_AG_BAD_DTYPE:
        return weft_all_gather(c, a, b, 1, MP_ARGS_BAD_DTYPE, s);
    case ROW_RS_BAD_DTYPE:
        return weft_reduce_scatter(c, a, b, 1, MP_ARGS_BAD_DTYPE, WEFT_SUM, s);
    case ROW_BC_BAD_DTYPE:
        return weft_broadcast(c, a, b, 8, MP_ARGS_BAD_DTYPE, 0, s);
    case ROW_A2A_BAD_DTYPE:
        return weft_all_to_all(c, a, b, 1, MP_ARGS_BAD_DTYPE, s);
    case ROW_A2AV_BAD_DTYPE:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->displs, MP_ARGS_BAD_DTYPE,
                                s);
    case ROW_AR_BAD_OP:
        return weft_all_reduce(c, a, b, 8, d, BAD_OP, s);
    case ROW_AR_NEGATIVE_OP:
        return weft_all_reduce(c, a, b, 8, d, (weft_redop_t)-1, s);
    case ROW_RS_BAD_OP:
        return weft_reduce_scatter(c, a, b, 1, d, BAD_OP, s);
    case ROW_BC_NEGATIVE_ROOT:
        return weft_broadcast(c, a, b, 8, d, -1, s);
    case ROW_BC_ROOT_TOO_LARGE:
        return weft_broadcast(c, a, b, 8, d, ctx->nranks, s);
    case ROW_AR_STREAM:
        return weft_all_reduce(c, a, b, 8, d, WEFT_SUM, hs);
    case ROW_AG_STREAM:
        return weft_all_gather(c, a, b, 1, d, hs);
    case ROW_RS_STREAM:
        return weft_reduce_scatter(c, a, b, 1, d, WEFT_SUM, hs);
    case ROW_BC_STREAM:
        return weft_broadcast(c, a, b, 8, d, 0, hs);
    case ROW_A2A_STREAM:
        return weft_all_to_all(c, a, b, 1, d, hs);
    case ROW_A2AV_STREAM:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->displs, d, hs);
    case ROW_BARRIER_STREAM:
        return weft_barrier(c, hs);
    case ROW_AR_OVERFLOW:
        return weft_all_reduce(c, a, b, OVERFLOW_COUNT, d, WEFT_SUM, s);
    case ROW_AG_OVERFLOW:
        return weft_all_gather(c, a, b, OVERFLOW_COUNT, d, s);
    case ROW_RS_OVERFLOW:
        return weft_reduce_scatter(c, a, b, OVERFLOW_COUNT, d, WEFT_SUM, s);
    case ROW_BC_OVERFLOW:
        return weft_broadcast(c, a, b, OVERFLOW_COUNT, d, 0, s);
    case ROW_A2A_OVERFLOW:
        return weft_all_to_all(c, a, b, OVERFLOW_COUNT, d, s);
    case ROW_A2AV_OVERFLOW:
        return weft_all_to_allv(c, a, f->huge, f->displs, b, f->huge, f->displs, d, s);
    case ROW_AR_HUGE_INPLACE: /* in place: no overlap check catches it */
        return weft_all_reduce(c, a, a, HUGE_COUNT, d, WEFT_SUM, s);
    case ROW_BC_HUGE_INPLACE:
        return weft_broadcast(c, a, a, HUGE_COUNT, d, 0, s);
    case ROW_A2AV_HUGE_DISPL:
        /* The far blocks on the buffer at the higher address, so that no overlap check catches
         * them: only the bound on what a process can address does. */
        if ((uintptr_t)a < (uintptr_t)b)
            return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->far, d, s);
        return weft_all_to_allv(c, a, f->ones, f->far, b, f->ones, f->displs, d, s);
    case ROW_A2A_OVERLAP:
        return weft_all_to_all(c, a, a, 1, d, s);
    case ROW_A2AV_OVERLAP:
        return weft_all_to_allv(c, a, f->ones, f->displs, a, f->ones, f->displs, d, s);
    /* Partial overlaps: aligned, neither equal nor in place, sharing some bytes. */
    case ROW_AR_OVERLAP:
        return weft_all_reduce(c, a, (char *)a + 8, 8, d, WEFT_SUM, s);
    case ROW_RS_OVERLAP: /* 2 elements per rank: the in-place block is a + 16 * rank */
        return weft_reduce_scatter(c, a, (char *)a + 16 * (size_t)ctx->rank + 8, 2, d, WEFT_SUM, s);
    case ROW_BC_OVERLAP:
        return weft_broadcast(c, a, (char *)a + 8, 8, d, 0, s);
    case ROW_A2AV_RECV_OVERLAP: /* send blocks apart from the receive blocks, which coincide */
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->zeros, d, s);
    case ROW_AR_MISALIGNED:
        return weft_all_reduce(c, a, (char *)b + 4, 8, d, WEFT_SUM, s);
    case ROW_RS_MISALIGNED:
        return weft_reduce_scatter(c, (char *)a + 4, b, 1, d, WEFT_SUM, s);
    case ROW_FREE_FOREIGN_0:
    case ROW_FREE_FOREIGN_1:
        return weft_free(c, f->foreign[row - ROW_FREE_FOREIGN_0].ptr);
    case ROW_FREE_INTERIOR:
        return weft_free(c, (char *)f->reg + 8);
    case ROW_MALLOC_NULL_OUT:
        return weft_malloc(c, NULL, 64);
    case ROW_MALLOC_HUGE: {
        void *p = NULL;
        return weft_malloc(c, &p, SIZE_MAX);
    }
    case ROW_STATS_NULL_OUT:
        return weft_get_stats(c, NULL);
    case NUM_ROWS:
        break;
    }
    return WEFT_ERR_INTERNAL;
}

void mp_args_fixture_create(mp_ctx_t *ctx, mp_args_fixture_t *f, void *stream, void *host_stream)
{
    int n = ctx->nranks;
    *f = (mp_args_fixture_t){.stream = stream, .host_stream = host_stream};
    size_t bytes = 2 * MP_ARGS_ELEMS * 8;
    mp_ok(ctx, weft_malloc(ctx->comm, &f->reg, bytes), "weft_malloc");
    mp_ok(ctx, weft_malloc(ctx->comm, &f->reg2, bytes), "weft_malloc");
    f->plain = malloc(MP_ARGS_ELEMS * 8);
    size_t *arrays = calloc(5 * (size_t)n, sizeof *arrays);
    if (!f->reg || !f->reg2 || !f->plain || !arrays)
        mp_fatal(ctx, "fixture allocation failed");
    f->ones = arrays;
    f->zeros = arrays + n;
    f->displs = arrays + 2 * n;
    f->huge = arrays + 3 * n;
    f->far = arrays + 4 * n;
    for (int p = 0; p < n; p++) {
        f->ones[p] = 1;
        f->displs[p] = (size_t)p;
        f->huge[p] = OVERFLOW_COUNT;
        f->far[p] = HUGE_COUNT + (size_t)p;
    }
}

void mp_args_fixture_destroy(mp_ctx_t *ctx, mp_args_fixture_t *f)
{
    mp_ok(ctx, weft_free(ctx->comm, f->reg), "weft_free");
    mp_ok(ctx, weft_free(ctx->comm, f->reg2), "weft_free");
    free(f->plain);
    free(f->ones); /* the start of the five count arrays */
    *f = (mp_args_fixture_t){0};
}

void mp_args_run_invalid(mp_ctx_t *ctx, const mp_args_fixture_t *f, mp_args_after_fn after,
                         void *arg)
{
    for (int r = 0; r < NUM_ROWS; r++) {
        if (!row_runs(ctx, f, (row_t)r))
            continue;
        const char *what = row_what(f, (row_t)r);
        mp_case(ctx, "%s", what);
        weft_status_t st = bad_call(ctx, f, (row_t)r);
        if (mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, rows[r].fn, what) && rows[r].arg)
            mp_check(ctx, strstr(weft_last_error(), rows[r].arg) != NULL,
                     "%s: weft_last_error() \"%s\" does not say \"%s\"", what, weft_last_error(),
                     rows[r].arg);
        after(arg, f, what);
    }
}

void mp_args_run_zero_counts(mp_ctx_t *ctx, const mp_args_fixture_t *f)
{
    weft_comm_t c = ctx->comm;
    void *s = f->stream;
    const weft_dtype_t d = WEFT_FLOAT32;
    mp_case(ctx, "count 0 with NULL buffers");
    mp_expect_status(ctx, weft_all_reduce(c, NULL, NULL, 0, d, WEFT_SUM, s), WEFT_SUCCESS, NULL,
                     "all_reduce(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_all_gather(c, NULL, NULL, 0, d, s), WEFT_SUCCESS, NULL,
                     "all_gather(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_reduce_scatter(c, NULL, NULL, 0, d, WEFT_MAX, s), WEFT_SUCCESS, NULL,
                     "reduce_scatter(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_broadcast(c, NULL, NULL, 0, d, 0, s), WEFT_SUCCESS, NULL,
                     "broadcast(NULL, NULL, 0)");
    mp_expect_status(ctx, weft_all_to_all(c, NULL, NULL, 0, d, s), WEFT_SUCCESS, NULL,
                     "all_to_all(NULL, NULL, 0)");
    mp_expect_status(
        ctx, weft_all_to_allv(c, NULL, f->zeros, f->displs, NULL, f->zeros, f->displs, d, s),
        WEFT_SUCCESS, NULL, "all_to_allv(NULL, zero counts, NULL, zero counts)");
}

void mp_args_run_zero_malloc(mp_ctx_t *ctx)
{
    weft_comm_t c = ctx->comm;
    mp_case(ctx, "weft_malloc of 0 bytes, weft_free(NULL)");
    void *p = &p;
    mp_expect_status(ctx, weft_malloc(c, &p, 0), WEFT_SUCCESS, NULL, "weft_malloc(0)");
    mp_check(ctx, p == NULL, "weft_malloc(0) set the pointer to %p, expected NULL", p);
    mp_expect_status(ctx, weft_free(c, NULL), WEFT_SUCCESS, NULL, "weft_free(NULL)");
}

/* ---------------------------------------------------------------------------------------------
 * Mismatched calls
 * ------------------------------------------------------------------------------------------- */
#define MISMATCH_ELEMS 64 /* per-peer capacity of the buffers, in elements of up to 8 bytes */
#define MESH_COUNT 4099   /* elements of 4 bytes: 16 KiB, far beyond the inline payload */
#define BIG_COUNT 100000  /* elements of 4 bytes of CASE_ALL_REDUCE_INLINE_VS_MESH */
/* Elements of 4 bytes of CASE_ALL_REDUCE_INPLACE_MIXED: 1.5 MiB, from the in-place two-shot
 * threshold up and below the out-of-place one (cases.h). */
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
    CASE_ALL_TO_ALLV_SELF,
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
    [CASE_ALL_TO_ALLV_SELF] = "all_to_allv, last rank sends itself 3 elements and expects 2",
    [CASE_ALL_REDUCE_COUNT_MESH] = "all_reduce on the mesh, rank 0 count 4100, others 4099",
    [CASE_ALL_GATHER_COUNT_MESH] = "all_gather on the mesh, last rank count 4099, others 4100",
    [CASE_ALL_REDUCE_INLINE_VS_MESH] = "all_reduce, rank 0 count 16 (inline), others 100000 (mesh)",
    [CASE_ALL_REDUCE_ZERO] = "all_reduce, rank 0 count 0, others 16",
    [CASE_BROADCAST_ZERO_MESH] = "broadcast, last rank count 0, others 4099 (mesh)",
    [CASE_ALL_REDUCE_INPLACE_MIXED] =
        "all_reduce of 1.5 MiB, rank 0 in place (two-shot), others out of place (one-shot)",
};

static weft_status_t mismatched_call(mp_ctx_t *ctx, case_t c, void *a, void *b, size_t *arrays,
                                     void *s)
{
    weft_comm_t comm = ctx->comm;
    int r = ctx->rank, last = ctx->nranks - 1, n = ctx->nranks;
    switch (c) {
    case CASE_ALL_REDUCE_VS_ALL_GATHER:
        return r % 2 == 0 ? weft_all_reduce(comm, a, b, 16, WEFT_INT32, WEFT_SUM, s)
                          : weft_all_gather(comm, a, b, 16, WEFT_INT32, s);
    case CASE_ALL_REDUCE_VS_BARRIER:
        return r == 0 ? weft_barrier(comm, s)
                      : weft_all_reduce(comm, a, b, 16, WEFT_INT32, WEFT_SUM, s);
    case CASE_BROADCAST_VS_ALL_TO_ALL:
        return r == last ? weft_all_to_all(comm, a, b, 4, WEFT_INT32, s)
                         : weft_broadcast(comm, a, b, 4, WEFT_INT32, 0, s);
    case CASE_REDUCE_SCATTER_VS_ALL_REDUCE:
        return r == 1 ? weft_reduce_scatter(comm, a, b, 4, WEFT_FLOAT32, WEFT_SUM, s)
                      : weft_all_reduce(comm, a, b, 4, WEFT_FLOAT32, WEFT_SUM, s);
    case CASE_ALL_REDUCE_COUNT:
        return weft_all_reduce(comm, a, b, r == 0 ? 17 : 16, WEFT_INT32, WEFT_SUM, s);
    case CASE_ALL_GATHER_COUNT:
        return weft_all_gather(comm, a, b, r == last ? 9 : 8, WEFT_INT64, s);
    case CASE_ALL_TO_ALL_COUNT:
        return weft_all_to_all(comm, a, b, r == 1 ? 5 : 4, WEFT_UINT8, s);
    case CASE_ALL_REDUCE_DTYPE:
        return weft_all_reduce(comm, a, b, 16, r == 1 ? WEFT_FLOAT32 : WEFT_INT32, WEFT_SUM, s);
    case CASE_BROADCAST_DTYPE:
        return weft_broadcast(comm, a, b, 16, r == 0 ? WEFT_BFLOAT16 : WEFT_FLOAT16, 0, s);
    case CASE_ALL_REDUCE_OP:
        return weft_all_reduce(comm, a, b, 16, WEFT_INT32, r == 0 ? WEFT_MAX : WEFT_SUM, s);
    case CASE_REDUCE_SCATTER_OP:
        return weft_reduce_scatter(comm, a, b, 4, WEFT_INT32, r == last ? WEFT_MIN : WEFT_SUM, s);
    case CASE_BROADCAST_ROOT:
        return weft_broadcast(comm, a, b, 16, WEFT_INT32, r == 0 ? 0 : 1, s);
    case CASE_ALL_TO_ALLV_COUNTS: {
        size_t *sendcounts = arrays, *recvcounts = arrays + n, *displs = arrays + 2 * n;
        for (int p = 0; p < n; p++) {
            sendcounts[p] = 2;
            recvcounts[p] = r == 0 && p == 1 ? 3 : 2;
            displs[p] = (size_t)p * 4;
        }
        return weft_all_to_allv(comm, a, sendcounts, displs, b, recvcounts, displs, WEFT_INT32, s);
    }
    case CASE_ALL_TO_ALLV_SELF: {
        size_t *sendcounts = arrays, *recvcounts = arrays + n, *displs = arrays + 2 * n;
        for (int p = 0; p < n; p++) {
            sendcounts[p] = r == last && p == last ? 3 : 2;
            recvcounts[p] = 2;
            displs[p] = (size_t)p * 4;
        }
        return weft_all_to_allv(comm, a, sendcounts, displs, b, recvcounts, displs, WEFT_INT32, s);
    }
    case CASE_ALL_REDUCE_COUNT_MESH:
        return weft_all_reduce(comm, a, b, r == 0 ? MESH_COUNT + 1 : MESH_COUNT, WEFT_INT32,
                               WEFT_SUM, s);
    case CASE_ALL_GATHER_COUNT_MESH:
        return weft_all_gather(comm, a, b, r == last ? MESH_COUNT : MESH_COUNT + 1, WEFT_INT32, s);
    case CASE_ALL_REDUCE_INLINE_VS_MESH:
        return weft_all_reduce(comm, a, b, r == 0 ? 16 : BIG_COUNT, WEFT_FLOAT32, WEFT_SUM, s);
    case CASE_ALL_REDUCE_ZERO:
        return weft_all_reduce(comm, a, b, r == 0 ? 0 : 16, WEFT_INT32, WEFT_SUM, s);
    case CASE_BROADCAST_ZERO_MESH:
        return weft_broadcast(comm, a, b, r == last ? 0 : MESH_COUNT, WEFT_INT32, 0, s);
    case CASE_ALL_REDUCE_INPLACE_MIXED:
        return weft_all_reduce(comm, a, r == 0 ? a : b, MIXED_COUNT, WEFT_FLOAT32, WEFT_SUM, s);
    case NUM_CASES:
        break;
    }
    return WEFT_ERR_INTERNAL;
}

/* The verdict this rank must word for case c, into buf: the ranks of an all_to_allv pair whose
 * counts differ name the direction that differs, as sender and receiver (rank 0 sees the
 * reverse of its own sending direction differ in CASE_ALL_TO_ALLV_COUNTS), and the other ranks
 * learn from the pair digest that some other pair differs. Returns 0 where no exact wording is
 * required. */
static int expected_message(const mp_ctx_t *ctx, case_t c, char *buf, size_t cap)
{
    int r = ctx->rank, last = ctx->nranks - 1;
    if (c == CASE_ALL_TO_ALLV_COUNTS && (r == 0 || r == 1)) {
        snprintf(buf, cap, "rank 1 sends 2 elements to rank 0, which expects 3");
        return 1;
    }
    if (c == CASE_ALL_TO_ALLV_SELF && r == last) {
        snprintf(buf, cap, "rank %d sends 3 elements to rank %d, which expects 2", last, last);
        return 1;
    }
    if (c == CASE_ALL_TO_ALLV_COUNTS || c == CASE_ALL_TO_ALLV_SELF) {
        snprintf(buf, cap, "the counts of another rank disagree");
        return 1;
    }
    return 0;
}

static size_t max_size(size_t x, size_t y)
{
    return x > y ? x : y;
}

size_t mp_mismatch_bytes(int nranks)
{
    /* all_to_all(v) of MISMATCH_ELEMS per peer, the all_gather of MESH_COUNT + 1 per rank, the
     * all_reduces of BIG_COUNT and MIXED_COUNT. */
    size_t n = (size_t)nranks;
    return max_size(max_size(n * MISMATCH_ELEMS * 8, n * (MESH_COUNT + 1) * 4),
                    max_size(BIG_COUNT, MIXED_COUNT) * 4);
}

void mp_mismatch_run(mp_ctx_t *ctx, void *a, void *b, void *stream, mp_mismatch_after_fn after,
                     void *arg)
{
    size_t *arrays = calloc(3 * (size_t)ctx->nranks, sizeof *arrays);
    if (!arrays)
        mp_fatal(ctx, "out of memory");
    for (int c = 0; c < NUM_CASES; c++) {
        mp_case(ctx, "%s", case_names[c]);
        weft_status_t st = mismatched_call(ctx, (case_t)c, a, b, arrays, stream);
        char message[128];
        mp_expect_status(ctx, st, WEFT_ERR_MISMATCH,
                         expected_message(ctx, (case_t)c, message, sizeof message) ? message : NULL,
                         case_names[c]);
        if (st != WEFT_SUCCESS && st != WEFT_ERR_MISMATCH && st != WEFT_ERR_INVALID_ARGUMENT)
            mp_fatal(ctx, "%s returned %s: the communicator is unusable", case_names[c],
                     weft_status_string(st));
        after(arg, case_names[c]);
    }
    free(arrays);
}

/* ---------------------------------------------------------------------------------------------
 * all_to_all and all_to_allv
 * ------------------------------------------------------------------------------------------- */
void mp_a2a_check(mp_ctx_t *ctx, weft_dtype_t dt, size_t count, const void *send, const void *recv)
{
    size_t bytes = count * mp_dtype_bytes(dt), n = (size_t)ctx->nranks;
    for (int p = 0; p < ctx->nranks; p++) {
        char what[64];
        snprintf(what, sizeof what, "recvbuf block %d", p);
        mp_raw_check(ctx, what, (const unsigned char *)recv + (size_t)p * bytes, dt, p,
                     (uint64_t)ctx->rank * count, count);
    }
    mp_raw_check(ctx, "sendbuf", send, dt, ctx->rank, 0, n * count);
}

static const char *const pattern_names[MP_A2AV_NUM_PATTERNS] = {"small", "medium", "skewed",
                                                                "large", "zero",   "huge"};

const char *mp_a2av_pattern_name(mp_a2av_pattern_t pattern)
{
    return pattern_names[pattern];
}

/* Elements rank s sends to rank d in the current case; the same on every rank. */
static size_t a2av_count(const mp_ctx_t *ctx, mp_a2av_pattern_t pattern, int s, int d)
{
    uint64_t h = mp_hash(ctx->seed + ctx->case_id, (uint64_t)s, (uint64_t)d, 7);
    int zero = (h & 3) == 0; /* about a quarter of the blocks */
    h >>= 2;
    switch (pattern) {
    case MP_A2AV_SMALL:
        return zero ? 0 : h % 8;
    case MP_A2AV_MEDIUM:
        return zero ? 0 : h % 301;
    case MP_A2AV_SKEWED:
        return s == 0 || d == ctx->nranks - 1 ? 0 : 1 + h % 50;
    case MP_A2AV_LARGE:
        return zero ? 0 : h % 5001;
    case MP_A2AV_ZERO:
        return 0;
    default:
        return zero ? 0 : h % 200001;
    }
}

/* Place the blocks of counts[] in a buffer (side 0: send, 1: receive) as cases.h describes.
 * Sets displs[] and returns the buffer's length in elements. */
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

void mp_a2av_plan_create(mp_ctx_t *ctx, mp_a2av_pattern_t pattern, mp_a2av_plan_t *plan)
{
    int n = ctx->nranks, me = ctx->rank;
    size_t *arrays = calloc(5 * (size_t)n, sizeof *arrays);
    if (!arrays)
        mp_fatal(ctx, "out of memory");
    plan->sendcounts = arrays;
    plan->sdispls = arrays + n;
    plan->recvcounts = arrays + 2 * n;
    plan->rdispls = arrays + 3 * n;
    for (int p = 0; p < n; p++) {
        plan->sendcounts[p] = a2av_count(ctx, pattern, me, p);
        plan->recvcounts[p] = a2av_count(ctx, pattern, p, me);
    }
    plan->largest = 0;
    for (int s = 0; s < n; s++) {
        for (int d = 0; d < n; d++) {
            size_t c = a2av_count(ctx, pattern, s, d);
            plan->largest = c > plan->largest ? c : plan->largest;
        }
    }
    plan->slen = a2av_layout(ctx, 0, plan->sendcounts, plan->sdispls);
    plan->rlen = a2av_layout(ctx, 1, plan->recvcounts, plan->rdispls);
}

void mp_a2av_plan_destroy(mp_a2av_plan_t *plan)
{
    free(plan->sendcounts); /* the start of the four arrays */
    *plan = (mp_a2av_plan_t){0};
}

void mp_a2av_fill(const mp_ctx_t *ctx, const mp_a2av_plan_t *plan, weft_dtype_t dt, void *send)
{
    size_t es = mp_dtype_bytes(dt);
    for (int p = 0; p < ctx->nranks; p++)
        mp_raw_fill(ctx, dt, ctx->rank, (uint64_t)p << 32, plan->sendcounts[p],
                    (unsigned char *)send + plan->sdispls[p] * es);
}

void mp_a2av_check(mp_ctx_t *ctx, const mp_a2av_plan_t *plan, weft_dtype_t dt, const void *send,
                   const void *recv)
{
    int n = ctx->nranks, me = ctx->rank;
    size_t es = mp_dtype_bytes(dt);
    const unsigned char *sp = send, *rp = recv;
    char what[64];
    for (int p = 0; p < n; p++) {
        snprintf(what, sizeof what, "recvbuf block from rank %d", p);
        mp_raw_check(ctx, what, rp + plan->rdispls[p] * es, dt, p, (uint64_t)me << 32,
                     plan->recvcounts[p]);
        snprintf(what, sizeof what, "sendbuf block to rank %d", p);
        mp_raw_check(ctx, what, sp + plan->sdispls[p] * es, dt, me, (uint64_t)p << 32,
                     plan->sendcounts[p]);
    }
    /* The gaps between receive blocks were never a destination. */
    unsigned char *covered = calloc(plan->rlen, 1);
    if (!covered)
        mp_fatal(ctx, "out of memory");
    for (int p = 0; p < n; p++)
        memset(covered + plan->rdispls[p], 1, plan->recvcounts[p]);
    for (size_t i = 0; i < plan->rlen; i++) {
        if (covered[i])
            continue;
        snprintf(what, sizeof what, "recvbuf gap element %zu", i);
        mp_check_poison(ctx, what, rp + i * es, es);
    }
    free(covered);
}
