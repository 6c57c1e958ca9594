/* A stand-in libcuda.so.1 for timing kernelpack's own share of a first load where no GPU is.
 *
 * bench/ready_local.py builds it (cc -shared) and puts its folder first on LD_LIBRARY_PATH of
 * fresh processes, so that import, index, detection, image read, sha256 and kernel lookup run as
 * on a GPU machine while each driver call returns at once: one sm_90 device, a module handle for
 * an ELF image, a function handle for any name. Launches and PTX compiles are refused (the
 * timing never asks for them). Nothing here is a model of the driver's own cost.
 */
#include <stddef.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, NOT_SUPPORTED = 801, INVALID_IMAGE = 200 };

static int context_token;
static int module_token;
static int function_token;

CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDriverGetVersion(int *version) { *version = 13000; return OK; }
CUresult cuDeviceGetCount(int *count) { *count = 1; return OK; }
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return OK; }

CUresult cuDeviceGetAttribute(int *value, int attribute, int device) {
    (void)device;
    switch (attribute) {
    case 75: *value = 9; break;      /* compute capability major */
    case 76: *value = 0; break;      /* minor */
    case 16: *value = 132; break;    /* multiprocessors */
    default: *value = 0;
    }
    return OK;
}

CUresult cuDeviceGetName(char *name, int length, int device) {
    (void)device;
    strncpy(name, "stub libcuda (no GPU)", (size_t)length);
    return OK;
}

CUresult cuDeviceGetPCIBusId(char *bus, int length, int device) {
    (void)device;
    strncpy(bus, "0000:00:00.0", (size_t)length);
    return OK;
}

CUresult cuDeviceGetUuid_v2(unsigned char *uuid, int device) {
    (void)device;
    memset(uuid, 0, 16);
    return OK;
}

CUresult cuDeviceGetUuid(unsigned char *uuid, int device) { return cuDeviceGetUuid_v2(uuid, device); }

CUresult cuGetErrorName(CUresult code, const char **name) {
    *name = code == NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED" : "CUDA_ERROR_STUB";
    return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
    (void)device;
    *context = &context_token;
    return OK;
}

CUresult cuCtxPushCurrent_v2(void *context) { (void)context; return OK; }
CUresult cuCtxPopCurrent_v2(void **context) { *context = &context_token; return OK; }
CUresult cuCtxGetCurrent(void **context) { *context = &context_token; return OK; }

CUresult cuModuleLoadData(void **module, const void *image) {
    if (memcmp(image, "\x7f" "ELF", 4) != 0) return INVALID_IMAGE;
    *module = &module_token;
    return OK;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    (void)module;
    (void)name;
    *function = &function_token;
    return OK;
}

CUresult cuLaunchKernel(void) { return NOT_SUPPORTED; }
CUresult cuFuncGetAttribute(void) { return NOT_SUPPORTED; }
CUresult cuFuncSetAttribute(void) { return NOT_SUPPORTED; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(void) { return NOT_SUPPORTED; }
CUresult cuLinkCreate_v2(void) { return NOT_SUPPORTED; }
CUresult cuLinkAddData_v2(void) { return NOT_SUPPORTED; }
CUresult cuLinkComplete(void) { return NOT_SUPPORTED; }
CUresult cuLinkDestroy(void) { return OK; }
