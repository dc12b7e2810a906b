/*
 * cases.h - case tables shared by the host programs (tests/mp) and the GPU programs (tests/gpu):
 * the invalid-argument table of mp_invalid and gpu_invalid, the mismatched calls of mp_mismatch
 * and gpu_invalid, and the all_to_all / all_to_allv
 * data, counts and displacements of mp_all_to_all and gpu_collectives. Part of the harness
 * library weft_mp_harness; written against the public API (weft.h) only.
 *
 * The functions take buffers as the caller hands them to weft (host memory or device memory)
 * and the stream to pass to every call, so the same rows and patterns run on both backends. Checks
 * read host memory: a GPU program copies its buffers back first.
 *
 * Thread safety: as harness.h (an mp_ctx_t belongs to the thread that runs the test).
 */
#ifndef WEFT_TESTS_MP_CASES_H
#define WEFT_TESTS_MP_CASES_H

#include <stddef.h>

#include "harness.h"
#include "weft.h"

/* ---------------------------------------------------------------------------------------------
 * Invalid arguments
 * ------------------------------------------------------------------------------------------- */

/* Elements of the fixture's buffers (float64 in the bad calls: 512 bytes). */
#define MP_ARGS_ELEMS 64

/* A dtype out of range (weft_dtype_size must return 0 for it). */
#define MP_ARGS_BAD_DTYPE ((weft_dtype_t)42)

/* Pointers weft_malloc did not return, each passed to weft_free by one row. */
#define MP_ARGS_MAX_FOREIGN 2

typedef struct mp_args_foreign {
    void *ptr;
    const char *what; /* the row's description, e.g. "weft_free of malloc'd memory" */
} mp_args_foreign_t;

/* Buffers and streams the rows use. */
typedef struct mp_args_fixture {
    void *stream;      /* passed to every call: NULL on the host backend, a stream on CUDA */
    void *host_stream; /* non-NULL: also run the rows that pass this stream where the backend
                          refuses any (the host backend); NULL leaves them out */
    void *reg;         /* weft_malloc, 2 * MP_ARGS_ELEMS float64 */
    void *reg2;        /* weft_malloc, 2 * MP_ARGS_ELEMS float64 */
    void *plain;       /* malloc, MP_ARGS_ELEMS float64 */
    size_t *ones;      /* nranks counts of 1 */
    size_t *zeros;     /* nranks counts of 0 */
    size_t *displs;    /* nranks displacements 0, 1, ..., nranks - 1 */
    size_t *huge;      /* nranks counts whose size in float64 overflows size_t */
    size_t *far;       /* nranks displacements 2^60, 2^60 + 1, ...: beyond any address space */
    mp_args_foreign_t foreign[MP_ARGS_MAX_FOREIGN]; /* the caller fills them */
    int nforeign;
} mp_args_fixture_t;

/* Allocate the buffers and count arrays of f on ctx->comm and set its streams; no foreign
 * pointers yet. Exits 1 (mp_fatal) if an allocation fails. */
void mp_args_fixture_create(mp_ctx_t *ctx, mp_args_fixture_t *f, void *stream, void *host_stream);

/* Free what mp_args_fixture_create allocated (not the foreign pointers); failures are counted.
 * The caller has finished the work queued on f->stream. */
void mp_args_fixture_destroy(mp_ctx_t *ctx, mp_args_fixture_t *f);

/* Called after each row with the row's description; checks that the communicator still works. */
typedef void (*mp_args_after_fn)(void *arg, const mp_args_fixture_t *f, const char *what);

/* The table of bad calls, made by all ranks in lockstep on ctx->comm, one case each: a NULL
 * communicator, NULL buffers with a non-zero count, dtype and reduction out of range, root out
 * of range, a stream on the host backend (only with f->host_stream), count * element size
 * overflowing size_t, all_to_all with overlapping buffers, all_reduce, reduce_scatter and
 * broadcast with buffers that partly overlap (neither equal nor in place), all_to_allv with
 * send and receive blocks on the same bytes or receive blocks on each other, all_to_allv with
 * NULL count or displacement arrays, weft_free of f->foreign[] and of an interior pointer, NULL
 * output pointers. Each must return WEFT_ERR_INVALID_ARGUMENT with a weft_last_error() text
 * naming the function, and for the overlap rows saying which arguments overlap (and weft_malloc
 * must leave its output untouched); after(arg, f, what) runs after each row. The rows
 * "broadcast NULL sendbuf on the root" and "broadcast on the root with recvbuf 8 bytes past
 * sendbuf" run only when nranks == 1 (non-roots' sendbuf is ignored, so they would enter the
 * broadcast), the row of overlapping receive blocks only when nranks >= 2. The rows pass f->reg
 * as input and f->reg2 as output, and f->reg as output too where the buffers overlap. */
void mp_args_run_invalid(mp_ctx_t *ctx, const mp_args_fixture_t *f, mp_args_after_fn after,
                         void *arg);

/* Valid edge case: every collective with count 0, NULL buffers (all_to_allv: zero counts) and
 * f->stream must succeed. Begins its own case. */
