// Warp and block reductions that hold on every wavefront width (32 lanes on NVIDIA and AMD RDNA,
// 64 on AMD CDNA).
//
// Nothing here names a lane count: the warp step walks offsets from warpSize / 2 down to 1, so
// every lane of a 32- or 64-lane wavefront is summed, and the row step gives each wavefront one
// slot in shared memory. The shuffles use the full mask of the CUDA spelling; hipify turns it into
// the full mask of the target's wavefront.
//
// Contract for callers: blockDim.x is a power of two, or a multiple of 64 (the widest wavefront),
// so that a row wider than a wavefront is whole wavefronts on every target; blockDim.x *
// blockDim.y is at most kMaxBlockThreads, every thread of the block calls the reduction, and
// `slots` points to shared memory of kMaxBlockThreads floats.
#pragma once

namespace kp {

// The largest block the reductions take. The slot array is sized by it, one float per thread, so
// that its size names no wavefront width; 4 KiB of shared memory costs no occupancy at the block
// sizes these kernels use. The second reduction step needs blockDim.x / warpSize <= warpSize,
// which this bound keeps on 32 lanes and wider.
constexpr int kMaxBlockThreads = 1024;

// A thread's lane in its wavefront, and its wavefront in the block, by a mask and a shift: the
// compiler learns warpSize (a power of two, 32 or 64) only at its last step (ptxas, the AMD
// backend), so `thread % warpSize` or `/ warpSize` in the source stays a generic integer division
// (conversions and a reciprocal ahead of a short kernel's first load, in its SASS on sm_90); the
// mask and the shift become constants there. (row_sum below keeps the division: with these,
// ptxas gave the general float32 forward norm 74 registers where it has 64, one 512-thread block
// an SM instead of two, a third slower; docs/bench-mlp-notes.md, "The forward norms".)
__device__ __forceinline__ int lane_of(int thread) { return thread & (warpSize - 1); }
__device__ __forceinline__ int wave_of(int thread) { return thread >> (31 - __clz(warpSize)); }

// Sum over the lanes of one wavefront; every lane receives the total.
__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffff, value, offset);
  }
  return value;
}

// Sum over the blockDim.x threads of each row of the block (threadIdx.y names the row); each
// thread receives its row's total. A row no wider than a wavefront shares the wavefront with other
// rows: the butterfly's offsets stay below blockDim.x, so its lanes are summed among themselves.
// A wider row spans whole wavefronts: each reduces its own lanes and writes one slot, then every
// wavefront reduces its row's slots itself, which saves the broadcast round trip through shared
// memory. The closing barrier lets the caller reuse `slots` at once (a loop over rows). The
// branch is uniform over the block, so every thread meets the same barriers.
__device__ __forceinline__ float row_sum(float value, float* slots) {
  const int width = static_cast<int>(blockDim.x);
  if (width <= warpSize) {
    for (int offset = width / 2; offset > 0; offset /= 2) {
      value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
  }
  const int thread = static_cast<int>(threadIdx.y) * width + static_cast<int>(threadIdx.x);
  const int lane = thread % warpSize;
  const int waves = width / warpSize;
  value = warp_sum(value);
  if (lane == 0) {
    slots[thread / warpSize] = value;
  }
  __syncthreads();
  value = warp_sum(lane < waves ? slots[static_cast<int>(threadIdx.y) * waves + lane] : 0.0f);
  __syncthreads();
  return value;
}

}  // namespace kp
