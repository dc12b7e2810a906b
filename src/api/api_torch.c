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
 * Thread safety: one mutex covers the state and the weft_malloc / weft_free under it, so that an
 * unbind (before weft_comm_destroy) waits for an allocation or free in flight on another thread.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/comm_cuda.h"
#include "util/log.h"
#include "weft_torch.h"

static pthread_mutex_t torch_mu = PTHREAD_MUTEX_INITIALIZER;
static weft_comm_t bound_comm; /* under torch_mu */
static uint64_t held_segments; /* from weft_torch_alloc, not yet freed; under torch_mu */

weft_status_t weft_torch_bind(weft_comm_t comm)
{
    weft_error_clear();
    if (comm && weft_comm_backend(comm) != WEFT_BACKEND_CUDA)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_torch_bind: comm does not use the CUDA backend (PyTorch's "
                          "allocator hands out device memory)");
    weft_status_t st = WEFT_SUCCESS;
    pthread_mutex_lock(&torch_mu);
    if (comm && comm != bound_comm && held_segments > 0)
        st = weft_error(WEFT_ERR_INVALID_ARGUMENT,
                        "weft_torch_bind: PyTorch still holds %llu segment(s) from the "
                        "communicator bound before; free their tensors and pools (and empty "
                        "PyTorch's cache) first",
                        (unsigned long long)held_segments);
    else
        bound_comm = comm;
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
    weft_comm_t comm = bound_comm;
    if (!comm) {
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: no communicator is bound (call weft_torch_bind first)");
    } else if (device != weft_cuda_device(comm)) {
        /* weft_malloc memory lives on the communicator's device only */
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: device %d is not the communicator's device %d (weft's "
                   "allocator serves only that device)",
                   device, weft_cuda_device(comm));
    } else if (weft_malloc(comm, &ptr, (size_t)size) == WEFT_SUCCESS && ptr) {
        held_segments++;
    }
    pthread_mutex_unlock(&torch_mu);
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
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_free: %p did not come from weft_torch_alloc", ptr);
    } else {
        /* PyTorch has let go of it, whatever happens next. Unbound: the memory went, or goes,
         * with its communicator. A failure stays in weft_last_error(); the memory is then
         * released with the communicator. */
        held_segments--;
        int restore = -1;
        if (bound_comm &&
            weft_cuda_device_enter(bound_comm, "weft_torch_free", &restore) == WEFT_SUCCESS &&
            weft_cuda_synchronize("weft_torch_free") == WEFT_SUCCESS)
            weft_free(bound_comm, ptr);
        weft_cuda_device_leave(restore);
    }
    pthread_mutex_unlock(&torch_mu);
}
