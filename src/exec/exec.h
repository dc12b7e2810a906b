/*
 * exec.h - executors: the workers that move remote slices.
 *
 * An executor runs one function on each of its workers and returns when all have finished.
 * The host executor's workers are the calling thread (worker 0) and nworkers - 1 threads named
 * weft-worker-<i>, which sleep on a futex between operations: after each one a worker polls
 * through the wait policy's spin phase (WEFT_WAIT_SPIN_NS) and yields the CPU through its yield
 * phase (WEFT_WAIT_YIELD_NS), so that a next operation finds it awake, then sleeps until woken.
 *
 * Thread safety: one thread at a time calls run on an executor (the communicator's user).
 */
#ifndef WEFT_EXEC_EXEC_H
#define WEFT_EXEC_EXEC_H

#include "util/wait.h"
#include "weft.h"

typedef struct weft_exec weft_exec_t;

/* The work of one worker: worker is in [0, nworkers). Must not block on other ranks. */
typedef void (*weft_work_fn)(void *ctx, int worker);

typedef struct weft_exec_ops {
    const char *name;
    /* Start an executor with nworkers >= 1 workers whose idle waits follow policy. */
    weft_status_t (*create)(int nworkers, const weft_wait_policy_t *policy, weft_exec_t **exec_out);
    /* Stop and join the workers, free the executor. NULL is a no-op. */
    void (*destroy)(weft_exec_t *exec);
    /* Run fn(ctx, w) on every worker w, the caller being worker 0; returns when all returned. */
    void (*run)(weft_exec_t *exec, weft_work_fn fn, void *ctx);
    int (*nworkers)(const weft_exec_t *exec);
} weft_exec_ops_t;

extern const weft_exec_ops_t weft_exec_host_ops;

#endif /* WEFT_EXEC_EXEC_H */
