// cooperative_groups/scan.h over thread_block_tile<N>: the test source of
// tests/test_hipify_cg_scan.py, compiled as CUDA by nvcc and, translated, by hipcc for a wave64
// and a wave32 target, and run on the AMD emulator against numpy.
//
// One kernel per tile size N, blocks of 64 threads. For thread i, with x = in[i]:
//   ints[0n + i]  inclusive_scan(tile, x)                 (default plus)
//   ints[1n + i]  exclusive_scan(tile, x)                 (0 at rank 0)
//   ints[2n + i]  inclusive_scan(tile, x, Max())          (a custom operator)
//   ints[3n + i]  exclusive_scan(tile, x, cg::greater<int>())
//   ints[4n + i], ints[5n + i]  inclusive_scan of Pair{x, x} with PairOp (sum, max): a value
//                 that is neither an integer nor a float
//   ints[6n + i], ints[7n + i]  its exclusive_scan ({0, 0} at rank 0)
//   floats[0n + i] inclusive_scan(tile, x * 0.5f, cg::plus<float>()) (exact: halves of small ints)
//   floats[1n + i] exclusive_scan(tile, x * 0.5f)
// The tile of 64 is one wavefront only on wave64: there its kernel scans, elsewhere it writes
// nothing (CUDA's 64-thread tile spans two warps, which this test does not cover).
#include <cooperative_groups.h>
#include <cooperative_groups/scan.h>

namespace cg = cooperative_groups;

struct Max {
  __device__ int operator()(int a, int b) const { return a < b ? b : a; }
};
struct Pair {
  int sum;
  int max;
};
struct PairOp {
  __device__ Pair operator()(const Pair& a, const Pair& b) const {
    return Pair{a.sum + b.sum, a.max < b.max ? b.max : a.max};
  }
};

template <unsigned N>
__device__ void scans(const int* in, int* ints, float* floats) {
  cg::thread_block_tile<N> tile = cg::tiled_partition<N>(cg::this_thread_block());
  const unsigned n = blockDim.x;
  const unsigned i = threadIdx.x;
  const int x = in[i];
  ints[0 * n + i] = cg::inclusive_scan(tile, x);
  ints[1 * n + i] = cg::exclusive_scan(tile, x);
  ints[2 * n + i] = cg::inclusive_scan(tile, x, Max());
  ints[3 * n + i] = cg::exclusive_scan(tile, x, cg::greater<int>());
  const Pair inclusive = cg::inclusive_scan(tile, Pair{x, x}, PairOp());
  const Pair exclusive = cg::exclusive_scan(tile, Pair{x, x}, PairOp());
  ints[4 * n + i] = inclusive.sum;
  ints[5 * n + i] = inclusive.max;
  ints[6 * n + i] = exclusive.sum;
  ints[7 * n + i] = exclusive.max;
  floats[0 * n + i] = cg::inclusive_scan(tile, x * 0.5f, cg::plus<float>());
  floats[1 * n + i] = cg::exclusive_scan(tile, x * 0.5f);
}

#define SCANS(N)                                                                          \
  extern "C" __global__ void cg_scan_##N(const int* in, int* ints, float* floats) {    \
    scans<N>(in, ints, floats);                                                           \
  }
SCANS(2)
SCANS(4)
SCANS(8)
SCANS(16)
SCANS(32)

extern "C" __global__ void cg_scan_64(const int* in, int* ints, float* floats) {
#if defined(USE_ROCM) && __AMDGCN_WAVEFRONT_SIZE__ == 64
  scans<64>(in, ints, floats);
#endif
}
