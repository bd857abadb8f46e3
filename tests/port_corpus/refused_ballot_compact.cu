// REFUSED: warp-aggregated stream compaction with a ballot and lane masks.
__global__ void compact_warp(const int* in, int* out, int* counter, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    bool keep = i < n && in[i] != 0;
    unsigned int mask = __ballot_sync(0xffffffffu, keep);
    int rank = __popc(mask & __lanemask_lt());
    int base = 0;
    if (lane == 0) base = atomicAdd(counter, __popc(mask));
    if (keep) out[base + rank] = in[i];
}
