/*
 * comm_cuda.c - the CUDA backend's device state and launches (see comm_cuda.h, exec_cuda.h).
 *
 * Built only with CUDA (the build drops files named *_cuda.c otherwise; comm_nocuda.c holds
 * the stubs then). Uses the CUDA runtime's C API; kernels live in exec_cuda.cu.
 *
 * Thread safety: the communicator's user thread only, except weft_cuda_abort (any thread: one
 * store into mapped host memory).
 */
#include "core/comm_cuda.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "core/comm.h"
#include "core/registry.h"
#include "exec/exec_cuda.h"
#include "exec/moe_cuda.h"
#include "mem/cuda_driver.h"
#include "util/config.h"
#include "util/log.h"

struct weft_cuda_state {
    CUcontext ctx; /* the device's primary context, which every call makes current */
    const weft_cuda_driver_t *drv;
    int nblocks;    /* blocks per launch at most */
    int moe_blocks; /* blocks of the MoE data kernels (weft_cuda_moe_blocks) */
    weft_cuda_ctl_t *ctl[WEFT_CUDA_MAX_RANKS];
    volatile int32_t *words;    /* mapped pinned host memory: [0] status, [16] abort, then
                                   the MoE report area at byte 128 */
    int32_t *dev_words;         /* the same, as a device pointer */
    weft_cuda_params_t params;  /* scratch for launches */
    weft_cost_model_t model;    /* the GPU's partitioning parameters */
    int copy_engine;            /* weft_copy_engine_t (WEFT_CUDA_COPY_ENGINE) */
    uint64_t copy_engine_bytes; /* its "auto" threshold: bytes a call copies */
    int spans_gpus;             /* some rank's memory is on another GPU */
    uint64_t fused_copy_bytes;  /* local copies up to this size run in-kernel (0: none) */
    uint64_t push_bytes;        /* the push path's largest payload, agreed (0: no push path) */
    uint64_t push_headers;      /* bytes of its header words (exec_cuda.h) */
    size_t ctl_bytes;           /* this rank's control block with the push path's regions */
    /* The copy engines' side streams (execute_copy_engine; none with WEFT_CUDA_COPY_ENGINE=0):
     * a call's copies after the first run on side[0 ..], which wait for the event fork recorded
     * on the caller's stream and which the caller's stream waits for through join[j]. */
    int nside;
    cudaStream_t side[WEFT_CUDA_MAX_RANKS - 1];
    cudaEvent_t fork, join[WEFT_CUDA_MAX_RANKS - 1];
};

#define STATUS_WORD 0
#define ABORT_WORD 16    /* another cache line */
#define REPORT_BYTES 128 /* the MoE report area (weft_moe_dev_report_t), after the words */
#define WORDS_BYTES (128 + REPORT_BYTES)
_Static_assert(sizeof(weft_moe_dev_report_t) <= REPORT_BYTES, "the MoE report area is too small");
/* Smallest unit the partitioner cuts for one block: below it a block's share of the copy costs
 * less than its launch and signalling. */
#define CUDA_MIN_UNIT_BYTES (16u << 10)
/* Push path payloads are multiples of this (so every region keeps the control block's
 * alignment), and at most PUSH_MAX_BYTES (WEFT_CUDA_PUSH_BYTES). */
#define PUSH_ALIGN_BYTES 256u
#define PUSH_MAX_BYTES (16u << 20)
/* WEFT_CUDA_PUSH_BYTES=auto: 64 KiB, and 512 KiB for two ranks on two GPUs, where pushing
 * 128-512 KiB per pair took 6-29% less time than the mesh for every collective, and an
 * all-reduce of 768 KiB - 1 MiB 2-9% more (two H200s; with two ranks per GPU a larger limit
 * measured up to 14% slower: docs/results/2026-11-30-h200-s10.md, section 5, and
 * 2026-11-30-h200-s11.md, section 2). */
#define PUSH_AUTO_BYTES (64u << 10)
#define PUSH_AUTO_PAIR_BYTES (512u << 10)

/* WEFT_CUDA_PUSH_BYTES=auto for nranks ranks that span GPUs or not. */
static uint64_t push_auto_bytes(int nranks, int spans_gpus)
{
    return nranks == 2 && spans_gpus ? PUSH_AUTO_PAIR_BYTES : PUSH_AUTO_BYTES;
}

static weft_status_t cuda_error(cudaError_t err, const char *what)
{
    return weft_error(WEFT_ERR_CUDA, "%s: %s: %s", what, cudaGetErrorName(err),
                      cudaGetErrorString(err));
}

