/*
 * gpu_busy.cu - a kernel that keeps the GPU busy for a given time: the stand-in for a model's
 * computation between two steps of a benchmark (first-use's busy gaps). See gpu_busy.h.
 */
#include <cuda_runtime.h>

#include "gpu_busy.h"

static __device__ __forceinline__ unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* One warp spins on the global timer (nanoseconds, shared by every SM) until ns have passed. */
__global__ void gpu_busy_kernel(unsigned long long ns)
{
    unsigned long long t0 = global_ns();
    while (global_ns() - t0 < ns)
        __nanosleep(1000);
}

extern "C" cudaError_t gpu_busy(cudaStream_t stream, uint64_t ns)
{
    gpu_busy_kernel<<<1, 32, 0, stream>>>((unsigned long long)ns);
    return cudaGetLastError();
}
