/*
 * gpu_harness.h - helpers of the GPU tests (tests/gpu), written against the public API (weft.h)
 * and the CUDA runtime, on top of the multi-process harness (tests/mp/harness.h).
 *
 * A GPU test runs as every rank of a job launched by `weftrun -n N`, on the CUDA backend: every
 * buffer it hands to weft is device memory, every collective runs on one non-blocking stream and
 * is checked after cudaStreamSynchronize. The data, the exact expected values, the reports
 * ("FAIL <test> rank=R n=N seed=S reg=M case=K (...)") and the lockstep rules are those of the
 * mp harness, which works on host memory: a case fills host mirrors with mp_red_fill /
 * mp_raw_fill, copies them to the device buffers, runs, copies the whole guarded region back and
 * checks the mirror with mp_red_check_* / mp_raw_check.
 *
 * Buffers come in three kinds: weft (the pointer weft_malloc returned), interior (an element-
 * aligned pointer inside a larger weft_malloc allocation, deliberately not 16-byte aligned) and
 * cuda (inside a cudaMalloc allocation: the staged path). Each is surrounded by guard zones
 * (0x5A) and its payload is poisoned (0xA5) with cudaMemsetAsync before the call.
 *
 * Without a CUDA device gpu_init prints "SKIP: no CUDA device (<reason>)" and exits 77 on every
 * rank (weftrun then exits 77, which CTest counts as skipped).
 *
 * Environment read by the harness (test-only variables, not part of weft's configuration table):
 *   WEFT_TEST_SEED                  seed to use instead of one drawn on rank 0
 *   GPU_TEST_QUICK, WEFT_TEST_QUICK 1: smaller grid (compute-sanitizer runs)
 *
 * Thread safety: a gpu_ctx_t belongs to the thread that runs the test (the main thread).
 */
#ifndef WEFT_TESTS_GPU_HARNESS_H
#define WEFT_TESTS_GPU_HARNESS_H

#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../mp/harness.h"
#include "weft.h"

#define GPU_SKIP_EXIT 77

/* Extra seconds a stream gets, beyond the communicator's timeout, before a wait for it is
 * reported as a hang: every weft kernel gives up at its deadline, so a stream that is still busy
 * after timeout_s + this is a bug. */
#define GPU_SYNC_SLACK_S 30.0

typedef enum { GPU_BUF_WEFT, GPU_BUF_INTERIOR, GPU_BUF_CUDA } gpu_buf_kind_t;
#define GPU_NUM_BUF_KINDS 3

typedef struct gpu_ctx {
    mp_ctx_t mp;         /* communicator, seed, case, counters: the mp harness's context */
    cudaStream_t stream; /* the non-blocking stream every call of the test uses */
    int device;          /* the device weft selected for this rank */
    double sync_limit_s; /* gpu_sync reports a hang after this long */
} gpu_ctx_t;

/* A reusable device allocation and its host mirror, from which buffers are carved. */
typedef struct gpu_slab {
    int weft;            /* 1: weft_malloc, 0: cudaMalloc */
    void *dev;           /* the allocation */
    unsigned char *host; /* host mirror, same size */
    size_t bytes;
} gpu_slab_t;

/* A device buffer with guard zones and a host mirror of the whole guarded region.
 * Device: [base, base + front) guard, [ptr, ptr + bytes) payload, then `back` bytes of guard.
 * Host: the same layout from hbase; host points to the payload's mirror. */
typedef struct gpu_buf {
    gpu_buf_kind_t kind;
    unsigned char *base, *ptr;   /* device */
    unsigned char *hbase, *host; /* host mirror */
    size_t bytes, front, back;
    void *owned;      /* allocation owned by this buffer (NULL when carved from a slab) */
    void *owned_host; /* host mirror owned by this buffer */
} gpu_buf_t;

/* ---------------------------------------------------------------------------------------------
 * Set-up, communicators, streams
 * ------------------------------------------------------------------------------------------- */

