// Count nonzeros and track the largest index holding one (atomicMax on int).
__global__ void nnz_stats(const float* x, unsigned int* nnz, int* last, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] != 0.0f) {
        atomicAdd(nnz, 1u);
        atomicMax(last, i);
    }
}
