/*
 * gpu_fault.c - a rank dies (SIGKILL) in the middle of a job on the CUDA backend.
 *
 * After a barrier the last rank kills itself with SIGKILL; the others call an all_reduce on
 * device buffers. Two variants (argv[1]):
 *   (none)      the victim waits for its stream, sleeps 200 ms and dies: the survivors' host
 *               handshake of the all_reduce waits for a peer that never posts;
 *   --inflight  the victim holds its stream with a 3 s host callback, calls the all_reduce too
 *               (its host handshake completes, its kernel stays queued) and dies at once: the
 *               survivors' kernels wait on the device for a peer that never arrives, until the
 *               host notices the loss (or WEFT_TIMEOUT_S passes).
 * Survivors: the all_reduce returns WEFT_ERR_PEER_LOST or WEFT_ERR_TIMEOUT, or it returns success
 * and, once the stream is idle, the next weft call returns one of them (errors of kernels are
 * reported by the next call); all of it within 10 s (the suite runs it with WEFT_TIMEOUT_S=5).
 * The stream must become idle without error (kernels give up, they do not trap), later calls
 * keep failing the same way, the GPU stays usable (cudaMemsetAsync and a synchronisation
 * succeed), and weft_comm_destroy returns success within 10 s. Survivors print PASS and exit 0;
 * weftrun exits 137 (the victim's SIGKILL). Run through gpu_fault.sh, which checks that.
 * Needs at least 2 ranks.
 */
#include "gpu_harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DETECT_LIMIT_S 10.0
#define COUNT 4099
#define VICTIM_SLEEP_MS 200.0
#define HOLD_MS 3000.0

/* Host callback that keeps the victim's stream busy (no CUDA calls in here). */
static void CUDART_CB hold_cb(void *arg)
{
    (void)arg;
    mp_sleep_ms(HOLD_MS);
}

