// Bitonic sort of 256 keys per block in shared memory (ascending).
#define SORT_N 256

__global__ void bitonic_sort256(int* keys) {
    __shared__ int s[SORT_N];
    unsigned int t = threadIdx.x;
    int* base = keys + blockIdx.x * SORT_N;
    s[t] = base[t];
    __syncthreads();
    for (unsigned int k = 2; k <= SORT_N; k <<= 1) {
        for (unsigned int j = k >> 1; j > 0; j >>= 1) {
            unsigned int p = t ^ j;
            if (p > t) {
                bool up = (t & k) == 0;
                int a = s[t], b = s[p];
                if ((a > b) == up) {
                    s[t] = b;
                    s[p] = a;
                }
            }
            __syncthreads();
        }
    }
    base[t] = s[t];
}
