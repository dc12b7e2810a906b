/*
 * gpu_invalid.c - argument checking at the API boundary on the CUDA backend.
 *
 * The table of bad calls of tests/mp/cases.h (mp_args_run_invalid, shared with mp_invalid), on
 * device buffers, with the test's stream passed to every call (a stream is valid on this
 * backend, so the host backend's "stream must be NULL" rows are left out): each bad call must
 * return WEFT_ERR_INVALID_ARGUMENT at once, with a weft_last_error() text naming the function,
 * write nothing (before each row the fixture's output buffer is poisoned and its input filled with
 * fresh random bytes; once the stream is idle after it, both are read back: the output must still
 * be all poison and the input unchanged, as in mp_invalid), and leave the communicator usable: a
 * valid all_reduce on the stream right after each row must give the exact result. The foreign
 * pointers weft_free must refuse are cudaMalloc'd and host malloc'd memory. Valid edge cases must
 * succeed: count 0 with NULL buffers, a 0-byte weft_malloc, weft_free(NULL), the legacy default
 * stream (NULL) for a collective, and a collective while the caller's own failed cudaMalloc is
 * pending (which it leaves pending). Then the mismatched calls of cases.h (mp_mismatch_run, shared
 * with mp_mismatch) on the stream: every rank must get WEFT_ERR_MISMATCH before any launch, so
 * nothing may move (both buffers, poisoned before each case, keep their contents on every rank once
 * the stream is idle, as in mp_mismatch), and the valid all_reduce after each case must be exact;
 * the all-reduce thresholds are set to the one-GPU defaults, which that table's in-place case
 * needs, wherever the ranks run. Under each registration mode.
 */
#include "../mp/cases.h"
#include "gpu_harness.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A valid all_reduce (int32 SUM) on the fixture buffers, on `stream` (the test's stream, or
 * NULL: the legacy default stream); checks the result exactly. */
