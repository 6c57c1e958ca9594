// Batched walks of a matrix field in residue-number-system arithmetic (shared/reference/WALK.md).
//
// Each walk multiplies P_{n+1} = P_n * M(n), n = 0 .. depth-1, where the entries of M(n) are
// integer polynomials of the position x(n) = shift + n * dir. Two kernels per matrix size m:
//
// walk_residues_m{2,3,4}: one thread per (walk, prime); blockIdx.y is the prime, so that the
//   prime and its Montgomery constants are the same for the whole block. P stays in registers
//   in plain residue form; M(n) is held in Montgomery form (value * 2^32 mod p), so that one
//   Montgomery reduction of a row-times-column sum gives the plain residue of the product.
// walk_float_m{2,3,4}: one thread per walk; the same walk in float64 with P rescaled by a power
//   of two after every step (the exponent kept apart), for the estimates and delta.
// walk_registers_m*_d* and walk_float_registers_m*_d*: the same two walks for fields whose
//   entries are polynomials of low degree in n, advanced by finite differences in registers.
// walk_select_* and walk_bounds: the search's selection (hits and top k by delta, see "Selection
//   on the device" below) and the per-axis bounds of inputs that stay on the device.
//
// The step program arrives as straight-line code written by kernelpack.walk.lower: rows of four
// 32-bit words (op, dst, a, b) where dst, a and b are byte offsets of "slots" in this block's
// dynamic shared memory. Slot s of thread t lives at s * blockDim.x * slot_bytes + t * slot_bytes,
// so a row means the same for every thread and a warp's accesses fall into distinct banks. The
// host lays the slots out (lower.py), builds the code for the block size it launches with, and
// sizes the shared memory.
//
// The residue kernel runs `setup` once, then per step `step` (the code evaluating M(n), possibly
// empty), the product, and the advance of its polynomial tables: a table of degree D is D + 1
// consecutive slots T[0..D] holding the forward differences of a polynomial in n, moved to n + 1
// by T[k] += T[k+1] for k = 0 .. D-1. The host uses tables for the axes (x_j and dir_j, degree 1)
// when the program is evaluated every step, and for the entries of M themselves when their
// degrees are low enough that the tables cost fewer operations than the program (no
// multiplication at all then).
//
// Residue slot layout: slot 2j holds axis x_j(n) and slot 2j+1 dir_j (a table of degree 1),
// slots [2 dim, 2 dim + n_consts) the program's constants, all in Montgomery form; then the
// host's temporaries and tables. Float slot layout (8 bytes each): [0, dim) axes as double,
// [dim, 2 dim) positions as int64, [2 dim, 3 dim) dirs as int64, [3 dim, 3 dim + n_consts)
// constants as double, then temporaries.
//
// Nothing here depends on the wavefront width: threads never cooperate, and the block size is
// the host's choice (a power of two up to kWalkMaxBlock).

