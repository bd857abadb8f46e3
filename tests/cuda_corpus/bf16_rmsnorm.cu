// bfloat16 in memory, float arithmetic: explicit conversions and C casts, a bit copy, pointers
// into bf16 rows (accel's own test kernel)
#include <cuda_bf16.h>
typedef __nv_bfloat16 floatX;

__global__ void rmsnorm_bf16(floatX* __restrict__ out, const floatX* __restrict__ inp,
                             const floatX* __restrict__ weight, int C, float eps) {
    __shared__ float red[256];
    const floatX* x = inp + blockIdx.x * C;
    float s = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float v = (float)x[i];
        s += v * v;
    }
    red[threadIdx.x] = s;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) red[threadIdx.x] += red[threadIdx.x + h];
        __syncthreads();
    }
    float r = 1.0f / sqrtf(red[0] / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        out[blockIdx.x * C + i] = __float2bfloat16((float)x[i] * r * __bfloat162float(weight[i]));
    }
}

__global__ void copy_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
