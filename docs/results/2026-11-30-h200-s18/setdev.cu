/* Cost of the device guard's runtime calls: cudaGetDevice, cudaSetDevice to the current device,
 * both, a switch to another device and back, and an empty kernel launch for scale. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__global__ void empty_kernel(void) {}

int main(void)
{
    const int n = 1000000;
    int ndev = 0, d = 0;
    cudaGetDeviceCount(&ndev);
    cudaSetDevice(0);
    cudaFree(0);
    double t0 = now_ns();
    for (int i = 0; i < n; i++)
        cudaGetDevice(&d);
    double t1 = now_ns();
    for (int i = 0; i < n; i++)
        cudaSetDevice(0);
    double t2 = now_ns();
    for (int i = 0; i < n; i++) {
        cudaGetDevice(&d);
        cudaSetDevice(0);
    }
    double t3 = now_ns();
    printf("cudaGetDevice %.1f ns\ncudaSetDevice(current) %.1f ns\nget+set %.1f ns\n",
           (t1 - t0) / n, (t2 - t1) / n, (t3 - t2) / n);
    if (ndev > 1) {
        cudaSetDevice(1);
        cudaFree(0);
        cudaSetDevice(0);
        double t4 = now_ns();
        for (int i = 0; i < n / 10; i++) {
            cudaSetDevice(1);
            cudaSetDevice(0);
        }
        printf("switch to device 1 and back %.1f ns\n", (now_ns() - t4) / (n / 10));
    }
    cudaStream_t s;
    cudaStreamCreate(&s);
    for (int i = 0; i < 1000; i++)
        empty_kernel<<<1, 1, 0, s>>>();
    cudaStreamSynchronize(s);
    double t5 = now_ns();
    for (int i = 0; i < 10000; i++)
        empty_kernel<<<1, 1, 0, s>>>();
    double t6 = now_ns();
    cudaStreamSynchronize(s);
    printf("empty kernel launch %.1f ns\n", (t6 - t5) / 10000);
    return 0;
}
