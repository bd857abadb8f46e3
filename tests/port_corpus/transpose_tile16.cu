// Tiled transpose: a 16x17 shared tile (padding avoids bank conflicts), square 16x16 blocks.
#define TILE_DIM 16

__global__ void transpose_tiled(const int* __restrict__ in, int* __restrict__ out, int rows, int cols) {
    __shared__ int tile[TILE_DIM][TILE_DIM + 1];
    int x = blockIdx.x * TILE_DIM + threadIdx.x;
    int y = blockIdx.y * TILE_DIM + threadIdx.y;
    if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE_DIM + threadIdx.x;
    y = blockIdx.x * TILE_DIM + threadIdx.y;
    if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}
