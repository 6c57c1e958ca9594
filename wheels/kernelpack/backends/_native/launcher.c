/* kernelpack.backends._launcher: the per-launch hot path in C, on the CPython limited API (3.11+).
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
 * TorchHotPath is one op's hot path for torch tensors in one C call: the checks of the
 * tensors (type, dtype, device, contiguity, requires_grad, shapes, eps), the allocation of the
 * results and the launch, as the op's descriptor (HotSpec) lays out its arguments (no op is known
 * here: a product builds the descriptors from its op table, kernelpack/backends/hotpath.py), reading the tensors and allocating through DLPack's C exchange API,
 * which torch publishes (dlpack_exchange.h). It describes no problem either: anything it does
 * not accept returns NotImplemented, and the caller's full checks then name what is wrong (or
 * launch, and prepare the shape so that its next call is accepted here).
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

#include "dlpack_exchange.h"

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
static PyObject *s_dtype, *s_shape, *s_get_device, *s_requires_grad;
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

/* tp_dealloc of this file's heap types: untracked, references dropped by `clear`, freed, and
 * the type's own reference released. */
static void dealloc_with(PyObject *self, inquiry clear) {
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    freefunc free_slot = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_slot(self);
    Py_DECREF(type);
}

static void launcher_dealloc(PyObject *self) { dealloc_with(self, launcher_clear); }

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
    "kernelpack.backends._launcher.Launcher",
    sizeof(Launcher),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    launcher_slots,
};

/* ---- the torch hot path ----------------------------------------------------------------------
 * A product's ops on torch tensors, checked, allocated and launched in one call: the checks its
 * full path makes, made here on what DLPack's C exchange API (dlpack_exchange.h) reports of each
 * tensor, with no call into Python between them. Where this extension was not built, or torch
 * does not publish the exchange API, there is no hot path: every call takes the full checks. */

/* An op's arguments as its hot call takes them, given by the product (kernelpack.backends.hotpath's
 * HotOp, made from the op's table): its tensor inputs, then eps when it has one, then out= when it
 * takes one. shapes[i] says which shape input i must have: 'f' the first input's, 'w' the entry's
 * weight shape; out= and the results take the entry's result shape. `allocates` results are made
 * when out= is None; the inputs listed in `in_place` are written as the results instead (their
 * pointers follow the inputs'), and the call returns None. */
typedef struct {
    int inputs, eps, out, allocates, in_place_count;
    double default_eps;
    char shapes[8];
    int in_place[4];
} HotSpec;

#define HOT_MAX_TENSORS 5
#define HOT_MAX_RESULTS 4
#define HOT_MAX_ARGS 16
#define HOT_MAX_DIMS 8  /* tensors of more dimensions take the full checks */
#define HOT_SLOTS 4     /* the shapes a hot call remembers; older ones are looked up again */

/* A prepared entry: (launch, grid, block, sizes, weight shape, result shape, alignment, general
 * launch and grid). launch is a Launcher (called here directly), another callable
 * (launch(grid, block, *args, stream=)) or None (no elements: nothing to launch); sizes the
 * values the kernel takes after the tensors' pointers (null pointers the hot path leaves
 * out, then the sizes); the weight shape None where the op has no weight; the result shape None where it is the
 * first input's; alignment the bytes every pointer must be aligned to (an exact elementwise form's
 * vector, else 1): a call short of it is not for the hot path. The general launch and its grid,
 * for those calls, are the Python side's (kernelpack/backends/hotpath.py). */
enum {
    ENTRY_LAUNCH,
    ENTRY_GRID,
    ENTRY_BLOCK,
    ENTRY_SIZES,
    ENTRY_WEIGHT,
    ENTRY_RESULT,
    ENTRY_ALIGNMENT,
    ENTRY_GENERAL,
    ENTRY_ITEMS
};

typedef struct {
    int ndim;
    int64_t sizes[HOT_MAX_DIMS];
} HotShape;

/* An entry found for a first tensor's DLPack dtype, device and shape, with the shapes the other
 * tensors must have, as C integers: the memo's lookup (a key of torch objects, read through
 * Python) is made once for each, not on every call. */
typedef struct {
    PyObject *entry; /* NULL: an empty slot */
    kp_dl_dtype dtype;
    kp_dl_device device;
    HotShape first, weight, result;
    unsigned long long alignment; /* a power of two */
} HotSlot;

