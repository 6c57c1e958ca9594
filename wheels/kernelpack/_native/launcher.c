/* kernelpack._launcher: the per-launch hot path in C, on the CPython limited API (3.11+).
 *
 * Why it exists: from Python, ctypes spends microseconds per cuLaunchKernel converting arguments,
 * more than the driver itself (docs/loader.md has the numbers). Here one call checks and packs
 * the arguments by the kernel's C signature and calls the vendor's launch function through a
 * pointer that the Python side took from the runtime library it loaded with ctypes: nothing is
 * linked against libcuda or libamdhip64, whose launch functions share one signature.
 *
 * Its launch method is Kernel.launch itself (no Python frame in between). Problems are not
 * described here: a driver error or arguments that do not fit (-1) go to the Python `fail`
 * callable, which re-checks the arguments, names the one at fault and raises.
 *
 * TorchHotPath is kernelpack.mlp's hot path for torch tensors in one C call: the checks of the
 * tensors (type, dtype, device, contiguity, requires_grad, shapes, eps), the allocation of the
 * result and the launch. It describes no problem either: anything it does not accept returns
 * NotImplemented, and the caller's full checks then name what is wrong (or launch, and prepare
 * the shape so that its next call is accepted here).
 */
#ifndef Py_LIMITED_API /* CMake's USE_SABI defines it from pyproject's wheel.py-api */
#define Py_LIMITED_API 0x030b0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define MAX_PARAMS 64
#define ARGUMENT_ERROR (-1)

typedef int (*launch_fn)(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                         unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                         void **extra);
typedef int (*cu_ctx_get_fn)(void **context);
typedef int (*cu_ctx_push_fn)(void *context);
typedef int (*cu_ctx_pop_fn)(void **context);
typedef int (*hip_get_device_fn)(int *device);
typedef int (*hip_set_device_fn)(int device);

/* How the launch makes sure it runs on the kernel's device without changing the caller's state. */
enum binding { BIND_NONE = 0, BIND_CUDA_CONTEXT = 1, BIND_HIP_DEVICE = 2 };

typedef struct {
    PyObject_HEAD
    launch_fn launch;
    void *function;
    int binding;
    void *get_current; /* cuCtxGetCurrent / hipGetDevice */
    void *enter;       /* cuCtxPushCurrent / hipSetDevice */
    void *leave;       /* cuCtxPopCurrent / hipSetDevice */
    void *context;     /* CUcontext, or the HIP device number */
    Py_ssize_t count;
    char codes[MAX_PARAMS];
    PyObject *pointer_getters; /* dict: type -> callable(obj) -> int */
    PyObject *pointer_of;      /* callable(obj) -> int, fills pointer_getters */
    PyObject *torch_getter;    /* the getter that marks torch tensors: read here, in C */
    PyObject *stream_of;       /* callable(obj) -> int */
    PyObject *fail;            /* callable(code, grid, block, args, shared_mem, stream): raises */
} Launcher;

/* The Python objects a Launcher holds, listed once: launcher_new takes a reference to each,
 * traverse visits each and clear drops each, so the three cannot drift apart. */
#define LAUNCHER_OBJECTS(X) X(pointer_getters) X(pointer_of) X(torch_getter) X(stream_of) X(fail)

static PyObject *s_is_cuda, *s_data_ptr, *s_shared_mem, *s_stream;
static PyObject *s_dtype, *s_shape, *s_get_device, *s_is_contiguous, *s_requires_grad, *s_new_empty;
static PyObject *s_stream_kwnames; /* ("stream",): the keyword names of a hot-path launch */
static PyTypeObject *s_launcher_type;

#define VISIT_OBJECT(name) Py_VISIT(((Launcher *)self)->name);
static int launcher_traverse(PyObject *self, visitproc visit, void *arg) {
    LAUNCHER_OBJECTS(VISIT_OBJECT)
    return 0;
}
#undef VISIT_OBJECT

#define CLEAR_OBJECT(name) Py_CLEAR(((Launcher *)self)->name);
static int launcher_clear(PyObject *self) {
    LAUNCHER_OBJECTS(CLEAR_OBJECT)
    return 0;
}
#undef CLEAR_OBJECT

static void launcher_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    launcher_clear(self);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

