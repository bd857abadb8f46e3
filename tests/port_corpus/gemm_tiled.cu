// Tiled GEMM with shared-memory tiles and a register accumulator per thread.
#define BS 16

__global__ void gemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[BS][BS];
    __shared__ float Bs[BS][BS];
    int row = blockIdx.y * BS + threadIdx.y;
    int col = blockIdx.x * BS + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < (K + BS - 1) / BS; ++t) {
        int ak = t * BS + threadIdx.x;
        int bk = t * BS + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BS; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
