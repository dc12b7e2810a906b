/*
 * gpu_late.c - one rank's kernel starts later than the communicator's timeout, on the CUDA
 * backend: the other ranks' kernels give up on the device while every host call succeeds.
 *
 *   weftrun -n N gpu_late all_reduce|all_gather|moe
 *
 * After a checked warm-up call, the last rank ("late") holds its stream with a host gate for
 * WEFT_TIMEOUT_S + LATE_EXTRA_S, then every rank calls the collective (all_reduce: the kernel
 * path; all_gather, run with WEFT_CUDA_COPY_ENGINE=1: copies on the copy engines between an
 * entry and a closing kernel, the closing kernel a second launch of the operation). Expected:
 *   - every host call returns success: the host handshakes complete, only the late kernel waits;
 *   - nothing is written into the late rank's output while its stream has not reached the
 *     operation (poisoned before the call, read through another stream just before the gate
 *     opens): the other ranks' kernels and copies gave up or write only their own memory;
 *   - every stream becomes idle without error (kernels give up, they do not trap);
 *   - no rank takes the operation for done: a launch whose entry wait gave up posts no closing
 *     signal (nor does a later launch of the same operation), so the late rank's kernel does not
 *     complete either;
 *   - weft_comm_destroy, the next call, returns WEFT_ERR_TIMEOUT or WEFT_ERR_PEER_LOST on every
 *     rank, within the limit: no earlier call could report the failed kernels.
 *
 * moe: the MoE data kernels after an entry kernel that gave up. A checked warm-up dispatch and
 * combine (MOE_T tokens of MOE_H float32 per rank, token t to expert t % n, the only one of rank
 * t % n; y = recv_x, so out = x exactly), whose handle is then destroyed; then, the last rank's
 * stream held, every rank dispatches (a fresh layout) and combines. The other ranks' entry
 * kernels give up on the device, and their gather and combine kernels must do nothing: the late
 * rank's handle memory, which they would read, has no layout yet (it may hold the warm-up's, or
 * anything). On every rank but the late one, once its stream is idle: *num_recv_tokens = -1,
 * recv_expert_counts 0, recv_x, recv_topk_idx, recv_topk_weights and out still poisoned. (Before
 * the gather and combine read the failed flag they ran anyway: num_recv_tokens then held that
 * rank's count from its own header plus whatever the late rank's said, rows were written, and a
 * stale header could send the kernels out of bounds.) The rest as above.
 * Needs at least 2 ranks; prints PASS/FAIL per rank (tests/mp/harness.h).
 */
#include "gpu_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* float32 elements per rank: 1 MiB, beyond the push path (there a late rank that receives every
 * payload is rightly done: no closing signal is owed) */
#define COUNT 262147
#define LATE_EXTRA_S 1.5 /* the late rank's hold beyond the timeout */
#define DESTROY_LIMIT_S 20.0
#define POISON 0xA5 /* the late rank's output before the late call */

/* After the late call (made at t0): every rank's stream becomes idle without error, the late
 * rank's once its gate opened (the kernels give up, they do not trap). Returns the stream's
 * status; a stream still busy past the limit ends the test. */
static cudaError_t wait_idle(gpu_ctx_t *g, const gpu_gate_t *gate, double timeout_s, double t0)
{
    mp_ctx_t *ctx = &g->mp;
    cudaError_t err = gpu_stream_wait(g->stream, 3 * timeout_s + LATE_EXTRA_S + 10);
    mp_check(ctx, err == cudaSuccess, "the stream did not become idle cleanly: %s (%.2f s)",
             err == cudaErrorNotReady ? "still busy" : cudaGetErrorString(err), mp_now_s() - t0);
    if (err == cudaErrorNotReady)
        mp_fatal(ctx, "a kernel still waits after %.1f s", mp_now_s() - t0);
    mp_check(ctx, !gate->timed_out, "the gate timed out before the late rank opened it");
    mp_note(ctx, "stream idle after %.3f s", mp_now_s() - t0);
    return err;
}

/* The late rank's output holds POISON in every byte before the call; the peers, whose kernels
 * gave up, must not have written into it. Read on a stream of its own: the test's stream is
 * held by the gate. */
