/*
 * comm_cuda.h - the CUDA backend's part of the communicator (comm_cuda.c).
 *
 * Built without CUDA, every function returns WEFT_ERR_UNSUPPORTED (named stubs in the same
 * file), so the host-only library needs no CUDA at all.
 *
 * Device state per communicator: a device control block (registered device memory, mapped at
 * the same address on every rank) holding the operation counter, the block-arrival counter and
 * the ready / phase / done flags peers write; and a status word and an abort word in mapped
 * pinned host memory, through which kernels report timeouts and mismatches and learn that the
 * host gave up. Kernels run on the caller's stream; nothing waits on the host.
 */
#ifndef WEFT_CORE_COMM_CUDA_H
#define WEFT_CORE_COMM_CUDA_H

#include <stddef.h>

#include "core/bootstrap.h"
#include "exec/exec_cuda.h"
#include "exec/moe_cuda.h"
#include "exec/work.h"
#include "weft.h"

struct weft_comm;

/* 1 if this library has the CUDA backend and a device is visible. */
int weft_cuda_available(void);

/* Select the device (local_rank modulo the device count) before any CUDA memory is made: make
 * it current on the calling thread and set *device_out. */
weft_status_t weft_cuda_select_device(int local_rank, int *device_out);

/* Make the device state after the registry exists (collective: all-gathers the device control
 * blocks' addresses through the store). The caller then waits for the registration of
 * weft_cuda_ctl(comm) like any internal allocation. */
weft_status_t weft_cuda_comm_setup(struct weft_comm *comm, weft_store_t *store);

/* This rank's device control block (registered device memory, the push path's regions
 * included), or NULL, and its size in bytes. */
void *weft_cuda_ctl(struct weft_comm *comm);
size_t weft_cuda_ctl_bytes(const struct weft_comm *comm);

/* The calling thread's CUDA context before weft_cuda_device_enter, for weft_cuda_device_leave. */
typedef struct weft_cuda_prev {
    void *ctx;   /* its CUcontext; NULL: it had none */
    int restore; /* 0: it was the communicator's already, nothing to give back */
} weft_cuda_prev_t;

/* Make the communicator's device (its primary context) current on the calling thread for the
 * span of a public call, as NCCL does: a thread whose current context is another GPU's, or that
 * has none, then allocates, launches and synchronises on the communicator's GPU and creates no
 * context on another. *prev gets what weft_cuda_device_leave gives back: exactly the context
 * that was current, or none (a thread that never used CUDA is left without one, not bound to
 * device 0). The host backend, or a communicator whose CUDA state is not set up yet: nothing.
 * WEFT_ERR_CUDA when the context cannot be made current (call names the caller). */
weft_status_t weft_cuda_device_enter(const struct weft_comm *comm, const char *call,
                                     weft_cuda_prev_t *prev);
void weft_cuda_device_leave(weft_cuda_prev_t prev);

/* Wait for all work this process queued on the device (nobody may free or unmap memory a kernel
 * still reads). Bounded: every kernel's waits have a deadline. call names the caller in the
 * error message. */
weft_status_t weft_cuda_synchronize(const char *call);

/* Free the device state, after weft_registry_destroy (until the registrar is joined it may
 * raise the abort word). NULL-safe on a communicator whose setup failed halfway. */
void weft_cuda_comm_teardown(struct weft_comm *comm);

/* The first error a kernel reported (timeout, lost peer), made sticky on the communicator:
 * checked at the start of every call. */
weft_status_t weft_cuda_check(struct weft_comm *comm, const char *call);

/* A local copy an operation has made but not yet issued (bytes 0: none). */
typedef struct weft_cuda_copy {
    void *dst;
    const void *src;
    size_t bytes;
} weft_cuda_copy_t;

/* dst <- src in stream order, before the operation's peers are told it is ready. Up to
 * WEFT_CUDA_FUSED_COPY_BYTES (unless WEFT_CUDA_COPY_ENGINE=1), and when *pending holds none yet,
 * the copy is only recorded in *pending: the operation's next launch (weft_cuda_execute or
 * weft_cuda_enter, which must follow) runs it on its blocks before the ready signal, which saves
 * a copy submission (and the copy engine's wake-up after an idle gap, 2-13 us on an H200).
 * Otherwise a cudaMemcpyAsync on stream. Device memory, or any memory CUDA can copy. */
weft_status_t weft_cuda_local_copy(struct weft_comm *comm, weft_cuda_copy_t *pending, void *dst,
                                   const void *src, size_t bytes, void *stream);

/* A push-path operation (exec/exec_cuda.h): this rank's payload for peer r is send[r] bytes at
 * to[r], and recv[r] bytes come from peer r (0: nothing); send[rank] is the size of this rank's
 * own block. bytes is the largest of them (at most weft_cuda_push_bytes; 0: not the push path).
 * The work says where it goes: a REDUCE (every payload bytes long) into dst[0] of src[rank] and
 * the received payloads, or a COPY of each received payload to dst[r] and of src[rank] (unless
 * NULL) to dst[rank]. */
typedef struct weft_cuda_push {
    size_t bytes;
    const void *to[WEFT_CUDA_MAX_RANKS];
    uint32_t send[WEFT_CUDA_MAX_RANKS], recv[WEFT_CUDA_MAX_RANKS];
} weft_cuda_push_t;