namespace walk {

constexpr int kWalkMaxBlock = 256;
// Asking for two resident blocks lets ptxas use up to 128 registers: left to its own target it
// held walk_residues_m4 to 64 and spilled on sm_80. (On AMD this reads as two waves per SIMD.)
constexpr int kWalkMinBlocks = 2;
// walk_float_registers<4, D>'s on AMD: 1, which leaves a wave all the VGPRs of its SIMD. Two
// waves a SIMD left gfx9's (256 VGPRs a lane) 128, two short of what M = 4 keeps live
// (gfx9-generic spilled); the other walks and M fit in 128.
#if defined(__HIP_PLATFORM_AMD__)
template <int M>
constexpr int kFloatRegistersMinBlocks = M == 4 ? 1 : kWalkMinBlocks;
#else
template <int M>
constexpr int kFloatRegistersMinBlocks = kWalkMinBlocks;
#endif

// Operations of the slot code (kernelpack.walk.lower writes these numbers).
enum Op : unsigned { kAdd = 0, kSub = 1, kMul = 2 };

// ---------------------------------------------------------------------------------------------
// Arithmetic modulo an odd prime p < 2^31 with R = 2^32. pinv = -p^-1 mod 2^32.

struct Modulus {
  unsigned p;
  unsigned pinv;
};

// The selects below are unsigned minima: for x in [0, 2p), min(x, x - p) is x mod p, because
// x - p wraps past every residue when x < p. No lane mask stays alive (a compare would hold a
// pair of scalar registers per entry on a 64-lane AMD wavefront).

// t * 2^-32 mod p for t < p * 2^32, in [0, p). With q = lo(t) * pinv, t + q p is a multiple of
// 2^32 below 2p * 2^32, and its high word is the result before the last subtraction.
__device__ __forceinline__ unsigned reduce(unsigned long long t, Modulus mod) {
  const unsigned q = static_cast<unsigned>(t) * mod.pinv;
  const unsigned r = static_cast<unsigned>((static_cast<unsigned long long>(q) * mod.p + t) >> 32);
  return min(r, r - mod.p);
}

// A sum of up to four products of residues is below 4 p^2 < 2^64 but may exceed p * 2^32 when
// it has three or more terms; its high word is then below 2p, and taking it mod p subtracts
// p * 2^32, which leaves the residue alone.
template <int Terms>
__device__ __forceinline__ unsigned reduce_sum(unsigned long long t, Modulus mod) {
  if (Terms > 2) {
    const unsigned hi = static_cast<unsigned>(t >> 32);
    t = (static_cast<unsigned long long>(min(hi, hi - mod.p)) << 32) | static_cast<unsigned>(t);
  }
  return reduce(t, mod);
}

__device__ __forceinline__ unsigned mont_mul(unsigned a, unsigned b, Modulus mod) {
  return reduce(static_cast<unsigned long long>(a) * b, mod);
}

// a + b or a - b for a, b in [0, p): x = a +- b and y = x -+ p, one of which is the residue and
// the smaller of the two as unsigned numbers.
__device__ __forceinline__ unsigned add_sub(unsigned op, unsigned a, unsigned b, Modulus mod) {
  const bool sub = op == kSub;
  const unsigned x = a + (sub ? 0u - b : b);
  const unsigned y = x + (sub ? mod.p : 0u - mod.p);
  return min(x, y);
}

// value * 2^32 mod p (Montgomery form) for any int64, without a 64-bit division: with
// u = hi * 2^32 + lo the two's-complement bits, u * 2^32 = hi * 2^64 + lo * 2^32, each term one
// reduction of a product below p * 2^32; a negative value is u - 2^64, which takes away 2^96.
// r2 = 2^64 mod p, r3 = 2^96 mod p.
__device__ __forceinline__ unsigned to_montgomery(long long value, Modulus mod, unsigned r2,
                                                  unsigned r3) {
  const unsigned long long bits = static_cast<unsigned long long>(value);
  const unsigned low_word = static_cast<unsigned>(bits);
  const unsigned lo = reduce(static_cast<unsigned long long>(low_word) * r2, mod);
  const unsigned hi = reduce((bits >> 32) * r3, mod);
  const unsigned sum = add_sub(kAdd, lo, hi, mod);
  return value < 0 ? add_sub(kSub, sum, r3, mod) : sum;
}

template <class T>
__device__ __forceinline__ T& slot(char* slots, unsigned offset, unsigned lane) {
  return *reinterpret_cast<T*>(slots + offset + lane);
}

// Run one list of slot code for this thread. The code row index is the same for every thread,
// so the rows come from memory that all lanes read at once (scalar loads on AMD), and the branch
// on the operation is uniform. Not unrolled: unrolled, the compiler predicates both arms of the
// branch, and an addition pays for the multiplication's instructions.
__device__ __forceinline__ void run_residue_code(const uint4* __restrict__ row,
                                                 const uint4* end, char* slots, unsigned lane,
                                                 Modulus mod) {
#pragma unroll 1
  for (; row != end; ++row) {
    const uint4 code = *row;
    const unsigned a = slot<unsigned>(slots, code.z, lane);
    const unsigned b = slot<unsigned>(slots, code.w, lane);
    unsigned r;
    if (code.x == kMul) {
      r = mont_mul(a, b, mod);
    } else {
      r = add_sub(code.x, a, b, mod);
    }
    slot<unsigned>(slots, code.y, lane) = r;
  }
}

// Move every table from n to n + 1. tables holds (byte offset of T[0], degree) pairs.
__device__ __forceinline__ void advance_tables(const uint2* __restrict__ table, const uint2* end,
                                               char* slots, unsigned lane, unsigned stride,
                                               Modulus mod) {
#pragma unroll 1
  for (; table != end; ++table) {
    const uint2 t = *table;
    unsigned address = t.x + lane;
    unsigned current = slot<unsigned>(slots, address, 0);
    // Degrees are small (1 to 3 in the usual fields): a plain loop beats an unrolled one's tails.
#pragma unroll 1
    for (unsigned k = 0; k < t.y; ++k) {
      const unsigned next = slot<unsigned>(slots, address + stride, 0);
      slot<unsigned>(slots, address, 0) = add_sub(kAdd, current, next, mod);
      current = next;
      address += stride;
    }
  }
}

__device__ __forceinline__ void run_float_code(const uint4* __restrict__ row, const uint4* end,
                                               char* slots, unsigned lane) {
#pragma unroll 1
  for (; row != end; ++row) {
    const uint4 code = *row;
    const double a = slot<double>(slots, code.z, lane);
    const double b = slot<double>(slots, code.w, lane);
    double r;
    if (code.x == kMul) {
      r = a * b;
    } else if (code.x == kSub) {
      r = a - b;
    } else {
      r = a + b;
    }
    slot<double>(slots, code.y, lane) = r;
  }
}

// What every residue thread starts with: its walk and prime, the modulus, and its slots filled
// from the inputs (axes and dirs in Montgomery form, the prime's constants), setup code run.
struct ResidueThread {
  int walk;
  int prime;
  Modulus mod;
  unsigned stride;  // bytes from one slot to the next
  unsigned lane;    // this thread's byte offset inside a slot
  char* slots;
};

__device__ __forceinline__ bool begin_residues(ResidueThread& thread,
                                               const long long* __restrict__ shifts,
                                               const long long* __restrict__ dirs, int n_walks,
                                               int dim, const uint4* __restrict__ setup,
                                               int n_setup, const unsigned* __restrict__ consts,
                                               int n_consts, const unsigned* __restrict__ moduli) {
  extern __shared__ char walk_shared[];
  thread.walk = blockIdx.x * blockDim.x + threadIdx.x;
  if (thread.walk >= n_walks) return false;
  thread.prime = blockIdx.y;
  thread.mod = Modulus{moduli[4 * thread.prime], moduli[4 * thread.prime + 1]};
  const unsigned r2 = moduli[4 * thread.prime + 2];
  const unsigned r3 = moduli[4 * thread.prime + 3];
  thread.stride = blockDim.x * 4u;
  thread.lane = threadIdx.x * 4u;
  thread.slots = walk_shared;
  for (int j = 0; j < dim; ++j) {
    const long long at = static_cast<long long>(thread.walk) * dim + j;
    slot<unsigned>(thread.slots, 2 * j * thread.stride, thread.lane) =
        to_montgomery(shifts[at], thread.mod, r2, r3);
    slot<unsigned>(thread.slots, (2 * j + 1) * thread.stride, thread.lane) =
        to_montgomery(dirs[at], thread.mod, r2, r3);
  }
  for (int c = 0; c < n_consts; ++c) {
    slot<unsigned>(thread.slots, (2 * dim + c) * thread.stride, thread.lane) =
        consts[thread.prime * n_consts + c];
  }
  run_residue_code(setup, setup + n_setup, thread.slots, thread.lane, thread.mod);
  return true;
}

// P = P * M for P in plain residues and M in Montgomery form: each entry one Montgomery
// reduction of a row-times-column sum, so P stays plain.
template <int M>
__device__ __forceinline__ void multiply(unsigned (&p)[M * M], const unsigned (&step)[M * M],
                                         Modulus mod) {
#pragma unroll
  for (int i = 0; i < M; ++i) {
    unsigned row[M];
#pragma unroll
    for (int j = 0; j < M; ++j) {
      unsigned long long t = 0;
#pragma unroll
      for (int k = 0; k < M; ++k) {
        t += static_cast<unsigned long long>(p[i * M + k]) * step[k * M + j];
      }
      row[j] = reduce_sum<M>(t, mod);
    }
#pragma unroll
    for (int j = 0; j < M; ++j) p[i * M + j] = row[j];
  }
}

template <int M>
__device__ __forceinline__ void identity(unsigned (&p)[M * M]) {
#pragma unroll
  for (int e = 0; e < M * M; ++e) p[e] = (e / M == e % M) ? 1u : 0u;
}

template <int M>
__device__ __forceinline__ void finish_residues(const ResidueThread& thread,
                                                const unsigned (&p)[M * M], bool q_nonzero,
                                                unsigned* __restrict__ p_final,
                                                unsigned* __restrict__ alive) {
  const long long pair = static_cast<long long>(thread.walk) * gridDim.y + thread.prime;
  // P_final is written only when the caller asked for it (the host passes a null pointer else):
  // at B = 10^6, K = 32 it is half a gigabyte that a search does not read.
  if (p_final != nullptr) {
    unsigned* out = p_final + pair * (M * M);
#pragma unroll
    for (int e = 0; e < M * M; ++e) out[e] = p[e];
  }
  // Every thread that writes stores the same value, so no atomic is needed; the host zeroes alive.
  if (q_nonzero) alive[thread.walk] = 1u;
}

// The general residue walk: per step the step code (the program, when it is evaluated), then
// the product with M read from the slots at out_offsets, then the tables advance.
template <int M>
__device__ __forceinline__ void walk_residues(
    const long long* __restrict__ shifts, const long long* __restrict__ dirs, int n_walks, int dim,
    const unsigned* __restrict__ code, int n_setup, int n_step, const unsigned* __restrict__ tables,
    int n_tables, const unsigned* __restrict__ out_offsets, const unsigned* __restrict__ consts,
    int n_consts, const unsigned* __restrict__ moduli, int depth, int depth2,
    unsigned* __restrict__ p_final, unsigned* __restrict__ alive) {
  const uint4* setup = reinterpret_cast<const uint4*>(code);
  ResidueThread thread;
  if (!begin_residues(thread, shifts, dirs, n_walks, dim, setup, n_setup, consts, n_consts,
                      moduli)) {
    return;
  }
  const uint4* step_code = setup + n_setup;
  const uint2* table_begin = reinterpret_cast<const uint2*>(tables);
  // Where this thread reads the entries of M: per-thread addresses, so that they live in vector
  // registers (as uniform offsets, m*m of them ran AMD's scalar registers out on gfx9 for m = 4).
  unsigned out[M * M];
#pragma unroll
  for (int e = 0; e < M * M; ++e) out[e] = out_offsets[e] + thread.lane;

  unsigned p[M * M];
  identity<M>(p);
  bool q_nonzero = false;
  for (int n = 0; n < depth; ++n) {
    run_residue_code(step_code, step_code + n_step, thread.slots, thread.lane, thread.mod);
    unsigned step[M * M];
#pragma unroll
    for (int e = 0; e < M * M; ++e) step[e] = slot<unsigned>(thread.slots, out[e], 0);
    multiply<M>(p, step, thread.mod);
    advance_tables(table_begin, table_begin + n_tables, thread.slots, thread.lane, thread.stride,
                   thread.mod);
    if (n + 1 == depth2) q_nonzero = p[1 * M + (M - 1)] != 0u;
  }
  finish_residues<M>(thread, p, q_nonzero, p_final, alive);
}

// The walk of a field whose entries are polynomials of degree at most D in n: the setup code
// leaves the forward differences of entry e at slots table_slot + e * (D + 1) + k, k = 0..D;
// they move into registers, and a step is the product and m*m*D modular additions, with no
// memory access and no code to interpret.
template <int M, int D>
__device__ __forceinline__ void walk_residue_registers(
    const long long* __restrict__ shifts, const long long* __restrict__ dirs, int n_walks, int dim,
    const unsigned* __restrict__ code, int n_setup, int table_slot,
    const unsigned* __restrict__ consts, int n_consts, const unsigned* __restrict__ moduli,
    int depth, int depth2, unsigned* __restrict__ p_final, unsigned* __restrict__ alive) {
  ResidueThread thread;
  if (!begin_residues(thread, shifts, dirs, n_walks, dim, reinterpret_cast<const uint4*>(code),
                      n_setup, consts, n_consts, moduli)) {
    return;
  }
  unsigned table[M * M][D + 1];
#pragma unroll
  for (int e = 0; e < M * M; ++e) {
#pragma unroll
    for (int k = 0; k <= D; ++k) {
      const unsigned at = static_cast<unsigned>(table_slot + e * (D + 1) + k) * thread.stride;
      table[e][k] = slot<unsigned>(thread.slots, at, thread.lane);
    }
  }
  unsigned p[M * M];
  identity<M>(p);
  bool q_nonzero = false;
  for (int n = 0; n < depth; ++n) {
    unsigned step[M * M];
#pragma unroll
    for (int e = 0; e < M * M; ++e) step[e] = table[e][0];
    multiply<M>(p, step, thread.mod);
#pragma unroll
    for (int e = 0; e < M * M; ++e) {
#pragma unroll
      for (int k = 0; k < D; ++k) {
        table[e][k] = add_sub(kAdd, table[e][k], table[e][k + 1], thread.mod);
      }
    }
    if (n + 1 == depth2) q_nonzero = p[1 * M + (M - 1)] != 0u;
  }
  finish_residues<M>(thread, p, q_nonzero, p_final, alive);
}

// p_d and q_d of the float product, each times 2^exponent.
struct Snapshot {
  double p;
  double q;
  long long exponent;
};

// est = p_d / q_d and delta = -1 - ln|est - target| / ln|q_d|, with ln|q_d| taken from the
// mantissa and the exponent apart, so that it stays exact to rounding however large q_d grows.
// The screen's resolution: where |est - target| is within d 2^-49 max(|est|, |target|) (8 ulps
// of rounding a step, d steps), float64 cannot tell the walk's error from its own, and delta is
// +inf, "at least as close as the screen resolves" (kernelpack.walk.screen; the exact delta is
// the host's). An infinite or NaN est keeps its delta.
__device__ __forceinline__ void write_estimate(Snapshot at, int steps, double target, double* est,
                                               double* delta) {
  const double value = at.p / at.q;
  const double ln_q = log(fabs(at.q)) + static_cast<double>(at.exponent) * 0.69314718055994530942;
  const double distance = fabs(value - target);
  const double resolution =
      static_cast<double>(steps) * 0x1p-49 * fmax(fabs(value), fabs(target));
  *est = value;
  const double infinity = __longlong_as_double(0x7ff0000000000000LL);
  const bool resolved = resolution < infinity && distance <= resolution;  // est finite
  *delta = resolved ? infinity : -1.0 - log(distance) / ln_q;
}

// The float product's running state: f * 2^exponent is P_n, and the snapshots at depth1 and
// depth2.
template <int M>
struct FloatProduct {
  double f[M * M];
  long long exponent;
  Snapshot at1;
  Snapshot at2;