static void check_untouched(gpu_ctx_t *g, const gpu_buf_t *recv, size_t bytes)
{
    cudaStream_t side;
    gpu_cuda_ok(g, cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags");
    gpu_cuda_ok(g, cudaMemcpyAsync(recv->host, recv->ptr, bytes, cudaMemcpyDeviceToHost, side),
                "cudaMemcpyAsync (the late rank's output)");
    gpu_cuda_ok(g, cudaStreamSynchronize(side), "cudaStreamSynchronize (side stream)");
    gpu_cuda_ok(g, cudaStreamDestroy(side), "cudaStreamDestroy");
    size_t written = 0, first = bytes;
    for (size_t i = 0; i < bytes; i++)
        if (recv->host[i] != POISON) {
            written++;
            first = first < i ? first : i;
        }
    mp_check(&g->mp, written == 0,
             "%zu of %zu bytes of the late rank's output were written (the first at byte %zu) "
             "before its stream reached the operation",
             written, bytes, first);
}

/* ---- moe ----------------------------------------------------------------------------------- */
#define MOE_T 64 /* tokens per rank */
#define MOE_H 64 /* float32 elements per row */

/* The buffers of a dispatch and of its combine, which takes recv_x as y. */
enum { M_X, M_IDX, M_W, M_RX, M_RIDX, M_RW, M_RCNT, M_NRECV, M_OUT, M_NUM };
static const char *const moe_names[M_NUM] = {"x",
                                             "topk_idx",
                                             "topk_weights",
                                             "recv_x",
                                             "recv_topk_idx",
                                             "recv_topk_weights",
                                             "recv_expert_counts",
                                             "num_recv_tokens",
                                             "out"};

/* Element e of token t of rank r: an integer, exact in float32. */
static float moe_x(int r, size_t t, size_t e)
{
    return (float)((size_t)(r + 1) * 8192 + t * MOE_H + e);
}

/* Tokens rank r receives from each rank (every rank has MOE_T, token t goes to rank t % n). */
static size_t moe_from_each(int r, int n)
{
    return (MOE_T + (size_t)(n - 1 - r)) / (size_t)n;
}

/* Dispatch then combine (y = recv_x) on the stream; the first error, or success. */
static weft_status_t moe_pair(gpu_ctx_t *g, gpu_buf_t *b, size_t cap, weft_moe_handle_t *handle)
{
    weft_status_t st = weft_moe_dispatch(g->mp.comm, b[M_X].ptr, MOE_T, MOE_H, WEFT_FLOAT32,
                                         (const int64_t *)b[M_IDX].ptr, (const float *)b[M_W].ptr,
                                         1, g->mp.nranks, b[M_RX].ptr, (int64_t *)b[M_RIDX].ptr,
                                         (float *)b[M_RW].ptr, (int64_t *)b[M_RCNT].ptr, cap,
                                         (int64_t *)b[M_NRECV].ptr, handle, g->stream);
    if (st != WEFT_SUCCESS)
        return st;
    return weft_moe_combine(g->mp.comm, *handle, b[M_RX].ptr, b[M_OUT].ptr, g->stream);
}

/* The warm-up pair and its checks; its handle is destroyed after. */
static void moe_warm_up(gpu_ctx_t *g, gpu_buf_t *b, size_t cap)
{
    mp_ctx_t *ctx = &g->mp;
    weft_moe_handle_t handle = NULL;
    if (!mp_ok(ctx, moe_pair(g, b, cap, &handle), "weft_moe_dispatch / weft_moe_combine"))
        return;
    for (int i = 0; i < M_NUM; i++)
        gpu_buf_pull(g, &b[i]);
    gpu_sync(g, "the warm-up dispatch and combine");
    int64_t got, counts;
    memcpy(&got, b[M_NRECV].host, sizeof got);
    memcpy(&counts, b[M_RCNT].host, sizeof counts);
    int64_t want = (int64_t)(moe_from_each(ctx->rank, ctx->nranks) * (size_t)ctx->nranks);
    mp_check(ctx, got == want, "warm-up: num_recv_tokens %lld, expected %lld", (long long)got,
             (long long)want);
    mp_check(ctx, counts == want, "warm-up: recv_expert_counts[0] %lld, expected %lld",
             (long long)counts, (long long)want);
    size_t wrong = 0;
    for (size_t i = 0; i < (size_t)MOE_T * MOE_H; i++) {
        float v;
        memcpy(&v, b[M_OUT].host + i * 4, 4);
        wrong += v != moe_x(ctx->rank, i / MOE_H, i % MOE_H);
    }
    mp_check(ctx, wrong == 0, "warm-up: %zu of %d elements of out differ from x", wrong,
             MOE_T * MOE_H);
    mp_ok(ctx, weft_moe_handle_destroy(handle), "weft_moe_handle_destroy (warm-up)");
}

/* The moe variant up to the idle streams; *handle_out gets the late pair's handle (destroyed
 * after the communicator). */
static void run_moe(gpu_ctx_t *g, double timeout_s, weft_moe_handle_t *handle_out)
{
    mp_ctx_t *ctx = &g->mp;
    int n = ctx->nranks, late = n - 1;
    size_t cap = (size_t)n * MOE_T;
    const size_t bytes[M_NUM] = {MOE_T * MOE_H * 4, MOE_T * 8, MOE_T * 4, cap * MOE_H * 4,  cap * 8,
                                 cap * 4,           8,         8,         MOE_T * MOE_H * 4};
    const size_t es[M_NUM] = {4, 8, 4, 4, 8, 4, 8, 8, 4};
    gpu_buf_t b[M_NUM];
    for (int i = 0; i < M_NUM; i++)
        gpu_buf_get(g, &b[i], NULL, GPU_BUF_WEFT, bytes[i], es[i]);
    for (size_t t = 0; t < MOE_T; t++) {
        int64_t e = (int64_t)(t % (size_t)n);
        float w = 1.0f;
        memcpy(b[M_IDX].host + t * 8, &e, 8);
        memcpy(b[M_W].host + t * 4, &w, 4);
        for (size_t i = 0; i < MOE_H; i++) {
            float v = moe_x(ctx->rank, t, i);
            memcpy(b[M_X].host + (t * MOE_H + i) * 4, &v, 4);
        }
    }
    for (int i = M_X; i <= M_W; i++)
        gpu_buf_push(g, &b[i], 0, bytes[i]);

    mp_case(ctx, "moe dispatch and combine before the late rank");
    moe_warm_up(g, b, cap);

    mp_case(ctx, "moe dispatch and combine with rank %d's kernels %.1f s late", late,
            timeout_s + LATE_EXTRA_S);
    for (int i = M_RX; i < M_NUM; i++)
        gpu_cuda_ok(g, cudaMemsetAsync(b[i].ptr, POISON, bytes[i], g->stream),
                    "cudaMemsetAsync (poison)");
    gpu_sync(g, "the poison");
    gpu_gate_t gate;
    gpu_gate_init(&gate, timeout_s + LATE_EXTRA_S + 10);
    if (ctx->rank == late)
        gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, gpu_gate_hold, &gate), "cudaLaunchHostFunc");
    double t0 = mp_now_s();
    *handle_out = NULL;
    weft_status_t st = moe_pair(g, b, cap, handle_out);
    mp_check(ctx, st == WEFT_SUCCESS,
             "weft_moe_dispatch / weft_moe_combine returned %s on the host (%s); expected "
             "success: only the late kernels wait",
             weft_status_string(st), weft_last_error());
    if (ctx->rank == late) {
        mp_sleep_ms((timeout_s + LATE_EXTRA_S) * 1000);
        gpu_gate_open(&gate);
    }
    cudaError_t err = wait_idle(g, &gate, timeout_s, t0);
    if (ctx->rank != late && err == cudaSuccess) {
        /* The entry kernels gave up: the data kernels must have written nothing but -1. */
        for (int i = M_RX; i < M_NUM; i++)
            gpu_buf_pull(g, &b[i]);
        gpu_sync(g, "reading the outputs");
        int64_t got, counts;
        memcpy(&got, b[M_NRECV].host, sizeof got);
        memcpy(&counts, b[M_RCNT].host, sizeof counts);
        mp_check(ctx, got == -1,
                 "num_recv_tokens is %lld after the entry kernel gave up; expected -1 (the "
                 "gather ran)",
                 (long long)got);
        mp_check(ctx, counts == 0, "recv_expert_counts[0] is %lld after the entry kernel gave up",
                 (long long)counts);
        for (int i = M_RX; i <= M_RW; i++)
            mp_check_poison(ctx, moe_names[i], b[i].host, bytes[i]);
        mp_check_poison(ctx, moe_names[M_OUT], b[M_OUT].host, bytes[M_OUT]);
    }
    for (int i = 0; i < M_NUM; i++)
        free(b[i].owned_host);
}

