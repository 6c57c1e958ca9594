// The compat header's 16-bit PTX idioms (kernelpack_compat::ptx, tables.PTX_CALLS) against the
// PTX instructions themselves on an NVIDIA GPU, bit for bit: every 32-bit pattern through the
// float-to-16-bit conversions (and, paired with a hashed second pattern, the packed forms),
// every 16-bit pattern through the conversions to float, hashed words through the moves.
// Built by tests/test_hipify_ptx_gpu.py with nvcc -DKERNELPACK_COMPAT_RENAME.
#include <cstdio>
#include <cstring>
#include "kernelpack_hip_compat.h"

namespace ptx = kernelpack_compat::ptx;

__device__ unsigned hash(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
__device__ unsigned long long mismatches[6];
__device__ unsigned first[6][3];

__device__ void record(int which, unsigned input, unsigned ours, unsigned theirs) {
  if (ours == theirs) return;
  if (atomicAdd(&mismatches[which], 1ull) == 0) {
    first[which][0] = input; first[which][1] = ours; first[which][2] = theirs;
  }
}

__global__ void from_float(unsigned long long base) {
  const unsigned bits = static_cast<unsigned>(base + blockIdx.x * 256ull + threadIdx.x);
  float f;
  memcpy(&f, &bits, 4);
  unsigned short ours, theirs;
  ptx::cvt_rn_f16_f32(ours, f);
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(theirs) : "f"(f));
  record(0, bits, ours, theirs);
  ptx::cvt_rn_bf16_f32(ours, f);
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(theirs) : "f"(f));
  record(1, bits, ours, theirs);
  const unsigned other_bits = hash(bits);
  float g;
  memcpy(&g, &other_bits, 4);
  unsigned ours2, theirs2;
  ptx::cvt_rn_f16x2_f32(ours2, f, g);
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(theirs2) : "f"(f), "f"(g));
  record(2, bits, ours2, theirs2);
  ptx::cvt_rn_bf16x2_f32(ours2, f, g);
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(theirs2) : "f"(f), "f"(g));
  record(3, bits, ours2, theirs2);
  // moves: split and join a hashed word, copy a 16-bit half of it
  unsigned short lo, hi, tlo, thi, copy, tcopy;
  ptx::mov_b32_unpack(lo, hi, other_bits);
  asm("mov.b32 {%0, %1}, %2;" : "=h"(tlo), "=h"(thi) : "r"(other_bits));
  unsigned joined, tjoined;
  ptx::mov_b32_pack(joined, hi, lo);
  asm("mov.b32 %0, {%1, %2};" : "=r"(tjoined) : "h"(thi), "h"(tlo));
  ptx::mov_b16(copy, hi);
  asm("mov.b16 %0, %1;" : "=h"(tcopy) : "h"(thi));
  record(4, other_bits, (static_cast<unsigned>(lo) << 16 | hi) ^ joined ^ copy,
         (static_cast<unsigned>(tlo) << 16 | thi) ^ tjoined ^ tcopy);
}

__global__ void from_16_bits() {
  const unsigned short bits = static_cast<unsigned short>(blockIdx.x * 256u + threadIdx.x);
  float ours, theirs;
  ptx::cvt_f32_f16(ours, bits);
  asm("cvt.f32.f16 %0, %1;" : "=f"(theirs) : "h"(bits));
  unsigned a, b;
  memcpy(&a, &ours, 4); memcpy(&b, &theirs, 4);
  record(5, bits, a, b);
  ptx::cvt_f32_bf16(ours, bits);
  asm("cvt.f32.bf16 %0, %1;" : "=f"(theirs) : "h"(bits));
  memcpy(&a, &ours, 4); memcpy(&b, &theirs, 4);
  record(5, 0x10000u | bits, a, b);
}

int main() {
  const unsigned long long chunk = 1ull << 28;
  for (unsigned long long base = 0; base < (1ull << 32); base += chunk) {
    from_float<<<static_cast<unsigned>(chunk / 256), 256>>>(base);
  }
  from_16_bits<<<256, 256>>>();
  if (cudaDeviceSynchronize() != cudaSuccess) { printf("CUDA error\n"); return 2; }
  unsigned long long counts[6];
  unsigned firsts[6][3];
  cudaMemcpyFromSymbol(counts, mismatches, sizeof(counts));
  cudaMemcpyFromSymbol(firsts, first, sizeof(firsts));
  const char* names[6] = {"cvt.rn.f16.f32", "cvt.rn.bf16.f32", "cvt.rn.f16x2.f32",
                          "cvt.rn.bf16x2.f32", "mov.b32/mov.b16", "cvt.f32.f16/bf16"};
  const unsigned long long inputs[6] = {1ull << 32, 1ull << 32, 1ull << 32, 1ull << 32,
                                        1ull << 32, 1ull << 17};
  unsigned long long total = 0;
  for (int i = 0; i < 6; ++i) {
    printf("%s: %llu inputs, %llu mismatches", names[i], inputs[i], counts[i]);
    if (counts[i]) printf(" (first: input 0x%08x ours 0x%08x PTX 0x%08x)", firsts[i][0], firsts[i][1], firsts[i][2]);
    printf("\n");
    total += counts[i];
  }
  return total ? 1 : 0;
}