  __device__ __forceinline__ FloatProduct() : exponent(0), at1{0.0, 0.0, 0}, at2{0.0, 0.0, 0} {
#pragma unroll
    for (int e = 0; e < M * M; ++e) f[e] = (e / M == e % M) ? 1.0 : 0.0;
  }

  // f = f * step, then the largest entry brought into [1, 2) by an exact power-of-two scaling.
  // The exponent is read off the bits; a largest entry that is subnormal or at least 2^1023 is
  // left as it is (as is a product of NaNs alone). n is the step just taken.
  __device__ __forceinline__ void advance(const double (&step)[M * M], int n, int depth1,
                                          int depth2) {
    double product[M * M];
#pragma unroll
    for (int i = 0; i < M; ++i) {
#pragma unroll
      for (int j = 0; j < M; ++j) {
        double t = f[i * M] * step[j];
#pragma unroll
        for (int k = 1; k < M; ++k) t = fma(f[i * M + k], step[k * M + j], t);
        product[i * M + j] = t;
      }
    }
    // The largest magnitude by a tree of maxima, log2(m*m) deep rather than a chain of m*m:
    // it lies on the float walk's loop-carried path. Maxima are exact, so the order is free.
    double magnitude[M * M];
#pragma unroll
    for (int e = 0; e < M * M; ++e) {
      f[e] = product[e];
      magnitude[e] = fabs(product[e]);
    }
#pragma unroll
    for (int width = 1; width < M * M; width *= 2) {
#pragma unroll
      for (int e = 0; e + width < M * M; e += 2 * width) {
        magnitude[e] = fmax(magnitude[e], magnitude[e + width]);
      }
    }
    const double largest = magnitude[0];
    const int biased = static_cast<int>(__double_as_longlong(largest) >> 52);
    if (biased >= 1 && biased <= 2045) {
      const double scale = __longlong_as_double(static_cast<long long>(2046 - biased) << 52);
#pragma unroll
      for (int k = 0; k < M * M; ++k) f[k] *= scale;
      exponent += biased - 1023;
    }
    if (n + 1 == depth1) at1 = Snapshot{f[M - 1], f[1 * M + (M - 1)], exponent};
    if (n + 1 == depth2) at2 = Snapshot{f[M - 1], f[1 * M + (M - 1)], exponent};
  }

