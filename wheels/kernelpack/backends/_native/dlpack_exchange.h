/* DLPack's C exchange API (DLPack 1.3, "DLPack C Exchange API"): the function table a tensor
 * framework publishes on its tensor type as the capsule `__dlpack_c_exchange_api__`, named
 * "dlpack_exchange_api". torch has it since 2.10.
 *
 * Why: the torch hot path (launcher.c) reads each tensor's address, dtype, device, shape and
 * strides, allocates its results and asks for the current stream through this table, in C, at
 * tens of nanoseconds a tensor, where the same facts read through torch's Python bindings cost a
 * dozen attribute calls (docs/bench-mlp-notes.md has the numbers).
 *
 * Declared here from the specification (the launcher includes no framework's headers);
 * tests/test_mlp_hot.py compiles these declarations beside torch's own dlpack.h and checks that
 * every size and offset agrees. Only what the hot path uses is declared.
 */
#ifndef KERNELPACK_DLPACK_EXCHANGE_H
#define KERNELPACK_DLPACK_EXCHANGE_H

#include <stdint.h>

#define KP_DL_EXCHANGE_CAPSULE "dlpack_exchange_api"
#define KP_DL_MAJOR 1 /* the major version whose layout this is (a consumer must check it) */

typedef struct {
    uint32_t major;
    uint32_t minor;
} kp_dl_version;

typedef struct {
    int32_t type; /* DLDeviceType: kDLCPU 1, kDLCUDA 2, kDLROCM 10, ... */
    int32_t id;
} kp_dl_device;

typedef struct {
    uint8_t code; /* DLDataTypeCode: kDLFloat 2, kDLBfloat 4, ... */
    uint8_t bits;
    uint16_t lanes;
} kp_dl_dtype;

/* DLTensor. strides may be NULL (compact row-major); the address is data + byte_offset. */
typedef struct {
    void *data;
    kp_dl_device device;
    int32_t ndim;
    kp_dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} kp_dl_tensor;

/* DLManagedTensorVersioned: an owned tensor, freed by its deleter. */
typedef struct kp_dl_managed {
    kp_dl_version version;
    void *manager_ctx;
    void (*deleter)(struct kp_dl_managed *self);
    uint64_t flags;
    kp_dl_tensor tensor;
} kp_dl_managed;

typedef struct kp_dl_exchange_header {
    kp_dl_version version;
    struct kp_dl_exchange_header *prev_api;
} kp_dl_exchange_header;

/* DLPackExchangeAPI. Each function returns 0, or -1 with a Python exception set (allocate: with
 * set_error called instead). view_from_object may be NULL; its view lives until control returns
 * to Python. None of them synchronises a stream: work goes on current_stream's. */
typedef struct {
    kp_dl_exchange_header header;
    int (*allocate)(kp_dl_tensor *prototype, kp_dl_managed **out, void *error_context,
                    void (*set_error)(void *error_context, const char *kind, const char *message));
    int (*managed_from_object)(void *object, kp_dl_managed **out);
    int (*managed_to_object)(kp_dl_managed *tensor, void **out_object);
    int (*view_from_object)(void *object, kp_dl_tensor *out);
    int (*current_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} kp_dl_exchange_api;

#endif
