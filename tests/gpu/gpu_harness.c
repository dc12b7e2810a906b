/*
 * gpu_harness.c - set-up, device buffers with guard zones and host mirrors, stream waits and
 * path statistics for the GPU tests (contracts in gpu_harness.h).
 *
 * Design. Everything a test queues goes to one non-blocking stream: guard and poison fills
 * (cudaMemsetAsync), input copies, the collectives, the copies back. Because that stream does
 * not synchronise with the legacy default stream, nothing here uses the synchronous cudaMemcpy
 * or cudaMemset. Host mirrors are plain (pageable) memory: a test only writes a mirror before
 * pushing it or after the stream was synchronised, so the copies never race with the host.
 *
 * Waiting for the stream polls cudaStreamQuery (yielding, then sleeping) up to the
 * communicator's timeout plus a slack: weft's kernels give up at their deadline, so a stream
 * still busy after that is a hang, reported with the case that caused it rather than left to
 * the launcher's timeout.
 *
 * Thread safety: a gpu_ctx_t belongs to one thread.
 */
#include "gpu_harness.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POISON_BYTE 0xA5
#define GUARD_BYTE 0x5A
#define GUARD_BACK_BYTES ((size_t)64)
#define GUARD_FRONT_BYTES ((size_t)136) /* a multiple of every element size */
#define YIELD_POLLS 2000                /* polls of a stream before the waits sleep */
#define SLEEP_POLL_MS 0.2

/* ---------------------------------------------------------------------------------------------
 * Set-up and communicators
 * ------------------------------------------------------------------------------------------- */
static int env_flag(const char *name)
{
    /* Test-only variables; the library's variables go through its configuration table. */
    const char *s = getenv(name);
    return s != NULL && s[0] != '\0' && strcmp(s, "0") != 0;
}

static int env_u64(const char *name, uint64_t *out)
{
    const char *s = getenv(name);
    if (s == NULL || s[0] == '\0')
        return 0;
    *out = strtoull(s, NULL, 0);
    return 1;
}

