// Fast-math intrinsics, math constants, read-only loads, rounding conversions.
#include <math_constants.h>
#include <cuda_runtime.h>

__global__ void gelu_fast(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = __ldg(&in[i]);
    const float inner = 0.7978845608f * __fmaf_rn(0.044715f * x, x * x, x);
    out[i] = 0.5f * x * (1.0f + tanhf(inner));
  }
}

__global__ void softplus_fast(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __logf(1.0f + __expf(in[i]));
}

__global__ void polar(const float* radius, const float* turns, float2* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float angle = 2.0f * CUDART_PI_F * turns[i];
    float s, c;
    __sincosf(angle, &s, &c);
    out[i] = make_float2(radius[i] * __cosf(angle), radius[i] * __sinf(angle) + 0.0f * (s + c));
  }
}

__global__ void normalize(float* v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float len2 = v[3 * i] * v[3 * i] + v[3 * i + 1] * v[3 * i + 1] + v[3 * i + 2] * v[3 * i + 2];
    const float inv = rsqrtf(fmaxf(len2, 1e-12f));
    v[3 * i] = __saturatef(v[3 * i] * inv);
    v[3 * i + 1] = __fdividef(v[3 * i + 1], sqrtf(len2) + 1e-6f);
    v[3 * i + 2] = __powf(fabsf(v[3 * i + 2] * inv), 2.2f);
  }
}

__global__ void quantize(const float* in, int* out, float scale, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float x = in[i] * __frcp_rn(scale);
    out[i] = isinf(x) || x != x ? 0 : __float2int_rn(x);
    if (x == CUDART_INF_F) out[i] = __float_as_int(x);
  }
}

int main() {
  float* f;
  cudaMalloc(&f, 4096 * sizeof(float));
  gelu_fast<<<16, 256>>>(f, f, 4096);
  normalize<<<4, 256>>>(f, 1024);
  cudaDeviceSynchronize();
  cudaFree(f);
  return 0;
}
