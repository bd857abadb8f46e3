// REFUSED: the lane id read from a PTX special register.
__global__ void lane_ids(int* out) {
    unsigned int lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    out[blockIdx.x * blockDim.x + threadIdx.x] = lane;
}
