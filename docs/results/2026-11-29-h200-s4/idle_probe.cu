// idle_probe.cu - what does an operation cost right after an idle gap, with no weft involved?
//   idle_probe GAP_MS REPS
// ops: cpu (fixed arithmetic loop), launch (empty kernel launch returns), kernel (launch+sync)
// gap kinds: sleep (nanosleep), spin (host busy-waits), busy (GPU kernel runs, host syncs)
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

static unsigned long long now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000ull + ts.tv_nsec;
}
__global__ void empty_kernel() {}
__global__ void busy_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
static cudaStream_t s;
static char *d_a, *d_b;
static size_t copy_bytes = 65536;
__global__ void copy_kernel(int4 *dst, const int4 *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
static volatile double sink;
static unsigned long long op(int kind, unsigned long long *launch_ns)
{
    unsigned long long t0 = now_ns();
    if (kind == 0) {
        double x = 1.0;
        for (int i = 0; i < 20000; i++)
            x = x * 1.0000001 + 1e-9;
        sink = x;
    } else if (kind >= 2) {
        empty_kernel<<<1, 32, 0, s>>>();
        cudaStreamSynchronize(s);
        t0 = now_ns();
        if (kind == 2)
            cudaMemcpyAsync(d_b, d_a, copy_bytes, cudaMemcpyDeviceToDevice, s);
        else
            copy_kernel<<<32, 512, 0, s>>>((int4 *)d_b, (const int4 *)d_a, copy_bytes / 16);
        if (launch_ns)
            *launch_ns = now_ns() - t0;
        cudaStreamSynchronize(s);
    } else {
        empty_kernel<<<1, 32, 0, s>>>();
        if (launch_ns)
            *launch_ns = now_ns() - t0;
        cudaStreamSynchronize(s);
    }
    return now_ns() - t0;
}
static void gap(int kind, int ms)
{
    unsigned long long ns = (unsigned long long)ms * 1000000ull;
    if (kind == 0) {
        timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    } else if (kind == 1) {
        unsigned long long t0 = now_ns();
        while (now_ns() - t0 < ns)
            ;
    } else {
        busy_kernel<<<1, 32, 0, s>>>(ns);
        cudaStreamSynchronize(s);
    }
}
static double med(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
int main(int argc, char **argv)
{
    int gap_ms = argc > 1 ? atoi(argv[1]) : 10, reps = argc > 2 ? atoi(argv[2]) : 20;
    prctl(PR_SET_TIMERSLACK, 1UL);
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const char *gaps[] = {"sleep", "spin", "busy"};
    const char *ops[] = {"cpu", "kernel", "memcpy", "copyk"};
    if (argc > 3)
        copy_bytes = strtoull(argv[3], NULL, 0);
    cudaMalloc(&d_a, copy_bytes);
    cudaMalloc(&d_b, copy_bytes);
    for (int o = 1; o < 4; o++) {
        for (int i = 0; i < 100; i++)
            op(o, NULL);
        std::vector<double> b2b, b2bl;
        for (int i = 0; i < 300; i++) {
            unsigned long long l = 0;
            b2b.push_back(op(o, &l) / 1e3);
            b2bl.push_back(l / 1e3);
        }
        for (int g = 0; g < 3; g++) {
            std::vector<double> k[6], kl;
            for (int r = 0; r < reps; r++) {
                gap(g, gap_ms);
                for (int j = 0; j < 6; j++) {
                    unsigned long long l = 0;
                    k[j].push_back(op(o, j == 0 ? &l : NULL) / 1e3);
                    if (j == 0)
                        kl.push_back(l / 1e3);
                }
            }
            printf("pid %d bytes %zu op %-6s gap %-5s %3d ms: b2b %7.1f (launch %5.1f) | after gap: 1st %7.1f "
                   "(launch %5.1f) 2nd %7.1f 3rd %7.1f 6th %7.1f us\n",
                   (int)getpid(), copy_bytes, ops[o], gaps[g], gap_ms, med(b2b), med(b2bl), med(k[0]), med(kl),
                   med(k[1]), med(k[2]), med(k[5]));
            fflush(stdout);
        }
    }
    return 0;
}