static void valid_all_reduce(gpu_ctx_t *g, const mp_args_fixture_t *f, const char *after,
                             cudaStream_t stream)
{
    mp_ctx_t *ctx = &g->mp;
    int32_t in[MP_ARGS_ELEMS], out[MP_ARGS_ELEMS];
    mp_case(ctx, "valid all_reduce%s after: %s", stream ? "" : " on the legacy default stream",
            after);
    mp_red_fill(ctx, WEFT_INT32, WEFT_SUM, ctx->rank, 0, MP_ARGS_ELEMS, in);
    gpu_cuda_ok(g, cudaMemsetAsync(f->reg2, 0xA5, sizeof out, stream), "cudaMemsetAsync");
    gpu_cuda_ok(g, cudaMemcpyAsync(f->reg, in, sizeof in, cudaMemcpyHostToDevice, stream),
                "cudaMemcpyAsync");
    weft_status_t st =
        weft_all_reduce(ctx->comm, f->reg, f->reg2, MP_ARGS_ELEMS, WEFT_INT32, WEFT_SUM, stream);
    int ok = mp_ok(ctx, st, "weft_all_reduce");
    gpu_cuda_ok(g, cudaMemcpyAsync(out, f->reg2, sizeof out, cudaMemcpyDeviceToHost, stream),
                "cudaMemcpyAsync");
    if (stream)
        gpu_sync(g, "valid all_reduce");
    else
        gpu_cuda_ok(g, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (ok)
        mp_red_check_result(ctx, "recvbuf", out, WEFT_INT32, WEFT_SUM, 0, MP_ARGS_ELEMS);
}

/* Bytes of each of the fixture's weft_malloc buffers (cases.h). */
#define FIXTURE_BYTES (2 * MP_ARGS_ELEMS * 8)

/* What a row may not change: f->reg as the row found it. */
typedef struct rows_state {
    gpu_ctx_t *g;
    unsigned char input[FIXTURE_BYTES];
    unsigned char host[FIXTURE_BYTES]; /* a buffer read back */
} rows_state_t;

/* Before a row, in stream order: fresh random bytes in f->reg (the rows' input, and their
 * output where the buffers overlap), kept in st->input, and poison in all of f->reg2 (the rows'
 * output). */
static void arm_row(rows_state_t *st, const mp_args_fixture_t *f)
{
    gpu_ctx_t *g = st->g;
    mp_raw_fill(&g->mp, WEFT_UINT64, g->mp.rank, 0, FIXTURE_BYTES / 8, st->input);
    gpu_cuda_ok(
        g, cudaMemcpyAsync(f->reg, st->input, FIXTURE_BYTES, cudaMemcpyHostToDevice, g->stream),
        "cudaMemcpyAsync");
    gpu_cuda_ok(g, cudaMemsetAsync(f->reg2, 0xA5, FIXTURE_BYTES, g->stream), "cudaMemsetAsync");
    gpu_sync(g, "arming a row"); /* st->input is rewritten before the copy could have read it */
}

/* After each row of the table: it wrote nothing (once the stream is idle, so that a launch the
 * rejected call should not have made would have finished), then a valid all_reduce on the test's
 * stream; then arm the next row. */
static void after_row(void *arg, const mp_args_fixture_t *f, const char *what)
{
    rows_state_t *st = arg;
    gpu_ctx_t *g = st->g;
    mp_ctx_t *ctx = &g->mp;
    gpu_sync(g, what);
    gpu_cuda_ok(g, cudaMemcpy(st->host, f->reg2, FIXTURE_BYTES, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
    mp_check_poison(ctx, "f->reg2 (output) after the rejected call", st->host, FIXTURE_BYTES);
    gpu_cuda_ok(g, cudaMemcpy(st->host, f->reg, FIXTURE_BYTES, cudaMemcpyDeviceToHost),
                "cudaMemcpy");
    size_t first = 0;
    while (first < FIXTURE_BYTES && st->host[first] == st->input[first])
        first++;
    mp_check(ctx, first == FIXTURE_BYTES,
             "f->reg (input) changed by the rejected call: byte %zu is 0x%02x, was 0x%02x", first,
             first < FIXTURE_BYTES ? st->host[first] : 0,
             first < FIXTURE_BYTES ? st->input[first] : 0);
    valid_all_reduce(g, f, what, g->stream);
    arm_row(st, f);
}

#define A_BYTE 0x11 /* the contents of a and b during a mismatched call */
#define B_BYTE 0xA5

typedef struct {
    gpu_ctx_t *g;
    const mp_args_fixture_t *f;
    void *a, *b;         /* weft_malloc, bytes each */
    unsigned char *host; /* bytes, the copy of a or b read back */
    size_t bytes;        /* mp_mismatch_bytes(nranks) */
} mismatch_arg_t;

/* Both buffers as every mismatched call must leave them, in stream order before the next call. */
static void fill_buffers(const mismatch_arg_t *m)
{
    gpu_cuda_ok(m->g, cudaMemsetAsync(m->a, A_BYTE, m->bytes, m->g->stream), "cudaMemsetAsync");
    gpu_cuda_ok(m->g, cudaMemsetAsync(m->b, B_BYTE, m->bytes, m->g->stream), "cudaMemsetAsync");
}

/* Bytes of the device buffer dev (m->bytes) other than value; the stream must be idle. */
static size_t count_changed(const mismatch_arg_t *m, const void *dev, int value)
{
    gpu_cuda_ok(m->g, cudaMemcpy(m->host, dev, m->bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    size_t changed = 0;
    for (size_t i = 0; i < m->bytes; i++)
        changed += m->host[i] != (unsigned char)value;
    return changed;
}

/* After each mismatched call: nothing moved (once the stream is idle, so that a launch the call
 * should not have made would have finished), then a valid all_reduce on the test's stream. */
static void after_mismatch(void *arg, const char *what)
{
    const mismatch_arg_t *m = arg;
    gpu_sync(m->g, what);
    size_t a = count_changed(m, m->a, A_BYTE), b = count_changed(m, m->b, B_BYTE);
    mp_check(&m->g->mp, a == 0 && b == 0,
             "%s: the mismatched call changed %zu bytes of the input and %zu of the output", what,
             a, b);
    valid_all_reduce(m->g, m->f, what, m->g->stream);
    fill_buffers(m);
}

/* The mismatched calls, on two weft_malloc buffers of their size. */
static void mismatches(gpu_ctx_t *g, const mp_args_fixture_t *f)
{
    mp_ctx_t *ctx = &g->mp;
    mismatch_arg_t m = {.g = g, .f = f, .bytes = mp_mismatch_bytes(ctx->nranks)};
    mp_ok(ctx, weft_malloc(ctx->comm, &m.a, m.bytes), "weft_malloc");
    mp_ok(ctx, weft_malloc(ctx->comm, &m.b, m.bytes), "weft_malloc");
    m.host = malloc(m.bytes);
    if (!m.a || !m.b || !m.host)
        mp_fatal(ctx, "weft_malloc or malloc returned NULL");
    fill_buffers(&m);
    mp_mismatch_run(ctx, m.a, m.b, g->stream, after_mismatch, &m);
    gpu_sync(g, "mismatched calls");
    free(m.host);
    mp_ok(ctx, weft_free(ctx->comm, m.a), "weft_free");
    mp_ok(ctx, weft_free(ctx->comm, m.b), "weft_free");
}

/* Valid edge cases: each must succeed. */
static void valid_edges(gpu_ctx_t *g, const mp_args_fixture_t *f)
{
    mp_ctx_t *ctx = &g->mp;
    mp_args_run_zero_counts(ctx, f);
    gpu_sync(g, "count 0 calls");
    valid_all_reduce(g, f, "count 0 calls", g->stream);
    mp_args_run_zero_malloc(ctx);

    /* The legacy default stream is a valid cudaStream_t; the test's stream is idle here. */
    valid_all_reduce(g, f, "the test's stream went idle", NULL);
    valid_all_reduce(g, f, "a call on the legacy default stream", g->stream);

    /* A CUDA error of the caller's own, left pending (a failed cudaMalloc, not sticky), is
     * neither taken for a failed launch of weft's nor cleared by it (libweft has a runtime of
     * its own, cudart_static, and its launches report their own status either way). */
    void *huge = NULL;
    cudaError_t err = cudaMalloc(&huge, (size_t)1 << 60);
    mp_check(ctx, err == cudaErrorMemoryAllocation, "cudaMalloc(2^60 bytes) returned %s",
             cudaGetErrorName(err));
    valid_all_reduce(g, f, "a failed cudaMalloc of the caller's, not cleared", g->stream);
    err = cudaGetLastError();
    mp_check(ctx, err == cudaErrorMemoryAllocation,
             "the caller's pending error after a collective: %s, expected "
             "cudaErrorMemoryAllocation",
             cudaGetErrorName(err));
}

int main(void)
{
    /* Before the first communicator reads the configuration (mp_mismatch_run's in-place case
     * needs these on several GPUs too). */
    if (setenv("WEFT_ALLREDUCE_TWOSHOT_BYTES", "2M", 1) != 0 ||
        setenv("WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES", "1M", 1) != 0) {
        perror("gpu_invalid: setenv");
        return 1;
    }
    gpu_ctx_t g;
    gpu_init(&g, "gpu_invalid");
    mp_ctx_t *ctx = &g.mp;
    for (int reg = 0; reg < MP_NUM_REG_MODES; reg++) {
        gpu_comm_open(&g, (weft_registration_t)reg);
        mp_args_fixture_t f;
        mp_args_fixture_create(ctx, &f, g.stream, NULL);
        void *cuda = NULL;
        gpu_cuda_ok(&g, cudaMalloc(&cuda, MP_ARGS_ELEMS * 8), "cudaMalloc");
        f.foreign[f.nforeign++] = (mp_args_foreign_t){cuda, "weft_free of cudaMalloc'd memory"};
        f.foreign[f.nforeign++] = (mp_args_foreign_t){f.plain, "weft_free of host malloc'd memory"};
        valid_all_reduce(&g, &f, "communicator creation", g.stream);
        rows_state_t st = {.g = &g};
        arm_row(&st, &f);
        mp_args_run_invalid(ctx, &f, after_row, &st);
        valid_edges(&g, &f);
        if (ctx->nranks > 1)
            mismatches(&g, &f);
        gpu_sync(&g, "end of the table");
        mp_args_fixture_destroy(ctx, &f);
        gpu_cuda_ok(&g, cudaFree(cuda), "cudaFree");
        mp_comm_close(ctx);
    }
    return gpu_finish(&g);
}
