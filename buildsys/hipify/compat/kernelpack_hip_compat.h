// kernelpack's HIP compatibility layer: CUDA device functions that HIP 6.4 lacks, and the CUDA
// architecture each AMD target stands for in `#if __CUDA_ARCH__ ...` feature guards.
//
// Translated sources include this header (buildsys.hipify inserts the include where a file uses
// one of these names or compares __CUDA_ARCH__ with a value). Everything is plain C++ on 32-bit
// lanes, so the same text compiles for wave32 and wave64 targets and, with
// KERNELPACK_COMPAT_RENAME defined, under nvcc with every function renamed kp_<name>: that is
// how tests/hipify_compat_gpu.cu compares each one with CUDA's own intrinsic bit for bit.
#pragma once

#include <type_traits>

#if defined(KERNELPACK_COMPAT_RENAME)
#define KP_COMPAT(name) kp_##name
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define KP_BF16 __nv_bfloat16
#define KP_BF162 __nv_bfloat162
#else
#define KP_COMPAT(name) name
#include <hip/hip_bf16.h>
#include <hip/hip_cooperative_groups.h>
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>
#define KP_BF16 __hip_bfloat16
#define KP_BF162 __hip_bfloat162
#endif

// ---- architecture guards ------------------------------------------------------------------
// KERNELPACK_CUDA_ARCH: what `__CUDA_ARCH__` compares as (the translator rewrites value uses of
// __CUDA_ARCH__ to it). A guard asks "does this GPU have the feature?"; the value is the newest
// NVIDIA architecture whose guarded features the AMD target provides through HIP:
//   530 half arithmetic, 600 double atomicAdd, 700 16-bit atomicCAS and half atomicAdd,
//   800 bf16, 890 fp8 types (hip_fp8.h converts in software where the GPU has no fp8 unit).
// 900 (Hopper) is not claimed: code behind >= 900 is wgmma/TMA/cluster PTX, which AMD lacks.
// Every gfx9, gfx10, gfx11 and gfx12 target is 890. The host pass gets the same value, unlike
// nvcc's (where __CUDA_ARCH__ is undefined there): HIP declares its device functions in both
// passes, so a `#if __CUDA_ARCH__ < 600` fallback defined in the host pass would redefine
// HIP's atomicAdd. With one value for all targets, both passes agree.
#if !defined(KERNELPACK_CUDA_ARCH)
#if !defined(__HIP_DEVICE_COMPILE__)
#define KERNELPACK_CUDA_ARCH 890
#elif defined(__GFX9__) || defined(__GFX10__) || defined(__GFX11__) || defined(__GFX12__)
#define KERNELPACK_CUDA_ARCH 890
#else
#error "kernelpack_hip_compat.h: no CUDA architecture for this AMD target; define KERNELPACK_CUDA_ARCH"
#endif
#endif

// ---- SIMD video intrinsics (__vadd4, __vsubss2, __vcmpne4, __vsads4, ...) -------------------
// Each splits a 32-bit word into 4 byte lanes or 2 half-word lanes, applies the operation per
// lane on sign- or zero-extended values, and packs the lanes' low bits back.
namespace kernelpack_compat {

template <int Bits>
struct Lanes {
  static constexpr int count = 32 / Bits;
  static constexpr unsigned mask = (1u << Bits) - 1u;
  static constexpr int smax = (1 << (Bits - 1)) - 1;
  static constexpr int smin = -(1 << (Bits - 1));
  static constexpr int umax = (1 << Bits) - 1;
  __host__ __device__ static int s(unsigned x, int lane) {
    const int v = static_cast<int>((x >> (lane * Bits)) & mask);
    return v > smax ? v - (1 << Bits) : v;
  }
  __host__ __device__ static int u(unsigned x, int lane) {
    return static_cast<int>((x >> (lane * Bits)) & mask);
  }
  __host__ __device__ static unsigned put(int v, int lane) {
    return (static_cast<unsigned>(v) & mask) << (lane * Bits);
  }
  __host__ __device__ static int sat_s(int v) { return v < smin ? smin : (v > smax ? smax : v); }
  __host__ __device__ static int sat_u(int v) { return v < 0 ? 0 : (v > umax ? umax : v); }
};

// op(x, y) of each lane of a and b (read as signed or unsigned Bits-bit integers), each result
// handed to take(result, lane): the one lane loop of lanewise and lane_sum.
template <int Bits, bool Signed, typename Op, typename Take>
__host__ __device__ inline void over_lanes(unsigned a, unsigned b, Op op, Take take) {
  using L = Lanes<Bits>;
  for (int lane = 0; lane < L::count; ++lane) {
    const int x = Signed ? L::s(a, lane) : L::u(a, lane);
    const int y = Signed ? L::s(b, lane) : L::u(b, lane);
    take(op(x, y), lane);
  }
}

template <int Bits, bool Signed, typename Op>
__host__ __device__ inline unsigned lanewise(unsigned a, unsigned b, Op op) {
  unsigned r = 0;
  over_lanes<Bits, Signed>(a, b, op, [&r](int v, int lane) { r |= Lanes<Bits>::put(v, lane); });
  return r;
}

template <int Bits, bool Signed, typename Op>
__host__ __device__ inline unsigned lane_sum(unsigned a, unsigned b, Op op) {
  unsigned r = 0;
  over_lanes<Bits, Signed>(a, b, op, [&r](int v, int) { r += static_cast<unsigned>(v); });
  return r;
}

__host__ __device__ inline int iabs(int v) { return v < 0 ? -v : v; }
// Rounded signed average, halves away from zero on the sum's sign: (a + b + (a + b >= 0)) >> 1.
__host__ __device__ inline int avg_s(int x, int y) { return (x + y + (x + y >= 0 ? 1 : 0)) >> 1; }

}  // namespace kernelpack_compat

// Name, lane bits, signedness, per-lane expression of x and y (L is the lane type).
#define KP_SIMD2(name, bits, sgn, expr)                                              \
  __host__ __device__ inline unsigned KP_COMPAT(name)(unsigned a, unsigned b) {      \
    using L = kernelpack_compat::Lanes<bits>;                                         \
    return kernelpack_compat::lanewise<bits, sgn>(a, b, [](int x, int y) { return (expr); }); \
  }
#define KP_SIMD1(name, bits, expr)                                                   \
  __host__ __device__ inline unsigned KP_COMPAT(name)(unsigned a) {                  \
    using L = kernelpack_compat::Lanes<bits>;                                         \
    return kernelpack_compat::lanewise<bits, true>(a, 0u, [](int x, int) { return (expr); }); \
  }
#define KP_SIMD_BOTH(stem, sgn, expr) KP_SIMD2(stem##2, 16, sgn, expr) KP_SIMD2(stem##4, 8, sgn, expr)

