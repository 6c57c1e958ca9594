// Device properties, attributes, versions and memory information.
#include <cstdio>
#include <cuda_runtime.h>

static void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) std::printf("%s: %s (%s)\n", what, cudaGetErrorName(status), cudaGetErrorString(status));
}

int main() {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::printf("built against %d, driver %d, runtime %d\n", CUDART_VERSION, driver, runtime);
#if CUDART_VERSION >= 11020  // CUDA 11.8 as the compat layer stands for: taken
  check(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64 << 20), "cudaDeviceSetLimit");
#endif
  for (int device = 0; device < count; ++device) {
    check(cudaSetDevice(device), "cudaSetDevice");
    cudaDeviceProp prop;
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    int sms = 0, warp = 0, smem_optin = 0;
    check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "attribute");
    check(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, device), "attribute");
    check(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), "attribute");
    size_t free_bytes = 0, total_bytes = 0;
    check(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    std::printf("%d: %s cc %d.%d, %d SMs, warp %d (prop %d), %zu KiB smem/block (opt-in %d), %zu/%zu MiB free\n",
                device, prop.name, prop.major, prop.minor, sms, warp, prop.warpSize,
                prop.sharedMemPerBlock / 1024, smem_optin, free_bytes >> 20, total_bytes >> 20);
    int least = 0, greatest = 0;
    check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "priorities");
    float* managed = nullptr;
    check(cudaMallocManaged(&managed, 1024, cudaMemAttachGlobal), "cudaMallocManaged");
    cudaPointerAttributes attributes;
    check(cudaPointerGetAttributes(&attributes, managed), "cudaPointerGetAttributes");
    std::printf("managed pointer type %d\n", static_cast<int>(attributes.type));
    check(cudaFree(managed), "cudaFree");
    check(cudaDeviceReset(), "cudaDeviceReset");
  }
  return 0;
}