static PyObject *launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    unsigned long long launch, function, get_current, enter, leave, context;
    int binding;
    const char *codes;
    Py_ssize_t count;
    PyObject *pointer_getters, *pointer_of, *torch_getter, *stream_of, *fail;
    static char *names[] = {"launch", "function", "codes", "binding", "get_current", "enter",
                            "leave", "context", "pointer_getters", "pointer_of", "torch_getter",
                            "stream_of", "fail", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKs#iKKKKOOOOO", names, &launch, &function,
                                     &codes, &count, &binding, &get_current, &enter, &leave,
                                     &context, &pointer_getters, &pointer_of, &torch_getter,
                                     &stream_of, &fail))
        return NULL;
    if (count > MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "at most %d kernel parameters", MAX_PARAMS);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!strchr("PbBhHiIqQfd?uv", codes[i])) {
            PyErr_Format(PyExc_ValueError, "unknown parameter code %c", codes[i]);
            return NULL;
        }
    }
    if (!PyDict_Check(pointer_getters) || !PyCallable_Check(pointer_of) || !PyCallable_Check(stream_of) ||
        !PyCallable_Check(fail)) {
        PyErr_SetString(PyExc_TypeError, "pointer_getters must be a dict, the others callables");
        return NULL;
    }
    if (binding < BIND_NONE || binding > BIND_HIP_DEVICE || launch == 0) {
        PyErr_SetString(PyExc_ValueError, "bad binding or launch function");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Launcher *self = (Launcher *)alloc(type, 0);
    if (self == NULL) return NULL;
    self->launch = (launch_fn)(uintptr_t)launch;
    self->function = (void *)(uintptr_t)function;
    self->binding = binding;
    self->get_current = (void *)(uintptr_t)get_current;
    self->enter = (void *)(uintptr_t)enter;
    self->leave = (void *)(uintptr_t)leave;
    self->context = (void *)(uintptr_t)context;
    self->count = count;
    memcpy(self->codes, codes, (size_t)count);
#define TAKE_OBJECT(name) self->name = Py_NewRef(name);
    LAUNCHER_OBJECTS(TAKE_OBJECT)
#undef TAKE_OBJECT
    return (PyObject *)self;
}

/* read_u64 and read_i64: an integer-like value (anything with __index__) as a C integer; 0 on
 * success, ARGUMENT_ERROR when it is not one or does not fit (no exception left set). */
#define READ_INTEGER(name, type, convert)                                                          \
    static int name(PyObject *value, type *out) {                                                  \
        PyObject *number = PyNumber_Index(value);                                                  \
        if (number == NULL) {                                                                      \
            PyErr_Clear();                                                                         \
            return ARGUMENT_ERROR;                                                                 \
        }                                                                                          \
        *out = convert(number);                                                                    \
        Py_DECREF(number);                                                                         \
        if (*out == (type)-1 && PyErr_Occurred()) {                                                \
            PyErr_Clear();                                                                         \
            return ARGUMENT_ERROR;                                                                 \
        }                                                                                          \
        return 0;                                                                                  \
    }
READ_INTEGER(read_u64, unsigned long long, PyLong_AsUnsignedLongLong)
READ_INTEGER(read_i64, long long, PyLong_AsLongLong)
#undef READ_INTEGER

static int read_dims(PyObject *value, unsigned out[3]) {
    unsigned long long size;
    out[0] = out[1] = out[2] = 1;
    if (PyLong_CheckExact(value)) {
        if (read_u64(value, &size) || size == 0 || size > 0xffffffffULL) return ARGUMENT_ERROR;
        out[0] = (unsigned)size;
        return 0;
    }
    int is_tuple = PyTuple_Check(value);
    if (!is_tuple && !PyList_Check(value)) return ARGUMENT_ERROR;
    Py_ssize_t n = is_tuple ? PyTuple_Size(value) : PyList_Size(value);
    if (n < 1 || n > 3) return ARGUMENT_ERROR;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = is_tuple ? PyTuple_GetItem(value, i) : PyList_GetItem(value, i);
        if (!PyLong_CheckExact(item) || read_u64(item, &size) || size == 0 ||
            size > 0xffffffffULL)
            return ARGUMENT_ERROR;
        out[i] = (unsigned)size;
    }
    return 0;
}

/* The address behind a pointer argument: ints directly, torch tensors here (is_cuda, then
 * data_ptr(): no Python frame), other objects through the per-type getter the Python side chose.
 * Any failure is ARGUMENT_ERROR with no exception left: the Python side then names the argument
 * (and re-raises whatever the getter raised). */