// clang-format off
KP_SIMD1(__vabs2, 16, kernelpack_compat::iabs(x))
KP_SIMD1(__vabs4, 8, kernelpack_compat::iabs(x))
KP_SIMD1(__vabsss2, 16, L::sat_s(kernelpack_compat::iabs(x)))
KP_SIMD1(__vabsss4, 8, L::sat_s(kernelpack_compat::iabs(x)))
KP_SIMD1(__vneg2, 16, -x)
KP_SIMD1(__vneg4, 8, -x)
KP_SIMD1(__vnegss2, 16, L::sat_s(-x))
KP_SIMD1(__vnegss4, 8, L::sat_s(-x))
KP_SIMD_BOTH(__vabsdiffs, true, kernelpack_compat::iabs(x - y))
KP_SIMD_BOTH(__vabsdiffu, false, kernelpack_compat::iabs(x - y))
KP_SIMD_BOTH(__vadd, false, x + y)
KP_SIMD_BOTH(__vaddss, true, L::sat_s(x + y))
KP_SIMD_BOTH(__vaddus, false, L::sat_u(x + y))
KP_SIMD_BOTH(__vsub, false, x - y)
KP_SIMD_BOTH(__vsubss, true, L::sat_s(x - y))
KP_SIMD_BOTH(__vsubus, false, L::sat_u(x - y))
KP_SIMD_BOTH(__vavgs, true, kernelpack_compat::avg_s(x, y))
KP_SIMD_BOTH(__vavgu, false, (x + y + 1) >> 1)
KP_SIMD_BOTH(__vhaddu, false, (x + y) >> 1)
KP_SIMD_BOTH(__vmaxs, true, x > y ? x : y)
KP_SIMD_BOTH(__vmaxu, false, x > y ? x : y)
KP_SIMD_BOTH(__vmins, true, x < y ? x : y)
KP_SIMD_BOTH(__vminu, false, x < y ? x : y)
KP_SIMD_BOTH(__vcmpeq, false, x == y ? -1 : 0)
KP_SIMD_BOTH(__vcmpne, false, x != y ? -1 : 0)
KP_SIMD_BOTH(__vcmpges, true, x >= y ? -1 : 0)
KP_SIMD_BOTH(__vcmpgeu, false, x >= y ? -1 : 0)
KP_SIMD_BOTH(__vcmpgts, true, x > y ? -1 : 0)
KP_SIMD_BOTH(__vcmpgtu, false, x > y ? -1 : 0)
KP_SIMD_BOTH(__vcmples, true, x <= y ? -1 : 0)
KP_SIMD_BOTH(__vcmpleu, false, x <= y ? -1 : 0)
KP_SIMD_BOTH(__vcmplts, true, x < y ? -1 : 0)
KP_SIMD_BOTH(__vcmpltu, false, x < y ? -1 : 0)
KP_SIMD_BOTH(__vseteq, false, x == y ? 1 : 0)
KP_SIMD_BOTH(__vsetne, false, x != y ? 1 : 0)
KP_SIMD_BOTH(__vsetges, true, x >= y ? 1 : 0)
KP_SIMD_BOTH(__vsetgeu, false, x >= y ? 1 : 0)
KP_SIMD_BOTH(__vsetgts, true, x > y ? 1 : 0)
KP_SIMD_BOTH(__vsetgtu, false, x > y ? 1 : 0)
KP_SIMD_BOTH(__vsetles, true, x <= y ? 1 : 0)
KP_SIMD_BOTH(__vsetleu, false, x <= y ? 1 : 0)
KP_SIMD_BOTH(__vsetlts, true, x < y ? 1 : 0)
KP_SIMD_BOTH(__vsetltu, false, x < y ? 1 : 0)
// clang-format on

// Sums of absolute differences: one 32-bit total, not per-lane results.
__host__ __device__ inline unsigned KP_COMPAT(__vsads2)(unsigned a, unsigned b) {
  return kernelpack_compat::lane_sum<16, true>(a, b, [](int x, int y) { return kernelpack_compat::iabs(x - y); });
}
__host__ __device__ inline unsigned KP_COMPAT(__vsads4)(unsigned a, unsigned b) {
  return kernelpack_compat::lane_sum<8, true>(a, b, [](int x, int y) { return kernelpack_compat::iabs(x - y); });
}
__host__ __device__ inline unsigned KP_COMPAT(__vsadu2)(unsigned a, unsigned b) {
  return kernelpack_compat::lane_sum<16, false>(a, b, [](int x, int y) { return kernelpack_compat::iabs(x - y); });
}
__host__ __device__ inline unsigned KP_COMPAT(__vsadu4)(unsigned a, unsigned b) {
  return kernelpack_compat::lane_sum<8, false>(a, b, [](int x, int y) { return kernelpack_compat::iabs(x - y); });
}

// ---- dot products (__dp4a, __dp2a_lo, __dp2a_hi) ------------------------------------------
// 32-bit wrap-around accumulation, as the PTX dp4a/dp2a instructions do.
// AMD GPUs with 8-bit dot-product instructions take one: v_dot4_i32_i8 / v_dot4_u32_u8 (gfx906,
// gfx908, gfx90a, gfx94x, gfx950, gfx1011, gfx1012, gfx103x), v_dot4_i32_iu8 with a signedness bit
// per operand (gfx11, gfx12). Unclamped, they wrap at 32 bits as dp4a does. clang answers
// __has_builtin per target feature, so gfx900 and gfx1010, which lack them, keep the lane loop
// (the code nvcc compares with CUDA's intrinsic). Besides speed, this matters to build time: ggml's
// k-quant matrix kernels, written around dp4a, took clang 316 s per kernel for gfx942 with the
// lane loop (its register allocator) and 37 s with the instruction.
#if defined(__HIP_DEVICE_COMPILE__)
#if __has_builtin(__builtin_amdgcn_sdot4)
#define KP_SIGNED_DOT4(a, b, c) __builtin_amdgcn_sdot4((a), (b), (c), false)
#elif __has_builtin(__builtin_amdgcn_sudot4)
#define KP_SIGNED_DOT4(a, b, c) __builtin_amdgcn_sudot4(true, (a), true, (b), (c), false)
#endif
#if __has_builtin(__builtin_amdgcn_udot4)
#define KP_UNSIGNED_DOT4(a, b, c) __builtin_amdgcn_udot4((a), (b), (c), false)
#endif
#endif
__host__ __device__ inline int KP_COMPAT(__dp4a)(int a, int b, int c) {
#if defined(KP_SIGNED_DOT4)
  return KP_SIGNED_DOT4(a, b, c);
#else
  const unsigned products = kernelpack_compat::lane_sum<8, true>(
      static_cast<unsigned>(a), static_cast<unsigned>(b), [](int x, int y) { return x * y; });
  return static_cast<int>(static_cast<unsigned>(c) + products);  // wrapping, as dp4a does
#endif
}
__host__ __device__ inline unsigned KP_COMPAT(__dp4a)(unsigned a, unsigned b, unsigned c) {
#if defined(KP_UNSIGNED_DOT4)
  return KP_UNSIGNED_DOT4(a, b, c);
#else
  return c + kernelpack_compat::lane_sum<8, false>(a, b, [](int x, int y) { return x * y; });
#endif
}
__host__ __device__ inline int KP_COMPAT(__dp4a)(char4 a, char4 b, int c) {
#if defined(KP_SIGNED_DOT4)
  return KP_SIGNED_DOT4(__builtin_bit_cast(int, a), __builtin_bit_cast(int, b), c);
#else
  return c + a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
#endif
}
__host__ __device__ inline unsigned KP_COMPAT(__dp4a)(uchar4 a, uchar4 b, unsigned c) {
#if defined(KP_UNSIGNED_DOT4)
  return KP_UNSIGNED_DOT4(__builtin_bit_cast(unsigned, a), __builtin_bit_cast(unsigned, b), c);
#else
  return c + static_cast<unsigned>(a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w);
#endif
}

namespace kernelpack_compat {
// dp2a: the two 16-bit lanes of a times two bytes of b (the low pair or the high pair), plus c.
template <bool Signed>
__host__ __device__ inline unsigned dp2a(unsigned a, unsigned b, unsigned c, int first_byte) {
  using H = Lanes<16>;
  using B = Lanes<8>;
  unsigned acc = c;
  for (int lane = 0; lane < 2; ++lane) {
    const int x = Signed ? H::s(a, lane) : H::u(a, lane);
    const int y = Signed ? B::s(b, first_byte + lane) : B::u(b, first_byte + lane);
    acc += static_cast<unsigned>(x) * static_cast<unsigned>(y);
  }
  return acc;
}
}  // namespace kernelpack_compat

