/*
 * gpu_invalid.c - argument checking at the API boundary on the CUDA backend.
 *
 * The table of tests/mp/mp_invalid.c, on device buffers, with the test's stream passed to every
 * call (a stream is valid on this backend, so the host backend's "stream must be NULL" rows have
 * no counterpart): each bad call must return WEFT_ERR_INVALID_ARGUMENT at once, with a
 * weft_last_error() text naming the function, and leave the communicator usable: a valid
 * all_reduce on the stream right after each row must give the exact result. The table covers a
 * NULL communicator, NULL buffers with a non-zero count, dtype and reduction out of range, root
 * out of range, count * element size overflowing size_t, all_to_all with overlapping buffers,
 * all_to_allv with NULL count or displacement arrays, weft_free of memory weft_malloc did not
 * return (cudaMalloc, host malloc, an interior pointer), and NULL output pointers. Valid edge
 * cases must succeed: count 0 with NULL buffers, a 0-byte weft_malloc, weft_free(NULL), and the
 * legacy default stream (NULL) for a collective. Under each registration mode.
 */
#include "gpu_harness.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FIX_ELEMS 64                      /* elements of the fixture buffers */
#define OVERFLOW_COUNT (SIZE_MAX / 4 + 1) /* times 8 (float64) overflows size_t */
#define BAD_DTYPE ((weft_dtype_t)42)
#define BAD_OP ((weft_redop_t)42)

/* Buffers the rows use; count arrays hold 1 per peer, displacements 0, 1, 2, ... */
typedef struct fixture {
    weft_comm_t comm;
    void *stream;
    int nranks;
    void *reg;      /* weft_malloc, 2 * FIX_ELEMS float64 */
    void *reg2;     /* weft_malloc, 2 * FIX_ELEMS float64 */
    void *cuda;     /* cudaMalloc, FIX_ELEMS float64 */
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
    ROW_AR_OVERFLOW,
    ROW_AG_OVERFLOW,
    ROW_RS_OVERFLOW,
    ROW_BC_OVERFLOW,
    ROW_A2A_OVERFLOW,
    ROW_A2A_OVERLAP,
    ROW_FREE_CUDA_MALLOCED,
    ROW_FREE_HOST_MALLOCED,
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
    [ROW_AR_OVERFLOW] = {"all_reduce count * 8 overflows size_t", "weft_all_reduce"},
    [ROW_AG_OVERFLOW] = {"all_gather sendcount * 8 overflows size_t", "weft_all_gather"},
    [ROW_RS_OVERFLOW] = {"reduce_scatter recvcount * 8 overflows size_t", "weft_reduce_scatter"},
    [ROW_BC_OVERFLOW] = {"broadcast count * 8 overflows size_t", "weft_broadcast"},
    [ROW_A2A_OVERFLOW] = {"all_to_all count * 8 overflows size_t", "weft_all_to_all"},
    [ROW_A2A_OVERLAP] = {"all_to_all with sendbuf == recvbuf", "weft_all_to_all"},
    [ROW_FREE_CUDA_MALLOCED] = {"weft_free of cudaMalloc'd memory", "weft_free"},
    [ROW_FREE_HOST_MALLOCED] = {"weft_free of host malloc'd memory", "weft_free"},
    [ROW_FREE_INTERIOR] = {"weft_free of an interior pointer", "weft_free"},
    [ROW_MALLOC_NULL_OUT] = {"weft_malloc with a NULL ptr out", "weft_malloc"},
    [ROW_STATS_NULL_OUT] = {"weft_get_stats with a NULL out", "weft_get_stats"},
};