static int read_pointer(Launcher *self, PyObject *value, unsigned long long *out) {
    if (PyLong_CheckExact(value)) return read_u64(value, out);
    PyObject *getter = PyDict_GetItem(self->pointer_getters, (PyObject *)Py_TYPE(value));
    PyObject *address = NULL;
    if (getter != NULL && getter == self->torch_getter) {
        PyObject *on_gpu = PyObject_GetAttr(value, s_is_cuda);
        if (on_gpu == Py_True) address = PyObject_CallMethodObjArgs(value, s_data_ptr, NULL);
        Py_XDECREF(on_gpu);
    } else {
        address = PyObject_CallFunctionObjArgs(getter ? getter : self->pointer_of, value, NULL);
    }
    if (address == NULL) {
        PyErr_Clear();
        return ARGUMENT_ERROR;
    }
    int status = read_u64(address, out);
    Py_DECREF(address);
    return status;
}

/* An integer code: read the value as 64 bits (s signed, u unsigned), check that it fits the C
 * type the kernel declares, store it as that type. */
#define INTEGER_CASE(code, type, read, wide, fits)                                                 \
    case code:                                                                                     \
        if ((status = read(value, &wide)) == 0 && !(fits)) status = ARGUMENT_ERROR;                \
        if (status == 0) *(type *)slot = (type)wide;                                               \
        break;

static int pack(Launcher *self, PyObject *const *args, uint64_t *slots, void **params) {
    for (Py_ssize_t i = 0; i < self->count; i++) {
        PyObject *value = args[i];
        unsigned char *slot = (unsigned char *)&slots[i];
        unsigned long long u;
        long long s;
        double d;
        int status = 0;
        params[i] = slot;
        switch (self->codes[i]) {
        case 'P':
            status = read_pointer(self, value, &u);
            if (status == 0) memcpy(slot, &u, 8);
            break;
        INTEGER_CASE('b', int8_t, read_i64, s, s >= INT8_MIN && s <= INT8_MAX)
        INTEGER_CASE('h', int16_t, read_i64, s, s >= INT16_MIN && s <= INT16_MAX)
        INTEGER_CASE('i', int32_t, read_i64, s, s >= INT32_MIN && s <= INT32_MAX)
        INTEGER_CASE('q', int64_t, read_i64, s, 1)
        INTEGER_CASE('B', uint8_t, read_u64, u, u <= UINT8_MAX)
        INTEGER_CASE('H', uint16_t, read_u64, u, u <= UINT16_MAX)
        INTEGER_CASE('I', uint32_t, read_u64, u, u <= UINT32_MAX)
        INTEGER_CASE('Q', uint64_t, read_u64, u, 1)
        case 'f':
        case 'd':
            if (PyBool_Check(value)) {
                status = ARGUMENT_ERROR;
                break;
            }
            d = PyFloat_AsDouble(value);
            if (d == -1.0 && PyErr_Occurred()) {
                PyErr_Clear();
                status = ARGUMENT_ERROR;
            } else if (self->codes[i] == 'f') {
                if (isfinite(d) && fabs(d) > FLT_MAX) status = ARGUMENT_ERROR;
                else *(float *)slot = (float)d;
            } else {
                *(double *)slot = d;
            }
            break;
        /* Untyped (C linkage, kernelpack/args.py): a float as float32 / float64, else an
         * integer of the size, signed or unsigned; for 8 bytes a non-int is a pointer. */
        case 'u':
            if (PyFloat_Check(value)) {
                d = PyFloat_AsDouble(value);
                float narrowed = (float)d;
                /* as Python's struct "f": too large only when rounding makes it infinite */
                if (isinf(narrowed) && !isinf(d)) status = ARGUMENT_ERROR;
                else *(float *)slot = narrowed;
            } else if ((status = read_i64(value, &s)) == 0) {
                if (s < INT32_MIN || s > (long long)UINT32_MAX) status = ARGUMENT_ERROR;
                else *(uint32_t *)slot = (uint32_t)s;
            }
            break;
        case 'v':
            if (PyFloat_Check(value)) {
                d = PyFloat_AsDouble(value);
                memcpy(slot, &d, 8);
            } else if (PyLong_CheckExact(value)) {
                if (read_u64(value, &u) == 0) {
                    memcpy(slot, &u, 8);
                } else if ((status = read_i64(value, &s)) == 0) {
                    memcpy(slot, &s, 8);
                }
            } else if ((status = read_pointer(self, value, &u)) == 0) {
                memcpy(slot, &u, 8);
            }
            break;
        case '?':
            if (!PyLong_Check(value)) {
                status = ARGUMENT_ERROR;
                break;
            }
            *(uint8_t *)slot = (uint8_t)(PyObject_IsTrue(value) == 1);
            break;
        }
        if (status) return status;
    }
    return 0;
}

#undef INTEGER_CASE

