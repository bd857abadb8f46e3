// Deliberately wrong: uses an undeclared identifier on line 4.
extern "C" __global__ void broken(float* x) {
    int i = threadIdx.x;
    x[i] = undeclared_value;
}