int weft_cuda_available(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

weft_status_t weft_cuda_select_device(int local_rank, int *device_out)
{
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        return weft_error(WEFT_ERR_UNSUPPORTED, "weft_comm_init: the CUDA backend needs a GPU (%s)",
                          err != cudaSuccess ? cudaGetErrorString(err) : "no device");
    int device = (local_rank < 0 ? 0 : local_rank) % n;
    err = cudaSetDevice(device);
    if (err == cudaSuccess)
        err = cudaFree(NULL); /* create the primary context now, not inside a later call */
    if (err != cudaSuccess)
        return cuda_error(err, "weft_comm_init: cudaSetDevice");
    weft_status_t st = weft_cuda_device_check(); /* VMM and POSIX handles, the provider's needs */
    if (st == WEFT_SUCCESS)
        *device_out = device;
    return st;
}

typedef struct cuda_rank_info {
    uint64_t ctl;
    uint64_t push_bytes; /* the largest push payload this rank's regions hold */
    uint64_t push_auto;  /* 1: WEFT_CUDA_PUSH_BYTES=auto (the limit follows the topology) */
    /* The GPU, by UUID: ordinals differ between processes that see different devices
     * (CUDA_VISIBLE_DEVICES set per rank makes every rank's GPU device 0). */
    unsigned char uuid[16];
} cuda_rank_info_t;

/* count side streams for the copy engines, with their events (cs->nside counts those made:
 * weft_cuda_comm_teardown releases them, also after a failure here). */
static weft_status_t create_side_streams(struct weft_cuda_state *cs, int count)
{
    cudaError_t err = cudaEventCreateWithFlags(&cs->fork, cudaEventDisableTiming);
    if (err != cudaSuccess)
        return cuda_error(err, "weft_comm_init: cudaEventCreateWithFlags");
    for (; cs->nside < count; cs->nside++) {
        int j = cs->nside;
        err = cudaStreamCreateWithFlags(&cs->side[j], cudaStreamNonBlocking);
        if (err != cudaSuccess)
            return cuda_error(err, "weft_comm_init: cudaStreamCreateWithFlags");
        err = cudaEventCreateWithFlags(&cs->join[j], cudaEventDisableTiming);
        if (err != cudaSuccess) {
            cudaStreamDestroy(cs->side[j]);
            return cuda_error(err, "weft_comm_init: cudaEventCreateWithFlags");
        }
    }
    return WEFT_SUCCESS;
}

weft_status_t weft_cuda_comm_setup(struct weft_comm *comm, weft_store_t *store)
{
    const weft_env_t *env = weft_config_get();
    if (comm->nranks > WEFT_CUDA_MAX_RANKS)
        return weft_error(WEFT_ERR_UNSUPPORTED,
                          "weft_comm_init: the CUDA backend supports up to %d ranks, not %d",
                          WEFT_CUDA_MAX_RANKS, comm->nranks);
    struct weft_cuda_state *cs = calloc(1, sizeof *cs);
    cuda_rank_info_t *infos = calloc((size_t)comm->nranks, sizeof *infos);
    if (!cs || !infos) {
        free(cs);
        free(infos);
        return weft_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: calloc");
    }
    comm->cuda = cs;
    weft_status_t st;
    struct cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, comm->device);
    if (err != cudaSuccess) {
        st = cuda_error(err, "weft_comm_init: cudaGetDeviceProperties");
        goto out;
    }
    st = weft_cuda_driver_get(&cs->drv);
    if (st != WEFT_SUCCESS)
        goto out;
    CUresult res = cs->drv->cuCtxGetCurrent(&cs->ctx); /* weft_cuda_select_device made it */
    if (res != CUDA_SUCCESS || !cs->ctx) {
        st = res != CUDA_SUCCESS ? weft_cuda_error(res, "weft_comm_init: cuCtxGetCurrent")
                                 : weft_error(WEFT_ERR_CUDA, "weft_comm_init: no current context");
        goto out;
    }
    int sms = prop.multiProcessorCount;
    void *words;
    err = cudaHostAlloc(&words, WORDS_BYTES, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
        st = cuda_error(err, "weft_comm_init: cudaHostAlloc");
        goto out;
    }
    memset(words, 0, WORDS_BYTES);
    cs->words = words;
    atomic_store_explicit(&comm->cuda_abort_word, cs->words + ABORT_WORD, memory_order_release);
    err = cudaHostGetDevicePointer((void **)&cs->dev_words, words, 0);
    if (err != cudaSuccess) {
        st = cuda_error(err, "weft_comm_init: cudaHostGetDevicePointer");
        goto out;
    }
    /* The control block, then the push path's regions (exec_cuda.h): header words, two
     * parities of an LL slot (twice the payload) per rank, an unpacked payload per rank. All of
     * it starts zeroed: a word is valid only once it holds the operation's number (>= 1).
     * WEFT_CUDA_COPY_ENGINE=1 keeps every copy on the engines: no push path then. The regions
     * are sized before the ranks know whether they share a GPU: with auto, for the largest
     * value auto may pick (as if they spanned GPUs). */
    int push_auto = env->cuda_push_bytes == WEFT_CONFIG_AUTO;
    uint64_t push = push_auto                               ? push_auto_bytes(comm->nranks, 1)
                    : env->cuda_push_bytes < PUSH_MAX_BYTES ? env->cuda_push_bytes
                                                            : PUSH_MAX_BYTES;
    push = push / PUSH_ALIGN_BYTES * PUSH_ALIGN_BYTES;
    if (env->cuda_copy_engine == WEFT_COPY_ENGINE_ALWAYS)
        push = 0;
    uint64_t n = (uint64_t)comm->nranks;
    cs->push_headers = (2 * n * 8 + PUSH_ALIGN_BYTES - 1) / PUSH_ALIGN_BYTES * PUSH_ALIGN_BYTES;
    cs->ctl_bytes = sizeof(weft_cuda_ctl_t) + cs->push_headers + 5 * n * push;
    void *ctl;
    st = weft_registry_alloc(comm->registry, cs->ctl_bytes, 1, &ctl);
    if (st != WEFT_SUCCESS) {
        weft_error_prefix(st, "the device control block");
        goto out;
    }
    err = cudaMemset(ctl, 0, cs->ctl_bytes);
    if (err == cudaSuccess)
        err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
        st = cuda_error(err, "weft_comm_init: clearing the device control block");
        goto out;
    }
    cuda_rank_info_t mine = {
        .ctl = (uint64_t)(uintptr_t)ctl, .push_bytes = push, .push_auto = (uint64_t)push_auto};
    _Static_assert(sizeof mine.uuid == sizeof prop.uuid.bytes, "a CUDA UUID is 16 bytes");
    memcpy(mine.uuid, prop.uuid.bytes, sizeof mine.uuid);
    st = weft_store_allgather(store, "cuda", &mine, sizeof mine, infos);
    if (st != WEFT_SUCCESS)
        goto out;
    int sharing = 0; /* ranks on this GPU (MPS): their kernels must all be resident at once */
    for (int r = 0; r < comm->nranks; r++) {
        cs->ctl[r] = (weft_cuda_ctl_t *)(uintptr_t)infos[r].ctl;
        int same_gpu = memcmp(infos[r].uuid, mine.uuid, sizeof mine.uuid) == 0;
        sharing += same_gpu;
        cs->spans_gpus |= !same_gpu;
    }
    /* The push limit: the smallest of every rank's own (auto resolved by the topology, which
     * every rank sees alike), each within what that rank's regions hold. */
    uint64_t auto_bytes = push_auto_bytes(comm->nranks, cs->spans_gpus);
    cs->push_bytes = push;
    for (int r = 0; r < comm->nranks; r++) {
        uint64_t limit = infos[r].push_bytes;
        if (infos[r].push_auto && auto_bytes < limit)
            limit = auto_bytes;
        if (limit < cs->push_bytes)
            cs->push_bytes = limit;
    }
    /* A push-path word matches when its flag (its upper 4 bytes) equals the low 32 bits of the
     * operation's number, whose parity picks the slot. A never-written word of the even slots
     * would hold 0 and match operation 2^32: flag them odd (0x01010101), which no operation
     * using those slots has. The slots are laid out by the agreed limit, so this comes after it
     * (an odd slot flagged so would match operation 0x01010101); peers write here only after
     * init's "ready" barrier. */
    uint8_t *even = (uint8_t *)ctl + sizeof(weft_cuda_ctl_t);
    if (cs->push_bytes > 0) {
        err = cudaMemset2D(even + 4, 8, 0x01, 4, n); /* the even header words */
        if (err == cudaSuccess)
            err = cudaMemset2D(even + cs->push_headers + 4, 8, 0x01, 4, n * 2 * cs->push_bytes / 8);
        if (err == cudaSuccess)
            err = cudaDeviceSynchronize();
        if (err != cudaSuccess) {
            st = cuda_error(err, "weft_comm_init: flagging the push path's even slots");
            goto out;
        }
    }
    if (env->seq_start != 0) { /* for tests (config.c); before any launch */
        uint64_t start = env->seq_start;
        err = cudaMemcpy(&((weft_cuda_ctl_t *)ctl)->seq.v, &start, sizeof start,
                         cudaMemcpyHostToDevice);
        if (err != cudaSuccess) {
            st = cuda_error(err, "weft_comm_init: setting WEFT_SEQ_START");
            goto out;
        }
    }
    int fit = sms / (sharing > 0 ? sharing : 1);
    cs->nblocks = env->cuda_max_blocks < fit ? env->cuda_max_blocks : fit;
    if (cs->nblocks > WEFT_CUDA_MAX_BLOCKS)
        cs->nblocks = WEFT_CUDA_MAX_BLOCKS;
    if (cs->nblocks < 1)
        cs->nblocks = 1;
    cs->moe_blocks = env->cuda_moe_blocks > 0 ? env->cuda_moe_blocks : 2 * (fit > 0 ? fit : 1);
    cs->copy_engine = env->cuda_copy_engine;
    cs->copy_engine_bytes = env->cuda_copy_engine_bytes;
    if (cs->copy_engine != WEFT_COPY_ENGINE_NEVER) {
        st = create_side_streams(cs, comm->nranks - 1);
        if (st != WEFT_SUCCESS)
            goto out;
    }
    cs->fused_copy_bytes =
        cs->copy_engine == WEFT_COPY_ENGINE_ALWAYS ? 0 : env->cuda_fused_copy_bytes;
    uint64_t unit = env->cuda_unit_bytes; /* at least 1 (config.c) */
    int fanout = env->cuda_fanout > 0 ? env->cuda_fanout : cs->nblocks;
    for (int t = 0; t < WEFT_NUM_TIERS; t++) {
        cs->model.tier[t] = comm->model.tier[t];
        cs->model.tier[t].unit_bytes = unit;
        cs->model.tier[t].fanout = fanout;
    }
    WEFT_LOG_INFO("CUDA backend: device %d, %d SMs shared by %d rank(s), %d blocks per launch, "
                  "push path up to %llu bytes",
                  comm->device, sms, sharing, cs->nblocks, (unsigned long long)cs->push_bytes);
