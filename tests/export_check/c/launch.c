/* `launch INPUT OUTPUT MUL ADD`: candle's affine_f32 on the GPU from the image kernelpack_select
 * picks in a kernelpack C export, as tests/export_check/rust_launch does in Rust (the GPU check
 * of tests/test_export.py). INPUT: n float32 (little-endian); OUTPUT: the n float32 the kernel
 * wrote (INPUT * MUL + ADD on the GPU), which the test compares with numpy: this program checks
 * nothing itself. The output buffer is 0xFF bytes (NaN) before the launch, so an element left
 * unwritten shows. libcuda is opened at run time (dlopen), so this builds and starts without a
 * driver, and says so in one line. Exit status: 0 done, 1 no GPU or a CUDA call failed, 2 bad
 * arguments or files. */
#include "kernels.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*init_f)(unsigned);
typedef int (*device_get_f)(int *, int);
typedef int (*attribute_f)(int *, int, int);
typedef int (*retain_f)(void **, int);
typedef int (*set_current_f)(void *);
typedef int (*load_data_f)(void **, const void *);
typedef int (*get_function_f)(void **, void *, const char *);
typedef int (*alloc_f)(uint64_t *, size_t);
typedef int (*free_f)(uint64_t);
typedef int (*memset_f)(uint64_t, unsigned, size_t);
typedef int (*error_name_f)(int, const char **);
typedef int (*to_device_f)(uint64_t, const void *, size_t);
typedef int (*to_host_f)(void *, uint64_t, size_t);
typedef int (*launch_f)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*synchronize_f)(void);

static void *cuda;
static error_name_f error_name;

static void fail(int status, const char *what, const char *detail)
{
    fprintf(stderr, "launch: %s%s\n", what, detail);
    exit(status);
}

/* `call` (its text) failed with `status`: one line with the CUresult's name, exit 1 */
static void cuda_failed(const char *call, int status)
{
    const char *name = NULL;
    if (error_name == NULL || error_name(status, &name) != 0 || name == NULL)
        name = "unknown";
    fprintf(stderr, "launch: %s failed: CUresult %d (%s)\n", call, status, name);
    exit(1);
}

#define LOAD(var, name) (p = symbol(name), memcpy(&var, &p, sizeof var))

static void *symbol(const char *name)
{
    void *found = dlsym(cuda, name);
    if (found == NULL) {
        fprintf(stderr, "launch: libcuda.so.1 has no %s: a driver too old for this program\n", name);
        exit(1);
    }
    return found;
}

#define CHECK(call)                                                              \
    do {                                                                         \
        int status_ = (call);                                                    \
        if (status_ != 0)                                                        \
            cuda_failed(#call, status_);                                         \
    } while (0)

int main(int argc, char **argv)
{
    FILE *file;
    long size;
    size_t n, numel, dims = 1;
    float *input, *result, mul, add;
    int device, major, minor;
    void *context, *module, *function, *params[7];
    uint64_t x, out, info = 0;
    const kernelpack_nvidia_image *image;
    const char *name;
    char *end;
    /* dlsym hands back object pointers; going through memcpy keeps this strict ISO C */
    init_f init; device_get_f device_get; attribute_f attribute; retain_f retain;
    set_current_f set_current; load_data_f load_data; get_function_f get_function; alloc_f alloc;
    free_f mem_free; memset_f mem_set; to_device_f to_device; to_host_f to_host; launch_f launch; synchronize_f synchronize;
    void *p;

    if (argc != 5)
        fail(2, "usage: launch INPUT OUTPUT MUL ADD", "");
    mul = strtof(argv[3], &end);
    if (end == argv[3] || *end != '\0')
        fail(2, "MUL: not a number: ", argv[3]);
    add = strtof(argv[4], &end);
    if (end == argv[4] || *end != '\0')
        fail(2, "ADD: not a number: ", argv[4]);
    file = fopen(argv[1], "rb");
    if (file == NULL)
        fail(2, "cannot open the input file ", argv[1]);
    fseek(file, 0, SEEK_END);
    size = ftell(file);
    rewind(file);
    if (size <= 0 || size % 4 != 0)
        fail(2, "not a whole number (>0) of float32: ", argv[1]);
    n = (size_t)size / 4;
    input = (float *)malloc(n * 4);
    result = (float *)malloc(n * 4);
    if (input == NULL || result == NULL)
        fail(1, "out of memory for the input of ", argv[1]);
    if (fread(input, 4, n, file) != n)
        fail(2, "cannot read the input file ", argv[1]);
    fclose(file);

    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL)
        fail(1, "libcuda.so.1 cannot be opened: no NVIDIA driver on this machine", "");
    LOAD(error_name, "cuGetErrorName");
    LOAD(init, "cuInit");
    LOAD(device_get, "cuDeviceGet");
    LOAD(attribute, "cuDeviceGetAttribute");
    LOAD(retain, "cuDevicePrimaryCtxRetain");
    LOAD(set_current, "cuCtxSetCurrent");
    LOAD(load_data, "cuModuleLoadData");
    LOAD(get_function, "cuModuleGetFunction");
    LOAD(alloc, "cuMemAlloc_v2");
    LOAD(mem_free, "cuMemFree_v2");
    LOAD(mem_set, "cuMemsetD32_v2");
    LOAD(to_device, "cuMemcpyHtoD_v2");
    LOAD(to_host, "cuMemcpyDtoH_v2");
    LOAD(launch, "cuLaunchKernel");
    LOAD(synchronize, "cuCtxSynchronize");

    CHECK(init(0));
    CHECK(device_get(&device, 0));
    CHECK(attribute(&major, 75, device)); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    CHECK(attribute(&minor, 76, device)); /* ..._MINOR */
    CHECK(retain(&context, device));
    CHECK(set_current(context));

    image = kernelpack_select(&kernelpack_AFFINE, (unsigned)(10 * major + minor));
    if (image == NULL) {
        fprintf(stderr, "launch: no image of affine for compute capability %d.%d\n", major, minor);
        return 1;
    }
    name = kernelpack_symbol(image->kernels, image->kernel_count, "affine_f32");
    if (name == NULL)
        fail(1, "affine_f32 is not in the image for ", image->target);
    CHECK(load_data(&module, image->bytes));
    CHECK(get_function(&function, module, name));
    CHECK(alloc(&x, n * 4));
    CHECK(alloc(&out, n * 4));
    CHECK(to_device(x, input, n * 4));
    CHECK(mem_set(out, 0xFFFFFFFFu, n));
    numel = n;
    /* affine_f32(numel, num_dims, info, inp, out, mul, add); info NULL: contiguous, as candle
     * passes it for a contiguous layout (SlicePtrOrNull::Null) */
    params[0] = &numel;
    params[1] = &dims;
    params[2] = &info;
    params[3] = &x;
    params[4] = &out;
    params[5] = &mul;
    params[6] = &add;
    CHECK(launch(function, (unsigned)((n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CHECK(synchronize());
    CHECK(to_host(result, out, n * 4));
    CHECK(mem_free(x));
    CHECK(mem_free(out));
    file = fopen(argv[2], "wb");
    if (file == NULL || fwrite(result, 4, n, file) != n)
        fail(2, "cannot write the output file ", argv[2]);
    fclose(file);
    printf("%s %s for %d.%d\n", image->target, image->kind == kernelpack_KIND_PTX ? "ptx" : "cubin", major, minor);
    return 0;
}
