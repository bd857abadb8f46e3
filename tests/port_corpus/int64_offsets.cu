#include <stdint.h>
// Gather with 64-bit offsets computed from 32-bit coordinates: row * pitch overflows int32
// for large images, so the product is formed in int64_t.
__global__ void gather_pitched(const float* img, const int32_t* rows, const int32_t* cols,
                               float* out, int64_t pitch, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int64_t off = (int64_t)rows[i] * pitch + cols[i];
        out[i] = img[off];
    }
}
