/*
 * api_torch.c - the allocator functions of include/weft_torch.h, which PyTorch's
 * CUDAPluggableAllocator calls to get and release device memory: weft_malloc and weft_free on a
 * communicator bound once per process.
 *
 * Design: PyTorch's callbacks carry no user context, so the communicator is process-wide state.
 * The MemPool path (weft.torch.mem_pool) calls alloc for whole segments of PyTorch's caching
 * allocator and free only when the pool releases a segment; the process-wide switch
 * (weft.torch.use_weft_allocator) calls them for every tensor. Free waits for the device first,
 * as cudaFree does, because PyTorch frees without synchronising and weft_free must not pull
 * memory from under queued work.
 *
 * A free names only an address, and the shadow window of a later communicator may hand out the
 * same addresses: a segment PyTorch still holds from an unbound (destroyed) communicator would
 * free the new one's allocation there. So the state counts the segments PyTorch holds; after an
 * unbind their frees do nothing (the memory went, or goes, with its communicator), and binding
 * another communicator is refused until PyTorch has returned every one of them.
 *
 * Thread safety: a mutex covers the state. Allocations and frees run their weft_malloc, device
 * wait and weft_free outside it, counted in `in_flight`, so that a free waiting for the device
 * holds up no other thread's allocation; a bind closes the gate to new calls and waits (up to the
 * bound communicator's timeout, on the monotonic clock) until none is in flight, so that an unbind
 * before weft_comm_destroy never leaves a call running on the destroyed communicator. The mutex is
 * held across fork() from the library's load on (util/forksafe.h); the child starts with no call in
 * flight and no bind waiting (the threads that made them are not in it), and its calls on the
 * parent's communicator are refused before they touch CUDA (weft_comm_owned), as every call on an
 * inherited communicator is.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "core/comm.h"
#include "core/comm_cuda.h"
#include "util/forksafe.h"
#include "util/log.h"
#include "weft_torch.h"

static pthread_mutex_t torch_mu = PTHREAD_MUTEX_INITIALIZER;
/* in_flight or binding changed. Initialised at load time by torch_setup (and again in a forked
 * child) with torch_cv_attr, which makes its timed waits use torch_cv_clock: CLOCK_MONOTONIC, so
 * that a step of the wall clock changes no deadline (CLOCK_REALTIME only if the attribute was
 * refused). */
static pthread_cond_t torch_cv;
static pthread_condattr_t torch_cv_attr;
static clockid_t torch_cv_clock = CLOCK_REALTIME;
/* Under torch_mu: */
static weft_comm_t bound_comm;
static uint64_t held_segments; /* from weft_torch_alloc, not yet freed */
static unsigned in_flight;     /* allocations and frees running on bound_comm outside the mutex */
static unsigned binding;       /* binds waiting for in_flight to drain: new calls wait */

/* The state of a forked child, which has none of the threads that made the calls in flight or
 * the binds waiting (util/forksafe.h: runs with torch_mu held, released after it). */
static void torch_child_reset(void)
{
    in_flight = 0;
    binding = 0;
    /* The child's copy may still count the parent's waiters, on which a broadcast of some glibc
     * versions blocks: no thread of the child waits on it, so it starts afresh (re-initialising
     * it, formally undefined, only overwrites it on glibc and musl). */
    pthread_cond_init(&torch_cv, &torch_cv_attr);
}

/* At load time, before any call can use them: torch_cv on the monotonic clock, and torch_mu held
 * across every fork, with torch_child_reset in the child. */
__attribute__((constructor)) static void torch_setup(void)
{
    /* Both calls fail only for an invalid clock or attribute, which these are not; should the
     * clock be refused all the same, the deadlines are computed on the one the wait uses. */
    pthread_condattr_init(&torch_cv_attr);
    if (pthread_condattr_setclock(&torch_cv_attr, CLOCK_MONOTONIC) == 0)
        torch_cv_clock = CLOCK_MONOTONIC;
    pthread_cond_init(&torch_cv, &torch_cv_attr);
    weft_forksafe_guard(&torch_mu, torch_child_reset);
}

/* Start an allocation or free (under torch_mu): waits while a bind drains the calls in flight
 * (a bounded wait: the bind gives up at its deadline). Returns the communicator to use, NULL if
 * none is bound; a non-NULL one must be handed back with call_end. */
static weft_comm_t call_begin(void)
{
    while (binding > 0)
        pthread_cond_wait(&torch_cv, &torch_mu);
    if (bound_comm)
        in_flight++;
    return bound_comm;
}

/* End what call_begin started, counting the segments it handed to PyTorch and those PyTorch gave
 * back (takes torch_mu). */
static void call_end(uint64_t segments_made, uint64_t segments_freed)
{
    pthread_mutex_lock(&torch_mu);
    held_segments = held_segments + segments_made - segments_freed;
    if (--in_flight == 0)
        pthread_cond_broadcast(&torch_cv);
    pthread_mutex_unlock(&torch_mu);
}

