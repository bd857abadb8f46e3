// y = a * x + y with a grid-stride loop: any grid size covers any n.
#include <cuda_runtime.h>

extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x,
                                 float* __restrict__ y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}