__host__ __device__ inline int KP_COMPAT(__dp2a_lo)(int a, int b, int c) {
  return static_cast<int>(kernelpack_compat::dp2a<true>(static_cast<unsigned>(a), static_cast<unsigned>(b), static_cast<unsigned>(c), 0));
}
__host__ __device__ inline unsigned KP_COMPAT(__dp2a_lo)(unsigned a, unsigned b, unsigned c) {
  return kernelpack_compat::dp2a<false>(a, b, c, 0);
}
__host__ __device__ inline int KP_COMPAT(__dp2a_hi)(int a, int b, int c) {
  return static_cast<int>(kernelpack_compat::dp2a<true>(static_cast<unsigned>(a), static_cast<unsigned>(b), static_cast<unsigned>(c), 2));
}
__host__ __device__ inline unsigned KP_COMPAT(__dp2a_hi)(unsigned a, unsigned b, unsigned c) {
  return kernelpack_compat::dp2a<false>(a, b, c, 2);
}

// ---- __trap -------------------------------------------------------------------------------
// Also __host__: clang's device pass checks host functions too, and ggml's GGML_ABORT (under
// `#ifdef __CUDA_ARCH__`, which hipify makes __HIP_DEVICE_COMPILE__) calls __trap from host
// functions there; nvcc's device pass never looks at them. The host side stops the program too.
__host__ __device__ inline void KP_COMPAT(__trap)() { __builtin_trap(); }

// ---- cache-hinted loads and stores on any type (int, float4, int4, ...) -------------------
// CUDA's hints (evict-first, L2 only, last use, ...) are performance advice; on AMD each is the
// plain access, streaming ones non-temporal where the type allows. HIP 6.4 declares only the
// __half/__half2 loads; these templates cover every other type (non-templates win overloads).
// __ldg (read-only cache) is the same plain load.
#define KP_LOAD(name)                                                      \
  template <typename T>                                                    \
  __device__ inline T KP_COMPAT(name)(const T* address) { return *address; }
#define KP_STORE(name)                                                     \
  template <typename T>                                                    \
  __device__ inline void KP_COMPAT(name)(T* address, T value) { *address = value; }
// In an anonymous namespace, beside HIP's own: amd_hip_fp16.h declares its __half loads in one,
// and every anonymous namespace of a translation unit is the same. A call from code in an
// anonymous namespace (kernels often keep their helpers there) finds that namespace's __ldcs and
// looks no further: declared at global scope, these templates were not found from there, and
// __ldcs of an unsigned int failed to compile. Calls from any other scope see both.
namespace {
KP_LOAD(__ldcs)
KP_LOAD(__ldcg)
KP_LOAD(__ldca)
KP_LOAD(__ldlu)
KP_LOAD(__ldcv)
KP_LOAD(__ldg)  // HIP 6.4 has __ldg for the built-in and vector types, not for bf16 or bf16x2
KP_STORE(__stcs)
KP_STORE(__stcg)
KP_STORE(__stwb)
KP_STORE(__stwt)
}  // namespace

// ---- 16-bit atomicCAS ---------------------------------------------------------------------
// A 32-bit compare-and-swap on the aligned word holding the half-word, retried while the other
// half changes under it; returns the half-word's old value like CUDA's.
__device__ inline unsigned short KP_COMPAT(atomicCAS)(unsigned short* address, unsigned short compare,
                                                      unsigned short value) {
  const unsigned long long raw = reinterpret_cast<unsigned long long>(address);
  unsigned* word = reinterpret_cast<unsigned*>(raw & ~3ull);
  const unsigned shift = (raw & 2ull) ? 16u : 0u;
  unsigned old = *reinterpret_cast<volatile unsigned*>(word);
  while (true) {
    const unsigned short current = static_cast<unsigned short>(old >> shift);
    if (current != compare) {
      return current;
    }
    const unsigned desired = (old & ~(0xffffu << shift)) | (static_cast<unsigned>(value) << shift);
    const unsigned seen = atomicCAS(word, old, desired);
    if (seen == old) {
      return current;
    }
    old = seen;
  }
}

// ---- bf16 NaN-propagating max/min (HIP has the __half ones) --------------------------------
// As PTX max.NaN/min.NaN: a NaN input gives the canonical NaN 0x7fff, and +0 is above -0.
namespace kernelpack_compat {
__device__ inline KP_BF16 bf16_bits(unsigned short bits) {
  KP_BF16 value;
  __builtin_memcpy(&value, &bits, sizeof(bits));
  return value;
}
__device__ inline unsigned short bits_bf16(KP_BF16 value) {
  unsigned short bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  return bits;
}
__device__ inline KP_BF16 bf16_pick(KP_BF16 a, KP_BF16 b, bool want_max) {
  const float x = __bfloat162float(a);
  const float y = __bfloat162float(b);
  if (x != x || y != y) {
    return bf16_bits(0x7fff);
  }
  if (x == y) {  // equal values differ only in the sign of zero: max takes +0, min takes -0
    const bool a_negative = (bits_bf16(a) & 0x8000u) != 0;
    return (a_negative == want_max) ? b : a;
  }
  return ((x > y) == want_max) ? a : b;
}
}  // namespace kernelpack_compat

__device__ inline KP_BF16 KP_COMPAT(__hmax_nan)(KP_BF16 a, KP_BF16 b) {
  return kernelpack_compat::bf16_pick(a, b, true);
}
__device__ inline KP_BF16 KP_COMPAT(__hmin_nan)(KP_BF16 a, KP_BF16 b) {
  return kernelpack_compat::bf16_pick(a, b, false);
}

// ---- integer to bf16, round to nearest even (__int2bfloat16_rn, __uint2bfloat16_rn, ...) --------
// Rounded once from the exact integer: going through float would round twice (a 32-bit integer
// just above a bf16 midpoint can round onto the midpoint in float, then to even).
namespace kernelpack_compat {
__host__ __device__ inline unsigned short magnitude_to_bf16(unsigned long long u, bool negative) {
  const unsigned short sign = negative ? 0x8000 : 0;
  if (u == 0) {
    return sign;
  }
  int e = 63;
  while (((u >> e) & 1ull) == 0) {
    --e;
  }
  unsigned long long m = u;
  if (e > 7) {
    const int shift = e - 7;
    m = u >> shift;
    const unsigned long long rest = u & ((1ull << shift) - 1ull);
    const unsigned long long half = 1ull << (shift - 1);
    if (rest > half || (rest == half && (m & 1ull))) {
      ++m;
      if (m == 256) {
        m = 128;
        ++e;
      }
    }
  } else {
    m = u << (7 - e);
  }
  return static_cast<unsigned short>(sign | ((e + 127) << 7) | (m & 0x7f));
}
}  // namespace kernelpack_compat
#define KP_INT_TO_BF16(name, type)                                                              \
  __device__ inline KP_BF16 KP_COMPAT(name)(type v) {                                           \
    const unsigned long long u = v < 0 ? 0ull - static_cast<unsigned long long>(v)              \
                                       : static_cast<unsigned long long>(v);                    \
    return kernelpack_compat::bf16_bits(kernelpack_compat::magnitude_to_bf16(u, v < 0));        \
  }
