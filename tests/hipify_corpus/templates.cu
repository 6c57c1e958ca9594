// Templates: kernels over types and block sizes, functors, traits, launches of instantiations.
#include <cstdio>
#include <type_traits>
#include <cuda_runtime.h>

template <typename T>
struct Axpy {
  T alpha;
  __device__ T operator()(T x, T y) const { return alpha * x + y; }
};

template <typename T>
struct Square {
  __device__ T operator()(T x, T) const { return x * x; }
};

template <typename T, int BlockSize, typename Op>
__global__ void __launch_bounds__(BlockSize) binary_map(const T* x, const T* y, T* out, int n, Op op) {
  static_assert(BlockSize % 64 == 0, "block size must fill whole wavefronts");
  const int i = blockIdx.x * BlockSize + threadIdx.x;
  if (i < n) out[i] = op(x[i], y[i]);
}

template <typename T, int BlockSize>
__global__ void block_sum(const T* x, T* out, int n) {
  __shared__ T partial[BlockSize];
  T value = T(0);
  for (int i = blockIdx.x * BlockSize + threadIdx.x; i < n; i += gridDim.x * BlockSize) value += x[i];
  partial[threadIdx.x] = value;
  __syncthreads();
#pragma unroll
  for (int stride = BlockSize / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if constexpr (std::is_same<T, double>::value) {
      atomicAdd(out, partial[0]);
    } else {
      atomicAdd(out, static_cast<float>(partial[0]));
    }
  }
}

template <typename T, int BlockSize, typename Op>
cudaError_t launch_map(const T* x, const T* y, T* out, int n, Op op, cudaStream_t stream) {
  const int blocks = (n + BlockSize - 1) / BlockSize;
  binary_map<T, BlockSize, Op><<<blocks, BlockSize, 0, stream>>>(x, y, out, n, op);
  return cudaGetLastError();
}

int main() {
  const int n = 1 << 16;
  float *x, *y, *out;
  double *xd, *sum;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaMalloc(&out, n * sizeof(float));
  cudaMalloc(&xd, n * sizeof(double));
  cudaMalloc(&sum, sizeof(double));
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaError_t status = launch_map<float, 256>(x, y, out, n, Axpy<float>{2.0f}, stream);
  status = launch_map<float, 128>(x, y, out, n, Square<float>{}, stream);
  block_sum<double, 512><<<64, 512, 0, stream>>>(xd, sum, n);
  cudaStreamSynchronize(stream);
  std::printf("%s\n", cudaGetErrorString(status));
  cudaStreamDestroy(stream);
  cudaFree(x);
  cudaFree(y);
  cudaFree(out);
  cudaFree(xd);
  cudaFree(sum);
  return 0;
}