typedef struct {
    PyObject_HEAD
    HotSpec spec;
    PyObject *torch_types;  /* set: the tensor types accepted (torch.Tensor, nn.Parameter) */
    PyObject *prepared;     /* dict: (torch dtype, device index, torch.Size) -> entry */
    PyObject *exchange;     /* the capsule of torch's DLPack exchange API */
    PyObject *grad_enabled; /* torch.is_grad_enabled, or None below autograd (never read) */
    PyObject *default_eps;  /* eps where a call leaves it out (a float) */
    const kp_dl_exchange_api *api;
    int next_slot;
    HotSlot slots[HOT_SLOTS];
} HotPath;

#define HOT_OBJECTS(X) X(torch_types) X(prepared) X(exchange) X(grad_enabled) X(default_eps)

#define VISIT_HOT(name) Py_VISIT(((HotPath *)self)->name);
static int hot_traverse(PyObject *self, visitproc visit, void *arg) {
    HOT_OBJECTS(VISIT_HOT)
    for (int i = 0; i < HOT_SLOTS; i++) Py_VISIT(((HotPath *)self)->slots[i].entry);
    return 0;
}
#undef VISIT_HOT

#define CLEAR_HOT(name) Py_CLEAR(((HotPath *)self)->name);
static int hot_clear(PyObject *self) {
    HOT_OBJECTS(CLEAR_HOT)
    for (int i = 0; i < HOT_SLOTS; i++) Py_CLEAR(((HotPath *)self)->slots[i].entry);
    return 0;
}
#undef CLEAR_HOT

static void hot_dealloc(PyObject *self) { dealloc_with(self, hot_clear); }

/* The op's HotSpec from its descriptor (inputs, shapes, eps, out, allocates, in_place,
 * default_eps); 0, or -1
 * with ValueError or TypeError set. */
static int read_hot_spec(PyObject *op, HotSpec *spec) {
    const char *shapes;
    Py_ssize_t shape_count;
    int eps, out;
    PyObject *in_place;
    memset(spec, 0, sizeof *spec);
    if (!PyTuple_Check(op) ||
        !PyArg_ParseTuple(op, "is#ppiOd", &spec->inputs, &shapes, &shape_count, &eps, &out,
                          &spec->allocates, &in_place, &spec->default_eps))
        return -1;
    spec->eps = eps;
    spec->out = out;
    Py_ssize_t count = PyTuple_Check(in_place) ? PyTuple_Size(in_place) : -1;
    int tensors = spec->inputs + spec->out;
    if (spec->inputs < 1 || tensors > HOT_MAX_TENSORS || shape_count != spec->inputs ||
        spec->allocates < 0 || spec->allocates > HOT_MAX_RESULTS || count < 0 ||
        count > (Py_ssize_t)(sizeof spec->in_place / sizeof spec->in_place[0]) ||
        (count && (spec->allocates || spec->out))) {
        PyErr_SetString(PyExc_ValueError, "a hot op descriptor out of the launcher's bounds");
        return -1;
    }
    memcpy(spec->shapes, shapes, (size_t)shape_count);
    for (Py_ssize_t i = 0; i < shape_count; i++) {
        if (shapes[i] != 'f' && shapes[i] != 'w') {
            PyErr_Format(PyExc_ValueError, "unknown shape code %c", shapes[i]);
            return -1;
        }
    }
    spec->in_place_count = (int)count;
    for (Py_ssize_t i = 0; i < count; i++) {
        long index = PyLong_AsLong(PyTuple_GetItem(in_place, i));
        if (index < 0 || index >= spec->inputs) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "an in-place result that is not an input");
            return -1;
        }
        spec->in_place[i] = (int)index;
    }
    return 0;
}

static PyObject *hot_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    PyObject *op, *torch_types, *prepared, *exchange, *grad_enabled;
    HotSpec spec;
    static char *names[] = {"op", "torch_types", "prepared", "exchange", "grad_enabled", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO", names, &op, &torch_types, &prepared,
                                     &exchange, &grad_enabled))
        return NULL;
    if (read_hot_spec(op, &spec) < 0) return NULL;
    if (!PyAnySet_Check(torch_types) || !PyDict_Check(prepared) ||
        !(grad_enabled == Py_None || PyCallable_Check(grad_enabled))) {
        PyErr_SetString(PyExc_TypeError, "torch_types must be a set, prepared a dict, "
                                         "grad_enabled a callable or None");
        return NULL;
    }
    const kp_dl_exchange_api *api = PyCapsule_GetPointer(exchange, KP_DL_EXCHANGE_CAPSULE);
    if (api == NULL) return NULL;
    if (api->header.version.major != KP_DL_MAJOR || api->allocate == NULL ||
        api->managed_to_object == NULL || api->view_from_object == NULL ||
        api->current_stream == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "a DLPack exchange API of version %u.%u without the functions this needs",
                     api->header.version.major, api->header.version.minor);
        return NULL;
    }
    PyObject *default_eps = PyFloat_FromDouble(spec.default_eps);
    if (default_eps == NULL) return NULL;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    HotPath *self = (HotPath *)alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(default_eps);
        return NULL;
    }
    self->spec = spec;
    self->api = api;