#define KP_UINT_TO_BF16(name, type)                                                             \
  __device__ inline KP_BF16 KP_COMPAT(name)(type v) {                                           \
    return kernelpack_compat::bf16_bits(kernelpack_compat::magnitude_to_bf16(v, false));        \
  }
KP_INT_TO_BF16(__int2bfloat16_rn, int)
KP_UINT_TO_BF16(__uint2bfloat16_rn, unsigned)
KP_INT_TO_BF16(__short2bfloat16_rn, short)
KP_UINT_TO_BF16(__ushort2bfloat16_rn, unsigned short)
KP_INT_TO_BF16(__ll2bfloat16_rn, long long)
KP_UINT_TO_BF16(__ull2bfloat16_rn, unsigned long long)

// ---- float to bf16, round to nearest even (__float2bfloat16_rn, __float2bfloat162_rn) --------
// HIP 6.4 has __float2bfloat16 and __float22bfloat162_rn, not these two (host and device, as in
// CUDA). A NaN becomes 0x7fff, the canonical NaN of cuda_bf16.hpp; the sign of a zero is kept.
namespace kernelpack_compat {
__host__ __device__ inline KP_BF16 float_to_bf16_rn(float value) {
  unsigned bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  const unsigned short rounded = (bits & 0x7fffffffu) > 0x7f800000u
                                     ? 0x7fff
                                     : static_cast<unsigned short>(
                                           (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  KP_BF16 result;
  __builtin_memcpy(&result, &rounded, sizeof(rounded));
  return result;
}
}  // namespace kernelpack_compat
__host__ __device__ inline KP_BF16 KP_COMPAT(__float2bfloat16_rn)(float value) {
  return kernelpack_compat::float_to_bf16_rn(value);
}
__host__ __device__ inline KP_BF162 KP_COMPAT(__float2bfloat162_rn)(float value) {
  const KP_BF16 half = kernelpack_compat::float_to_bf16_rn(value);
  return KP_BF162(half, half);
}

// ---- make_bfloat162, half tanh (htanh_approx, h2tanh_approx), __grid_constant__ -------------
// cuda_bf16.h's make_bfloat162 and CUDA 12.8's approximate half tanh, which HIP 6.4 lacks. The
// tanh is the float tanh rounded to half: within one half ulp of the exact value (PTX's
// tanh.approx.f16 promises less). A __grid_constant__ kernel parameter is read in place, never
// copied: AMD reads every kernel argument from its kernarg segment, so it asks for nothing there.
__host__ __device__ inline KP_BF162 KP_COMPAT(make_bfloat162)(KP_BF16 x, KP_BF16 y) {
  return KP_BF162(x, y);
}
__device__ inline __half KP_COMPAT(htanh_approx)(__half a) {
  return __float2half_rn(tanhf(__half2float(a)));
}
__device__ inline __half2 KP_COMPAT(h2tanh_approx)(__half2 a) {
  return __halves2half2(KP_COMPAT(htanh_approx)(__low2half(a)),
                        KP_COMPAT(htanh_approx)(__high2half(a)));
}
#if !defined(__grid_constant__)
#define __grid_constant__
#endif

// ---- bf16 shuffles (CUDA's cuda_bf16.h has them; HIP 6.4 has the __half ones only) ----------
// The 16 bits travel as an unsigned int through the 32-bit shuffle: exact for every pattern.
#if defined(KERNELPACK_COMPAT_RENAME)
#define KP_SHUFFLE_BITS(op, bits, arg, width) op##_sync(0xffffffffu, bits, arg, width)
#define KP_WARP_WIDTH 32
#else
#define KP_SHUFFLE_BITS(op, bits, arg, width) op(bits, arg, width)
#define KP_WARP_WIDTH warpSize
#endif
#define KP_BF16_SHUFFLE(op, arg_type)                                                              \
  __device__ inline KP_BF16 KP_COMPAT(op)(KP_BF16 var, arg_type arg, int width = KP_WARP_WIDTH) { \
    const unsigned bits = kernelpack_compat::bits_bf16(var);                                       \
    return kernelpack_compat::bf16_bits(static_cast<unsigned short>(KP_SHUFFLE_BITS(op, bits, arg, width))); \
  }
KP_BF16_SHUFFLE(__shfl, int)
KP_BF16_SHUFFLE(__shfl_xor, int)
KP_BF16_SHUFFLE(__shfl_up, unsigned)
KP_BF16_SHUFFLE(__shfl_down, unsigned)

// ---- 16-bit float atomicAdd (__half from sm_70, bf16 from sm_80; HIP 6.4 has neither) ---------
// A 16-bit CAS loop. The sum is taken in float and rounded once, which is the correctly rounded
// 16-bit sum (float's 24 bits are at least 2 x 11 + 2, so rounding twice cannot differ); a NaN
// sum is the canonical 0x7fff, as PTX's f16/bf16 add gives (HIP's conversions keep the payload).
namespace kernelpack_compat {
template <typename T>
struct Float16;
template <>
struct Float16<__half> {
  __device__ static float widen(__half v) { return __half2float(v); }
  __device__ static __half narrow(float v) { return __float2half(v); }
};
template <>
struct Float16<KP_BF16> {
  __device__ static float widen(KP_BF16 v) { return __bfloat162float(v); }
  __device__ static KP_BF16 narrow(float v) { return __float2bfloat16(v); }
};
template <typename T>
__device__ inline T from_bits16(unsigned short bits) {
  T value;
  __builtin_memcpy(&value, &bits, sizeof(bits));
  return value;
}
template <typename T>
__device__ inline unsigned short bits16(T value) {
  unsigned short bits;
  __builtin_memcpy(&bits, &value, sizeof(bits));
  return bits;
}
template <typename T>
__device__ inline T atomic_add16(T* address, T value) {
  unsigned short* raw = reinterpret_cast<unsigned short*>(address);
  unsigned short old = *reinterpret_cast<volatile unsigned short*>(raw);
  unsigned short assumed;
  do {
    assumed = old;
    const float sum = Float16<T>::widen(from_bits16<T>(assumed)) + Float16<T>::widen(value);
    const unsigned short bits = sum != sum ? 0x7fff : bits16(Float16<T>::narrow(sum));
    old = KP_COMPAT(atomicCAS)(raw, assumed, bits);
  } while (old != assumed);
  return from_bits16<T>(old);
}
}  // namespace kernelpack_compat

__device__ inline __half KP_COMPAT(atomicAdd)(__half* address, __half value) {
  return kernelpack_compat::atomic_add16(address, value);
}
__device__ inline KP_BF16 KP_COMPAT(atomicAdd)(KP_BF16* address, KP_BF16 value) {
  return kernelpack_compat::atomic_add16(address, value);
}

// ---- warp reductions (__reduce_add_sync, _min, _max for int and unsigned; _and, _or, _xor) -----
// CUDA's mask is 32 bits: it names lanes of a 32-lane warp, and every named lane takes part. On
// wave32 that is the wavefront; on wave64 each half of the wavefront is its own 32-lane warp, as
// the mask spells it (code that writes these keeps 32-lane lane ids and warp ids, and ggml's
// fallback reduces with width 32 too). A full mask is a butterfly of width 32; a partial mask
// reads each named lane of the thread's group in turn. Integer add/min/max/and/or/xor are
// associative and commutative (add wraps modulo 2^32 as CUDA's does), so the order does not
// change the result. The same text compiles for wave32, wave64 and, renamed, for NVIDIA.
namespace kernelpack_compat {
#if defined(KERNELPACK_COMPAT_RENAME)
template <typename T>
__device__ inline T lane_xor(T value, int offset) { return __shfl_xor_sync(0xffffffffu, value, offset, 32); }
template <typename T>
__device__ inline T lane_read(unsigned mask, T value, int lane) { return __shfl_sync(mask, value, lane, 32); }
#else
template <typename T>
__device__ inline T lane_xor(T value, int offset) { return __shfl_xor(value, offset, 32); }
template <typename T>
__device__ inline T lane_read(unsigned, T value, int lane) { return __shfl(value, lane, 32); }
#endif
template <typename T, typename Op>
__device__ inline T warp_reduce(unsigned mask, T value, Op op) {
  if (mask == 0xffffffffu) {
    for (int offset = 16; offset > 0; offset /= 2) {
      value = op(value, lane_xor(value, offset));
    }
    return value;
  }
  T result = value;
  bool first = true;
  for (unsigned rest = mask; rest != 0; rest &= rest - 1) {  // every named lane, lowest first
    const T other = lane_read(mask, value, __ffs(rest) - 1);
    result = first ? other : op(result, other);
    first = false;
  }
  return result;
}
struct add_op {
  template <typename T>
  __device__ T operator()(T a, T b) const { return static_cast<T>(static_cast<unsigned>(a) + static_cast<unsigned>(b)); }
};
struct min_op {
  template <typename T>
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
struct max_op {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};
struct and_op {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a & b; }
};
struct or_op {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a | b; }
};
struct xor_op {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a ^ b; }
};
}  // namespace kernelpack_compat

