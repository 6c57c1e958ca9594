// Element-wise kernels, one per (operation, type), each written once through a macro: the usual
// style of kernel libraries. VECOPS_BLOCK comes from [tool.kernelpack] defines.
#include "vecops_math.cuh"

#ifndef VECOPS_BLOCK
#error "VECOPS_BLOCK is set by pyproject.toml's [tool.kernelpack] defines"
#endif

#define VECOPS_UNARY(NAME, TYPE, EXPR)                                                      \
  extern "C" __global__ void __launch_bounds__(VECOPS_BLOCK)                                \
      NAME(const TYPE* x, TYPE* y, unsigned int n) {                                        \
    unsigned int i = vecops_index();                                                        \
    if (i < n) {                                                                            \
      TYPE v = x[i];                                                                        \
      y[i] = (EXPR);                                                                        \
    }                                                                                       \
  }

VECOPS_UNARY(square_f32, float, vecops_square(v))
VECOPS_UNARY(square_f64, double, vecops_square(v))
VECOPS_UNARY(relu_f32, float, v > 0.0f ? v : 0.0f)