  __device__ __forceinline__ void finish(int walk, int depth1, int depth2, double target,
                                         double* __restrict__ est1, double* __restrict__ est2,
                                         double* __restrict__ delta1,
                                         double* __restrict__ delta2) const {
    // One inlined copy of write_estimate for both snapshots, in a loop kept rolled: two copies
    // (the slow paths of log and the division twice) made ptxas spill on sm_90, and a call
    // (__noinline__) is a function call on AMD, where every kernel here is otherwise one body.
    // The snapshot is chosen by selects, not by indexing an array (which would go to memory).
#pragma unroll 1
    for (int second = 0; second < 2; ++second) {
      const bool deeper = second != 0;
      write_estimate(deeper ? at2 : at1, deeper ? depth2 : depth1, target,
                     (deeper ? est2 : est1) + walk, (deeper ? delta2 : delta1) + walk);
    }
  }
};

template <int M>
__device__ __forceinline__ void walk_float(
    const long long* __restrict__ shifts, const long long* __restrict__ dirs, int n_walks, int dim,
    const unsigned* __restrict__ code, int n_code, const unsigned* __restrict__ out_offsets,
    const double* __restrict__ consts, int n_consts, int depth, int depth1, int depth2,
    double target, double* __restrict__ est1, double* __restrict__ est2,
    double* __restrict__ delta1, double* __restrict__ delta2) {
  extern __shared__ char walk_shared[];
  const int walk = blockIdx.x * blockDim.x + threadIdx.x;
  if (walk >= n_walks) return;
  const unsigned stride = blockDim.x * 8u;
  const unsigned lane = threadIdx.x * 8u;
  char* slots = walk_shared;

  for (int j = 0; j < dim; ++j) {
    const long long at = static_cast<long long>(walk) * dim + j;
    slot<long long>(slots, (dim + j) * stride, lane) = shifts[at];
    slot<long long>(slots, (2 * dim + j) * stride, lane) = dirs[at];
  }
  for (int c = 0; c < n_consts; ++c) slot<double>(slots, (3 * dim + c) * stride, lane) = consts[c];

  const uint4* rows = reinterpret_cast<const uint4*>(code);
  unsigned out[M * M];
#pragma unroll
  for (int e = 0; e < M * M; ++e) out[e] = out_offsets[e] + lane;

  FloatProduct<M> product;
  for (int n = 0; n < depth; ++n) {
    for (int j = 0; j < dim; ++j) {
      slot<double>(slots, j * stride, lane) =
          static_cast<double>(slot<long long>(slots, (dim + j) * stride, lane));
    }
    run_float_code(rows, rows + n_code, slots, lane);
    double step[M * M];
#pragma unroll
    for (int e = 0; e < M * M; ++e) step[e] = slot<double>(slots, out[e], 0);
    product.advance(step, n, depth1, depth2);
    // Positions advance in two's complement: the host checked every position that is read,
    // and the one past the end is never read.
    for (int j = 0; j < dim; ++j) {
      long long& position = slot<long long>(slots, (dim + j) * stride, lane);
      position = static_cast<long long>(static_cast<unsigned long long>(position) +
                                         static_cast<unsigned long long>(
                                             slot<long long>(slots, (2 * dim + j) * stride, lane)));
    }
  }
  product.finish(walk, depth1, depth2, target, est1, est2, delta1, delta2);
}

// The float walk of a field in the register form: the residue register kernel's setup code and
// slot layout (slot 2j axis j, 2j+1 its dir, then the constants), run once in float64 with
// 8-byte slots, leave each entry's forward differences at table_slot + e * (D + 1) + k; a step
// is then the product and m*m*D additions in registers. The host picks this kernel only where
// it bounded every value the setup computes, and every difference along the walk, below 2^52:
// each is then an exact integer in float64, and the steps multiply the very entries that the
// program evaluated in float64 would give.
template <int M, int D>
__device__ __forceinline__ void walk_float_registers(
    const long long* __restrict__ shifts, const long long* __restrict__ dirs, int n_walks, int dim,
    const unsigned* __restrict__ code, int n_setup, int table_slot,
    const double* __restrict__ consts, int n_consts, int depth, int depth1, int depth2,
    double target, double* __restrict__ est1, double* __restrict__ est2,
    double* __restrict__ delta1, double* __restrict__ delta2) {
  extern __shared__ char walk_shared[];
  const int walk = blockIdx.x * blockDim.x + threadIdx.x;
  if (walk >= n_walks) return;
  const unsigned stride = blockDim.x * 8u;
  const unsigned lane = threadIdx.x * 8u;
  char* slots = walk_shared;

  for (int j = 0; j < dim; ++j) {
    const long long at = static_cast<long long>(walk) * dim + j;
    slot<double>(slots, 2 * j * stride, lane) = static_cast<double>(shifts[at]);
    slot<double>(slots, (2 * j + 1) * stride, lane) = static_cast<double>(dirs[at]);
  }
  for (int c = 0; c < n_consts; ++c) slot<double>(slots, (2 * dim + c) * stride, lane) = consts[c];
  const uint4* setup = reinterpret_cast<const uint4*>(code);
  run_float_code(setup, setup + n_setup, slots, lane);

  double table[M * M][D + 1];
#pragma unroll
  for (int e = 0; e < M * M; ++e) {
#pragma unroll
    for (int k = 0; k <= D; ++k) {
      const unsigned at = static_cast<unsigned>(table_slot + e * (D + 1) + k) * stride;
      table[e][k] = slot<double>(slots, at, lane);
    }
  }
  FloatProduct<M> product;
  for (int n = 0; n < depth; ++n) {
    double step[M * M];
#pragma unroll
    for (int e = 0; e < M * M; ++e) step[e] = table[e][0];
    product.advance(step, n, depth1, depth2);
#pragma unroll
    for (int e = 0; e < M * M; ++e) {
#pragma unroll
      for (int k = 0; k < D; ++k) table[e][k] += table[e][k + 1];
    }
  }
  product.finish(walk, depth1, depth2, target, est1, est2, delta1, delta2);
}


// ---------------------------------------------------------------------------------------------
// Selection on the device: the hits (alive walks with delta >= a threshold) and the top k walks
// by delta, written out as compact records (walk, est, delta, shift, dir) so that the host never
// reads every walk. The host passes est2/delta2 (the deeper estimate).
//
// A walk is a candidate when it is alive and its delta is not NaN. Candidates rank by a 96-bit
// key: the delta's bits turned into an unsigned integer of the same order (the sign bit set for a
// positive number, every bit flipped for a negative one), then the complement of the walk's
// index, so that of two equal deltas the smaller index ranks first and no two keys are equal.
// The top k is a radix selection of the k-th largest key, one 8-bit digit a pass from the most
// significant: walk_select_histogram counts the candidates whose earlier digits match the ones
// picked so far, by their next digit; walk_select_pick (one thread) picks the digit that holds the
// k-th key; walk_select_top then writes every candidate whose key is at or above it, exactly
// min(k, candidates) walks in no particular order (kernelpack.walk.select sorts them by the same
// key). The blocks cooperate through atomics and __syncthreads_count only, never through the
// wavefront width.

constexpr int kSelectBlock = 256;
constexpr int kSelectDigits = 12;  // one pass per byte of the key
static_assert(kSelectDigits == (64 + 32) / 8, "a digit is a byte of the 96-bit key");
constexpr int kSelectBins = 256;
// Words of the selection state (unsigned long long), zeroed by the host before the first pass.
enum SelectState : int {
  kCandidates = 0,  // alive walks whose delta is not NaN
  kHits = 1,        // hits written
  kRank = 2,        // the rank of the k-th key among the candidates that match the prefix
  kPrefixHigh = 3,  // the digits of the k-th key picked so far
  kPrefixLow = 4,
  kTopWritten = 5,
  kTopEmpty = 6,  // 1 when k or the number of candidates is 0
};

struct Key {
  unsigned long long high;
  unsigned low;
};

__device__ __forceinline__ bool is_candidate(const double* __restrict__ delta,
                                             const unsigned* __restrict__ alive, int walk) {
  return alive[walk] != 0u && !isnan(delta[walk]);
}

__device__ __forceinline__ Key key_of(double delta, int walk) {
  const unsigned long long bits = static_cast<unsigned long long>(__double_as_longlong(delta));
  return Key{(bits >> 63) != 0 ? ~bits : bits | 0x8000000000000000ull,
             ~static_cast<unsigned>(walk)};
}

__device__ __forceinline__ unsigned key_digit(Key key, int digit) {
  return digit < 8 ? static_cast<unsigned>(key.high >> (56 - 8 * digit)) & 0xFFu
                   : (key.low >> (24 - 8 * (digit - 8))) & 0xFFu;
}

// Whether the digits of key before `digit` are the prefix's.
__device__ __forceinline__ bool key_matches(Key key, Key prefix, int digit) {
  if (digit <= 8) {
    return digit == 0 || (key.high >> (64 - 8 * digit)) == (prefix.high >> (64 - 8 * digit));
  }
  const int shift = 32 - 8 * (digit - 8);
  return key.high == prefix.high && (key.low >> shift) == (prefix.low >> shift);
}

__device__ __forceinline__ bool key_at_least(Key key, Key bound) {
  return key.high > bound.high || (key.high == bound.high && key.low >= bound.low);
}

// One record of a selection: the walk's index in the batch, its estimate and delta, its shift
// and direction (dim each).
__device__ __forceinline__ void write_record(unsigned long long at, int walk, int dim,
                                             const double* __restrict__ est,
                                             const double* __restrict__ delta,
                                             const long long* __restrict__ shifts,
                                             const long long* __restrict__ dirs, int* out_walk,
                                             double* out_est, double* out_delta,
                                             long long* out_shift, long long* out_dir) {
  out_walk[at] = walk;
  out_est[at] = est[walk];
  out_delta[at] = delta[walk];
  for (int j = 0; j < dim; ++j) {
    out_shift[at * dim + j] = shifts[static_cast<long long>(walk) * dim + j];
    out_dir[at * dim + j] = dirs[static_cast<long long>(walk) * dim + j];
  }
}

// The smallest and largest shift and direction per axis (bounds: 4 rows of dim: min shift, max
// shift, min dir, max dir; the host fills the minima with INT64_MAX and the maxima with
// INT64_MIN): what the host checks of inputs that stay on the device.
__device__ __forceinline__ void walk_bounds(const long long* __restrict__ shifts,
                                            const long long* __restrict__ dirs, int n_walks,
                                            int dim, long long* bounds) {
  __shared__ long long block_bounds[4];
  for (int j = 0; j < dim; ++j) {
    if (threadIdx.x == 0) {
      block_bounds[0] = block_bounds[2] = 0x7FFFFFFFFFFFFFFFll;
      block_bounds[1] = block_bounds[3] = -0x7FFFFFFFFFFFFFFFll - 1;
    }
    __syncthreads();
    long long low_shift = 0x7FFFFFFFFFFFFFFFll, low_dir = 0x7FFFFFFFFFFFFFFFll;
    long long high_shift = -0x7FFFFFFFFFFFFFFFll - 1, high_dir = -0x7FFFFFFFFFFFFFFFll - 1;
    for (int walk = blockIdx.x * blockDim.x + threadIdx.x; walk < n_walks;
         walk += gridDim.x * blockDim.x) {
      const long long shift = shifts[static_cast<long long>(walk) * dim + j];
      const long long dir = dirs[static_cast<long long>(walk) * dim + j];
      low_shift = min(low_shift, shift);
      high_shift = max(high_shift, shift);
      low_dir = min(low_dir, dir);
      high_dir = max(high_dir, dir);
    }
    atomicMin(&block_bounds[0], low_shift);
    atomicMax(&block_bounds[1], high_shift);
    atomicMin(&block_bounds[2], low_dir);
    atomicMax(&block_bounds[3], high_dir);
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicMin(&bounds[j], block_bounds[0]);
      atomicMax(&bounds[dim + j], block_bounds[1]);
      atomicMin(&bounds[2 * dim + j], block_bounds[2]);
      atomicMax(&bounds[3 * dim + j], block_bounds[3]);
    }
    __syncthreads();
  }
}

}  // namespace walk