#define KP_WARP_REDUCE(name, type, op)                                              \
  __device__ inline type KP_COMPAT(name)(unsigned mask, type value) {               \
    return kernelpack_compat::warp_reduce(mask, value, kernelpack_compat::op());    \
  }
KP_WARP_REDUCE(__reduce_add_sync, int, add_op)
KP_WARP_REDUCE(__reduce_add_sync, unsigned, add_op)
KP_WARP_REDUCE(__reduce_min_sync, int, min_op)
KP_WARP_REDUCE(__reduce_min_sync, unsigned, min_op)
KP_WARP_REDUCE(__reduce_max_sync, int, max_op)
KP_WARP_REDUCE(__reduce_max_sync, unsigned, max_op)
KP_WARP_REDUCE(__reduce_and_sync, unsigned, and_op)
KP_WARP_REDUCE(__reduce_or_sync, unsigned, or_op)
KP_WARP_REDUCE(__reduce_xor_sync, unsigned, xor_op)

// ---- cooperative_groups::reduce over tiled partitions (cooperative_groups/reduce.h) --------
// A butterfly over the tile from half its size down: every lane ends with the result, and a
// tile never spans more lanes than it has, so wave32 and wave64 give the same answer.
namespace kernelpack_compat {
// A tile shuffles integers and floats; any other trivially copyable value (llm.c reduces a
// {sum, max} struct with its own operator) travels as 32-bit words, as CUDA's reduce moves it.
template <typename T, typename Shuffle>
__device__ inline T tile_shuffle(const T& value, Shuffle shuffle) {
  if constexpr (std::is_integral<T>::value || std::is_floating_point<T>::value) {
    return shuffle(value);
  } else {
    static_assert(std::is_trivially_copyable<T>::value, "cg::reduce, cg::*_scan: the value must be trivially copyable");
    constexpr unsigned kWords = (sizeof(T) + 3) / 4;
    unsigned words[kWords] = {};
    __builtin_memcpy(words, &value, sizeof(T));
    for (unsigned w = 0; w < kWords; ++w) words[w] = shuffle(words[w]);
    T result;
    __builtin_memcpy(&result, words, sizeof(T));
    return result;
  }
}
template <typename Group, typename T>
__device__ inline T tile_shfl_xor(const Group& group, const T& value, unsigned offset) {
  return tile_shuffle(value, [&](auto v) { return group.shfl_xor(v, offset); });
}
template <typename Group, typename T>
__device__ inline T tile_shfl_up(const Group& group, const T& value, unsigned delta) {
  return tile_shuffle(value, [&](auto v) { return group.shfl_up(v, delta); });
}
}  // namespace kernelpack_compat

