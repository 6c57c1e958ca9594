// Half and bfloat16 storage with float arithmetic, packed half2 math, conversions.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

__global__ void half2_axpy(const __half2* x, __half2* y, __half alpha, int n2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n2) {
    const __half2 a = __half2half2(alpha);
    y[i] = __hfma2(a, x[i], y[i]);
  }
}

__global__ void bf16_to_float(const __nv_bfloat16* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __bfloat162float(in[i]);
}

__global__ void bf16_scale(nv_bfloat16* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const float value = __bfloat162float(data[i]) * factor;
    data[i] = __float2bfloat16(value);
  }
}

__global__ void bf162_add(const __nv_bfloat162* a, const __nv_bfloat162* b, __nv_bfloat162* out, int n2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n2) {
    const float2 fa = __bfloat1622float2(a[i]);
    const float2 fb = __bfloat1622float2(b[i]);
    out[i] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
  }
}

// Reduces half values in float, exchanging halves across lanes with the fp16 shuffle overload.
__global__ void half_max(const __half* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half value = i < n ? in[i] : __float2half(-65504.0f);
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    const __half other = __shfl_xor_sync(0xffffffff, value, offset);
    value = __hgt(other, value) ? other : value;
  }
  if (threadIdx.x % warpSize == 0) out[blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize] = __half2float(value);
}

int main() {
  __half2* x;
  __half2* y;
  __nv_bfloat16* b;
  float* f;
  cudaMalloc(&x, 1024 * sizeof(__half2));
  cudaMalloc(&y, 1024 * sizeof(__half2));
  cudaMalloc(&b, 1024 * sizeof(__nv_bfloat16));
  cudaMalloc(&f, 1024 * sizeof(float));
  half2_axpy<<<4, 256>>>(x, y, __float2half(0.5f), 1024);
  bf16_to_float<<<4, 256>>>(b, f, 1024);
  bf16_scale<<<4, 256>>>(b, 2.0f, 1024);
  half_max<<<4, 256>>>(reinterpret_cast<const __half*>(x), f, 2048);
  cudaDeviceSynchronize();
  cudaFree(x);
  cudaFree(y);
  cudaFree(b);
  cudaFree(f);
  return 0;
}