// The kernels: per matrix size m the general residue walk and the float walk, and the register
// walks for the degrees whose tables fit in registers: residues D <= 4 (D <= 2 for m = 4),
// float64 D <= 4 for m = 2, D <= 3 for m = 3, D = 1 for m = 4 (lower.py's REGISTER_DEGREES).
// Templates instantiated below; the builder finds them in the compiled objects and names them as
// this source spells them (docs/loader.md, "Kernel names"): walk_residues<2>,
// walk_registers<2, 1>, ...

#define WALK_RESIDUES_PARAMS                                                                       \
  const long long* shifts, const long long* dirs, int n_walks, int dim, const unsigned int* code,  \
      int n_setup, int n_step, const unsigned int* tables, int n_tables,                           \
      const unsigned int* out_offsets, const unsigned int* consts, int n_consts,                   \
      const unsigned int* moduli, int depth, int depth2, unsigned int* p_final,                    \
      unsigned int* alive
#define WALK_FLOAT_PARAMS                                                                          \
  const long long* shifts, const long long* dirs, int n_walks, int dim, const unsigned int* code,  \
      int n_code, const unsigned int* out_offsets, const double* consts, int n_consts, int depth,  \
      int depth1, int depth2, double target, double* est1, double* est2, double* delta1,           \
      double* delta2
