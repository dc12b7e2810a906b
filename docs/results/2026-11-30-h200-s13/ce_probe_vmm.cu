// ce_probe_vmm.cu - the copies of ce_probe.cu on three kinds of buffer: cudaMalloc, one
// cuMemCreate handle per buffer (POSIX fd handle type, as weft), and eight 64 MiB handles
// mapped back to back (weft's chunks). Both GPUs get read-write access to every buffer.
//   nvcc -O2 -arch=sm_90 -o ce_probe_vmm ce_probe_vmm.cu -lcuda && ./ce_probe_vmm
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>
#include <vector>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)
#define DK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { \
    printf("%s:%d CUresult %d\n", __FILE__, __LINE__, (int)r); exit(1); } } while (0)

static const size_t BYTES = 512ull << 20;
static char *A[2], *B[2], *C[2], *D[2];
static cudaStream_t S[2][2];

static char *vmm_alloc(int dev, int pieces)
{
    size_t piece = BYTES / pieces;
    CUdeviceptr va;
    DK(cuMemAddressReserve(&va, BYTES, 2ull << 20, 0, 0));
    for (int i = 0; i < pieces; i++) {
        CUmemAllocationProp prop = {};
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        CUmemGenericAllocationHandle h;
        DK(cuMemCreate(&h, piece, &prop, 0));
        DK(cuMemMap(va + i * piece, piece, 0, h, 0));
        DK(cuMemRelease(h));
    }
    CUmemAccessDesc acc[2] = {};
    for (int g = 0; g < 2; g++) {
        acc[g].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        acc[g].location.id = g;
        acc[g].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    DK(cuMemSetAccess(va, BYTES, acc, 2));
    return (char *)va;
}

static char *alloc(int kind, int dev)
{
    if (kind == 0) {
        char *p;
        CK(cudaMalloc(&p, BYTES));
        return p;
    }
    return vmm_alloc(dev, kind == 1 ? 1 : 8);
}

enum { PULL = 1, PUSH = 2, LOCAL_SAME = 4, LOCAL_SIDE = 8 };

static void enqueue(int g, int what)
{
    int peer = 1 - g;
    CK(cudaSetDevice(g));
    if (what & PULL)
        CK(cudaMemcpyAsync(B[g], A[peer], BYTES, cudaMemcpyDefault, S[g][0]));
    if (what & PUSH)
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
    DK(cuInit(0));
    for (int g = 0; g < 2; g++) {
        CK(cudaSetDevice(g));
        CK(cudaDeviceEnablePeerAccess(1 - g, 0));
        for (int s = 0; s < 2; s++)
            CK(cudaStreamCreateWithFlags(&S[g][s], cudaStreamNonBlocking));
    }
    const char *kinds[] = {"cudaMalloc", "VMM, one handle", "VMM, 8 x 64 MiB"};
    struct { const char *name; int gpus, what; } cases[] = {
        {"local copy only (GPU 0)", 1, LOCAL_SAME},
        {"pull, both GPUs at once", 2, PULL},
        {"push, both GPUs at once", 2, PUSH},
        {"pull + local, one stream", 2, PULL | LOCAL_SAME},
        {"pull + local, two streams", 2, PULL | LOCAL_SIDE},
        {"push + local, one stream", 2, PUSH | LOCAL_SAME},
        {"push + local, two streams", 2, PUSH | LOCAL_SIDE},
    };
    printf("%-18s %-28s %10s\n", "512 MiB per copy", "case", "us");
    for (int k = 0; k < 3; k++) {
        for (int g = 0; g < 2; g++) {
            CK(cudaSetDevice(g));
            A[g] = alloc(k, g); B[g] = alloc(k, g); C[g] = alloc(k, g); D[g] = alloc(k, g);
            CK(cudaMemset(A[g], 1, BYTES)); CK(cudaMemset(C[g], 2, BYTES));
            CK(cudaDeviceSynchronize());
        }
        for (auto &c : cases)
            printf("%-18s %-28s %10.1f\n", kinds[k], c.name, run(c.gpus, c.what));
        // Buffers are not freed: the process ends after three kinds (8 GiB per GPU).
    }
    return 0;
}
