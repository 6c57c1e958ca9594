/* A stand-in for libamdhip64 on an NVIDIA GPU, for the tests only: the HIP calls kernelpack binds
 * (kernelpack/hip.py, libraries.py and the C launcher's HIP branch), each forwarded to the CUDA
 * driver API, so that kernelpack's HIP host path (hip.py, the launcher's device binding, argument
 * packing, streams, ordinals, error names) runs for real on the lent GPU. tests/hip_shim.py builds
 * it with gcc against the toolkit's cuda.h as libamdhip64.so.7, found by kernelpack through the
 * dynamic linker's search (LD_LIBRARY_PATH), and tests/test_hip_shim.py checks that it exports
 * every hip* name kernelpack binds, read from kernelpack's sources.
 *
 * What it does, HIP's way where CUDA differs:
 * - libcuda.so.1 is opened at the first call (dlopen: the library loads, and hipInit fails with a
 *   HIP error, on a machine without the driver); every call initialises as HIP's do.
 * - HIP_VISIBLE_DEVICES lists CUDA ordinals (after CUDA_VISIBLE_DEVICES, which libcuda applies),
 *   ending at the first entry that names no device, as HIP's list does; unlike HIP's, an ordinal
 *   may be repeated, so that one GPU stands for two HIP devices and an ordinal other than 0 can be
 *   tested on a machine of one GPU. No device visible: hipInit says hipErrorNoDevice.
 * - The current device is per thread, 0 until hipSetDevice (HIP's default); a call that needs a
 *   context makes the current device's primary context current, as HIP's device model implies.
 * - Module images are whatever cuModuleLoadData takes: the tests hand it the NVIDIA cubin of the
 *   same module, relabelled in a test index as an AMD code object.
 * - CUresult becomes the hipError_t of the same meaning (HIP's numbers, from hip_runtime_api.h),
 *   and hipGetErrorName gives HIP's names: kernelpack's messages name the HIP error.
 * - hip_over_cuda_launches(d) / hip_over_cuda_loads(d): the kernel launches and module loads made
 *   with HIP device d current (not HIP calls: the tests read them to see the HIP path ran).
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int hipError_t;
typedef struct hip_over_cuda_module *hipModule_t;
typedef struct hip_over_cuda_function *hipFunction_t;
typedef struct hip_over_cuda_stream *hipStream_t;

/* hipError_t values (hip_runtime_api.h) this library returns */
enum {
    hipSuccess = 0,
    hipErrorInvalidValue = 1,
    hipErrorOutOfMemory = 2,
    hipErrorNotInitialized = 3,
    hipErrorDeinitialized = 4,
    hipErrorInsufficientDriver = 35,
    hipErrorNoDevice = 100,
    hipErrorInvalidDevice = 101,
    hipErrorInvalidImage = 200,
    hipErrorInvalidContext = 201,
    hipErrorNoBinaryForGpu = 209,
    hipErrorUnsupportedLimit = 215,
    hipErrorInvalidKernelFile = 218,
    hipErrorInvalidSource = 300,
    hipErrorFileNotFound = 301,
    hipErrorSharedObjectSymbolNotFound = 302,
    hipErrorSharedObjectInitFailed = 303,
    hipErrorOperatingSystem = 304,
    hipErrorInvalidHandle = 400,
    hipErrorNotFound = 500,
    hipErrorNotReady = 600,
    hipErrorIllegalAddress = 700,
    hipErrorLaunchOutOfResources = 701,
    hipErrorLaunchTimeOut = 702,
    hipErrorAssert = 710,
    hipErrorLaunchFailure = 719,
    hipErrorCooperativeLaunchTooLarge = 720,
    hipErrorNotSupported = 801,
    hipErrorUnknown = 999,
};

/* HIP 7.0.0 as hipRuntimeGetVersion spells it: major * 10000000 + minor * 100000 + patch */
#define HIP_OVER_CUDA_VERSION 70000000
#define MAX_DEVICES 64

