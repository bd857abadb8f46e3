// Euclidean distance matrix between two point sets in 3D (stored as x, y, z triples).
__global__ void pairwise_dist(const float* a, const float* b, float* d, int na, int nb) {
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < na && j < nb) {
        float dx = a[3 * i] - b[3 * j];
        float dy = a[3 * i + 1] - b[3 * j + 1];
        float dz = a[3 * i + 2] - b[3 * j + 2];
        d[i * nb + j] = sqrtf(dx * dx + dy * dy + dz * dz);
    }
}
