// The classic block reduction written for 32-lane warps, next to one written for any warp size.
// 32-lane "virtual warps" (tid % 32, reductions from offset 16) stay in one half of a wave64 and
// are correct there: only the file-scope WARP_SIZE define, in a file that also uses warpSize, is reported.
#include <cuda_runtime.h>

#define WARP_SIZE 32  // expect: warp-size
#define FULL_MASK 0xffffffff

__inline__ __device__ float warp_reduce_32(float value) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(FULL_MASK, value, offset);
  return value;
}

__global__ void block_reduce_32(const float* in, float* out, int n) {
  __shared__ float partial[32];
  const int tid = threadIdx.x;
  const int lane = tid % 32;
  const int warp_id = tid / 32;
  const int i = blockIdx.x * blockDim.x + tid;
  float value = i < n ? in[i] : 0.0f;
  value = warp_reduce_32(value);
  if (lane == 0) partial[warp_id] = value;
  __syncthreads();
  if (tid < 32) {
    value = tid < blockDim.x / WARP_SIZE ? partial[lane] : 0.0f;
    value = warp_reduce_32(value);
    if (tid == 0) atomicAdd(out, value);
  }
}

__global__ void unrolled_32(const float* in, float* out) {
  float value = in[threadIdx.x];
  value += __shfl_xor_sync(0xffffffff, value, 16);
  value += __shfl_xor_sync(0xffffffff, value, 8);
  value += __shfl_xor_sync(0xffffffff, value, 4);
  value += __shfl_xor_sync(0xffffffff, value, 2);
  value += __shfl_xor_sync(0xffffffff, value, 1);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, value);
}

__inline__ __device__ float warp_reduce(float value) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffff, value, offset);
  return value;
}

__global__ void block_reduce(const float* in, float* out, int n) {
  __shared__ float partial[1024];
  const int lane = threadIdx.x % warpSize;
  const int warp_id = threadIdx.x / warpSize;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float value = warp_reduce(i < n ? in[i] : 0.0f);
  if (lane == 0) partial[warp_id] = value;
  __syncthreads();
  if (warp_id == 0) {
    value = warp_reduce(lane < blockDim.x / warpSize ? partial[lane] : 0.0f);
    if (lane == 0) atomicAdd(out, value);
  }
}

__global__ void reviewed(const float* in, float* out) {
  const int lane = threadIdx.x % 32;  // hipify: allow(wave32)
  out[threadIdx.x] = in[lane];
}

int main() {
  float *in, *out;
  cudaMalloc(&in, 4096 * sizeof(float));
  cudaMalloc(&out, sizeof(float));
  block_reduce_32<<<16, 256>>>(in, out, 4096);
  unrolled_32<<<1, 32>>>(in, out);
  block_reduce<<<16, 256>>>(in, out, 4096);
  reviewed<<<1, 64>>>(in, out);
  cudaDeviceSynchronize();
  cudaFree(in);
  cudaFree(out);
  return 0;
}
