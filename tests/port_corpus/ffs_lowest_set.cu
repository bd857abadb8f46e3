// Index of the lowest free slot in each 32-slot occupancy word (-1 when full), via __ffs.
__global__ void lowest_free(const unsigned int* occupied, int* slot, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) slot[i] = __ffs(~occupied[i]) - 1;
}
