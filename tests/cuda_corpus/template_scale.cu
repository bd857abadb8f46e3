// A kernel templated on its element type: one source for float and double.

template <typename T>
__global__ void scale(T* x, T a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] *= a;
    }
}

template __global__ void scale<float>(float*, float, int);
