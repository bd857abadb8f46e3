// REFUSED: float atomicAdd scatter (not in OpenCL 1.2 core).
__global__ void scatter_add(const float* v, const int* idx, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&out[idx[i]], v[i]);
}
