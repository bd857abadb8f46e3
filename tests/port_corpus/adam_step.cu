// One Adam optimizer step with bias correction, elementwise over the parameters.
__global__ void adam_step(float* p, const float* g, float* m, float* v, float lr, float b1,
                          float b2, float eps, int step, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i];
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    float mhat = m[i] / (1.0f - powf(b1, (float)step));
    float vhat = v[i] / (1.0f - powf(b2, (float)step));
    p[i] -= lr * mhat / (sqrtf(vhat) + eps);
}