static const struct {
    CUresult cuda;
    hipError_t hip;
} errors[] = {
    {CUDA_SUCCESS, hipSuccess},
    {CUDA_ERROR_INVALID_VALUE, hipErrorInvalidValue},
    {CUDA_ERROR_OUT_OF_MEMORY, hipErrorOutOfMemory},
    {CUDA_ERROR_NOT_INITIALIZED, hipErrorNotInitialized},
    {CUDA_ERROR_DEINITIALIZED, hipErrorDeinitialized},
    {CUDA_ERROR_STUB_LIBRARY, hipErrorInsufficientDriver}, /* the toolkit's stub, no driver */
    {CUDA_ERROR_NO_DEVICE, hipErrorNoDevice},
    {CUDA_ERROR_INVALID_DEVICE, hipErrorInvalidDevice},
    {CUDA_ERROR_INVALID_IMAGE, hipErrorInvalidImage},
    {CUDA_ERROR_INVALID_CONTEXT, hipErrorInvalidContext},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, hipErrorNoBinaryForGpu},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, hipErrorUnsupportedLimit},
    {CUDA_ERROR_INVALID_PTX, hipErrorInvalidKernelFile},
    {CUDA_ERROR_INVALID_SOURCE, hipErrorInvalidSource},
    {CUDA_ERROR_FILE_NOT_FOUND, hipErrorFileNotFound},
    {CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, hipErrorSharedObjectSymbolNotFound},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, hipErrorSharedObjectInitFailed},
    {CUDA_ERROR_OPERATING_SYSTEM, hipErrorOperatingSystem},
    {CUDA_ERROR_INVALID_HANDLE, hipErrorInvalidHandle},
    {CUDA_ERROR_NOT_FOUND, hipErrorNotFound},
    {CUDA_ERROR_NOT_READY, hipErrorNotReady},
    {CUDA_ERROR_ILLEGAL_ADDRESS, hipErrorIllegalAddress},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, hipErrorLaunchOutOfResources},
    {CUDA_ERROR_LAUNCH_TIMEOUT, hipErrorLaunchTimeOut},
    {CUDA_ERROR_ASSERT, hipErrorAssert},
    {CUDA_ERROR_LAUNCH_FAILED, hipErrorLaunchFailure},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, hipErrorCooperativeLaunchTooLarge},
    {CUDA_ERROR_NOT_SUPPORTED, hipErrorNotSupported},
    {CUDA_ERROR_UNKNOWN, hipErrorUnknown},
};

static const struct {
    hipError_t code;
    const char *name;
} names[] = {
    {hipSuccess, "hipSuccess"},
    {hipErrorInvalidValue, "hipErrorInvalidValue"},
    {hipErrorOutOfMemory, "hipErrorOutOfMemory"},
    {hipErrorNotInitialized, "hipErrorNotInitialized"},
    {hipErrorDeinitialized, "hipErrorDeinitialized"},
    {hipErrorInsufficientDriver, "hipErrorInsufficientDriver"},
    {hipErrorNoDevice, "hipErrorNoDevice"},
    {hipErrorInvalidDevice, "hipErrorInvalidDevice"},
    {hipErrorInvalidImage, "hipErrorInvalidImage"},
    {hipErrorInvalidContext, "hipErrorInvalidContext"},
    {hipErrorNoBinaryForGpu, "hipErrorNoBinaryForGpu"},
    {hipErrorUnsupportedLimit, "hipErrorUnsupportedLimit"},
    {hipErrorInvalidKernelFile, "hipErrorInvalidKernelFile"},
    {hipErrorInvalidSource, "hipErrorInvalidSource"},
    {hipErrorFileNotFound, "hipErrorFileNotFound"},
    {hipErrorSharedObjectSymbolNotFound, "hipErrorSharedObjectSymbolNotFound"},
    {hipErrorSharedObjectInitFailed, "hipErrorSharedObjectInitFailed"},
    {hipErrorOperatingSystem, "hipErrorOperatingSystem"},
    {hipErrorInvalidHandle, "hipErrorInvalidHandle"},
    {hipErrorNotFound, "hipErrorNotFound"},
    {hipErrorNotReady, "hipErrorNotReady"},
    {hipErrorIllegalAddress, "hipErrorIllegalAddress"},
    {hipErrorLaunchOutOfResources, "hipErrorLaunchOutOfResources"},
    {hipErrorLaunchTimeOut, "hipErrorLaunchTimeOut"},
    {hipErrorAssert, "hipErrorAssert"},
    {hipErrorLaunchFailure, "hipErrorLaunchFailure"},
    {hipErrorCooperativeLaunchTooLarge, "hipErrorCooperativeLaunchTooLarge"},
    {hipErrorNotSupported, "hipErrorNotSupported"},
    {hipErrorUnknown, "hipErrorUnknown"},
};

/* The driver calls used, typed by cuda.h's own declarations; looked up under the names cuda.h
 * gives them (its macros select the versioned entry points). */
