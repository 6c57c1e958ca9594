/* `launch INPUT OUTPUT MUL ADD`: candle's affine_f32 on the GPU from the image kernelpack_select
 * picks in a kernelpack C export, as tests/export_check/rust_launch does in Rust (the GPU check
 * of tests/test_export.py). libcuda is opened at run time (dlopen), so this builds without a
 * driver. INPUT: n float32 (little-endian); OUTPUT: the kernel's INPUT * MUL + ADD. */
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
typedef int (*to_device_f)(uint64_t, const void *, size_t);
typedef int (*to_host_f)(void *, uint64_t, size_t);
typedef int (*launch_f)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
                        void **, void **);
typedef int (*synchronize_f)(void);

static void *cuda;

static void *symbol(const char *name)
{
    void *found = dlsym(cuda, name);
    if (found == NULL) {
        fprintf(stderr, "libcuda has no %s\n", name);
        exit(2);
    }
    return found;
}

#define CHECK(call)                                                              \
    do {                                                                         \
        int status_ = (call);                                                    \
        if (status_ != 0) {                                                      \
            fprintf(stderr, "%s failed: CUresult %d\n", #call, status_);        \
            exit(1);                                                             \
        }                                                                        \
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
    /* dlsym hands back object pointers; going through memcpy keeps this strict ISO C */
    init_f init; device_get_f device_get; attribute_f attribute; retain_f retain;
    set_current_f set_current; load_data_f load_data; get_function_f get_function; alloc_f alloc;
    free_f mem_free; to_device_f to_device; to_host_f to_host; launch_f launch; synchronize_f synchronize;
    void *p;

    if (argc != 5) {
        fprintf(stderr, "usage: launch INPUT OUTPUT MUL ADD\n");
        return 2;
    }
    mul = strtof(argv[3], NULL);
    add = strtof(argv[4], NULL);
    file = fopen(argv[1], "rb");
    if (file == NULL)
        return 2;
    fseek(file, 0, SEEK_END);
    size = ftell(file);
    rewind(file);
    n = (size_t)size / 4;
    input = (float *)malloc(n * 4);
    result = (float *)malloc(n * 4);
    if (fread(input, 4, n, file) != n)
        return 2;
    fclose(file);

    cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (cuda == NULL) {
        fprintf(stderr, "libcuda.so.1 cannot be opened: no NVIDIA driver\n");
        return 2;
    }
#define LOAD(var, name) (p = symbol(name), memcpy(&var, &p, sizeof var))
    LOAD(init, "cuInit");
    LOAD(device_get, "cuDeviceGet");
    LOAD(attribute, "cuDeviceGetAttribute");
    LOAD(retain, "cuDevicePrimaryCtxRetain");
    LOAD(set_current, "cuCtxSetCurrent");
    LOAD(load_data, "cuModuleLoadData");
    LOAD(get_function, "cuModuleGetFunction");
    LOAD(alloc, "cuMemAlloc_v2");
    LOAD(mem_free, "cuMemFree_v2");
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
        fprintf(stderr, "no image of affine for compute capability %d.%d\n", major, minor);
        return 1;
    }
    name = kernelpack_symbol(image->kernels, image->kernel_count, "affine_f32");
    if (name == NULL) {
        fprintf(stderr, "affine_f32 is not in the %s image\n", image->target);
        return 1;
    }
    CHECK(load_data(&module, image->bytes));
    CHECK(get_function(&function, module, name));
    CHECK(alloc(&x, n * 4));
    CHECK(alloc(&out, n * 4));
    CHECK(to_device(x, input, n * 4));
    numel = n;
    /* affine_f32(numel, num_dims, info, inp, out, mul, add); info NULL: contiguous */
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
        return 2;
    fclose(file);
    printf("%s %s for %d.%d\n", image->target, image->kind == kernelpack_KIND_PTX ? "ptx" : "cubin", major, minor);
    return 0;
}
