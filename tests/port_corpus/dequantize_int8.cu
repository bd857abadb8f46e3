#include <cstdint>
// Per-row int8 dequantization: y = q * scale[row], with static_cast spelled out.
__global__ void dequant_rows(const int8_t* q, const float* scale, float* y, int cols, int total) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total) {
        int row = i / cols;
        y[i] = static_cast<float>(q[i]) * scale[row];
    }
}
