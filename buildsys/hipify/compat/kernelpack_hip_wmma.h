// kernelpack's portable WMMA: CUDA's <mma.h> (nvcuda::wmma) for every AMD GPU, wave32 and wave64,
// with or without matrix instructions (gfx1030 has none). The translator maps `#include <mma.h>`
// to this header, so `nvcuda::wmma::fragment`, `load_matrix_sync`, `mma_sync`,
// `store_matrix_sync`, `fill_fragment`, `fragment::num_elements` and `x[]` keep their spelling.
//
// Correct, without matrix cores: a matrix product is lane shuffles and FMAs. Port hot paths to
// rocWMMA for speed (the translator says so once per file).
//
// Design. CUDA leaves the element-to-lane mapping of a fragment unspecified, so any fixed mapping
// is a valid one. Each fragment belongs to a group of 32 lanes (lane & 31 of the wavefront): on
// wave32 that is the wave, on wave64 each half is a group of its own and acts as one CUDA warp.
// That is right whether the code computes warp ids with 32 (two warps a wave) or with warpSize
// (both halves then hold the same tile and compute the same result). A fragment stores its
// logical matrix (A: M x K, B: K x N, accumulator: M x N) in row-major order, element e in slot
// e / 32 of lane e % 32. mma_sync reads A and B with width-32 shuffles: N divides 32, so for each
// k every lane needs B's element from one slot (one shuffle), and for each output slot and k
// every lane needs A's element from one slot (two for m32n8k16, where a slot's rows span two).
// Products of half or bf16 inputs are exact in float; the sum is taken in float with FMAs in k
// order, from the accumulator's value, and rounded once to the destination type.
//
// Supported: shapes m16n16k16, m32n8k16, m8n32k16; matrix_a / matrix_b of __half or bf16
// (row_major or col_major); accumulators of float or __half (mem_row_major or mem_col_major);
// mma_sync. Other types (int8, tf32, double, sub-byte) stop with a static_assert.
//
// With KERNELPACK_WMMA_RENAME defined, nvcc compiles the same text as kp_nvcuda::wmma with
// __shfl_sync: tests/hipify_wmma_gpu.cu compares it with CUDA's own nvcuda::wmma on an NVIDIA GPU.
#pragma once

#if defined(KERNELPACK_WMMA_RENAME)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define KP_WMMA_NAMESPACE kp_nvcuda
#define KP_WMMA_BF16 __nv_bfloat16
#else
#include <hip/hip_bf16.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define KP_WMMA_NAMESPACE nvcuda
#define KP_WMMA_BF16 __hip_bfloat16
#endif

namespace KP_WMMA_NAMESPACE {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

}  // namespace wmma
}  // namespace KP_WMMA_NAMESPACE

// Helpers live outside nvcuda::wmma, so `using namespace nvcuda::wmma` adds only CUDA's names.
namespace kernelpack_wmma {

namespace wm = KP_WMMA_NAMESPACE::wmma;

template <typename A, typename B>
struct same {
  static constexpr bool value = false;
};
template <typename A>
struct same<A, A> {
  static constexpr bool value = true;
};
template <typename T>
struct identity {
  using type = T;
};

template <int M, int N, int K>
struct shape {
  static constexpr bool valid =
      K == 16 && ((M == 16 && N == 16) || (M == 32 && N == 8) || (M == 8 && N == 32));
};

// The logical matrix a fragment holds: rows x cols.
template <typename Use, int M, int N, int K>
struct dims;
template <int M, int N, int K>
struct dims<wm::matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct dims<wm::matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct dims<wm::accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <typename T>
struct is_input {
  static constexpr bool value = same<T, __half>::value || same<T, KP_WMMA_BF16>::value;
};
template <typename T>
struct is_accumulator {
  static constexpr bool value = same<T, float>::value || same<T, __half>::value;
};

__device__ inline float widen(float v) { return v; }
__device__ inline float widen(__half v) { return __half2float(v); }
__device__ inline float widen(KP_WMMA_BF16 v) { return __bfloat162float(v); }

template <typename T>
struct narrow;
template <>
struct narrow<float> {
  __device__ static float from(float v) { return v; }
};
template <>
struct narrow<__half> {
  __device__ static __half from(float v) { return __float2half_rn(v); }
};

// The lane's place in its 32-lane group.
__device__ inline int group_lane() {
#if defined(KERNELPACK_WMMA_RENAME)
  unsigned lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return static_cast<int>(lane & 31u);
#else
  return static_cast<int>(__lane_id() & 31u);
#endif
}

// Lane `src` (0..31) of this lane's 32-lane group.
__device__ inline float group_shuffle(float v, int src) {
#if defined(KERNELPACK_WMMA_RENAME)
  return __shfl_sync(0xffffffffu, v, src, 32);
#else
  return __shfl(v, src, 32);
#endif
}

// Element `src` of a row-major logical matrix spread over a group (slot src / 32, lane src % 32),
// where every lane's src lies in slot lo or hi (both uniform across the group): one shuffle, or
// two and a choice.
template <int E>
__device__ inline float gather(const float (&slots)[E], int lo, int hi, int src) {
  const float low = group_shuffle(slots[lo], src & 31);
  if (hi == lo) return low;
  const float high = group_shuffle(slots[hi], src & 31);
  return (src >> 5) == lo ? low : high;
}

}  // namespace kernelpack_wmma

