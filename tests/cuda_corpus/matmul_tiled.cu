// C = A B (M x K times K x N, row-major) with 16 x 16 tiles of A and B in shared memory.
#define T 16

extern "C" __global__ void matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[T][T];
    __shared__ float Bs[T][T];
    int row = blockIdx.y * T + threadIdx.y;
    int col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        As[threadIdx.y][threadIdx.x] = row < M && k0 + threadIdx.x < K ? A[row * K + k0 + threadIdx.x] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = col < N && k0 + threadIdx.y < K ? B[(k0 + threadIdx.y) * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < T; ++k) {
            acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}
