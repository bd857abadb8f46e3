// HIP C++ (includes HIP's runtime header): meant for AMD targets only
#include <hip/hip_runtime.h>

extern "C" __global__ void twice(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