int main(int argc, char **argv)
{
    int inflight = argc > 1 && strcmp(argv[1], "--inflight") == 0;
    gpu_ctx_t g;
    gpu_init(&g, "gpu_fault");
    mp_ctx_t *ctx = &g.mp;
    if (ctx->nranks < 2) {
        mp_note(ctx, "SKIP: needs at least 2 ranks");
        return gpu_finish(&g);
    }
    gpu_comm_open(&g, WEFT_REGISTRATION_ROA);
    int victim = ctx->nranks - 1;
    mp_note(ctx, "rank %d dies %s", victim,
            inflight ? "with its all_reduce queued behind a host callback"
                     : "between a barrier and an all_reduce");
    mp_case(ctx, "barrier and all_reduce before the kill");
    gpu_buf_t send, recv;
    gpu_buf_get(&g, &send, NULL, GPU_BUF_WEFT, COUNT * 4, 4);
    gpu_buf_get(&g, &recv, NULL, GPU_BUF_WEFT, COUNT * 4, 4);
    mp_red_fill(ctx, WEFT_FLOAT32, WEFT_SUM, ctx->rank, 0, COUNT, send.host);
    gpu_buf_push(&g, &send, 0, COUNT * 4);
    mp_ok(ctx, weft_barrier(ctx->comm, g.stream), "weft_barrier");
    mp_ok(ctx,
          weft_all_reduce(ctx->comm, send.ptr, recv.ptr, COUNT, WEFT_FLOAT32, WEFT_SUM, g.stream),
          "weft_all_reduce");
    gpu_buf_pull(&g, &recv);
    gpu_sync(&g, "all_reduce before the kill");
    mp_red_check_result(ctx, "recvbuf before the kill", recv.host, WEFT_FLOAT32, WEFT_SUM, 0,
                        COUNT);

    mp_case(ctx, "barrier before the kill");
    mp_ok(ctx, weft_barrier(ctx->comm, g.stream), "weft_barrier");
    if (ctx->rank == victim) {
        gpu_sync(&g, "victim's barrier");
        if (inflight) {
            gpu_cuda_ok(&g, cudaLaunchHostFunc(g.stream, hold_cb, NULL), "cudaLaunchHostFunc");
            (void)weft_all_reduce(ctx->comm, send.ptr, recv.ptr, COUNT, WEFT_FLOAT32, WEFT_SUM,
                                  g.stream);
        } else {
            mp_sleep_ms(VICTIM_SLEEP_MS);
        }
        fflush(stdout);
        kill(getpid(), SIGKILL);
    }

    mp_case(ctx, "all_reduce while rank %d dies", victim);
    double t0 = mp_now_s();
    weft_status_t st =
        weft_all_reduce(ctx->comm, send.ptr, recv.ptr, COUNT, WEFT_FLOAT32, WEFT_SUM, g.stream);
    double t_call = mp_now_s() - t0;
    cudaError_t err = gpu_stream_wait(g.stream, 2 * DETECT_LIMIT_S);
    double t_idle = mp_now_s() - t0;
    mp_check(ctx, err == cudaSuccess,
             "the stream did not become idle cleanly after the peer died: %s (%.2f s)",
             err == cudaErrorNotReady ? "still busy" : cudaGetErrorString(err), t_idle);
    if (err == cudaErrorNotReady)
        mp_fatal(ctx, "a kernel still waits for the dead peer after %.0f s", 2 * DETECT_LIMIT_S);
    gpu_cuda_ok(&g, cudaStreamSynchronize(g.stream), "cudaStreamSynchronize");
    weft_status_t next = WEFT_SUCCESS;
    double t_next = t_idle;
    if (st == WEFT_SUCCESS) {
        next = weft_barrier(ctx->comm, g.stream);
        t_next = mp_now_s() - t0;
    }
    mp_check(ctx, mp_lost_peer(st) || (st == WEFT_SUCCESS && mp_lost_peer(next)),
             "all_reduce returned %s and the next call %s; expected peer lost or timed out from "
             "one of them: %s",
             weft_status_string(st), weft_status_string(next), weft_last_error());
    mp_check(ctx, t_call < DETECT_LIMIT_S && t_next < DETECT_LIMIT_S,
             "noticing the dead peer took too long: all_reduce returned after %.2f s, the "
             "error surfaced after %.2f s",
             t_call, t_next);
    mp_note(ctx, "all_reduce returned %s after %.3f s; stream idle after %.3f s; next call: %s",
            weft_status_string(st), t_call, t_idle,
            st == WEFT_SUCCESS ? weft_status_string(next) : "(no second call needed)");

    mp_case(ctx, "later calls after the peer died");
    t0 = mp_now_s();
    st = weft_barrier(ctx->comm, g.stream);
    mp_check(ctx, mp_lost_peer(st), "barrier returned %s, expected peer lost or timed out",
             weft_status_string(st));
    st = weft_all_reduce(ctx->comm, send.ptr, recv.ptr, COUNT, WEFT_FLOAT32, WEFT_SUM, g.stream);
    mp_check(ctx, mp_lost_peer(st), "all_reduce returned %s, expected peer lost or timed out",
             weft_status_string(st));
    mp_check(ctx, mp_now_s() - t0 < DETECT_LIMIT_S, "later calls took %.2f s", mp_now_s() - t0);

    mp_case(ctx, "the GPU is still usable");
    err = cudaMemsetAsync(recv.ptr, 0x3C, COUNT * 4, g.stream);
    if (err == cudaSuccess)
        err = gpu_stream_wait(g.stream, DETECT_LIMIT_S);
    if (err == cudaSuccess)
        err = cudaStreamSynchronize(g.stream);
    mp_check(ctx, err == cudaSuccess, "cudaMemsetAsync + synchronisation after the fault: %s",
             cudaGetErrorString(err));
    if (err == cudaSuccess) {
        gpu_buf_pull(&g, &recv);
        gpu_sync(&g, "copy back after the fault");
        size_t bad = 0;
        for (size_t i = 0; i < COUNT * 4; i++)
            bad += recv.host[i] != 0x3C;
        mp_check(ctx, bad == 0, "cudaMemsetAsync after the fault: %zu bytes wrong", bad);
    }

    /* weft_comm_destroy frees the weft_malloc buffers too. */
    mp_case(ctx, "weft_comm_destroy after the peer died");
    free(send.owned_host);
    free(recv.owned_host);
    mp_comm_close_within(ctx, DETECT_LIMIT_S);
    return gpu_finish(&g);
}
