// Atomics: compare-and-swap loops for float max and double add, exchange, increments, histograms.
#include <cuda_runtime.h>

__device__ float atomic_max_float(float* address, float value) {
  int* bits = reinterpret_cast<int*>(address);
  int old = *bits;
  int assumed;
  do {
    assumed = old;
    if (__int_as_float(assumed) >= value) break;
    old = atomicCAS(bits, assumed, __float_as_int(value));
  } while (assumed != old);
  return __int_as_float(old);
}

__device__ double atomic_add_double(double* address, double value) {
  unsigned long long* bits = reinterpret_cast<unsigned long long*>(address);
  unsigned long long old = *bits;
  unsigned long long assumed;
  do {
    assumed = old;
    old = atomicCAS(bits, assumed, __double_as_longlong(value + __longlong_as_double(assumed)));
  } while (assumed != old);
  return __longlong_as_double(old);
}

__global__ void reduce_max(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomic_max_float(out, in[i]);
}

__global__ void sum_double(const double* in, double* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomic_add_double(out, in[i]);
}

__global__ void histogram(const unsigned char* in, unsigned int* bins, int n) {
  __shared__ unsigned int local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[in[i]], 1u);
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

__global__ void ticket(unsigned int* counter, unsigned int* order, int* lock, int* owner) {
  const unsigned int my = atomicInc(counter, 0xffffffffu);
  order[blockIdx.x] = my;
  while (atomicCAS(lock, 0, 1) != 0) {
  }
  __threadfence();
  atomicExch(owner, static_cast<int>(blockIdx.x));
  __threadfence();
  atomicExch(lock, 0);
  atomicMin(owner, 0);
  atomicMax(owner, 1);
}

int main() {
  float* f;
  cudaMalloc(&f, 1024 * sizeof(float));
  reduce_max<<<4, 256>>>(f, f, 1024);
  cudaDeviceSynchronize();
  cudaFree(f);
  return 0;
}
