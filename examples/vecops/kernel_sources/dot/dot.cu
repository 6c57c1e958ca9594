// The dot module's first translation unit: a module folder may hold several .cu files, compiled
// on their own and device-linked into one image per target (docs/your-kernels.md).
#include "vecops_math.cuh"
#include "dot_terms.cuh"

__device__ float dot_term(float x, float y) { return x * y; }

// sum += x . y (the caller zeroes sum)
extern "C" __global__ void dot_f32(const float* x, const float* y, float* sum, unsigned int n) {
  unsigned int i = vecops_index();
  if (i < n) atomicAdd(sum, dot_term(x[i], y[i]));
}

// Private to this unit: the other unit has a kernel of the same name.
static __global__ void clear(float* value) { *value = 0.0f; }

template __global__ void scale<float>(float*, float, unsigned int);

// Host code, as a library's launchers are written: the builder compiles device code only.
void vecops_dot(const float* x, const float* y, float* sum, unsigned int n) {
  clear<<<1, 1>>>(sum);
  dot_f32<<<(n + VECOPS_BLOCK - 1) / VECOPS_BLOCK, VECOPS_BLOCK>>>(x, y, sum, n);
}
