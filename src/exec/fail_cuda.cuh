/*
 * fail_cuda.cuh - how a rank's kernels record a failure and learn of an earlier one (exec_cuda.h,
 * "Every wait polls a deadline"): the first status wins in the mapped host status word, and the
 * control block's failed flag, its device copy, tells every later kernel of the rank in stream
 * order (the collective kernel, its closing launches, the MoE data kernels) to post and move
 * nothing. Device code, included by the backend's .cu files.
 */
#ifndef WEFT_EXEC_FAIL_CUDA_CUH
#define WEFT_EXEC_FAIL_CUDA_CUH

#include <stdint.h>

#include "exec/exec_cuda.h"

/* Whether a kernel of this rank (ctl: its own control block) failed before. */
static __device__ __forceinline__ bool weft_dev_failed(const weft_cuda_ctl_t *ctl)
{
    return *(volatile const uint64_t *)&ctl->failed.v != 0;
}

/* Record status (non-zero) as this rank's failure: in the status word unless one is there, and
 * in ctl's failed flag, fenced at system scope so that the host and later kernels see it. */
static __device__ void weft_dev_fail(int32_t *status_word, weft_cuda_ctl_t *ctl, int32_t status)
{
    atomicCAS(status_word, 0, status);
    *(volatile uint64_t *)&ctl->failed.v = 1;
    __threadfence_system();
}

#endif /* WEFT_EXEC_FAIL_CUDA_CUH */
