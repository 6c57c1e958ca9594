// kernelpack's portable WMMA (buildsys/hipify/compat/kernelpack_hip_wmma.h) compiled by nvcc as
// kp_nvcuda::wmma (32-lane groups, __shfl_sync), against CUDA's own nvcuda::wmma on the same
// inputs, in the same kernels (one template, instantiated for each side).
//
// For every shape (m16n16k16, m32n8k16, m8n32k16), input/accumulator types (half*half+float->float,
// half*half+half->half, half*half+half->float, half*half+float->half, bf16*bf16+float->float),
// A and B layouts (row/col each), C load and D store layouts (mem_row/mem_col each), and "warps"
// of 32 and of 64 threads (warp id = threadIdx.x / 32 or / 64: with 64, two CUDA warps hold the
// same tile, as the two halves of a wave64 do when code divides by warpSize):
//   exact-load, exact-fill, exact-elementwise: small integers (A, B in [-4, 4], C in [-64, 64]),
//     whose products and sums are exact in every accumulator type; D compared bit for bit with
//     CUDA's and with the float64 reference, the whole poisoned buffer (untouched gaps included).
//     fill: C = fill_fragment(3); elementwise: a.x[i] *= 2, b.x[i] -= 1, c.x[i] += 3 before, and
//     d.x[i] *= 0.5 after the product, over num_elements; fill and elementwise write D into C's
//     fragment (d and c the same object) when their types agree.
//   random-load: A, B uniform in [-1, 1] and C in [-4, 4], rounded to their types; D against a
//     float64 reference: |D - ref| <= tol * (sum |a b| + |c|), tol 2^-19 (float D) or 2^-10 (half
//     D) for ours; CUDA's own deviation is printed beside it (tensor cores sum in their own
//     order), and the gaps compared bit for bit.
//   roundtrip: accumulator load and store of random bit patterns (NaNs, infinities, subnormals),
//     every load/store layout pair, bit for bit with CUDA's and with the host's copy.
// Prints `name tried=N mismatches=M ...` per line; exit 1 on any mismatch. Built and run by
// tests/test_hipify_wmma_gpu.py (markers gpu and nvcc; sm_80 or newer for bf16).
#define KERNELPACK_WMMA_RENAME
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "../buildsys/hipify/compat/kernelpack_hip_wmma.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                     \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(status_), __FILE__, __LINE__); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)

// One side's WMMA, so each kernel is written once.
#define SIDE(Name, NS)                                                                  \
  struct Name {                                                                         \
    template <typename Use, int M, int N, int K, typename T, typename L = void>         \
    using fragment = NS::wmma::fragment<Use, M, N, K, T, L>;                            \
    using matrix_a = NS::wmma::matrix_a;                                                \
    using matrix_b = NS::wmma::matrix_b;                                                \
    using accumulator = NS::wmma::accumulator;                                          \
    using row_major = NS::wmma::row_major;                                              \
    using col_major = NS::wmma::col_major;                                              \
    __device__ static NS::wmma::layout_t layout(int row) {                              \
      return row ? NS::wmma::mem_row_major : NS::wmma::mem_col_major;                   \
    }                                                                                   \
    template <typename... A>                                                            \
    __device__ static void load(A&&... a) { NS::wmma::load_matrix_sync(std::forward<A>(a)...); } \
    template <typename... A>                                                            \
    __device__ static void store(A&&... a) { NS::wmma::store_matrix_sync(std::forward<A>(a)...); } \
    template <typename... A>                                                            \
    __device__ static void fill(A&&... a) { NS::wmma::fill_fragment(std::forward<A>(a)...); } \
    template <typename... A>                                                            \
    __device__ static void mma(A&&... a) { NS::wmma::mma_sync(std::forward<A>(a)...); } \
  };
SIDE(Cuda, nvcuda)
SIDE(Ours, kp_nvcuda)

__host__ __device__ inline float to_f(float v) { return v; }
__host__ __device__ inline float to_f(__half v) { return __half2float(v); }
__host__ __device__ inline float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__host__ __device__ inline T from_f(float v);
template <>
__host__ __device__ inline float from_f<float>(float v) { return v; }
template <>
__host__ __device__ inline __half from_f<__half>(float v) { return __float2half_rn(v); }
template <>
__host__ __device__ inline __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

enum Mode { kLoad = 0, kFill = 1, kElementwise = 2 };

