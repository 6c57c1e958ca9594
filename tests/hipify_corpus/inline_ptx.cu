// Inline PTX: special registers and instructions that have no meaning on AMD GPUs.
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned lane_id() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));  // exact: becomes __lane_id()
  return lane;
}

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));  // expect: inline-asm
  return mask;
}

__device__ __forceinline__ float fast_ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__global__ void ranks(const int* in, int* out) {
  const bool set = in[threadIdx.x] != 0;
  const unsigned votes = __ballot_sync(0xffffffff, set);  // expect: ballot-32bit
  out[threadIdx.x] = __popc(votes & lanemask_lt()) + static_cast<int>(lane_id());
#if __CUDA_ARCH__ >= 800
  out[threadIdx.x] += static_cast<int>(fast_ex2(1.0f));
#endif
}

int main() {
  int* data;
  cudaMalloc(&data, 256 * sizeof(int));
  ranks<<<1, 256>>>(data, data);
  cudaDeviceSynchronize();
  cudaFree(data);
  return 0;
}
