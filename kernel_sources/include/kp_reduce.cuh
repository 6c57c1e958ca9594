// Warp and block reductions that hold on every wavefront width (32 lanes on NVIDIA and AMD RDNA,
// 64 on AMD CDNA).
//
// Nothing here names a lane count: the warp step walks offsets from warpSize / 2 down to 1, so
// every lane of a 32- or 64-lane wavefront is summed, and the block step gives each wavefront one
// slot in shared memory. The shuffles use the full mask of the CUDA spelling; hipify turns it into
// the full mask of the target's wavefront.
//
// Contract for callers: blockDim.x is a multiple of the wavefront width (a multiple of 64 holds on
// every target) and at most kMaxBlockThreads, every thread of the block calls the reduction, and
// `slots` points to shared memory of kMaxBlockThreads floats.
#pragma once

namespace kp {

// The largest block the reductions take. The slot array is sized by it, one float per thread, so
// that its size names no wavefront width; 4 KiB of shared memory costs no occupancy at the block
// sizes these kernels use. The second reduction step needs blockDim.x / warpSize <= warpSize,
// which this bound keeps on 32 lanes and wider.
constexpr int kMaxBlockThreads = 1024;

// Sum over the lanes of one wavefront; every lane receives the total.
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffff, value, offset);
  }
  return value;
}

// Sum over every thread of the block; every thread receives the total. Each wavefront reduces
// its own lanes, writes one slot, and then every wavefront reduces the slots itself, which saves
// the broadcast round trip through shared memory. The closing barrier lets the caller reuse
// `slots` at once (a loop over rows).
__device__ __forceinline__ float block_sum(float value, float* slots) {
  const int lane = threadIdx.x % warpSize;
  const int wave = threadIdx.x / warpSize;
  const int waves = blockDim.x / warpSize;
  value = warp_sum(value);
  if (lane == 0) {
    slots[wave] = value;
  }
  __syncthreads();
  value = warp_sum(lane < waves ? slots[lane] : 0.0f);
  __syncthreads();
  return value;
}

}  // namespace kp
