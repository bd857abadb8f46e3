// Plain CUDA C++ (no accel header): NVRTC and hiprtc build it, the opencl target does not apply.
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
