/*
 * exec_host.c - the CPU worker pool.
 *
 * Design: the caller publishes (fn, ctx) and bumps a generation flag; each helper thread waits
 * on that flag (wait.h policy: brief spin, yield, futex sleep), runs fn(ctx, w) and bumps its own
 * completion count; the caller runs worker 0's share, then waits until all helpers completed
 * this generation. Work functions only copy or reduce memory, so the caller's wait is bounded by
 * their run time and needs no deadline of its own.
 *
 * Thread safety: run is called by one thread at a time; helpers read (fn, ctx) only after the
 * generation flag's acquire, and the caller reads results only after the completion flag's.
 */
#include "exec/exec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/log.h"
#include "util/wait.h"

struct weft_exec {
    int nworkers;
    weft_wait_policy_t policy;
    pthread_t *threads; /* nworkers - 1 helpers */
    weft_work_fn fn;
    void *ctx;
    _Atomic int stopping;
    weft_flag_t generation; /* bumped by run; helpers wait on it */
    weft_flag_t completed;  /* helpers that finished the current generation */
    _Atomic uint32_t finished;
};

typedef struct helper_arg {
    weft_exec_t *exec;
    int worker;
} helper_arg_t;

static void *helper_main(void *p)
{
    helper_arg_t arg = *(helper_arg_t *)p;
    free(p);
    weft_exec_t *exec = arg.exec;
    char name[16];
    snprintf(name, sizeof name, "weft-worker-%d", arg.worker);
    pthread_setname_np(pthread_self(), name);
    uint64_t gen = 0;
    for (;;) {
        gen++;
        /* Idle until the next operation (or the stop), however long: no deadline, no slices. */
        (void)weft_flag_wait(&exec->generation, gen, &exec->policy, NULL, NULL);
        if (atomic_load_explicit(&exec->stopping, memory_order_acquire))
            return NULL;
        exec->fn(exec->ctx, arg.worker);
        uint32_t done = atomic_fetch_add_explicit(&exec->finished, 1, memory_order_acq_rel) + 1;
        if (done == (uint32_t)(exec->nworkers - 1))
            weft_flag_set(&exec->completed, gen);
    }
}

static void host_destroy(weft_exec_t *exec);

static weft_status_t host_create(int nworkers, const weft_wait_policy_t *policy,
                                 weft_exec_t **exec_out)
{
    if (nworkers < 1)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT, "executor: nworkers %d < 1", nworkers);
    weft_exec_t *exec = calloc(1, sizeof *exec);
    if (!exec)
        return weft_error(WEFT_ERR_NO_MEMORY, "executor: calloc");
    exec->threads = calloc((size_t)nworkers, sizeof *exec->threads);
    if (!exec->threads) {
        free(exec);
        return weft_error(WEFT_ERR_NO_MEMORY, "executor: calloc threads");
    }
    exec->policy = *policy;
    exec->nworkers = 1; /* grows as helpers start, so destroy joins exactly those */
    for (int w = 1; w < nworkers; w++) {
        helper_arg_t *arg = malloc(sizeof *arg);
        if (!arg) {
            host_destroy(exec);
            return weft_error(WEFT_ERR_NO_MEMORY, "executor: malloc");
        }
        *arg = (helper_arg_t){exec, w};
        int err = pthread_create(&exec->threads[w - 1], NULL, helper_main, arg);
        if (err != 0) {
            free(arg);
            host_destroy(exec);
            return weft_error_errno(WEFT_ERR_SYSTEM, err, "executor: pthread_create");
        }
        exec->nworkers = w + 1;
    }
    *exec_out = exec;
    return WEFT_SUCCESS;
}

static void host_destroy(weft_exec_t *exec)
{
    if (!exec)
        return;
    atomic_store_explicit(&exec->stopping, 1, memory_order_release);
    weft_flag_set(&exec->generation, atomic_load(&exec->generation.value) + 1);
    for (int w = 1; w < exec->nworkers; w++)
        pthread_join(exec->threads[w - 1], NULL);
    free(exec->threads);
    free(exec);
}

static void host_run(weft_exec_t *exec, weft_work_fn fn, void *ctx)
{
    if (exec->nworkers == 1) {
        fn(ctx, 0);
        return;
    }
    exec->fn = fn;
    exec->ctx = ctx;
    atomic_store_explicit(&exec->finished, 0, memory_order_relaxed);
    uint64_t gen = atomic_load_explicit(&exec->generation.value, memory_order_relaxed) + 1;
    weft_flag_set(&exec->generation, gen);
    fn(ctx, 0);
    (void)weft_flag_wait(&exec->completed, gen, &exec->policy, NULL, NULL); /* its own workers */
}

static int host_nworkers(const weft_exec_t *exec)
{
    return exec->nworkers;
}

const weft_exec_ops_t weft_exec_host_ops = {
    .name = "host",
    .create = host_create,
    .destroy = host_destroy,
    .run = host_run,
    .nworkers = host_nworkers,
};
