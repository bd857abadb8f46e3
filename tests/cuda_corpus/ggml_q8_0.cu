// ggml's q8_0 quantization (ggml-common.h's block layout, in the style of ggml-cuda's convert.cu
// and quantize.cu; written for accel's tests): blocks of 32 int8 quants sharing one half scale.
#include <cuda_fp16.h>
#include <stdint.h>

#define QK8_0 32
typedef half ggml_half;
typedef struct {
    ggml_half d;       // delta
    int8_t qs[QK8_0];  // quants
} block_q8_0;
static_assert(sizeof(block_q8_0) == sizeof(ggml_half) + QK8_0, "wrong q8_0 block size/padding");

// one thread per block: the scale maps the largest magnitude to 127
__global__ void quantize_q8_0(const float * __restrict__ x, block_q8_0 * __restrict__ y, float * __restrict__ scales, const int nb) {
    const int ib = blockIdx.x*blockDim.x + threadIdx.x;
    if (ib >= nb) {
        return;
    }
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) {
        amax = fmaxf(amax, fabsf(x[ib*QK8_0 + j]));
    }
    const float d = amax / 127.0f;
    const float id = d ? 1.0f/d : 0.0f;
    y[ib].d = __float2half(d);
    scales[ib] = __half2float(y[ib].d);  // the scale as stored
    for (int j = 0; j < QK8_0; ++j) {
        y[ib].qs[j] = roundf(x[ib*QK8_0 + j]*id);
    }
}

typedef float dfloat;
typedef float2 dfloat2;
typedef void (*dequantize_kernel_t)(const void * vx, const int64_t ib, const int iqs, dfloat2 & v);

// a pair of quants scaled (CUDA converts the half member to float)
static __device__ __forceinline__ void dequantize_q8_0(const void * vx, const int64_t ib, const int iqs, dfloat2 & v) {
    const block_q8_0 * x = (const block_q8_0 *) vx;
    const dfloat d = x[ib].d;
    v.x = x[ib].qs[iqs + 0]*d;
    v.y = x[ib].qs[iqs + 1]*d;
}

// two values per thread; the block format is a template parameter, as in ggml
template <int qk, dequantize_kernel_t dequantize_kernel>
static __global__ void dequantize_block(const void * __restrict__ vx, float * __restrict__ y, const int64_t k) {
    const int64_t i = (int64_t)2*(blockDim.x*blockIdx.x + threadIdx.x);
    if (i >= k) {
        return;
    }
    const int64_t ib = i/qk;
    const int iqs = i%qk;
    dfloat2 v;
    dequantize_kernel(vx, ib, iqs, v);
    y[i + 0] = v.x;
    y[i + 1] = v.y;
}
template __global__ void dequantize_block<QK8_0, dequantize_q8_0>(const void * __restrict__, float * __restrict__, const int64_t);
