// The HIP compatibility layer (buildsys/hipify/compat/kernelpack_hip_compat.h) compiled by nvcc
// with every function renamed kp_<name>, compared bit for bit with CUDA's own intrinsic on edge
// inputs (every byte or half-word lane from {0, 1, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x40}, all
// bf16 patterns against NaN, +-0, +-inf, denormals) and on random inputs from a counter hash.
// Prints one line per function: `name tried=N mismatches=M [first: a b got want]`; exit 1 on any
// mismatch. Built and run by tests/test_hipify_compat_gpu.py (marker gpu, needs nvcc, sm_70+).
#define KERNELPACK_COMPAT_RENAME
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <type_traits>

#include <cooperative_groups/reduce.h>
#include <cuda_pipeline.h>

#include "../buildsys/hipify/compat/kernelpack_hip_compat.h"

namespace cg = cooperative_groups;

constexpr unsigned long long kRandom = 1ull << 24;
__constant__ unsigned kEdgeBytes[8] = {0x00, 0x01, 0x7f, 0x80, 0x81, 0xfe, 0xff, 0x40};

struct Tally {
  unsigned long long tried;
  unsigned long long mismatches;
  unsigned long long first[4];  // a, b, got, want of one mismatch
  int have_first;
};

__device__ unsigned long long mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Edge word n (0..4095): each byte one of kEdgeBytes; words made of half-words 0x8000, 0x7fff,
// 0xffff, 0x0001 arise from these bytes too.
__device__ unsigned edge_word(unsigned n) {
  return kEdgeBytes[n & 7] | (kEdgeBytes[(n >> 3) & 7] << 8) | (kEdgeBytes[(n >> 6) & 7] << 16) |
         (kEdgeBytes[(n >> 9) & 7] << 24);
}

__device__ void record(Tally* t, unsigned long long tried, bool bad, unsigned long long a,
                       unsigned long long b, unsigned long long got, unsigned long long want) {
  atomicAdd(&t->tried, tried);
  if (bad) {
    atomicAdd(&t->mismatches, 1ull);
    if (atomicCAS(&t->have_first, 0, 1) == 0) {
      t->first[0] = a;
      t->first[1] = b;
      t->first[2] = got;
      t->first[3] = want;
    }
  }
}

constexpr unsigned kEdge = 4096;
constexpr unsigned long long kPairs = 1ull * kEdge * kEdge + kRandom;

#define CHECK_BINARY(name)                                                                \
  __global__ void check_##name(Tally* t) {                                                \
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;                      \
    unsigned long long tried = 0, bad_a = 0, bad_b = 0, got = 0, want = 0;                \
    bool bad = false;                                                                     \
    for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < kPairs;  \
         i += stride) {                                                                   \
      unsigned a, b;                                                                      \
      if (i < 1ull * kEdge * kEdge) {                                                     \
        a = edge_word(static_cast<unsigned>(i / kEdge));                                  \
        b = edge_word(static_cast<unsigned>(i % kEdge));                                  \
      } else {                                                                            \
        const unsigned long long r = mix(i);                                              \
        a = static_cast<unsigned>(r);                                                     \
        b = static_cast<unsigned>(r >> 32);                                               \
      }                                                                                   \
      const unsigned mine = kp_##name(a, b), theirs = name(a, b);                         \
      ++tried;                                                                            \
      if (mine != theirs && !bad) {                                                       \
        bad = true; bad_a = a; bad_b = b; got = mine; want = theirs;                      \
      } else if (mine != theirs) {                                                        \
        atomicAdd(&t->mismatches, 1ull);                                                  \
      }                                                                                   \
    }                                                                                     \
    record(t, tried, bad, bad_a, bad_b, got, want);                                       \
  }

#define CHECK_UNARY(name)                                                                 \
  __global__ void check_##name(Tally* t) {                                                \
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;                      \
    unsigned long long tried = 0, bad_a = 0, got = 0, want = 0;                           \
    bool bad = false;                                                                     \
    for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x;             \
         i < kEdge + kRandom; i += stride) {                                              \
      const unsigned a = i < kEdge ? edge_word(static_cast<unsigned>(i))                  \
                                   : static_cast<unsigned>(mix(i));                       \
      const unsigned mine = kp_##name(a), theirs = name(a);                               \
      ++tried;                                                                            \
      if (mine != theirs && !bad) {                                                       \
        bad = true; bad_a = a; got = mine; want = theirs;                                 \
      } else if (mine != theirs) {                                                        \
        atomicAdd(&t->mismatches, 1ull);                                                  \
      }                                                                                   \
    }                                                                                     \
    record(t, tried, bad, bad_a, 0, got, want);                                           \
  }

// Three-operand dot products: a and b as in CHECK_BINARY, c from the hash (edge: c in {0,
// INT_MAX, INT_MIN, -1}).
#define CHECK_DOT(name, type)                                                             \
  __global__ void check_##name##_##type(Tally* t) {                                       \
    const unsigned long long stride = 1ull * gridDim.x * blockDim.x;                      \
    const unsigned edge_c[4] = {0u, 0x7fffffffu, 0x80000000u, 0xffffffffu};               \
    unsigned long long tried = 0, bad_a = 0, bad_b = 0, got = 0, want = 0;                \
    bool bad = false;                                                                     \
    for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < kPairs;  \
         i += stride) {                                                                   \
      unsigned a, b, c;                                                                   \
      const unsigned long long r = mix(i);                                                \
      if (i < 1ull * kEdge * kEdge) {                                                     \
        a = edge_word(static_cast<unsigned>(i / kEdge));                                  \
        b = edge_word(static_cast<unsigned>(i % kEdge));                                  \
        c = edge_c[r & 3];                                                                \
      } else {                                                                            \
        a = static_cast<unsigned>(r);                                                     \
        b = static_cast<unsigned>(r >> 32);                                               \
        c = static_cast<unsigned>(mix(r));                                                \
      }                                                                                   \
      const unsigned mine = static_cast<unsigned>(                                        \
          kp_##name(static_cast<type>(a), static_cast<type>(b), static_cast<type>(c)));   \
      const unsigned theirs = static_cast<unsigned>(                                      \
          name(static_cast<type>(a), static_cast<type>(b), static_cast<type>(c)));        \
      ++tried;                                                                            \
      if (mine != theirs && !bad) {                                                       \
        bad = true; bad_a = a; bad_b = b; got = mine; want = theirs;                      \
      } else if (mine != theirs) {                                                        \
        atomicAdd(&t->mismatches, 1ull);                                                  \
      }                                                                                   \
    }                                                                                     \
    record(t, tried, bad, bad_a, bad_b, got, want);                                       \
  }

#define BOTH(m, stem) m(stem##2) m(stem##4)
BOTH(CHECK_BINARY, __vabsdiffs)
BOTH(CHECK_BINARY, __vabsdiffu)
BOTH(CHECK_BINARY, __vadd)
BOTH(CHECK_BINARY, __vaddss)
BOTH(CHECK_BINARY, __vaddus)
BOTH(CHECK_BINARY, __vsub)
BOTH(CHECK_BINARY, __vsubss)
BOTH(CHECK_BINARY, __vsubus)
BOTH(CHECK_BINARY, __vavgs)
BOTH(CHECK_BINARY, __vavgu)
BOTH(CHECK_BINARY, __vhaddu)
BOTH(CHECK_BINARY, __vmaxs)
BOTH(CHECK_BINARY, __vmaxu)
BOTH(CHECK_BINARY, __vmins)
BOTH(CHECK_BINARY, __vminu)
BOTH(CHECK_BINARY, __vcmpeq)
BOTH(CHECK_BINARY, __vcmpne)
BOTH(CHECK_BINARY, __vcmpges)
BOTH(CHECK_BINARY, __vcmpgeu)
BOTH(CHECK_BINARY, __vcmpgts)
BOTH(CHECK_BINARY, __vcmpgtu)
BOTH(CHECK_BINARY, __vcmples)
BOTH(CHECK_BINARY, __vcmpleu)
BOTH(CHECK_BINARY, __vcmplts)
BOTH(CHECK_BINARY, __vcmpltu)
BOTH(CHECK_BINARY, __vseteq)
BOTH(CHECK_BINARY, __vsetne)
BOTH(CHECK_BINARY, __vsetges)
BOTH(CHECK_BINARY, __vsetgeu)
BOTH(CHECK_BINARY, __vsetgts)
BOTH(CHECK_BINARY, __vsetgtu)
BOTH(CHECK_BINARY, __vsetles)
BOTH(CHECK_BINARY, __vsetleu)
BOTH(CHECK_BINARY, __vsetlts)
BOTH(CHECK_BINARY, __vsetltu)
BOTH(CHECK_BINARY, __vsads)
BOTH(CHECK_BINARY, __vsadu)
BOTH(CHECK_UNARY, __vabs)
BOTH(CHECK_UNARY, __vabsss)
BOTH(CHECK_UNARY, __vneg)
BOTH(CHECK_UNARY, __vnegss)
CHECK_DOT(__dp4a, int)
CHECK_DOT(__dp4a, unsigned)
CHECK_DOT(__dp2a_lo, int)
CHECK_DOT(__dp2a_lo, unsigned)
CHECK_DOT(__dp2a_hi, int)
CHECK_DOT(__dp2a_hi, unsigned)

