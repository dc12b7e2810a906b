// ce_probe.cu - copy engines between two GPUs: does an all-to-all's time go to reading the
// peer's block over NVLink, or to the local block copied after it? One process, GPUs 0 and 1,
// peer access on; 512 MiB per copy; host wall time from the first enqueue to both devices
// idle, median of 9 (after 2 warm-ups).
//   nvcc -O2 -arch=sm_90 -o ce_probe ce_probe.cu && ./ce_probe
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cuda_runtime.h>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

static const size_t BYTES = 512ull << 20;
static char *A[2], *B[2], *C[2], *D[2];   // per GPU: remote source, remote target, local src, dst
static cudaStream_t S[2][2];

enum { PULL = 1, PUSH = 2, LOCAL_SAME = 4, LOCAL_SIDE = 8 };

static void enqueue(int g, int what)
{
    int peer = 1 - g;
    CK(cudaSetDevice(g));
    if (what & PULL)   // g reads the peer's block into its own memory (weft's all-to-all now)
        CK(cudaMemcpyAsync(B[g], A[peer], BYTES, cudaMemcpyDefault, S[g][0]));
    if (what & PUSH)   // g writes its block into the peer's memory (a store form)
        CK(cudaMemcpyAsync(B[peer], A[g], BYTES, cudaMemcpyDefault, S[g][0]));
    if (what & LOCAL_SAME)
        CK(cudaMemcpyAsync(D[g], C[g], BYTES, cudaMemcpyDefault, S[g][0]));
    if (what & LOCAL_SIDE)
        CK(cudaMemcpyAsync(D[g], C[g], BYTES, cudaMemcpyDefault, S[g][1]));
}

static double run(int gpus, int what)
{
    std::vector<double> t;
    for (int rep = 0; rep < 11; rep++) {
        for (int g = 0; g < 2; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); }
        auto t0 = std::chrono::steady_clock::now();
        for (int g = 0; g < gpus; g++)
            enqueue(g, what);
        for (int g = 0; g < gpus; g++) { CK(cudaSetDevice(g)); CK(cudaDeviceSynchronize()); }
        auto t1 = std::chrono::steady_clock::now();
        if (rep >= 2)
            t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main()
{
    for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceEnablePeerAccess(1 - g, 0));
        CK(cudaMalloc(&A[g], BYTES)); CK(cudaMalloc(&B[g], BYTES));
        CK(cudaMalloc(&C[g], BYTES)); CK(cudaMalloc(&D[g], BYTES));
        CK(cudaMemset(A[g], 1, BYTES)); CK(cudaMemset(C[g], 2, BYTES));
        for (int s = 0; s < 2; s++)
            CK(cudaStreamCreateWithFlags(&S[g][s], cudaStreamNonBlocking));
    }
    struct { const char *name; int gpus, what; } cases[] = {
        {"local copy only (GPU 0)", 1, LOCAL_SAME},
        {"pull, GPU 0 only", 1, PULL},
        {"push, GPU 0 only", 1, PUSH},
        {"pull, both GPUs at once", 2, PULL},
        {"push, both GPUs at once", 2, PUSH},
        {"pull + local, one stream, both GPUs", 2, PULL | LOCAL_SAME},
        {"pull + local, two streams, both GPUs", 2, PULL | LOCAL_SIDE},
        {"push + local, one stream, both GPUs", 2, PUSH | LOCAL_SAME},
        {"push + local, two streams, both GPUs", 2, PUSH | LOCAL_SIDE},
    };
    printf("%-40s %10s %12s\n", "512 MiB per copy", "us", "GB/s remote");
    for (auto &c : cases) {
        double us = run(c.gpus, c.what);
        printf("%-40s %10.1f %12.1f\n", c.name, us, BYTES / us / 1e3);
    }
    return 0;
}