/* Start a test: skip (exit 77) without a CUDA device (cudaGetDeviceCount finds none, or returns
 * cudaErrorNoDevice or cudaErrorInsufficientDriver; any other error fails); line-buffer stdout;
 * read the test variables; open a CUDA-backend communicator, make this thread use the device weft
 * selected (found from a weft_malloc pointer), create the stream; agree on the seed (rank 0 draws
 * it or takes WEFT_TEST_SEED, weft_broadcast through device memory, checked with MIN/MAX
 * all-reduces); destroy that communicator. Exits 1 on failure. */
void gpu_init(gpu_ctx_t *g, const char *test);

/* Open g->mp.comm on the CUDA backend in registration mode reg (other fields: the defaults, so
 * the timeout comes from WEFT_TIMEOUT_S). Exits 1 if weft_comm_init fails or the communicator
 * reports another rank, size or backend. */
void gpu_comm_open(gpu_ctx_t *g, weft_registration_t reg);

/* Close the communicator if open, destroy the stream, print the summary line and return the
 * process exit status (mp_finish). */
int gpu_finish(gpu_ctx_t *g);

/* Exit 1 (mp_fatal) if err is not cudaSuccess, naming what. */
void gpu_cuda_ok(gpu_ctx_t *g, cudaError_t err, const char *what);

/* Wait until the stream is idle, at most limit_s seconds (polling cudaStreamQuery). Returns
 * cudaSuccess, the stream's error, or cudaErrorNotReady if it is still busy at the limit. */
cudaError_t gpu_stream_wait(cudaStream_t stream, double limit_s);

/* A gate that holds a stream (and so a device synchronisation) from the host:
 * cudaLaunchHostFunc(stream, gpu_gate_hold, gate) blocks the stream until gpu_gate_open, or until
 * limit_s passed (timed_out is then set; a test treats that as a failure). */
typedef struct gpu_gate {
    atomic_int open;
    atomic_int timed_out;
    double limit_s;
} gpu_gate_t;

void gpu_gate_init(gpu_gate_t *gate, double limit_s);
void CUDART_CB gpu_gate_hold(void *arg); /* the host function; no CUDA calls inside */
void gpu_gate_open(gpu_gate_t *gate);
/* 1 while the gate holds (neither opened nor timed out). */
int gpu_gate_holding(gpu_gate_t *gate);

/* gpu_stream_wait(g->stream, g->sync_limit_s), then cudaStreamSynchronize; any failure or a
 * hang ends the run (mp_fatal, which aborts the communicator) naming what. */
void gpu_sync(gpu_ctx_t *g, const char *what);

/* Copy bytes between host memory and the device in stream order (cudaMemcpyAsync on
 * g->stream); exits on failure. The host memory may be reused at once after gpu_h2d. */
void gpu_h2d(gpu_ctx_t *g, void *dev, const void *host, size_t bytes);
void gpu_d2h(gpu_ctx_t *g, void *host, const void *dev, size_t bytes);

/* ---------------------------------------------------------------------------------------------
 * Names
 * ------------------------------------------------------------------------------------------- */
const char *gpu_buf_kind_name(gpu_buf_kind_t kind);

/* ---------------------------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------------------------- */

/* Front guard of a buffer of this kind holding elements of es bytes: 0 for weft buffers (the
 * pointer weft_malloc returned), otherwise 136 bytes plus 1 for 1-byte and 2 for 2-byte elements,
 * so the pointer is element-aligned but not 4- (resp. 16-) byte aligned. */
size_t gpu_front_bytes(gpu_buf_kind_t kind, size_t es);

/* Allocate a slab of bytes: weft_malloc if weft, else cudaMalloc; and its host mirror. */
void gpu_slab_create(gpu_ctx_t *g, gpu_slab_t *s, int weft, size_t bytes);
void gpu_slab_destroy(gpu_ctx_t *g, gpu_slab_t *s);

/* Make b a buffer of kind with `bytes` payload bytes for elements of es bytes: carved from slab
 * when slab is non-NULL and the guarded region fits (slab must be a weft slab for the weft and
 * interior kinds, a cuda slab for the cuda kind), else freshly allocated. Queues on the stream
 * the guard and poison fills of the device region. Exits on allocation failure. */
