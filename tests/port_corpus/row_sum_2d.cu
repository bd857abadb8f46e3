// Row sums of an int matrix with a 2D block: each row of threads strides over one row.
__global__ void row_sums(const int* m, long long* sums, int rows, int cols) {
    __shared__ long long part[8][32];
    int r = blockIdx.x * blockDim.y + threadIdx.y;
    long long s = 0;
    if (r < rows)
        for (int c = threadIdx.x; c < cols; c += blockDim.x) s += m[r * cols + c];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0 && r < rows) {
        long long t = 0;
        for (int k = 0; k < blockDim.x; ++k) t += part[threadIdx.y][k];
        sums[r] = t;
    }
}
