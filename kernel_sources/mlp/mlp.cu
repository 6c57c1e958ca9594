// The MLP kernels of LLaMA-style transformer blocks: SwiGLU and RMSNorm, forward and backward.
//
// Each kernel is a template for float, __half and __nv_bfloat16 (mlp::swiglu<float>); arithmetic is
// in float32 whatever the storage type. All of them are bound by memory bandwidth, so the work is
// in moving 16-byte vectors: a kernel checks the alignment of its pointers (and of the row
// stride) itself and takes the vector path when they allow it, the scalar path otherwise, so a
// misaligned view is slower but never wrong; the exact elementwise forms alone leave the test to
// the host, which launches them only on aligned pointers. Indices
// are 64-bit (32-bit inside one row of RMSNorm, whose rows are at most 2**30 elements, and in the
// exact elementwise forms).
//
// Launch geometry (chosen by kernelpack.mlp; any grid gives the right answer, the loops stride,
// except in the exact forms):
//   swiglu_*, swiglu_backward_*
//                            1-D grid over the elements, blocks of kElementwiseBlockThreads; a
//                            grid with a thread for every 8-byte chunk gets 8-byte vectors.
//   swiglu_exact_*, silu_and_mul_exact_* and their backwards
//                            (T, BYTES): as the general ones, but the grid must have a thread
//                            for every BYTES-byte vector (grid.y one a row), the row be a whole
//                            number of them, every pointer BYTES-aligned and the arrays hold
//                            fewer than 2**31 elements (ops.mlp.geometry.exact_vector_bytes);
//                            the arguments are the general kernel's (rows unread). Their
//                            *_exact_streaming forms (T): the same at BYTES 16; the backwards'
//                            plain forms at BYTES 8 alone.
//   rms_norm_weight_grad_*, rms_norm_weight_grad_inputs_*
//                            grid.x over the columns, blockDim.x columns by blockDim.y slices
//                            of the rows (of `partial`, or of the inputs and the forward's row
//                            scales), at most kWeightGradThreads threads.
//   silu_and_mul_*, silu_and_mul_backward_*
//                            grid.x over the columns of the output, grid.y over the rows; blocks
//                            of at most kElementwiseBlockThreads (8-byte vectors as swiglu's).
//   rms_norm_*, add_rms_norm_*
//                            blockDim.x threads per row (a power of two up to 64, a multiple of
//                            64 past it), blockDim.y rows per block, at most kRowBlockThreads
//                            threads; grid-stride over the rows.
//   rms_norm_short_*, add_rms_norm_short_*
//                            one row a block at a time (grid-stride), blockDim.x threads (a power
//                            of two, at most kShortRowThreads), blockDim.y == 1; a thread takes
//                            one or two vectors of a row (the scalar loop past that).
//   rms_norm_fixed_*, rms_norm_fixed_full_*, add_rms_norm_fixed_*, add_rms_norm_fixed_full_*
//                            (T, COLS): exact, as the exact elementwise forms: rows of exactly
//                            COLS elements, a block for each row (no loop), blockDim.x ==
//                            FixedRow<T, COLS>::kThreads, blockDim.y == 1; any alignment.
//   rms_norm_backward_fixed_*
//                            (T, COLS): as rms_norm_backward_short_* at kShortBackwardThreads.
//   rms_norm_backward_*      blockDim.x threads per row (a power of two, at least a wavefront),
//                            one row a block at a time; the grid sets the rows of `partial`.
//   rms_norm_backward_short_*
//                            blockDim.x threads per row (a power of two, at least a wavefront,
//                            at most kShortBackwardThreads), one row a block at a time; 16-bit
//                            types: any grid (`scratch` unused), float32: the grid sets the rows
//                            of `scratch`; unused for one row in one block.
//
// Row scales: every forward norm (rms_norm_*, add_rms_norm_*, each form) takes `row_scales`,
// null (inference: nothing stored) or float32 [rows], to which it stores each row's scale
// 1 / sqrt(mean(x^2) + eps), the float it multiplied the row by. The RMSNorm backward kernels
// (rms_norm_backward_*) take those scales, required, instead of eps.
//
// Backward kernels: the gradients of each forward op, in float32 arithmetic; the weight gradient
// of RMSNorm is reduced deterministically (per-block partial sums, the rows' own shares, or the
// inputs and row scales, then a fixed-order sum).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kp_reduce.cuh"

namespace {

// Storage of one element as raw bits, with its conversions to and from float.
template <typename T>
struct Elem;

template <>
struct Elem<float> {
  using Bits = unsigned int;
  static __device__ __forceinline__ float to_float(Bits bits) { return __uint_as_float(bits); }
  static __device__ __forceinline__ Bits from_float(float value) { return __float_as_uint(value); }
};

// The 16-bit types also pack two floats into one 32-bit word (the first in the low half) with one
// paired conversion, where one at a time takes a conversion, a shift and an or each: fewer
// instructions in the chain of a thread, which is what short rows wait on. The rounding is the
// same (to nearest even).
template <>
struct Elem<__half> {
  using Bits = unsigned short;
  static __device__ __forceinline__ float to_float(Bits bits) {
    return __half2float(__ushort_as_half(bits));
  }
  static __device__ __forceinline__ Bits from_float(float value) {
    return __half_as_ushort(__float2half_rn(value));
  }
  static __device__ __forceinline__ unsigned int pack2(float low, float high) {
    const __half2 pair = __floats2half2_rn(low, high);
    return static_cast<unsigned int>(__half_as_ushort(__low2half(pair))) |
           (static_cast<unsigned int>(__half_as_ushort(__high2half(pair))) << 16);
  }
};

template <>
struct Elem<__nv_bfloat16> {
  using Bits = unsigned short;
  // A bfloat16 is the high half of a float32, so widening is a shift.
  static __device__ __forceinline__ float to_float(Bits bits) {
    return __uint_as_float(static_cast<unsigned int>(bits) << 16);
  }
  static __device__ __forceinline__ Bits from_float(float value) {
    return __bfloat16_as_ushort(__float2bfloat16(value));
  }
  static __device__ __forceinline__ unsigned int pack2(float low, float high) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    return static_cast<unsigned int>(__bfloat16_as_ushort(__low2bfloat16(pair))) |
           (static_cast<unsigned int>(__bfloat16_as_ushort(__high2bfloat16(pair))) << 16);
  }
};

constexpr int kVectorBytes = 16;

// Whether every pointer is kBytes-aligned (a null one is): one test of all their bits together. A
// test a pointer, joined by &&, compiles to a chain of branches, each waiting on its own
// parameter's load, at the head of every thread's path: what the latency-bound kernels (the
// short and fixed-length forms) cannot afford (the short backward's SASS, docs/bench-mlp-notes.md,
// "The forward norms"). The general kernels keep the chain, one pointer a test: with one test ptxas
// gave the general rms_norm<__half> 64 registers and a spill on sm_90.
template <int kBytes, typename... Pointers>
__device__ __forceinline__ bool all_aligned(const Pointers*... pointers) {
  return ((reinterpret_cast<unsigned long long>(pointers) | ...) % kBytes) == 0;
}

__device__ __forceinline__ bool vector_aligned(const void* pointer) {
  return all_aligned<kVectorBytes>(pointer);
}

// A pointer rounded down to kBytes: loads ahead of an alignment test (the fixed norms). By pointer
// arithmetic, so that the compiler keeps the kernel argument's address space (through an integer
// it issued generic loads, not global ones).
template <int kBytes, typename T>
__device__ __forceinline__ const T* aligned_down(const T* pointer) {
  const unsigned long long past = reinterpret_cast<unsigned long long>(pointer) % kBytes;
  return pointer - past / sizeof(T);
}

// The narrower vector of the elementwise kernels on short inputs: 8 bytes (4 16-bit elements, 2
// float32). Chosen by the launch geometry: a grid with a thread for every 8-byte chunk asks for it
// (kernelpack.ops.mlp.geometry gives short inputs such a grid: with one 16-byte vector a thread
// they leave most multiprocessors idle and each thread's chain of eight sigmoids long;
// docs/bench-mlp-notes.md, "The elementwise ops").
constexpr int kNarrowBytes = 8;

// A vector of 16 or 8 bytes as 32-bit words, and back.
template <int kBytes>
struct RawVector;

template <>
struct RawVector<16> {
  using Type = uint4;
  static __device__ __forceinline__ void words(Type raw, unsigned int (&out)[4]) {
    out[0] = raw.x;
    out[1] = raw.y;
    out[2] = raw.z;
    out[3] = raw.w;
  }
  static __device__ __forceinline__ Type from(const unsigned int (&in)[4]) {
    return make_uint4(in[0], in[1], in[2], in[3]);
  }
};

template <>
struct RawVector<8> {
  using Type = uint2;
  static __device__ __forceinline__ void words(Type raw, unsigned int (&out)[2]) {
    out[0] = raw.x;
    out[1] = raw.y;
  }
  static __device__ __forceinline__ Type from(const unsigned int (&in)[2]) {
    return make_uint2(in[0], in[1]);
  }
};

// Access to chunk i of an array: one vector of kBytes (16 unless said), kWidth elements ...
template <typename T, int kBytes = kVectorBytes>
struct VectorAccess {
  using Bits = typename Elem<T>::Bits;
  using Raw = typename RawVector<kBytes>::Type;
  static constexpr int kWidth = kBytes / static_cast<int>(sizeof(Bits));
  static constexpr int kWords = kBytes / 4;

  static __device__ __forceinline__ Raw load(const T* base, long long i) {
    return reinterpret_cast<const Raw*>(base)[i];
  }
  static __device__ __forceinline__ void store(T* base, long long i, Raw raw) {
    reinterpret_cast<Raw*>(base)[i] = raw;
  }
  static __device__ __forceinline__ void unpack(Raw raw, float (&out)[kWidth]) {
    unsigned int words[kWords];
    RawVector<kBytes>::words(raw, words);
    constexpr int kPerWord = kWidth / kWords;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
#pragma unroll
      for (int k = 0; k < kPerWord; ++k) {
        const unsigned int bits = words[w] >> (k * 8 * sizeof(Bits));
        out[w * kPerWord + k] = Elem<T>::to_float(static_cast<Bits>(bits));
      }
    }
  }
  static __device__ __forceinline__ Raw pack(const float (&in)[kWidth]) {
    unsigned int words[kWords];
    constexpr int kPerWord = kWidth / kWords;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      if constexpr (kPerWord == 2) {
        words[w] = Elem<T>::pack2(in[2 * w], in[2 * w + 1]);
      } else {
        words[w] = Elem<T>::from_float(in[w]);
      }
    }
    return RawVector<kBytes>::from(words);
  }
};

template <typename T>
using NarrowAccess = VectorAccess<T, kNarrowBytes>;

// VectorAccess for data a kernel reads or writes once: on NVIDIA PTX's .cs ("cache streaming",
// evict first in L1 and L2) on loads and stores alike. Taken by the exact elementwise forms'
// streaming kernels (swiglu_exact_streaming and the others: the host's choice for calls that move
// little, kernelpack.ops.mlp.tuning.STREAMING_MAX_BYTES) and by the fixed norms' few-row forms
// (rms_norm_fixed, add_rms_norm_fixed, through RowAccess), for their rows only (not for the
// weight, which every row reads). Why: after a short kernel with plain accesses the next kernel
// started later than after one with .cs (the idle time between kernels queued back to back). At
// one row the idle time was the same either way: the 8-byte exact forms (one short row) keep
// VectorAccess, and 16-bit add_rms_norm takes its form for many rows below
// tuning.STREAMING_FROM_ROWS. For many rows the evicted lines cost the next kernel (a backward
// reading the forward's input and output again), so the forms for many rows
// (rms_norm_fixed_full, add_rms_norm_fixed_full) keep VectorAccess; so do
// the exact elementwise forms for large calls, where a .cs kernel right after one with plain
// accesses (a GEMM's output) ran longer. .cs on the loads alone, or loads that skip L1, were
// slower at the largest rows. The measurements: docs/bench-mlp-notes.md, "The elementwise ops", and
// docs/mlp-tuning.md. On AMD plain accesses (unmeasured there).
template <typename T, int kBytes = kVectorBytes>
struct StreamingAccess : VectorAccess<T, kBytes> {
  using Raw = typename VectorAccess<T, kBytes>::Raw;

  static __device__ __forceinline__ Raw load(const T* base, long long i) {
#if defined(__HIP_PLATFORM_AMD__)
    return VectorAccess<T, kBytes>::load(base, i);
#else
    return __ldcs(reinterpret_cast<const Raw*>(base) + i);
#endif
  }
  static __device__ __forceinline__ void store(T* base, long long i, Raw raw) {
#if defined(__HIP_PLATFORM_AMD__)
    VectorAccess<T, kBytes>::store(base, i, raw);
#else
    __stcs(reinterpret_cast<Raw*>(base) + i, raw);
#endif
  }
};

// StreamingAccess where kStreaming, else VectorAccess.
template <bool kStreaming, typename T>
struct RowAccess {
  using Type = VectorAccess<T>;
};

template <typename T>
struct RowAccess<true, T> {
  using Type = StreamingAccess<T>;
};

// Whether the grid asks for the narrow vector: a thread (along x) for every narrow chunk of n
// elements. The same for every thread of the grid.
template <typename T>
__device__ __forceinline__ bool narrow_grid(long long n) {
  return static_cast<long long>(gridDim.x) * blockDim.x * NarrowAccess<T>::kWidth >= n;
}

// ... or one element, for misaligned arrays and the tails past the last whole vector.
template <typename T>
struct ScalarAccess {
  using Bits = typename Elem<T>::Bits;
  using Raw = Bits;
  static constexpr int kWidth = 1;

  static __device__ __forceinline__ Raw load(const T* base, long long i) {
    return reinterpret_cast<const Bits*>(base)[i];
  }
  static __device__ __forceinline__ void store(T* base, long long i, Raw raw) {
    reinterpret_cast<Bits*>(base)[i] = raw;
  }
  static __device__ __forceinline__ void unpack(Raw raw, float (&out)[1]) {
    out[0] = Elem<T>::to_float(raw);
  }
  static __device__ __forceinline__ Raw pack(const float (&in)[1]) {
    return Elem<T>::from_float(in[0]);
  }
};

#if !defined(__HIP_PLATFORM_AMD__)
// 2^x in the hardware's approximate exp2 (MUFU.EX2), denormals flushed (.ftz): the non-ftz form
// scales around the MUFU op (below).
__device__ __forceinline__ float exp2_flushed(float x) {
  float power;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(power) : "f"(x));
  return power;
}