void gpu_buf_get(gpu_ctx_t *g, gpu_buf_t *b, const gpu_slab_t *slab, gpu_buf_kind_t kind,
                 size_t bytes, size_t es);

/* Free what gpu_buf_get allocated (nothing for a slab view). Synchronise the stream first. */
void gpu_buf_put(gpu_ctx_t *g, gpu_buf_t *b);

/* Queue the copy of payload bytes [off, off + len) from the host mirror to the device. */
void gpu_buf_push(gpu_ctx_t *g, const gpu_buf_t *b, size_t off, size_t len);

/* Queue the copy of the whole guarded region from the device to the host mirror. */
void gpu_buf_pull(gpu_ctx_t *g, const gpu_buf_t *b);

/* Check the guard zones in the host mirror (after gpu_buf_pull and gpu_sync). */
void gpu_buf_check_guards(gpu_ctx_t *g, const gpu_buf_t *b, const char *name);

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */

/* Whether an operation whose remotely read buffer is of this kind takes the zero-copy path
 * under the open communicator's mode (weft.h): weft and interior buffers in roa or jit mode. */
int gpu_expect_zero_copy(const gpu_ctx_t *g, gpu_buf_kind_t kind);

/* The largest payload per pair of ranks that takes weft's push path (counted in inline_ops):
 * WEFT_CUDA_PUSH_BYTES (a byte size, mp_env_bytes) clamped to 16 MiB and rounded down to
 * 256 bytes; when it is unset or "auto", weft's documented default (docs/config.md: 512 KiB for
 * two ranks on two GPUs, else 64 KiB); 0 with WEFT_CUDA_COPY_ENGINE=1. Every rank has the same
 * environment under weftrun, so this is the communicator's agreed value. */
size_t gpu_push_limit(gpu_ctx_t *g);

/* The most blocks one launch of an operation may have: WEFT_CUDA_MAX_BLOCKS (mp_env_int) clamped
 * to [1, 128], weft's documented default (32, docs/config.md) when it is unset. */
int gpu_block_limit(gpu_ctx_t *g);

/* Check the stats around one successful operation: it counted exactly once, in exactly one of
 * zero_copy_ops, staged_ops and inline_ops, at most once in copy_engine_ops, and with at most
 * gpu_block_limit(g) blocks in sm_blocks. With 2+ ranks and a payload per pair of at least
 * MP_PATH_CHECK_BYTES, also the path: the push path (inline, on one block or more, no copy
 * engine) up to gpu_push_limit(); beyond it,
 * peers_read says whether peers read a buffer of this rank (the root's input of a broadcast;
 * every input otherwise); if they do, zero-copy or staged as gpu_expect_zero_copy says, else
 * zero-copy (this rank copied nothing for them). */
void gpu_check_path(gpu_ctx_t *g, const weft_stats_t *before, const weft_stats_t *after,
                    gpu_buf_kind_t kind, size_t pair_bytes, int peers_read);

/* Whether weft runs a pure copy of bytes in all on the copy engines (WEFT_CUDA_COPY_ENGINE: 1
 * always, 0 never, auto across GPUs from WEFT_CUDA_COPY_ENGINE_BYTES, default 64 MiB). An
 * all-gather or all-to-all whose store form would copy that much there takes the loads. */
int gpu_copy_engine_takes(gpu_ctx_t *g, size_t bytes);

/* Check that an all-gather, all-to-all or all-reduce of pair_bytes per pair counted in
 * remote_store_ops exactly when it should: eligible (the caller's verdict: every rank's output
 * weft memory, and for an all-gather or all-to-all no input staged and its copies not on the
 * copy engines, the two-shot form for an all-reduce), 2+ ranks, past gpu_push_limit(), and
 * WEFT_REMOTE_STORES not 0 (its default, auto, stores on the CUDA backend). */
void gpu_check_stores(gpu_ctx_t *g, const weft_stats_t *before, const weft_stats_t *after,
                      size_t pair_bytes, int eligible);

#endif /* WEFT_TESTS_GPU_HARNESS_H */
