/*
 * gpu_prog.h - what the GPU benchmark programs (first-use, launch-cost, moe-bench, reg-cost,
 * weft-calibrate) share: error exits (a failing weft or CUDA call prints "<program>: rank <r>:
 * <what>: <why>" and ends the process with status 1, weftrun then ends the job), the skip
 * without a device and the opening of the communicator. Their plain-C helpers (medians, JSON,
 * option values) are in bench_util.h.
 */
#ifndef WEFT_TOOLS_GPU_PROG_H
#define WEFT_TOOLS_GPU_PROG_H

#include <cuda_runtime_api.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exit status of a program that cannot run here (no CUDA device): CTest's "skipped". */
#define GPU_PROG_SKIP 77

/* Set by each program: its name, and its rank once known (-1 before). */
extern const char *gpu_prog_name;
extern int gpu_prog_rank;

void fatal(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* fatal unless st is WEFT_SUCCESS / err is cudaSuccess; what names the call. */
void weft_ok(weft_status_t st, const char *what);
void cuda_ok(cudaError_t err, const char *what);
/* Without a CUDA device or driver, print "SKIP: no CUDA device (<reason>)" and exit with
 * GPU_PROG_SKIP; on any other error of cudaGetDeviceCount fail (fatal); otherwise return. */
void require_device(void);
/* Open this rank's communicator on the CUDA backend with registration mode reg (the rest as
 * weft_config_default has it: ranks from weftrun) and set gpu_prog_rank; fatal on failure. On
 * return the rank's device is current on the calling thread. */
weft_comm_t gpu_prog_comm_open(weft_registration_t reg);

#ifdef __cplusplus
}
#endif

#endif /* WEFT_TOOLS_GPU_PROG_H */
