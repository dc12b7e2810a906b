// ag_probe: HBM traffic of all-gather shapes on one GPU, n simulated ranks in one kernel.
// pull: rank r copies in_i -> out_r[i] for every i (2 n s bytes per rank)
// push: rank b loads in_b once and stores it to out_r[b] for every r ((n+1) s per rank)
// staged: in_b -> scratch_b, then pull from scratch (own block from in)
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
#define CK(x) do{cudaError_t e=(x); if(e!=cudaSuccess){printf("%s:%d %s\n",__FILE__,__LINE__,cudaGetErrorString(e)); return 1;}}while(0)
constexpr int N = 4, B = 32, T = 512;
struct P { uint4 *in[N]; uint4 *out[N]; uint4 *scr[N]; size_t s16; int inplace; };

__global__ void __launch_bounds__(T) pull(P p, int from_scratch) {
  int r = blockIdx.x / B, b = blockIdx.x % B;
  size_t tid = (size_t)b * T + threadIdx.x, nt = (size_t)B * T;
  for (int k = 0; k < N; k++) {
    int i = (r + k) % N;
    if (p.inplace && i == r) continue;
    const uint4 *src = (from_scratch && i != r) ? p.scr[i] : p.in[i];
    uint4 *dst = p.out[r] + (size_t)i * p.s16;
    for (size_t u = tid; u < p.s16; u += nt) dst[u] = src[u];
  }
}
__global__ void __launch_bounds__(T) push(P p) {
  int r = blockIdx.x / B, b = blockIdx.x % B;
  size_t tid = (size_t)b * T + threadIdx.x, nt = (size_t)B * T;
  for (size_t u = tid; u < p.s16; u += nt) {
    uint4 v = p.in[r][u];
#pragma unroll
    for (int k = 0; k < N; k++) {
      int d = (r + k) % N;
      if (p.inplace && d == r) continue;
      p.out[d][(size_t)r * p.s16 + u] = v;
    }
  }
}
__global__ void __launch_bounds__(T) stage(P p) {
  int r = blockIdx.x / B, b = blockIdx.x % B;
  size_t tid = (size_t)b * T + threadIdx.x, nt = (size_t)B * T;
  for (size_t u = tid; u < p.s16; u += nt) p.scr[r][u] = p.in[r][u];
}
int main() {
  size_t outs[] = {8u<<20, 16u<<20, 64u<<20, 128u<<20};
  printf("%-10s %-4s %10s %10s %10s %8s %8s\n","out/rank","ip","pull_us","push_us","staged_us","stg/pull","stg/push");
  for (size_t out : outs) for (int ip = 0; ip < 2; ip++) {
    P p; p.s16 = out / N / 16; p.inplace = ip;
    for (int r = 0; r < N; r++) {
      CK(cudaMalloc(&p.out[r], out)); CK(cudaMalloc(&p.scr[r], out / N));
      CK(cudaMalloc(&p.in[r], out / N)); CK(cudaMemset(p.in[r], r + 1, out / N));
      if (ip) { CK(cudaFree(p.in[r])); p.in[r] = p.out[r] + (size_t)r * p.s16; CK(cudaMemset(p.in[r], r+1, out/N)); }
    }
    cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
    float t[3]; const int it = 50;
    for (int m = 0; m < 3; m++) {
      for (int w = 0; w < 2; w++) {  // warm + timed
        cudaEventRecord(a);
        for (int i = 0; i < it; i++) {
          if (m == 0) pull<<<N*B, T>>>(p, 0);
          else if (m == 1) push<<<N*B, T>>>(p);
          else { stage<<<N*B, T>>>(p); pull<<<N*B, T>>>(p, 1); }
        }
        cudaEventRecord(b); CK(cudaEventSynchronize(b));
        cudaEventElapsedTime(&t[m], a, b); t[m] = t[m] * 1000 / it;
      }
    }
    // check push result
    unsigned char h;
    for (int r = 0; r < N; r++) for (int i = 0; i < N; i++) {
      CK(cudaMemcpy(&h, (char*)(p.out[r] + (size_t)i * p.s16) + 12345, 1, cudaMemcpyDeviceToHost));
      if (h != i + 1) { printf("BAD r%d i%d %d\n", r, i, h); return 1; }
    }
    printf("%-10zu %-4d %10.1f %10.1f %10.1f %8.2f %8.2f\n", out >> 20, ip, t[0], t[1], t[2], t[2]/t[0], t[2]/t[1]);
    for (int r = 0; r < N; r++) { cudaFree(p.out[r]); cudaFree(p.scr[r]); if (!ip) cudaFree(p.in[r]); }
  }
  return 0;
}
