// Polynomial evaluation (Horner) with coefficients in constant memory.
__constant__ float coeffs[5] = {0.5f, -1.25f, 0.75f, 2.0f, -0.125f};

__global__ void poly_eval(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        float acc = coeffs[4];
        for (int k = 3; k >= 0; --k) acc = acc * v + coeffs[k];
        y[i] = acc;
    }
}
