// Size classes by magnitude: bucket = floor(log2(x)) / 2 through the count of leading zeros;
// zero goes to bucket -1.
__global__ void size_class(const unsigned int* sizes, int* bucket, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int x = sizes[i];
        bucket[i] = x == 0 ? -1 : (31 - __clz(x)) / 2;
    }
}
