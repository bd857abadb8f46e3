// Scatter-add of float values into bins (a segment sum / histogram of weights) with float
// atomicAdd, which OpenCL 1.2 lacks: the translation loops on atomic_cmpxchg.
__global__ void scatter_add(const float* v, const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[idx[i]], v[i]);
}
