// Manhattan distance between integer feature vectors, and the signed gap to a threshold.
__global__ void l1_rows(const int* a, const int* b, int* dist, int* gap, int dim, int rows, int threshold) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int d = 0;
    for (int k = 0; k < dim; ++k) d += abs(a[r * dim + k] - b[r * dim + k]);
    dist[r] = d;
    gap[r] = (abs(d - threshold) - 5) / 2;
}