namespace KP_WMMA_NAMESPACE {
namespace wmma {

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(kernelpack_wmma::shape<M, N, K>::valid,
                "kernelpack's portable WMMA supports m16n16k16, m32n8k16 and m8n32k16");
  static_assert(kernelpack_wmma::same<Use, accumulator>::value
                    ? kernelpack_wmma::is_accumulator<T>::value
                    : kernelpack_wmma::is_input<T>::value,
                "kernelpack's portable WMMA supports half and bfloat16 inputs with float or half "
                "accumulators; port other types to rocWMMA");
  using element_type = T;
  using storage_element_type = T;
  static constexpr int num_elements =
      kernelpack_wmma::dims<Use, M, N, K>::rows * kernelpack_wmma::dims<Use, M, N, K>::cols / 32;
  static constexpr int num_storage_elements = num_elements;
  T x[num_elements];
};

// matrix_a / matrix_b: the memory layout is the fragment's Layout (row_major or col_major).
template <typename Use, int M, int N, int K, typename T, typename Layout>
__device__ inline void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& a, const T* p,
                                        unsigned ldm) {
  static_assert(!kernelpack_wmma::same<Use, accumulator>::value,
                "an accumulator load names its memory layout (mem_row_major or mem_col_major)");
  static_assert(kernelpack_wmma::same<Layout, row_major>::value ||
                    kernelpack_wmma::same<Layout, col_major>::value,
                "matrix_a and matrix_b fragments name their layout (row_major or col_major)");
  constexpr int cols = kernelpack_wmma::dims<Use, M, N, K>::cols;
  constexpr bool by_rows = kernelpack_wmma::same<Layout, row_major>::value;
  const int lane = kernelpack_wmma::group_lane();
#pragma unroll
  for (int i = 0; i < a.num_elements; ++i) {
    const int e = 32 * i + lane, r = e / cols, c = e % cols;
    a.x[i] = by_rows ? p[static_cast<size_t>(r) * ldm + c] : p[static_cast<size_t>(c) * ldm + r];
  }
}

template <int M, int N, int K, typename T>
__device__ inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& a, const T* p,
                                        unsigned ldm, layout_t layout) {
  const int lane = kernelpack_wmma::group_lane();
#pragma unroll
  for (int i = 0; i < a.num_elements; ++i) {
    const int e = 32 * i + lane, r = e / N, c = e % N;
    a.x[i] = layout == mem_row_major ? p[static_cast<size_t>(r) * ldm + c]
                                     : p[static_cast<size_t>(c) * ldm + r];
  }
}

template <int M, int N, int K, typename T>
__device__ inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& a,
                                         unsigned ldm, layout_t layout) {
  const int lane = kernelpack_wmma::group_lane();
#pragma unroll
  for (int i = 0; i < a.num_elements; ++i) {
    const int e = 32 * i + lane, r = e / N, c = e % N;
    if (layout == mem_row_major) {
      p[static_cast<size_t>(r) * ldm + c] = a.x[i];
    } else {
      p[static_cast<size_t>(c) * ldm + r] = a.x[i];
    }
  }
}

// The value converts to the element type, as CUDA's (fill_fragment(half_fragment, 0.0f)).
template <typename Use, int M, int N, int K, typename T, typename Layout>
__device__ inline void fill_fragment(fragment<Use, M, N, K, T, Layout>& a,
                                     const typename kernelpack_wmma::identity<T>::type& v) {
#pragma unroll
  for (int i = 0; i < a.num_elements; ++i) a.x[i] = v;
}

// d = a * b + c; d and c may be the same fragment, and of different accumulator types (as CUDA's
// half forms allow). CUDA 13 has no satf argument for half and bf16 inputs; neither has this.
template <int M, int N, int K, typename Tin, typename LayoutA, typename LayoutB, typename Tc,
          typename Td>
__device__ inline void mma_sync(fragment<accumulator, M, N, K, Td>& d,
                                const fragment<matrix_a, M, N, K, Tin, LayoutA>& a,
                                const fragment<matrix_b, M, N, K, Tin, LayoutB>& b,
                                const fragment<accumulator, M, N, K, Tc>& c) {
  using kernelpack_wmma::gather;
  using kernelpack_wmma::widen;
  constexpr int slots_a = M * K / 32, slots_b = K * N / 32, slots_c = M * N / 32;
  const int lane = kernelpack_wmma::group_lane();
  float av[slots_a], bv[slots_b], bk[K];
#pragma unroll
  for (int j = 0; j < slots_a; ++j) av[j] = widen(a.x[j]);
#pragma unroll
  for (int j = 0; j < slots_b; ++j) bv[j] = widen(b.x[j]);
  // This lane's column is lane % N in every slot (N divides 32): B[k][n] for each k.
  const int n = lane % N;
#pragma unroll
  for (int k = 0; k < K; ++k) bk[k] = gather(bv, k * N / 32, (k * N + N - 1) / 32, k * N + n);
#pragma unroll
  for (int i = 0; i < slots_c; ++i) {
    const int m = (32 * i + lane) / N;
    float acc = widen(c.x[i]);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      // Rows of slot i run from (32 i) / N to (32 i + 31) / N: A's element lies in slot lo or hi.
      const int lo = ((32 * i) / N * K + k) / 32, hi = ((32 * i + 31) / N * K + k) / 32;
      acc = fmaf(gather(av, lo, hi, m * K + k), bk[k], acc);
    }
    d.x[i] = kernelpack_wmma::narrow<Td>::from(acc);
  }
}

}  // namespace wmma
}  // namespace KP_WMMA_NAMESPACE

#undef KP_WMMA_NAMESPACE
#undef KP_WMMA_BF16
