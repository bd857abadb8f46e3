// 64-bin histogram of unsigned keys (bin = key >> 26), privatized per block in shared memory.
#define NBINS 64

__global__ void histogram64(const unsigned int* keys, unsigned int* bins, int n) {
    __shared__ unsigned int local_bins[NBINS];
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) local_bins[b] = 0u;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local_bins[keys[i] >> 26], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < NBINS; b += blockDim.x) atomicAdd(&bins[b], local_bins[b]);
}