// __dp4a on char4/uchar4: the same words seen as vectors.
__global__ void check___dp4a_char4(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  unsigned long long tried = 0;
  bool bad = false;
  unsigned long long fa = 0, fb = 0, got = 0, want = 0;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < kPairs; i += stride) {
    const unsigned long long r = mix(i);
    const unsigned a = i < 1ull * kEdge * kEdge ? edge_word(static_cast<unsigned>(i / kEdge)) : static_cast<unsigned>(r);
    const unsigned b = i < 1ull * kEdge * kEdge ? edge_word(static_cast<unsigned>(i % kEdge)) : static_cast<unsigned>(r >> 32);
    char4 ca, cb;
    uchar4 ua, ub;
    memcpy(&ca, &a, 4); memcpy(&cb, &b, 4); memcpy(&ua, &a, 4); memcpy(&ub, &b, 4);
    const int c = static_cast<int>(mix(r));
    const unsigned m1 = static_cast<unsigned>(kp___dp4a(ca, cb, c)), t1 = static_cast<unsigned>(__dp4a(ca, cb, c));
    const unsigned m2 = kp___dp4a(ua, ub, static_cast<unsigned>(c)), t2 = __dp4a(ua, ub, static_cast<unsigned>(c));
    tried += 2;
    if ((m1 != t1 || m2 != t2) && !bad) {
      bad = true; fa = a; fb = b; got = m1 != t1 ? m1 : m2; want = m1 != t1 ? t1 : t2;
    } else if (m1 != t1 || m2 != t2) {
      atomicAdd(&t->mismatches, 1ull);
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// bf16 __hmax_nan/__hmin_nan: every bf16 pattern against the edge patterns, then random pairs.
__constant__ unsigned short kEdgeBf16[16] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81,
                                             0x7fff, 0x0001, 0x8001, 0x007f, 0x3f80, 0xbf80, 0x7f7f,
                                             0xff7f, 0x0080};
template <bool Max>
__global__ void check_bf16(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  const unsigned long long total = 65536ull * 16 + kRandom;
  unsigned long long tried = 0, fa = 0, fb = 0, got = 0, want = 0;
  bool bad = false;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < total; i += stride) {
    unsigned short x, y;
    if (i < 65536ull * 16) {
      x = static_cast<unsigned short>(i >> 4);
      y = kEdgeBf16[i & 15];
    } else {
      const unsigned long long r = mix(i);
      x = static_cast<unsigned short>(r);
      y = static_cast<unsigned short>(r >> 16);
    }
    for (int order = 0; order < 2; ++order) {
      const unsigned short a = order ? y : x, b = order ? x : y;
      const __nv_bfloat16 ha = kernelpack_compat::bf16_bits(a), hb = kernelpack_compat::bf16_bits(b);
      const unsigned short mine = kernelpack_compat::bits_bf16(Max ? kp___hmax_nan(ha, hb) : kp___hmin_nan(ha, hb));
      const unsigned short theirs = kernelpack_compat::bits_bf16(Max ? __hmax_nan(ha, hb) : __hmin_nan(ha, hb));
      ++tried;
      if (mine != theirs && !bad) {
        bad = true; fa = a; fb = b; got = mine; want = theirs;
      } else if (mine != theirs) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// bf16 shuffles: every bf16 pattern (then random ones) moved by __shfl, _xor, _up, _down with
// each lane argument 0..31 and widths 32, 16, 8; the 16 bits compared with CUDA's own.
__global__ void check_bf16_shuffles(Tally* t) {
  const unsigned long long total = 65536ull * 8;
  unsigned long long tried = 0, fa = 0, fb = 0, got = 0, want = 0;
  bool bad = false;
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  for (unsigned long long base = blockIdx.x * 1ull * blockDim.x; base < total; base += stride) {
    const unsigned long long i = base + threadIdx.x;  // whole warps step together
    const unsigned short bits = i < 65536 ? static_cast<unsigned short>(i) : static_cast<unsigned short>(mix(i));
    const __nv_bfloat16 v = kernelpack_compat::bf16_bits(bits);
    const int arg = static_cast<int>((i / 32) % 32);  // one argument per warp
    const int width = 32 >> ((i / 1024) % 3);
    unsigned short mine[4], theirs[4];
    mine[0] = kernelpack_compat::bits_bf16(kp___shfl(v, arg, width));
    theirs[0] = kernelpack_compat::bits_bf16(__shfl_sync(0xffffffffu, v, arg, width));
    mine[1] = kernelpack_compat::bits_bf16(kp___shfl_xor(v, arg % width, width));
    theirs[1] = kernelpack_compat::bits_bf16(__shfl_xor_sync(0xffffffffu, v, arg % width, width));
    mine[2] = kernelpack_compat::bits_bf16(kp___shfl_up(v, static_cast<unsigned>(arg % width), width));
    theirs[2] = kernelpack_compat::bits_bf16(__shfl_up_sync(0xffffffffu, v, static_cast<unsigned>(arg % width), width));
    mine[3] = kernelpack_compat::bits_bf16(kp___shfl_down(v, static_cast<unsigned>(arg % width), width));
    theirs[3] = kernelpack_compat::bits_bf16(__shfl_down_sync(0xffffffffu, v, static_cast<unsigned>(arg % width), width));
    for (int op = 0; op < 4; ++op) {
      ++tried;
      if (mine[op] != theirs[op] && !bad) {
        bad = true; fa = bits; fb = op * 1000 + arg; got = mine[op]; want = theirs[op];
      } else if (mine[op] != theirs[op]) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// Integer to bf16 (round to nearest even): every 16-bit value, 32-bit edges around bf16
// midpoints and 2^24 random values, 64-bit values of random bit length; bits compared.
__global__ void check_int_to_bf16(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  const unsigned long long total = 65536ull + kRandom;
  unsigned long long tried = 0, fa = 0, fb = 0, got = 0, want = 0;
  bool bad = false;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < total; i += stride) {
    const unsigned long long r = mix(i ^ 0x1b16);
    unsigned short mine[6], theirs[6];
    const short s16 = static_cast<short>(i < 65536 ? i : r);
    const unsigned short u16 = static_cast<unsigned short>(i < 65536 ? i : r >> 16);
    // 32-bit: a random word, or one next to a bf16 midpoint (m << k) +- {0, 1}
    const unsigned mid = ((static_cast<unsigned>(r >> 8) | 0x100u) & 0x1ffu) << ((r >> 20) % 23);
    const unsigned u32 = (r & 3) == 0 ? mid + static_cast<unsigned>((r >> 40) % 3) - 1u : static_cast<unsigned>(r >> 7);
    const long long s64 = static_cast<long long>(mix(r) >> ((r >> 50) % 64));
    const unsigned long long u64 = mix(r + 1) >> ((r >> 56) % 64);
    mine[0] = kernelpack_compat::bits_bf16(kp___short2bfloat16_rn(s16));
    theirs[0] = kernelpack_compat::bits_bf16(__short2bfloat16_rn(s16));
    mine[1] = kernelpack_compat::bits_bf16(kp___ushort2bfloat16_rn(u16));
    theirs[1] = kernelpack_compat::bits_bf16(__ushort2bfloat16_rn(u16));
    mine[2] = kernelpack_compat::bits_bf16(kp___int2bfloat16_rn(static_cast<int>(u32)));
    theirs[2] = kernelpack_compat::bits_bf16(__int2bfloat16_rn(static_cast<int>(u32)));
    mine[3] = kernelpack_compat::bits_bf16(kp___uint2bfloat16_rn(u32));
    theirs[3] = kernelpack_compat::bits_bf16(__uint2bfloat16_rn(u32));
    mine[4] = kernelpack_compat::bits_bf16(kp___ll2bfloat16_rn((r & 4) ? -s64 : s64));
    theirs[4] = kernelpack_compat::bits_bf16(__ll2bfloat16_rn((r & 4) ? -s64 : s64));
    mine[5] = kernelpack_compat::bits_bf16(kp___ull2bfloat16_rn(u64));
    theirs[5] = kernelpack_compat::bits_bf16(__ull2bfloat16_rn(u64));
    for (int k = 0; k < 6; ++k) {
      ++tried;
      if (mine[k] != theirs[k] && !bad) {
        bad = true; fa = k; fb = r; got = mine[k]; want = theirs[k];
      } else if (mine[k] != theirs[k]) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// Float to bf16 (__float2bfloat16_rn, and both halves of __float2bfloat162_rn): every float whose
// upper half-word is any of the 65536 patterns with the low half-words at and around the rounding
// point (0x7fff, 0x8000, 0x8001, 0), then random words (NaN payloads, subnormals, infinities).
__global__ void check_float_to_bf16(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  const unsigned long long total = 4 * 65536ull + kRandom;
  const unsigned lows[4] = {0x7fffu, 0x8000u, 0x8001u, 0u};
  unsigned long long tried = 0, fa = 0, fb = 0, got = 0, want = 0;
  bool bad = false;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < total; i += stride) {
    const unsigned bits = i < 4 * 65536ull ? static_cast<unsigned>(((i >> 2) << 16) | lows[i & 3])
                                           : static_cast<unsigned>(mix(i ^ 0xf1b16));
    float f;
    memcpy(&f, &bits, sizeof(f));
    const __nv_bfloat162 mine2 = kp___float2bfloat162_rn(f), theirs2 = __float2bfloat162_rn(f);
    const unsigned short mine[3] = {kernelpack_compat::bits_bf16(kp___float2bfloat16_rn(f)),
                                    kernelpack_compat::bits_bf16(mine2.x),
                                    kernelpack_compat::bits_bf16(mine2.y)};
    const unsigned short theirs[3] = {kernelpack_compat::bits_bf16(__float2bfloat16_rn(f)),
                                      kernelpack_compat::bits_bf16(theirs2.x),
                                      kernelpack_compat::bits_bf16(theirs2.y)};
    for (int k = 0; k < 3; ++k) {
      ++tried;
      if (mine[k] != theirs[k] && !bad) {
        bad = true; fa = k; fb = bits; got = mine[k]; want = theirs[k];
      } else if (mine[k] != theirs[k]) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// make_bfloat162 (bit for bit) and the approximate half tanh, against CUDA's accurate htanh and
// h2tanh within one half ulp (the header's promise; CUDA's tanh.approx.f16 promises less), over
// every half pattern but NaNs.
__device__ int half_order(unsigned short bits) {
  return (bits & 0x8000u) ? -static_cast<int>(bits & 0x7fffu) : static_cast<int>(bits);
}
__global__ void check_bf162_and_tanh(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  unsigned long long tried = 0, fa = 0, fb = 0, got = 0, want = 0;
  bool bad = false;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < 65536ull + kRandom; i += stride) {
    const unsigned r = static_cast<unsigned>(mix(i ^ 0x7a4b));
    const unsigned short h = static_cast<unsigned short>(i < 65536 ? i : r), k = static_cast<unsigned short>(r >> 16);
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    const __nv_bfloat162 pair = kp_make_bfloat162(kernelpack_compat::bf16_bits(h), kernelpack_compat::bf16_bits(k));
    const __nv_bfloat162 theirs_pair = make_bfloat162(kernelpack_compat::bf16_bits(h), kernelpack_compat::bf16_bits(k));
    unsigned mine[4] = {kernelpack_compat::bits_bf16(pair.x), kernelpack_compat::bits_bf16(pair.y), 0, 0};
    unsigned theirs[4] = {kernelpack_compat::bits_bf16(theirs_pair.x), kernelpack_compat::bits_bf16(theirs_pair.y), 0, 0};
    if (!nan) {
      const __half x = __ushort_as_half(h);
      mine[2] = __half_as_ushort(kp_htanh_approx(x));
      theirs[2] = __half_as_ushort(htanh(x));
      const __half2 both = kp_h2tanh_approx(__halves2half2(x, x));
      mine[3] = __half_as_ushort(__high2half(both));
      theirs[3] = theirs[2];
    }
    for (int j = 0; j < 4; ++j) {
      ++tried;
      const int apart = half_order(mine[j]) - half_order(theirs[j]);
      const bool wrong = j < 2 ? mine[j] != theirs[j] : (apart > 1 || apart < -1);
      if (wrong && !bad) {
        bad = true; fa = j; fb = h; got = mine[j]; want = theirs[j];
      } else if (wrong) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, fa, fb, got, want);
}

// Cache-hinted loads and stores: each thread reads element i through both and stores it to two
// arrays through both; bytes compared on the host.
template <typename T>
__global__ void hinted(const T* in, T* out_mine, T* out_theirs, T* stores_mine, T* stores_theirs, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  switch (i % 6) {
    case 5: out_mine[i] = kp___ldg(in + i); out_theirs[i] = __ldg(in + i); break;
    case 0: out_mine[i] = kp___ldcs(in + i); out_theirs[i] = __ldcs(in + i); break;
    case 1: out_mine[i] = kp___ldcg(in + i); out_theirs[i] = __ldcg(in + i); break;
    case 2: out_mine[i] = kp___ldca(in + i); out_theirs[i] = __ldca(in + i); break;
    case 3: out_mine[i] = kp___ldlu(in + i); out_theirs[i] = __ldlu(in + i); break;
    default: out_mine[i] = kp___ldcv(in + i); out_theirs[i] = __ldcv(in + i); break;
  }
  switch (i % 4) {
    case 0: kp___stcs(stores_mine + i, in[i]); __stcs(stores_theirs + i, in[i]); break;
    case 1: kp___stcg(stores_mine + i, in[i]); __stcg(stores_theirs + i, in[i]); break;
    case 2: kp___stwb(stores_mine + i, in[i]); __stwb(stores_theirs + i, in[i]); break;
    default: kp___stwt(stores_mine + i, in[i]); __stwt(stores_theirs + i, in[i]); break;
  }
}

// 16-bit atomicCAS: thread i works on element i (neighbours share a 32-bit word), comparing with
// the current value for even i and with a random value for odd i; returns and memory compared.
template <bool Mine>
__global__ void cas16(unsigned short* data, const unsigned short* compare, const unsigned short* value,
                      unsigned short* returned, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  returned[i] = Mine ? kp_atomicCAS(data + i, compare[i], value[i]) : atomicCAS(data + i, compare[i], value[i]);
}
// Contention: every thread adds 1 to one of 4 neighbouring half-words with a CAS loop.
template <bool Mine>
__global__ void cas16_count(unsigned short* counters) {
  unsigned short* slot = counters + (threadIdx.x & 3);
  unsigned short old = *slot, seen;
  do {
    seen = old;
    old = Mine ? kp_atomicCAS(slot, seen, static_cast<unsigned short>(seen + 1))
               : atomicCAS(slot, seen, static_cast<unsigned short>(seen + 1));
  } while (old != seen);
}

// cg::reduce over tiles of 4, 8, 16, 32 with plus/less/greater/bit_xor on int, float, unsigned.
template <unsigned Size, typename T, template <typename> class OpMine, template <typename> class OpCuda>
__global__ void reduce_tiles(const T* in, T* mine, T* theirs) {
  auto tile = cg::tiled_partition<Size>(cg::this_thread_block());
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  mine[i] = kp_cg::reduce(tile, in[i], OpMine<T>());
  theirs[i] = cg::reduce(tile, in[i], OpCuda<T>());
}

// Tiles of 64 to 512 threads (kernelpack_compat::multi_warp_tile, which HIP's
// tiled_partition<64..512> becomes) against CUDA's multi-warp tiles in 1024-thread blocks: the
// tile's thread_rank, size, meta_group_rank and meta_group_size, and two cg::reduce in a row (the
// second over another thread's value reuses the shared slots), with some warps of each block made
// late by a hashed sleep so that the tile barrier is exercised.
__device__ void late(unsigned salt) {
  const unsigned long long h = mix(salt + blockIdx.x * 977ull + threadIdx.x / 32);
  if (h % 3 == 0) __nanosleep(static_cast<unsigned>(h >> 40) % 4000);
}
template <unsigned Size, typename T, template <typename> class OpMine, template <typename> class OpCuda>
__global__ void reduce_multi_warp(const T* in, T* mine, T* theirs, unsigned* shape_mine, unsigned* shape_theirs) {
  __shared__ cg::block_tile_memory<1024> scratch;  // CUDA's tiles need it before sm_80
  auto block = cg::this_thread_block(scratch);
  auto cuda_tile = cg::tiled_partition<Size>(block);
  auto my_tile = kernelpack_compat::multi_warp_partition<Size>();
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  late(1);
  const T my_first = kp_cg::reduce(my_tile, in[i], OpMine<T>());
  late(2);
  const T my_second = kp_cg::reduce(my_tile, in[i ^ 37], OpMine<T>());
  const T cuda_first = cg::reduce(cuda_tile, in[i], OpCuda<T>());
  const T cuda_second = cg::reduce(cuda_tile, in[i ^ 37], OpCuda<T>());
  mine[2 * i] = my_first;
  mine[2 * i + 1] = my_second;
  theirs[2 * i] = cuda_first;
  theirs[2 * i + 1] = cuda_second;
  shape_mine[i] = my_tile.thread_rank() | my_tile.size() << 10 | my_tile.meta_group_rank() << 20 |
                  my_tile.meta_group_size() << 26;
  shape_theirs[i] = cuda_tile.thread_rank() | static_cast<unsigned>(cuda_tile.size()) << 10 |
                    cuda_tile.meta_group_rank() << 20 | cuda_tile.meta_group_size() << 26;
}

// A struct reduced with the caller's operator (llm.c's softmax reduces {sum, max} together): the
// integer sum wraps and fmaxf drops NaNs, so any reduction order gives the same bits.
struct SumMax {
  int sum;
  float max;
};
template <typename T>
struct sum_max {
  __device__ T operator()(const T& a, const T& b) const { return {a.sum + b.sum, fmaxf(a.max, b.max)}; }
};

// __reduce_<op>_sync: each thread reduces in[i] over its warp with a full mask, or (Partial) with
// a mask drawn per warp (random, one lane, the low 16 lanes, a sparse random mask) where only the
// named lanes call; the others write the same sentinel to both outputs.
__device__ unsigned warp_mask(unsigned long long warp) {
  const unsigned long long r = mix(warp * 7919 + 17);
  unsigned mask;
  switch (r % 4) {
    case 0: mask = static_cast<unsigned>(r >> 16); break;
    case 1: mask = 1u << ((r >> 8) & 31); break;
    case 2: mask = 0x0000ffffu; break;
    default: mask = static_cast<unsigned>(r >> 8) & static_cast<unsigned>(r >> 40); break;
  }
  return mask ? mask : 0x80000000u;
}
#define REDUCE_CHECK(op, type)                                                                    \
  template <bool Partial>                                                                         \
  __global__ void reduce_##op##_##type(const type* in, type* mine, type* theirs,                  \
                                       unsigned long long* took_part) {                           \
    const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;                               \
    const unsigned mask = Partial ? warp_mask(i / 32) : 0xffffffffu;                               \
    if ((mask >> (threadIdx.x & 31)) & 1u) {                                                      \
      mine[i] = kp___reduce_##op##_sync(mask, in[i]);                                             \
      theirs[i] = __reduce_##op##_sync(mask, in[i]);                                              \
      atomicAdd(took_part, 1ull);                                                                 \
    } else {                                                                                      \
      mine[i] = theirs[i] = static_cast<type>(0x5e7e1u);                                          \
    }                                                                                             \
  }
REDUCE_CHECK(add, int)
REDUCE_CHECK(add, unsigned)
REDUCE_CHECK(min, int)
REDUCE_CHECK(min, unsigned)
REDUCE_CHECK(max, int)
REDUCE_CHECK(max, unsigned)
REDUCE_CHECK(and, unsigned)
REDUCE_CHECK(or, unsigned)
REDUCE_CHECK(xor, unsigned)

// Tile shuffles of types HIP's tiles reject (vectors, 16-bit floats): kernelpack_compat's
// word-by-word shuffle against CUDA's own thread_block_tile member, every lane with its own
// random source rank, xor mask or delta (in and beyond the tile), all four shuffles.
template <unsigned Size, typename T>
__global__ void tile_shuffles(const T* in, const unsigned* args, T* mine, T* theirs) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const auto tile = cg::tiled_partition<Size>(cg::this_thread_block());
  const T v = in[i];
  const unsigned a = args[i];
  const int source = static_cast<int>(a % (2 * Size));
  const unsigned mask = a % Size, delta = a % (Size + 2);
  mine[4 * i + 0] = kernelpack_compat::any_shfl(v, source, Size);
  theirs[4 * i + 0] = tile.shfl(v, source);
  mine[4 * i + 1] = kernelpack_compat::any_shfl_xor(v, mask, Size);
  theirs[4 * i + 1] = tile.shfl_xor(v, mask);
  mine[4 * i + 2] = kernelpack_compat::any_shfl_up(v, delta, Size);
  theirs[4 * i + 2] = tile.shfl_up(v, delta);
  mine[4 * i + 3] = kernelpack_compat::any_shfl_down(v, delta, Size);
  theirs[4 * i + 3] = tile.shfl_down(v, delta);
}

// cuda_pipeline primitives: each thread issues two batches of one copy each, with CUDA's
// primitives into one shared buffer and with the compat ones into another (poisoned
// differently), commits, waits for all but the last batch and reads the first, waits for all and
// reads the second, then after a barrier reads its neighbour's two slots (visibility to other
// threads). Size 4, 8 or 16, zfill 0..size, source and destination offsets aligned to the size,
// all from a counter hash; each copy's 16-byte slot is written out whole with its offset and size.
constexpr int kPipeThreads = 128;
constexpr size_t kPipeSource = 1 << 20;

__device__ void pipe_shape(unsigned long long id, unsigned* size, unsigned* zfill, unsigned* offset, size_t* from) {
  const unsigned long long r = mix(id ^ 0x919e11ull);
  *size = 4u << (r % 3);
  *zfill = static_cast<unsigned>((r >> 8) % (*size + 1));
  *offset = static_cast<unsigned>((r >> 16) % (16 / *size)) * *size;
  *from = static_cast<size_t>((r >> 24) % (kPipeSource / *size)) * *size;
}

__global__ void pipeline_copies(const unsigned char* src, unsigned char* mine_out, unsigned char* theirs_out,
                                unsigned* shapes) {
  __shared__ alignas(16) unsigned char mine[2 * kPipeThreads * 16];
  __shared__ alignas(16) unsigned char theirs[2 * kPipeThreads * 16];
  const int t = threadIdx.x;
  for (int k = t; k < 2 * kPipeThreads * 16; k += kPipeThreads) {
    mine[k] = 0xa5;
    theirs[k] = 0x5a;
  }
  __syncthreads();
  const unsigned long long first = (blockIdx.x * 1ull * kPipeThreads + t) * 2;
  for (int batch = 0; batch < 2; ++batch) {
    unsigned size, zfill, offset;
    size_t from;
    pipe_shape(first + batch, &size, &zfill, &offset, &from);
    const int slot = (batch * kPipeThreads + t) * 16;
    __pipeline_memcpy_async(theirs + slot + offset, src + from, size, zfill);
    kp___pipeline_memcpy_async(mine + slot + offset, src + from, size, zfill);
    __pipeline_commit();
    kp___pipeline_commit();
    shapes[(first + batch) * 2] = size | (zfill << 8) | (offset << 16);
    shapes[(first + batch) * 2 + 1] = static_cast<unsigned>(from);
  }
  auto out = [&](int batch, int owner, int part) {
    const int slot = (batch * kPipeThreads + owner) * 16;
    const size_t at = ((first + batch) * 2 + part) * 16;
    for (int k = 0; k < 16; ++k) {
      mine_out[at + k] = mine[slot + k];
      theirs_out[at + k] = theirs[slot + k];
    }
  };
  __pipeline_wait_prior(1);
  kp___pipeline_wait_prior(1);
  out(0, t, 0);
  __pipeline_wait_prior(0);
  kp___pipeline_wait_prior(0);
  out(1, t, 0);
  __syncthreads();
  out(0, (t + 1) % kPipeThreads, 1);
  out(1, (t + 1) % kPipeThreads, 1);
}

// 16-bit float atomicAdd (__half, bf16) with one adder per slot (neighbours share a 32-bit word,
// so the CAS sees the other half change): old value and addend from every 16-bit pattern against
// 16 edge patterns in both roles, then random pairs; the returned value and the slot compared.
template <typename T, bool Mine>
__global__ void add16(unsigned short* slots, const unsigned short* addend, unsigned short* returned, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  T* slot = reinterpret_cast<T*>(slots + i);
  const T value = kernelpack_compat::from_bits16<T>(addend[i]);
  returned[i] = kernelpack_compat::bits16(Mine ? kp_atomicAdd(slot, value) : atomicAdd(slot, value));
}
// Contention: 256 threads add 1.0 to each slot (integers are exact up to 256 in both formats); the
// slot must end at 256 and the returned values must be 0..255, each once.
template <typename T, bool Mine>
__global__ void add16_count(unsigned short* slots, unsigned short* returned, unsigned short one_bits) {
  const size_t slot = blockIdx.x * size_t(4) + (threadIdx.x & 3);
  T* at = reinterpret_cast<T*>(slots + slot);
  const T one = kernelpack_compat::from_bits16<T>(one_bits);
  const T old = Mine ? kp_atomicAdd(at, one) : atomicAdd(at, one);
  returned[blockIdx.x * size_t(blockDim.x) + threadIdx.x] = kernelpack_compat::bits16(old);
}

// min/max of mixed signedness: every pair of edge words (for 64-bit types, an edge word in each
// half) and random pairs, both argument orders, against CUDA's own overloads.
template <typename Signed, typename Unsigned>
__global__ void check_mixed_min_max(Tally* t) {
  const unsigned long long stride = 1ull * gridDim.x * blockDim.x;
  unsigned long long tried = 0, bad_a = 0, bad_b = 0, got = 0, want = 0;
  bool bad = false;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < kPairs; i += stride) {
    unsigned long long a, b;
    if (i < 1ull * kEdge * kEdge) {
      const unsigned ea = edge_word(static_cast<unsigned>(i / kEdge)), eb = edge_word(static_cast<unsigned>(i % kEdge));
      a = sizeof(Unsigned) == 8 ? (1ull * ea << 32) | eb : ea;
      b = sizeof(Unsigned) == 8 ? (1ull * eb << 32) | ea : eb;
    } else {
      a = mix(i);
      b = mix(i ^ 0x5bd1e995ull);
    }
    const Signed sa = static_cast<Signed>(a);
    const Unsigned ub = static_cast<Unsigned>(b);
    const Unsigned mine[4] = {kp_min(sa, ub), kp_min(ub, sa), kp_max(sa, ub), kp_max(ub, sa)};
    const Unsigned theirs[4] = {min(sa, ub), min(ub, sa), max(sa, ub), max(ub, sa)};
    for (int k = 0; k < 4; ++k) {
      ++tried;
      if (mine[k] != theirs[k] && !bad) {
        bad = true; bad_a = a; bad_b = b; got = mine[k]; want = theirs[k];
      } else if (mine[k] != theirs[k]) {
        atomicAdd(&t->mismatches, 1ull);
      }
    }
  }
  record(t, tried, bad, bad_a, bad_b, got, want);
}

// Packed atomicAdd (__half2, bf16x2), one adder per 32-bit slot: each half of the old value and
// of the addend from 16 edge patterns (16^4 combinations), then random pairs; the returned value
// and the slot compared with CUDA's.
template <typename Pair, bool Mine>
__global__ void add_pair(unsigned* slots, const unsigned* addend, unsigned* returned, size_t n) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  Pair value, old;
  std::memcpy(&value, addend + i, 4);
  Pair* slot = reinterpret_cast<Pair*>(slots + i);
  old = Mine ? kp_atomicAdd(slot, value) : atomicAdd(slot, value);
  std::memcpy(returned + i, &old, 4);
}
// Contention: 1024 threads of a block add (1, 2) to one of 4 slots (256 adders a slot): the slot
// must end at (256, 512), exact in both formats, and the low halves returned must be 0..255.
template <typename Pair, bool Mine>
__global__ void add_pair_count(unsigned* slots, unsigned* returned, unsigned one_two_bits) {
  Pair* at = reinterpret_cast<Pair*>(slots + blockIdx.x * size_t(4) + (threadIdx.x & 3));
  Pair one_two;
  std::memcpy(&one_two, &one_two_bits, 4);
  const Pair old = Mine ? kp_atomicAdd(at, one_two) : atomicAdd(at, one_two);
  std::memcpy(returned + blockIdx.x * size_t(blockDim.x) + threadIdx.x, &old, 4);
}

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      return 2;                                                                \
    }                                                                          \
  } while (0)

static int failures = 0;

static int report(const char* name, Tally* device_tally) {
  Tally t;
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&t, device_tally, sizeof(t), cudaMemcpyDeviceToHost));
  if (t.mismatches) {
    std::printf("%s tried=%llu mismatches=%llu first: a=%#llx b=%#llx got=%#llx want=%#llx\n", name, t.tried,
                t.mismatches, t.first[0], t.first[1], t.first[2], t.first[3]);
    ++failures;
  } else {
    std::printf("%s tried=%llu mismatches=0\n", name, t.tried);
  }
  CUDA_OK(cudaMemset(device_tally, 0, sizeof(Tally)));
  return 0;
}

static unsigned long long host_mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
static int check_hinted(const char* name, size_t n) {
  const size_t bytes = n * sizeof(T);
  unsigned char* host = new unsigned char[bytes];
  for (size_t k = 0; k < bytes; ++k) host[k] = static_cast<unsigned char>(host_mix(k) >> 17);
  T *in, *a, *b, *c, *d;
  CUDA_OK(cudaMalloc(&in, bytes)); CUDA_OK(cudaMalloc(&a, bytes)); CUDA_OK(cudaMalloc(&b, bytes));
  CUDA_OK(cudaMalloc(&c, bytes)); CUDA_OK(cudaMalloc(&d, bytes));
  CUDA_OK(cudaMemcpy(in, host, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(a, 0xa5, bytes)); CUDA_OK(cudaMemset(b, 0x5a, bytes));  // poisoned, differently
  CUDA_OK(cudaMemset(c, 0xa5, bytes)); CUDA_OK(cudaMemset(d, 0x5a, bytes));
  hinted<T><<<(n + 255) / 256, 256>>>(in, a, b, c, d, n);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned char *ha = new unsigned char[bytes], *hb = new unsigned char[bytes];
  size_t bad = 0;
  CUDA_OK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
  bad += std::memcmp(ha, hb, bytes) != 0 || std::memcmp(ha, host, bytes) != 0;
  CUDA_OK(cudaMemcpy(ha, c, bytes, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, d, bytes, cudaMemcpyDeviceToHost));
  bad += std::memcmp(ha, hb, bytes) != 0 || std::memcmp(ha, host, bytes) != 0;
  std::printf("loads-stores<%s> tried=%zu mismatches=%zu\n", name, 2 * n, bad);
  failures += bad != 0;
  cudaFree(in); cudaFree(a); cudaFree(b); cudaFree(c); cudaFree(d);
  delete[] host; delete[] ha; delete[] hb;
  return 0;
}

template <unsigned Size, typename T, template <typename> class OpMine, template <typename> class OpCuda>
static int check_reduce(const char* name, const T* edge, size_t edges) {
  const size_t n = 1 << 22;
  T* host = new T[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k + Size * 7919);
    if (k % 4 == 0 && edges) {
      host[k] = edge[(r >> 8) % edges];
    } else {
      static_assert(sizeof(T) <= sizeof(r), "check_reduce: values up to 8 bytes");
      std::memcpy(&host[k], &r, sizeof(T));
    }
  }
  T *in, *a, *b;
  CUDA_OK(cudaMalloc(&in, n * sizeof(T))); CUDA_OK(cudaMalloc(&a, n * sizeof(T))); CUDA_OK(cudaMalloc(&b, n * sizeof(T)));
  CUDA_OK(cudaMemcpy(in, host, n * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(a, 0xa5, n * sizeof(T))); CUDA_OK(cudaMemset(b, 0x5a, n * sizeof(T)));
  reduce_tiles<Size, T, OpMine, OpCuda><<<n / 256, 256>>>(in, a, b);
  CUDA_OK(cudaDeviceSynchronize());
  T *ha = new T[n], *hb = new T[n];
  CUDA_OK(cudaMemcpy(ha, a, n * sizeof(T), cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, n * sizeof(T), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t k = 0; k < n; ++k) bad += std::memcmp(&ha[k], &hb[k], sizeof(T)) != 0;
  std::printf("cg::reduce<%u,%s> tried=%zu mismatches=%zu\n", Size, name, n / Size, bad);
  failures += bad != 0;
  cudaFree(in); cudaFree(a); cudaFree(b);
  delete[] host; delete[] ha; delete[] hb;
  return 0;
}

template <unsigned Size, typename T, template <typename> class OpMine, template <typename> class OpCuda>
static int check_multi_warp(const char* name, const T* edge, size_t edges) {
  const size_t n = 1 << 22;
  T* host = new T[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k + Size * 104729);
    if (k % 4 == 0 && edges) {
      host[k] = edge[(r >> 8) % edges];
    } else {
      std::memcpy(&host[k], &r, sizeof(T));
    }
    // The sum of two doubles that are NaNs of different payloads has an unspecified payload (the
    // compiler may swap an add's operands; the float add gives its canonical NaN): random doubles
    // are kept NaN-free, NaNs then come only from inf + -inf, all with the same payload.
    if (std::is_same<T, double>::value && host[k] != host[k]) host[k] = static_cast<T>(k);
  }
  T *in, *a, *b;
  unsigned *sa, *sb;
  CUDA_OK(cudaMalloc(&in, n * sizeof(T))); CUDA_OK(cudaMalloc(&a, 2 * n * sizeof(T))); CUDA_OK(cudaMalloc(&b, 2 * n * sizeof(T)));
  CUDA_OK(cudaMalloc(&sa, n * sizeof(unsigned))); CUDA_OK(cudaMalloc(&sb, n * sizeof(unsigned)));
  CUDA_OK(cudaMemcpy(in, host, n * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(a, 0xa5, 2 * n * sizeof(T))); CUDA_OK(cudaMemset(b, 0x5a, 2 * n * sizeof(T)));
  CUDA_OK(cudaMemset(sa, 0xa5, n * sizeof(unsigned))); CUDA_OK(cudaMemset(sb, 0x5a, n * sizeof(unsigned)));
  reduce_multi_warp<Size, T, OpMine, OpCuda><<<n / 1024, 1024>>>(in, a, b, sa, sb);
  CUDA_OK(cudaDeviceSynchronize());
  T *ha = new T[2 * n], *hb = new T[2 * n];
  unsigned *hsa = new unsigned[n], *hsb = new unsigned[n];
  CUDA_OK(cudaMemcpy(ha, a, 2 * n * sizeof(T), cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, 2 * n * sizeof(T), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hsa, sa, n * sizeof(unsigned), cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hsb, sb, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t bad = 0, first = 2 * n;
  for (size_t k = 0; k < 2 * n; ++k) {
    const bool differ = std::memcmp(&ha[k], &hb[k], sizeof(T)) != 0;
    bad += differ;
    if (differ && first == 2 * n) first = k;
  }
  if (first < 2 * n) {
    unsigned long long got = 0, want = 0, input = 0;
    std::memcpy(&got, &ha[first], sizeof(T)); std::memcpy(&want, &hb[first], sizeof(T));
    std::memcpy(&input, &host[first / 2], sizeof(T));
    std::printf("  first mismatch: output %zu input %llx got %llx want %llx\n", first, input, got, want);
  }
  for (size_t k = 0; k < n; ++k) {
    // the shape against the definition too: rank in the tile, size, tile of the block, tiles
    const unsigned want = (k % 1024) % Size | Size << 10 | (k % 1024) / Size << 20 | (1024 / Size) << 26;
    bad += hsa[k] != hsb[k] || hsa[k] != want;
  }
  std::printf("cg::reduce<%u,%s> multi-warp tile tried=%zu mismatches=%zu\n", Size, name, 2 * n / Size, bad);
  failures += bad != 0;
  cudaFree(in); cudaFree(a); cudaFree(b); cudaFree(sa); cudaFree(sb);
  delete[] host; delete[] ha; delete[] hb; delete[] hsa; delete[] hsb;
  return 0;
}

static int check_cas16() {
  const size_t n = 1 << 22;
  unsigned short *data_h = new unsigned short[n], *cmp_h = new unsigned short[n], *val_h = new unsigned short[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k ^ 0xc0ffee);
    data_h[k] = static_cast<unsigned short>(r);
    cmp_h[k] = k % 2 == 0 ? data_h[k] : static_cast<unsigned short>(r >> 16);
    val_h[k] = static_cast<unsigned short>(r >> 32);
  }
  unsigned short *data[2], *ret[2], *cmp, *val;
  CUDA_OK(cudaMalloc(&cmp, 2 * n)); CUDA_OK(cudaMalloc(&val, 2 * n));
  CUDA_OK(cudaMemcpy(cmp, cmp_h, 2 * n, cudaMemcpyHostToDevice)); CUDA_OK(cudaMemcpy(val, val_h, 2 * n, cudaMemcpyHostToDevice));
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMalloc(&data[m], 2 * n)); CUDA_OK(cudaMalloc(&ret[m], 2 * n));
    CUDA_OK(cudaMemcpy(data[m], data_h, 2 * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(ret[m], m ? 0x5a : 0xa5, 2 * n));
  }
  cas16<true><<<n / 256, 256>>>(data[0], cmp, val, ret[0], n);
  cas16<false><<<n / 256, 256>>>(data[1], cmp, val, ret[1], n);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned short *a = new unsigned short[n], *b = new unsigned short[n];
  size_t bad = 0;
  CUDA_OK(cudaMemcpy(a, data[0], 2 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, data[1], 2 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k];
  CUDA_OK(cudaMemcpy(a, ret[0], 2 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, ret[1], 2 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k];
  // contention: 1024 blocks x 256 threads, 4 counters
  unsigned short counts[2][4];
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMemset(data[m], 0, 8));
    if (m == 0) cas16_count<true><<<1024, 256>>>(data[m]); else cas16_count<false><<<1024, 256>>>(data[m]);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(counts[m], data[m], 8, cudaMemcpyDeviceToHost));
  }
  for (int s = 0; s < 4; ++s) bad += counts[0][s] != counts[1][s] || counts[0][s] != static_cast<unsigned short>(1024 * 64);
  std::printf("atomicCAS(unsigned short) tried=%zu mismatches=%zu\n", n + 1024 * 256, bad);
  failures += bad != 0;
  return 0;
}

template <typename T>
static int check_warp_reduce(const char* name, void (*full)(const T*, T*, T*, unsigned long long*),
                             void (*partial)(const T*, T*, T*, unsigned long long*)) {
  const size_t n = 1 << 22;
  const unsigned edge[] = {0u, 1u, 0xffffffffu, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0x80000001u};
  T* host = new T[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k + 0x5eed);
    const unsigned bits = k % 4 == 0 ? edge[(r >> 8) % 7] : static_cast<unsigned>(r);
    std::memcpy(&host[k], &bits, sizeof(T));
  }
  T *in, *a, *b;
  unsigned long long* took_part;
  CUDA_OK(cudaMalloc(&in, n * sizeof(T))); CUDA_OK(cudaMalloc(&a, n * sizeof(T))); CUDA_OK(cudaMalloc(&b, n * sizeof(T)));
  CUDA_OK(cudaMalloc(&took_part, sizeof(unsigned long long)));
  CUDA_OK(cudaMemcpy(in, host, n * sizeof(T), cudaMemcpyHostToDevice));
  T *ha = new T[n], *hb = new T[n];
  for (int mode = 0; mode < 2; ++mode) {
    CUDA_OK(cudaMemset(a, 0xa5, n * sizeof(T))); CUDA_OK(cudaMemset(b, 0x5a, n * sizeof(T)));
    CUDA_OK(cudaMemset(took_part, 0, sizeof(unsigned long long)));
    (mode ? partial : full)<<<n / 256, 256>>>(in, a, b, took_part);
    CUDA_OK(cudaDeviceSynchronize());
    unsigned long long tried = 0;
    CUDA_OK(cudaMemcpy(&tried, took_part, sizeof(tried), cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(ha, a, n * sizeof(T), cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, n * sizeof(T), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t k = 0; k < n; ++k) bad += std::memcmp(&ha[k], &hb[k], sizeof(T)) != 0;
    bad += tried == 0 || (mode == 0 && tried != n);
    std::printf("%s(%s mask) tried=%llu mismatches=%zu\n", name, mode ? "partial" : "full", tried, bad);
    failures += bad != 0;
  }
  cudaFree(in); cudaFree(a); cudaFree(b); cudaFree(took_part);
  delete[] host; delete[] ha; delete[] hb;
  return 0;
}

// The 16-bit pattern of the integer k (0..256) in IEEE half (Bf16=false) or bf16.
static unsigned short integer_bits(int k, bool bf16) {
  if (k == 0) return 0;
  float f = static_cast<float>(k);
  unsigned bits;
  std::memcpy(&bits, &f, 4);
  if (bf16) return static_cast<unsigned short>(bits >> 16);
  int e = 0;
  while ((k >> (e + 1)) != 0) ++e;
  return static_cast<unsigned short>(((e + 15) << 10) | ((k << (10 - e)) & 0x3ff));
}

template <typename T>
static int check_add16(const char* name, const unsigned short (&edge)[16], bool bf16) {
  const size_t edges = 65536 * 16, n = 2 * edges + (1 << 24);
  unsigned short *start = new unsigned short[n], *addend = new unsigned short[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k ^ 0xbf16);
    if (k < edges) { start[k] = static_cast<unsigned short>(k >> 4); addend[k] = edge[k & 15]; }
    else if (k < 2 * edges) { start[k] = edge[k & 15]; addend[k] = static_cast<unsigned short>((k - edges) >> 4); }
    else { start[k] = static_cast<unsigned short>(r); addend[k] = static_cast<unsigned short>(r >> 16); }
  }
  unsigned short *slots[2], *ret[2], *add;
  CUDA_OK(cudaMalloc(&add, 2 * n));
  CUDA_OK(cudaMemcpy(add, addend, 2 * n, cudaMemcpyHostToDevice));
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMalloc(&slots[m], 2 * n)); CUDA_OK(cudaMalloc(&ret[m], 2 * n));
    CUDA_OK(cudaMemcpy(slots[m], start, 2 * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(ret[m], m ? 0x5a : 0xa5, 2 * n));
  }
  add16<T, true><<<(n + 255) / 256, 256>>>(slots[0], add, ret[0], n);
  add16<T, false><<<(n + 255) / 256, 256>>>(slots[1], add, ret[1], n);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned short *a = new unsigned short[n], *b = new unsigned short[n];
  size_t bad = 0;
  CUDA_OK(cudaMemcpy(a, slots[0], 2 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, slots[1], 2 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k];
  CUDA_OK(cudaMemcpy(a, ret[0], 2 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, ret[1], 2 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k] || a[k] != start[k];
  // contention: 4096 blocks x 1024 threads, 4 slots per block, 256 adds of 1.0 each
  int* value_of = new int[65536];
  for (int k = 0; k < 65536; ++k) value_of[k] = -1;
  for (int k = 0; k < 256; ++k) value_of[integer_bits(k, bf16)] = k;
  const size_t blocks = 4096, slot_count = blocks * 4, adds = blocks * 1024;
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMemset(slots[m], 0, 2 * slot_count));
    CUDA_OK(cudaMemset(ret[m], m ? 0x5a : 0xa5, 2 * adds));
    if (m == 0) add16_count<T, true><<<blocks, 1024>>>(slots[m], ret[m], integer_bits(1, bf16));
    else add16_count<T, false><<<blocks, 1024>>>(slots[m], ret[m], integer_bits(1, bf16));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(a, slots[m], 2 * slot_count, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < slot_count; ++k) bad += a[k] != integer_bits(256, bf16);
    CUDA_OK(cudaMemcpy(a, ret[m], 2 * adds, cudaMemcpyDeviceToHost));
    for (size_t blk = 0; blk < blocks; ++blk) {
      for (int s = 0; s < 4; ++s) {
        bool seen[256] = {};
        for (int t = s; t < 1024; t += 4) {
          const int whole = value_of[a[blk * 1024 + t]];
          if (whole < 0 || seen[whole]) { ++bad; continue; }
          seen[whole] = true;
        }
      }
    }
  }
  std::printf("atomicAdd(%s) tried=%zu mismatches=%zu\n", name, n + 2 * adds, bad);
  failures += bad != 0;
  cudaFree(add);
  for (int m = 0; m < 2; ++m) { cudaFree(slots[m]); cudaFree(ret[m]); }
  delete[] start; delete[] addend; delete[] a; delete[] b; delete[] value_of;
  return 0;
}

template <typename Pair>
static int check_add_pair(const char* name, const unsigned short (&edge)[16], bool bf16) {
  const size_t edges = 65536, n = edges + (1 << 24);
  unsigned *start = new unsigned[n], *addend = new unsigned[n];
  for (size_t k = 0; k < n; ++k) {
    const unsigned long long r = host_mix(k ^ 0xf16f16);
    if (k < edges) {
      start[k] = edge[k & 15] | (unsigned(edge[(k >> 4) & 15]) << 16);
      addend[k] = edge[(k >> 8) & 15] | (unsigned(edge[(k >> 12) & 15]) << 16);
    } else {
      start[k] = static_cast<unsigned>(r);
      addend[k] = static_cast<unsigned>(r >> 32);
    }
  }
  unsigned *slots[2], *ret[2], *add;
  CUDA_OK(cudaMalloc(&add, 4 * n));
  CUDA_OK(cudaMemcpy(add, addend, 4 * n, cudaMemcpyHostToDevice));
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMalloc(&slots[m], 4 * n)); CUDA_OK(cudaMalloc(&ret[m], 4 * n));
    CUDA_OK(cudaMemcpy(slots[m], start, 4 * n, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(ret[m], m ? 0x5a : 0xa5, 4 * n));
  }
  add_pair<Pair, true><<<(n + 255) / 256, 256>>>(slots[0], add, ret[0], n);
  add_pair<Pair, false><<<(n + 255) / 256, 256>>>(slots[1], add, ret[1], n);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned *a = new unsigned[n], *b = new unsigned[n];
  size_t bad = 0;
  CUDA_OK(cudaMemcpy(a, slots[0], 4 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, slots[1], 4 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k];
  CUDA_OK(cudaMemcpy(a, ret[0], 4 * n, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(b, ret[1], 4 * n, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k < n; ++k) bad += a[k] != b[k] || a[k] != start[k];
  const size_t blocks = 4096, slot_count = blocks * 4, adds = blocks * 1024;
  const unsigned one_two = integer_bits(1, bf16) | (unsigned(integer_bits(2, bf16)) << 16);
  const unsigned final_pair = integer_bits(256, bf16) | (unsigned(integer_bits(512, bf16)) << 16);
  int* value_of = new int[65536];
  for (int k = 0; k < 65536; ++k) value_of[k] = -1;
  for (int k = 0; k < 256; ++k) value_of[integer_bits(k, bf16)] = k;
  for (int m = 0; m < 2; ++m) {
    CUDA_OK(cudaMemset(slots[m], 0, 4 * slot_count));
    CUDA_OK(cudaMemset(ret[m], m ? 0x5a : 0xa5, 4 * adds));
    if (m == 0) add_pair_count<Pair, true><<<blocks, 1024>>>(slots[m], ret[m], one_two);
    else add_pair_count<Pair, false><<<blocks, 1024>>>(slots[m], ret[m], one_two);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(a, slots[m], 4 * slot_count, cudaMemcpyDeviceToHost));
    for (size_t k = 0; k < slot_count; ++k) bad += a[k] != final_pair;
    CUDA_OK(cudaMemcpy(a, ret[m], 4 * adds, cudaMemcpyDeviceToHost));
    for (size_t blk = 0; blk < blocks; ++blk) {
      for (int s = 0; s < 4; ++s) {
        bool seen[256] = {};
        for (int t = s; t < 1024; t += 4) {
          const int whole = value_of[a[blk * 1024 + t] & 0xffff];
          if (whole < 0 || seen[whole]) { ++bad; continue; }
          seen[whole] = true;
        }
      }
    }
  }
  std::printf("atomicAdd(%s) tried=%zu mismatches=%zu\n", name, n + 2 * adds, bad);
  failures += bad != 0;
  cudaFree(add);
  for (int m = 0; m < 2; ++m) { cudaFree(slots[m]); cudaFree(ret[m]); }
  delete[] start; delete[] addend; delete[] a; delete[] b; delete[] value_of;
  return 0;
}

static int check_atomic_add16() {
  const unsigned short bf16_edge[16] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0, 0x7f81, 0x7fff,
                                        0x0001, 0x8001, 0x007f, 0x3f80, 0xbf80, 0x7f7f, 0xff7f, 0x0080};
  const unsigned short half_edge[16] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7c01, 0x7fff,
                                        0x0001, 0x8001, 0x03ff, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x0400};
  return check_add16<__nv_bfloat16>("bf16", bf16_edge, true) || check_add16<__half>("__half", half_edge, false) ||
         check_add_pair<__nv_bfloat162>("bf16x2", bf16_edge, true) || check_add_pair<__half2>("__half2", half_edge, false);
}

template <unsigned Size, typename T>
static int check_tile_shuffles(const char* name) {
  const size_t n = 1 << 20;
  unsigned char* host = new unsigned char[n * sizeof(T)];
  unsigned* host_args = new unsigned[n];
  for (size_t k = 0; k < n * sizeof(T); ++k) host[k] = static_cast<unsigned char>(host_mix(k ^ (Size * 131)) >> 19);
  for (size_t k = 0; k < n; ++k) host_args[k] = static_cast<unsigned>(host_mix(k + 0x7113));
  T *in, *a, *b;
  unsigned* args;
  CUDA_OK(cudaMalloc(&in, n * sizeof(T))); CUDA_OK(cudaMalloc(&args, n * sizeof(unsigned)));
  CUDA_OK(cudaMalloc(&a, 4 * n * sizeof(T))); CUDA_OK(cudaMalloc(&b, 4 * n * sizeof(T)));
  CUDA_OK(cudaMemcpy(in, host, n * sizeof(T), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(args, host_args, n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(a, 0xa5, 4 * n * sizeof(T))); CUDA_OK(cudaMemset(b, 0x5a, 4 * n * sizeof(T)));
  tile_shuffles<Size, T><<<n / 256, 256>>>(in, args, a, b);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned char *ha = new unsigned char[4 * n * sizeof(T)], *hb = new unsigned char[4 * n * sizeof(T)];
  CUDA_OK(cudaMemcpy(ha, a, 4 * n * sizeof(T), cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, 4 * n * sizeof(T), cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t k = 0; k < 4 * n; ++k) bad += std::memcmp(ha + k * sizeof(T), hb + k * sizeof(T), sizeof(T)) != 0;
  std::printf("tile.shfl/shfl_xor/shfl_up/shfl_down<%s,%u> tried=%zu mismatches=%zu\n", name, Size, 4 * n, bad);
  failures += bad != 0;
  cudaFree(in); cudaFree(args); cudaFree(a); cudaFree(b);
  delete[] host; delete[] host_args; delete[] ha; delete[] hb;
  return 0;
}

// Each copy's slot (own read after the waits, and the neighbour's read after the barrier) must
// be, in both buffers, the source bytes then zeros where the copy wrote and each buffer's own
// poison elsewhere: mine == theirs == that expectation, computed here from the source.
static int check_pipeline() {
  const int blocks = 8192;
  const size_t copies = size_t(blocks) * kPipeThreads * 2, out_bytes = copies * 2 * 16;
  unsigned char* host = new unsigned char[kPipeSource];
  for (size_t k = 0; k < kPipeSource; ++k) host[k] = static_cast<unsigned char>(host_mix(k ^ 0x5eed5) >> 13);
  unsigned char *src, *a, *b;
  unsigned* shapes;
  CUDA_OK(cudaMalloc(&src, kPipeSource)); CUDA_OK(cudaMalloc(&a, out_bytes)); CUDA_OK(cudaMalloc(&b, out_bytes));
  CUDA_OK(cudaMalloc(&shapes, copies * 2 * sizeof(unsigned)));
  CUDA_OK(cudaMemcpy(src, host, kPipeSource, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(a, 0x11, out_bytes)); CUDA_OK(cudaMemset(b, 0x22, out_bytes));
  CUDA_OK(cudaMemset(shapes, 0xff, copies * 2 * sizeof(unsigned)));
  pipeline_copies<<<blocks, kPipeThreads>>>(src, a, b, shapes);
  CUDA_OK(cudaDeviceSynchronize());
  unsigned char *ha = new unsigned char[out_bytes], *hb = new unsigned char[out_bytes];
  unsigned* hs = new unsigned[copies * 2];
  CUDA_OK(cudaMemcpy(ha, a, out_bytes, cudaMemcpyDeviceToHost)); CUDA_OK(cudaMemcpy(hb, b, out_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(hs, shapes, copies * 2 * sizeof(unsigned), cudaMemcpyDeviceToHost));
  size_t bad = 0, zero_filled = 0;
  for (size_t c = 0; c < copies; ++c) {
    const unsigned size = hs[2 * c] & 0xff, zfill = (hs[2 * c] >> 8) & 0xff, offset = hs[2 * c] >> 16;
    const size_t from = hs[2 * c + 1];
    bool wrong = (size != 4 && size != 8 && size != 16) || zfill > size || from + size > kPipeSource;
    zero_filled += zfill;
    // the neighbour's reads of copy c land in the part-1 record of the copy with c's batch of the
    // thread before it in the block
    const size_t block = c / (2 * kPipeThreads), within = c % (2 * kPipeThreads);
    const size_t thread = within / 2, batch = within % 2;
    const size_t reader = block * 2 * kPipeThreads + ((thread + kPipeThreads - 1) % kPipeThreads) * 2 + batch;
    for (int part = 0; part < 2 && !wrong; ++part) {
      const size_t at = (part == 0 ? c * 2 : reader * 2 + 1) * 16;
      for (unsigned k = 0; k < 16; ++k) {
        const bool written = k >= offset && k < offset + size;
        const unsigned char want_data = k - offset < size - zfill ? host[from + (k - offset)] : 0;
        wrong |= ha[at + k] != (written ? want_data : 0xa5) || hb[at + k] != (written ? want_data : 0x5a);
      }
    }
    bad += wrong;
  }
  std::printf("__pipeline_memcpy_async/__pipeline_commit/__pipeline_wait_prior tried=%zu mismatches=%zu (zero-filled bytes %zu)\n",
              copies, bad, zero_filled);
  failures += bad != 0;
  cudaFree(src); cudaFree(a); cudaFree(b); cudaFree(shapes);
  delete[] host; delete[] ha; delete[] hb; delete[] hs;
  return 0;
}

int main() {
  Tally* tally;
  CUDA_OK(cudaMalloc(&tally, sizeof(Tally)));
  CUDA_OK(cudaMemset(tally, 0, sizeof(Tally)));
  const int blocks = 2048, threads = 256;
#define RUN(kernel, label) kernel<<<blocks, threads>>>(tally); if (report(label, tally)) return 2;
#define RUN_BOTH(stem) RUN(check_##stem##2, #stem "2") RUN(check_##stem##4, #stem "4")
  RUN_BOTH(__vabsdiffs) RUN_BOTH(__vabsdiffu) RUN_BOTH(__vadd) RUN_BOTH(__vaddss) RUN_BOTH(__vaddus)
  RUN_BOTH(__vsub) RUN_BOTH(__vsubss) RUN_BOTH(__vsubus) RUN_BOTH(__vavgs) RUN_BOTH(__vavgu)
  RUN_BOTH(__vhaddu) RUN_BOTH(__vmaxs) RUN_BOTH(__vmaxu) RUN_BOTH(__vmins) RUN_BOTH(__vminu)
  RUN_BOTH(__vcmpeq) RUN_BOTH(__vcmpne) RUN_BOTH(__vcmpges) RUN_BOTH(__vcmpgeu) RUN_BOTH(__vcmpgts)
  RUN_BOTH(__vcmpgtu) RUN_BOTH(__vcmples) RUN_BOTH(__vcmpleu) RUN_BOTH(__vcmplts) RUN_BOTH(__vcmpltu)
  RUN_BOTH(__vseteq) RUN_BOTH(__vsetne) RUN_BOTH(__vsetges) RUN_BOTH(__vsetgeu) RUN_BOTH(__vsetgts)
  RUN_BOTH(__vsetgtu) RUN_BOTH(__vsetles) RUN_BOTH(__vsetleu) RUN_BOTH(__vsetlts) RUN_BOTH(__vsetltu)
  RUN_BOTH(__vsads) RUN_BOTH(__vsadu) RUN_BOTH(__vabs) RUN_BOTH(__vabsss) RUN_BOTH(__vneg) RUN_BOTH(__vnegss)
  RUN(check___dp4a_int, "__dp4a(int)") RUN(check___dp4a_unsigned, "__dp4a(unsigned)")
  RUN(check___dp4a_char4, "__dp4a(char4/uchar4)")
  RUN(check___dp2a_lo_int, "__dp2a_lo(int)") RUN(check___dp2a_lo_unsigned, "__dp2a_lo(unsigned)")
  RUN(check___dp2a_hi_int, "__dp2a_hi(int)") RUN(check___dp2a_hi_unsigned, "__dp2a_hi(unsigned)")
  RUN(check_bf16<true>, "__hmax_nan(bf16)") RUN(check_bf16<false>, "__hmin_nan(bf16)")
  RUN(check_bf16_shuffles, "__shfl/__shfl_xor/__shfl_up/__shfl_down(bf16)")
  RUN((check_mixed_min_max<int, unsigned>), "min/max(int, unsigned)")
  RUN((check_mixed_min_max<long, unsigned long>), "min/max(long, unsigned long)")
  RUN((check_mixed_min_max<long long, unsigned long long>), "min/max(long long, unsigned long long)")
  RUN(check_int_to_bf16, "__short2bfloat16_rn/__ushort2bfloat16_rn/__int2bfloat16_rn/__uint2bfloat16_rn/__ll2bfloat16_rn/__ull2bfloat16_rn")
  RUN(check_float_to_bf16, "__float2bfloat16_rn/__float2bfloat162_rn")
  RUN(check_bf162_and_tanh, "make_bfloat162/htanh_approx/h2tanh_approx")
  const size_t n = 1 << 20;
  if (check_hinted<int>("int", n) || check_hinted<float>("float", n) || check_hinted<float2>("float2", n) ||
      check_hinted<float4>("float4", n) || check_hinted<int4>("int4", n) || check_hinted<uint2>("uint2", n) ||
      check_hinted<double>("double", n) || check_hinted<__half>("__half", n) || check_hinted<char4>("char4", n))
    return 2;
  if (check_cas16()) return 2;
  const unsigned fbits[] = {0x00000000u, 0x80000000u, 0x7fc00000u, 0x7f800001u, 0x7f800000u,
                            0xff800000u, 0x00000001u, 0x80000001u, 0x3f800000u, 0xbf800000u};
  float fedge[sizeof(fbits) / sizeof(fbits[0])];
  std::memcpy(fedge, fbits, sizeof(fbits));
  const int iedge[] = {0, -1, 1, 0x7fffffff, static_cast<int>(0x80000000u)};
  const size_t nf = sizeof(fedge) / sizeof(fedge[0]), ni = sizeof(iedge) / sizeof(iedge[0]);
  if (check_reduce<4, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_reduce<8, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_reduce<16, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_reduce<32, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_reduce<32, float, kp_cg::less, cg::less>("less<float>", fedge, nf) ||
      check_reduce<16, float, kp_cg::greater, cg::greater>("greater<float>", fedge, nf) ||
      check_reduce<32, float, kp_cg::greater, cg::greater>("greater<float>", fedge, nf) ||
      check_reduce<32, int, kp_cg::plus, cg::plus>("plus<int>", iedge, ni) ||
      check_reduce<8, int, kp_cg::less, cg::less>("less<int>", iedge, ni) ||
      check_reduce<32, int, kp_cg::greater, cg::greater>("greater<int>", iedge, ni) ||
      check_reduce<32, unsigned, kp_cg::bit_xor, cg::bit_xor>("bit_xor<unsigned>", nullptr, 0) ||
      check_reduce<16, unsigned, kp_cg::bit_and, cg::bit_and>("bit_and<unsigned>", nullptr, 0) ||
      check_reduce<32, unsigned, kp_cg::bit_or, cg::bit_or>("bit_or<unsigned>", nullptr, 0) ||
      check_reduce<32, SumMax, sum_max, sum_max>("sum_max<struct>", nullptr, 0) ||
      check_reduce<8, SumMax, sum_max, sum_max>("sum_max<struct>", nullptr, 0))
    return 2;
  const unsigned long long dbits[] = {0x0ull, 0x8000000000000000ull, 0x7ff0000000000000ull,
                                      0xfff0000000000000ull, 0x1ull, 0x8000000000000001ull,
                                      0x7fefffffffffffffull, 0x3ff0000000000000ull};
  double dedge[sizeof(dbits) / sizeof(dbits[0])];
  std::memcpy(dedge, dbits, sizeof(dbits));
  const size_t nd = sizeof(dedge) / sizeof(dedge[0]);
  // float min/max are left out here: with NaN or +-0 the lanes of a warp disagree, and CUDA keeps
  // the value of an unspecified lane of each warp
  if (check_multi_warp<64, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_multi_warp<128, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_multi_warp<256, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_multi_warp<512, float, kp_cg::plus, cg::plus>("plus<float>", fedge, nf) ||
      check_multi_warp<512, double, kp_cg::plus, cg::plus>("plus<double>", dedge, nd) ||
      check_multi_warp<128, int, kp_cg::plus, cg::plus>("plus<int>", iedge, ni) ||
      check_multi_warp<256, int, kp_cg::less, cg::less>("less<int>", iedge, ni) ||
      check_multi_warp<64, int, kp_cg::greater, cg::greater>("greater<int>", iedge, ni) ||
      check_multi_warp<512, unsigned, kp_cg::bit_xor, cg::bit_xor>("bit_xor<unsigned>", nullptr, 0))
    return 2;
  if (check_atomic_add16()) return 2;
  if (check_pipeline()) return 2;
  if (check_tile_shuffles<32, uint4>("uint4") || check_tile_shuffles<8, uint4>("uint4") ||
      check_tile_shuffles<32, float3>("float3") || check_tile_shuffles<16, double2>("double2") ||
      check_tile_shuffles<32, __half>("__half") || check_tile_shuffles<4, __half>("__half") ||
      check_tile_shuffles<32, __nv_bfloat16>("bf16") || check_tile_shuffles<32, char4>("char4"))
    return 2;
#define WARP_REDUCE(op, type, label) \
  if (check_warp_reduce<type>(label, reduce_##op##_##type<false>, reduce_##op##_##type<true>)) return 2;
  WARP_REDUCE(add, int, "__reduce_add_sync(int)") WARP_REDUCE(add, unsigned, "__reduce_add_sync(unsigned)")
  WARP_REDUCE(min, int, "__reduce_min_sync(int)") WARP_REDUCE(min, unsigned, "__reduce_min_sync(unsigned)")
  WARP_REDUCE(max, int, "__reduce_max_sync(int)") WARP_REDUCE(max, unsigned, "__reduce_max_sync(unsigned)")
  WARP_REDUCE(and, unsigned, "__reduce_and_sync(unsigned)") WARP_REDUCE(or, unsigned, "__reduce_or_sync(unsigned)")
  WARP_REDUCE(xor, unsigned, "__reduce_xor_sync(unsigned)")
  std::printf("functions with mismatches: %d\n", failures);
  return failures ? 1 : 0;
}
