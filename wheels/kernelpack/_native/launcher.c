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

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_launcher", "Kernel launches checked and packed in C.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__launcher(void) {
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) return NULL;
    PyObject *type = PyType_FromSpec(&launcher_spec);
    if (type == NULL || PyModule_AddObject(module, "Launcher", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(module);
        return NULL;
    }
    s_is_cuda = PyUnicode_InternFromString("is_cuda");
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_shared_mem = PyUnicode_InternFromString("shared_mem");
    s_stream = PyUnicode_InternFromString("stream");
    if (!s_is_cuda || !s_data_ptr || !s_shared_mem || !s_stream ||
        PyModule_AddIntConstant(module, "ARGUMENT_ERROR", ARGUMENT_ERROR) < 0 ||
        PyModule_AddIntConstant(module, "MAX_PARAMS", MAX_PARAMS) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
