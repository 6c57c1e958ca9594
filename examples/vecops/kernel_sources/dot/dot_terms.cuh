// Shared by the dot module's two translation units: a device function that one unit defines and
// the other calls (resolved by the device link), and a template both instantiate.
#pragma once

__device__ float dot_term(float x, float y);

template <typename T>
__global__ void scale(T* x, T a, unsigned int n) {
  unsigned int i = vecops_index();
  if (i < n) x[i] *= a;
}