/* Hand a launch that failed to the Python side, which raises the error naming what went wrong. */
static PyObject *failed(Launcher *self, int code, PyObject *const *argv, Py_ssize_t nargs,
                        PyObject *shared, PyObject *stream) {
    PyObject *args = PyTuple_New(nargs - 2);
    if (args == NULL) return NULL;
    for (Py_ssize_t i = 2; i < nargs; i++) {
        Py_INCREF(argv[i]);
        PyTuple_SetItem(args, i - 2, argv[i]);
    }
    PyObject *result = PyObject_CallFunction(self->fail, "iOOOOO", code, argv[0], argv[1], args,
                                             shared, stream);
    Py_DECREF(args);
    if (result == NULL) return NULL;
    Py_DECREF(result);
    Py_RETURN_NONE;
}

/* The vendor's launch (cuLaunchKernel / hipModuleLaunchKernel) of this kernel. */
static inline int launch_now(Launcher *self, const unsigned grid[3], const unsigned block[3],
                             unsigned shared, void *stream, void **params) {
    return self->launch(self->function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                        shared, stream, params, NULL);
}

/* launch(grid, block, *args, shared_mem=0, stream=None): Kernel.launch itself. */
static PyObject *launcher_launch(PyObject *op, PyObject *const *argv, Py_ssize_t nargs,
                                 PyObject *kwnames) {
    Launcher *self = (Launcher *)op;
    PyObject *shared_obj = NULL, *stream = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GetItem(kwnames, k);
        int is_shared = PyObject_RichCompareBool(name, s_shared_mem, Py_EQ);
        int is_stream = is_shared ? 0 : PyObject_RichCompareBool(name, s_stream, Py_EQ);
        if (is_shared == 1) shared_obj = argv[nargs + k];
        else if (is_stream == 1) stream = argv[nargs + k];
        else {
            PyErr_Format(PyExc_TypeError, "launch() got an unexpected keyword argument %R", name);
            return NULL;
        }
    }
    if (nargs < 2) {
        PyErr_SetString(PyExc_TypeError,
                        "launch(grid, block, *args, shared_mem=0, stream=None) needs grid and block");
        return NULL;
    }
    PyObject *zero = NULL;
    if (shared_obj == NULL) shared_obj = zero = PyLong_FromLong(0);
    unsigned grid[3], block[3];
    uint64_t slots[MAX_PARAMS];
    void *params[MAX_PARAMS];
    unsigned long long shared = 0, stream_handle = 0;
    int status = 0;
    if (nargs - 2 != self->count || read_dims(argv[0], grid) || read_dims(argv[1], block) ||
        !PyLong_CheckExact(shared_obj) || read_u64(shared_obj, &shared) || shared > 0xffffffffULL)
        status = ARGUMENT_ERROR;
    if (status == 0) status = pack(self, argv + 2, slots, params);
    if (status == 0 && stream != Py_None) {
        if (PyLong_CheckExact(stream)) {
            status = read_u64(stream, &stream_handle);
        } else {
            PyObject *handle = PyObject_CallFunctionObjArgs(self->stream_of, stream, NULL);
            if (handle == NULL) {
                PyErr_Clear();
                status = ARGUMENT_ERROR;
            } else {
                status = read_u64(handle, &stream_handle);
                Py_DECREF(handle);
            }
        }
    }
    if (status) {
        PyObject *result = failed(self, ARGUMENT_ERROR, argv, nargs, shared_obj, stream);
        Py_XDECREF(zero);
        return result;
    }
    void *stream_ptr = (void *)(uintptr_t)stream_handle;
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    if (self->binding == BIND_CUDA_CONTEXT) {
        void *current = NULL;
        rc = ((cu_ctx_get_fn)self->get_current)(&current);
        if (rc == 0 && current != self->context) {
            rc = ((cu_ctx_push_fn)self->enter)(self->context);
            if (rc == 0) {
                void *popped;
                rc = launch_now(self, grid, block, (unsigned)shared, stream_ptr, params);
                ((cu_ctx_pop_fn)self->leave)(&popped);
            }
        } else if (rc == 0) {
            rc = launch_now(self, grid, block, (unsigned)shared, stream_ptr, params);
        }
    } else if (self->binding == BIND_HIP_DEVICE) {
        int current = -1, device = (int)(uintptr_t)self->context;
        rc = ((hip_get_device_fn)self->get_current)(&current);
        if (rc == 0 && current != device) rc = ((hip_set_device_fn)self->enter)(device);
        if (rc == 0)
            rc = launch_now(self, grid, block, (unsigned)shared, stream_ptr, params);
        if (current >= 0 && current != device) ((hip_set_device_fn)self->leave)(current);
    } else {
        rc = launch_now(self, grid, block, (unsigned)shared, stream_ptr, params);
    }
    Py_END_ALLOW_THREADS
    PyObject *result = Py_None;
    if (rc) result = failed(self, rc, argv, nargs, shared_obj, stream);
    else Py_INCREF(result);
    Py_XDECREF(zero);
    return result;
}

