/*
 * gpu_late.c - one rank's kernel starts later than the communicator's timeout, on the CUDA
 * backend: the other ranks' kernels give up on the device while every host call succeeds.
 *
 *   weftrun -n N gpu_late all_reduce|all_gather
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

/* The collective under test, from send (COUNT elements) into recv. */
static weft_status_t call(gpu_ctx_t *g, int gather, const gpu_buf_t *send, const gpu_buf_t *recv)
{
    if (gather)
        return weft_all_gather(g->mp.comm, send->ptr, recv->ptr, COUNT, WEFT_FLOAT32, g->stream);
    return weft_all_reduce(g->mp.comm, send->ptr, recv->ptr, COUNT, WEFT_FLOAT32, WEFT_SUM,
                           g->stream);
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "all_reduce") != 0 && strcmp(argv[1], "all_gather") != 0)) {
        fprintf(stderr, "usage: %s all_reduce|all_gather\n", argv[0]);
        return 2;
    }
    int gather = strcmp(argv[1], "all_gather") == 0;
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
    int late = ctx->nranks - 1;
    size_t n = (size_t)ctx->nranks, recv_count = gather ? n * COUNT : COUNT;

    mp_case(ctx, "%s before the late rank", argv[1]);
    gpu_buf_t send, recv;
    gpu_buf_get(&g, &send, NULL, GPU_BUF_WEFT, COUNT * 4, 4);
    gpu_buf_get(&g, &recv, NULL, GPU_BUF_WEFT, recv_count * 4, 4);
    if (gather)
        mp_raw_fill(ctx, WEFT_FLOAT32, ctx->rank, 0, COUNT, send.host);
    else
        mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, COUNT, send.host);
    gpu_buf_push(&g, &send, 0, COUNT * 4);
    mp_ok(ctx, call(&g, gather, &send, &recv), argv[1]);
    gpu_buf_pull(&g, &recv);
    gpu_sync(&g, "the warm-up call");
    for (int p = 0; gather && p < ctx->nranks; p++)
        mp_raw_check(ctx, "recvbuf block", recv.host + (size_t)p * COUNT * 4, WEFT_FLOAT32, p, 0,
                     COUNT);
    if (!gather)
        mp_red_check_result(ctx, "recvbuf", recv.host, WEFT_FLOAT32, WEFT_SUM, 0, COUNT);

    mp_case(ctx, "%s with rank %d's kernel %.1f s late", argv[1], late, timeout_s + LATE_EXTRA_S);
    gpu_gate_t gate;
    gpu_gate_init(&gate, timeout_s + LATE_EXTRA_S + 10);
    size_t recv_bytes = recv_count * 4;
    if (ctx->rank == late) {
        gpu_cuda_ok(&g, cudaMemset(recv.ptr, POISON, recv_bytes), "cudaMemset (poison)");
        gpu_cuda_ok(&g, cudaDeviceSynchronize(), "cudaDeviceSynchronize after the poison");
    }
    if (ctx->rank == late)
        gpu_cuda_ok(&g, cudaLaunchHostFunc(g.stream, gpu_gate_hold, &gate), "cudaLaunchHostFunc");
    double t0 = mp_now_s();
    weft_status_t st = call(&g, gather, &send, &recv);
    mp_check(ctx, st == WEFT_SUCCESS,
             "%s returned %s on the host (%s); expected success: only "
             "the late kernel waits",
             argv[1], weft_status_string(st), weft_last_error());
    if (ctx->rank == late) {
        mp_sleep_ms((timeout_s + LATE_EXTRA_S) * 1000);
        check_untouched(&g, &recv, recv_bytes);
        gpu_gate_open(&gate);
    }
    cudaError_t err = gpu_stream_wait(g.stream, 3 * timeout_s + LATE_EXTRA_S + 10);
    mp_check(ctx, err == cudaSuccess, "the stream did not become idle cleanly: %s (%.2f s)",
             err == cudaErrorNotReady ? "still busy" : cudaGetErrorString(err), mp_now_s() - t0);
    if (err == cudaErrorNotReady)
        mp_fatal(ctx, "a kernel still waits after %.1f s", mp_now_s() - t0);
    mp_check(ctx, !gate.timed_out, "the gate timed out before the late rank opened it");
    mp_note(ctx, "stream idle after %.3f s", mp_now_s() - t0);

    mp_case(ctx, "weft_comm_destroy reports the kernels that gave up");
    free(send.owned_host);
    free(recv.owned_host);
    t0 = mp_now_s();
    st = weft_comm_destroy(ctx->comm);
    double dt = mp_now_s() - t0;
    ctx->comm = NULL;
    mp_check(ctx, mp_lost_peer(st),
             "weft_comm_destroy returned %s (%s); expected timed out or peer lost",
             weft_status_string(st), st == WEFT_SUCCESS ? "no error" : weft_last_error());
    mp_check(ctx, dt < DESTROY_LIMIT_S, "weft_comm_destroy took %.2f s", dt);
    mp_note(ctx, "weft_comm_destroy returned %s after %.3f s", weft_status_string(st), dt);
    return gpu_finish(&g);
}