void gpu_cuda_ok(gpu_ctx_t *g, cudaError_t err, const char *what)
{
    if (err != cudaSuccess)
        mp_fatal(&g->mp, "%s failed: %s: %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

/* Open a CUDA-backend communicator in mode reg and record it in the context. */
static void open_comm(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_CUDA;
    cfg.registration = reg;
    snprintf(ctx->where, sizeof ctx->where, "weft_comm_init reg=%s", mp_reg_name(reg));
    weft_comm_t comm;
    weft_status_t st = weft_comm_init(&comm, &cfg);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_comm_init (CUDA backend, reg=%s) returned %s: %s", mp_reg_name(reg),
                 weft_status_string(st), weft_last_error());
    ctx->comm = comm;
    ctx->reg = reg;
    if (weft_comm_backend(comm) != WEFT_BACKEND_CUDA)
        mp_fatal(ctx, "communicator backend is %d, expected the CUDA backend",
                 (int)weft_comm_backend(comm));
    g->sync_limit_s = cfg.timeout_s + GPU_SYNC_SLACK_S;
}

void gpu_comm_open(gpu_ctx_t *g, weft_registration_t reg)
{
    mp_ctx_t *ctx = &g->mp;
    open_comm(g, reg);
    if (weft_comm_rank(ctx->comm) != ctx->rank || weft_comm_size(ctx->comm) != ctx->nranks)
        mp_fatal(ctx, "communicator says rank %d of %d, the first one said %d of %d",
                 weft_comm_rank(ctx->comm), weft_comm_size(ctx->comm), ctx->rank, ctx->nranks);
}

/* Make this thread's CUDA runtime use the device of a weft_malloc pointer (the device weft
 * selected for this rank), and create the stream. */
static void select_device(gpu_ctx_t *g)
{
    mp_ctx_t *ctx = &g->mp;
    void *probe = NULL;
    weft_status_t st = weft_malloc(ctx->comm, &probe, 64);
    if (st != WEFT_SUCCESS || !probe)
        mp_fatal(ctx, "weft_malloc(64) returned %s: %s", weft_status_string(st), weft_last_error());
    struct cudaPointerAttributes attr;
    memset(&attr, 0, sizeof attr);
    cudaError_t err = cudaPointerGetAttributes(&attr, probe);
    if (err == cudaSuccess && attr.type == cudaMemoryTypeDevice) {
        g->device = attr.device;
    } else {
        /* weft made its device's primary context current on this thread: the runtime sees it. */
        (void)cudaGetLastError();
        gpu_cuda_ok(g, cudaGetDevice(&g->device), "cudaGetDevice");
        printf("%s rank=%d: cudaPointerGetAttributes(weft_malloc pointer %p): %s, type %d; "
               "using the current device %d\n",
               ctx->test, ctx->rank, probe, cudaGetErrorString(err), (int)attr.type, g->device);
    }
    if (weft_comm_device(ctx->comm) != g->device)
        mp_fatal(ctx, "weft_comm_device says device %d, weft_malloc memory is on device %d",
                 weft_comm_device(ctx->comm), g->device);
    gpu_cuda_ok(g, cudaSetDevice(g->device), "cudaSetDevice");
    gpu_cuda_ok(g, cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags(cudaStreamNonBlocking)");
    mp_ok(ctx, weft_free(ctx->comm, probe), "weft_free");
}

/* The minimum and maximum over the ranks of v, by weft_all_reduce in device memory. */
static void all_min_max(gpu_ctx_t *g, const char *what, uint64_t v, uint64_t *min, uint64_t *max)
{
    mp_ctx_t *ctx = &g->mp;
    uint64_t got[3] = {v, 0, 0};
    void *dev = NULL;
    weft_status_t st = weft_malloc(ctx->comm, &dev, sizeof got);
    if (st != WEFT_SUCCESS || !dev)
        mp_fatal(ctx, "weft_malloc returned %s: %s", weft_status_string(st), weft_last_error());
    uint64_t *d = dev;
    gpu_h2d(g, d, got, sizeof got);
    st = weft_all_reduce(ctx->comm, d, d + 1, 1, WEFT_UINT64, WEFT_MIN, g->stream);
    if (st == WEFT_SUCCESS)
        st = weft_all_reduce(ctx->comm, d, d + 2, 1, WEFT_UINT64, WEFT_MAX, g->stream);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_all_reduce of the %s returned %s: %s", what, weft_status_string(st),
                 weft_last_error());
    gpu_d2h(g, got, d, sizeof got);
    gpu_sync(g, what);
    *min = got[1];
    *max = got[2];
    mp_ok(ctx, weft_free(ctx->comm, dev), "weft_free");
}

/* Agree on the seed through device memory: rank 0's value, broadcast, then checked with a MIN
 * and a MAX all-reduce. */
static void agree_seed(gpu_ctx_t *g, int have_env, uint64_t seed_env)
{
    mp_ctx_t *ctx = &g->mp;
    uint64_t seed = 0, got = 0, min, max;
    if (ctx->rank == 0)
        seed = have_env ? seed_env
                        : mp_hash((uint64_t)time(NULL), (uint64_t)getpid(),
                                  (uint64_t)(mp_now_s() * 1e9), 0);
    void *dev = NULL;
    weft_status_t st = weft_malloc(ctx->comm, &dev, sizeof seed);
    if (st != WEFT_SUCCESS || !dev)
        mp_fatal(ctx, "weft_malloc returned %s: %s", weft_status_string(st), weft_last_error());
    gpu_h2d(g, dev, &seed, sizeof seed);
    st = weft_broadcast(ctx->comm, dev, dev, 1, WEFT_UINT64, 0, g->stream);
    if (st != WEFT_SUCCESS)
        mp_fatal(ctx, "weft_broadcast of the seed returned %s: %s", weft_status_string(st),
                 weft_last_error());
    gpu_d2h(g, &got, dev, sizeof got);
    gpu_sync(g, "seed agreement");
    mp_ok(ctx, weft_free(ctx->comm, dev), "weft_free");
    all_min_max(g, "seed", got, &min, &max);
    if (min != got || max != got)
        mp_fatal(ctx,
                 "ranks disagree on the seed after weft_broadcast (min %" PRIu64 ", max %" PRIu64
                 ", mine %" PRIu64 ")",
                 min, max, got);
    if (ctx->rank == 0 && got != seed)
        mp_fatal(ctx, "weft_broadcast changed the root's seed %" PRIu64 " to %" PRIu64, seed, got);
    ctx->seed = got;
}

/* Whether the ranks are on several GPUs (mp_expect_twoshot's defaults depend on it): the MIN and
 * MAX over the ranks of a hash of the GPU's UUID. */
static void learn_gpus(gpu_ctx_t *g, const struct cudaDeviceProp *prop)
{
    uint64_t half[2], min, max;
    memcpy(half, prop->uuid.bytes, sizeof half);
    uint64_t id = mp_hash(half[0], half[1], 0, 0);
    all_min_max(g, "GPU identity", id, &min, &max);
    g->mp.spans_gpus = min != max;
}

void gpu_init(gpu_ctx_t *g, const char *test)
{
    memset(g, 0, sizeof *g);
    mp_ctx_t *ctx = &g->mp;
    setvbuf(stdout, NULL, _IOLBF, 0);
    ctx->test = test;
    ctx->start_s = mp_now_s();
    ctx->rank = -1;
    snprintf(ctx->where, sizeof ctx->where, "set-up");

    /* Skip only where there is no device to test (none, or no driver that can run this
     * runtime); any other error of a machine that has one (a broken installation, a busy or
     * lost device) is a failure, not a skip. */
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver ||
        (err == cudaSuccess && ndev < 1)) {
        printf("SKIP: no CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none");
        fflush(stdout);
        exit(GPU_SKIP_EXIT);
    }
    if (err != cudaSuccess)
        mp_fatal(ctx, "cudaGetDeviceCount: %s (%s)", cudaGetErrorName(err),
                 cudaGetErrorString(err));
    ctx->quick = env_flag("GPU_TEST_QUICK") || env_flag("WEFT_TEST_QUICK");
    uint64_t seed_env = 0;
    int have_env = env_u64("WEFT_TEST_SEED", &seed_env);

    open_comm(g, WEFT_REGISTRATION_ROA);
    ctx->rank = weft_comm_rank(ctx->comm);
    ctx->nranks = weft_comm_size(ctx->comm);
    if (ctx->rank < 0 || ctx->nranks < 1 || ctx->rank >= ctx->nranks)
        mp_fatal(ctx, "weft_comm_rank/size gave rank %d of %d", ctx->rank, ctx->nranks);
    select_device(g);
    agree_seed(g, have_env, seed_env);
    struct cudaDeviceProp prop;
    gpu_cuda_ok(g, cudaGetDeviceProperties(&prop, g->device), "cudaGetDeviceProperties");
    learn_gpus(g, &prop);
    mp_comm_close(ctx);
    mp_note(ctx, "n=%d seed=%" PRIu64 "%s device %d (%s) of %d, ranks on %s", ctx->nranks,
            ctx->seed, ctx->quick ? " quick" : "", g->device, prop.name, ndev,
            ctx->spans_gpus ? "several GPUs" : "one GPU");
}