#define TAKE_HOT(name) self->name = Py_NewRef(name);
    HOT_OBJECTS(TAKE_HOT)
#undef TAKE_HOT
    Py_DECREF(default_eps); /* the object holds its own reference */
    return (PyObject *)self;
}

static int same_dtype(kp_dl_dtype a, kp_dl_dtype b) {
    return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

static int same_device(kp_dl_device a, kp_dl_device b) { return a.type == b.type && a.id == b.id; }

static int shape_is(const kp_dl_tensor *tensor, const HotShape *shape) {
    if (tensor->ndim != shape->ndim) return 0;
    for (int d = 0; d < shape->ndim; d++) {
        if (tensor->shape[d] != shape->sizes[d]) return 0;
    }
    return 1;
}

/* torch's is_contiguous(): no elements, or row-major strides over the dimensions longer than 1
 * (DLPack's NULL strides mean row-major). */
static int contiguous(const kp_dl_tensor *tensor) {
    if (tensor->strides == NULL) return 1;
    for (int d = 0; d < tensor->ndim; d++) {
        if (tensor->shape[d] == 0) return 1;
    }
    int64_t expected = 1;
    for (int d = tensor->ndim - 1; d >= 0; d--) {
        if (tensor->shape[d] == 1) continue;
        if (tensor->strides[d] != expected) return 0;
        expected *= tensor->shape[d];
    }
    return 1;
}

/* A shape of the entry's (a tuple of ints, or None for `otherwise`) as C integers; 0, or -1 when
 * it is none (no exception left set). */
static int read_shape(PyObject *value, const HotShape *otherwise, HotShape *out) {
    if (value == Py_None) {
        *out = *otherwise;
        return 0;
    }
    Py_ssize_t ndim = PyTuple_Check(value) ? PyTuple_Size(value) : -1;
    if (ndim < 0 || ndim > HOT_MAX_DIMS) return -1;
    out->ndim = (int)ndim;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        long long size;
        if (read_i64(PyTuple_GetItem(value, d), &size)) return -1;
        out->sizes[d] = size;
    }
    return 0;
}

/* The slot of the entry prepared for the first tensor's dtype, device and shape: one remembered,
 * or else the memo's entry (keyed by the tensor's torch dtype, device index and torch.Size) put
 * into the next slot. NULL when none was prepared (no exception left set). */
static HotSlot *hot_slot(HotPath *self, PyObject *first, const kp_dl_tensor *view) {
    if (view->ndim > HOT_MAX_DIMS) return NULL;
    for (int i = 0; i < HOT_SLOTS; i++) {
        HotSlot *slot = &self->slots[i];
        if (slot->entry != NULL && same_dtype(slot->dtype, view->dtype) &&
            same_device(slot->device, view->device) && shape_is(view, &slot->first))
            return slot;
    }
    PyObject *dtype = PyObject_GetAttr(first, s_dtype);
    PyObject *index = dtype ? PyObject_CallMethodObjArgs(first, s_get_device, NULL) : NULL;
    PyObject *shape = index ? PyObject_GetAttr(first, s_shape) : NULL;
    PyObject *key = shape ? PyTuple_Pack(3, dtype, index, shape) : NULL;
    PyObject *entry = key ? Py_XNewRef(PyDict_GetItemWithError(self->prepared, key)) : NULL;
    Py_XDECREF(dtype);
    Py_XDECREF(index);
    Py_XDECREF(shape);
    Py_XDECREF(key);
    HotSlot found = {.entry = entry, .dtype = view->dtype, .device = view->device};
    found.first.ndim = view->ndim;
    memcpy(found.first.sizes, view->shape, sizeof(int64_t) * (size_t)view->ndim);
    if (entry == NULL || !PyTuple_Check(entry) || PyTuple_Size(entry) != ENTRY_ITEMS ||
        read_shape(PyTuple_GetItem(entry, ENTRY_WEIGHT), &found.first, &found.weight) ||
        read_shape(PyTuple_GetItem(entry, ENTRY_RESULT), &found.first, &found.result) ||
        read_u64(PyTuple_GetItem(entry, ENTRY_ALIGNMENT), &found.alignment) ||
        found.alignment == 0 || (found.alignment & (found.alignment - 1))) {
        PyErr_Clear();
        Py_XDECREF(entry);
        return NULL;
    }
    HotSlot *slot = &self->slots[self->next_slot];
    self->next_slot = (self->next_slot + 1) % HOT_SLOTS;
    PyObject *replaced = slot->entry;
    *slot = found; /* takes the entry's reference */
    Py_XDECREF(replaced);
    return slot;
}