static PyMethodDef launcher_methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launcher_launch, METH_FASTCALL | METH_KEYWORDS,
     "launch(grid, block, *args, shared_mem=0, stream=None): check, pack, launch; on a problem "
     "the fail callable raises"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot launcher_slots[] = {
    {Py_tp_new, launcher_new},
    {Py_tp_dealloc, launcher_dealloc},
    {Py_tp_traverse, launcher_traverse},
    {Py_tp_clear, launcher_clear},
    {Py_tp_methods, launcher_methods},
    {Py_tp_doc, "One kernel's launch: C signature codes, function handle, device binding."},
    {0, NULL},
};

static PyType_Spec launcher_spec = {
    "kernelpack._launcher.Launcher",
    sizeof(Launcher),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    launcher_slots,
};

/* ---- the torch hot path ----------------------------------------------------------------------
 * kernelpack.mlp's ops on torch tensors, checked, allocated and launched in one call: the same
 * checks the full path makes (kernelpack/mlp.py), read here without bytecode between them.
 * Where this extension was not built there is no hot path: every call takes the full checks.
 * Measured on the H200's host: docs/bench-mlp-notes.md. */

enum hot_kind {
    HOT_SWIGLU = 0,
    HOT_SILU_AND_MUL = 1,
    HOT_RMS_NORM = 2,
    HOT_ADD_RMS_NORM = 3,
    HOT_FUSED_ADD_RMS_NORM = 4,
};

/* An op's arguments: its tensor inputs, then eps when it has one, then out= when it takes one;
 * `weight` is the input whose shape is the entry's weight shape (-1: none; every other input has
 * the first's shape), and `allocates` the results made when out= is None (fused_add_rms_norm
 * writes x and residual in place). */
typedef struct {
    int inputs, weight, eps, out, allocates;
} HotSpec;

static const HotSpec hot_specs[] = {
    [HOT_SWIGLU] = {2, -1, 0, 1, 1},       [HOT_SILU_AND_MUL] = {1, -1, 0, 1, 1},
    [HOT_RMS_NORM] = {2, 1, 1, 1, 1},      [HOT_ADD_RMS_NORM] = {3, 2, 1, 0, 2},
    [HOT_FUSED_ADD_RMS_NORM] = {3, 2, 1, 0, 0},
};
#define HOT_KINDS ((int)(sizeof hot_specs / sizeof hot_specs[0]))
#define HOT_MAX_TENSORS 5
#define HOT_MAX_ARGS 16

/* A prepared entry: (launch, grid, block, sizes, weight shape, result shape). launch is a
 * Launcher (called here directly), another callable (launch(grid, block, *args, stream=)) or None
 * (no elements: nothing to launch); sizes the integers the kernel takes after the tensors'
 * pointers (a norm's null row_scales, then the sizes);
 * the weight shape None where the op has no weight; the result shape None where it is the first
 * input's. */
enum { ENTRY_LAUNCH, ENTRY_GRID, ENTRY_BLOCK, ENTRY_SIZES, ENTRY_WEIGHT, ENTRY_RESULT, ENTRY_ITEMS };

typedef struct {
    PyObject_HEAD
    int kind;
    PyObject *torch_types;  /* set: the tensor types accepted (torch.Tensor, nn.Parameter) */
    PyObject *prepared;     /* dict: (dtype, device index, shape) -> entry */
    PyObject *stream;       /* callable(device index) -> the current raw stream */
    PyObject *empty_like;   /* torch.empty_like */
    PyObject *grad_enabled; /* torch.is_grad_enabled */
} HotPath;

#define HOT_OBJECTS(X) X(torch_types) X(prepared) X(stream) X(empty_like) X(grad_enabled)

#define VISIT_HOT(name) Py_VISIT(((HotPath *)self)->name);
static int hot_traverse(PyObject *self, visitproc visit, void *arg) {
    HOT_OBJECTS(VISIT_HOT)
    return 0;
}
#undef VISIT_HOT

#define CLEAR_HOT(name) Py_CLEAR(((HotPath *)self)->name);
static int hot_clear(PyObject *self) {
    HOT_OBJECTS(CLEAR_HOT)
    return 0;
}
#undef CLEAR_HOT

