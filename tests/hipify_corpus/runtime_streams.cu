// Host runtime API: streams, events, pinned memory, asynchronous copies, error checks.
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                     \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

__global__ void scale(float* data, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

int main() {
  const int n = 1 << 20;
  const int chunks = 4;
  const int chunk = n / chunks;
  float* host = nullptr;
  float* device = nullptr;
  CUDA_CHECK(cudaMallocHost(&host, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&device, n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = 1.0f;

  cudaStream_t streams[chunks];
  for (int s = 0; s < chunks; ++s) CUDA_CHECK(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreateWithFlags(&stop, cudaEventBlockingSync));

  CUDA_CHECK(cudaEventRecord(start, streams[0]));
  for (int s = 0; s < chunks; ++s) {
    float* h = host + s * chunk;
    float* d = device + s * chunk;
    CUDA_CHECK(cudaMemcpyAsync(d, h, chunk * sizeof(float), cudaMemcpyHostToDevice, streams[s]));
    scale<<<(chunk + 255) / 256, 256, 0, streams[s]>>>(d, 2.0f, chunk);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaMemcpyAsync(h, d, chunk * sizeof(float), cudaMemcpyDeviceToHost, streams[s]));
  }
  for (int s = 1; s < chunks; ++s) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, streams[s]));
    CUDA_CHECK(cudaStreamWaitEvent(streams[0], done, 0));
    CUDA_CHECK(cudaEventDestroy(done));
  }
  CUDA_CHECK(cudaEventRecord(stop, streams[0]));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf("%d floats in %.3f ms, host[0] = %f\n", n, ms, host[0]);

  for (int s = 0; s < chunks; ++s) CUDA_CHECK(cudaStreamDestroy(streams[s]));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaFree(device));
  CUDA_CHECK(cudaFreeHost(host));
  CUDA_CHECK(cudaDeviceSynchronize());
  return 0;
}