static struct {
    __typeof__(cuInit) *init;
    __typeof__(cuDeviceGetCount) *device_count;
    __typeof__(cuDeviceGet) *device_get;
    __typeof__(cuDeviceGetPCIBusId) *pci_bus_id;
    __typeof__(cuDeviceGetAttribute) *attribute;
    __typeof__(cuDevicePrimaryCtxRetain) *primary_retain;
    __typeof__(cuCtxGetCurrent) *ctx_get;
    __typeof__(cuCtxSetCurrent) *ctx_set;
    __typeof__(cuModuleLoadData) *module_load;
    __typeof__(cuModuleGetFunction) *module_function;
    __typeof__(cuLaunchKernel) *launch;
} cu;

#define NAME_OF(symbol) NAME_OF_(symbol)
#define NAME_OF_(symbol) #symbol
#define BIND(field, symbol) bind(driver, (void **)&cu.field, NAME_OF(symbol))

/* dlsym's address stored into a function pointer as POSIX's dlsym page does it (ISO C has no
 * conversion between object and function pointers). */
static int bind(void *driver, void **slot, const char *name) {
    *slot = dlsym(driver, name);
    return *slot != NULL;
}

static pthread_once_t started = PTHREAD_ONCE_INIT;
static hipError_t start_status = hipErrorNotInitialized;
static int visible[MAX_DEVICES]; /* HIP ordinal -> CUDA ordinal */
static int visible_count;
static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext contexts[MAX_DEVICES]; /* HIP ordinal -> its CUDA device's primary context */
static long long launches[MAX_DEVICES], loads[MAX_DEVICES];
static _Thread_local int current_device;

static hipError_t hip_error(CUresult code) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].cuda == code) return errors[i].hip;
    }
    return hipErrorUnknown;
}

/* HIP_VISIBLE_DEVICES over the CUDA devices there are: each entry a CUDA ordinal; the list ends
 * at the first entry that is not one (unset or empty: every device, in CUDA's order). */
static void choose_devices(int count) {
    const char *list = getenv("HIP_VISIBLE_DEVICES");
    if (list == NULL || *list == '\0') {
        for (int i = 0; i < count && i < MAX_DEVICES; i++) visible[visible_count++] = i;
        return;
    }
    const char *at = list;
    while (visible_count < MAX_DEVICES) {
        char *end;
        long ordinal = strtol(at, &end, 10);
        if (end == at || (*end != ',' && *end != '\0') || ordinal < 0 || ordinal >= count) return;
        visible[visible_count++] = (int)ordinal;
        if (*end == '\0') return;
        at = end + 1;
    }
}

static void start(void) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == NULL) {
        start_status = hipErrorInsufficientDriver;
        return;
    }
    if (!(BIND(init, cuInit) && BIND(device_count, cuDeviceGetCount) &&
          BIND(device_get, cuDeviceGet) && BIND(pci_bus_id, cuDeviceGetPCIBusId) &&
          BIND(attribute, cuDeviceGetAttribute) &&
          BIND(primary_retain, cuDevicePrimaryCtxRetain) && BIND(ctx_get, cuCtxGetCurrent) &&
          BIND(ctx_set, cuCtxSetCurrent) && BIND(module_load, cuModuleLoadData) &&
          BIND(module_function, cuModuleGetFunction) && BIND(launch, cuLaunchKernel))) {
        start_status = hipErrorInsufficientDriver;
        return;
    }
    CUresult code = cu.init(0);
    int count = 0;
    if (code == CUDA_SUCCESS) code = cu.device_count(&count);
    if (code != CUDA_SUCCESS) {
        start_status = hip_error(code);
        return;
    }
    choose_devices(count);
    start_status = visible_count ? hipSuccess : hipErrorNoDevice;
}

static hipError_t ready(void) {
    pthread_once(&started, start);
    return start_status;
}

static int valid_device(int device) { return device >= 0 && device < visible_count; }

/* Makes HIP device `device`'s primary context current on this thread. */
static hipError_t make_current(int device) {
    if (!valid_device(device)) return hipErrorInvalidDevice;
    CUresult code = CUDA_SUCCESS;
    pthread_mutex_lock(&contexts_lock);
    if (contexts[device] == NULL) {
        CUdevice handle;
        code = cu.device_get(&handle, visible[device]);
        if (code == CUDA_SUCCESS) code = cu.primary_retain(&contexts[device], handle);
    }
    CUcontext context = contexts[device];
    pthread_mutex_unlock(&contexts_lock);
    if (code != CUDA_SUCCESS) return hip_error(code);
    CUcontext now = NULL;
    code = cu.ctx_get(&now);
    if (code == CUDA_SUCCESS && now != context) code = cu.ctx_set(context);
    return hip_error(code);
}