/* Whether the call's tensors pass the hot path's checks (the first's dtype, device and shape were
 * the slot's lookup): the first's dtype and device, the shape the slot says, C-contiguous, none
 * requiring grad while grad mode is on. */
static int hot_accepts(HotPath *self, const HotSpec *spec, const HotSlot *slot,
                       PyObject *const *tensors, const kp_dl_tensor *views, int count) {
    for (int i = 0; i < count; i++) {
        const kp_dl_tensor *view = &views[i];
        const HotShape *expected = i >= spec->inputs        ? &slot->result
                                   : spec->shapes[i] == 'w' ? &slot->weight
                                                            : &slot->first;
        if (!same_dtype(view->dtype, slot->dtype) || !same_device(view->device, slot->device) ||
            !shape_is(view, expected) || !contiguous(view))
            return 0;
    }
    if (self->grad_enabled == Py_None) return 1;
    PyObject *grad = PyObject_CallNoArgs(self->grad_enabled);
    if (grad == NULL) {
        PyErr_Clear();
        return 0;
    }
    int grad_mode = grad == Py_True;
    Py_DECREF(grad);
    for (int i = 0; grad_mode && i < count; i++) {
        PyObject *wants = PyObject_GetAttr(tensors[i], s_requires_grad);
        int refused = wants != Py_False;
        Py_XDECREF(wants);
        if (refused) {
            PyErr_Clear();
            return 0;
        }
    }
    return 1;
}

static void allocation_failed(void *context, const char *kind, const char *message) {
    (void)context, (void)kind, (void)message; /* the full path allocates again, and raises */
}

/* A new C-contiguous tensor of the slot's result shape, dtype and device (torch's allocator,
 * through the exchange API), with its address, which is also or-ed into *bits; NULL (no
 * exception left set) when torch could not make it: the call then leaves the hot path, whose
 * allocation raises torch's own error. */
static PyObject *hot_result(HotPath *self, const HotSlot *slot, PyObject **address,
                            uintptr_t *bits) {
    kp_dl_tensor prototype = {
        .device = slot->device,
        .ndim = slot->result.ndim,
        .dtype = slot->dtype,
        .shape = (int64_t *)slot->result.sizes,
    };
    kp_dl_managed *made = NULL;
    void *tensor = NULL;
    if (self->api->allocate(&prototype, &made, NULL, allocation_failed) != 0 || made == NULL)
        return NULL;
    uintptr_t data = (uintptr_t)made->tensor.data + (uintptr_t)made->tensor.byte_offset;
    *bits |= data;
    if (self->api->managed_to_object(made, &tensor) != 0) {
        PyErr_Clear();
        return NULL;
    }
    if ((*address = PyLong_FromUnsignedLongLong(data)) == NULL) {
        PyErr_Clear();
        Py_DECREF((PyObject *)tensor);
        return NULL;
    }
    return (PyObject *)tensor;
}

/* The entry's launch over the addresses, its sizes and eps, on the stream; 0, or -1 with the
 * launch's exception set. */
static int hot_launch(PyObject *entry, PyObject *const *addresses, int count, PyObject *eps,
                      PyObject *stream) {
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
    for (int i = 0; i < count; i++) argv[n++] = addresses[i];
    for (Py_ssize_t i = 0; i < size_count; i++) argv[n++] = PyTuple_GetItem(sizes, i);
    if (eps != NULL) argv[n++] = eps;
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
    if (done == NULL) return -1;
    Py_DECREF(done);
    return 0;
}

/* call(*tensors, [eps], [out]), eps and out= optional: the op's result (out=, the one made, a tuple of those made, or None
 * in place), or NotImplemented when the call is not for the hot path. */