struct Params {
  int tiles, group, c_row, d_row, mode;
  float fill;
  int lda, ldb, ldc_row, ldc_col;      // leading dimensions (C and D share them)
  int tile_a, tile_b, tile_c;          // elements between tiles
};

template <typename S, int M, int N, int K, typename Tin, typename Tc, typename Td, bool RowA,
          bool RowB>
__global__ void mma_kernel(const Tin* A, const Tin* B, const Tc* C, Td* D, Params p) {
  const int per_block = blockDim.x / p.group;
  const int tile = blockIdx.x * per_block + threadIdx.x / p.group;
  if (tile >= p.tiles) return;  // whole groups leave together
  using LA = std::conditional_t<RowA, typename S::row_major, typename S::col_major>;
  using LB = std::conditional_t<RowB, typename S::row_major, typename S::col_major>;
  typename S::template fragment<typename S::matrix_a, M, N, K, Tin, LA> a;
  typename S::template fragment<typename S::matrix_b, M, N, K, Tin, LB> b;
  typename S::template fragment<typename S::accumulator, M, N, K, Tc> c;
  typename S::template fragment<typename S::accumulator, M, N, K, Td> d;
  S::load(a, A + static_cast<size_t>(tile) * p.tile_a, p.lda);
  S::load(b, B + static_cast<size_t>(tile) * p.tile_b, p.ldb);
  const int ldc = p.c_row ? p.ldc_row : p.ldc_col, ldd = p.d_row ? p.ldc_row : p.ldc_col;
  if (p.mode == kFill) {
    S::fill(c, from_f<Tc>(p.fill));
  } else {
    S::load(c, C + static_cast<size_t>(tile) * p.tile_c, ldc, S::layout(p.c_row));
  }
  if (p.mode == kElementwise) {
    for (int i = 0; i < a.num_elements; ++i) a.x[i] = from_f<Tin>(to_f(a.x[i]) * 2.0f);
    for (int i = 0; i < b.num_elements; ++i) b.x[i] = from_f<Tin>(to_f(b.x[i]) - 1.0f);
    for (int i = 0; i < c.num_elements; ++i) c.x[i] = from_f<Tc>(to_f(c.x[i]) + 3.0f);
  }
  Td* out = D + static_cast<size_t>(tile) * p.tile_c;
  if constexpr (std::is_same_v<Tc, Td>) {
    if (p.mode != kLoad) {  // d is c
      S::mma(c, a, b, c);
      if (p.mode == kElementwise)
        for (int i = 0; i < c.num_elements; ++i) c.x[i] = from_f<Td>(to_f(c.x[i]) * 0.5f);
      S::store(out, c, ldd, S::layout(p.d_row));
      return;
    }
  }
  S::mma(d, a, b, c);
  if (p.mode == kElementwise)
    for (int i = 0; i < d.num_elements; ++i) d.x[i] = from_f<Td>(to_f(d.x[i]) * 0.5f);
  S::store(out, d, ldd, S::layout(p.d_row));
}

template <typename S, int M, int N, int K, typename T>
__global__ void roundtrip_kernel(const T* src, T* dst, Params p) {
  const int per_block = blockDim.x / p.group;
  const int tile = blockIdx.x * per_block + threadIdx.x / p.group;
  if (tile >= p.tiles) return;
  typename S::template fragment<typename S::accumulator, M, N, K, T> c;
  S::load(c, src + static_cast<size_t>(tile) * p.tile_c, p.c_row ? p.ldc_row : p.ldc_col,
          S::layout(p.c_row));
  S::store(dst + static_cast<size_t>(tile) * p.tile_c, c, p.d_row ? p.ldc_row : p.ldc_col,
           S::layout(p.d_row));
}

// ---- host ------------------------------------------------------------------------------------

