// Block reduction templated on the block size and element type, in the style of the classic
// CUDA samples: the unrolled tail is chosen at compile time from BLOCK.
template <unsigned int BLOCK, typename T>
__global__ void reduce_sum(const T* in, T* out, int n) {
    __shared__ T sdata[BLOCK];
    unsigned int tid = threadIdx.x;
    unsigned int i = blockIdx.x * BLOCK + tid;
    sdata[tid] = i < n ? in[i] : (T)0;
    __syncthreads();
    if (BLOCK >= 256) { if (tid < 128) sdata[tid] += sdata[tid + 128]; __syncthreads(); }
    if (BLOCK >= 128) { if (tid < 64) sdata[tid] += sdata[tid + 64]; __syncthreads(); }
    for (unsigned int s = 32; s > 0; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0) out[blockIdx.x] = sdata[0];
}

template __global__ void reduce_sum<256, float>(const float*, float*, int);
template __global__ void reduce_sum<128, int>(const int*, int*, int);
