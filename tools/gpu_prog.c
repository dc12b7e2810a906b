/*
 * gpu_prog.c - error exits and the communicator of the GPU benchmark programs (see gpu_prog.h).
 */
#include "gpu_prog.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *gpu_prog_name = "weft";
int gpu_prog_rank = -1;

void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: rank %d: ", gpu_prog_name, gpu_prog_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void weft_ok(weft_status_t st, const char *what)
{
    if (st != WEFT_SUCCESS)
        fatal("%s: %s: %s", what, weft_status_string(st), weft_last_error());
}

void cuda_ok(cudaError_t err, const char *what)
{
    if (err != cudaSuccess)
        fatal("%s: %s: %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

void require_device(void)
{
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err == cudaSuccess && ndev >= 1)
        return;
    /* Only a machine without a GPU (or driver) skips; any other failure is one. */
    if (err != cudaSuccess && err != cudaErrorNoDevice && err != cudaErrorInsufficientDriver)
        cuda_ok(err, "cudaGetDeviceCount");
    printf("SKIP: no CUDA device (%s)\n",
           err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none");
    exit(GPU_PROG_SKIP);
}

weft_comm_t gpu_prog_comm_open(weft_registration_t reg)
{
    weft_config_t cfg;
    weft_config_default(&cfg);
    cfg.backend = WEFT_BACKEND_CUDA;
    cfg.registration = reg;
    weft_comm_t comm;
    weft_ok(weft_comm_init(&comm, &cfg), "weft_comm_init");
    gpu_prog_rank = weft_comm_rank(comm);
    return comm;
}
