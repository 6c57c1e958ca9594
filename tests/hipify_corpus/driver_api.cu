// Driver API: load a module from a file, look a kernel up, launch it with a parameter array.
#include <cstdio>
#include <vector>
#include <cuda.h>

#define DRIVER_CHECK(call)                                               \
  do {                                                                   \
    CUresult result_ = (call);                                           \
    if (result_ != CUDA_SUCCESS) {                                       \
      const char* text_ = nullptr;                                       \
      cuGetErrorString(result_, &text_);                                 \
      std::fprintf(stderr, "%s failed: %s\n", #call, text_ ? text_ : "?"); \
      return 1;                                                          \
    }                                                                    \
  } while (0)

int main(int argc, char** argv) {
  const char* image = argc > 1 ? argv[1] : "kernels.cubin";
  DRIVER_CHECK(cuInit(0));
  CUdevice device;
  DRIVER_CHECK(cuDeviceGet(&device, 0));
  char name[256];
  DRIVER_CHECK(cuDeviceGetName(name, sizeof(name), device));
  int sms = 0;
  DRIVER_CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device));
  CUcontext context;
  DRIVER_CHECK(cuDevicePrimaryCtxRetain(&context, device));
  DRIVER_CHECK(cuCtxSetCurrent(context));

  CUmodule module;
  DRIVER_CHECK(cuModuleLoad(&module, image));
  CUfunction kernel;
  DRIVER_CHECK(cuModuleGetFunction(&kernel, module, "axpy"));
  int registers = 0;
  DRIVER_CHECK(cuFuncGetAttribute(&registers, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel));

  const int n = 4096;
  std::vector<float> x(n, 1.0f), y(n, 2.0f);
  CUdeviceptr dx, dy;
  DRIVER_CHECK(cuMemAlloc(&dx, n * sizeof(float)));
  DRIVER_CHECK(cuMemAlloc(&dy, n * sizeof(float)));
  DRIVER_CHECK(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  DRIVER_CHECK(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  CUstream stream;
  DRIVER_CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  float alpha = 3.0f;
  int count = n;
  void* params[] = {&alpha, &dx, &dy, &count};
  DRIVER_CHECK(cuLaunchKernel(kernel, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, nullptr));
  DRIVER_CHECK(cuStreamSynchronize(stream));
  DRIVER_CHECK(cuMemcpyDtoH(y.data(), dy, n * sizeof(float)));
  std::printf("%s (%d SMs, %d registers): y[0] = %f\n", name, sms, registers, y[0]);

  DRIVER_CHECK(cuStreamDestroy(stream));
  DRIVER_CHECK(cuMemFree(dx));
  DRIVER_CHECK(cuMemFree(dy));
  DRIVER_CHECK(cuModuleUnload(module));
  DRIVER_CHECK(cuDevicePrimaryCtxRelease(device));
  return 0;
}