static void hot_dealloc(PyObject *self) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    hot_clear(self);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    int kind;
    PyObject *torch_types, *prepared, *stream, *empty_like, *grad_enabled;
    static char *names[] = {"kind", "torch_types", "prepared", "stream", "empty_like",
                            "grad_enabled", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOOOOO", names, &kind, &torch_types,
                                     &prepared, &stream, &empty_like, &grad_enabled))
        return NULL;
    if (kind < 0 || kind >= HOT_KINDS) {
        PyErr_Format(PyExc_ValueError, "unknown hot-path kind %d", kind);
        return NULL;
    }
    if (!PyAnySet_Check(torch_types) || !PyDict_Check(prepared) || !PyCallable_Check(stream) ||
        !PyCallable_Check(empty_like) || !PyCallable_Check(grad_enabled)) {
        PyErr_SetString(PyExc_TypeError,
                        "torch_types must be a set, prepared a dict, the others callables");
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    HotPath *self = (HotPath *)alloc(type, 0);
    if (self == NULL) return NULL;
    self->kind = kind;
#define TAKE_HOT(name) self->name = Py_NewRef(name);
    HOT_OBJECTS(TAKE_HOT)
#undef TAKE_HOT
    return (PyObject *)self;
}

/* 1 when obj.name is `expected` (identity), 0 when not or on an error (cleared). */
static int attr_is(PyObject *obj, PyObject *name, PyObject *expected) {
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    int same = value == expected;
    Py_DECREF(value);
    return same;
}

/* 1 when obj.method() == expected, 0 when not or on an error (cleared). */
static int method_equals(PyObject *obj, PyObject *method, PyObject *expected) {
    PyObject *value = PyObject_CallMethodObjArgs(obj, method, NULL);
    if (value == NULL) {
        PyErr_Clear();
        return 0;
    }
    int equal = PyObject_RichCompareBool(value, expected, Py_EQ);
    Py_DECREF(value);
    if (equal < 0) PyErr_Clear();
    return equal == 1;
}

/* 1 when obj.shape == expected, 0 when not or on an error (cleared). */
static int shape_is(PyObject *obj, PyObject *expected) {
    PyObject *shape = PyObject_GetAttr(obj, s_shape);
    if (shape == NULL) {
        PyErr_Clear();
        return 0;
    }
    int equal = PyObject_RichCompareBool(shape, expected, Py_EQ);
    Py_DECREF(shape);
    if (equal < 0) PyErr_Clear();
    return equal == 1;
}

/* The entry prepared for the first tensor's (dtype, device index, shape), with its dtype, index
 * and shape, all new references (the entry's too: a call on another thread may clear the memo
 * while the launch has released the GIL), or NULL when none was prepared (no exception left
 * set). */
static PyObject *hot_entry(HotPath *self, PyObject *first, PyObject **dtype, PyObject **index,
                           PyObject **shape) {
    *dtype = PyObject_GetAttr(first, s_dtype);
    *index = *dtype ? PyObject_CallMethodObjArgs(first, s_get_device, NULL) : NULL;
    *shape = *index ? PyObject_GetAttr(first, s_shape) : NULL;
    PyObject *key = *shape ? PyTuple_Pack(3, *dtype, *index, *shape) : NULL;
    PyObject *entry = key ? PyDict_GetItemWithError(self->prepared, key) : NULL;
    Py_XDECREF(key);
    if (entry != NULL && (!PyTuple_Check(entry) || PyTuple_Size(entry) != ENTRY_ITEMS)) entry = NULL;
    if (entry == NULL) PyErr_Clear();
    return Py_XNewRef(entry);
}

/* Whether the call's tensors pass the hot path's checks (the first's are done by hot_entry's
 * lookup): each a torch tensor type, the first's dtype and device, C-contiguous, the shape the
 * entry says, none requiring grad while grad mode is on. */
static int hot_accepts(HotPath *self, const HotSpec *spec, PyObject *entry, PyObject *const *tensors,
                       int count, PyObject *dtype, PyObject *index, PyObject *shape) {
    PyObject *weight_shape = PyTuple_GetItem(entry, ENTRY_WEIGHT);
    PyObject *result_shape = PyTuple_GetItem(entry, ENTRY_RESULT);
    if (result_shape == Py_None) result_shape = shape;
    for (int i = 0; i < count; i++) {
        PyObject *tensor = tensors[i];
        if (i > 0) {
            PyObject *expected = i == spec->weight ? weight_shape
                                 : i >= spec->inputs ? result_shape
                                                     : shape;
            if (!attr_is(tensor, s_dtype, dtype) || !method_equals(tensor, s_get_device, index) ||
                !shape_is(tensor, expected))
                return 0;
        }
        if (!method_equals(tensor, s_is_contiguous, Py_True)) return 0;
    }
    PyObject *grad = PyObject_CallNoArgs(self->grad_enabled);
    if (grad == NULL) {
        PyErr_Clear();
        return 0;
    }
    int grad_mode = grad == Py_True;
    Py_DECREF(grad);
    for (int i = 0; grad_mode && i < count; i++) {
        if (!attr_is(tensors[i], s_requires_grad, Py_False)) return 0;
    }
    return 1;
}

