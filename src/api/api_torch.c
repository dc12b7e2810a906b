/*
 * api_torch.c - the allocator functions of include/weft_torch.h, which PyTorch's
 * CUDAPluggableAllocator calls to get and release device memory: weft_malloc and weft_free on a
 * communicator bound once per process.
 *
 * Design: PyTorch's callbacks carry no user context, so the communicator is a process-wide
 * atomic pointer. The MemPool path (weft.torch.mem_pool) calls alloc for whole segments of
 * PyTorch's caching allocator and free only when the pool releases a segment; the process-wide
 * switch (weft.torch.use_weft_allocator) calls them for every tensor. Free waits for the device
 * first, as cudaFree does, because PyTorch frees without synchronising and weft_free must not
 * pull memory from under queued work.
 *
 * Thread safety: the binding is read and written atomically; weft_malloc and weft_free may be
 * called from any thread.
 */
#include <stdatomic.h>
#include <stddef.h>

#include "core/comm_cuda.h"
#include "util/log.h"
#include "weft_torch.h"

static _Atomic(weft_comm_t) bound_comm;

weft_status_t weft_torch_bind(weft_comm_t comm)
{
    weft_error_clear();
    if (comm && weft_comm_backend(comm) != WEFT_BACKEND_CUDA)
        return weft_error(WEFT_ERR_INVALID_ARGUMENT,
                          "weft_torch_bind: comm does not use the CUDA backend (PyTorch's "
                          "allocator hands out device memory)");
    atomic_store(&bound_comm, comm);
    return WEFT_SUCCESS;
}

void *weft_torch_alloc(ssize_t size, int device, void *stream)
{
    weft_error_clear();
    weft_comm_t comm = atomic_load(&bound_comm);
    if (!comm) {
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: no communicator is bound (call weft_torch_bind first)");
        return NULL;
    }
    if (size < 0) {
        weft_error(WEFT_ERR_INVALID_ARGUMENT, "weft_torch_alloc: size %zd is negative", size);
        return NULL;
    }
    int mine = weft_cuda_device(comm);
    if (device != mine) { /* weft_malloc memory lives on the communicator's device only */
        weft_error(WEFT_ERR_INVALID_ARGUMENT,
                   "weft_torch_alloc: device %d is not the communicator's device %d (weft's "
                   "allocator serves only that device)",
                   device, mine);
        return NULL;
    }
    void *ptr = NULL;
    if (weft_malloc(comm, &ptr, (size_t)size) != WEFT_SUCCESS)
        return NULL;
    return ptr;
}

void weft_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    weft_error_clear();
    weft_comm_t comm = atomic_load(&bound_comm);
    if (!ptr || !comm)
        return;
    if (weft_cuda_synchronize("weft_torch_free") != WEFT_SUCCESS)
        return;
    weft_free(comm, ptr);
}