// e^x as libdevice's expf computes it with denormals flushed (the expf of Triton's kernels, and so
// of torch.compile's): x log2(e) split into an integer n, clamped to [-126, 126], and a remainder
// r (x log2(e) - n, log2(e) in two parts so that r keeps its accuracy); 2^r from exp2_flushed,
// 2^n made in the exponent bits. The integer is found in the low mantissa bits of `biased`, the
// float 1.5 * 2^23 + 1 + floor(252 t) for t = x log2(e) / 252 + 1/2 clamped to [0, 1]: n + 127
// there, which shifted into the exponent field is 2^n. 1 ulp or so over the float range; for x
// below about -87 the result is 0 (flushed), above about 88 it is inf. The non-ftz expf, which
// scales around the MUFU op for results that would be denormal, made the whole SiLU-and-mul
// forwards slower at copy bandwidth (docs/bench-mlp-notes.md, "The elementwise ops", "The
// sigmoid").
__device__ __forceinline__ float exp_flushed(float x) {
  const float t = __saturatef(__fmaf_rn(x, 0x1.77313ap-8f, 0.5f));
  const float biased = __fmaf_rd(t, 252.0f, 0x1.800002p+23f);
  const float high = __fmaf_rn(x, 0x1.715476p+0f, 0x1.8000fep+23f - biased);
  const float reduced = __fmaf_rn(x, 0x1.4ae0c0p-26f, high);
  return exp2_flushed(reduced) * __uint_as_float(__float_as_uint(biased) << 23);
}
#endif

// sigmoid(g) = 1 / (1 + 2^(-g log2(e))) in the hardware's approximate exp2 and reciprocal (2 ulp;
// the IEEE division's slow path costs a stack frame). On NVIDIA they flush denormals (.ftz): the
// non-ftz forms __expf and __fdividef compile to, scaling around each MUFU op, add a sixth to
// bfloat16 swiglu_exact's instructions, and time to short calls, for values that only move a
// sigmoid within 2**-126 of 0 or 1 (the same bits on random data; docs/bench-mlp-notes.md, "The
// elementwise ops", "The sigmoid"). For g below about -88 it gives 0, the limit of sigmoid.
__device__ __forceinline__ float sigmoid(float gate) {
#if defined(__HIP_PLATFORM_AMD__)
  return __fdividef(1.0f, 1.0f + __expf(-gate));
#else
  float reciprocal;
  const float power = exp2_flushed(gate * -1.4426950408889634f);
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(reciprocal) : "f"(1.0f + power));
  return reciprocal;
#endif
}

// silu(g) * u = g * sigmoid(g) * u; for g below about -88 a signed zero, never inf * 0.
__device__ __forceinline__ float silu_mul(float gate, float up) {
  return gate * sigmoid(gate) * up;
}

// silu(g) * u as g / (1 + e^-g) * u: on NVIDIA libdevice's expf with denormals flushed
// (exp_flushed) and a full-range approximate division (PTX div.full, 2 ulp, no slow path), the
// instructions torch.compile's Triton kernel issues for F.silu(g) * u; for g below about -88 a
// signed zero too (g / inf). More instructions than silu_mul, and faster where the kernel runs at
// copy bandwidth: taken by the plain 16-byte exact forwards, the host's choice for calls that move
// more than kernelpack.ops.mlp.tuning.STREAMING_MAX_BYTES (docs/bench-mlp-notes.md, "The
// elementwise ops", "The sigmoid"). On AMD the same quotient in HIP's expf and fast division
// (unmeasured there).
__device__ __forceinline__ float silu_mul_divided(float gate, float up) {
#if defined(__HIP_PLATFORM_AMD__)
  return __fdividef(gate, 1.0f + expf(-gate)) * up;
#else
  float silu;
  asm("div.full.f32 %0, %1, %2;" : "=f"(silu) : "f"(gate), "f"(1.0f + exp_flushed(-gate)));
  return silu * up;
#endif
}

// The block size of the elementwise kernels, also their __launch_bounds__: 128 threads spread
// small sizes over more multiprocessors than 256 do, and are as fast at large sizes; a grid capped
// to a few blocks a multiprocessor is slower (docs/bench-mlp-notes.md, "The elementwise ops").
constexpr int kElementwiseBlockThreads = 128;

// chunk(i) for this thread's chunks of [0, end): the threads of grid.x striding over them.
template <typename Chunk>
__device__ __forceinline__ void for_each_chunk(long long end, const Chunk& chunk) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < end;
       i += stride) {
    chunk(i);
  }
}

// silu(gate) * up of one vector of each: through silu_mul, or silu_mul_divided where kDivided.
template <typename Access, bool kDivided = false>
__device__ __forceinline__ typename Access::Raw silu_mul_vector(typename Access::Raw gate,
                                                                typename Access::Raw up) {
  constexpr int kWidth = Access::kWidth;
  float g[kWidth];
  float u[kWidth];
  Access::unpack(gate, g);
  Access::unpack(up, u);
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    g[k] = kDivided ? silu_mul_divided(g[k], u[k]) : silu_mul(g[k], u[k]);
  }
  return Access::pack(g);
}

// out[i] = silu(gate[i]) * up[i] for the chunks [0, end), as for_each_chunk deals them: one
// 16-byte vector a thread and step, which beat two, whose larger tiles leave fewer threads in
// flight at mid sizes.
template <typename Access, typename T>
__device__ __forceinline__ void silu_mul_chunks(const T* gate, const T* up, T* out, long long end) {
  for_each_chunk(end, [&](auto i) {
    Access::store(out, i, silu_mul_vector<Access>(Access::load(gate, i), Access::load(up, i)));
  });
}

template <typename T>
__device__ __forceinline__ void swiglu(const T* gate, const T* up, T* out, long long n) {
  long long done = 0;
  if (narrow_grid<T>(n) && all_aligned<kNarrowBytes>(gate) && all_aligned<kNarrowBytes>(up) &&
      all_aligned<kNarrowBytes>(out)) {
    constexpr int kWidth = NarrowAccess<T>::kWidth;
    silu_mul_chunks<NarrowAccess<T>>(gate, up, out, n / kWidth);
    done = n / kWidth * kWidth;
  } else if (vector_aligned(gate) && vector_aligned(up) && vector_aligned(out)) {
    constexpr int kWidth = VectorAccess<T>::kWidth;
    silu_mul_chunks<VectorAccess<T>>(gate, up, out, n / kWidth);
    done = n / kWidth * kWidth;
  }
  // The misaligned arrays, or the tail past the last whole vector.
  silu_mul_chunks<ScalarAccess<T>>(gate + done, up + done, out + done, n - done);
}

// x is [rows, 2 * cols] (gate then up in each row), out is [rows, cols].
template <typename Access, typename T>
__device__ __forceinline__ void silu_and_mul_rows(const T* x, T* out, long long rows,
                                                  long long cols) {
  const long long chunks = cols / Access::kWidth;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* gate = x + row * 2 * cols;
    silu_mul_chunks<Access>(gate, gate + cols, out + row * cols, chunks);
  }
}

template <typename T>
__device__ __forceinline__ void silu_and_mul(const T* x, T* out, long long rows, long long cols) {
  // Every row start is aligned when the base is and the row of the output is a whole number of
  // vectors (the input row is twice as long).
  if (narrow_grid<T>(cols) && all_aligned<kNarrowBytes>(x) && all_aligned<kNarrowBytes>(out) &&
      cols % NarrowAccess<T>::kWidth == 0) {
    silu_and_mul_rows<NarrowAccess<T>>(x, out, rows, cols);
  } else if (vector_aligned(x) && vector_aligned(out) && cols % VectorAccess<T>::kWidth == 0) {
    silu_and_mul_rows<VectorAccess<T>>(x, out, rows, cols);
  } else {
    silu_and_mul_rows<ScalarAccess<T>>(x, out, rows, cols);
  }
}

// The exact forms (mlp::swiglu_exact, mlp::silu_and_mul_exact and their backwards, templated on
// the vector's bytes): the host takes them where n (cols) is a whole number of vectors, the grid
// has a thread for each (grid.y one a row) and the arrays hold fewer than 2**31 elements, so a
// thread takes its one vector with none of the general form's run-time choices (grid-stride and
// row loops, 64-bit indices, the tail), which short calls wait on. The vector is the one the host
// sized the grid for: 8 bytes where the grid has a thread for each 8-byte chunk (short inputs,
// and the backwards past kernelpack.ops.mlp.tuning.STREAMING_MAX_BYTES), else 16. Every pointer
// must be aligned to that vector: the host checks the call's addresses and launches the general
// kernel (same arguments) for a misaligned view, so a thread's path is its loads, the arithmetic
// and its store, with no test (a test in the kernel, even after the loads with the scalar loop
// out of line, was slower). A thread past the row's last vector loads the row's first (an exact
// row has one) and stores nothing: with no branch ahead of the loads, the pointers' constant loads
// run beside the index arithmetic instead of after its test (docs/bench-mlp-notes.md, "The
// elementwise ops").
//
// This thread's vectors in an exact form, as 32-bit vector indices: whether it has one, and its
// index in gate, up and out (and dy); for silu_and_mul's forms (grid.y one a row) gate and up are
// the halves of x's row. Where it has none they are its row's first vectors.
struct ExactChunk {
  bool mine;
  int gate;
  int up;
  int out;
};

// swiglu's forms: one row of n elements.
template <typename Access>
__device__ __forceinline__ ExactChunk exact_chunk(long long n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const bool mine = i < static_cast<int>(n) / Access::kWidth;
  const int vector = mine ? i : 0;
  return {mine, vector, vector, vector};
}

// silu_and_mul's vector `vector` of row `row` of `vectors` output vectors: x's row holds the gate's
// vectors, then the up's.
__device__ __forceinline__ ExactChunk row_chunk(bool mine, int row, int vector, int vectors) {
  const int gate = row * 2 * vectors + vector;
  return {mine, gate, gate + vectors, row * vectors + vector};
}

// silu_and_mul's forms: row blockIdx.y of `cols` outputs, of 2 * cols inputs.
template <typename Access>
__device__ __forceinline__ ExactChunk exact_row_chunk(long long cols) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int vectors = static_cast<int>(cols) / Access::kWidth;
  const bool mine = i < vectors;
  return row_chunk(mine, static_cast<int>(blockIdx.y), mine ? i : 0, vectors);
}

template <typename Access, bool kDivided, typename T>
__device__ __forceinline__ void swiglu_exact(const T* gate, const T* up, T* out, long long n) {
  const ExactChunk at = exact_chunk<Access>(n);
  const typename Access::Raw result =
      silu_mul_vector<Access, kDivided>(Access::load(gate, at.gate), Access::load(up, at.up));
  if (at.mine) {
    Access::store(out, at.out, result);
  }
}

template <typename Access, bool kDivided, typename T>
__device__ __forceinline__ void silu_and_mul_exact(const T* x, T* out, long long cols) {
  const ExactChunk at = exact_row_chunk<Access>(cols);
  const typename Access::Raw result =
      silu_mul_vector<Access, kDivided>(Access::load(x, at.gate), Access::load(x, at.up));
  if (at.mine) {
    Access::store(out, at.out, result);
  }
}

// Chunks of a row each thread keeps in registers between the two passes of RMSNorm. The host
// gives a row enough threads that rows up to kCachedChunks * kRowBlockThreads vectors (8192
// float32, 16384 float16) stay in registers; longer rows read the rest of the row again (from
// cache) in the second pass. Short rows share a block (blockDim.y rows of blockDim.x threads),
// so that no thread idles. The block bound leaves 128 registers a thread on NVIDIA; at 1024
// threads (64 registers) sm_120 spills.
constexpr int kCachedChunks = 4;
constexpr int kRowBlockThreads = 512;

// One row of RMSNorm: out = x / sqrt(mean(x^2) + eps) * weight. With kAddResidual, x first becomes
// x + residual, rounded to T and stored to residual_out; the norm is taken of that stored value.
// In place (fused_add_rms_norm) out is x and residual_out is residual: each element is read by
// the thread that later writes it, so the aliasing is safe. Every thread of the block takes
// part: a thread past the last row passes chunks = 0, loads and stores nothing, and only joins
// the reduction. block_scales: null, or the row scales from the block's first row on (indexed by
// threadIdx.y), where thread 0 of the row stores its scale 1 / sqrt(mean(x^2) + eps), the float
// the row is multiplied by. (Addressed so, from a base the block shares and threadIdx.y, which
// the reduction keeps anyway, and stored before pass 2, the store holds no register through the
// passes: indexed by the row after pass 2 it spilled these kernels on gfx9-generic and sm_90.)
template <typename Access, bool kAddResidual, typename T>
__device__ __forceinline__ void rms_norm_row(const T* x, const T* residual, T* residual_out,
                                             const T* weight, T* out, int chunks, long long cols,
                                             float eps, float* slots, float* block_scales) {
  using Raw = typename Access::Raw;
  constexpr int kWidth = Access::kWidth;
  // Indices inside a row are 32-bit (the host refuses rows longer than 2**30 elements, so i +
  // stride cannot overflow): fewer registers than 64-bit ones, which buys occupancy.
  const int stride = static_cast<int>(blockDim.x);
  // Pass 1. The cached chunks, and their weights, are all loaded before anything is stored, so
  // that the loads overlap (the compiler keeps a load behind a store that may alias it): loaded
  // in pass 2, each weight would wait behind the previous chunk's store, a memory round trip
  // more on short rows (and as fast on long ones; docs/bench-mlp-notes.md, "The forward norms").
  Raw values[kCachedChunks];
  Raw residuals[kAddResidual ? kCachedChunks : 1];
  Raw weights[kCachedChunks];
#pragma unroll
  for (int c = 0; c < kCachedChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      values[c] = Access::load(x, i);
      if constexpr (kAddResidual) {
        residuals[c] = Access::load(residual, i);
      }
      weights[c] = Access::load(weight, i);
    }
  }
  float sum_squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kCachedChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      float v[kWidth];
      Access::unpack(values[c], v);
      if constexpr (kAddResidual) {
        float r[kWidth];
        Access::unpack(residuals[c], r);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          v[k] += r[k];
        }
        values[c] = Access::pack(v);
        Access::store(residual_out, i, values[c]);
        Access::unpack(values[c], v);  // the sum as stored, rounded to T
      }
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        sum_squares += v[k] * v[k];
      }
    }
  }
  // Rows longer than the cache: the rest, chunk by chunk.
  for (int i = static_cast<int>(threadIdx.x) + kCachedChunks * stride; i < chunks; i += stride) {
    float v[kWidth];
    Raw raw = Access::load(x, i);
    Access::unpack(raw, v);
    if constexpr (kAddResidual) {
      float r[kWidth];
      Access::unpack(Access::load(residual, i), r);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        v[k] += r[k];
      }
      raw = Access::pack(v);
      Access::store(residual_out, i, raw);
      Access::unpack(raw, v);
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      sum_squares += v[k] * v[k];
    }
  }

  sum_squares = kp::row_sum(sum_squares, slots);
  const float scale = rsqrtf(sum_squares / static_cast<float>(cols) + eps);
  if (block_scales != nullptr && chunks != 0 && threadIdx.x == 0) {
    block_scales[threadIdx.y] = scale;
  }

  // Pass 2: scale, weight, store. The rest of a long row is read again from what this same thread
  // read (or wrote to residual) in pass 1, so no barrier is needed.