#if defined(KERNELPACK_COMPAT_RENAME)
namespace kp_cg {
#else
namespace cooperative_groups {
#endif
template <typename T>
struct plus {
  __device__ T operator()(const T& a, const T& b) const { return a + b; }
};
template <typename T>
struct less {
  __device__ T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
template <typename T>
struct greater {
  __device__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};
template <typename T>
struct bit_and {
  __device__ T operator()(const T& a, const T& b) const { return a & b; }
};
template <typename T>
struct bit_or {
  __device__ T operator()(const T& a, const T& b) const { return a | b; }
};
template <typename T>
struct bit_xor {
  __device__ T operator()(const T& a, const T& b) const { return a ^ b; }
};
template <typename Group, typename T, typename Op>
__device__ inline T reduce(const Group& group, T value, Op op) {
  for (unsigned offset = group.size() / 2; offset > 0; offset /= 2) {
    value = op(value, kernelpack_compat::tile_shfl_xor(group, value, offset));
  }
  return value;
}

// ---- cooperative_groups::inclusive_scan / exclusive_scan over tiles (cooperative_groups/scan.h) --
// Tiles of a power-of-two size up to the wavefront (HIP's thread_block_tile; 64 only on wave64).
// The scan is CUDA's in CUDA's order: log2(size) steps, each thread combining op(own, value
// shuffled up by 1, 2, 4, ...) where it has a thread that far below it, so a float sum rounds as
// CUDA's does. exclusive_scan is the inclusive result shuffled up by one, with a value-initialized
// T at thread_rank 0 (CUDA: a default-constructed value; for an integer sum, 0). The default
// operator is plus; the value travels as 32-bit words when it is not an integer or a float.
template <typename Group, typename T, typename Op>
__device__ inline T inclusive_scan(const Group& group, T value, Op op) {
  const unsigned rank = group.thread_rank();
  for (unsigned delta = 1; delta < group.size(); delta *= 2) {
    const T below = kernelpack_compat::tile_shfl_up(group, value, delta);
    if (delta <= rank) value = op(value, below);
  }
  return value;
}
template <typename Group, typename T>
__device__ inline T inclusive_scan(const Group& group, T value) {
  return inclusive_scan(group, value, plus<T>());
}
template <typename Group, typename T, typename Op>
__device__ inline T exclusive_scan(const Group& group, T value, Op op) {
  const T inclusive = inclusive_scan(group, value, op);
  const T below = kernelpack_compat::tile_shfl_up(group, inclusive, 1);
  return group.thread_rank() == 0 ? T{} : below;
}
template <typename Group, typename T>
__device__ inline T exclusive_scan(const Group& group, T value) {
  return exclusive_scan(group, value, plus<T>());
}
}  // namespace

// ---- cuda_pipeline.h primitives (__pipeline_memcpy_async, __pipeline_commit, __pipeline_wait_prior) --
// CUDA's asynchronous copy from global to shared memory (cp.async) is done here at issue time, as
// a plain copy by the issuing thread; commit does nothing and a wait is a compiler fence. This is
// the same observable behaviour: CUDA leaves the destination unspecified until a
// __pipeline_wait_prior covering the copy returns, and makes it visible then only to the issuing
// thread (other threads need a __syncthreads() after the wait, which the code already has). So a
// program may not read the destination, or write the source, between issue and wait; a copy
// that is complete at issue is one of the executions CUDA allows, and every read after the wait
// sees the same bytes. What is lost is the overlap of the copy with the work before the wait,
// not a result. As CUDA's, the copy moves size_and_align (4, 8 or 16) bytes between addresses
// aligned to it, the last zfill of them written as zeros instead of read.
namespace kernelpack_compat {
template <typename Word>
__device__ inline void copy_word(void* dst, const void* src) {
  *static_cast<Word*>(dst) = *static_cast<const Word*>(src);
}
}  // namespace kernelpack_compat

__device__ inline void KP_COMPAT(__pipeline_memcpy_async)(void* __restrict__ dst_shared,
                                                         const void* __restrict__ src_global,
                                                         size_t size_and_align, size_t zfill = 0) {
  if (zfill == 0) {
    switch (size_and_align) {
      case 16: kernelpack_compat::copy_word<uint4>(dst_shared, src_global); return;
      case 8: kernelpack_compat::copy_word<uint2>(dst_shared, src_global); return;
      case 4: kernelpack_compat::copy_word<unsigned>(dst_shared, src_global); return;
      default: break;
    }
  }
  unsigned char* dst = static_cast<unsigned char*>(dst_shared);
  const unsigned char* src = static_cast<const unsigned char*>(src_global);
  const size_t copied = size_and_align - zfill;
  for (size_t k = 0; k < size_and_align; ++k) {
    dst[k] = k < copied ? src[k] : static_cast<unsigned char>(0);
  }
}
__device__ inline void KP_COMPAT(__pipeline_commit)() {}
__device__ inline void KP_COMPAT(__pipeline_wait_prior)(size_t) {
  asm volatile("" ::: "memory");  // a compiler fence: no access moves across the wait
}

// ---- cooperative-groups tile shuffles of any type (tile.shfl_xor(uint4, ...), __half, ...) ------
// CUDA's thread_block_tile shuffles any trivially copyable type, moving it as 32-bit words
// through the 32-bit shuffle; HIP 6.4's static_asserts an integer or floating-point type. These
// move a value of another type the same way: each word shuffled with the same lane arguments, so
// every lane receives the bits the source lane held (a value under 4 bytes travels zero-padded
// in one word). HIP's tile members get explicit specializations for the vector and 16-bit float
// types below (those CUDA 13's tiles accept: not __half2 or bf16x2), per tile size up to the
// wavefront.
namespace kernelpack_compat {
template <typename T, typename Shuffle>
__device__ inline T shuffle_words(T value, Shuffle shuffle) {
  constexpr unsigned count = (sizeof(T) + 3) / 4;
  unsigned words[count] = {};
  __builtin_memcpy(words, static_cast<const void*>(&value), sizeof(T));
  for (unsigned i = 0; i < count; ++i) {
    words[i] = shuffle(words[i]);
  }
  T result;
  __builtin_memcpy(static_cast<void*>(&result), words, sizeof(T));
  return result;
}
// any_shfl, any_shfl_xor, any_shfl_up, any_shfl_down: __shfl<member> on a value of any type.
#define KP_ANY_SHUFFLE(member, arg_type)                                                           \
  template <typename T>                                                                            \
  __device__ inline T any_##member(T value, arg_type arg, int width) {                             \
    return shuffle_words(value, [&](unsigned w) { return KP_SHUFFLE_BITS(__##member, w, arg, width); }); \
  }
KP_ANY_SHUFFLE(shfl, int)
KP_ANY_SHUFFLE(shfl_xor, unsigned)
KP_ANY_SHUFFLE(shfl_up, unsigned)
KP_ANY_SHUFFLE(shfl_down, unsigned)
#undef KP_ANY_SHUFFLE
}  // namespace kernelpack_compat

#if !defined(KERNELPACK_COMPAT_RENAME)
#define KP_TILE_SHUFFLE(size, T, member, arg_type)                                                 \
  template <> template <>                                                                          \
  __device__ inline T cooperative_groups::thread_block_tile_base<size>::member<T>(T var, arg_type arg) const { \
    return kernelpack_compat::any_##member(var, arg, size);                                        \
  }
#define KP_TILE_SHUFFLES(size, T)                                                                  \
  KP_TILE_SHUFFLE(size, T, shfl, int) KP_TILE_SHUFFLE(size, T, shfl_xor, unsigned int)             \
  KP_TILE_SHUFFLE(size, T, shfl_up, unsigned int) KP_TILE_SHUFFLE(size, T, shfl_down, unsigned int)
#define KP_TILE_SHUFFLE_TYPES(size)                                                                \
  KP_TILE_SHUFFLES(size, int2) KP_TILE_SHUFFLES(size, int3) KP_TILE_SHUFFLES(size, int4)           \
  KP_TILE_SHUFFLES(size, uint2) KP_TILE_SHUFFLES(size, uint3) KP_TILE_SHUFFLES(size, uint4)        \
  KP_TILE_SHUFFLES(size, float2) KP_TILE_SHUFFLES(size, float3) KP_TILE_SHUFFLES(size, float4)     \
  KP_TILE_SHUFFLES(size, double2) KP_TILE_SHUFFLES(size, longlong2) KP_TILE_SHUFFLES(size, char4)  \
  KP_TILE_SHUFFLES(size, uchar4) KP_TILE_SHUFFLES(size, short2) KP_TILE_SHUFFLES(size, ushort2)    \
  KP_TILE_SHUFFLES(size, __half) KP_TILE_SHUFFLES(size, KP_BF16)
// clang-format off
KP_TILE_SHUFFLE_TYPES(2) KP_TILE_SHUFFLE_TYPES(4) KP_TILE_SHUFFLE_TYPES(8) KP_TILE_SHUFFLE_TYPES(16)
KP_TILE_SHUFFLE_TYPES(32)
// 64-thread tiles where HIP allows them: its own test (is_valid_wavefront) reads this macro
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-pragma"
#if __AMDGCN_WAVEFRONT_SIZE >= 64
KP_TILE_SHUFFLE_TYPES(64)
#endif
#pragma clang diagnostic pop
// clang-format on

// ---- cooperative_groups::block_tile_memory --------------------------------------------------
// CUDA's scratch for tiles of more than 32 threads on GPUs before sm_80, handed to
// this_thread_block(scratch). HIP's tiles (up to a wavefront) need none, and the tiles of more
// than 32 threads below keep their barriers and slots in the kernel's own shared memory: the
// type is empty and this_thread_block(scratch) is this_thread_block().
namespace cooperative_groups {
template <unsigned int MaxBlockSize = 1024>
struct block_tile_memory {};
template <unsigned int MaxBlockSize>
__device__ inline thread_block this_thread_block(block_tile_memory<MaxBlockSize>&) {
  return this_thread_block();
}
}  // namespace cooperative_groups
#endif

// ---- cooperative-groups tiles of 64 to 512 threads (tiled_partition<64 .. 512>) ------------------
// CUDA builds a tile of more than 32 threads from 32-lane warps; HIP's tiles stop at the
// wavefront (a static assertion). These tiles are CUDA's, as plain code on 32-lane groups, so the
// same text serves wave32, wave64 and, renamed, NVIDIA: thread_rank, size/num_threads,
// meta_group_rank/meta_group_size, sync, and cg::reduce (the collective real code uses: cuda-samples'
// reduction). sync is a barrier of the tile's warps in shared memory (an arrival count and a
// generation per tile); tiled_partition, a collective of the whole block in CUDA too, resets the
// counts between two block barriers. reduce is CUDA's scheme in CUDA's order: each 32-lane warp
// reduces with the butterfly of a 32-thread tile (offsets 16 to 1), lane 0 puts the warp's value
// in its shared slot (values up to 8 bytes, CUDA's limit), the tile syncs, and each thread
// combines the tile's slots as the butterfly of a tile with one thread per warp would (offsets
// warps/2 to 1), keeping the value of its own warp's position; a second sync frees the slots.
namespace kernelpack_compat {
struct multi_warp_state {
  unsigned count[32];       // arrivals at each tile's barrier (a block has at most 16 such tiles)
  unsigned generation[32];  // completed barriers of each tile
  unsigned long long slot[32];  // one value per 32-lane warp of the block
};
__device__ inline multi_warp_state& multi_warp_shared() {
  __shared__ multi_warp_state state;
  return state;
}
__device__ inline unsigned block_thread_rank() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
template <typename T>
__device__ inline T warp_lane_xor(const T& value, int offset) {  // any value, width 32
  constexpr unsigned kWords = (sizeof(T) + 3) / 4;
  unsigned words[kWords] = {};
  __builtin_memcpy(words, &value, sizeof(T));
  for (unsigned w = 0; w < kWords; ++w) words[w] = lane_xor(words[w], offset);
  T result;
  __builtin_memcpy(&result, words, sizeof(T));
  return result;
}
// The warps of tile `tile` (each of its 32-lane groups arrives once, by its lane 0) wait for each
// other; shared-memory writes before it are seen by the tile after it.
__device__ inline void multi_warp_barrier(unsigned tile, unsigned warps) {
  multi_warp_state& state = multi_warp_shared();
  __threadfence_block();
  if (block_thread_rank() % 32 == 0) {
    volatile unsigned* generation = &state.generation[tile];
    const unsigned seen = *generation;
    __threadfence_block();
    if (atomicAdd(&state.count[tile], 1u) == warps - 1) {  // the last to arrive releases the rest
      state.count[tile] = 0;
      __threadfence_block();
      atomicAdd(&state.generation[tile], 1u);
    }
    // after the release, not in an else: on AMD both lanes 0 and 32 of a wave64 arrive, and a
    // waiting lane must not run ahead of the releasing lane of the same wavefront
    while (*generation == seen) {
#if defined(KERNELPACK_COMPAT_RENAME)
      __nanosleep(32);
#else
      __builtin_amdgcn_s_sleep(1);
#endif
    }
  }
#if defined(KERNELPACK_COMPAT_RENAME)
  __syncwarp();
#endif
  __threadfence_block();
}
template <unsigned Size>
struct multi_warp_tile {
  static_assert(Size == 64 || Size == 128 || Size == 256 || Size == 512,
                "kernelpack: tiles of more than 32 threads are 64, 128, 256 or 512 threads, as CUDA's");
  static constexpr unsigned warps = Size / 32;
  __device__ unsigned thread_rank() const { return block_thread_rank() % Size; }
  __device__ static constexpr unsigned size() { return Size; }
  __device__ static constexpr unsigned num_threads() { return Size; }
  __device__ unsigned meta_group_rank() const { return block_thread_rank() / Size; }
  __device__ unsigned meta_group_size() const {
    return (blockDim.x * blockDim.y * blockDim.z + Size - 1) / Size;
  }
  __device__ void sync() const { multi_warp_barrier(meta_group_rank(), warps); }
};
// The collective that makes the block's tiles: every barrier count starts at zero.
template <unsigned Size>
__device__ inline multi_warp_tile<Size> multi_warp_partition() {
  __syncthreads();  // no barrier of an earlier partition is still being left
  if (block_thread_rank() < 32) multi_warp_shared().count[block_thread_rank()] = 0;
  __syncthreads();
  return multi_warp_tile<Size>();
}
template <unsigned Size, typename T, typename Op>
__device__ inline T multi_warp_reduce(const multi_warp_tile<Size>& tile, T value, Op op) {
  static_assert(sizeof(T) <= 8, "cg::reduce: tiles of more than 32 threads reduce values of up to 8 bytes, as CUDA's");
  constexpr unsigned kWarps = Size / 32;
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, warp_lane_xor(value, offset));
  multi_warp_state& state = multi_warp_shared();
  const unsigned warp = block_thread_rank() / 32;
  if (block_thread_rank() % 32 == 0) __builtin_memcpy(&state.slot[warp], &value, sizeof(T));
  tile.sync();
  const unsigned first = warp - tile.thread_rank() / 32;
  T values[kWarps];
  for (unsigned w = 0; w < kWarps; ++w) __builtin_memcpy(&values[w], &state.slot[first + w], sizeof(T));
  for (unsigned mask = kWarps / 2; mask > 0; mask /= 2) {
    T next[kWarps];
    for (unsigned w = 0; w < kWarps; ++w) next[w] = op(values[w], values[w ^ mask]);
    for (unsigned w = 0; w < kWarps; ++w) values[w] = next[w];
  }
  tile.sync();
  return values[tile.thread_rank() / 32];
}
}  // namespace kernelpack_compat

#if defined(KERNELPACK_COMPAT_RENAME)
namespace kp_cg {
template <unsigned Size, typename T, typename Op>
__device__ inline T reduce(const kernelpack_compat::multi_warp_tile<Size>& group, T value, Op op) {
  return kernelpack_compat::multi_warp_reduce(group, value, op);
}
}  // namespace kp_cg
#else
// HIP's tile class and tiled_partition for these sizes, explicitly specialized (64 only on wave32:
// on wave64 it is HIP's own one-wavefront tile).
#define KP_MULTI_WARP_TILE(size)                                                                   \
  namespace cooperative_groups {                                                                   \
  template <>                                                                                      \
  class thread_block_tile<size, thread_block> : public kernelpack_compat::multi_warp_tile<size> {}; \
  template <>                                                                                      \
  __device__ inline thread_block_tile<size, thread_block> tiled_partition<size, thread_block>(const thread_block&) { \
    kernelpack_compat::multi_warp_partition<size>();                                              \
    return thread_block_tile<size, thread_block>();                                                \
  }                                                                                                \
  }
// clang-format off
KP_MULTI_WARP_TILE(128) KP_MULTI_WARP_TILE(256) KP_MULTI_WARP_TILE(512)
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-pragma"
#if __AMDGCN_WAVEFRONT_SIZE < 64
KP_MULTI_WARP_TILE(64)
#endif
#pragma clang diagnostic pop
// clang-format on
namespace cooperative_groups {
template <unsigned Size, typename T, typename Op>
__device__ inline T reduce(const thread_block_tile<Size, thread_block>& group, T value, Op op) {
  if constexpr (std::is_base_of<kernelpack_compat::multi_warp_tile<Size>, thread_block_tile<Size, thread_block>>::value) {
    return kernelpack_compat::multi_warp_reduce(group, value, op);
  } else {
    for (unsigned offset = Size / 2; offset > 0; offset /= 2) {
      value = op(value, kernelpack_compat::tile_shfl_xor(group, value, offset));
    }
    return value;
  }
}
}  // namespace cooperative_groups
#endif

// ---- packed 16-bit float atomicAdd (__half2 from sm_60, __nv_bfloat162 from sm_80) ----------------
// One 32-bit CAS loop over the pair: each half is the correctly rounded sum of its own lanes, as
// the PTX f16x2/bf16x2 atomic adds give (CUDA promises atomicity per half; the CAS gives it for the
// pair, which is stronger). Returns the pair's old value.
namespace kernelpack_compat {
template <typename Pair, typename T>
__device__ inline Pair atomic_add_pair(Pair* address, Pair value) {
  unsigned* raw = reinterpret_cast<unsigned*>(address);
  unsigned addend;
  __builtin_memcpy(&addend, &value, sizeof(addend));
  unsigned old = *reinterpret_cast<volatile unsigned*>(raw);
  unsigned assumed;
  do {
    assumed = old;
    unsigned sum = 0;
    for (int half = 0; half < 2; ++half) {
      const unsigned shift = 16 * half;
      const float total = Float16<T>::widen(from_bits16<T>(static_cast<unsigned short>(assumed >> shift))) +
                          Float16<T>::widen(from_bits16<T>(static_cast<unsigned short>(addend >> shift)));
      const unsigned short bits = total != total ? 0x7fff : bits16(Float16<T>::narrow(total));
      sum |= static_cast<unsigned>(bits) << shift;
    }
    old = atomicCAS(raw, assumed, sum);
  } while (old != assumed);
  Pair previous;
  __builtin_memcpy(&previous, &old, sizeof(old));
  return previous;
}
}  // namespace kernelpack_compat

__device__ inline __half2 KP_COMPAT(atomicAdd)(__half2* address, __half2 value) {
  return kernelpack_compat::atomic_add_pair<__half2, __half>(address, value);
}
__device__ inline KP_BF162 KP_COMPAT(atomicAdd)(KP_BF162* address, KP_BF162 value) {
  return kernelpack_compat::atomic_add_pair<KP_BF162, KP_BF16>(address, value);
}

// ---- min and max of mixed signedness (CUDA's math_functions.hpp) ------------------------------
// CUDA declares min/max(int, unsigned) and the long and long long pairs, comparing as unsigned
// and returning the unsigned type. HIP's device overloads are (int, int), float, double and a
// one-type template, so `min(C - 1, i + blockDim.x)` picks min(float, float) there: llm.c indexes
// arrays with it ("array subscript is not an integer").
#define KP_MIXED_MIN_MAX(Unsigned, Signed)                                                          \
  __device__ inline Unsigned KP_COMPAT(min)(Signed a, Unsigned b) {                                 \
    return static_cast<Unsigned>(a) < b ? static_cast<Unsigned>(a) : b;                            \
  }                                                                                                 \
  __device__ inline Unsigned KP_COMPAT(min)(Unsigned a, Signed b) {                                 \
    return a < static_cast<Unsigned>(b) ? a : static_cast<Unsigned>(b);                            \
  }                                                                                                 \
  __device__ inline Unsigned KP_COMPAT(max)(Signed a, Unsigned b) {                                 \
    return static_cast<Unsigned>(a) > b ? static_cast<Unsigned>(a) : b;                            \
  }                                                                                                 \
  __device__ inline Unsigned KP_COMPAT(max)(Unsigned a, Signed b) {                                 \
    return a > static_cast<Unsigned>(b) ? a : static_cast<Unsigned>(b);                            \
  }
KP_MIXED_MIN_MAX(unsigned int, int)
KP_MIXED_MIN_MAX(unsigned long, long)
KP_MIXED_MIN_MAX(unsigned long long, long long)
#undef KP_MIXED_MIN_MAX

// ---- host floating-point classification ---------------------------------------------------------
// nvcc's cuda_runtime.h brings the C library's isfinite/isnan/isinf/signbit into host code; HIP's
// header declares them for the device only, so a host helper calling isfinite (llm.c's common.h)
// finds no host overload. The standard library's, named into the global namespace, are exactly
// what nvcc's host pass calls.
#if !defined(KERNELPACK_COMPAT_RENAME)
#include <cmath>
using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;
#endif

// ---- 16-bit PTX idioms (tables.PTX_CALLS) ----------------------------------------------------------
// asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)) and its kin, as MoE and quantization headers
// write half and bf16 conversions: clang has no "h" constraint for AMD, so the translator calls
// these instead, operands in the asm's order. An "h" operand is any 16-bit object (unsigned short,
// a __half's storage), an "r" operand any 32-bit one, moved by its bits as PTX moves a register.
// The conversions round to nearest even, as .rn asks; cvt.rn.bf16.f32 gives NaN as 0x7fff, PTX's
// canonical NaN; a half NaN keeps the hardware's conversion (quiet, sign and payload as the
// instruction gives them). Packed forms put the first source in the upper half, as PTX's
// cvt.rn.f16x2.f32 d, a, b does; mov.b32 {lo, hi} lists the lower half first.
namespace kernelpack_compat {
namespace ptx {
template <typename T>
__device__ inline unsigned short bits16(const T& value) {
  static_assert(sizeof(T) == 2, "PTX \"h\" operand: a 16-bit value");
  unsigned short bits;
  __builtin_memcpy(&bits, static_cast<const void*>(&value), 2);
  return bits;
}
template <typename T>
__device__ inline unsigned bits32(const T& value) {
  static_assert(sizeof(T) == 4, "PTX \"r\"/\"f\" operand: a 32-bit value");
  unsigned bits;
  __builtin_memcpy(&bits, static_cast<const void*>(&value), 4);
  return bits;
}
template <typename T>
__device__ inline void set16(T& out, unsigned short bits) {
  static_assert(sizeof(T) == 2, "PTX \"=h\" operand: a 16-bit object");
  __builtin_memcpy(static_cast<void*>(&out), &bits, 2);
}
template <typename T>
__device__ inline void set32(T& out, unsigned bits) {
  static_assert(sizeof(T) == 4, "PTX \"=r\"/\"=f\" operand: a 32-bit object");
  __builtin_memcpy(static_cast<void*>(&out), &bits, 4);
}
__device__ inline unsigned short f16_bits(float value) {
  return __half_as_ushort(__float2half_rn(value));
}
__device__ inline unsigned short bf16_bits(float value) {
  const unsigned bits = bits32(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  return static_cast<unsigned short>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
template <typename H>
__device__ inline void cvt_rn_f16_f32(H& out, float value) {
  set16(out, f16_bits(value));
}
template <typename F, typename H>
__device__ inline void cvt_f32_f16(F& out, const H& value) {
  out = __half2float(__ushort_as_half(bits16(value)));
}
template <typename H>
__device__ inline void cvt_rn_bf16_f32(H& out, float value) {
  set16(out, bf16_bits(value));
}
template <typename F, typename H>
__device__ inline void cvt_f32_bf16(F& out, const H& value) {
  const unsigned bits = static_cast<unsigned>(bits16(value)) << 16;
  float result;
  __builtin_memcpy(&result, &bits, 4);
  out = result;
}
template <typename R>
__device__ inline void cvt_rn_f16x2_f32(R& out, float high, float low) {
  set32(out, (static_cast<unsigned>(f16_bits(high)) << 16) | f16_bits(low));
}
template <typename R>
__device__ inline void cvt_rn_bf16x2_f32(R& out, float high, float low) {
  set32(out, (static_cast<unsigned>(bf16_bits(high)) << 16) | bf16_bits(low));
}
template <typename R, typename L, typename H>
__device__ inline void mov_b32_pack(R& out, const L& low, const H& high) {
  set32(out, (static_cast<unsigned>(bits16(high)) << 16) | bits16(low));
}
template <typename L, typename H, typename R>
__device__ inline void mov_b32_unpack(L& low, H& high, const R& value) {
  const unsigned bits = bits32(value);
  set16(low, static_cast<unsigned short>(bits & 0xffffu));
  set16(high, static_cast<unsigned short>(bits >> 16));
}
template <typename D, typename S>
__device__ inline void mov_b16(D& out, const S& value) {
  set16(out, bits16(value));
}
template <typename D, typename S>
__device__ inline void mov_b32(D& out, const S& value) {
  set32(out, bits32(value));
}
}  // namespace ptx
}  // namespace kernelpack_compat