out:
    free(infos);
    return st;
}

void weft_cuda_comm_teardown(struct weft_comm *comm)
{
    struct weft_cuda_state *cs = comm->cuda;
    if (!cs)
        return;
    atomic_store(&comm->cuda_abort_word, NULL); /* the registrar was joined already */
    if (cs->words)
        cudaFreeHost((void *)cs->words);
    for (int j = 0; j < cs->nside; j++) {
        cudaStreamDestroy(cs->side[j]);
        cudaEventDestroy(cs->join[j]);
    }
    if (cs->fork)
        cudaEventDestroy(cs->fork);
    free(cs);
    comm->cuda = NULL;
}

void *weft_cuda_ctl(struct weft_comm *comm)
{
    return comm->cuda ? comm->cuda->ctl[comm->rank] : NULL;
}

size_t weft_cuda_ctl_bytes(const struct weft_comm *comm)
{
    return comm->cuda ? comm->cuda->ctl_bytes : 0;
}

weft_status_t weft_cuda_device_enter(const struct weft_comm *comm, const char *call,
                                     weft_cuda_prev_t *prev)
{
    *prev = (weft_cuda_prev_t){NULL, 0};
    const struct weft_cuda_state *cs = comm->cuda;
    if (!cs)
        return WEFT_SUCCESS;
    /* The context, not the runtime's device number: on a thread that never used CUDA the
     * runtime reports device 0 without a current context, and setting device 0 back would
     * create one there. The runtime works in whatever context is current. */
    CUcontext current = NULL;
    CUresult res = cs->drv->cuCtxGetCurrent(&current);
    if (res == CUDA_SUCCESS && current == cs->ctx)
        return WEFT_SUCCESS;
    if (res == CUDA_SUCCESS)
        res = cs->drv->cuCtxSetCurrent(cs->ctx);
    if (res != CUDA_SUCCESS)
        return weft_cuda_error(res, "%s: making device %d's context current", call, comm->device);
    *prev = (weft_cuda_prev_t){current, 1};
    return WEFT_SUCCESS;
}

