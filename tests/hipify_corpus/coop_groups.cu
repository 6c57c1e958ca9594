// Cooperative groups: block and tile groups, tile shuffles and votes, a grid-wide barrier.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

namespace cg = cooperative_groups;

__device__ float tile_sum(cg::thread_block_tile<32> tile, float value) {  // a 32-thread tile is 32 threads on wave64 too: no finding
  for (int offset = tile.size() / 2; offset > 0; offset /= 2) value += tile.shfl_down(value, offset);
  return value;
}

__global__ void sum_rows(const float* in, float* out, int cols) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  float value = 0.0f;
  for (int c = warp.thread_rank(); c < cols; c += warp.size()) value += in[blockIdx.x * cols + c];
  value = tile_sum(warp, value);
  if (warp.thread_rank() == 0) atomicAdd(&out[blockIdx.x], value);
  block.sync();
}

__global__ void any_negative(const float* in, int* flags, int n) {
  cg::thread_block block = cg::this_thread_block();
  auto quad = cg::tiled_partition<4>(block);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool negative = i < n && in[i] < 0.0f;
  if (quad.any(negative) && quad.thread_rank() == 0) atomicOr(&flags[i / 4], 1);
}

__global__ void two_phase(float* data, int n) {
  cg::grid_group grid = cg::this_grid();
  for (int i = grid.thread_rank(); i < n; i += grid.size()) data[i] *= 2.0f;
  grid.sync();
  for (int i = grid.thread_rank(); i < n; i += grid.size()) data[i] += 1.0f;
}

int main() {
  float* data;
  int n = 1 << 16;
  cudaMalloc(&data, n * sizeof(float));
  void* args[] = {&data, &n};
  cudaLaunchCooperativeKernel(two_phase, dim3(8), dim3(256), args, 0, nullptr);
  cudaDeviceSynchronize();
  cudaFree(data);
  return 0;
}