#pragma unroll
  for (int c = 0; c < kCachedChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      float v[kWidth];
      float w[kWidth];
      Access::unpack(values[c], v);
      Access::unpack(weights[c], w);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        v[k] = v[k] * scale * w[k];
      }
      Access::store(out, i, Access::pack(v));
    }
  }
  const T* source = kAddResidual ? residual_out : x;
  for (int i = static_cast<int>(threadIdx.x) + kCachedChunks * stride; i < chunks; i += stride) {
    float v[kWidth];
    float w[kWidth];
    Access::unpack(Access::load(source, i), v);
    Access::unpack(Access::load(weight, i), w);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      v[k] = v[k] * scale * w[k];
    }
    Access::store(out, i, Access::pack(v));
  }
}

// The rows of a block-strided grid through one access, chunks of Access::kWidth elements. A loop
// of its own for each access (the test of alignment outside it): with both accesses inside one
// row loop, the 64-register bound (kRowNormMinBlocks) spilled bfloat16 on sm_80 and sm_90 and
// every type on sm_120, where each access alone fits.
template <typename Access, bool kAddResidual, typename T>
__device__ __forceinline__ void rms_norm_rows(const T* x, const T* residual, T* residual_out,
                                              const T* weight, T* out, float* row_scales,
                                              long long rows, long long cols, float eps,
                                              float* slots) {
  const long long step = static_cast<long long>(gridDim.x) * blockDim.y;
  // The loop bound is the block's first row, the same for all its threads, so the whole block
  // meets every barrier of the reduction even where its last rows lie past the end.
  for (long long first = static_cast<long long>(blockIdx.x) * blockDim.y; first < rows;
       first += step) {
    const long long row = first + threadIdx.y;
    const bool here = row < rows;
    const long long offset = here ? row * cols : 0;
    const T* residual_row = kAddResidual ? residual + offset : nullptr;
    T* residual_out_row = kAddResidual ? residual_out + offset : nullptr;
    float* block_scales = row_scales != nullptr ? row_scales + first : nullptr;
    rms_norm_row<Access, kAddResidual>(x + offset, residual_row, residual_out_row, weight,
                                       out + offset,
                                       here ? static_cast<int>(cols / Access::kWidth) : 0, cols,
                                       eps, slots, block_scales);
  }
}

// row_scales: null, or float32 [rows], where thread 0 of each row stores the row's scale (for the
// backward, which then needs one sum a row instead of two).
template <bool kAddResidual, typename T>
__device__ __forceinline__ void rms_norm(const T* x, const T* residual, T* residual_out,
                                         const T* weight, T* out, float* row_scales,
                                         long long rows, long long cols, float eps) {
  __shared__ float slots[kp::kMaxBlockThreads];
  constexpr int kWidth = VectorAccess<T>::kWidth;
  const bool vectors =
      vector_aligned(x) && vector_aligned(weight) && vector_aligned(out) &&
      (!kAddResidual || (vector_aligned(residual) && vector_aligned(residual_out))) &&
      cols % kWidth == 0;
  if (vectors) {
    rms_norm_rows<VectorAccess<T>, kAddResidual>(x, residual, residual_out, weight, out,
                                                 row_scales, rows, cols, eps, slots);
  } else {
    rms_norm_rows<ScalarAccess<T>, kAddResidual>(x, residual, residual_out, weight, out,
                                                 row_scales, rows, cols, eps, slots);
  }
}

// Sum over the lanes of one wavefront, every lane receiving it: the butterfly unrolled, offsets
// from half the widest wavefront (64 lanes) down to 1, those not below warpSize skipped (on NVIDIA
// a test ptxas decides, warpSize being 32). kp::warp_sum walks the same offsets in a loop, whose
// bookkeeping sits in the chain of every short row.
constexpr int kWidestWave = 64;

__device__ __forceinline__ float lanes_sum(float value) {
#pragma unroll
  for (int offset = kWidestWave / 2; offset > 0; offset /= 2) {
    if (offset < warpSize) {
      value += __shfl_xor_sync(0xffffffff, value, offset);
    }
  }
  return value;
}

// kp::row_sum for the kernels of one row a block (blockDim.y == 1: the short forward norms, the
// backward ones) with the unrolled lane sums; the same contract, the same order of additions.
__device__ __forceinline__ float short_row_sum(float value, float* slots) {
  const int width = static_cast<int>(blockDim.x);
  if (width <= warpSize) {
    for (int offset = width / 2; offset > 0; offset /= 2) {
      value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
  }
  const int thread = static_cast<int>(threadIdx.x);
  const int lane = kp::lane_of(thread);
  const int waves = kp::wave_of(width);
  value = lanes_sum(value);
  if (lane == 0) {
    slots[kp::wave_of(thread)] = value;
  }
  __syncthreads();
  value = lanes_sum(lane < waves ? slots[lane] : 0.0f);
  __syncthreads();
  return value;
}

// Short rows (the host's choice for few rows, up to kShortForwardChunks * kShortRowThreads vectors
// a row): one block a row, one or two 16-byte vectors a thread, held in registers from the load to
// the store, the weight's vectors loaded beside them. Why a kernel of its own: the general
// kernel's warps each issue the instructions of its four cached vectors, one warp a scheduler,
// twice Liger-Kernel's at 1 x 4096 (docs/bench-mlp-notes.md, "The forward norms"); here a warp
// issues one or two vectors'. A misaligned row (or one not a whole number of vectors) takes the
// scalar loop, twice over the row, which is slow but right.
constexpr int kShortRowThreads = 512;

// Vectors a thread of the short forward: one, or two where the host gives a row half as many
// threads as vectors (the geometry Liger-Kernel's 1 x 4096 kernel has: half the warps in the
// reduction). Each count is its own instantiation, so one vector a thread pays nothing for two.
constexpr int kShortForwardChunks = 2;

template <int kChunks, bool kAddResidual, typename T>
__device__ __forceinline__ float rms_norm_short_vector(const T* x, const T* residual,
                                                       T* residual_out, const T* weight, T* out,
                                                       int chunks, float inverse_cols, float eps,
                                                       float* slots) {
  using Access = VectorAccess<T>;
  using Raw = typename Access::Raw;
  constexpr int kWidth = Access::kWidth;
  const int stride = static_cast<int>(blockDim.x);
  Raw values[kChunks];
  Raw weights[kChunks];
  Raw residuals[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      values[c] = Access::load(x, i);
      if constexpr (kAddResidual) {
        residuals[c] = Access::load(residual, i);
      }
      weights[c] = Access::load(weight, i);
    }
  }
  float v[kChunks][kWidth];
  float sum_squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      Access::unpack(values[c], v[c]);
      if constexpr (kAddResidual) {
        float r[kWidth];
        Access::unpack(residuals[c], r);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          v[c][k] += r[k];
        }
        const Raw stored = Access::pack(v[c]);
        Access::store(residual_out, i, stored);
        Access::unpack(stored, v[c]);  // the sum as stored, rounded to T
      }
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        sum_squares += v[c][k] * v[c][k];
      }
    }
  }
  sum_squares = short_row_sum(sum_squares, slots);
  const float scale = rsqrtf(sum_squares * inverse_cols + eps);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
      float w[kWidth];
      Access::unpack(weights[c], w);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        v[c][k] = v[c][k] * scale * w[k];
      }
      Access::store(out, i, Access::pack(v[c]));
    }
  }
  return scale;
}

template <bool kAddResidual, typename T>
__device__ __forceinline__ float rms_norm_short_scalar(const T* x, const T* residual,
                                                       T* residual_out, const T* weight, T* out,
                                                       long long cols, float inverse_cols,
                                                       float eps, float* slots) {
  using Access = ScalarAccess<T>;
  const int n = static_cast<int>(cols);
  const int stride = static_cast<int>(blockDim.x);
  float sum_squares = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += stride) {
    float v[1];
    Access::unpack(Access::load(x, i), v);
    if constexpr (kAddResidual) {
      float r[1];
      Access::unpack(Access::load(residual, i), r);
      v[0] += r[0];
      const typename Access::Raw stored = Access::pack(v);
      Access::store(residual_out, i, stored);
      Access::unpack(stored, v);
    }
    sum_squares += v[0] * v[0];
  }
  sum_squares = short_row_sum(sum_squares, slots);
  const float scale = rsqrtf(sum_squares * inverse_cols + eps);
  // The same thread reads back what it read (or wrote to residual) above: no barrier needed.
  const T* source = kAddResidual ? residual_out : x;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += stride) {
    float v[1];
    float w[1];
    Access::unpack(Access::load(source, i), v);
    Access::unpack(Access::load(weight, i), w);
    v[0] = v[0] * scale * w[0];
    Access::store(out, i, Access::pack(v));
  }
  return scale;
}

// blockDim.x threads a row (a power of two), blockDim.y == 1; the blocks stride over the rows.
// row_scales as rms_norm's.
template <bool kAddResidual, typename T>
__device__ __forceinline__ void rms_norm_short(const T* x, const T* residual, T* residual_out,
                                               const T* weight, T* out, float* row_scales,
                                               long long rows, long long cols, float eps) {
  __shared__ float slots[kp::kMaxBlockThreads];
  constexpr int kWidth = VectorAccess<T>::kWidth;
  const bool vectors =
      all_aligned<kVectorBytes>(x, weight, out, residual, residual_out) && cols % kWidth == 0 &&
      cols / kWidth <= static_cast<long long>(kShortForwardChunks) * blockDim.x;
  // mean(x^2) as a product: the reciprocal is taken while the loads are in flight, where a
  // division would sit in the chain after the reduction
  const float inverse_cols = 1.0f / static_cast<float>(cols);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long offset = row * cols;
    const T* residual_row = kAddResidual ? residual + offset : nullptr;
    T* residual_out_row = kAddResidual ? residual_out + offset : nullptr;
    float scale;
    if (vectors && cols / kWidth <= static_cast<long long>(blockDim.x)) {
      scale = rms_norm_short_vector<1, kAddResidual>(x + offset, residual_row, residual_out_row,
                                                     weight, out + offset,
                                                     static_cast<int>(cols / kWidth),
                                                     inverse_cols, eps, slots);
    } else if (vectors) {
      scale = rms_norm_short_vector<kShortForwardChunks, kAddResidual>(
          x + offset, residual_row, residual_out_row, weight, out + offset,
          static_cast<int>(cols / kWidth), inverse_cols, eps, slots);
    } else {
      scale = rms_norm_short_scalar<kAddResidual>(x + offset, residual_row, residual_out_row,
                                                  weight, out + offset, cols, inverse_cols, eps,
                                                  slots);
    }
    if (row_scales != nullptr && threadIdx.x == 0) {
      row_scales[row] = scale;
    }
  }
}

// Rows of one fixed length (LLaMA's hidden sizes, kernelpack.ops.mlp.tuning.FIXED_COLUMNS; the
// host's choice for rows of such a length, few or many), in an exact form: one block a row (the
// grid has a block for each row), rows of exactly kCols elements, as the host launches it. The
// length, the threads, the vectors a thread and 1 / cols are constants: no bound checks, no length
// arithmetic, no row loop, a block sum of a known number of wavefronts. Why so bare: at one row
// every instruction is in the one chain the kernel waits on, and Triton's kernel, compiled for the
// one shape, issues about half the short kernel's; with a row loop, or with the alignment test
// ahead of the loads, this kernel was as slow as Liger-Kernel's, without both a step faster
// (docs/bench-mlp-notes.md, "The forward norms").
// A misaligned pointer still gives the right answer: the loads read from the pointers rounded
// down to 16 bytes (in bounds: inside the row's first 16-byte granule, of the same allocation), so
// they issue while the alignment test resolves; the block sums what they read either way, and only
// then does a misaligned row drop it and take the scalar loop (tested). The host's memo of a
// launch per shape so needs no alignment in its key.
// Vectors a thread: kFixedChunks for each kFixedRowVectors (begun) of a row, so two up to 1024
// vectors a row (512 threads), four up to 2048.
constexpr int kFixedChunks = 2;
constexpr int kFixedRowVectors = 1024;
constexpr int kFullSmThreads = 2048;  // resident threads an SM of sm_80 and sm_90 holds
// kBoundCountsBlocks: whether __launch_bounds__'s second argument counts blocks an SM, as CUDA's
// does. HIP's is waves a SIMD (hipcc makes it amdgpu_waves_per_eu), a bound of its own: eight of
// them left gfx9-generic's 16-bit rms_norm_fixed_full of 4096 columns 32 registers, and it
// spilled. kCacheHints: whether load_kept's cache hints exist (PTX's); where not, the fixed norms
// keep their rows in registers rather than read them twice (kFullRereadsRow).
#if defined(__HIP_PLATFORM_AMD__)
constexpr bool kBoundCountsBlocks = false;
constexpr bool kCacheHints = false;
#else
constexpr bool kBoundCountsBlocks = true;
constexpr bool kCacheHints = true;
#endif

// A vector of a row that the block reads twice, loaded with PTX's L1::evict_last and an L2
// evict_last policy, as torch.compile's two-pass rms_norm loads its first pass: both caches keep
// the line for the second read. On AMD a plain load (no such hint in this form): AMD's builds keep
// their rows in registers and do not call it (kCacheHints; unmeasured there).
template <typename T>
__device__ __forceinline__ uint4 load_kept(const T* base, long long i) {
  const uint4* address = reinterpret_cast<const uint4*>(base) + i;
#if defined(__HIP_PLATFORM_AMD__)
  return *address;
#else
  uint4 v;
  unsigned long long policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(address), "l"(policy));
  return v;
#endif
}

template <typename T, int kCols>
struct FixedRow {
  static constexpr int kWidth = VectorAccess<T>::kWidth;
  static constexpr int kVectors = kCols / kWidth;
  static constexpr int kChunks =
      (kVectors + kFixedRowVectors - 1) / kFixedRowVectors * kFixedChunks;
  static constexpr int kThreads = kVectors / kChunks;
  static_assert(kCols % kWidth == 0 && kVectors % kChunks == 0, "whole vectors a thread");
  static_assert(kThreads % kWidestWave == 0 && kThreads <= kp::kMaxBlockThreads,
                "whole wavefronts, at most a block");
  // The blocks an SM rms_norm_fixed_full is bounded to (its __launch_bounds__): on NVIDIA as
  // many as fill an sm_90 SM (2048 threads, so 32 registers a thread) where a thread keeps
  // kFixedChunks vectors of the row and of the weight (16 registers), else one, ptxas's own
  // choice (float32 rows of 8192, four vectors a thread, spilled at 32). On SMs of 1536 threads
  // (sm_86, sm_89, sm_120) ptxas ignores a bound past them, with a warning, and its 40 registers
  // fill them. On AMD one (kBoundCountsBlocks), the compiler's own choice.
  static constexpr int kFullMinBlocks =
      kBoundCountsBlocks && kChunks == kFixedChunks ? kFullSmThreads / kThreads : 1;
};

// Whether rms_norm_fixed_full reads its row twice, the first time through load_kept, instead of
// keeping it in registers across the block sum: torch.compile's shape, faster for 16-bit rows
// of 8192 and for no other length or type (docs/bench-mlp-notes.md, "The forward norms"). NVIDIA
// only.
template <typename T, int kCols>
constexpr bool kFullRereadsRow = kCacheHints && sizeof(T) == 2 && kCols == 8192;

