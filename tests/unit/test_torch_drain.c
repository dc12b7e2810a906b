/*
 * test_torch_drain.c - weft_torch_bind's wait for the allocations and frees in flight
 * (src/api/api_torch.c) keeps to the monotonic clock, so a step of the wall clock changes neither
 * how long it waits nor when it gives up.
 *
 * A step cannot be made here (it needs CAP_SYS_TIME and would upset the machine), so the test
 * reads the wall clock wrong instead: clock_gettime is wrapped (-Wl,--wrap, tests/CMakeLists.txt)
 * to return CLOCK_REALTIME an hour off, while pthread_cond_timedwait, inside the C library, still
 * waits on the true clock: as if the wall clock stepped by an hour between the deadline's
 * computation and the wait. Other clocks pass through.
 *   - An hour behind (a step forward): with an allocation in flight for 0.3 s and a timeout of
 *     2 s, the bind waits for it and succeeds (before: a deadline already past, WEFT_ERR_TIMEOUT
 *     at once).
 *   - An hour ahead (a step back): with an allocation in flight for 4 s and a timeout of 1 s, the
 *     bind gives up with WEFT_ERR_TIMEOUT after about 1 s (before: it would have waited an hour;
 *     here until the allocation ended, and succeeded).
 *
 * The communicator and the CUDA side are stubs, wrapped too: weft_comm_owned (owned),
 * weft_comm_backend (CUDA), weft_cuda_device (device 0) and weft_malloc (waits until the test
 * lets it return), so no GPU is needed; a zeroed struct weft_comm carries the timeout.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "core/comm.h"
#include "util/clock.h"
#include "weft_torch.h"

static _Atomic long realtime_skew_s; /* added to CLOCK_REALTIME's readings */
static _Atomic int malloc_entered;   /* weft_malloc calls that started */
static _Atomic int malloc_open;      /* weft_malloc may return */

int __real_clock_gettime(clockid_t clk, struct timespec *ts);
int __wrap_clock_gettime(clockid_t clk, struct timespec *ts);
weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call);
weft_backend_t __wrap_weft_comm_backend(weft_comm_t comm);
int __wrap_weft_cuda_device(const struct weft_comm *comm);
weft_status_t __wrap_weft_malloc(weft_comm_t comm, void **ptr, size_t bytes);

int __wrap_clock_gettime(clockid_t clk, struct timespec *ts)
{
    int rc = __real_clock_gettime(clk, ts);
    if (rc == 0 && clk == CLOCK_REALTIME)
        ts->tv_sec += atomic_load(&realtime_skew_s);
    return rc;
}

weft_status_t __wrap_weft_comm_owned(const struct weft_comm *comm, const char *call)
{
    return WEFT_SUCCESS;
}

weft_backend_t __wrap_weft_comm_backend(weft_comm_t comm)
{
    return WEFT_BACKEND_CUDA;
}

int __wrap_weft_cuda_device(const struct weft_comm *comm)
{
    return 0;
}

weft_status_t __wrap_weft_malloc(weft_comm_t comm, void **ptr, size_t bytes)
{
    static char segment[64]; /* never touched: PyTorch is not here */
    atomic_fetch_add(&malloc_entered, 1);
    while (!atomic_load(&malloc_open)) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    *ptr = segment;
    return WEFT_SUCCESS;
}

static void *alloc_thread(void *arg)
{
    return weft_torch_alloc(4096, 0, NULL);
}

static void *open_after(void *arg)
{
    uint64_t until = weft_now_ns() + (uint64_t)(uintptr_t)arg * 1000000u;
    while (weft_now_ns() < until) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    atomic_store(&malloc_open, 1);
    return NULL;
}

/* Rebind comm (timeout timeout_s) while an allocation stays in flight for open_ms, with the wall
 * clock read skew_s off. Returns the bind's status; its duration in *elapsed_s. */
static weft_status_t bind_while_in_flight(struct weft_comm *comm, double timeout_s, long skew_s,
                                          unsigned open_ms, double *elapsed_s)
{
    comm->timeout_s = timeout_s;
    atomic_store(&malloc_open, 0);
    int entered = atomic_load(&malloc_entered);
    pthread_t alloc, opener;
    if (pthread_create(&alloc, NULL, alloc_thread, NULL) != 0) {
        CHECK(0, "pthread_create failed");
        exit(1);
    }
    while (atomic_load(&malloc_entered) == entered) { /* the allocation is in flight */
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (pthread_create(&opener, NULL, open_after, (void *)(uintptr_t)open_ms) != 0) {
        CHECK(0, "pthread_create failed");
        exit(1);
    }
    atomic_store(&realtime_skew_s, skew_s);
    uint64_t t0 = weft_now_ns();
    weft_status_t st = weft_torch_bind(comm);
    *elapsed_s = (double)(weft_now_ns() - t0) * 1e-9;
    atomic_store(&realtime_skew_s, 0);
    void *ptr;
    pthread_join(opener, NULL);
    pthread_join(alloc, &ptr);
    CHECK(ptr != NULL, "weft_torch_alloc failed: %s", weft_last_error());
    return st;
}

int main(void)
{
    struct weft_comm *comm = calloc(1, sizeof *comm);
    if (!comm) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    comm->timeout_s = 1.0;
    weft_status_t st = weft_torch_bind(comm);
    CHECK(st == WEFT_SUCCESS, "first bind: %s", weft_last_error());

    double elapsed;
    st = bind_while_in_flight(comm, 2.0, -3600, 300, &elapsed);
    CHECK(st == WEFT_SUCCESS && elapsed >= 0.25 && elapsed < 1.9,
          "wall clock an hour behind, allocation in flight 0.3 s, timeout 2 s: the bind returned "
          "%s after %.3f s (%s), expected success after about 0.3 s",
          weft_status_string(st), elapsed, st == WEFT_SUCCESS ? "" : weft_last_error());

    st = bind_while_in_flight(comm, 1.0, 3600, 4000, &elapsed);
    CHECK(st == WEFT_ERR_TIMEOUT && elapsed >= 0.95 && elapsed < 3.0,
          "wall clock an hour ahead, allocation in flight 4 s, timeout 1 s: the bind returned %s "
          "after %.3f s, expected WEFT_ERR_TIMEOUT after about 1 s",
          weft_status_string(st), elapsed);

    CHECK(weft_torch_bind(NULL) == WEFT_SUCCESS, "unbind: %s", weft_last_error());
    free(comm);
    if (failures) {
        printf("test_torch_drain: %d checks failed\n", failures);
        return 1;
    }
    printf("test_torch_drain: ok\n");
    return 0;
}