void weft_cuda_device_leave(weft_cuda_prev_t prev)
{
    const weft_cuda_driver_t *drv;
    if (prev.restore && weft_cuda_driver_get(&drv) == WEFT_SUCCESS)
        (void)drv->cuCtxSetCurrent((CUcontext)prev.ctx); /* current a moment ago, or none */
}

weft_status_t weft_cuda_synchronize(const char *call)
{
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess)
        return weft_error(WEFT_ERR_CUDA, "%s: cudaDeviceSynchronize: %s: %s", call,
                          cudaGetErrorName(err), cudaGetErrorString(err));
    return WEFT_SUCCESS;
}

weft_status_t weft_cuda_check(struct weft_comm *comm, const char *call)
{
    int32_t st = comm->cuda->words[STATUS_WORD];
    if (st == 0)
        return WEFT_SUCCESS;
    weft_comm_fail(comm, (weft_status_t)st); /* peers then see the loss at once */
    return weft_error((weft_status_t)st, "%s: an earlier kernel failed: %s", call,
                      weft_status_string((weft_status_t)st));
}

weft_moe_dev_fail_t weft_cuda_moe_fail(struct weft_comm *comm)
{
    return (weft_moe_dev_fail_t){weft_cuda_ctl(comm), comm->cuda->dev_words + STATUS_WORD};
}