#define WALK_REGISTERS_PARAMS                                                                      \
  const long long* shifts, const long long* dirs, int n_walks, int dim, const unsigned int* code,  \
      int n_setup, int table_slot, const unsigned int* consts, int n_consts,                       \
      const unsigned int* moduli, int depth, int depth2, unsigned int* p_final,                    \
      unsigned int* alive
#define WALK_FLOAT_REGISTERS_PARAMS                                                                \
  const long long* shifts, const long long* dirs, int n_walks, int dim, const unsigned int* code,  \
      int n_setup, int table_slot, const double* consts, int n_consts, int depth, int depth1,      \
      int depth2, double target, double* est1, double* est2, double* delta1, double* delta2

template <int M>
__global__ void __launch_bounds__(walk::kWalkMaxBlock, walk::kWalkMinBlocks)
    walk_residues(WALK_RESIDUES_PARAMS) {
  walk::walk_residues<M>(shifts, dirs, n_walks, dim, code, n_setup, n_step, tables, n_tables,
                         out_offsets, consts, n_consts, moduli, depth, depth2, p_final, alive);
}

template <int M>
__global__ void __launch_bounds__(walk::kWalkMaxBlock, walk::kWalkMinBlocks)
    walk_float(WALK_FLOAT_PARAMS) {
  walk::walk_float<M>(shifts, dirs, n_walks, dim, code, n_code, out_offsets, consts, n_consts,
                      depth, depth1, depth2, target, est1, est2, delta1, delta2);
}