int gpu_finish(gpu_ctx_t *g)
{
    mp_comm_close(&g->mp);
    if (g->stream) {
        cudaError_t err = cudaStreamDestroy(g->stream);
        mp_check(&g->mp, err == cudaSuccess, "cudaStreamDestroy: %s", cudaGetErrorString(err));
        g->stream = NULL;
    }
    return mp_finish(&g->mp);
}

/* ---------------------------------------------------------------------------------------------
 * Streams and copies
 * ------------------------------------------------------------------------------------------- */
void gpu_gate_init(gpu_gate_t *gate, double limit_s)
{
    atomic_init(&gate->open, 0);
    atomic_init(&gate->timed_out, 0);
    gate->limit_s = limit_s;
}

void CUDART_CB gpu_gate_hold(void *arg)
{
    gpu_gate_t *gate = arg;
    double start = mp_now_s();
    while (!atomic_load(&gate->open)) {
        if (mp_now_s() - start > gate->limit_s) {
            atomic_store(&gate->timed_out, 1);
            return;
        }
        mp_sleep_ms(0.05);
    }
}

void gpu_gate_open(gpu_gate_t *gate)
{
    atomic_store(&gate->open, 1);
}

int gpu_gate_holding(gpu_gate_t *gate)
{
    return !atomic_load(&gate->open) && !atomic_load(&gate->timed_out);
}

