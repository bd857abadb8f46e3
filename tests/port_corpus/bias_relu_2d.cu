// Bias add + ReLU on a [rows, cols] activation, 2D grid, bias per column.
__global__ void bias_relu(float* y, const float* bias, int rows, int cols) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        float v = y[row * cols + col] + bias[col];
        y[row * cols + col] = fmaxf(v, 0.0f);
    }
}
