// Texture objects over linear memory and a CUDA array, with point and linear filtering (the compat
// layer fetches them in software where the target has no image instructions: no finding).
#include <cuda_runtime.h>

__global__ void gather(cudaTextureObject_t tex, const int* index, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(tex, index[i]);
}

__global__ void resample(cudaTextureObject_t image, float* out, int width, int height, float scale) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < width && y < height) out[y * width + x] = tex2D<float>(image, (x + 0.5f) * scale, (y + 0.5f) * scale);
}

int main() {
  const int n = 1024;
  float* data;
  cudaMalloc(&data, n * sizeof(float));

  cudaResourceDesc linear = {};
  linear.resType = cudaResourceTypeLinear;
  linear.res.linear.devPtr = data;
  linear.res.linear.desc = cudaCreateChannelDesc<float>();
  linear.res.linear.sizeInBytes = n * sizeof(float);
  cudaTextureDesc point = {};
  point.readMode = cudaReadModeElementType;
  point.filterMode = cudaFilterModePoint;
  cudaTextureObject_t tex = 0;
  cudaCreateTextureObject(&tex, &linear, &point, nullptr);

  cudaChannelFormatDesc channel = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
  cudaArray_t array;
  cudaMallocArray(&array, &channel, 32, 32);
  cudaMemcpy2DToArray(array, 0, 0, data, 32 * sizeof(float), 32 * sizeof(float), 32, cudaMemcpyDeviceToDevice);
  cudaResourceDesc resource = {};
  resource.resType = cudaResourceTypeArray;
  resource.res.array.array = array;
  cudaTextureDesc filtered = {};
  filtered.addressMode[0] = cudaAddressModeClamp;
  filtered.addressMode[1] = cudaAddressModeClamp;
  filtered.filterMode = cudaFilterModeLinear;
  filtered.normalizedCoords = 0;
  cudaTextureObject_t image = 0;
  cudaCreateTextureObject(&image, &resource, &filtered, nullptr);

  resample<<<dim3(2, 2), dim3(16, 16)>>>(image, data, 32, 32, 0.5f);
  cudaDeviceSynchronize();
  cudaDestroyTextureObject(tex);
  cudaDestroyTextureObject(image);
  cudaFreeArray(array);
  cudaFree(data);
  return 0;
}
