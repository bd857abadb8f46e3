// Float atomic max through an atomicCAS loop on the value's bits.
__device__ float atomic_max_float(float* addr, float value) {
    int* bits = (int*)addr;
    int old = *bits;
    while (__int_as_float(old) < value) {
        int assumed = old;
        old = atomicCAS(bits, assumed, __float_as_int(value));
        if (old == assumed) break;
    }
    return __int_as_float(old);
}

__global__ void max_reduce(const float* x, float* result, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomic_max_float(result, x[i]);
}