// kp::row_sum over exactly kThreads threads (whole wavefronts), the same sums, without the closing
// barrier (the fixed kernels sum one row a block; their scalar loop takes other slots). Its second
// step sums the slots in groups of lanes (the wavefronts' count rounded up to a power of two: 5120
// 16-bit columns take 320 threads), each group reading all the slots and zeros past them, so that
// every lane has the total after log2(group) steps where kp::row_sum takes log2(warpSize) (whose
// further lanes add zeros: the same sum).
constexpr int kNarrowestWave = 32;

__host__ __device__ constexpr int ceil_power_of_two(int n) {
  int power = 1;
  while (power < n) {
    power *= 2;
  }
  return power;
}

template <int kThreads>
__device__ __forceinline__ float fixed_row_sum(float value, float* slots) {
  constexpr int kGroupThreads = ceil_power_of_two(kThreads);
  const int thread = static_cast<int>(threadIdx.x);
  const int lane = kp::lane_of(thread);
  value = lanes_sum(value);
  if (lane == 0) {
    slots[kp::wave_of(thread)] = value;
  }
  __syncthreads();
  const int group = kp::wave_of(kGroupThreads);
  const int slot = lane & (group - 1);
  value = slot < kp::wave_of(kThreads) ? slots[slot] : 0.0f;
#pragma unroll
  for (int offset = kGroupThreads / kNarrowestWave / 2; offset > 0; offset /= 2) {
    if (offset < group) {
      value += __shfl_xor_sync(0xffffffff, value, offset);
    }
  }
  return value;
}

// The fixed kernels' misaligned row: the scalar loop, out of line, so that the vector path is the
// kernel's straight line (inlined, ptxas placed this loop first and the vector path after a jump).
template <int kCols, bool kAddResidual, typename T>
__device__ __noinline__ void fixed_scalar_row(const T* x, const T* residual, T* residual_out,
                                              const T* weight, T* out, float* row_scale, float eps,
                                              float* slots) {
  const float scale = rms_norm_short_scalar<kAddResidual>(
      x, residual, residual_out, weight, out, kCols, 1.0f / static_cast<float>(kCols), eps, slots);
  if (row_scale != nullptr && threadIdx.x == 0) {
    *row_scale = scale;
  }
}

// Row blockIdx.x of kCols elements (the grid has a block for each row); any alignment. row_scales
// as rms_norm's. kStreaming: the row's loads and stores through StreamingAccess (the forms for few
// rows). kRereadRow: the row is read again after the block sum (the first read through
// load_kept) rather than kept in registers; the same arithmetic, the same result.
template <int kCols, bool kAddResidual, bool kStreaming, bool kRereadRow = false, typename T>
__device__ __forceinline__ void rms_norm_fixed(const T* x, const T* residual, T* residual_out,
                                               const T* weight, T* out, float* row_scales,
                                               float eps) {
  static_assert(!(kRereadRow && kAddResidual), "the sum with the residual is kept, not reread");
  static_assert(!(kRereadRow && kStreaming), "the first read keeps the lines for the second");
  // The row's loads and stores (the weight's through VectorAccess: every row reads it).
  using Access = typename RowAccess<kStreaming, T>::Type;
  using Raw = typename Access::Raw;
  using Row = FixedRow<T, kCols>;
  constexpr int kWidth = Row::kWidth;
  constexpr int kChunks = Row::kChunks;
  constexpr int kThreads = Row::kThreads;
  constexpr float kInverseCols = 1.0f / static_cast<float>(kCols);
  __shared__ float slots[kp::kMaxBlockThreads];
  const bool vectors = all_aligned<kVectorBytes>(x, weight, out, residual, residual_out);
  const long long offset = blockIdx.x * static_cast<long long>(kCols);
  const int thread = static_cast<int>(threadIdx.x);
  const T* x_row = aligned_down<kVectorBytes>(x) + offset;
  const T* residual_row = kAddResidual ? aligned_down<kVectorBytes>(residual) + offset : nullptr;
  const T* weight_row = aligned_down<kVectorBytes>(weight);
  Raw values[kChunks];
  Raw weights[kChunks];
  Raw residuals[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (kRereadRow) {
      values[c] = load_kept(x_row, thread + c * kThreads);
    } else {
      values[c] = Access::load(x_row, thread + c * kThreads);
      weights[c] = VectorAccess<T>::load(weight_row, thread + c * kThreads);
    }
    if constexpr (kAddResidual) {
      residuals[c] = Access::load(residual_row, thread + c * kThreads);
    }
  }
  float v[kChunks][kWidth];
  float sum_squares = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    Access::unpack(values[c], v[c]);
    if constexpr (kAddResidual) {
      float r[kWidth];
      Access::unpack(residuals[c], r);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        v[c][k] += r[k];
      }
      const Raw stored = Access::pack(v[c]);
      if (vectors) {
        Access::store(residual_out + offset, thread + c * kThreads, stored);
      }
      Access::unpack(stored, v[c]);  // the sum as stored, rounded to T
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      sum_squares += v[c][k] * v[c][k];
    }
  }
  sum_squares = fixed_row_sum<kThreads>(sum_squares, slots);
  if (!vectors) {
    fixed_scalar_row<kCols, kAddResidual>(
        x + offset, kAddResidual ? residual + offset : nullptr,
        kAddResidual ? residual_out + offset : nullptr, weight, out + offset,
        row_scales != nullptr ? row_scales + blockIdx.x : nullptr, eps,
        slots + kp::kMaxBlockThreads / 2);
    return;
  }
  const float scale = rsqrtf(sum_squares * kInverseCols + eps);
  if constexpr (kRereadRow) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      values[c] = Access::load(x_row, thread + c * kThreads);
      weights[c] = VectorAccess<T>::load(weight_row, thread + c * kThreads);
    }
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      Access::unpack(values[c], v[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    float w[kWidth];
    Access::unpack(weights[c], w);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      v[c][k] = v[c][k] * scale * w[k];
    }
    Access::store(out + offset, thread + c * kThreads, Access::pack(v[c]));
  }
  if (row_scales != nullptr && threadIdx.x == 0) {
    row_scales[blockIdx.x] = scale;
  }
}

// ---- backward ---------------------------------------------------------------------------------

// d/dg and d/du of silu(g) * u, times the incoming gradient dy: with s = sigmoid(g),
// d_up = dy * g * s and d_gate = dy * u * s * (1 + g * (1 - s)). The forward's sigmoid; for g
// below about -88 it gives s = 0 and both gradients are signed zeros.
__device__ __forceinline__ void silu_mul_grads(float gate, float up, float dy, float& d_gate,
                                               float& d_up) {
  const float s = sigmoid(gate);
  d_up = dy * gate * s;
  d_gate = dy * up * s * (1.0f + gate * (1.0f - s));
}

// The gradients of one vector of gate and up, from one of dy.
template <typename Access>
__device__ __forceinline__ void silu_mul_grads_vector(typename Access::Raw gate,
                                                      typename Access::Raw up,
                                                      typename Access::Raw grad,
                                                      typename Access::Raw& grad_gate,
                                                      typename Access::Raw& grad_up) {
  constexpr int kWidth = Access::kWidth;
  float g[kWidth];
  float u[kWidth];
  float dy[kWidth];
  Access::unpack(gate, g);
  Access::unpack(up, u);
  Access::unpack(grad, dy);
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    float d_gate;
    float d_up;
    silu_mul_grads(g[k], u[k], dy[k], d_gate, d_up);
    g[k] = d_gate;
    u[k] = d_up;
  }
  grad_gate = Access::pack(g);
  grad_up = Access::pack(u);
}

template <typename Access, typename T>
__device__ __forceinline__ void silu_mul_backward_chunks(const T* gate, const T* up, const T* grad,
                                                         T* grad_gate, T* grad_up,
                                                         long long end) {
  for_each_chunk(end, [&](auto i) {
    typename Access::Raw d_gate;
    typename Access::Raw d_up;
    silu_mul_grads_vector<Access>(Access::load(gate, i), Access::load(up, i),
                                  Access::load(grad, i), d_gate, d_up);
    Access::store(grad_gate, i, d_gate);
    Access::store(grad_up, i, d_up);
  });
}

template <typename T>
__device__ __forceinline__ void swiglu_backward(const T* gate, const T* up, const T* grad,
                                                T* grad_gate, T* grad_up, long long n) {
  long long done = 0;
  if (narrow_grid<T>(n) && all_aligned<kNarrowBytes>(gate) && all_aligned<kNarrowBytes>(up) &&
      all_aligned<kNarrowBytes>(grad) && all_aligned<kNarrowBytes>(grad_gate) &&
      all_aligned<kNarrowBytes>(grad_up)) {
    constexpr int kWidth = NarrowAccess<T>::kWidth;
    silu_mul_backward_chunks<NarrowAccess<T>>(gate, up, grad, grad_gate, grad_up, n / kWidth);
    done = n / kWidth * kWidth;
  } else if (vector_aligned(gate) && vector_aligned(up) && vector_aligned(grad) &&
             vector_aligned(grad_gate) && vector_aligned(grad_up)) {
    constexpr int kWidth = VectorAccess<T>::kWidth;
    silu_mul_backward_chunks<VectorAccess<T>>(gate, up, grad, grad_gate, grad_up, n / kWidth);
    done = n / kWidth * kWidth;
  }
  silu_mul_backward_chunks<ScalarAccess<T>>(gate + done, up + done, grad + done,
                                            grad_gate + done, grad_up + done, n - done);
}

// x and grad_x are [rows, 2 * cols] (gate then up), grad is [rows, cols].
template <typename Access, typename T>
__device__ __forceinline__ void silu_and_mul_backward_rows(const T* x, const T* grad, T* grad_x,
                                                           long long rows, long long cols) {
  const long long chunks = cols / Access::kWidth;
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* gate = x + row * 2 * cols;
    T* grad_gate = grad_x + row * 2 * cols;
    silu_mul_backward_chunks<Access>(gate, gate + cols, grad + row * cols, grad_gate,
                                     grad_gate + cols, chunks);
  }
}

template <typename T>
__device__ __forceinline__ void silu_and_mul_backward(const T* x, const T* grad, T* grad_x,
                                                      long long rows, long long cols) {
  if (narrow_grid<T>(cols) && all_aligned<kNarrowBytes>(x) && all_aligned<kNarrowBytes>(grad) &&
      all_aligned<kNarrowBytes>(grad_x) && cols % NarrowAccess<T>::kWidth == 0) {
    silu_and_mul_backward_rows<NarrowAccess<T>>(x, grad, grad_x, rows, cols);
  } else if (vector_aligned(x) && vector_aligned(grad) && vector_aligned(grad_x) &&
             cols % VectorAccess<T>::kWidth == 0) {
    silu_and_mul_backward_rows<VectorAccess<T>>(x, grad, grad_x, rows, cols);
  } else {
    silu_and_mul_backward_rows<ScalarAccess<T>>(x, grad, grad_x, rows, cols);
  }
}

// The exact forms of the two backwards (as swiglu_exact).
template <typename Access, typename T>
__device__ __forceinline__ void swiglu_backward_exact(const T* gate, const T* up, const T* grad,
                                                      T* grad_gate, T* grad_up, long long n) {
  const ExactChunk at = exact_chunk<Access>(n);
  typename Access::Raw d_gate;
  typename Access::Raw d_up;
  silu_mul_grads_vector<Access>(Access::load(gate, at.gate), Access::load(up, at.up),
                                Access::load(grad, at.out), d_gate, d_up);
  if (at.mine) {
    Access::store(grad_gate, at.gate, d_gate);
    Access::store(grad_up, at.up, d_up);
  }
}

template <typename Access, typename T>
__device__ __forceinline__ void silu_and_mul_backward_exact(const T* x, const T* grad, T* grad_x,
                                                            long long cols) {
  const ExactChunk at = exact_row_chunk<Access>(cols);
  typename Access::Raw d_gate;
  typename Access::Raw d_up;
  silu_mul_grads_vector<Access>(Access::load(x, at.gate), Access::load(x, at.up),
                                Access::load(grad, at.out), d_gate, d_up);
  if (at.mine) {
    Access::store(grad_x, at.gate, d_gate);
    Access::store(grad_x, at.up, d_up);
  }
}

// RMSNorm backward, y = x * r * w with r = 1 / sqrt(mean(x^2) + eps):
//   grad_x = r * w * dy - x * r^3 * mean(dy * w * x)   (+ grad_extra, the gradient that reaches
//            the same input another way: the residual stream of add_rms_norm)
//   grad_w = sum over rows of dy * x * r
// r is the forward's, read from its row_scales (one float32 a row): a row needs one sum,
// sum(dy * w * x), where recomputing r took a second, sum(x^2) (torch.compile's backward saves
// r too; docs/bench-mlp-notes.md, "The backward norms").
// One row at a time per block (blockDim.x threads, blockDim.y == 1), the blocks striding over the
// rows in a fixed order. The weight gradient is deterministic: each block sums its rows into
// registers (the cached chunks) or into its own row of `partial` (the rest of a long row, which
// only this thread touches), then writes that row of float32 partial sums; a second kernel adds
// the rows of `partial` in order. No atomics, so every run gives the same bits.
// Chunks (16-byte vectors) of a row each thread of the backward kernel keeps in registers (x,
// dy and grad_extra, and the weight gradient's running sums in float32): 4 whatever the dtype, as
// the forward kernel. The host gives a row enough threads for rows up to 4 * kRowBlockThreads
// vectors (8192 float32, 16384 float16); longer rows go through memory.
//
// Why the kernel is shaped so (profiled at 16384 x 8192, docs/bench-mlp-notes.md, "The backward
// norms"): it waits for each row's loads, so what counts is the bytes an SM has in flight. With 16
// elements a thread, a 16-bit row of 8192 took 512 threads holding 64 bytes each in flight, one
// block (102 registers a thread) an SM: 32 KB in flight, then nothing while the row was reduced
// and stored. Four vectors a thread double the bytes each thread asks for, and 256 threads a row
// (at most 128 registers) leave room for two blocks an SM, one loading while the other reduces.
// To stay under 128 registers without spills, the weight is read again for every row (from L1:
// the same row for every row) rather than held in registers. grad_extra is loaded with x and dy,
// not after the reduction: read in pass 2 it was a second wait a row, with nothing else in
// flight (add_rms_norm's backward is up to a fifth faster loaded early, at most 124 registers on
// sm_90, no spill).
constexpr int kBackwardCachedChunks = 4;
// The backward kernel's block bound: kRowBlockThreads on NVIDIA; 256 on AMD, where a 512-thread
// block leaves a wave of gfx9 (256 VGPRs a lane a SIMD) 128 of them, fewer than the 16-bit rows'
// cached chunks and sums keep live (gfx9-generic spilled to scratch). The host's block for it
// never exceeds this (kernelpack.ops.mlp.tuning's AMD family, backward_threads_max).
#if defined(__HIP_PLATFORM_AMD__)
constexpr int kBackwardBlockThreads = 256;
#else
constexpr int kBackwardBlockThreads = kRowBlockThreads;
#endif

