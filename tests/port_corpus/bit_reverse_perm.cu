// Bit-reversal permutation (the FFT input reordering) of a power-of-two length array.
__global__ void bit_reverse_permute(const float* in, float* out, int log2n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (1u << log2n)) {
        unsigned int j = __brev(i) >> (32 - log2n);
        out[j] = in[i];
    }
}
