/*
 * mp_fault_init_crash.c - a rank dies (SIGKILL) inside weft_comm_init: its peers must fail with
 * WEFT_ERR_PEER_LOST at once, not wait for the timeout.
 *
 * A rank that fails on its own tells the rendezvous store (mp_fault_init); a rank that dies
 * tells nobody. The store sees its connection end without a goodbye and closes every rank's
 * (store_proto.h), which ends a wait on the store and a wait for the dead rank's control-socket
 * connection alike. To die at a chosen point, this test wraps weft_store_allgather (-Wl,--wrap,
 * so it links the internal library instead of libweft): on the last rank (the victim) the
 * wrapper kills the process before or after the all-gather named by MP_CRASH (a test-only
 * variable, "<tag>:before" or "<tag>:after"):
 *   settings:before   its peers wait on the store for its settings;
 *   ctrl/addr:after   its peers have its control-socket address and wait in accept() for it;
 *   ranks:before      after the registries exist: its peers wait on the store again.
 * (Before the store watched for lost connections, every survivor returned WEFT_ERR_TIMEOUT after
 * the suite's 60 s.) "<tag>:fail" makes the victim fail on its own instead, its all-gather
 * returning WEFT_ERR_SYSTEM: with ctrl/addr, its peers wait in accept() for a rank that told the
 * store it failed (FAIL), which closes their connections a moment later (before, they waited for
 * the timeout). MP_CRASH=exec instead makes the victim fail on its own, at the last step
 * that can: after the "ranks" all-gather it wraps pthread_create too, which then fails with
 * EAGAIN (as under a pids limit) when its executor starts a worker (cfg.host_workers 2). The
 * victim must return WEFT_ERR_SYSTEM; its peers too must fail (weft_comm_init fails on every rank
 * or on none: before, the executor started after the closing barrier and the peers returned
 * success).
 *
 * With a timeout of TIMEOUT_S, every survivor must return WEFT_ERR_PEER_LOST within LIMIT_S. Run
 * through mp_fault.sh: weftrun exits 137 (the victim's SIGKILL; 0 with exec), each survivor (each
 * rank with exec) prints PASS, nothing is left in /dev/shm or /tmp. Needs at least 2 ranks. Does
 * not use mp_init, whose communicator would fail.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "harness.h"

#define TIMEOUT_S 60.0
#define LIMIT_S 10.0

/* The victim's crash point: the tag of an all-gather and whether to die before or after it;
 * or, with MP_CRASH=exec, whether its next thread is to fail (armed after the "ranks" one). */
static const char *crash_tag;
static int crash_after, crash_fail;
static int fail_exec, threads_fail;

int __real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);
int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg);

int __wrap_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*fn)(void *),
                          void *arg)
{
    if (threads_fail)
        return EAGAIN;
    return __real_pthread_create(thread, attr, fn, arg);
}

weft_status_t __real_weft_store_allgather(weft_store_t *store, const char *tag, const void *mine,
                                          size_t len, void *all_out);
weft_status_t __wrap_weft_store_allgather(weft_store_t *store, const char *tag, const void *mine,
                                          size_t len, void *all_out);

weft_status_t __wrap_weft_store_allgather(weft_store_t *store, const char *tag, const void *mine,
                                          size_t len, void *all_out)
{
    int here = crash_tag && strcmp(tag, crash_tag) == 0;
    if (here && !crash_after && !crash_fail)
        kill(getpid(), SIGKILL);
    weft_status_t st = __real_weft_store_allgather(store, tag, mine, len, all_out);
    if (here && crash_fail)
        return WEFT_ERR_SYSTEM;
    if (here)
        kill(getpid(), SIGKILL);
    if (fail_exec && strcmp(tag, "ranks") == 0)
        threads_fail = 1;
    return st;
}

int main(void)
{
    mp_ctx_t ctx;
    mp_init_without_comm(&ctx, "mp_fault_init_crash");
    const char *point = getenv("MP_CRASH");
    if (ctx.nranks < 2)
        mp_fatal(&ctx, "needs at least 2 ranks");
    int victim = ctx.nranks - 1;
    int exec = point && strcmp(point, "exec") == 0;
    const char *colon = point ? strrchr(point, ':') : NULL;
    if (!exec && (!colon || colon == point ||
                  (strcmp(colon, ":before") != 0 && strcmp(colon, ":after") != 0 &&
                   strcmp(colon, ":fail") != 0)))
        mp_fatal(&ctx, "MP_CRASH=%s is not exec, <tag>:before, <tag>:after or <tag>:fail",
                 point ? point : "");
    static char tag[64];
    if (!exec) {
        size_t tag_len = (size_t)(colon - point);
        if (tag_len >= sizeof tag)
            mp_fatal(&ctx, "MP_CRASH's tag is too long");
        memcpy(tag, point, tag_len);
    }
    if (ctx.rank == victim) {
        fail_exec = exec;
        crash_tag = exec ? NULL : tag;
        crash_after = !exec && strcmp(colon, ":after") == 0;
        crash_fail = !exec && strcmp(colon, ":fail") == 0;
    }

    mp_case(&ctx, "weft_comm_init (timeout %.0f s) while rank %d dies at %s", TIMEOUT_S, victim,
            point);
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_HOST;
    cfg.timeout_s = TIMEOUT_S;
    cfg.host_workers = 2;
    weft_comm_t comm = NULL;
    double t0 = mp_now_s();
    weft_status_t st = weft_comm_init(&comm, &cfg);
    double dt = mp_now_s() - t0;
    /* The victim gets here with exec and fail only. */
    weft_status_t want = ctx.rank == victim ? WEFT_ERR_SYSTEM : WEFT_ERR_PEER_LOST;
    mp_check(&ctx, st == want, "weft_comm_init returned %s, expected %s: %s",
             weft_status_string(st), weft_status_string(want), weft_last_error());
    mp_check(&ctx, dt < LIMIT_S, "weft_comm_init took %.1f s (limit %.0f s, timeout %.0f s)", dt,
             LIMIT_S, TIMEOUT_S);
    if (st == WEFT_SUCCESS)
        weft_comm_destroy(comm);
    return mp_finish(&ctx);
}
