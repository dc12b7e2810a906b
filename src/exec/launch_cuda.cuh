/*
 * launch_cuda.cuh - launching a kernel and reporting that launch's own status. Host-side CUDA
 * C++, included by the backend's .cu files.
 *
 * cudaGetLastError after kernel<<<...>>> returns the last error of any call on the thread to the
 * same CUDA runtime, so an earlier failure that its caller handled and never cleared would read
 * as a failed launch, and weft would give up a communicator whose kernel was queued fine (and
 * clear that error). libweft links a runtime of its own (cudart_static) and makes no call that
 * fails expectedly, so this cannot happen today; cudaLaunchKernelEx returns the launch's own
 * status whatever the linking.
 */
#ifndef WEFT_EXEC_LAUNCH_CUDA_CUH
#define WEFT_EXEC_LAUNCH_CUDA_CUH

#include <cuda_runtime.h>

#include <utility>

extern "C" {
#include "util/log.h"
}

/* kernel<<<nblocks, threads, 0, stream>>>(args...); WEFT_ERR_CUDA naming what if it fails. */
template <typename... Exp, typename... Act>
static weft_status_t weft_cuda_launch_kernel(const char *what, void (*kernel)(Exp...), int nblocks,
                                             int threads, cudaStream_t stream, Act &&...args)
{
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)nblocks);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.stream = stream;
    cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Act>(args)...);
    if (err != cudaSuccess)
        return weft_error(WEFT_ERR_CUDA, "%s: kernel launch (%d blocks): %s: %s", what, nblocks,
                          cudaGetErrorName(err), cudaGetErrorString(err));
    return WEFT_SUCCESS;
}

#endif /* WEFT_EXEC_LAUNCH_CUDA_CUH */
