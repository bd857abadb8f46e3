// One Jacobi sweep of the 2D Laplace equation on the interior of a grid.
__global__ void jacobi_step(const float* u, float* u_new, int nx, int ny) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x > 0 && y > 0 && x < nx - 1 && y < ny - 1) {
        int c = y * nx + x;
        u_new[c] = 0.25f * (u[c - 1] + u[c + 1] + u[c - nx] + u[c + nx]);
    }
}