static weft_status_t bad_call(fixture_t *f, row_t row)
{
    weft_comm_t c = f->comm, none = NULL;
    void *a = f->reg, *b = f->reg2, *s = f->stream;
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
        return weft_all_reduce(c, NULL, b, FIX_ELEMS, d, WEFT_SUM, s);
    case ROW_AR_NULL_RECV:
        return weft_all_reduce(c, a, NULL, FIX_ELEMS, d, WEFT_SUM, s);
    case ROW_AG_NULL_SEND:
        return weft_all_gather(c, NULL, b, 1, d, s);
    case ROW_AG_NULL_RECV:
        return weft_all_gather(c, a, NULL, 1, d, s);
    case ROW_RS_NULL_SEND:
        return weft_reduce_scatter(c, NULL, b, 1, d, WEFT_SUM, s);
    case ROW_RS_NULL_RECV:
        return weft_reduce_scatter(c, a, NULL, 1, d, WEFT_SUM, s);
    case ROW_BC_NULL_RECV:
        return weft_broadcast(c, a, NULL, FIX_ELEMS, d, 0, s);
    case ROW_BC_NULL_SEND_ROOT:
        return weft_broadcast(c, NULL, b, FIX_ELEMS, d, 0, s);
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
        return weft_all_reduce(c, a, b, 8, BAD_DTYPE, WEFT_SUM, s);
    case ROW_AR_NEGATIVE_DTYPE:
        return weft_all_reduce(c, a, b, 8, (weft_dtype_t)-1, WEFT_SUM, s);
    case ROW_AG_BAD_DTYPE:
        return weft_all_gather(c, a, b, 1, BAD_DTYPE, s);
    case ROW_RS_BAD_DTYPE:
        return weft_reduce_scatter(c, a, b, 1, BAD_DTYPE, WEFT_SUM, s);
    case ROW_BC_BAD_DTYPE:
        return weft_broadcast(c, a, b, 8, BAD_DTYPE, 0, s);
    case ROW_A2A_BAD_DTYPE:
        return weft_all_to_all(c, a, b, 1, BAD_DTYPE, s);
    case ROW_A2AV_BAD_DTYPE:
        return weft_all_to_allv(c, a, f->ones, f->displs, b, f->ones, f->displs, BAD_DTYPE, s);
    case ROW_AR_BAD_OP:
        return weft_all_reduce(c, a, b, 8, d, BAD_OP, s);
    case ROW_AR_NEGATIVE_OP:
        return weft_all_reduce(c, a, b, 8, d, (weft_redop_t)-1, s);
    case ROW_RS_BAD_OP:
        return weft_reduce_scatter(c, a, b, 1, d, BAD_OP, s);
    case ROW_BC_NEGATIVE_ROOT:
        return weft_broadcast(c, a, b, 8, d, -1, s);
    case ROW_BC_ROOT_TOO_LARGE:
        return weft_broadcast(c, a, b, 8, d, f->nranks, s);
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
    case ROW_A2A_OVERLAP:
        return weft_all_to_all(c, a, a, 1, d, s);
    case ROW_FREE_CUDA_MALLOCED:
        return weft_free(c, f->cuda);
    case ROW_FREE_HOST_MALLOCED:
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

/* A valid all_reduce (int32 SUM) on the fixture buffers, on `stream` (the test's stream, or
 * NULL: the legacy default stream); checks the result exactly. */
static void valid_all_reduce(gpu_ctx_t *g, fixture_t *f, const char *after, cudaStream_t stream)
{
    mp_ctx_t *ctx = &g->mp;
    int32_t in[FIX_ELEMS], out[FIX_ELEMS];
    mp_case(ctx, "valid all_reduce%s after: %s", stream ? "" : " on the legacy default stream",
            after);
    mp_red_fill(ctx, WEFT_INT32, WEFT_SUM, ctx->rank, 0, FIX_ELEMS, in);
    gpu_cuda_ok(g, cudaMemsetAsync(f->reg2, 0xA5, sizeof out, stream), "cudaMemsetAsync");
    gpu_cuda_ok(g, cudaMemcpyAsync(f->reg, in, sizeof in, cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync");
    weft_status_t st =
        weft_all_reduce(ctx->comm, f->reg, f->reg2, FIX_ELEMS, WEFT_INT32, WEFT_SUM, stream);
    int ok = mp_ok(ctx, st, "weft_all_reduce");
    gpu_cuda_ok(g, cudaMemcpyAsync(out, f->reg2, sizeof out, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync");
    if (stream)
        gpu_sync(g, "valid all_reduce");
    else
        gpu_cuda_ok(g, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (ok)
        mp_red_check_result(ctx, "recvbuf", out, WEFT_INT32, WEFT_SUM, 0, FIX_ELEMS);
}

/* Valid edge cases: each must succeed. */
static void valid_edges(gpu_ctx_t *g, fixture_t *f)
{
    mp_ctx_t *ctx = &g->mp;
    weft_comm_t c = ctx->comm;
    void *s = g->stream;
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
    gpu_sync(g, "count 0 calls");
    valid_all_reduce(g, f, "count 0 calls", g->stream);

    mp_case(ctx, "weft_malloc of 0 bytes, weft_free(NULL)");
    void *p = &p;
    mp_expect_status(ctx, weft_malloc(c, &p, 0), WEFT_SUCCESS, NULL, "weft_malloc(0)");
    mp_check(ctx, p == NULL, "weft_malloc(0) set the pointer to %p, expected NULL", p);
    mp_expect_status(ctx, weft_free(c, NULL), WEFT_SUCCESS, NULL, "weft_free(NULL)");

    /* The legacy default stream is a valid cudaStream_t; the test's stream is idle here. */
    valid_all_reduce(g, f, "the test's stream went idle", NULL);
    valid_all_reduce(g, f, "a call on the legacy default stream", g->stream);
}

int main(void)
{
    gpu_ctx_t g;
    gpu_init(&g, "gpu_invalid");
    mp_ctx_t *ctx = &g.mp;
    int n = ctx->nranks;
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        gpu_comm_open(&g, (weft_registration_t)reg);
        fixture_t f = {.comm = ctx->comm, .stream = g.stream, .nranks = n};
        size_t bytes = 2 * FIX_ELEMS * 8;
        mp_ok(ctx, weft_malloc(ctx->comm, &f.reg, bytes), "weft_malloc");
        mp_ok(ctx, weft_malloc(ctx->comm, &f.reg2, bytes), "weft_malloc");
        gpu_cuda_ok(&g, cudaMalloc(&f.cuda, FIX_ELEMS * 8), "cudaMalloc");
        f.plain = malloc(FIX_ELEMS * 8);
        size_t *arrays = calloc(3 * (size_t)n, sizeof *arrays);
        if (!f.reg || !f.reg2 || !f.plain || !arrays)
            mp_fatal(ctx, "fixture allocation failed");
        f.ones = arrays;
        f.zeros = arrays + n;
        f.displs = arrays + 2 * n;
        for (int p = 0; p < n; p++) {
            f.ones[p] = 1;
            f.displs[p] = (size_t)p;
        }
        valid_all_reduce(&g, &f, "communicator creation", g.stream);
        for (int r = 0; r < NUM_ROWS; r++) {
            if (r == ROW_BC_NULL_SEND_ROOT && n != 1)
                continue; /* non-roots may pass NULL: only the root's call would fail */
            mp_case(ctx, "%s", rows[r].what);
            weft_status_t st = bad_call(&f, (row_t)r);
            mp_expect_status(ctx, st, WEFT_ERR_INVALID_ARGUMENT, rows[r].fn, rows[r].what);
            valid_all_reduce(&g, &f, rows[r].what, g.stream);
        }
        valid_edges(&g, &f);
        gpu_sync(&g, "end of the table");
        mp_ok(ctx, weft_free(ctx->comm, f.reg), "weft_free");
        mp_ok(ctx, weft_free(ctx->comm, f.reg2), "weft_free");
        gpu_cuda_ok(&g, cudaFree(f.cuda), "cudaFree");
        free(f.plain);
        free(arrays);
        mp_comm_close(ctx);
    }
    return gpu_finish(&g);
}
