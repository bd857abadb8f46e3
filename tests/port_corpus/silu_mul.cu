// SwiGLU gate: out = silu(gate) * up, the MLP activation of LLaMA-style models.
__global__ void silu_mul(const float* gate, const float* up, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}