// Pass 1 of one chunk of a row: adds its share of the row's sum, sum(dy * w * x).
template <typename Access, typename T>
__device__ __forceinline__ void backward_sum(typename Access::Raw values,
                                             typename Access::Raw grads, const T* weight, int i,
                                             float& sum_dot) {
  constexpr int kWidth = Access::kWidth;
  float v[kWidth];
  float g[kWidth];
  float w[kWidth];
  Access::unpack(values, v);
  Access::unpack(grads, g);
  Access::unpack(Access::load(weight, i), w);
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    sum_dot += g[k] * w[k] * v[k];
  }
}

// One chunk's pass 2 from registers: its input gradient (plus the chunk of grad_extra with
// kExtra, where `given`) in `grad_x`, and its weight-gradient shares, dy * x * scale.
template <typename Access, bool kExtra>
__device__ __forceinline__ void gradient_chunk(typename Access::Raw values,
                                               typename Access::Raw grads,
                                               typename Access::Raw weights,
                                               typename Access::Raw extras, float scale,
                                               float correction, float (&shares)[Access::kWidth],
                                               typename Access::Raw& grad_x, bool given = true) {
  constexpr int kWidth = Access::kWidth;
  float v[kWidth];
  float g[kWidth];
  float w[kWidth];
  float e[kWidth];
  Access::unpack(values, v);
  Access::unpack(grads, g);
  Access::unpack(weights, w);
  if constexpr (kExtra) {
    if (given) {
      Access::unpack(extras, e);
    }
  }
#pragma unroll
  for (int k = 0; k < kWidth; ++k) {
    shares[k] = g[k] * v[k] * scale;
    const float d = scale * w[k] * g[k] - v[k] * correction;
    v[k] = kExtra && given ? d + e[k] : d;
  }
  grad_x = Access::pack(v);
}

// Stores chunk i of a row's input gradient to grad_x, and to grad_x_copy unless null.
template <typename Access, typename T>
__device__ __forceinline__ void store_gradient(T* grad_x_row, T* grad_x_copy_row, int i,
                                               typename Access::Raw out) {
  Access::store(grad_x_row, i, out);
  if (grad_x_copy_row != nullptr) {
    Access::store(grad_x_copy_row, i, out);
  }
}

// Pass 2 of one chunk read from memory (the part of a long row no thread keeps in registers):
// stores its input gradient (to grad_x, and grad_x_copy unless null; plus grad_extra's chunk with
// kExtra) and returns in `shares` its share of the weight gradient, which the caller adds to its
// partial row.
template <typename Access, bool kExtra, typename T>
__device__ __forceinline__ void backward_chunk(const T* x_row, const T* grad_row, const T* weight,
                                               const T* grad_extra_row, T* grad_x_row,
                                               T* grad_x_copy_row, int i, float scale,
                                               float correction, float (&shares)[Access::kWidth],
                                               bool given = true) {
  typename Access::Raw extra{};
  if constexpr (kExtra) {
    if (given) {
      extra = Access::load(grad_extra_row, i);
    }
  }
  typename Access::Raw out;
  gradient_chunk<Access, kExtra>(Access::load(x_row, i), Access::load(grad_row, i),
                                 Access::load(weight, i), extra, scale, correction, shares, out,
                                 given);
  store_gradient<Access>(grad_x_row, grad_x_copy_row, i, out);
}

// kExtra: grad_extra is added; with kTested only where it is not null, a test at run time (AMD's
// one form for both, rms_norm_backward says why).
template <typename Access, bool kExtra, bool kTested = false, typename T>
__device__ __forceinline__ void rms_norm_backward_rows(const T* x, const float* row_scales,
                                                       const T* weight, const T* grad,
                                                       const T* grad_extra, T* grad_x,
                                                       T* grad_x_copy, float* partial,
                                                       long long rows, long long cols,
                                                       float* slots) {
  using Raw = typename Access::Raw;
  constexpr int kWidth = Access::kWidth;
  constexpr int kCached = kBackwardCachedChunks;
  const int stride = static_cast<int>(blockDim.x);
  const int chunks = static_cast<int>(cols / kWidth);
  float* partial_row = partial + static_cast<long long>(blockIdx.x) * cols;
  const bool given = !kTested || grad_extra != nullptr;
  float sums[kCached][kWidth];
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      sums[c][k] = 0.0f;
    }
  }
  const float inverse_cols = 1.0f / static_cast<float>(cols);
  bool first_row = true;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long offset = row * cols;
    const T* x_row = x + offset;
    const T* grad_row = grad + offset;
    const T* grad_extra_row = kExtra && given ? grad_extra + offset : nullptr;
    T* grad_x_row = grad_x + offset;
    T* grad_x_copy_row = grad_x_copy != nullptr ? grad_x_copy + offset : nullptr;
    const float scale = row_scales[row];  // the forward's, loaded beside the row
    // The first kCached chunks of a thread stay in registers between the passes (grad_extra's
    // too, loaded here though only pass 2 reads it); the rest of a long row is read again in
    // pass 2.
    Raw values[kCached];
    Raw grads[kCached];
    Raw extras[kCached];
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (i < chunks) {
        values[c] = Access::load(x_row, i);
        grads[c] = Access::load(grad_row, i);
        if constexpr (kExtra) {
          if (given) {
            extras[c] = Access::load(grad_extra_row, i);
          }
        }
      }
    }
    float sum_dot = 0.0f;  // sum of dy * w * x
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (i < chunks) {
        backward_sum<Access>(values[c], grads[c], weight, i, sum_dot);
      }
    }
    for (int i = static_cast<int>(threadIdx.x) + kCached * stride; i < chunks; i += stride) {
      backward_sum<Access>(Access::load(x_row, i), Access::load(grad_row, i), weight, i, sum_dot);
    }
    sum_dot = short_row_sum(sum_dot, slots);
    const float correction = sum_dot * scale * scale * scale * inverse_cols;

    // The weight gradient's shares: the cached chunks' into registers, the rest's into this
    // block's partial row (the first row a block takes sets it, the others add to it).
    float contribution[kWidth];
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (i < chunks) {
        Raw out;
        Raw extra{};
        if constexpr (kExtra) {
          if (given) {
            extra = extras[c];
          }
        }
        gradient_chunk<Access, kExtra>(values[c], grads[c], Access::load(weight, i), extra,
                                       scale, correction, contribution, out, given);
        store_gradient<Access>(grad_x_row, grad_x_copy_row, i, out);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          sums[c][k] += contribution[k];
        }
      }
    }
    for (int i = static_cast<int>(threadIdx.x) + kCached * stride; i < chunks; i += stride) {
      backward_chunk<Access, kExtra>(x_row, grad_row, weight, grad_extra_row, grad_x_row,
                                     grad_x_copy_row, i, scale, correction, contribution, given);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        float& slot = partial_row[static_cast<long long>(i) * kWidth + k];
        slot = first_row ? contribution[k] : slot + contribution[k];
      }
    }
    first_row = false;
  }
#pragma unroll
  for (int c = 0; c < kCached; ++c) {
    const int i = static_cast<int>(threadIdx.x) + c * stride;
    if (i < chunks) {
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        partial_row[static_cast<long long>(i) * kWidth + k] = sums[c][k];
      }
    }
  }
}

template <typename T>
__device__ __forceinline__ void rms_norm_backward(const T* x, const float* row_scales,
                                                  const T* weight, const T* grad,
                                                  const T* grad_extra, T* grad_x, T* grad_x_copy,
                                                  float* partial, long long rows,
                                                  long long cols) {
  __shared__ float slots[kp::kMaxBlockThreads];
  constexpr int kWidth = VectorAccess<T>::kWidth;
  const bool vectors = vector_aligned(x) && vector_aligned(weight) && vector_aligned(grad) &&
                       vector_aligned(grad_extra) && vector_aligned(grad_x) &&
                       vector_aligned(grad_x_copy) && cols % kWidth == 0;
#if defined(__HIP_PLATFORM_AMD__)
  // One form an access, grad_extra tested at run time: the four forms in one kernel held more
  // than the 102 SGPRs of a gfx9 wave (VOP3 there takes no literal, so bfloat16's rounding
  // constants sit in SGPRs too) and spilled some; two fit with room.
  if (vectors) {
    rms_norm_backward_rows<VectorAccess<T>, true, true>(x, row_scales, weight, grad, grad_extra,
                                                        grad_x, grad_x_copy, partial, rows, cols,
                                                        slots);
  } else {
    rms_norm_backward_rows<ScalarAccess<T>, true, true>(x, row_scales, weight, grad, grad_extra,
                                                        grad_x, grad_x_copy, partial, rows, cols,
                                                        slots);
  }
#else
  if (vectors) {
    if (grad_extra != nullptr) {
      rms_norm_backward_rows<VectorAccess<T>, true>(x, row_scales, weight, grad, grad_extra,
                                                    grad_x, grad_x_copy, partial, rows, cols,
                                                    slots);
    } else {
      rms_norm_backward_rows<VectorAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                     grad_x, grad_x_copy, partial, rows, cols,
                                                     slots);
    }
  } else if (grad_extra != nullptr) {
    rms_norm_backward_rows<ScalarAccess<T>, true>(x, row_scales, weight, grad, grad_extra, grad_x,
                                                  grad_x_copy, partial, rows, cols, slots);
  } else {
    rms_norm_backward_rows<ScalarAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                   grad_x, grad_x_copy, partial, rows, cols,
                                                   slots);
  }
#endif
}

// ---- short-row backward ----------------------------------------------------------------------
//
// Few rows (the host's choice: at most a row a multiprocessor, one block a row). At these sizes
// every kernel is bound by its latency, not by bytes (the general backward and its weight sum
// took five times torch.compile's one kernel at 1 x 4096; docs/bench-mlp-notes.md, "The backward
// norms"), so this kernel shortens the chain of each thread: one (at most
// kShortBackwardChunks) vector of x, dy, the weight and grad_extra a thread, all loaded at once
// before the row's sums and held in registers to the stores. One row in one block stores the
// weight gradient itself (its shares are the gradient), so a 1-row backward is one kernel. More
// rows take a second kernel that sums in a fixed order (kRowScales):
//   16-bit types: rms_norm_weight_grad_inputs sums dy * x * scale over the rows from the inputs
//     and the forward's row scales, as torch.compile's backward does, and this kernel stores no
//     weight-gradient shares. Its loads are the 4 bytes an element that float32 shares would be,
//     and this kernel stores a third less;
//   float32: a float32 row of shares a block in `scratch`, summed by rms_norm_weight_grad as the
//     general kernel's; read from the inputs they would be twice the bytes, and the sum slower
//     than the backward gains.
// (A grid barrier instead of the second kernel was slower: its fences and atomics cost more than
// a kernel boundary. The measurements: docs/bench-mlp-notes.md, "The backward norms".)
constexpr int kShortBackwardThreads = 512;
constexpr int kShortBackwardChunks = 2;

// Whether the weight sum after the short backward of T reads the inputs and row scales (16-bit
// types) rather than shares the backward leaves in `scratch`, above.
template <typename T>
constexpr bool kRowScales = sizeof(T) == 2;

// A float row's kWidth entries from `shares`: 16-byte stores where kWidth is a multiple of 4 (the
// vector path: `slot` is then 16-byte aligned, rows being whole vectors), else one at a time.
// With `add` the shares are added to what is there (a block's rows after its first).
template <int kWidth>
__device__ __forceinline__ void put_shares(float* slot, const float (&shares)[kWidth], bool add) {
  if constexpr (kWidth % 4 == 0) {
#pragma unroll
    for (int k = 0; k < kWidth; k += 4) {
      float4* at = reinterpret_cast<float4*>(slot + k);
      float4 value = make_float4(shares[k], shares[k + 1], shares[k + 2], shares[k + 3]);
      if (add) {
        const float4 old = *at;
        value.x += old.x;
        value.y += old.y;
        value.z += old.z;
        value.w += old.w;
      }
      *at = value;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      slot[k] = add ? slot[k] + shares[k] : shares[k];
    }
  }
}

// The rows of one block, each with its scale from the forward's row_scales. With `direct` (one
// row, one block) the shares are the weight gradient, stored to grad_weight in T; otherwise the
// block stores nothing more (kRowScales) or its shares to its row of `scratch`, the first row's
// stored and the later rows' (a grid smaller than the rows) added there. (Not summed in
// registers across rows: at the host's one row a block that would only cost registers, and
// gfx9-generic spilled.)
//
// With kCols (not 0) rows are kCols long and blockDim.x is kShortBackwardThreads, which times
// kCached covers a row exactly (rms_norm_backward_fixed): the length, 1 / cols and the stride are
// constants and no vector needs a bound check, as in the fixed-length forward.
//
// kCached vectors a thread stay in registers: with one, its weight and grad_extra vectors too,
// loaded beside x and dy; with two (rows of more vectors than threads), only x and dy, the others
// read in pass 2 as the general kernel does (from L1), which keeps the two-vector form under the
// 128 registers a 512-thread block leaves a thread on gfx9.
template <int kCached, typename Access, bool kExtra, int kCols = 0, typename T>
__device__ __forceinline__ void short_backward_rows(const T* x, const float* row_scales,
                                                    const T* weight, const T* grad,
                                                    const T* grad_extra, T* grad_x,
                                                    T* grad_weight, float* scratch, bool direct,
                                                    long long rows, long long cols,
                                                    float* slots) {
  using Raw = typename Access::Raw;
  constexpr int kWidth = Access::kWidth;
  constexpr bool kCacheAll = kCached == 1;
  constexpr bool kFixed = kCols != 0;
  static_assert(!kFixed || kCols / kWidth == kCached * kShortBackwardThreads, "rows covered");
  const long long length = kFixed ? kCols : cols;
  const int stride = kFixed ? kShortBackwardThreads : static_cast<int>(blockDim.x);
  const int chunks = static_cast<int>(length / kWidth);
  const float inverse_cols = 1.0f / static_cast<float>(length);
  float* partial_row =
      direct || kRowScales<T> ? nullptr : scratch + static_cast<long long>(blockIdx.x) * length;
  bool first_row = true;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long offset = row * length;
    const T* x_row = x + offset;
    const T* grad_row = grad + offset;
    const T* grad_extra_row = kExtra ? grad_extra + offset : nullptr;
    T* grad_x_row = grad_x + offset;
    const float scale = row_scales[row];  // the forward's, loaded beside the row
    Raw values[kCached];
    Raw grads[kCached];
    Raw weights[kCached];
    Raw extras[kCached];
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (kFixed || i < chunks) {
        values[c] = Access::load(x_row, i);
        grads[c] = Access::load(grad_row, i);
        if constexpr (kCacheAll) {
          weights[c] = Access::load(weight, i);
          if constexpr (kExtra) {
            extras[c] = Access::load(grad_extra_row, i);
          }
        }
      }
    }
    float sum_dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (kFixed || i < chunks) {
        float v[kWidth];
        float g[kWidth];
        float w[kWidth];
        Access::unpack(values[c], v);
        Access::unpack(grads[c], g);
        Access::unpack(kCacheAll ? weights[c] : Access::load(weight, i), w);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          sum_dot += g[k] * w[k] * v[k];
        }
      }
    }
    for (int i = static_cast<int>(threadIdx.x) + kCached * stride; !kFixed && i < chunks;
         i += stride) {
      backward_sum<Access>(Access::load(x_row, i), Access::load(grad_row, i), weight, i, sum_dot);
    }
    sum_dot = short_row_sum(sum_dot, slots);
    const float correction = sum_dot * scale * scale * scale * inverse_cols;
    float shares[kWidth];