/* Wait until no call is in flight, up to the bound communicator's timeout (under torch_mu, with
 * `binding` raised so that no new call starts). */
static weft_status_t drain_calls(void)
{
    if (in_flight == 0)
        return WEFT_SUCCESS;
    double timeout_s = bound_comm->timeout_s;
    struct timespec until;
    clock_gettime(torch_cv_clock, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + (uint64_t)(timeout_s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    while (in_flight > 0)
        if (pthread_cond_timedwait(&torch_cv, &torch_mu, &until) == ETIMEDOUT && in_flight > 0)
            return weft_error(WEFT_ERR_TIMEOUT,
                              "weft_torch_bind: %u allocation(s) or free(s) of the bound "
                              "communicator still running on other threads after %.1f s",
                              in_flight, timeout_s);
    return WEFT_SUCCESS;
}

weft_status_t weft_torch_bind(weft_comm_t comm)
{
    weft_error_clear();
    if (comm) {
        weft_status_t owned = weft_comm_owned(comm, "weft_torch_bind");
        if (owned != WEFT_SUCCESS)
            return owned; /* a forked child's copy of the parent's communicator */
    }
    if (comm && weft_comm_backend(comm) != WEFT_BACKEND_CUDA)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_torch_bind: comm does not use the CUDA backend (PyTorch's "
                          "allocator hands out device memory)");
    pthread_mutex_lock(&torch_mu);
    binding++;
    weft_status_t st = drain_calls();
    if (st != WEFT_SUCCESS)
        ; /* the binding stays as it was */
    else if (comm && comm != bound_comm && held_segments > 0)
        st = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                        "weft_torch_bind: PyTorch still holds %llu segment(s) from the "
                        "communicator bound before; free their tensors and pools (and empty "
                        "PyTorch's cache) first",
                        (unsigned long long)held_segments);
    else
        bound_comm = comm;
    if (--binding == 0)
        pthread_cond_broadcast(&torch_cv);
    pthread_mutex_unlock(&torch_mu);
    return st;
}

void *weft_torch_alloc(ssize_t size, int device, void *stream)
{
    weft_error_clear();
    (void)stream;
    if (size < 0) {
        weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_torch_alloc: size %zd is negative", size);
        return NULL;
    }
    void *ptr = NULL;
    pthread_mutex_lock(&torch_mu);
    weft_comm_t comm = call_begin();
    pthread_mutex_unlock(&torch_mu);
    if (!comm) {
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: no communicator is bound (call weft_torch_bind first)");
        return NULL;
    }
    if (device != weft_cuda_device(comm)) /* weft_malloc memory lives on its device only */
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: device %d is not the communicator's device %d (weft's "
                   "allocator serves only that device)",
                   device, weft_cuda_device(comm));
    else {
        weft_status_t st = weft_malloc(comm, &ptr, (size_t)size);
        if (st != WEFT_SUCCESS) {
            weft_error_prefix(st, "weft_torch_alloc"); /* the call PyTorch made */
            ptr = NULL;
        }
    }
    call_end(ptr != NULL, 0);
    return ptr;
}

void weft_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    weft_error_clear();
    (void)size, (void)device, (void)stream;
    if (!ptr)
        return;
    pthread_mutex_lock(&torch_mu);
    if (held_segments == 0) {
        pthread_mutex_unlock(&torch_mu);
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_free: %p did not come from weft_torch_alloc", ptr);
        return;
    }
    /* PyTorch has let go of it, whatever happens next. Unbound: the memory went, or goes, with
     * its communicator (nothing tells whether ptr was one of its segments). Bound: a failure
     * stays in weft_last_error() and the memory is then released with the communicator; only a
     * pointer weft_free refuses as not weft's leaves the count as it was. */
    weft_comm_t comm = call_begin();
    if (!comm)
        held_segments--;
    pthread_mutex_unlock(&torch_mu);
    if (!comm)
        return;
    /* A forked child's copy of the parent's communicator: no CUDA call (it cannot work there),
     * and the count stays as it was (it is the parent's, copied). */
    weft_status_t st = weft_comm_owned(comm, "weft_torch_free");
    if (st != WEFT_SUCCESS) {
        call_end(0, 0);
        return;
    }
    weft_cuda_prev_t prev;
    if (weft_cuda_device_enter(comm, "weft_torch_free", &prev) == WEFT_SUCCESS &&
        weft_cuda_synchronize("weft_torch_free") == WEFT_SUCCESS &&
        (st = weft_free(comm, ptr)) != WEFT_SUCCESS)
        weft_error_prefix(st, "weft_torch_free");
    weft_cuda_device_leave(prev);
    call_end(0, st != WEFT_ERR_INVALID_ARGUMENT);
}
