/*
 * weft_torch.h - allocator entry points for PyTorch's CUDAPluggableAllocator, so that tensors
 * are allocated with weft_malloc (registration-on-allocation) and every collective on them takes
 * the zero-copy path. The Python package loads them by name (weft.torch.mem_pool,
 * weft.torch.use_weft_allocator; docs/python.md); a C++ program can pass them to
 * torch::cuda::CUDAPluggableAllocator::createCustomAllocator just as well.
 *
 * The two allocator functions have no communicator argument (PyTorch passes none): they use the
 * one set by weft_torch_bind, process-wide.
 *
 * Thread safety: every function may be called from any thread. Allocations and frees on
 * different threads run concurrently (a free waiting for the device holds up no allocation);
 * binding waits for those in flight on other threads.
 *
 * Fork (weft.h): in a forked child, weft_torch_bind of the parent's communicator, and an
 * allocation or free while it is bound, fail with WEFT_ERR_INVALID_ARGUMENT (the free's in
 * weft_last_error()) before any CUDA call.
 *
 * This header compiles alone, as C11 and as C++.
 */
#ifndef WEFT_TORCH_H
#define WEFT_TORCH_H

#include <sys/types.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Make comm the communicator that weft_torch_alloc and weft_torch_free use, in this process;
 * NULL unbinds. comm must use the CUDA backend (PyTorch hands the memory out as device memory).
 * Unbind before destroying the communicator; it frees all its memory, including what PyTorch
 * still holds, and frees PyTorch makes after the unbind do nothing. Binding a communicator other
 * than the bound one is refused while PyTorch still holds memory that weft_torch_alloc handed out
 * under an earlier binding: a later communicator may map the same addresses, and those frees
 * would release its memory. Both refusals are WEFT_ERR_INVALID_ARGUMENT. Binding (or unbinding)
 * first waits for the allocations and frees in flight on other threads, up to the bound
 * communicator's timeout: WEFT_ERR_TIMEOUT after it. On an error the binding is left as it was. */
WEFT_API weft_status_t weft_torch_bind(weft_comm_t comm);

/* PyTorch's alloc_fn: size bytes of device memory from weft_malloc on the bound communicator,
 * registered with every peer in the background. device must be the communicator's device (the
 * memory lives there); stream is not used (weft_malloc is not stream-ordered). Returns NULL, with
 * the reason in weft_last_error(), when no communicator is bound, size is negative, device is
 * another one, or weft_malloc fails (PyTorch then raises its out-of-memory error). size 0
 * returns NULL without an error. */
WEFT_API void *weft_torch_alloc(ssize_t size, int device, void *stream);

/* PyTorch's free_fn: waits for all work queued on the device (as cudaFree does: weft_free
 * requires that no queued operation still uses the buffer, and PyTorch frees without waiting),
 * then weft_free on the bound communicator. ptr must come from weft_torch_alloc under the same
 * binding. NULL, or no communicator bound (the memory went with its communicator), does nothing.
 * A failure is recorded in weft_last_error() and logged, as nothing can be returned; the memory
 * is then released with the communicator. */
WEFT_API void weft_torch_free(void *ptr, ssize_t size, int device, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TORCH_H */
