// Real kernel, kept verbatim as test data: github.com/karpathy/llm.c at commit
// f1e2ace651495b74ae22d45d1723443fd00ecd3a, dev/cuda/crossentropy_forward.cu lines 38-49.
// Licence: MIT, Copyright (c) 2024 Andrej Karpathy.
__global__ void crossentropy_forward_kernel1(float* losses,
                            const float* probs, const int* targets,
                            int B, int T, int V) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < B * T) {
        int b = i / T;
        int t = i % T;
        const float* probs_bt = probs + b * T * V + t * V;
        int ix = targets[b * T + t];
        losses[b * T + t] = -logf(probs_bt[ix]);
    }
}
