// Similarity of binary codes: 32 - 2 * hamming distance, a signed score per pair of words.
__global__ void binary_similarity(const unsigned int* a, const unsigned int* b, int* score,
                                  float* norm, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int s = 32 - 2 * __popc(a[i] ^ b[i]);
        score[i] = s;
        norm[i] = s / 32.0f;
    }
}
