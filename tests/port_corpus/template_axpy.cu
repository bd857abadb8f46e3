// y = a * x + y for several element types from one template, instantiated explicitly.
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

template __global__ void axpy<float>(float, const float*, float*, int);
template __global__ void axpy<int>(int, const int*, int*, int);
