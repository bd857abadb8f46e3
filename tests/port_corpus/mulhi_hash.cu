// Multiplicative hashing into a table of size m without division: (h * m) >> 32 via __umulhi,
// after a 32-bit mix of the key.
__device__ unsigned int mix32(unsigned int h) {
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

__global__ void hash_slots(const unsigned int* keys, unsigned int* slots, unsigned int m, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) slots[i] = __umulhi(mix32(keys[i]), m);
}