/* A new result of the entry's shape, the first tensor's dtype and device. */
static PyObject *hot_result(HotPath *self, PyObject *entry, PyObject *first) {
    PyObject *result_shape = PyTuple_GetItem(entry, ENTRY_RESULT);
    if (result_shape == Py_None) return PyObject_CallFunctionObjArgs(self->empty_like, first, NULL);
    return PyObject_CallMethodObjArgs(first, s_new_empty, result_shape, NULL);
}

/* The entry's launch over the pointers, its sizes and eps, on the device's current stream;
 * 0, or -1 with the launch's exception set. */
static int hot_launch(HotPath *self, PyObject *entry, PyObject *const *pointers, int count,
                      PyObject *eps, PyObject *index) {
    PyObject *launch = PyTuple_GetItem(entry, ENTRY_LAUNCH);
    if (launch == Py_None) return 0;
    PyObject *sizes = PyTuple_GetItem(entry, ENTRY_SIZES);
    Py_ssize_t size_count = PyTuple_Size(sizes);
    if (size_count < 0 || 2 + count + size_count + 2 > HOT_MAX_ARGS) {
        PyErr_SetString(PyExc_ValueError, "a prepared launch with too many arguments");
        return -1;
    }
    PyObject *argv[HOT_MAX_ARGS];
    Py_ssize_t n = 0;
    argv[n++] = PyTuple_GetItem(entry, ENTRY_GRID);
    argv[n++] = PyTuple_GetItem(entry, ENTRY_BLOCK);
    for (int i = 0; i < count; i++) argv[n++] = pointers[i];
    for (Py_ssize_t i = 0; i < size_count; i++) argv[n++] = PyTuple_GetItem(sizes, i);
    if (eps != NULL) argv[n++] = eps;
    PyObject *stream = PyObject_CallFunctionObjArgs(self->stream, index, NULL);
    if (stream == NULL) return -1;
    PyObject *done;
    if (Py_TYPE(launch) == s_launcher_type) {
        argv[n] = stream; /* the keyword argument follows the positional ones */
        done = launcher_launch(launch, argv, n, s_stream_kwnames);
    } else {
        PyObject *positional = PyTuple_New(n);
        PyObject *keywords = PyDict_New();
        done = NULL;
        if (positional != NULL && keywords != NULL && PyDict_SetItem(keywords, s_stream, stream) == 0) {
            for (Py_ssize_t i = 0; i < n; i++) PyTuple_SetItem(positional, i, Py_NewRef(argv[i]));
            done = PyObject_Call(launch, positional, keywords);
        }
        Py_XDECREF(positional);
        Py_XDECREF(keywords);
    }
    Py_DECREF(stream);
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* call(*tensors, [eps], [out]): the op's result (None for fused_add_rms_norm, a pair for
 * add_rms_norm), or NotImplemented when the call is not for the hot path. */