/* The collective under test, from send (COUNT elements) into recv. */
static weft_status_t call(gpu_ctx_t *g, int gather, const gpu_buf_t *send, const gpu_buf_t *recv)
{
    if (gather)
        return weft_all_gather(g->mp.comm, send->ptr, recv->ptr, COUNT, WEFT_FLOAT32, g->stream);
    return weft_all_reduce(g->mp.comm, send->ptr, recv->ptr, COUNT, WEFT_FLOAT32, WEFT_SUM,
                           g->stream);
}

/* The collective variants up to the idle streams. */
static void run_collective(gpu_ctx_t *g, const char *name, int gather, double timeout_s)
{
    mp_ctx_t *ctx = &g->mp;
    int late = ctx->nranks - 1;
    size_t n = (size_t)ctx->nranks, recv_count = gather ? n * COUNT : COUNT;

    mp_case(ctx, "%s before the late rank", name);
    gpu_buf_t send, recv;
    gpu_buf_get(g, &send, NULL, GPU_BUF_WEFT, COUNT * 4, 4);
    gpu_buf_get(g, &recv, NULL, GPU_BUF_WEFT, recv_count * 4, 4);
    if (gather)
        mp_raw_fill(ctx, WEFT_FLOAT32, ctx->rank, 0, COUNT, send.host);
    else
        mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, COUNT, send.host);
    gpu_buf_push(g, &send, 0, COUNT * 4);
    mp_ok(ctx, call(g, gather, &send, &recv), name);
    gpu_buf_pull(g, &recv);
    gpu_sync(g, "the warm-up call");
    for (int p = 0; gather && p < ctx->nranks; p++)
        mp_raw_check(ctx, "recvbuf block", recv.host + (size_t)p * COUNT * 4, WEFT_FLOAT32, p, 0,
                     COUNT);
    if (!gather)
        mp_red_check_result(ctx, "recvbuf", recv.host, WEFT_FLOAT32, WEFT_SUM, 0, COUNT);

    mp_case(ctx, "%s with rank %d's kernel %.1f s late", name, late, timeout_s + LATE_EXTRA_S);
    gpu_gate_t gate;
    gpu_gate_init(&gate, timeout_s + LATE_EXTRA_S + 10);
    size_t recv_bytes = recv_count * 4;
    if (ctx->rank == late) {
        gpu_cuda_ok(g, cudaMemset(recv.ptr, POISON, recv_bytes), "cudaMemset (poison)");
        gpu_cuda_ok(g, cudaDeviceSynchronize(), "cudaDeviceSynchronize after the poison");
    }
    if (ctx->rank == late)
        gpu_cuda_ok(g, cudaLaunchHostFunc(g->stream, gpu_gate_hold, &gate), "cudaLaunchHostFunc");
    double t0 = mp_now_s();
    weft_status_t st = call(g, gather, &send, &recv);
    mp_check(ctx, st == WEFT_SUCCESS,
             "%s returned %s on the host (%s); expected success: only "
             "the late kernel waits",
             name, weft_status_string(st), weft_last_error());
    if (ctx->rank == late) {
        mp_sleep_ms((timeout_s + LATE_EXTRA_S) * 1000);
        check_untouched(g, &recv, recv_bytes);
        gpu_gate_open(&gate);
    }
    wait_idle(g, &gate, timeout_s, t0);

    free(send.owned_host);
    free(recv.owned_host);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "all_reduce") != 0 && strcmp(argv[1], "all_gather") != 0 &&
                      strcmp(argv[1], "moe") != 0)) {
        fprintf(stderr, "usage: %s all_reduce|all_gather|moe\n", argv[0]);
        return 2;
    }
    int gather = strcmp(argv[1], "all_gather") == 0, moe = strcmp(argv[1], "moe") == 0;
    gpu_ctx_t g;
    gpu_init(&g, "gpu_late");
    mp_ctx_t *ctx = &g.mp;
    if (ctx->nranks < 2) {
        mp_note(ctx, "SKIP: needs at least 2 ranks");
        return gpu_finish(&g);
    }
    gpu_comm_open(&g, WEFT_REGISTRATION_ROA);
    const char *timeout_env = getenv("WEFT_TIMEOUT_S");
    double timeout_s = timeout_env ? atof(timeout_env) : 0;
    if (timeout_s <= 0 || timeout_s > 10)
        mp_fatal(ctx, "run with WEFT_TIMEOUT_S in (0, 10] (got %s)",
                 timeout_env ? timeout_env : "none");
    weft_moe_handle_t handle = NULL;
    if (moe)
        run_moe(&g, timeout_s, &handle);
    else
        run_collective(&g, argv[1], gather, timeout_s);

    mp_case(ctx, "weft_comm_destroy reports the kernels that gave up");
    double t0 = mp_now_s();
    weft_status_t st = weft_comm_destroy(ctx->comm);
    double dt = mp_now_s() - t0;
    ctx->comm = NULL;
    mp_check(ctx, mp_lost_peer(st),
             "weft_comm_destroy returned %s (%s); expected timed out or peer lost",
             weft_status_string(st), st == WEFT_SUCCESS ? "no error" : weft_last_error());
    mp_check(ctx, dt < DESTROY_LIMIT_S, "weft_comm_destroy took %.2f s", dt);
    mp_note(ctx, "weft_comm_destroy returned %s after %.3f s", weft_status_string(st), dt);
    /* Detached by the destruction: only host memory is left. */
    mp_ok(ctx, weft_moe_handle_destroy(handle), "weft_moe_handle_destroy (after the communicator)");
    return gpu_finish(&g);
}
