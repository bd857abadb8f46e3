// GELU, tanh approximation (as in GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#define SQRT_2_OVER_PI 0.7978845608f

__device__ __forceinline__ float gelu(float x) {
    float inner = SQRT_2_OVER_PI * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

__global__ void gelu_forward(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gelu(in[i]);
}