/* The largest payload per pair of ranks the push path takes on this communicator (the smallest
 * WEFT_CUDA_PUSH_BYTES of its ranks, rounded down to 256 bytes; 0: no push path). */
size_t weft_cuda_push_bytes(const struct weft_comm *comm);

/* What an operation's launches held of the GPU, for weft_stats_t's copy_engine_ops and
 * sm_blocks: sm_blocks is the most blocks one of its launches moved data on (copies,
 * reductions, the push path's payloads, a pending local copy; signal-only launches count 0),
 * copy_engine whether the copy engines moved the work's data. Starts zeroed. */
typedef struct weft_cuda_usage {
    int sm_blocks;
    int copy_engine;
} weft_cuda_usage_t;

/* Record a launch that moved data on blocks blocks. */
static inline void weft_cuda_usage_blocks(weft_cuda_usage_t *usage, int blocks)
{
    if (blocks > usage->sm_blocks)
        usage->sm_blocks = blocks;
}

/* Launch the work with its device-side synchronisation on stream; the launch also runs the
 * pending copy (never NULL; cleared; must be none when sync has WEFT_SYNC_CONTINUE). push (never
 * NULL) with bytes > 0 makes it a push-path operation instead: sync 0, no pending copy. With
 * mine an error nothing is launched and the pending copy is dropped. What the launch held is
 * recorded in *usage. */
weft_status_t weft_cuda_execute(struct weft_comm *comm, const weft_work_t *work, unsigned sync,
                                weft_status_t mine, weft_cuda_copy_t *pending,
                                const weft_cuda_push_t *push, void *stream,
                                weft_cuda_usage_t *usage);

/* Tell running kernels to give up (abort, lost peer): never blocks. Any thread, also while
 * init is still setting the backend up (before it is, there is nothing to stop). */
void weft_cuda_abort(struct weft_comm *comm);

/* The entry and closing signals of an operation whose data movement is a kernel of its own
 * (MoE), each a one-block launch on stream: weft_cuda_enter runs the pending copy (then on every
 * block of a launch), posts this rank's ready flag and waits for every peer's (their earlier
 * stream work is complete, so their memory may be read); weft_cuda_leave runs the closing
 * signal (every peer finished reading ours) and ends the operation. The kernels in between must
 * not wait for peers (their blocks go into *usage with weft_cuda_usage_blocks; weft_cuda_enter
 * adds its copy's). */
weft_status_t weft_cuda_enter(struct weft_comm *comm, weft_cuda_copy_t *pending, void *stream,
                              weft_cuda_usage_t *usage);
weft_status_t weft_cuda_leave(struct weft_comm *comm, void *stream);

/* The device this communicator's memory and kernels are on (-1 without the CUDA backend). */
int weft_cuda_device(const struct weft_comm *comm);

/* Blocks per launch (bounded so every rank sharing the GPU is co-resident). */
int weft_cuda_blocks(const struct weft_comm *comm);

/* 1 if some rank of the communicator is on another GPU than this rank (the same on every rank:
 * GPUs are told apart by UUID), 0 if all share this rank's GPU or without the CUDA backend. */
int weft_cuda_spans_gpus(const struct weft_comm *comm);

/* 1 if a pure copy (all-gather, all-to-all(v), broadcast, a two-shot all-reduce's gather) of
 * bytes in all, counting a fan-out's range once per destination, runs on the copy engines
 * (WEFT_CUDA_COPY_ENGINE: never, always, or "auto" when the communicator spans GPUs and bytes
 * reaches WEFT_CUDA_COPY_ENGINE_BYTES); 0 without the CUDA backend. A store form's work never
 * runs there, whatever this says: copies queued behind an entry kernel run even when its wait
 * gave up (exec_cuda.h), so the engines write only this rank's memory. An algorithm whose
 * store-form copies would take the engines therefore does not offer its output for stores, and
 * every rank takes the loads. */
int weft_cuda_copy_engine_takes(const struct weft_comm *comm, uint64_t bytes);

/* Blocks of the MoE gather and combine kernels: they run between weft_cuda_enter and
 * weft_cuda_leave and never wait for a peer, so they need not be co-resident with the other
 * ranks' kernels and may fill this rank's share of the GPU (WEFT_CUDA_MOE_BLOCKS). */
int weft_cuda_moe_blocks(const struct weft_comm *comm);

/* Where the MoE kernels, launched outside weft_cuda_execute, learn whether this rank failed and
 * record a failure of their own (exec/moe_cuda.h): its control block and the mapped status word
 * (exec_cuda.h); NULLs without the CUDA backend. */
weft_moe_dev_fail_t weft_cuda_moe_fail(struct weft_comm *comm);

/* MoE dispatches the device rejected (exec/moe_cuda.h): the device pointer of the mapped report
 * area the kernels write, and what the host has seen there: the number of rejections so far
 * (the report of the last one in *last_out, which may be NULL). */
void *weft_cuda_moe_report(struct weft_comm *comm);
uint32_t weft_cuda_moe_rejections(struct weft_comm *comm, void *last_out);

#endif /* WEFT_CORE_COMM_CUDA_H */