template <int M, int D>
__global__ void __launch_bounds__(walk::kWalkMaxBlock, walk::kWalkMinBlocks)
    walk_registers(WALK_REGISTERS_PARAMS) {
  walk::walk_residue_registers<M, D>(shifts, dirs, n_walks, dim, code, n_setup, table_slot, consts,
                                     n_consts, moduli, depth, depth2, p_final, alive);
}

template <int M, int D>
__global__ void __launch_bounds__(walk::kWalkMaxBlock, (walk::kFloatRegistersMinBlocks<M>))
    walk_float_registers(WALK_FLOAT_REGISTERS_PARAMS) {
  walk::walk_float_registers<M, D>(shifts, dirs, n_walks, dim, code, n_setup, table_slot, consts,
                                   n_consts, depth, depth1, depth2, target, est1, est2, delta1,
                                   delta2);
}

template __global__ void walk_residues<2>(WALK_RESIDUES_PARAMS);
template __global__ void walk_residues<3>(WALK_RESIDUES_PARAMS);
template __global__ void walk_residues<4>(WALK_RESIDUES_PARAMS);
template __global__ void walk_float<2>(WALK_FLOAT_PARAMS);
template __global__ void walk_float<3>(WALK_FLOAT_PARAMS);
template __global__ void walk_float<4>(WALK_FLOAT_PARAMS);
template __global__ void walk_registers<2, 1>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<2, 2>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<2, 3>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<2, 4>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<3, 1>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<3, 2>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<3, 3>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<3, 4>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<4, 1>(WALK_REGISTERS_PARAMS);
template __global__ void walk_registers<4, 2>(WALK_REGISTERS_PARAMS);
template __global__ void walk_float_registers<2, 1>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<2, 2>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<2, 3>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<2, 4>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<3, 1>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<3, 2>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<3, 3>(WALK_FLOAT_REGISTERS_PARAMS);
template __global__ void walk_float_registers<4, 1>(WALK_FLOAT_REGISTERS_PARAMS);

#undef WALK_RESIDUES_PARAMS
#undef WALK_FLOAT_PARAMS
#undef WALK_REGISTERS_PARAMS
#undef WALK_FLOAT_REGISTERS_PARAMS