static unsigned long long g_state = 0x243f6a8885a308d3ull;
static unsigned long long next_random() {
  unsigned long long x = (g_state += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
static int random_int(int lo, int hi) { return lo + static_cast<int>(next_random() % (hi - lo + 1)); }
static float random_unit() { return static_cast<float>((next_random() >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }

template <typename T>
static unsigned long long bits(T v) {
  unsigned long long b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

static int g_failures = 0;
static constexpr int kThreads = 128;
static constexpr int kTiles = 512;
static const unsigned char kPoison = 0xa5;

static void report(const char* name, unsigned long long tried, unsigned long long bad,
                   const char* extra = "") {
  std::printf("%s tried=%llu mismatches=%llu%s\n", name, tried, bad, extra);
  if (bad) ++g_failures;
}

// Element (r, c) of a rows x cols matrix stored row- or column-major with leading dimension ld.
static size_t at(bool row, int ld, int r, int c) {
  return row ? static_cast<size_t>(r) * ld + c : static_cast<size_t>(c) * ld + r;
}

template <typename T>
static T* device_copy(const std::vector<T>& host) {
  T* p = nullptr;
  CHECK(cudaMalloc(&p, host.size() * sizeof(T)));
  CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <int M, int N, int K, typename Tin, typename Tc, typename Td, bool RowA, bool RowB>
static void run_mma(const char* types) {
  Params p{};
  p.tiles = kTiles;
  p.lda = (RowA ? K : M) + 8;
  p.ldb = (RowB ? N : K) + 8;
  p.ldc_row = N + 8;
  p.ldc_col = M + 8;
  p.tile_a = (RowA ? M : K) * p.lda;
  p.tile_b = (RowB ? K : N) * p.ldb;
  p.tile_c = std::max(M * p.ldc_row, N * p.ldc_col);
  const size_t na = static_cast<size_t>(kTiles) * p.tile_a, nb = static_cast<size_t>(kTiles) * p.tile_b;
  const size_t nc = static_cast<size_t>(kTiles) * p.tile_c;

  for (int exact = 1; exact >= 0; --exact) {
    // Logical matrices (as floats, each representable in its type).
    std::vector<float> la(static_cast<size_t>(kTiles) * M * K), lb(static_cast<size_t>(kTiles) * K * N),
        lc(static_cast<size_t>(kTiles) * M * N);
    for (float& v : la) v = to_f(from_f<Tin>(exact ? random_int(-4, 4) : random_unit()));
    for (float& v : lb) v = to_f(from_f<Tin>(exact ? random_int(-4, 4) : random_unit()));
    for (float& v : lc) v = to_f(from_f<Tc>(exact ? random_int(-64, 64) : 4.0f * random_unit()));
    std::vector<Tin> ha(na, from_f<Tin>(0.0f)), hb(nb, from_f<Tin>(0.0f));
    std::vector<Tc> hc_row(nc, from_f<Tc>(0.0f)), hc_col(nc, from_f<Tc>(0.0f));
    for (int t = 0; t < kTiles; ++t) {
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < K; ++c)
          ha[static_cast<size_t>(t) * p.tile_a + at(RowA, p.lda, r, c)] = from_f<Tin>(la[(static_cast<size_t>(t) * M + r) * K + c]);
      for (int r = 0; r < K; ++r)
        for (int c = 0; c < N; ++c)
          hb[static_cast<size_t>(t) * p.tile_b + at(RowB, p.ldb, r, c)] = from_f<Tin>(lb[(static_cast<size_t>(t) * K + r) * N + c]);
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < N; ++c) {
          const Tc v = from_f<Tc>(lc[(static_cast<size_t>(t) * M + r) * N + c]);
          hc_row[static_cast<size_t>(t) * p.tile_c + at(true, p.ldc_row, r, c)] = v;
          hc_col[static_cast<size_t>(t) * p.tile_c + at(false, p.ldc_col, r, c)] = v;
        }
    }
    Tin* da = device_copy(ha);
    Tin* db = device_copy(hb);
    Tc* dc_row = device_copy(hc_row);
    Tc* dc_col = device_copy(hc_col);
    Td *dd_cuda = nullptr, *dd_ours = nullptr;
    CHECK(cudaMalloc(&dd_cuda, nc * sizeof(Td)));
    CHECK(cudaMalloc(&dd_ours, nc * sizeof(Td)));
    std::vector<Td> got_cuda(nc), got_ours(nc);
    Td poison;
    std::memset(&poison, kPoison, sizeof(Td));

    for (int mode = kLoad; mode <= (exact ? kElementwise : kLoad); ++mode) {
      p.mode = mode;
      p.fill = exact ? 3.0f : to_f(from_f<Tc>(0.3f));
      // float64 reference of each logical D element, and sum |a b| + |c| for the tolerance.
      std::vector<double> ref(static_cast<size_t>(kTiles) * M * N), scale(ref.size());
      for (int t = 0; t < kTiles; ++t)
        for (int r = 0; r < M; ++r)
          for (int c = 0; c < N; ++c) {
            const size_t e = (static_cast<size_t>(t) * M + r) * N + c;
            double cv = mode == kFill ? p.fill : lc[e];
            if (mode == kElementwise) cv += 3.0;
            double sum = cv, size = std::fabs(cv);
            for (int k = 0; k < K; ++k) {
              double av = la[(static_cast<size_t>(t) * M + r) * K + k];
              double bv = lb[(static_cast<size_t>(t) * K + k) * N + c];
              if (mode == kElementwise) av *= 2.0, bv -= 1.0;
              sum += av * bv;
              size += std::fabs(av * bv);
            }
            ref[e] = mode == kElementwise ? sum * 0.5 : sum;
            scale[e] = size;
          }
      const double tol = std::is_same_v<Td, float> ? std::ldexp(1.0, -19) : std::ldexp(1.0, -10);
      for (int group : {32, 64}) {
        p.group = group;
        unsigned long long tried = 0, bad = 0, cuda_beyond = 0;
        double worst_ours = 0.0, worst_cuda = 0.0;
        for (int c_row = 0; c_row < 2; ++c_row)
          for (int d_row = 0; d_row < 2; ++d_row) {
            p.c_row = c_row;
            p.d_row = d_row;
            const Tc* dc = c_row ? dc_row : dc_col;
            const int blocks = (kTiles + kThreads / group - 1) / (kThreads / group);
            CHECK(cudaMemset(dd_cuda, kPoison, nc * sizeof(Td)));
            CHECK(cudaMemset(dd_ours, kPoison, nc * sizeof(Td)));
            mma_kernel<Cuda, M, N, K, Tin, Tc, Td, RowA, RowB><<<blocks, kThreads>>>(da, db, dc, dd_cuda, p);
            mma_kernel<Ours, M, N, K, Tin, Tc, Td, RowA, RowB><<<blocks, kThreads>>>(da, db, dc, dd_ours, p);
            CHECK(cudaGetLastError());
            CHECK(cudaMemcpy(got_cuda.data(), dd_cuda, nc * sizeof(Td), cudaMemcpyDeviceToHost));
            CHECK(cudaMemcpy(got_ours.data(), dd_ours, nc * sizeof(Td), cudaMemcpyDeviceToHost));
            const int ldd = d_row ? p.ldc_row : p.ldc_col;
            std::vector<char> in_tile(p.tile_c, 0);
            for (int r = 0; r < M; ++r)
              for (int c = 0; c < N; ++c) in_tile[at(d_row, ldd, r, c)] = 1;
            for (int t = 0; t < kTiles; ++t)
              for (int i = 0; i < p.tile_c; ++i) {
                const size_t slot = static_cast<size_t>(t) * p.tile_c + i;
                ++tried;
                if (!in_tile[i]) {  // a gap: the poison, untouched, on both sides
                  bad += bits(got_ours[slot]) != bits(poison) || bits(got_cuda[slot]) != bits(poison);
                  continue;
                }
                const int r = d_row ? i / ldd : i % ldd, c = d_row ? i % ldd : i / ldd;
                const size_t e = (static_cast<size_t>(t) * M + r) * N + c;
                if (exact) {
                  const Td want = from_f<Td>(static_cast<float>(ref[e]));
                  bad += bits(got_ours[slot]) != bits(got_cuda[slot]) || bits(got_ours[slot]) != bits(want);
                } else {
                  const double err_ours = std::fabs(to_f(got_ours[slot]) - ref[e]) / scale[e];
                  const double err_cuda = std::fabs(to_f(got_cuda[slot]) - ref[e]) / scale[e];
                  worst_ours = std::max(worst_ours, err_ours);
                  worst_cuda = std::max(worst_cuda, err_cuda);
                  bad += !(err_ours <= tol);
                  cuda_beyond += !(err_cuda <= tol);
                }
              }
          }
        static const char* kModes[] = {"load", "fill", "elementwise"};
        char name[256], extra[160] = "";
        std::snprintf(name, sizeof name, "mma m%dn%dk%d %s A=%s B=%s %s-%s group=%d", M, N, K, types,
                      RowA ? "row" : "col", RowB ? "row" : "col", exact ? "exact" : "random",
                      kModes[mode], group);
        if (!exact)
          std::snprintf(extra, sizeof extra, " max_rel_err_ours=%.3g max_rel_err_cuda=%.3g cuda_beyond_tol=%llu tol=%.3g",
                        worst_ours, worst_cuda, cuda_beyond, tol);
        report(name, tried, bad, extra);
      }
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc_row));
    CHECK(cudaFree(dc_col));
    CHECK(cudaFree(dd_cuda));
    CHECK(cudaFree(dd_ours));
  }
}

template <int M, int N, int K, typename T>
static void run_roundtrip(const char* type) {
  Params p{};
  p.tiles = kTiles;
  p.ldc_row = N + 8;
  p.ldc_col = M + 8;
  p.tile_c = std::max(M * p.ldc_row, N * p.ldc_col);
  const size_t nc = static_cast<size_t>(kTiles) * p.tile_c;
  std::vector<T> src(nc);
  for (T& v : src) {  // every bit pattern: NaNs, infinities, subnormals, -0
    const unsigned long long r = next_random();
    std::memcpy(&v, &r, sizeof(T));
  }
  T* dsrc = device_copy(src);
  T *dcuda = nullptr, *dours = nullptr;
  CHECK(cudaMalloc(&dcuda, nc * sizeof(T)));
  CHECK(cudaMalloc(&dours, nc * sizeof(T)));
  std::vector<T> got_cuda(nc), got_ours(nc), want(nc);
  T poison;
  std::memset(&poison, kPoison, sizeof(T));
  for (int group : {32, 64}) {
    p.group = group;
    for (int c_row = 0; c_row < 2; ++c_row)
      for (int d_row = 0; d_row < 2; ++d_row) {
        p.c_row = c_row;
        p.d_row = d_row;
        const int blocks = (kTiles + kThreads / group - 1) / (kThreads / group);
        CHECK(cudaMemset(dcuda, kPoison, nc * sizeof(T)));
        CHECK(cudaMemset(dours, kPoison, nc * sizeof(T)));
        roundtrip_kernel<Cuda, M, N, K, T><<<blocks, kThreads>>>(dsrc, dcuda, p);
        roundtrip_kernel<Ours, M, N, K, T><<<blocks, kThreads>>>(dsrc, dours, p);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(got_cuda.data(), dcuda, nc * sizeof(T), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(got_ours.data(), dours, nc * sizeof(T), cudaMemcpyDeviceToHost));
        std::fill(want.begin(), want.end(), poison);
        const int lds = c_row ? p.ldc_row : p.ldc_col, ldd = d_row ? p.ldc_row : p.ldc_col;
        for (int t = 0; t < kTiles; ++t)
          for (int r = 0; r < M; ++r)
            for (int c = 0; c < N; ++c)
              want[static_cast<size_t>(t) * p.tile_c + at(d_row, ldd, r, c)] =
                  src[static_cast<size_t>(t) * p.tile_c + at(c_row, lds, r, c)];
        unsigned long long bad = 0;
        for (size_t i = 0; i < nc; ++i)
          bad += bits(got_ours[i]) != bits(got_cuda[i]) || bits(got_ours[i]) != bits(want[i]);
        char name[200];
        std::snprintf(name, sizeof name, "roundtrip m%dn%dk%d %s load=%s store=%s group=%d", M, N, K,
                      type, c_row ? "row" : "col", d_row ? "row" : "col", group);
        report(name, nc, bad);
      }
  }
  CHECK(cudaFree(dsrc));
  CHECK(cudaFree(dcuda));
  CHECK(cudaFree(dours));
}

template <int M, int N, int K, typename Tin, typename Tc, typename Td>
static void run_layouts(const char* types) {
  run_mma<M, N, K, Tin, Tc, Td, true, true>(types);
  run_mma<M, N, K, Tin, Tc, Td, true, false>(types);
  run_mma<M, N, K, Tin, Tc, Td, false, true>(types);
  run_mma<M, N, K, Tin, Tc, Td, false, false>(types);
}

template <int M, int N, int K>
static void run_shape() {
  run_layouts<M, N, K, __half, float, float>("half*half+float->float");
  run_layouts<M, N, K, __half, __half, __half>("half*half+half->half");
  run_layouts<M, N, K, __half, __half, float>("half*half+half->float");
  run_layouts<M, N, K, __half, float, __half>("half*half+float->half");
  run_layouts<M, N, K, __nv_bfloat16, float, float>("bf16*bf16+float->float");
  run_roundtrip<M, N, K, float>("float");
  run_roundtrip<M, N, K, __half>("half");
}

int main() {
  run_shape<16, 16, 16>();
  run_shape<32, 8, 16>();
  run_shape<8, 32, 16>();
  CHECK(cudaDeviceSynchronize());
  std::printf("failures=%d\n", g_failures);
  return g_failures ? 1 : 0;
}
