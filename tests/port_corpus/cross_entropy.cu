// Per-row cross-entropy loss from logits and integer targets (log-sum-exp, one thread per row).
__global__ void cross_entropy(const float* logits, const int* target, float* loss, int rows, int classes) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* z = logits + r * classes;
    float m = z[0];
    for (int c = 1; c < classes; ++c) m = fmaxf(m, z[c]);
    float s = 0.0f;
    for (int c = 0; c < classes; ++c) s += expf(z[c] - m);
    loss[r] = logf(s) + m - z[target[r]];
}