cudaError_t gpu_stream_wait(cudaStream_t stream, double limit_s)
{
    double start = mp_now_s();
    for (unsigned polls = 0;; polls++) {
        cudaError_t err = cudaStreamQuery(stream);
        if (err != cudaErrorNotReady)
            return err;
        if (mp_now_s() - start > limit_s)
            return cudaErrorNotReady;
        if (polls < YIELD_POLLS)
            sched_yield();
        else
            mp_sleep_ms(SLEEP_POLL_MS);
    }
}

void gpu_sync(gpu_ctx_t *g, const char *what)
{
    cudaError_t err = gpu_stream_wait(g->stream, g->sync_limit_s);
    if (err == cudaErrorNotReady)
        mp_fatal(&g->mp,
                 "%s: the stream is still busy after %.0f s (a kernel that ignores its "
                 "deadline?)",
                 what, g->sync_limit_s);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(g->stream);
    if (err != cudaSuccess)
        mp_fatal(&g->mp, "%s: the stream failed: %s: %s", what, cudaGetErrorName(err),
                 cudaGetErrorString(err));
}

void gpu_h2d(gpu_ctx_t *g, void *dev, const void *host, size_t bytes)
{
    if (bytes > 0)
        gpu_cuda_ok(g, cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, g->stream),
                    "cudaMemcpyAsync(host to device)");
}

void gpu_d2h(gpu_ctx_t *g, void *host, const void *dev, size_t bytes)
{
    if (bytes > 0)
        gpu_cuda_ok(g, cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, g->stream),
                    "cudaMemcpyAsync(device to host)");
}

/* ---------------------------------------------------------------------------------------------
 * Buffers
 * ------------------------------------------------------------------------------------------- */
const char *gpu_buf_kind_name(gpu_buf_kind_t kind)
{
    static const char *const names[GPU_NUM_BUF_KINDS] = {"weft", "interior", "cuda"};
    return (unsigned)kind < GPU_NUM_BUF_KINDS ? names[kind] : "kind?";
}

size_t gpu_front_bytes(gpu_buf_kind_t kind, size_t es)
{
    if (kind == GPU_BUF_WEFT)
        return 0;
    return GUARD_FRONT_BYTES + (es == 1 ? 1 : es == 2 ? 2 : 0);
}

/* Allocate device memory: weft_malloc if weft, else cudaMalloc. */
static void *dev_alloc(gpu_ctx_t *g, int weft, size_t bytes)
{
    void *p = NULL;
    if (weft) {
        weft_status_t st = weft_malloc(g->mp.comm, &p, bytes);
        if (st != WEFT_SUCCESS || !p)
            mp_fatal(&g->mp, "weft_malloc(%zu) returned %s, pointer %p: %s", bytes,
                     weft_status_string(st), p, weft_last_error());
    } else {
        gpu_cuda_ok(g, cudaMalloc(&p, bytes), "cudaMalloc");
    }
    return p;
}

static void dev_free(gpu_ctx_t *g, int weft, void *p)
{
    if (weft)
        mp_ok(&g->mp, weft_free(g->mp.comm, p), "weft_free");
    else
        gpu_cuda_ok(g, cudaFree(p), "cudaFree");
}

void gpu_slab_create(gpu_ctx_t *g, gpu_slab_t *s, int weft, size_t bytes)
{
    s->weft = weft;
    s->bytes = bytes;
    s->dev = dev_alloc(g, weft, bytes);
    s->host = malloc(bytes);
    if (!s->host)
        mp_fatal(&g->mp, "malloc(%zu) failed", bytes);
}

void gpu_slab_destroy(gpu_ctx_t *g, gpu_slab_t *s)
{
    if (s->dev)
        dev_free(g, s->weft, s->dev);
    free(s->host);
    memset(s, 0, sizeof *s);
}