void mp_args_run_zero_counts(mp_ctx_t *ctx, const mp_args_fixture_t *f);

/* Valid edge case: weft_malloc of 0 bytes succeeds and sets the pointer to NULL;
 * weft_free(NULL) succeeds. Begins its own case. */
void mp_args_run_zero_malloc(mp_ctx_t *ctx);

/* ---------------------------------------------------------------------------------------------
 * Mismatched calls
 * ------------------------------------------------------------------------------------------- */

/* Bytes each of the two buffers of mp_mismatch_run must hold with nranks ranks. */
size_t mp_mismatch_bytes(int nranks);

/* Called after each case with the case's name; checks that the communicator still works. */
typedef void (*mp_mismatch_after_fn)(void *arg, const char *what);

/* Calls on which the ranks disagree, made by all ranks in lockstep on ctx->comm with stream, one
 * case each, on buffers a and b of mp_mismatch_bytes(nranks) (weft_malloc memory, contents
 * irrelevant; b is written): different collectives; the same collective with different counts
 * (0 on one rank included, on the flag or push path and on the mesh), dtypes of one element
 * size, reductions or roots; all_to_allv with sendcounts[p] on rank r different from
 * recvcounts[r] on rank p (p = r included); an all_reduce of 1.5 MiB in place on rank 0 only.
 * Every rank must get WEFT_ERR_MISMATCH with a non-empty weft_last_error(), which on the two
 * ranks of an all_to_allv pair names the direction that differs ("rank S sends X elements to
 * rank R, which expects Y", also when it is the reverse of the rank's own); any status but
 * success, WEFT_ERR_MISMATCH or WEFT_ERR_INVALID_ARGUMENT ends the test (the communicator is
 * unusable). after(arg, what) runs after each case. The in-place case needs
 * WEFT_ALLREDUCE_INPLACE_TWOSHOT_BYTES <= 1.5 MiB < WEFT_ALLREDUCE_TWOSHOT_BYTES, as the
 * defaults on the host and on one GPU are. Needs at least 2 ranks. */
void mp_mismatch_run(mp_ctx_t *ctx, void *a, void *b, void *stream, mp_mismatch_after_fn after,
                     void *arg);

/* ---------------------------------------------------------------------------------------------
 * all_to_all and all_to_allv. Element i from rank s: all_to_all (s, d * count + i) to rank d,
 * all_to_allv (s, (d << 32) + i).
 * ------------------------------------------------------------------------------------------- */

/* Check the result of an all_to_all of `count` elements per peer on this rank: block p of recv
 * holds rank p's elements (p, rank * count + i), and send (nranks * count elements) still holds
 * this rank's input. */
void mp_a2a_check(mp_ctx_t *ctx, weft_dtype_t dt, size_t count, const void *send, const void *recv);

/* Count matrices of all_to_allv; about a quarter of the blocks are 0 except where noted. */
typedef enum {
    MP_A2AV_SMALL,  /* counts in [0, 7] */
    MP_A2AV_MEDIUM, /* counts in [0, 300] */
    MP_A2AV_SKEWED, /* rank 0 sends nothing, the last rank receives nothing, others [1, 50] */
    MP_A2AV_LARGE,  /* counts in [0, 5000] */
    MP_A2AV_ZERO,   /* every count 0 */
    MP_A2AV_HUGE,   /* counts in [0, 200000] (the caller runs it for a subset of cases) */
    MP_A2AV_NUM_PATTERNS
} mp_a2av_pattern_t;

const char *mp_a2av_pattern_name(mp_a2av_pattern_t pattern);

/* The counts and displacements of this rank in one all_to_allv case. The blocks of a buffer lie
 * in rotated (sometimes reversed) rank order with gaps of 0-2 elements before each, plus one
 * element after the last: neither in rank order nor dense. */
typedef struct mp_a2av_plan {
    size_t *sendcounts, *sdispls; /* nranks each, in elements */
    size_t *recvcounts, *rdispls;
    size_t slen, rlen; /* elements of the send and receive buffers */
    size_t largest;    /* the largest count of the whole matrix, every rank's blocks */
} mp_a2av_plan_t;

/* Draw the plan of the current case (from ctx->seed and ctx->case_id: call after mp_case; the
 * count matrix is the same on every rank). Exits 1 (mp_fatal) when out of memory. */
void mp_a2av_plan_create(mp_ctx_t *ctx, mp_a2av_pattern_t pattern, mp_a2av_plan_t *plan);
void mp_a2av_plan_destroy(mp_a2av_plan_t *plan);

/* Write this rank's input blocks into send (plan->slen elements); the gaps are left as they are. */
void mp_a2av_fill(const mp_ctx_t *ctx, const mp_a2av_plan_t *plan, weft_dtype_t dt, void *send);

/* Check every received block, that every sent block is unchanged, and that the gaps of recv
 * (plan->rlen elements) still hold the poison. */
void mp_a2av_check(mp_ctx_t *ctx, const mp_a2av_plan_t *plan, weft_dtype_t dt, const void *send,
                   const void *recv);

#endif /* WEFT_TESTS_MP_CASES_H */