#pragma unroll
    for (int c = 0; c < kCached; ++c) {
      const int i = static_cast<int>(threadIdx.x) + c * stride;
      if (kFixed || i < chunks) {
        Raw out;
        Raw extra{};
        if constexpr (kExtra) {
          extra = kCacheAll ? extras[c] : Access::load(grad_extra_row, i);
        }
        gradient_chunk<Access, kExtra>(values[c], grads[c],
                                       kCacheAll ? weights[c] : Access::load(weight, i), extra,
                                       scale, correction, shares, out);
        Access::store(grad_x_row, i, out);
        if (direct) {
          Access::store(grad_weight, i, Access::pack(shares));
        } else if constexpr (!kRowScales<T>) {
          put_shares(partial_row + static_cast<long long>(i) * kWidth, shares, !first_row);
        }
      }
    }
    for (int i = static_cast<int>(threadIdx.x) + kCached * stride; !kFixed && i < chunks;
         i += stride) {
      backward_chunk<Access, kExtra>(x_row, grad_row, weight, grad_extra_row, grad_x_row,
                                     static_cast<T*>(nullptr), i, scale, correction, shares);
      if (direct) {
        Access::store(grad_weight, i, Access::pack(shares));
      } else if constexpr (!kRowScales<T>) {
        put_shares(partial_row + static_cast<long long>(i) * kWidth, shares, !first_row);
      }
    }
    first_row = false;
  }
  // Shares: a block without rows (more blocks than rows) writes its row of zeros, which the sum
  // reads.
  if (!kRowScales<T> && !direct && first_row) {
    for (int i = static_cast<int>(threadIdx.x); i < chunks; i += stride) {
      const float zeros[kWidth] = {};
      put_shares(partial_row + static_cast<long long>(i) * kWidth, zeros, false);
    }
  }
}

// blockDim.x threads a row (a power of two, at least a wavefront), blockDim.y == 1; row_scales
// float32 [rows], the forward's; `scratch` float32 [gridDim.x, cols] (float32 shares), unused
// (may be null) for 16-bit types (kRowScales<T>) and when rows == 1 and gridDim.x == 1.
template <typename T>
__device__ __forceinline__ void rms_norm_backward_short(const T* x, const float* row_scales,
                                                        const T* weight, const T* grad,
                                                        const T* grad_extra, T* grad_x,
                                                        T* grad_weight, float* scratch,
                                                        long long rows, long long cols) {
  __shared__ float slots[kp::kMaxBlockThreads];
  constexpr int kWidth = VectorAccess<T>::kWidth;
  const bool direct = rows == 1 && gridDim.x == 1;
  // float32 shares are stored as 16-byte vectors
  float* shares = kRowScales<T> ? nullptr : scratch;
  const bool vectors =
      all_aligned<kVectorBytes>(x, weight, grad, grad_extra, grad_x, grad_weight, shares) &&
      cols % kWidth == 0;
  constexpr int kTwo = kShortBackwardChunks;
  if (vectors && cols / kWidth <= static_cast<long long>(blockDim.x)) {
    if (grad_extra != nullptr) {
      short_backward_rows<1, VectorAccess<T>, true>(x, row_scales, weight, grad, grad_extra,
                                                    grad_x, grad_weight, shares, direct, rows,
                                                    cols, slots);
    } else {
      short_backward_rows<1, VectorAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                     grad_x, grad_weight, shares, direct, rows,
                                                     cols, slots);
    }
  } else if (vectors) {
    if (grad_extra != nullptr) {
      short_backward_rows<kTwo, VectorAccess<T>, true>(x, row_scales, weight, grad, grad_extra,
                                                       grad_x, grad_weight, shares, direct, rows,
                                                       cols, slots);
    } else {
      short_backward_rows<kTwo, VectorAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                        grad_x, grad_weight, shares, direct, rows,
                                                        cols, slots);
    }
  } else if (grad_extra != nullptr) {
    short_backward_rows<kTwo, ScalarAccess<T>, true>(x, row_scales, weight, grad, grad_extra,
                                                     grad_x, grad_weight, shares, direct, rows,
                                                     cols, slots);
  } else {
    short_backward_rows<kTwo, ScalarAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                      grad_x, grad_weight, shares, direct, rows,
                                                      cols, slots);
  }
}

// Rows of a fixed length (kCols, the host's choice where kShortBackwardThreads threads of one or
// two vectors cover a row exactly: 4096 columns, and 8192 of 16-bit types) with the length a
// constant, as the fixed-length forward; other lengths and misaligned pointers take the scalar
// loop (right, slow). blockDim.x == kShortBackwardThreads, blockDim.y == 1.
template <int kCols, typename T>
__device__ __forceinline__ void rms_norm_backward_fixed(const T* x, const float* row_scales,
                                                        const T* weight, const T* grad,
                                                        const T* grad_extra, T* grad_x,
                                                        T* grad_weight, float* scratch,
                                                        long long rows, long long cols) {
  __shared__ float slots[kp::kMaxBlockThreads];
  constexpr int kCached = kCols / VectorAccess<T>::kWidth / kShortBackwardThreads;
  const bool direct = rows == 1 && gridDim.x == 1;
  float* shares = kRowScales<T> ? nullptr : scratch;
  const bool vectors = cols == kCols && all_aligned<kVectorBytes>(x, weight, grad, grad_extra,
                                                                  grad_x, grad_weight, shares);
  constexpr int kTwo = kShortBackwardChunks;
  if (vectors && grad_extra != nullptr) {
    short_backward_rows<kCached, VectorAccess<T>, true, kCols>(x, row_scales, weight, grad,
                                                               grad_extra, grad_x, grad_weight,
                                                               shares, direct, rows, cols, slots);
  } else if (vectors) {
    short_backward_rows<kCached, VectorAccess<T>, false, kCols>(x, row_scales, weight, grad,
                                                                grad_extra, grad_x, grad_weight,
                                                                shares, direct, rows, cols, slots);
  } else if (grad_extra != nullptr) {
    short_backward_rows<kTwo, ScalarAccess<T>, true>(x, row_scales, weight, grad, grad_extra,
                                                     grad_x, grad_weight, shares, direct, rows,
                                                     cols, slots);
  } else {
    short_backward_rows<kTwo, ScalarAccess<T>, false>(x, row_scales, weight, grad, grad_extra,
                                                      grad_x, grad_weight, shares, direct, rows,
                                                      cols, slots);
  }
}

// The weight-gradient sum's block bound: blockDim.x columns by blockDim.y slices of the rows
// (one thread a column summing all the rows in turn is latency-bound; docs/bench-mlp-notes.md, "The
// backward norms").
constexpr int kWeightGradThreads = 256;
// Rows a thread of the weight-gradient sum has in flight at once, and slices' sums slice 0 adds.
constexpr int kWeightGradInFlight = 8;

// Where the weight-gradient sum reads row b's share of column group j (kWidth columns), in two
// steps, its loads then its values, so that a thread issues all its rows' loads before it waits
// on any (ptxas kept the order of a share computed whole: the three loads of each row waited on
// the previous row's product, eight L2 round trips in turn). From the general backward's float32
// partial sums, one row a block, a column a group ...
struct PartialShares {
  static constexpr int kWidth = 1;
  using Loaded = float;

  const float* partial;
  long long cols;

  __device__ __forceinline__ Loaded load(long long b, long long j) const {
    return partial[b * cols + j];
  }
  __device__ __forceinline__ void values(Loaded loaded, float (&out)[1]) const { out[0] = loaded; }
};

// ... or from the short backward's inputs and row scales: dy * x * scale, the product its direct
// form stores for one row, a group of Access's kWidth columns (`groups` of them a row).
template <typename T, typename Access>
struct InputShares {
  static constexpr int kWidth = Access::kWidth;
  struct Loaded {
    typename Access::Raw x;
    typename Access::Raw grad;
    float scale;
  };

  const T* x;
  const T* grad;
  const float* scales;
  long long groups;

  __device__ __forceinline__ Loaded load(long long b, long long j) const {
    return {Access::load(x, b * groups + j), Access::load(grad, b * groups + j), scales[b]};
  }
  __device__ __forceinline__ void values(const Loaded& loaded, float (&out)[kWidth]) const {
    float v[kWidth];
    float g[kWidth];
    Access::unpack(loaded.x, v);
    Access::unpack(loaded.grad, g);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      out[k] = g[k] * v[k] * loaded.scale;
    }
  }
};

// grad_weight's group j (Access: kWidth columns, Shares' width) = the sum over the rows b of row
// b's share of it, for `groups` groups. Slice y of a block sums the rows b = y, y + blockDim.y,
// ... of its groups in turn, then slice 0 adds the slices' sums in order, so that for a given
// geometry (the host's depends on the shape alone) every run gives the same bits. The loop bound
// is the block's first group, the same for all its threads, so every thread meets the barriers.
// A thread past the last group loads the last one's rows and stores nothing, so that its loads
// wait on no test (as in the exact elementwise forms), and slice 0 loads kWeightGradInFlight
// slices' sums before it adds them, rather than a load and an addition a slice in turn
// (docs/bench-mlp-notes.md, "The backward norms").
template <typename Access, typename Shares, typename T>
__device__ __forceinline__ void weight_grad(const Shares& share, T* grad_weight, long long rows,
                                            long long groups) {
  constexpr int kWidth = Shares::kWidth;
  static_assert(Access::kWidth == kWidth, "a group stored as it is summed");
  __shared__ float slices[kWidth][kWeightGradThreads];
  const int width = static_cast<int>(blockDim.x);
  const int slot = static_cast<int>(threadIdx.y) * width + static_cast<int>(threadIdx.x);
  const long long stride = static_cast<long long>(gridDim.x) * width;
  for (long long first = static_cast<long long>(blockIdx.x) * width; first < groups;
       first += stride) {
    const long long j = first + threadIdx.x;
    const long long loaded_group = j < groups ? j : groups - 1;
    float sum[kWidth] = {};
    // kWeightGradInFlight rows' loads issued before any of their additions (each is an L2 round
    // trip), those past the last row reading the last row and added as zeros: the additions
    // keep their order. (A loop unrolled by the compiler kept a test between its loads, and each
    // addition waited for its load before the next load issued: at 64 partial rows and 16
    // slices, four round trips in turn; at 264 rows and 8 slices, 33. With three loads a row,
    // `b < rows ? load : 0` compiled to a branch around each row's loads.)
    for (long long first_b = threadIdx.y; first_b < rows;
         first_b += kWeightGradInFlight * static_cast<long long>(blockDim.y)) {
      typename Shares::Loaded loaded[kWeightGradInFlight];
#pragma unroll
      for (int k = 0; k < kWeightGradInFlight; ++k) {
        const long long b = first_b + static_cast<long long>(k) * blockDim.y;
        loaded[k] = share.load(b < rows ? b : rows - 1, loaded_group);
      }
#pragma unroll
      for (int k = 0; k < kWeightGradInFlight; ++k) {
        const long long b = first_b + static_cast<long long>(k) * blockDim.y;
        float values[kWidth];
        share.values(loaded[k], values);
#pragma unroll
        for (int w = 0; w < kWidth; ++w) {
          sum[w] += b < rows ? values[w] : 0.0f;
        }
      }
    }
#pragma unroll
    for (int w = 0; w < kWidth; ++w) {
      slices[w][slot] = sum[w];
    }
    __syncthreads();
    if (threadIdx.y == 0 && j < groups) {
      const int height = static_cast<int>(blockDim.y);
      float total[kWidth] = {};
      for (int first_y = 0; first_y < height; first_y += kWeightGradInFlight) {
        float parts[kWeightGradInFlight][kWidth];
#pragma unroll
        for (int k = 0; k < kWeightGradInFlight; ++k) {
          const int y = first_y + k < height ? first_y + k : first_y;
#pragma unroll
          for (int w = 0; w < kWidth; ++w) {
            parts[k][w] = slices[w][y * width + static_cast<int>(threadIdx.x)];
          }
        }
#pragma unroll
        for (int k = 0; k < kWeightGradInFlight; ++k) {
#pragma unroll
          for (int w = 0; w < kWidth; ++w) {
            total[w] += first_y + k < height ? parts[k][w] : 0.0f;
          }
        }
      }
      Access::store(grad_weight, j, Access::pack(total));
    }
    __syncthreads();
  }
}

}  // namespace