void weft_cuda_abort(struct weft_comm *comm)
{
    volatile int32_t *word = atomic_load_explicit(&comm->cuda_abort_word, memory_order_acquire);
    if (word)
        *word = 1;
}

weft_status_t weft_cuda_local_copy(struct weft_comm *comm, weft_cuda_copy_t *pending, void *dst,
                                   const void *src, size_t bytes, void *stream)
{
    if (bytes <= comm->cuda->fused_copy_bytes && pending->bytes == 0) {
        *pending = (weft_cuda_copy_t){.dst = dst, .src = src, .bytes = bytes};
        return WEFT_SUCCESS;
    }
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
    if (err != cudaSuccess)
        return cuda_error(err, "cudaMemcpyAsync (staging)");
    return WEFT_SUCCESS;
}

/* The parameters every launch shares. */
static void fill_common(struct weft_comm *comm, weft_cuda_params_t *p, unsigned sync)
{
    struct weft_cuda_state *cs = comm->cuda;
    p->kind = -1;
    p->sync = sync;
    p->rank = comm->rank;
    p->nranks = comm->nranks;
    p->timeout_ns = (uint64_t)(comm->timeout_s * 1e9);
    p->status = cs->dev_words + STATUS_WORD;
    p->abort = cs->dev_words + ABORT_WORD;
    for (int r = 0; r < comm->nranks; r++)
        p->ctl[r] = cs->ctl[r];
    p->block_begin[0] = p->block_begin[1] = 0;
    p->pre_dst = NULL;
    p->pre_src = NULL;
    p->pre_bytes = 0;
    p->push_bytes = 0; /* push_send and push_recv are read only when it is not */
    p->push_slot_bytes = cs->push_bytes;
    p->push_headers_bytes = cs->push_headers;
}

/* The work item's kind, types and pointers (its units are the partitioner's business). */
static void fill_work(weft_cuda_params_t *p, const weft_work_t *work)
{
    p->kind = (int32_t)work->kind;
    if (work->kind == WEFT_WORK_REDUCE) { /* the kernel reads these for reductions only */
        p->dtype = work->dtype;
        p->redop = work->op;
        p->avg_divisor = work->avg_divisor;
        p->nsrcs = work->nsrcs;
    }
    int per_slice = work->kind == WEFT_WORK_COPY;
    p->ndsts = per_slice ? 0 : work->ndsts;
    int nsrc = per_slice ? work->nslices : work->kind == WEFT_WORK_REDUCE ? work->nsrcs : 1;
    int ndst = per_slice ? work->nslices : work->ndsts;
    for (int i = 0; i < nsrc; i++)
        p->src[i] = work->src[i];
    for (int i = 0; i < ndst; i++)
        p->dst[i] = work->dst[i];
    for (int i = 0; !per_slice && i < work->nslices; i++)
        p->off[i] = work->off[i];
}

/* Move the pending copy into the launch; returns the blocks it wants (a share of at least
 * CUDA_MIN_UNIT_BYTES each, at most the launch bound), 0 without one. */
static int take_pending(struct weft_comm *comm, weft_cuda_params_t *p, weft_cuda_copy_t *pending)
{
    if (pending->bytes == 0)
        return 0;
    p->pre_dst = pending->dst;
    p->pre_src = pending->src;
    p->pre_bytes = pending->bytes;
    *pending = (weft_cuda_copy_t){0};
    uint64_t want = (p->pre_bytes + CUDA_MIN_UNIT_BYTES - 1) / CUDA_MIN_UNIT_BYTES;
    return want < (uint64_t)comm->cuda->nblocks ? (int)want : comm->cuda->nblocks;
}

/* Blocks [from, to) of a launch get no units (they only run their share of the copy). */
static void no_units(weft_cuda_params_t *p, int from, int to)
{
    for (int b = from; b < to; b++)
        p->block_begin[b + 1] = p->block_begin[from];
}

/* The entry step of an operation that goes on after it: the wait for every peer's ready flag,
 * with the pending copy if any. */
