// y = a * x + y as one C++ template, instantiated for two types: kernels named as the source
// spells them ("axpy<float>", "axpy<double>").
#include "vecops_math.cuh"

template <typename T>
__global__ void axpy(T a, const T* x, T* y, unsigned int n) {
  unsigned int i = vecops_index();
  if (i < n) y[i] = a * x[i] + y[i];
}

template __global__ void axpy<float>(float, const float*, float*, unsigned int);
template __global__ void axpy<double>(double, const double*, double*, unsigned int);
