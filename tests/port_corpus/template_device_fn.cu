// A templated device helper called with explicit arguments from a plain kernel.
template <typename T>
__device__ T clamp_to(T v, T lo, T hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

__global__ void clamp_both(const float* x, float* xf, const int* k, int* ki, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        xf[i] = clamp_to<float>(x[i], -1.0f, 1.0f);
        ki[i] = clamp_to<int>(k[i], -10, 10);
    }
}
