// The driver's own cost of a kernel launch on this machine, with no Python in the way: an empty
// kernel and a kernel of swiglu's signature launched N times back to back through cuLaunchKernel,
// wall time per launch. bench/profile_mlp.py builds and runs it on the lent GPU, beside the same
// launches from Python, so the host cost of kernelpack's ops can be split into driver and Python.
#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

extern "C" __global__ void empty_kernel() {}

extern "C" __global__ void four_args(const float* a, const float* b, float* c, long long n) {
  if (n < 0) c[0] = a[0] + b[0];
}

static double per_launch_us(CUfunction function, void** params, CUstream stream, int n) {
  cudaDeviceSynchronize();
  const auto began = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    if (cuLaunchKernel(function, 1, 1, 1, 128, 1, 1, 0, stream, params, nullptr) != CUDA_SUCCESS) {
      std::printf("launch failed\n");
      return -1.0;
    }
  }
  cudaDeviceSynchronize();
  const auto took = std::chrono::steady_clock::now() - began;
  return std::chrono::duration<double, std::micro>(took).count() / n;
}

int main() {
  cudaFree(nullptr);  // the primary context, where torch works too
  CUfunction empty;
  CUfunction four;
  if (cudaGetFuncBySymbol(&empty, reinterpret_cast<const void*>(empty_kernel)) != cudaSuccess ||
      cudaGetFuncBySymbol(&four, reinterpret_cast<const void*>(four_args)) != cudaSuccess) {
    std::printf("no kernel handle\n");
    return 1;
  }
  float* buffer = nullptr;
  cudaMalloc(&buffer, 1 << 20);
  long long n = 4096;
  void* four_params[] = {&buffer, &buffer, &buffer, &n};
  CUstream side;
  cuStreamCreate(&side, CU_STREAM_NON_BLOCKING);
  for (int round = 0; round < 3; ++round) {
    std::printf("cuLaunchKernel, no arguments, legacy default stream: %.2f us\n",
                per_launch_us(empty, nullptr, nullptr, 20000));
    std::printf("cuLaunchKernel, 4 arguments, legacy default stream: %.2f us\n",
                per_launch_us(four, four_params, nullptr, 20000));
    std::printf("cuLaunchKernel, 4 arguments, a non-blocking stream: %.2f us\n",
                per_launch_us(four, four_params, side, 20000));
  }
  return 0;
}
