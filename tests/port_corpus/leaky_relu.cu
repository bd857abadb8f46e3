// Leaky ReLU in place, with the slope as an argument.
__global__ void leaky_relu(float* x, float slope, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        x[i] = v > 0.0f ? v : v * slope;
    }
}
