/* Plain OpenCL C (a .cl file without accel.h): built for OpenCL devices only. */
__kernel void scale(__global float* x, float a, int n) {
    int i = get_global_id(0);
    if (i < n) x[i] *= a;
}