void gpu_buf_get(gpu_ctx_t *g, gpu_buf_t *b, const gpu_slab_t *slab, gpu_buf_kind_t kind,
                 size_t bytes, size_t es)
{
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->bytes = bytes;
    b->front = gpu_front_bytes(kind, es);
    b->back = GUARD_BACK_BYTES;
    size_t total = b->front + bytes + b->back;
    int weft = kind != GPU_BUF_CUDA;
    if (slab && slab->weft == weft && total <= slab->bytes) {
        b->base = slab->dev;
        b->hbase = slab->host;
    } else {
        b->owned = dev_alloc(g, weft, total);
        b->owned_host = malloc(total);
        if (!b->owned_host)
            mp_fatal(&g->mp, "malloc(%zu) failed", total);
        b->base = b->owned;
        b->hbase = b->owned_host;
    }
    b->ptr = b->base + b->front;
    b->host = b->hbase + b->front;
    if (b->front > 0)
        gpu_cuda_ok(g, cudaMemsetAsync(b->base, GUARD_BYTE, b->front, g->stream),
                    "cudaMemsetAsync(front guard)");
    if (bytes > 0)
        gpu_cuda_ok(g, cudaMemsetAsync(b->ptr, POISON_BYTE, bytes, g->stream),
                    "cudaMemsetAsync(poison)");
    gpu_cuda_ok(g, cudaMemsetAsync(b->ptr + bytes, GUARD_BYTE, b->back, g->stream),
                "cudaMemsetAsync(back guard)");
}

void gpu_buf_put(gpu_ctx_t *g, gpu_buf_t *b)
{
    if (b->owned)
        dev_free(g, b->kind != GPU_BUF_CUDA, b->owned);
    free(b->owned_host);
    memset(b, 0, sizeof *b);
}

void gpu_buf_push(gpu_ctx_t *g, const gpu_buf_t *b, size_t off, size_t len)
{
    gpu_h2d(g, b->ptr + off, b->host + off, len);
}

void gpu_buf_pull(gpu_ctx_t *g, const gpu_buf_t *b)
{
    gpu_d2h(g, b->hbase, b->base, b->front + b->bytes + b->back);
}

static size_t first_not(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return i;
    return n;
}

void gpu_buf_check_guards(gpu_ctx_t *g, const gpu_buf_t *b, const char *name)
{
    size_t i = first_not(b->hbase, b->front, GUARD_BYTE);
    mp_check(&g->mp, i == b->front,
             "%s (%s, %zu bytes): guard byte %zu before the buffer is 0x%02x", name,
             gpu_buf_kind_name(b->kind), b->bytes, b->front - i, i < b->front ? b->hbase[i] : 0);
    const unsigned char *back = b->host + b->bytes;
    i = first_not(back, b->back, GUARD_BYTE);
    mp_check(&g->mp, i == b->back, "%s (%s, %zu bytes): guard byte %zu after the buffer is 0x%02x",
             name, gpu_buf_kind_name(b->kind), b->bytes, i, i < b->back ? back[i] : 0);
}

/* ---------------------------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------------------------- */
int gpu_expect_zero_copy(const gpu_ctx_t *g, gpu_buf_kind_t kind)
{
    return kind != GPU_BUF_CUDA && g->mp.reg != WEFT_REGISTRATION_STAGED;
}

#define WEFT_DEFAULT_PUSH_BYTES ((size_t)64 << 10)       /* WEFT_CUDA_PUSH_BYTES=auto */
#define WEFT_DEFAULT_PAIR_PUSH_BYTES ((size_t)512 << 10) /* the same, two ranks on two GPUs */
#define WEFT_MAX_PUSH_BYTES ((size_t)16 << 20)
#define WEFT_DEFAULT_MAX_BLOCKS 32 /* WEFT_CUDA_MAX_BLOCKS's default (docs/config.md) */
#define WEFT_MAX_BLOCKS 128        /* its cap */

/* WEFT_CUDA_COPY_ENGINE as the tests set it: 0 never, 1 always, -1 auto (unset or anything
 * else). */
static int copy_engine_mode(void)
{
    const char *ce = getenv("WEFT_CUDA_COPY_ENGINE");
    if (ce != NULL && (strcmp(ce, "0") == 0 || strcmp(ce, "1") == 0))
        return ce[0] == '1';
    return -1;
}

size_t gpu_push_limit(gpu_ctx_t *g)
{
    if (copy_engine_mode() == 1)
        return 0;
    size_t dflt = g->mp.nranks == 2 && g->mp.spans_gpus ? WEFT_DEFAULT_PAIR_PUSH_BYTES
                                                        : WEFT_DEFAULT_PUSH_BYTES;
    uint64_t v = mp_env_bytes(&g->mp, "WEFT_CUDA_PUSH_BYTES", dflt);
    if (v > WEFT_MAX_PUSH_BYTES)
        v = WEFT_MAX_PUSH_BYTES;
    return (size_t)(v / 256 * 256);
}

