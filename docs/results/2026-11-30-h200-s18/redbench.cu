/* Reduction throughput of weft_dev_reduce (generic, launch bounds 256 x 4) and
 * weft_dev_reduce_typed, SUM against MAX, float32 and bfloat16, two sources of 256 MiB:
 * both local, or the second on the peer GPU (NVLink loads, as a two-GPU all-reduce reads).
 * Also what fmaxf/fminf give for signed zeros and two NaNs on this GPU. */
#include "exec/reduce_cuda.cuh"

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

__global__ __launch_bounds__(256, 4) void kgen(void *dst, const void *s0, const void *s1,
                                               size_t count, int dtype, int op)
{
    const void *srcs[2] = {s0, s1};
    weft_dev_reduce(dst, srcs, 2, count, dtype, op, 1, blockIdx.x * (size_t)blockDim.x + threadIdx.x,
                    (size_t)gridDim.x * blockDim.x);
}

template <int Dt, int Op>
__global__ void ktyped(void *dst, const void *s0, const void *s1, size_t count)
{
    const void *srcs[2] = {s0, s1};
    weft_dev_reduce_typed<Dt, Op>(dst, srcs, 2, count, 1,
                                  blockIdx.x * (size_t)blockDim.x + threadIdx.x,
                                  (size_t)gridDim.x * blockDim.x);
}

__global__ void ksigns(uint32_t *out, float nz, float pz, float n1, float n2)
{
    float r[6] = {fmaxf(nz, pz), fmaxf(pz, nz), fminf(nz, pz), fminf(pz, nz), fmaxf(n1, n2),
                  fmaxf(n2, n1)};
    for (int i = 0; i < 6; i++)
        out[i] = __float_as_uint(r[i]);
}

static void launch(int typed, int grid, void *d, const void *a, const void *b, size_t bytes,
                   int dt, int op)
{
    size_t count = bytes / (dt == WEFT_FLOAT32 ? 4 : 2);
    if (!typed) {
        kgen<<<grid, 256>>>(d, a, b, count, dt, op);
    } else if (dt == WEFT_FLOAT32) {
        if (op == WEFT_SUM)
            ktyped<WEFT_FLOAT32, WEFT_SUM><<<grid, 256>>>(d, a, b, count);
        else
            ktyped<WEFT_FLOAT32, WEFT_MAX><<<grid, 256>>>(d, a, b, count);
    } else {
        if (op == WEFT_SUM)
            ktyped<WEFT_BFLOAT16, WEFT_SUM><<<grid, 256>>>(d, a, b, count);
        else
            ktyped<WEFT_BFLOAT16, WEFT_MAX><<<grid, 256>>>(d, a, b, count);
    }
}

int main(void)
{
    const size_t bytes = (size_t)256 << 20;
    int ndev = 0;
    cudaGetDeviceCount(&ndev);
    void *d, *a, *b, *remote = NULL;
    cudaSetDevice(0);
    cudaMalloc(&d, bytes);
    cudaMalloc(&a, bytes);
    cudaMalloc(&b, bytes);
    cudaMemset(a, 0x3c, bytes);
    cudaMemset(b, 0x3d, bytes);
    if (ndev > 1) {
        cudaDeviceEnablePeerAccess(1, 0);
        cudaSetDevice(1);
        cudaMalloc(&remote, bytes);
        cudaMemset(remote, 0x3d, bytes);
        cudaDeviceSynchronize();
        cudaSetDevice(0);
    }
    uint32_t *o, h[6];
    cudaMalloc(&o, sizeof h);
    uint32_t nzb = 0x80000000u, pzb = 0, n1b = 0x7fc00001u, n2b = 0xffc00002u;
    float nz, pz, n1, n2;
    memcpy(&nz, &nzb, 4), memcpy(&pz, &pzb, 4), memcpy(&n1, &n1b, 4), memcpy(&n2, &n2b, 4);
    ksigns<<<1, 1>>>(o, nz, pz, n1, n2);
    cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost);
    printf("fmaxf(-0,+0) %08x fmaxf(+0,-0) %08x fminf(-0,+0) %08x fminf(+0,-0) %08x "
           "fmaxf(nan1,nan2) %08x fmaxf(nan2,nan1) %08x\n", h[0], h[1], h[2], h[3], h[4], h[5]);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int grids[2] = {32, 132 * 4};
    printf("%-7s %-6s %-5s %-5s %5s %9s\n", "src1", "code", "dtype", "op", "grid", "GB/s");
    for (int where = 0; where < (remote ? 2 : 1); where++) {
        const void *s1 = where ? remote : b;
        for (int typed = 0; typed < 2; typed++)
            for (int g = 0; g < 2; g++)
                for (int dt = 0; dt < 2; dt++)
                    for (int op = 0; op < 2; op++) {
                        int dtype = dt ? WEFT_BFLOAT16 : WEFT_FLOAT32;
                        int redop = op ? WEFT_MAX : WEFT_SUM;
                        launch(typed, grids[g], d, a, s1, bytes, dtype, redop);
                        cudaEventRecord(e0);
                        for (int i = 0; i < 10; i++)
                            launch(typed, grids[g], d, a, s1, bytes, dtype, redop);
                        cudaEventRecord(e1);
                        cudaEventSynchronize(e1);
                        float ms = 0;
                        cudaEventElapsedTime(&ms, e0, e1);
                        printf("%-7s %-6s %-5s %-5s %5d %9.1f\n", where ? "peer" : "local",
                               typed ? "typed" : "generic", dt ? "bf16" : "f32",
                               op ? "max" : "sum", grids[g], 3.0 * bytes * 10 / (ms * 1e6));
                    }
    }
    cudaError_t err = cudaGetLastError();
    printf("last error: %s\n", cudaGetErrorString(err));
    return 0;
}
