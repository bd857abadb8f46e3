// A histogram in a per-thread array written at run-time indices: it cannot live in registers,
// so every compiler puts it in private (stack / scratch) memory.
extern "C" __global__ void private_histogram(const int* idx, const float* w, float* out, int n) {
    float bins[64];
    for (int i = 0; i < 64; ++i) bins[i] = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) bins[idx[i] & 63] += w[i];
    float s = 0.0f;
    for (int i = 0; i < 64; ++i) s += bins[i] * (float)i;
    out[threadIdx.x] = s;
}