int gpu_block_limit(gpu_ctx_t *g)
{
    int v = mp_env_int(&g->mp, "WEFT_CUDA_MAX_BLOCKS", WEFT_DEFAULT_MAX_BLOCKS);
    return v < 1 ? 1 : v > WEFT_MAX_BLOCKS ? WEFT_MAX_BLOCKS : v;
}

#define WEFT_DEFAULT_COPY_ENGINE_BYTES ((size_t)64 << 20) /* WEFT_CUDA_COPY_ENGINE_BYTES */

int gpu_copy_engine_takes(gpu_ctx_t *g, size_t bytes)
{
    int mode = copy_engine_mode();
    if (mode >= 0)
        return mode;
    return g->mp.spans_gpus && bytes >= mp_env_bytes(&g->mp, "WEFT_CUDA_COPY_ENGINE_BYTES",
                                                     WEFT_DEFAULT_COPY_ENGINE_BYTES);
}

void gpu_check_path(gpu_ctx_t *g, const weft_stats_t *before, const weft_stats_t *after,
                    gpu_buf_kind_t kind, size_t pair_bytes, int peers_read)
{
    mp_ctx_t *ctx = &g->mp;
    uint64_t dz = after->zero_copy_ops - before->zero_copy_ops;
    uint64_t ds = after->staged_ops - before->staged_ops;
    uint64_t di = after->inline_ops - before->inline_ops;
    if (!mp_check_counted_once(ctx, before, after))
        return;
    uint64_t dce = after->copy_engine_ops - before->copy_engine_ops;
    uint64_t dblocks = after->sm_blocks - before->sm_blocks;
    if (!mp_check(ctx, dce <= 1 && dblocks <= (uint64_t)gpu_block_limit(g),
                  "stats: one operation counted copy_engine_ops +%" PRIu64 ", sm_blocks +%" PRIu64
                  " (WEFT_CUDA_MAX_BLOCKS: %d)",
                  dce, dblocks, gpu_block_limit(g)))
        return;
    if (ctx->nranks < 2 || pair_bytes < MP_PATH_CHECK_BYTES)
        return;
    if (pair_bytes <= gpu_push_limit(g)) {
        mp_check(
            ctx, di == 1 && dce == 0 && dblocks >= 1,
            "stats: expected the push path (%zu bytes per pair) on the SMs: zero_copy_ops +%" PRIu64
            ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64 ", copy_engine_ops +%" PRIu64
            ", sm_blocks +%" PRIu64,
            pair_bytes, dz, ds, di, dce, dblocks);
        return;
    }
    int zero = peers_read ? gpu_expect_zero_copy(g, kind) : 1;
    mp_check(ctx, zero ? dz == 1 : ds == 1,
             "stats: expected the %s path (%s buffers, reg=%s%s): zero_copy_ops +%" PRIu64
             ", staged_ops +%" PRIu64 ", inline_ops +%" PRIu64,
             zero ? "zero-copy" : "staged", gpu_buf_kind_name(kind), mp_reg_name(ctx->reg),
             peers_read ? "" : ", peers read nothing of this rank", dz, ds, di);
}

void gpu_check_stores(gpu_ctx_t *g, const weft_stats_t *before, const weft_stats_t *after,
                      size_t pair_bytes, int eligible)
{
    mp_ctx_t *ctx = &g->mp;
    const char *env = getenv("WEFT_REMOTE_STORES");
    int enabled = env == NULL || strcmp(env, "0") != 0;
    int want =
        enabled && eligible && ctx->nranks > 1 && pair_bytes > 0 && pair_bytes > gpu_push_limit(g);
    uint64_t d = after->remote_store_ops - before->remote_store_ops;
    mp_check(ctx, d == (uint64_t)want,
             "stats: remote_store_ops +%" PRIu64 ", expected +%d (%zu bytes per pair, %s)", d, want,
             pair_bytes, eligible ? "eligible" : "not eligible");
}
