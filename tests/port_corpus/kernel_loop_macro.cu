// Caffe-style grid-stride loop macro heading each kernel body, with a clipped ReLU gradient.
#define CUDA_KERNEL_LOOP(i, n) \
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += blockDim.x * gridDim.x)

__global__ void relu_backward(const float* top_diff, const float* bottom_data, float* bottom_diff,
                              float ceiling, int n) {
  CUDA_KERNEL_LOOP(index, n) {
    float x = bottom_data[index];
    bottom_diff[index] = (x > 0.0f && x < ceiling) ? top_diff[index] : 0.0f;
  }
}
