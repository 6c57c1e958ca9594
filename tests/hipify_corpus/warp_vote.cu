// Warp votes, ballots, active masks, scans and broadcasts.
#include <cuda_runtime.h>

__global__ void count_positive(const float* in, int* count) {
  const float value = in[blockIdx.x * blockDim.x + threadIdx.x];
  const int lane = threadIdx.x % warpSize;
  unsigned positive = __ballot_sync(0xffffffff, value > 0.0f);  // expect: ballot-32bit
  if (lane == 0) atomicAdd(count, __popc(positive));
}

__global__ void count_positive_wide(const float* in, int* count) {
  const float value = in[blockIdx.x * blockDim.x + threadIdx.x];
  const int votes = __popc(__ballot_sync(0xffffffff, value > 0.0f));
  if (threadIdx.x % warpSize == 0) atomicAdd(count, votes);
}

__global__ void all_or_nothing(const int* flags, int* out) {
  const int flag = flags[threadIdx.x];
  if (__ballot_sync(0xffffffff, flag) == 0xffffffff) out[0] = 1;  // expect: warp-mask
  if (__all_sync(0xffffffff, flag)) out[1] = 1;
  if (__any_sync(0xffffffff, flag)) out[2] = 1;
}

__global__ void compact(const int* in, int* out, int* total) {
  const int value = in[blockIdx.x * blockDim.x + threadIdx.x];
  if (value != 0) {
    unsigned active = __activemask();  // expect: ballot-32bit
    const int leader = __ffs(active) - 1;
    const int rank = __popc(active & ((1u << (threadIdx.x % warpSize)) - 1));
    int base = 0;
    if (rank == 0) base = atomicAdd(total, __popc(active));
    base = __shfl_sync(active, base, leader);
    out[base + rank] = value;
  }
}

__global__ void inclusive_scan(int* data) {
  int value = data[threadIdx.x];
  const int lane = threadIdx.x % warpSize;
  for (int offset = 1; offset < 32; offset *= 2) {  // expect: shfl-offset16
    const int other = __shfl_up_sync(0xffffffff, value, offset);
    if (lane >= offset) value += other;
  }
  __syncwarp();
  if (lane == 31) data[blockDim.x + threadIdx.x / warpSize] = value;  // expect: warp-size
  data[threadIdx.x] = value;
}

__global__ void half_warp_broadcast(float* data) {
  float value = data[threadIdx.x];
  value = __shfl_sync(0x0000ffff, value, 0);  // expect: warp-mask
  data[threadIdx.x] = value;
}

__global__ void scan_any_width(int* data) {
  int value = data[threadIdx.x];
  const int lane = threadIdx.x % warpSize;
  for (int offset = 1; offset < warpSize; offset *= 2) {
    const int other = __shfl_up_sync(0xffffffff, value, offset);
    if (lane >= offset) value += other;
  }
  const unsigned long long mask = __ballot_sync(0xffffffff, value > 0);
  data[threadIdx.x] = value + static_cast<int>(__popcll(mask));
}

int main() {
  int* data;
  cudaMalloc(&data, 4096 * sizeof(int));
  inclusive_scan<<<1, 256>>>(data);
  scan_any_width<<<1, 256>>>(data);
  cudaDeviceSynchronize();
  cudaFree(data);
  return 0;
}
