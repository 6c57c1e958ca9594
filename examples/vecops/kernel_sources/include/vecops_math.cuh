// Device helpers shared by the modules: included by name from include/.
#pragma once

template <typename T>
__device__ __forceinline__ T vecops_square(T x) {
  return x * x;
}

__device__ __forceinline__ unsigned int vecops_index() {
  return blockIdx.x * blockDim.x + threadIdx.x;
}
