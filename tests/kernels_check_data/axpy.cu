/* y[i] = a * x[i] + y[i] in accel's dialect: builds as OpenCL C, CUDA C++ and HIP C++. */
#include "accel.h"

KERNEL void axpy(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT y, float a, int n) {
    int i = GROUP_ID(0) * LOCAL_SIZE(0) + LOCAL_ID(0);
    if (i < n) y[i] = FMA(a, x[i], y[i]);
}

/* A block-wide sum through shared memory: exercises LOCAL, BARRIER and a shared-memory report. */
KERNEL void block_sum(GLOBAL const float* RESTRICT x, GLOBAL float* RESTRICT out, int n) {
    LOCAL float part[256];
    int t = LOCAL_ID(0), i = GROUP_ID(0) * 256 + t;
    part[t] = i < n ? x[i] : 0.0f;
    BARRIER();
    for (int s = 128; s > 0; s >>= 1) {
        if (t < s) part[t] += part[t + s];
        BARRIER();
    }
    if (t == 0) out[GROUP_ID(0)] = part[0];
}