EXPORT hipError_t hipInit(unsigned int flags) {
    if (flags != 0) return hipErrorInvalidValue;
    return ready();
}

EXPORT hipError_t hipRuntimeGetVersion(int *version) {
    if (version == NULL) return hipErrorInvalidValue;
    *version = HIP_OVER_CUDA_VERSION;
    return hipSuccess;
}

EXPORT const char *hipGetErrorName(hipError_t code) {
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (names[i].code == code) return names[i].name;
    }
    return "hipErrorUnknown";
}

EXPORT hipError_t hipGetDeviceCount(int *count) {
    if (count == NULL) return hipErrorInvalidValue;
    hipError_t status = ready();
    *count = status == hipSuccess ? visible_count : 0;
    return status;
}

EXPORT hipError_t hipDeviceGetPCIBusId(char *text, int length, int device) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (!valid_device(device)) return hipErrorInvalidDevice;
    if (text == NULL || length <= 0) return hipErrorInvalidValue;
    CUdevice handle;
    CUresult code = cu.device_get(&handle, visible[device]);
    if (code == CUDA_SUCCESS) code = cu.pci_bus_id(text, length, handle);
    return hip_error(code);
}

/* HIP's attribute numbers differ from CUDA's: only those kernelpack asks for are mapped (the
 * multiprocessor count, hipDeviceAttributeMultiprocessorCount = 63 in HIP 6's enum); any other
 * is hipErrorInvalidValue, as HIP answers an attribute it does not know. */
EXPORT hipError_t hipDeviceGetAttribute(int *value, int attribute, int device) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (!valid_device(device)) return hipErrorInvalidDevice;
    if (value == NULL || attribute != 63) return hipErrorInvalidValue;
    CUdevice handle;
    CUresult code = cu.device_get(&handle, visible[device]);
    if (code == CUDA_SUCCESS)
        code = cu.attribute(value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle);
    return hip_error(code);
}

EXPORT hipError_t hipGetDevice(int *device) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (device == NULL) return hipErrorInvalidValue;
    *device = current_device;
    return hipSuccess;
}

EXPORT hipError_t hipSetDevice(int device) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    status = make_current(device);
    if (status == hipSuccess) current_device = device;
    return status;
}

EXPORT hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (module == NULL || image == NULL) return hipErrorInvalidValue;
    if ((status = make_current(current_device)) != hipSuccess) return status;
    CUmodule loaded = NULL;
    status = hip_error(cu.module_load(&loaded, image));
    if (status == hipSuccess) {
        *module = (hipModule_t)loaded;
        __atomic_add_fetch(&loads[current_device], 1, __ATOMIC_RELAXED);
    }
    return status;
}

EXPORT hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module,
                                       const char *name) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (function == NULL || module == NULL || name == NULL) return hipErrorInvalidValue;
    if ((status = make_current(current_device)) != hipSuccess) return status;
    CUfunction found = NULL;
    status = hip_error(cu.module_function(&found, (CUmodule)module, name));
    if (status == hipSuccess) *function = (hipFunction_t)found;
    return status;
}

EXPORT hipError_t hipModuleLaunchKernel(hipFunction_t function, unsigned int grid_x,
                                        unsigned int grid_y, unsigned int grid_z,
                                        unsigned int block_x, unsigned int block_y,
                                        unsigned int block_z, unsigned int shared_mem,
                                        hipStream_t stream, void **params, void **extra) {
    hipError_t status = ready();
    if (status != hipSuccess) return status;
    if (function == NULL) return hipErrorInvalidHandle;
    if ((status = make_current(current_device)) != hipSuccess) return status;
    status = hip_error(cu.launch((CUfunction)function, grid_x, grid_y, grid_z, block_x, block_y,
                                 block_z, shared_mem, (CUstream)stream, params, extra));
    if (status == hipSuccess) __atomic_add_fetch(&launches[current_device], 1, __ATOMIC_RELAXED);
    return status;
}

/* For the tests: launches and loads made with HIP device `device` current; -1 for no device. */
EXPORT long long hip_over_cuda_launches(int device) {
    return device >= 0 && device < MAX_DEVICES ? __atomic_load_n(&launches[device], __ATOMIC_RELAXED)
                                               : -1;
}

EXPORT long long hip_over_cuda_loads(int device) {
    return device >= 0 && device < MAX_DEVICES ? __atomic_load_n(&loads[device], __ATOMIC_RELAXED)
                                               : -1;
}
