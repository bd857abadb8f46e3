// Rotary position embedding on [tokens, heads, head_dim], pairs (2i, 2i+1) rotated by
// pos * theta^(-2i/head_dim).
__global__ void rope(float* q, int heads, int head_dim, float theta) {
    int token = blockIdx.x;
    int h = blockIdx.y;
    int i = threadIdx.x;  // pair index
    if (i >= head_dim / 2) return;
    float freq = powf(theta, -2.0f * i / head_dim);
    float s, c;
    sincosf(token * freq, &s, &c);
    float* v = q + ((size_t)token * heads + h) * head_dim;
    float a = v[2 * i], b = v[2 * i + 1];
    v[2 * i] = a * c - b * s;
    v[2 * i + 1] = a * s + b * c;
}