// The kernels: one template per op, instantiated below for float, __half and __nv_bfloat16. The
// builder finds them in the compiled objects and names them as this source spells them
// (docs/loader.md, "Kernel names"): mlp::swiglu<float>, mlp::rms_norm<__nv_bfloat16>, ...
// Each calls the helper of the same name in the unnamed namespace above (hence the "::").
namespace mlp {

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu(const T* gate, const T* up, T* out, long long n) {
  ::swiglu(gate, up, out, n);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul(const T* x, T* out, long long rows, long long cols) {
  ::silu_and_mul(x, out, rows, cols);
}

// The exact forms of the two (the host's choice: kernelpack.ops.mlp.geometry.exact_vector_bytes),
// and their 16-byte forms through StreamingAccess, for calls that move little (the host's choice:
// kernelpack.ops.mlp.tuning.STREAMING_MAX_BYTES). The plain 16-byte forms serve only the calls past
// it, the ones at copy bandwidth: they take silu_mul_divided; the 8-byte forms (short inputs) and
// the streaming ones the fast sigmoid, which their calls gained from (sigmoid).
template <typename T, int kBytes>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_exact(const T* gate, const T* up, T* out, long long n) {
  ::swiglu_exact<VectorAccess<T, kBytes>, kBytes == kVectorBytes>(gate, up, out, n);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_exact_streaming(const T* gate, const T* up, T* out, long long n) {
  ::swiglu_exact<StreamingAccess<T>, false>(gate, up, out, n);
}

template <typename T, int kBytes>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_exact(const T* x, T* out, long long rows, long long cols) {
  ::silu_and_mul_exact<VectorAccess<T, kBytes>, kBytes == kVectorBytes>(x, out, cols);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_exact_streaming(const T* x, T* out, long long rows, long long cols) {
  ::silu_and_mul_exact<StreamingAccess<T>, false>(x, out, cols);
}

// The blocks of kRowBlockThreads an SM the general forward rms_norm is built for at least (its
// __launch_bounds__): 64 registers a thread on NVIDIA. Float32 rows of 8192 take 512 threads: at
// 74 registers (ptxas's choice with an explicit bound of one block is 78) one block fits an SM,
// and the kernel is a third slower. 16-bit rows of 8192 take 256 threads: at the 74 registers
// ptxas gives them unbounded three blocks fit, at 64 four, which is faster, with 10 bytes of
// bfloat16 spilled to L1 on sm_90 (docs/bench-mlp-notes.md, "The forward norms"). (add_rms_norm, at
// 116 registers in bfloat16, keeps its bound: not tried.) Rows of 4096, 5120 and 8192 take the
// fixed-length kernels; the general ones keep the other lengths, in whole blocks of 64 threads
// (kernelpack.ops.mlp.geometry's _forward_row_threads), and tests/test_build.py checks this bound
// at 8192's block.
constexpr int kRowNormMinBlocks = 2;

// row_scales: null (inference), or float32 [rows] to receive each row's scale (training: the
// backward's input), in every form of the forward norms.
template <typename T>
__global__ void __launch_bounds__(kRowBlockThreads, kRowNormMinBlocks)
    rms_norm(const T* x, const T* weight, T* out, float* row_scales, long long rows,
             long long cols, float eps) {
  ::rms_norm<false>(x, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), weight, out,
                    row_scales, rows, cols, eps);
}

// residual_out = x + residual, out = rms_norm(residual_out); fused_add_rms_norm passes out = x
// and residual_out = residual (in place).
template <typename T>
__global__ void __launch_bounds__(kRowBlockThreads)
    add_rms_norm(const T* x, const T* residual, const T* weight, T* out, T* residual_out,
                 float* row_scales, long long rows, long long cols, float eps) {
  ::rms_norm<true>(x, residual, residual_out, weight, out, row_scales, rows, cols, eps);
}

// The same two ops for short rows (the host's choice for few rows): one block a row, one vector a
// thread. At least one block an SM is all they need: without the 1, ptxas held sm_80's float32
// add_rms_norm_short to 32 registers and spilled 4 bytes.
template <typename T>
__global__ void __launch_bounds__(kShortRowThreads, 1)
    rms_norm_short(const T* x, const T* weight, T* out, float* row_scales, long long rows,
                   long long cols, float eps) {
  ::rms_norm_short<false>(x, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), weight,
                          out, row_scales, rows, cols, eps);
}

template <typename T>
__global__ void __launch_bounds__(kShortRowThreads, 1)
    add_rms_norm_short(const T* x, const T* residual, const T* weight, T* out, T* residual_out,
                       float* row_scales, long long rows, long long cols, float eps) {
  ::rms_norm_short<true>(x, residual, residual_out, weight, out, row_scales, rows, cols, eps);
}

// The same two ops for rows of kCols (LLaMA's hidden sizes), exact: a block for each row of
// kCols elements, blockDim.x == FixedRow<T, kCols>::kThreads; rows and cols are the host's sizes,
// as every form takes them, and not read. (The bound in parentheses: HIP's __launch_bounds__ is a
// macro, and the template's comma would split its arguments.)
template <typename T, int kCols>
__global__ void __launch_bounds__((FixedRow<T, kCols>::kThreads), 1)
    rms_norm_fixed(const T* x, const T* weight, T* out, float* row_scales,
                   long long /* rows: the grid */, long long /* cols: kCols */, float eps) {
  ::rms_norm_fixed<kCols, false, true>(x, static_cast<const T*>(nullptr),
                                       static_cast<T*>(nullptr), weight, out, row_scales, eps);
}

// rms_norm_fixed for more rows than multiprocessors (the host's choice), its registers bounded so
// that its blocks fill an SM (FixedRow::kFullMinBlocks): faster than rms_norm_fixed at ptxas's
// 40-42 registers from a few hundred rows on, slightly slower for fewer, where no SM holds more
// than one row's block either way. add_rms_norm's form for many rows (add_rms_norm_fixed_full),
// a vector of the residual more, is not bounded so: bounded, bfloat16 spilled and was slower
// (docs/bench-mlp-notes.md, "The forward norms"; docs/mlp-tuning.md).
template <typename T, int kCols>
__global__ void __launch_bounds__((FixedRow<T, kCols>::kThreads),
                                  (FixedRow<T, kCols>::kFullMinBlocks))
    rms_norm_fixed_full(const T* x, const T* weight, T* out, float* row_scales,
                        long long /* rows: the grid */, long long /* cols: kCols */, float eps) {
  ::rms_norm_fixed<kCols, false, false, kFullRereadsRow<T, kCols>>(
      x, static_cast<const T*>(nullptr), static_cast<T*>(nullptr), weight, out, row_scales, eps);
}

template <typename T, int kCols>
__global__ void __launch_bounds__((FixedRow<T, kCols>::kThreads), 1)
    add_rms_norm_fixed(const T* x, const T* residual, const T* weight, T* out, T* residual_out,
                       float* row_scales, long long /* rows: the grid */,
                       long long /* cols: kCols */, float eps) {
  ::rms_norm_fixed<kCols, true, true>(x, residual, residual_out, weight, out, row_scales, eps);
}

// add_rms_norm_fixed for more rows than the SMs (the host's choice): the same, its rows through
// VectorAccess (StreamingAccess's comment says why).
template <typename T, int kCols>
__global__ void __launch_bounds__((FixedRow<T, kCols>::kThreads), 1)
    add_rms_norm_fixed_full(const T* x, const T* residual, const T* weight, T* out,
                            T* residual_out, float* row_scales, long long /* rows: the grid */,
                            long long /* cols: kCols */, float eps) {
  ::rms_norm_fixed<kCols, true, false>(x, residual, residual_out, weight, out, row_scales, eps);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_backward(const T* gate, const T* up, const T* grad, T* grad_gate, T* grad_up,
                    long long n) {
  ::swiglu_backward(gate, up, grad, grad_gate, grad_up, n);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_backward(const T* x, const T* grad, T* grad_x, long long rows, long long cols) {
  ::silu_and_mul_backward(x, grad, grad_x, rows, cols);
}

template <typename T, int kBytes>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_backward_exact(const T* gate, const T* up, const T* grad, T* grad_gate, T* grad_up,
                          long long n) {
  ::swiglu_backward_exact<VectorAccess<T, kBytes>>(gate, up, grad, grad_gate, grad_up, n);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_backward_exact_streaming(const T* gate, const T* up, const T* grad, T* grad_gate,
                                    T* grad_up, long long n) {
  ::swiglu_backward_exact<StreamingAccess<T>>(gate, up, grad, grad_gate, grad_up, n);
}

template <typename T, int kBytes>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_backward_exact(const T* x, const T* grad, T* grad_x, long long rows,
                                long long cols) {
  ::silu_and_mul_backward_exact<VectorAccess<T, kBytes>>(x, grad, grad_x, cols);
}

template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_backward_exact_streaming(const T* x, const T* grad, T* grad_x, long long rows,
                                          long long cols) {
  ::silu_and_mul_backward_exact<StreamingAccess<T>>(x, grad, grad_x, cols);
}

// row_scales is float32 [rows], the forward's (rms_norm's row_scales); grad_extra and
// grad_x_copy may be null; partial is float32 [gridDim.x, cols].
template <typename T>
__global__ void __launch_bounds__(kBackwardBlockThreads)
    rms_norm_backward(const T* x, const float* row_scales, const T* weight, const T* grad,
                      const T* grad_extra, T* grad_x, T* grad_x_copy, float* partial,
                      long long rows, long long cols) {
  ::rms_norm_backward(x, row_scales, weight, grad, grad_extra, grad_x, grad_x_copy, partial, rows,
                      cols);
}

// The backward of few rows (the host's choice): row_scales the forward's; grad_extra may be null;
// one row in one block writes grad_weight, other grids leave grad_weight alone and leave its sum
// to a second kernel: 16-bit types rms_norm_weight_grad_inputs, from the inputs and row_scales
// (scratch unused, may be null); float32 rms_norm_weight_grad, from the float32 shares written to
// scratch ([gridDim.x, cols]).
template <typename T>
__global__ void __launch_bounds__(kShortBackwardThreads, 1)
    rms_norm_backward_short(const T* x, const float* row_scales, const T* weight, const T* grad,
                            const T* grad_extra, T* grad_x, T* grad_weight, float* scratch,
                            long long rows, long long cols) {
  ::rms_norm_backward_short(x, row_scales, weight, grad, grad_extra, grad_x, grad_weight, scratch,
                            rows, cols);
}

// The same for rows of kCols (rms_norm_backward_fixed above): blockDim.x == kShortBackwardThreads.
template <typename T, int kCols>
__global__ void __launch_bounds__(kShortBackwardThreads, 1)
    rms_norm_backward_fixed(const T* x, const float* row_scales, const T* weight, const T* grad,
                            const T* grad_extra, T* grad_x, T* grad_weight, float* scratch,
                            long long rows, long long cols) {
  ::rms_norm_backward_fixed<kCols>(x, row_scales, weight, grad, grad_extra, grad_x, grad_weight,
                                   scratch, rows, cols);
}

// grad_weight = the column sums of partial (float32 [blocks, cols], rms_norm_backward's).
template <typename T>
__global__ void __launch_bounds__(kWeightGradThreads)
    rms_norm_weight_grad(const float* partial, T* grad_weight, long long blocks, long long cols) {
  ::weight_grad<ScalarAccess<T>>(PartialShares{partial, cols}, grad_weight, blocks, cols);
}

// grad_weight = the sum over the rows of grad * x * scales[row] (scales float32 [rows], the
// forward's row_scales), a column a thread.
template <typename T>
__global__ void __launch_bounds__(kWeightGradThreads)
    rms_norm_weight_grad_inputs(const T* x, const T* grad, const float* scales, T* grad_weight,
                                long long rows, long long cols) {
  using Access = ScalarAccess<T>;
  ::weight_grad<Access>(InputShares<T, Access>{x, grad, scales, cols}, grad_weight, rows, cols);
}

// Every op for one storage type.
#define MLP_KERNELS(T)                                                                          \
  template __global__ void swiglu<T>(const T*, const T*, T*, long long);                        \
  template __global__ void silu_and_mul<T>(const T*, T*, long long, long long);                 \
  template __global__ void rms_norm<T>(const T*, const T*, T*, float*, long long, long long,    \
                                       float);                                                  \
  template __global__ void add_rms_norm<T>(const T*, const T*, const T*, T*, T*, float*,        \
                                           long long, long long, float);                        \
  template __global__ void rms_norm_short<T>(const T*, const T*, T*, float*, long long,          \
                                             long long, float);                                 \
  template __global__ void add_rms_norm_short<T>(const T*, const T*, const T*, T*, T*, float*,  \
                                                 long long, long long, float);                  \
  template __global__ void swiglu_backward<T>(const T*, const T*, const T*, T*, T*, long long); \
  template __global__ void silu_and_mul_backward<T>(const T*, const T*, T*, long long,          \
                                                    long long);                                 \
  template __global__ void rms_norm_backward<T>(const T*, const float*, const T*, const T*,    \
                                                const T*, T*, T*, float*, long long, long long); \
  template __global__ void rms_norm_backward_short<T>(const T*, const float*, const T*,         \
                                                      const T*, const T*, T*, T*, float*,       \
                                                      long long, long long);                    \
  template __global__ void rms_norm_weight_grad<T>(const float*, T*, long long, long long);

MLP_KERNELS(float)
MLP_KERNELS(__half)
MLP_KERNELS(__nv_bfloat16)

#undef MLP_KERNELS

// The exact elementwise forms for one storage type and vector (kernelpack.ops.mlp.geometry's
// exact_vector_bytes: 8 or 16 bytes). The backwards' plain forms in 8-byte vectors alone: the host
// sizes their grid for 8-byte vectors wherever it takes plain accesses
// (kernelpack.ops.mlp.geometry.widest_vector_bytes), for 16-byte ones only below
// STREAMING_MAX_BYTES.
#define MLP_EXACT_FORWARD_KERNELS(T, BYTES)                                                     \
  template __global__ void swiglu_exact<T, BYTES>(const T*, const T*, T*, long long);           \
  template __global__ void silu_and_mul_exact<T, BYTES>(const T*, T*, long long, long long);

#define MLP_EXACT_BACKWARD_KERNELS(T, BYTES)                                                    \
  template __global__ void swiglu_backward_exact<T, BYTES>(const T*, const T*, const T*, T*,    \
                                                           T*, long long);                      \
  template __global__ void silu_and_mul_backward_exact<T, BYTES>(const T*, const T*, T*,        \
                                                                 long long, long long);

// The 16-byte exact forms through StreamingAccess.
#define MLP_EXACT_STREAMING_KERNELS(T)                                                          \
  template __global__ void swiglu_exact_streaming<T>(const T*, const T*, T*, long long);        \
  template __global__ void silu_and_mul_exact_streaming<T>(const T*, T*, long long, long long); \
  template __global__ void swiglu_backward_exact_streaming<T>(const T*, const T*, const T*, T*, \
                                                              T*, long long);                   \
  template __global__ void silu_and_mul_backward_exact_streaming<T>(const T*, const T*, T*,     \
                                                                    long long, long long);

#define MLP_EXACT_VECTORS(T)         \
  MLP_EXACT_FORWARD_KERNELS(T, 8)  \
  MLP_EXACT_FORWARD_KERNELS(T, 16) \
  MLP_EXACT_BACKWARD_KERNELS(T, 8) \
  MLP_EXACT_STREAMING_KERNELS(T)

MLP_EXACT_VECTORS(float)
MLP_EXACT_VECTORS(__half)
MLP_EXACT_VECTORS(__nv_bfloat16)

#undef MLP_EXACT_VECTORS
#undef MLP_EXACT_STREAMING_KERNELS
#undef MLP_EXACT_BACKWARD_KERNELS
#undef MLP_EXACT_FORWARD_KERNELS

// The weight sum from the inputs, a column a thread, for the types whose short backward
// leaves row scales (kRowScales).
template __global__ void rms_norm_weight_grad_inputs<__half>(const __half*, const __half*,
                                                             const float*, __half*, long long,
                                                             long long);
template __global__ void rms_norm_weight_grad_inputs<__nv_bfloat16>(const __nv_bfloat16*,
                                                                    const __nv_bfloat16*,
                                                                    const float*, __nv_bfloat16*,
                                                                    long long, long long);

// The fixed-length forward norms, per storage type and row length (kernelpack.ops.mlp.tuning's
// FIXED_COLUMNS: LLaMA's hidden sizes).
#define MLP_FIXED_KERNELS(T, COLS)                                                           \
  template __global__ void rms_norm_fixed<T, COLS>(const T*, const T*, T*, float*, long long,   \
                                                   long long, float);                          \
  template __global__ void rms_norm_fixed_full<T, COLS>(const T*, const T*, T*, float*,         \
                                                        long long, long long, float);          \
  template __global__ void add_rms_norm_fixed<T, COLS>(const T*, const T*, const T*, T*, T*,   \
                                                       float*, long long, long long, float);   \
  template __global__ void add_rms_norm_fixed_full<T, COLS>(const T*, const T*, const T*, T*,   \
                                                            T*, float*, long long, long long,  \
                                                            float);

#define MLP_FIXED_LENGTHS(T) \
  MLP_FIXED_KERNELS(T, 4096) \
  MLP_FIXED_KERNELS(T, 5120) \
  MLP_FIXED_KERNELS(T, 8192)

MLP_FIXED_LENGTHS(float)
MLP_FIXED_LENGTHS(__half)
MLP_FIXED_LENGTHS(__nv_bfloat16)

#undef MLP_FIXED_LENGTHS
#undef MLP_FIXED_KERNELS

// The fixed-length backward where kShortBackwardThreads threads of one or two vectors cover a row
// (kernelpack.ops.mlp.geometry.fixed_backward): 512 or 1024 vectors.
#define MLP_FIXED_BACKWARD(T, COLS)                                                         \
  template __global__ void rms_norm_backward_fixed<T, COLS>(const T*, const float*, const T*, \
                                                            const T*, const T*, T*, T*,     \
                                                            float*, long long, long long);

MLP_FIXED_BACKWARD(float, 4096)
MLP_FIXED_BACKWARD(__half, 4096)
MLP_FIXED_BACKWARD(__half, 8192)
MLP_FIXED_BACKWARD(__nv_bfloat16, 4096)
MLP_FIXED_BACKWARD(__nv_bfloat16, 8192)

#undef MLP_FIXED_BACKWARD

}  // namespace mlp

// ---- options a model can adopt: the Gemma offset, casting modes, weightless, float32 weight,
// strided rows, SwiGLU multipliers, torch's own SiLU-and-mul roundings (issue 47) ---------------
//
// Kernels of their own, so that the tuned forms above keep their code: none of them takes a
// run-time choice the default calls would pay for. Correctness first: a block a row (grid-stride
// over the rows), a thread per element in turn, any alignment, rows at any stride (the last
// dimension's stride 1). Launch geometry (kernelpack.ops.mlp.options): blockDim.x a power of two
// from 64 to 512, blockDim.y == 1, any grid (the loops stride).
//
// Casting modes (Liger-Kernel's rms_norm, as its kernels round; the template argument kCast):
//   kCastGemma (0)  everything in float32, rounded once to T: y = T(x * r * (offset + w)), the
//                   arithmetic of every other norm kernel here;
//   kCastLlama (1)  LlamaRMSNorm's: the normalised value rounded to T first, then times the
//                   weight (offset + w, in float32) and rounded again: y = T(T(x * r) * (offset + w));
//   kCastNone  (2)  the steps in T (Liger's "none": no casting): the mean square, the scale, x * r
//                   and offset + w each rounded to T, the sum of squares itself in float32.
// W is the weight's storage type: T, or float for a float32 weight with 16-bit activations.
// A null weight is a weightless norm (y = x * r, rounded as the mode says; offset unread).

namespace {

constexpr int kCastGemma = 0;
constexpr int kCastLlama = 1;
constexpr int kCastNone = 2;

template <typename T>
__device__ __forceinline__ float load_element(const T* base, long long i) {
  return Elem<T>::to_float(reinterpret_cast<const typename Elem<T>::Bits*>(base)[i]);
}

template <typename T>
__device__ __forceinline__ void store_element(T* base, long long i, float value) {
  reinterpret_cast<typename Elem<T>::Bits*>(base)[i] = Elem<T>::from_float(value);
}

// value rounded to T and widened back: the rounding a store and a load of T make.
template <typename T>
__device__ __forceinline__ float rounded(float value) {
  return Elem<T>::to_float(Elem<T>::from_float(value));
}

// One row's scale 1 / sqrt(mean(x^2) + eps) from its sum of squares, as kCast rounds it.
template <int kCast, typename T>
__device__ __forceinline__ float options_scale(float sum_squares, long long cols, float eps) {
  if (kCast == kCastNone) {
    const float mean = rounded<T>(sum_squares / static_cast<float>(cols));
    return rounded<T>(rsqrtf(rounded<T>(mean + rounded<T>(eps))));
  }
  return rsqrtf(sum_squares / static_cast<float>(cols) + eps);
}

// One output element of the norm from the (stored) input value, the row's scale and the weight.
template <int kCast, typename T, typename W>
__device__ __forceinline__ float options_output(float value, float scale, const W* weight,
                                                long long col, float offset) {
  if (kCast == kCastGemma) {
    return weight == nullptr ? value * scale : value * scale * (offset + load_element(weight, col));
  }
  const float normalised = rounded<T>(value * scale);
  if (weight == nullptr) {
    return normalised;
  }
  const float shifted = kCast == kCastNone ? rounded<T>(rounded<T>(offset) + load_element(weight, col))
                                           : offset + load_element(weight, col);
  return normalised * shifted;
}

// rms_norm over rows at strides (elements between row starts), with kAddResidual first
// residual_out = T(x + residual) and the norm of that stored value. out may be x, and
// residual_out residual, at the same strides (in place: each element is read by the thread that
// later writes it). row_scales: null, or float32 [rows] for each row's scale (the backward's).
template <int kCast, bool kAddResidual, typename T, typename W>
__device__ __forceinline__ void rms_norm_options_rows(
    const T* x, long long x_stride, const T* residual, long long residual_stride,
    T* residual_out, long long residual_out_stride, const W* weight, T* out, long long out_stride,
    float* row_scales, long long rows, long long cols, float eps, float offset) {
  __shared__ float slots[kp::kMaxBlockThreads];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* x_row = x + row * x_stride;
    const T* residual_row = kAddResidual ? residual + row * residual_stride : nullptr;
    T* residual_out_row = kAddResidual ? residual_out + row * residual_out_stride : nullptr;
    float sum_squares = 0.0f;
    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {
      float value = load_element(x_row, col);
      if (kAddResidual) {
        value = rounded<T>(value + load_element(residual_row, col));
        store_element(residual_out_row, col, value);
      }
      sum_squares += value * value;
    }
    sum_squares = short_row_sum(sum_squares, slots);
    const float scale = options_scale<kCast, T>(sum_squares, cols, eps);
    if (row_scales != nullptr && threadIdx.x == 0) {
      row_scales[row] = scale;
    }
    const T* source = kAddResidual ? residual_out_row : x_row;
    T* out_row = out + row * out_stride;
    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {
      const float value = load_element(source, col);
      store_element(out_row, col, options_output<kCast, T>(value, scale, weight, col, offset));
    }
  }
}

// The backward of rms_norm_options from x (the stored sum with a residual), the forward's row
// scales and the weight (null: weightless), in float32 whatever the mode (the modes differ in
// the forward's roundings alone): with m = dy * (offset + w),
//   grad_x = r * m - x * r^3 * mean(m * x)   (+ grad_extra unless null)
//   grad_w's shares dy * x * r, summed over this block's rows into its row of `partial`
//   (float32 [gridDim.x, cols], unless the weight is null), which rms_norm_weight_grad adds in a
//   fixed order: every run gives the same bits.
template <typename T, typename W>
__device__ __forceinline__ void rms_norm_options_backward_rows(
    const T* x, const float* row_scales, const W* weight, const T* grad, const T* grad_extra,
    T* grad_x, float* partial, long long rows, long long cols, float offset) {
  __shared__ float slots[kp::kMaxBlockThreads];
  float* shares = weight != nullptr ? partial + static_cast<long long>(blockIdx.x) * cols : nullptr;
  bool first = true;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long base = row * cols;
    const float scale = row_scales[row];
    float dot = 0.0f;
    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {
      const float dy = load_element(grad, base + col);
      const float m = weight == nullptr ? dy : dy * (offset + load_element(weight, col));
      dot += m * load_element(x, base + col);
    }
    dot = short_row_sum(dot, slots);
    const float correction = scale * scale * scale * dot / static_cast<float>(cols);
    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {
      const float dy = load_element(grad, base + col);
      const float value = load_element(x, base + col);
      const float m = weight == nullptr ? dy : dy * (offset + load_element(weight, col));
      float gradient = scale * m - value * correction;
      if (grad_extra != nullptr) {
        gradient += load_element(grad_extra, base + col);
      }
      store_element(grad_x, base + col, gradient);
      if (shares != nullptr) {
        const float share = dy * value * scale;
        shares[col] = first ? share : shares[col] + share;
      }
    }
    first = false;
  }
  if (shares != nullptr && first) {  // a block past the last row: its shares are zeros
    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {
      shares[col] = 0.0f;
    }
  }
}

// silu(g * gate_multiplier) * u * down_multiplier in float32, rounded once (Falcon-H1's MLP:
// its down projection's multiplier taken here, before the projection, which is linear), with
// silu(v) = v / (1 + e^-v) in the accurate expf and an IEEE division.
__device__ __forceinline__ float silu_scaled(float gate, float up, float gate_multiplier,
                                             float down_multiplier) {
  const float scaled = gate * gate_multiplier;
  return scaled / (1.0f + expf(-scaled)) * up * down_multiplier;
}

// torch's own roundings of F.silu(g) * u in T: silu in float32 as torch's CUDA kernel computes it
// (v / (1 + exp(-v)), the accurate expf, an IEEE division), rounded to T, then the product of two
// T values in float32, rounded to T. Bit-identical to the eager expression where the compiler's
// expf is torch's (both vendors' libraries: libdevice's, ocml's).
template <typename T>
__device__ __forceinline__ float silu_mul_as_torch(float gate, float up) {
  const float silu = rounded<T>(gate / (1.0f + expf(-gate)));
  return silu * up;
}

}  // namespace

namespace mlp {

// Block bound of the options kernels, with at least one block an SM asked for: without it ptxas
// holds the backward to 40 registers on sm_120 and spills (tests/test_build.py's spilled_kernels).
constexpr int kOptionsThreads = 512;

// The norm with options over rows at strides; out = x (at x's stride) for the in-place form.
template <typename T, typename W, int kCast>
__global__ void __launch_bounds__(kOptionsThreads, 1)
    rms_norm_options(const T* x, const W* weight, T* out, float* row_scales, long long rows,
                     long long cols, long long x_stride, long long out_stride, float eps,
                     float offset) {
  ::rms_norm_options_rows<kCast, false>(x, x_stride, static_cast<const T*>(nullptr), 0,
                                        static_cast<T*>(nullptr), 0, weight, out, out_stride,
                                        row_scales, rows, cols, eps, offset);
}

// residual_out = x + residual, out = the norm of it; fused_add_rms_norm's in-place form passes
// out = x and residual_out = residual at their strides.
template <typename T, typename W, int kCast>
__global__ void __launch_bounds__(kOptionsThreads, 1)
    add_rms_norm_options(const T* x, const T* residual, const W* weight, T* out, T* residual_out,
                         float* row_scales, long long rows, long long cols, long long x_stride,
                         long long residual_stride, long long out_stride,
                         long long residual_out_stride, float eps, float offset) {
  ::rms_norm_options_rows<kCast, true>(x, x_stride, residual, residual_stride, residual_out,
                                       residual_out_stride, weight, out, out_stride, row_scales,
                                       rows, cols, eps, offset);
}

// Contiguous x, grad, grad_extra (may be null) and grad_x; weight may be null (weightless, then
// `partial` unused); partial float32 [gridDim.x, cols].
template <typename T, typename W>
__global__ void __launch_bounds__(kOptionsThreads, 1)
    rms_norm_options_backward(const T* x, const float* row_scales, const W* weight, const T* grad,
                              const T* grad_extra, T* grad_x, float* partial, long long rows,
                              long long cols, float offset) {
  ::rms_norm_options_backward_rows(x, row_scales, weight, grad, grad_extra, grad_x, partial, rows,
                                   cols, offset);
}

// out = silu(gate * gate_multiplier) * up * down_multiplier over n elements (a 1-D grid).
template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_scaled(const T* gate, const T* up, T* out, long long n, float gate_multiplier,
                  float down_multiplier) {
  for_each_chunk(n, [&](long long i) {
    store_element(out, i, silu_scaled(load_element(gate, i), load_element(up, i), gate_multiplier,
                                      down_multiplier));
  });
}

// Its gradients: with v = g * gate_multiplier, s = sigmoid(v), d = dy * down_multiplier,
// grad_up = d * v * s, grad_gate = d * u * s * (1 + v * (1 - s)) * gate_multiplier.
template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    swiglu_scaled_backward(const T* gate, const T* up, const T* grad, T* grad_gate, T* grad_up,
                           long long n, float gate_multiplier, float down_multiplier) {
  for_each_chunk(n, [&](long long i) {
    const float scaled = load_element(gate, i) * gate_multiplier;
    const float s = 1.0f / (1.0f + expf(-scaled));
    const float d = load_element(grad, i) * down_multiplier;
    store_element(grad_up, i, d * scaled * s);
    store_element(grad_gate, i,
                  d * load_element(up, i) * s * (1.0f + scaled * (1.0f - s)) * gate_multiplier);
  });
}

// silu_and_mul with torch's roundings (silu_mul_as_torch): x [rows, 2 * cols], out [rows, cols];
// grid.x over the columns, grid.y over the rows, both striding.
template <typename T>
__global__ void __launch_bounds__(kElementwiseBlockThreads)
    silu_and_mul_as_torch(const T* x, T* out, long long rows, long long cols) {
  for (long long row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* gate = x + row * 2 * cols;
    T* out_row = out + row * cols;
    for_each_chunk(cols, [&](long long i) {
      store_element(out_row, i,
                    silu_mul_as_torch<T>(load_element(gate, i), load_element(gate + cols, i)));
    });
  }
}

#define MLP_OPTIONS_NORMS(T, W, CAST)                                                            \
  template __global__ void rms_norm_options<T, W, CAST>(const T*, const W*, T*, float*,          \
                                                        long long, long long, long long,         \
                                                        long long, float, float);                \
  template __global__ void add_rms_norm_options<T, W, CAST>(                                     \
      const T*, const T*, const W*, T*, T*, float*, long long, long long, long long, long long,  \
      long long, long long, float, float);

#define MLP_OPTIONS_WEIGHT(T, W)                                                                 \
  MLP_OPTIONS_NORMS(T, W, 0)                                                                     \
  MLP_OPTIONS_NORMS(T, W, 1)                                                                     \
  MLP_OPTIONS_NORMS(T, W, 2)                                                                     \
  template __global__ void rms_norm_options_backward<T, W>(const T*, const float*, const W*,     \
                                                           const T*, const T*, T*, float*,       \
                                                           long long, long long, float);

#define MLP_OPTIONS_ELEMENTWISE(T)                                                               \
  template __global__ void swiglu_scaled<T>(const T*, const T*, T*, long long, float, float);    \
  template __global__ void swiglu_scaled_backward<T>(const T*, const T*, const T*, T*, T*,       \
                                                     long long, float, float);                   \
  template __global__ void silu_and_mul_as_torch<T>(const T*, T*, long long, long long);

MLP_OPTIONS_WEIGHT(float, float)
MLP_OPTIONS_WEIGHT(__half, __half)
MLP_OPTIONS_WEIGHT(__half, float)
MLP_OPTIONS_WEIGHT(__nv_bfloat16, __nv_bfloat16)
MLP_OPTIONS_WEIGHT(__nv_bfloat16, float)
MLP_OPTIONS_ELEMENTWISE(float)
MLP_OPTIONS_ELEMENTWISE(__half)
MLP_OPTIONS_ELEMENTWISE(__nv_bfloat16)

#undef MLP_OPTIONS_ELEMENTWISE
#undef MLP_OPTIONS_WEIGHT
#undef MLP_OPTIONS_NORMS

}  // namespace mlp