static weft_status_t launch_enter(struct weft_comm *comm, weft_cuda_copy_t *pending, void *stream,
                                  weft_cuda_usage_t *usage)
{
    weft_cuda_params_t *p = &comm->cuda->params;
    fill_common(comm, p, WEFT_SYNC_KEEP_SEQ);
    int nblocks = take_pending(comm, p, pending);
    weft_cuda_usage_blocks(usage, nblocks);
    if (nblocks < 1)
        nblocks = 1;
    no_units(p, 0, nblocks);
    return weft_cuda_launch(p, nblocks, stream);
}

/* The closing step of an operation whose entry step ran. */
static weft_status_t launch_leave(struct weft_comm *comm, unsigned sync, void *stream)
{
    weft_cuda_params_t *p = &comm->cuda->params;
    fill_common(comm, p, (sync & ~(unsigned)WEFT_SYNC_KEEP_SEQ) | WEFT_SYNC_CONTINUE);
    return weft_cuda_launch(p, 1, stream);
}

weft_status_t weft_cuda_enter(struct weft_comm *comm, weft_cuda_copy_t *pending, void *stream,
                              weft_cuda_usage_t *usage)
{
    return launch_enter(comm, pending, stream, usage);
}

weft_status_t weft_cuda_leave(struct weft_comm *comm, void *stream)
{
    return launch_leave(comm, WEFT_SYNC_DONE, stream);
}

size_t weft_cuda_push_bytes(const struct weft_comm *comm)
{
    return comm->cuda ? (size_t)comm->cuda->push_bytes : 0;
}

int weft_cuda_device(const struct weft_comm *comm)
{
    return comm->device;
}

int weft_cuda_blocks(const struct weft_comm *comm)
{
    return comm->cuda->nblocks;
}

int weft_cuda_spans_gpus(const struct weft_comm *comm)
{
    return comm->cuda ? comm->cuda->spans_gpus : 0;
}

int weft_cuda_moe_blocks(const struct weft_comm *comm)
{
    return comm->cuda->moe_blocks;
}

void *weft_cuda_moe_report(struct weft_comm *comm)
{
    return (uint8_t *)comm->cuda->dev_words + 128;
}

uint32_t weft_cuda_moe_rejections(struct weft_comm *comm, void *last_out)
{
    const volatile weft_moe_dev_report_t *r =
        (const volatile weft_moe_dev_report_t *)((volatile uint8_t *)comm->cuda->words + 128);
    uint32_t count = r->count;
    __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the report was written before the count */
    if (last_out)
        *(weft_moe_dev_report_t *)last_out = (weft_moe_dev_report_t){.count = count,
                                                                     .rank = r->rank,
                                                                     .why = r->why,
                                                                     .experts = r->experts,
                                                                     .need = r->need,
                                                                     .cap = r->cap};
    return count;
}

/* The bytes a work item's slices cover. */
static uint64_t work_bytes(const weft_work_t *work)
{
    uint64_t bytes = 0;
    for (int i = 0; i < work->nslices; i++)
        bytes += work->slices[i].bytes;
    return bytes;
}

/* Whether a copy reads or writes another rank's memory. */
static int copy_is_remote(const struct weft_comm *comm, const void *dst, const void *src)
{
    int to = weft_window_owner(&comm->window, (uintptr_t)dst);
    int from = weft_window_owner(&comm->window, (uintptr_t)src);
    return (to >= 0 && to != comm->rank) || (from >= 0 && from != comm->rank);
}

/* Copies on the copy engines (a COPY's slices into this rank's memory: use_copy_engine): a
 * one-block kernel waits for the peers' ready flags, the engines copy every slice, a second
 * one-block kernel runs the closing signal (a continued step has no entry kernel: its copies
 * follow the first step's). The first copy runs on the caller's stream, every other one on a
 * side stream of its own, forked from the caller's stream before the first copy and joined
 * before the closing step (events, so that a CUDA graph captures them): the engines
 * then run the copies at once, where one stream runs them one after the other. The copies to or
 * from peers are issued first, so that every rank starts its NVLink copies at once. Two H200s,
 * all-to-all of 1 GiB (the peer's block over NVLink, the own block locally, 512 MiB each): 1419 us
 * against 1662 on one stream (docs/results/2026-11-30-h200-s13.md). */
