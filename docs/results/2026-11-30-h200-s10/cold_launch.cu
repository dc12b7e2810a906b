// Scratch experiment (session 10): host time of one kernel launch, steady (back to back, the
// stream synchronised between) against after an idle gap, for several launch APIs and parameter
// sizes. Question: does the driver API or a smaller parameter shrink what a launch pays after a
// gap (the ~2.3-3.1 us of 2026-11-29-h200-s5.md section 1)?
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <algorithm>
#include <vector>

template <int B> struct P {
    unsigned char b[B];
};
__device__ unsigned sink;
template <int B> __global__ void k(const __grid_constant__ P<B> p)
{
    if (threadIdx.x == 0 && blockIdx.x == 0 && p.b[B - 1] == 7)
        sink = 1;
}

static uint64_t now()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + t.tv_nsec;
}
#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                      \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

enum { RT_CHEVRON, RT_LAUNCHKERNEL, DRV_CULAUNCH, NMETHODS };
static const char *mname[] = {"<<<>>>", "cudaLaunchKernel", "cuLaunchKernel"};

static cudaStream_t s;
static P<1400> p1;
static P<7400> p7;
static CUfunction f1, f7;
static P<64> p64;
static int prewarm;

static void launch(int m, int big)
{
    if (m == RT_CHEVRON) {
        if (big)
            k<7400><<<4, 512, 0, s>>>(p7);
        else
            k<1400><<<4, 512, 0, s>>>(p1);
    } else if (m == RT_LAUNCHKERNEL) {
        void *args[1] = {big ? (void *)&p7 : (void *)&p1};
        CK(cudaLaunchKernel(big ? (const void *)k<7400> : (const void *)k<1400>, dim3(4), dim3(512),
                            args, 0, s));
    } else {
        void *args[1] = {big ? (void *)&p7 : (void *)&p1};
        if (cuLaunchKernel(big ? f7 : f1, 4, 1, 1, 512, 1, 1, 0, (CUstream)s, args, NULL) !=
            CUDA_SUCCESS) {
            printf("cuLaunchKernel failed\n");
            exit(1);
        }
    }
    CK(cudaGetLastError());
}

static void gap(int kind, int ms)
{
    if (ms == 0)
        return;
    if (kind == 1) {
        uint64_t t0 = now();
        while (now() - t0 < (uint64_t)ms * 1000000u)
            ;
        return;
    }
    timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 15;
    prewarm = argc > 2 ? atoi(argv[2]) : 0;
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&f1, (const void *)k<1400>));
    CK(cudaGetFuncBySymbol((cudaFunction_t *)&f7, (const void *)k<7400>));
    memset(&p1, 1, sizeof p1);
    memset(&p7, 1, sizeof p7);
    for (int i = 0; i < 200; i++)
        for (int m = 0; m < NMETHODS; m++)
            for (int b = 0; b < 2; b++) {
                launch(m, b);
                CK(cudaStreamSynchronize(s));
            }
    struct G {
        int kind, ms;
        const char *name;
    } gaps[] = {{0, 0, "steady"}, {0, 10, "sleep 10ms"}, {0, 100, "sleep 100ms"}, {1, 10, "spin 10ms"}};
    const int ng = 4;
    std::vector<double> t[ng][NMETHODS][2];
    srand(1);
    for (int r = 0; r < reps; r++) {
        int order[NMETHODS * 2];
        for (int i = 0; i < NMETHODS * 2; i++)
            order[i] = i;
        std::random_shuffle(order, order + NMETHODS * 2);
        for (int g = 0; g < ng; g++)
            for (int oi = 0; oi < NMETHODS * 2; oi++) {
                int m = order[oi] / 2, b = order[oi] % 2;
                // steady: 5 warm launches of the same kind first
                if (g == 0)
                    for (int w = 0; w < 5; w++) {
                        launch(m, b);
                        CK(cudaStreamSynchronize(s));
                    }
                gap(gaps[g].kind, gaps[g].ms);
                if (prewarm) { /* another kernel launched and synchronised first, as weft's barrier */
                    k<64><<<1, 32, 0, s>>>(p64);
                    CK(cudaStreamSynchronize(s));
                }
                uint64_t t0 = now();
                launch(m, b);
                uint64_t t1 = now();
                CK(cudaStreamSynchronize(s));
                t[g][m][b].push_back((t1 - t0) / 1e3);
            }
    }
    printf("# launch host time, us, median (p10-p90) of %d; param 1400 B / 7400 B; %s\n", reps,
           prewarm ? "after the gap another kernel launched + synchronised first" : "right after the gap");
    printf("%-18s", "method");
    for (int g = 0; g < ng; g++)
        printf(" | %-26s", gaps[g].name);
    printf("\n");
    for (int m = 0; m < NMETHODS; m++)
        for (int b = 0; b < 2; b++) {
            printf("%-16s%2s", mname[m], b ? " L" : " S");
            for (int g = 0; g < ng; g++) {
                std::vector<double> v = t[g][m][b];
                std::sort(v.begin(), v.end());
                size_t n = v.size();
                printf(" | %6.2f (%5.2f-%6.2f)      ", v[n / 2], v[n / 10], v[(9 * n) / 10]);
            }
            printf("\n");
        }
    return 0;
}