static PyObject *hot_call(PyObject *op, PyObject *const *args, Py_ssize_t nargs) {
    HotPath *self = (HotPath *)op;
    const HotSpec *spec = &self->spec;
    const Py_ssize_t most = spec->inputs + spec->eps + spec->out;
    if (nargs < spec->inputs || nargs > most) {
        PyErr_Format(PyExc_TypeError, "call() takes %d to %zd arguments (%zd given)", spec->inputs,
                     most, nargs);
        return NULL;
    }
    /* trailing arguments left out take their defaults: eps the descriptor's, out= None */
    PyObject *out = spec->out && nargs == most ? args[most - 1] : Py_None;
    PyObject *eps = !spec->eps ? NULL : nargs > spec->inputs ? args[spec->inputs] : self->default_eps;
    PyObject *tensors[HOT_MAX_TENSORS];
    kp_dl_tensor views[HOT_MAX_TENSORS];
    int count = 0;
    for (int i = 0; i < spec->inputs; i++) tensors[count++] = args[i];
    if (out != Py_None) tensors[count++] = out;
    for (int i = 0; i < count; i++) {
        if (PySet_Contains(self->torch_types, (PyObject *)Py_TYPE(tensors[i])) != 1 ||
            self->api->view_from_object(tensors[i], &views[i]) != 0) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    if (eps != NULL) {
        double value = PyFloat_CheckExact(eps) ? PyFloat_AsDouble(eps) : -1.0;
        if (!(value >= 0.0 && isfinite(value))) Py_RETURN_NOTIMPLEMENTED;
    }
    const HotSlot *found = hot_slot(self, tensors[0], &views[0]);
    if (found == NULL || !hot_accepts(self, spec, found, tensors, views, count))
        Py_RETURN_NOTIMPLEMENTED;
    /* A copy, and a reference to its entry: what runs from here on (an allocation's garbage
     * collection, another thread while the launch has released the GIL) may reuse the slot. */
    const HotSlot slot = *found;
    void *raw_stream = NULL;
    if (self->api->current_stream(slot.device.type, slot.device.id, &raw_stream) != 0) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    /* The launch's pointers: the inputs, then the results (out=, the new ones, or, in place,
     * x and residual). The views' addresses are read before anything is allocated; all of them
     * or-ed together (bits) must have the entry's alignment. */
    uintptr_t bits = 0;
    for (int i = 0; i < count; i++)
        bits |= (uintptr_t)views[i].data + (uintptr_t)views[i].byte_offset;
    if (bits % slot.alignment) Py_RETURN_NOTIMPLEMENTED;
    PyObject *entry = Py_NewRef(slot.entry);
    PyObject *addresses[HOT_MAX_TENSORS + HOT_MAX_RESULTS] = {NULL};
    PyObject *made[HOT_MAX_RESULTS] = {NULL};
    PyObject *stream = NULL, *result = NULL;
    int pointer_count = 0;
    for (int i = 0; i < count; i++) {
        uintptr_t data = (uintptr_t)views[i].data + (uintptr_t)views[i].byte_offset;
        if ((addresses[pointer_count++] = PyLong_FromUnsignedLongLong(data)) == NULL) goto failed;
    }
    for (int i = 0; i < spec->in_place_count; i++)
        addresses[pointer_count++] = Py_NewRef(addresses[spec->in_place[i]]);
    int allocated = out == Py_None ? spec->allocates : 0;
    for (int i = 0; i < allocated; i++) {
        if ((made[i] = hot_result(self, &slot, &addresses[pointer_count], &bits)) == NULL) {
            result = Py_NewRef(Py_NotImplemented);
            goto failed;
        }
        pointer_count++;
    }
    if (bits % slot.alignment) { /* never on CUDA, whose allocator gives 512-byte blocks */
        result = Py_NewRef(Py_NotImplemented);
        goto failed;
    }
    if ((stream = PyLong_FromVoidPtr(raw_stream)) == NULL) goto failed;
    if (hot_launch(entry, addresses, pointer_count, eps, stream) < 0) goto failed;
    if (allocated > 1) {
        if ((result = PyTuple_New(allocated)) == NULL) goto failed;
        for (int i = 0; i < allocated; i++) PyTuple_SetItem(result, i, Py_NewRef(made[i]));
    } else {
        result = Py_NewRef(allocated ? made[0] : out);
    }
failed:
    for (int i = 0; i < pointer_count; i++) Py_XDECREF(addresses[i]);
    for (int i = 0; i < HOT_MAX_RESULTS; i++) Py_XDECREF(made[i]);
    Py_XDECREF(stream);
    Py_DECREF(entry);
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
    "kernelpack.backends._launcher.TorchHotPath",
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
        !INTERN(dtype) || !INTERN(shape) || !INTERN(get_device) || !INTERN(requires_grad) ||
        !(s_stream_kwnames = PyTuple_Pack(1, s_stream)) ||
        PyModule_AddIntConstant(module, "ARGUMENT_ERROR", ARGUMENT_ERROR) < 0 ||
        PyModule_AddIntConstant(module, "MAX_PARAMS", MAX_PARAMS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#undef INTERN
    return module;
}
