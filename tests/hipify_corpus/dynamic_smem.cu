// Dynamic shared memory beyond the default limit: attributes, occupancy, cache preference.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void tile_transpose(const float* in, float* out, int n, int tile) {
  extern __shared__ float buffer[];
  const int x = blockIdx.x * tile + threadIdx.x;
  const int y = blockIdx.y * tile + threadIdx.y;
  if (x < n && y < n) buffer[threadIdx.y * (tile + 1) + threadIdx.x] = in[y * n + x];
  __syncthreads();
  const int tx = blockIdx.y * tile + threadIdx.x;
  const int ty = blockIdx.x * tile + threadIdx.y;
  if (tx < n && ty < n) out[ty * n + tx] = buffer[threadIdx.x * (tile + 1) + threadIdx.y];
}

template <typename T>
__global__ void staged_copy(const T* in, T* out, int n) {
  extern __shared__ unsigned char raw[];
  T* stage = reinterpret_cast<T*>(raw);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) stage[threadIdx.x] = in[i];
  __syncthreads();
  if (i < n) out[i] = stage[blockDim.x - 1 - threadIdx.x];
}

int main() {
  const int n = 4096;
  const int tile = 32;
  const size_t smem = 96 * 1024;
  float *in, *out;
  cudaMalloc(&in, n * n * sizeof(float));
  cudaMalloc(&out, n * n * sizeof(float));
  cudaFuncSetAttribute(tile_transpose, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  cudaFuncSetCacheConfig(tile_transpose, cudaFuncCachePreferShared);
  cudaFuncAttributes attributes;
  cudaFuncGetAttributes(&attributes, tile_transpose);
  int blocks_per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, tile_transpose, tile * tile, smem);
  std::printf("%d registers, %zu static smem, %d blocks/SM\n", attributes.numRegs, attributes.sharedSizeBytes, blocks_per_sm);
  tile_transpose<<<dim3(n / tile, n / tile), dim3(tile, tile), (tile + 1) * tile * sizeof(float)>>>(in, out, n, tile);
  cudaFuncSetAttribute(staged_copy<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
  staged_copy<float><<<n, 256, 256 * sizeof(float)>>>(in, out, n * n);
  cudaDeviceSynchronize();
  cudaFree(in);
  cudaFree(out);
  return 0;
}