// The selection kernels (see "Selection on the device" above); blocks of kSelectBlock threads,
// any number of blocks (each strides over the walks).

__global__ void __launch_bounds__(walk::kSelectBlock)
    walk_bounds(const long long* shifts, const long long* dirs, int n_walks, int dim,
                long long* bounds) {
  walk::walk_bounds(shifts, dirs, n_walks, dim, bounds);
}

// Counts the candidates and writes the hits (capacity: n_walks records).
__global__ void __launch_bounds__(walk::kSelectBlock)
    walk_select_hits(const double* est, const double* delta, const unsigned int* alive,
                     const long long* shifts, const long long* dirs, int n_walks, int dim,
                     double min_delta, unsigned long long* state, int* hit_walk,
                     double* hit_est, double* hit_delta, long long* hit_shift,
                     long long* hit_dir) {
  const int stride = gridDim.x * blockDim.x;
  // The loop bound is the same for every thread of the block, so all reach __syncthreads_count.
  for (int base = blockIdx.x * blockDim.x; base < n_walks; base += stride) {
    const int walk = base + static_cast<int>(threadIdx.x);
    const bool candidate = walk < n_walks && walk::is_candidate(delta, alive, walk);
    const int block_candidates = __syncthreads_count(candidate);
    if (threadIdx.x == 0 && block_candidates > 0) {
      atomicAdd(&state[walk::kCandidates], static_cast<unsigned long long>(block_candidates));
    }
    if (candidate && delta[walk] >= min_delta) {
      const unsigned long long at = atomicAdd(&state[walk::kHits], 1ull);
      walk::write_record(at, walk, dim, est, delta, shifts, dirs, hit_walk, hit_est, hit_delta,
                         hit_shift, hit_dir);
    }
  }
}

// Counts the candidates matching the prefix by their digit `digit` into histogram[digit][256].
__global__ void __launch_bounds__(walk::kSelectBlock)
    walk_select_histogram(const double* delta, const unsigned int* alive, int n_walks, int digit,
                          const unsigned long long* state, unsigned int* histogram) {
  if (state[walk::kTopEmpty] != 0) return;
  __shared__ unsigned bins[walk::kSelectBins];
  for (int bin = threadIdx.x; bin < walk::kSelectBins; bin += blockDim.x) bins[bin] = 0;
  __syncthreads();
  const walk::Key prefix{state[walk::kPrefixHigh],
                         static_cast<unsigned>(state[walk::kPrefixLow])};
  for (int walk = blockIdx.x * blockDim.x + threadIdx.x; walk < n_walks;
       walk += gridDim.x * blockDim.x) {
    if (!walk::is_candidate(delta, alive, walk)) continue;
    const walk::Key key = walk::key_of(delta[walk], walk);
    if (walk::key_matches(key, prefix, digit)) atomicAdd(&bins[walk::key_digit(key, digit)], 1u);
  }
  __syncthreads();
  for (int bin = threadIdx.x; bin < walk::kSelectBins; bin += blockDim.x) {
    if (bins[bin] != 0) atomicAdd(&histogram[digit * walk::kSelectBins + bin], bins[bin]);
  }
}

// One thread: picks digit `digit` of the k-th largest key (top_k: k). Digit 0 starts the
// selection: k becomes min(top_k, candidates).
__global__ void walk_select_pick(int digit, int top_k, unsigned long long* state,
                                 const unsigned int* histogram) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (digit == 0) {
    const unsigned long long k = min(static_cast<unsigned long long>(top_k),
                                     state[walk::kCandidates]);
    state[walk::kRank] = k;
    state[walk::kTopEmpty] = k == 0 ? 1ull : 0ull;
  }
  if (state[walk::kTopEmpty] != 0) return;
  const unsigned long long rank = state[walk::kRank];
  const unsigned* bins = histogram + digit * walk::kSelectBins;
  unsigned long long above = 0;
  for (int bin = walk::kSelectBins - 1; bin >= 0; --bin) {
    if (above + bins[bin] >= rank) {
      if (digit < 8) {
        state[walk::kPrefixHigh] |= static_cast<unsigned long long>(bin) << (56 - 8 * digit);
      } else {
        state[walk::kPrefixLow] |= static_cast<unsigned long long>(bin) << (24 - 8 * (digit - 8));
      }
      state[walk::kRank] = rank - above;
      return;
    }
    above += bins[bin];
  }
}

// Writes the candidates whose key is at or above the selected one (capacity: top_k records).
__global__ void __launch_bounds__(walk::kSelectBlock)
    walk_select_top(const double* est, const double* delta, const unsigned int* alive,
                    const long long* shifts, const long long* dirs, int n_walks, int dim,
                    unsigned long long* state, int* top_walk, double* top_est, double* top_delta,
                    long long* top_shift, long long* top_dir) {
  if (state[walk::kTopEmpty] != 0) return;
  const walk::Key bound{state[walk::kPrefixHigh], static_cast<unsigned>(state[walk::kPrefixLow])};
  for (int walk = blockIdx.x * blockDim.x + threadIdx.x; walk < n_walks;
       walk += gridDim.x * blockDim.x) {
    if (!walk::is_candidate(delta, alive, walk)) continue;
    if (!walk::key_at_least(walk::key_of(delta[walk], walk), bound)) continue;
    const unsigned long long at = atomicAdd(&state[walk::kTopWritten], 1ull);
    walk::write_record(at, walk, dim, est, delta, shifts, dirs, top_walk, top_est, top_delta,
                       top_shift, top_dir);
  }
}
