// Column-major indexing macros in the cuBLAS style, plus a ceil-div grid helper.
#define IDX2C(i, j, ld) (((j) * (ld)) + (i))
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#define GLOBAL_TID (blockIdx.x * blockDim.x + threadIdx.x)

__global__ void scale_columns(float* a, const float* colscale, int rows, int cols) {
    int t = GLOBAL_TID;
    int per_col = CEIL_DIV(rows, 32) * 32;
    int j = t / per_col;
    int i = t % per_col;
    if (j < cols && i < rows) a[IDX2C(i, j, rows)] *= colscale[j];
}