static PyObject *hot_call(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    HotPath *self = (HotPath *)op;
    const HotSpec *spec = &hot_specs[self->kind];
    const Py_ssize_t expected = spec->inputs + spec->eps + spec->out;
    if (nargs != expected) {
        PyErr_Format(PyExc_TypeError, "call() takes %zd arguments (%zd given)", expected, nargs);
        return NULL;
    }
    PyObject *out = spec->out ? args[expected - 1] : Py_None;
    PyObject *eps = spec->eps ? args[spec->inputs] : NULL;
    PyObject *tensors[HOT_MAX_TENSORS];
    int count = 0;
    for (int i = 0; i < spec->inputs; i++) tensors[count++] = args[i];
    if (out != Py_None) tensors[count++] = out;
    for (int i = 0; i < count; i++) {
        if (PySet_Contains(self->torch_types, (PyObject *)Py_TYPE(tensors[i])) != 1) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    if (eps != NULL) {
        double value = PyFloat_CheckExact(eps) ? PyFloat_AsDouble(eps) : -1.0;
        if (!(value >= 0.0 && isfinite(value))) Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject *dtype, *index, *shape, *result = NULL;
    PyObject *entry = hot_entry(self, tensors[0], &dtype, &index, &shape);
    if (entry == NULL ||
        !hot_accepts(self, spec, entry, tensors, count, dtype, index, shape)) {
        result = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    PyObject *made[2] = {NULL, NULL};
    PyObject *pointers[HOT_MAX_TENSORS + 2];
    PyObject *addresses[HOT_MAX_TENSORS + 2] = {NULL};
    int pointer_count = 0;
    int allocated = out == Py_None ? spec->allocates : 0;
    for (int i = 0; i < allocated; i++) {
        if ((made[i] = hot_result(self, entry, tensors[0])) == NULL) goto failed;
    }
    /* The launch's pointers: the inputs, then the results (out=, the new ones, or, in place,
     * x and residual). */
    for (int i = 0; i < spec->inputs; i++) pointers[pointer_count++] = args[i];
    if (self->kind == HOT_FUSED_ADD_RMS_NORM) {
        pointers[pointer_count++] = args[0];
        pointers[pointer_count++] = args[1];
    } else if (allocated == 0) {
        pointers[pointer_count++] = out;
    } else {
        for (int i = 0; i < allocated; i++) pointers[pointer_count++] = made[i];
    }
    /* Their addresses, read once here: the launcher then takes plain ints (a tensor would cost
     * it a type lookup and an is_cuda read each, which the checks above made needless: every
     * tensor is on the entry's device, whose index is a GPU's). */
    for (int i = 0; i < pointer_count; i++) {
        if ((addresses[i] = PyObject_CallMethodObjArgs(pointers[i], s_data_ptr, NULL)) == NULL)
            goto failed;
    }
    if (hot_launch(self, entry, addresses, pointer_count, eps, index) < 0) goto failed;
    if (self->kind == HOT_FUSED_ADD_RMS_NORM) result = Py_NewRef(Py_None);
    else if (self->kind == HOT_ADD_RMS_NORM) result = PyTuple_Pack(2, made[0], made[1]);
    else result = Py_NewRef(allocated ? made[0] : out);
failed:
    for (int i = 0; i < pointer_count; i++) Py_XDECREF(addresses[i]);
    Py_XDECREF(made[0]);
    Py_XDECREF(made[1]);
done:
    Py_XDECREF(entry);
    Py_XDECREF(dtype);
    Py_XDECREF(index);
    Py_XDECREF(shape);
    return result;
}

static PyMethodDef hot_methods[] = {
    {"call", (PyCFunction)(void (*)(void))hot_call, METH_FASTCALL,
     "call(*tensors, [eps], [out]): check, allocate and launch; NotImplemented when the call "
     "is not for the hot path (the caller's full checks then run)"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot hot_slots[] = {
    {Py_tp_new, hot_new},
    {Py_tp_dealloc, hot_dealloc},
    {Py_tp_traverse, hot_traverse},
    {Py_tp_clear, hot_clear},
    {Py_tp_methods, hot_methods},
    {Py_tp_doc, "One MLP op's hot path for torch tensors: checks, allocation, launch in C."},
    {0, NULL},
};

static PyType_Spec hot_spec = {
    "kernelpack._launcher.TorchHotPath",
    sizeof(HotPath),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    hot_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_launcher", "Kernel launches checked and packed in C.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__launcher(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    PyObject *type = PyType_FromSpec(&launcher_spec);
    if (type == NULL || PyModule_AddObject(module, "Launcher", Py_NewRef(type)) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    s_launcher_type = (PyTypeObject *)type; /* kept for the module's life */
    PyObject *hot_type = PyType_FromSpec(&hot_spec);
    if (hot_type == NULL || PyModule_AddObject(module, "TorchHotPath", hot_type) < 0) {
        Py_XDECREF(hot_type);
        Py_DECREF(module);
        return NULL;
    }
#define INTERN(name) (s_##name = PyUnicode_InternFromString(#name))
    if (!INTERN(is_cuda) || !INTERN(data_ptr) || !INTERN(shared_mem) || !INTERN(stream) ||
        !INTERN(dtype) || !INTERN(shape) || !INTERN(get_device) || !INTERN(is_contiguous) ||
        !INTERN(requires_grad) || !INTERN(new_empty) ||
        !(s_stream_kwnames = PyTuple_Pack(1, s_stream)) ||
        PyModule_AddIntConstant(module, "ARGUMENT_ERROR", ARGUMENT_ERROR) < 0 ||
        PyModule_AddIntConstant(module, "MAX_PARAMS", MAX_PARAMS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#undef INTERN
    return module;
}