static weft_status_t execute_copy_engine(struct weft_comm *comm, const weft_work_t *work,
                                         unsigned sync, weft_cuda_copy_t *pending, void *stream,
                                         weft_cuda_usage_t *usage)
{
    struct weft_cuda_state *cs = comm->cuda;
    /* The second step of an operation (WEFT_SYNC_CONTINUE) waits for nobody at its entry and
     * carries no pending copy (weft_cuda_execute checks): its copies follow the first step's
     * kernel in stream order, with nothing to launch before them. */
    if (!(sync & WEFT_SYNC_CONTINUE)) {
        weft_status_t st = launch_enter(comm, pending, stream, usage);
        if (st != WEFT_SUCCESS)
            return st;
    }
    usage->copy_engine = 1;
    cudaStream_t caller = (cudaStream_t)stream;
    int nonempty = 0;
    for (int i = 0; i < work->nslices; i++)
        nonempty += work->slices[i].bytes > 0;
    cudaError_t err = cudaSuccess;
    if (nonempty > 1 && cs->nside > 0) { /* before any copy: the side streams start here */
        err = cudaEventRecord(cs->fork, caller);
        if (err != cudaSuccess)
            return cuda_error(err, "forking a copy-engine side stream");
    }
    int issued = 0, forked = 0; /* copies issued; side streams forked (side[0 .. forked-1]) */
    const char *what = "cudaMemcpyAsync (copy engine)";
    /* Pass 0 issues the copies to or from peers, pass 1 the local ones. */
    for (int local = 0; local < 2 && err == cudaSuccess; local++) {
        for (int i = 0; i < work->nslices && err == cudaSuccess; i++) {
            const void *src = work->src[i];
            uint64_t bytes = work->slices[i].bytes;
            if (bytes == 0 || copy_is_remote(comm, work->dst[i], src) == local)
                continue;
            cudaStream_t s = caller;
            if (issued > 0 && issued - 1 < cs->nside) {
                int j = issued - 1; /* side streams are taken in order */
                err = cudaStreamWaitEvent(cs->side[j], cs->fork, 0);
                if (err != cudaSuccess) {
                    what = "forking a copy-engine side stream";
                    break;
                }
                forked++;
                s = cs->side[j];
            }
            err = cudaMemcpyAsync(work->dst[i], src, bytes, cudaMemcpyDefault, s);
            issued++;
        }
    }
    /* Join every forked stream, also after an error: a capture must not be left forked. */
    for (int j = 0; j < forked; j++) {
        cudaError_t e = cudaEventRecord(cs->join[j], cs->side[j]);
        if (e == cudaSuccess)
            e = cudaStreamWaitEvent(caller, cs->join[j], 0);
        if (e != cudaSuccess && err == cudaSuccess) {
            err = e;
            what = "joining a copy-engine side stream";
        }
    }
    if (err != cudaSuccess)
        return cuda_error(err, what);
    return launch_leave(comm, sync, stream);
}

/* Two H200s over NVLink, the engines' copies on side streams against the SM kernel, per call:
 * all-gather out of place 2-4% slower at 64 MiB, 11-12% faster at 256 MiB and 14-15% at 1 GiB;
 * all-to-all 8%, 22% and 26% faster; broadcast within 3% at 64 MiB, 1-6% faster from 256 MiB;
 * 12-30% slower at 16 MiB (docs/results/2026-11-30-h200-s14.md, store forms where they apply).
 * Counting the rank's own block too makes the ranks of one call agree (a broadcast's root copies
 * only its own block while the peers read it over NVLink); the paths may differ between ranks
 * all the same, as both post the same signals. */
int weft_cuda_copy_engine_takes(const struct weft_comm *comm, uint64_t bytes)
{
    const struct weft_cuda_state *cs = comm->cuda;
    if (!cs || cs->copy_engine == WEFT_COPY_ENGINE_NEVER)
        return 0;
    if (cs->copy_engine == WEFT_COPY_ENGINE_ALWAYS)
        return 1;
    return cs->spans_gpus && bytes >= cs->copy_engine_bytes;
}

/* Whether a work item runs on the copy engines: a COPY that writes only this rank's memory (not
 * a store form: sync without WEFT_SYNC_STORES; a FANOUT is all-gather's store form), by
 * weft_cuda_copy_engine_takes on the bytes it copies. */
static int use_copy_engine(const struct weft_comm *comm, const weft_work_t *work, unsigned sync)
{
    if (!work || work->kind != WEFT_WORK_COPY || (sync & WEFT_SYNC_STORES))
        return 0;
    return weft_cuda_copy_engine_takes(comm, work_bytes(work));
}

/* A push-path operation (exec_cuda.h): one launch, no units (every block takes its share of
 * the payload), blocks enough for one LL word per thread of every pair's payload. */
static weft_status_t execute_push(struct weft_comm *comm, const weft_work_t *work,
                                  const weft_cuda_push_t *push, void *stream,
                                  weft_cuda_usage_t *usage)
{
    struct weft_cuda_state *cs = comm->cuda;
    weft_cuda_params_t *p = &cs->params;
    fill_common(comm, p, 0);
    fill_work(p, work);
    p->push_bytes = push->bytes;
    for (int r = 0; r < comm->nranks; r++) {
        if (r != comm->rank)
            p->src[r] = push->to[r];
        p->push_send[r] = push->send[r];
        p->push_recv[r] = push->recv[r];
    }
    uint64_t lanes = (push->bytes + 3) / 4;
    uint64_t want = (lanes + WEFT_CUDA_THREADS - 1) / WEFT_CUDA_THREADS;
    int nblocks = want < (uint64_t)cs->nblocks ? (int)want : cs->nblocks;
    no_units(p, 0, nblocks);
    weft_cuda_usage_blocks(usage, nblocks);
    return weft_cuda_launch(p, nblocks, stream);
}

