// The dot module's second translation unit: its kernels call dot_term, defined in dot.cu.
#include "vecops_math.cuh"
#include "dot_terms.cuh"

#define SUM_OF_SQUARES(name, T)                                                \
  extern "C" __global__ void name(const T* x, float* sum, unsigned int n) {    \
    unsigned int i = vecops_index();                                           \
    if (i < n) atomicAdd(sum, dot_term(float(x[i]), float(x[i])));             \
  }

SUM_OF_SQUARES(sumsq_f32, float)

static __global__ void clear(float* value) { *value = 0.0f; }

template __global__ void scale<float>(float*, float, unsigned int);

void vecops_sumsq(const float* x, float* sum, unsigned int n) {
  clear<<<1, 1>>>(sum);
  sumsq_f32<<<(n + VECOPS_BLOCK - 1) / VECOPS_BLOCK, VECOPS_BLOCK>>>(x, sum, n);
}
