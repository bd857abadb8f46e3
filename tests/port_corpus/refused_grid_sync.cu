// REFUSED: a cooperative-groups kernel with a grid-wide barrier between two phases.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
__global__ void two_phase(float* x, float* y, int n) {
    cg::grid_group grid = cg::this_grid();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
    grid.sync();
    if (i < n) y[i] = x[(i + 1) % n];
}
