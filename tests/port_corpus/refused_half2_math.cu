// REFUSED: packed half2 arithmetic (needs cl_khr_fp16).
#include <cuda_fp16.h>
__global__ void add_h2(const __half2* a, const __half2* b, __half2* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = __hadd2(a[i], b[i]);
}
