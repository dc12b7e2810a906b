/*
 * gpu_busy.h - keep the GPU busy for a while, in stream order (bench/gpu_busy.cu).
 *
 * Thread safety: as any kernel launch on the caller's stream.
 */
#ifndef WEFT_BENCH_GPU_BUSY_H
#define WEFT_BENCH_GPU_BUSY_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueue on stream a one-warp kernel that runs for ns nanoseconds of the GPU's global timer;
 * returns the launch's error. */
cudaError_t gpu_busy(cudaStream_t stream, uint64_t ns);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_BENCH_GPU_BUSY_H */
