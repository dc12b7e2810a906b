static __device__ __forceinline__ float mx_new(float a, float b)
{
    float r;
    asm("{\n\t.reg .pred p, q;\n\tsetp.gtu.f32 p, %2, %1;\n\tsetp.num.f32 q, %2, %2;\n\t"
        "and.pred p, p, q;\n\tselp.f32 %0, %2, %1, p;\n\t}" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
static __device__ __forceinline__ float mx_old(float a, float b)
{
    float r;
    asm("{\n\t.reg .pred p;\n\tsetp.gt.f32 p, %2, %1;\n\tselp.f32 %0, %2, %1, p;\n\t}" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__global__ void knew(float4 *d, const float4 *a, const float4 *b, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) { float4 x=a[i], y=b[i]; d[i]=make_float4(mx_new(x.x,y.x),mx_new(x.y,y.y),mx_new(x.z,y.z),mx_new(x.w,y.w)); } }
__global__ void kold(float4 *d, const float4 *a, const float4 *b, int n) { int i = blockIdx.x*blockDim.x+threadIdx.x; if (i<n) { float4 x=a[i], y=b[i]; d[i]=make_float4(mx_old(x.x,y.x),mx_old(x.y,y.y),mx_old(x.z,y.z),mx_old(x.w,y.w)); } }
