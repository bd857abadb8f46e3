// Symmetric int8 quantization with round-to-nearest-even and saturation.
__global__ void quantize_i8(const float* x, signed char* q, float inv_scale, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = rintf(x[i] * inv_scale);
        v = fminf(fmaxf(v, -127.0f), 127.0f);
        q[i] = (signed char)v;
    }
}