weft_status_t weft_cuda_execute(struct weft_comm *comm, const weft_work_t *work, unsigned sync,
                                weft_status_t mine, weft_cuda_copy_t *pending,
                                const weft_cuda_push_t *push, void *stream,
                                weft_cuda_usage_t *usage)
{
    if (mine != WEFT_SUCCESS) {
        *pending = (weft_cuda_copy_t){0}; /* nobody will read it */
        return mine; /* every rank knows it (the handshake agreed): nobody launches */
    }
    if (pending->bytes > 0 && (sync & WEFT_SYNC_CONTINUE))
        return weft_error(WEFT_ERR_INTERNAL, "a local copy is pending at a continued launch");
    struct weft_cuda_state *cs = comm->cuda;
    if (push->bytes > 0) {
        if (sync != 0 || pending->bytes > 0 || push->bytes > cs->push_bytes || !work)
            return weft_error(WEFT_ERR_INTERNAL,
                              "a push of %zu bytes with signals, a pending copy, no work or more "
                              "than the push path takes (%llu bytes)",
                              push->bytes, (unsigned long long)cs->push_bytes);
        return execute_push(comm, work, push, stream, usage);
    }
    if (use_copy_engine(comm, work, sync))
        return execute_copy_engine(comm, work, sync, pending, stream, usage);
    weft_cuda_params_t *p = &cs->params;
    fill_common(comm, p, sync);
    int copy_blocks = take_pending(comm, p, pending);
    int nblocks = 1;
    if (work) {
        fill_work(p, work);
        /* Cut and assign. Units start small enough that every block gets a share of the
         * work (a 2 MiB copy in 1 MiB units would run on two blocks), and grow coarser until
         * the launch holds them. */
        weft_cost_model_t model = cs->model;
        uint64_t share = weft_work_share(work_bytes(work), cs->nblocks);
        if (share < CUDA_MIN_UNIT_BYTES)
            share = CUDA_MIN_UNIT_BYTES;
        for (int t = 0; t < WEFT_NUM_TIERS; t++) {
            if (share < model.tier[t].unit_bytes)
                model.tier[t].unit_bytes = share;
        }
        _Static_assert(WEFT_CUDA_MAX_UNITS >= WEFT_CUDA_MAX_RANKS,
                       "with large enough units every slice is one unit, and the loop ends");
        while (weft_partition_units(&model, work->slices, (size_t)work->nslices, cs->nblocks,
                                    WEFT_WORK_GRANULE) > WEFT_CUDA_MAX_UNITS) {
            for (int t = 0; t < WEFT_NUM_TIERS; t++)
                model.tier[t].unit_bytes *= 2;
        }
        const weft_plan_t *plan;
        weft_status_t st =
            weft_plan_cache_partition(comm->plans, &model, work->slices, (size_t)work->nslices,
                                      cs->nblocks, WEFT_WORK_GRANULE, &plan);
        if (st != WEFT_SUCCESS)
            return st;
        for (size_t u = 0; u < plan->nunits; u++)
            p->units[u] = (weft_cuda_unit_t){.slice = plan->units[u].slice,
                                             .offset = plan->units[u].offset,
                                             .bytes = plan->units[u].bytes};
        /* Launch only blocks that have work (at least one: the signals need it). Units are
         * grouped by worker, so the kept blocks' ranges stay contiguous. */
        nblocks = 0;
        for (int b = 0; b < plan->nworkers; b++) {
            if (plan->worker_begin[b + 1] > plan->worker_begin[b]) {
                p->block_begin[nblocks] = (uint16_t)plan->worker_begin[b];
                p->block_begin[nblocks + 1] = (uint16_t)plan->worker_begin[b + 1];
                nblocks++;
            }
        }
        weft_cuda_usage_blocks(usage, nblocks); /* 0: the work had no bytes */
        if (nblocks == 0) {
            nblocks = 1;
            p->block_begin[0] = p->block_begin[1] = 0;
        }
    }
    weft_cuda_usage_blocks(usage, copy_blocks);
    if (copy_blocks > nblocks) {
        no_units(p, nblocks, copy_blocks);
        nblocks = copy_blocks;
    }
    return weft_cuda_launch(p, nblocks, stream);
}
