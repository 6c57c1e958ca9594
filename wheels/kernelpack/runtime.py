"""The vendor runtimes, opened at run time through ctypes and never linked: CUDA's driver API
(libcuda.so.1) and HIP's module API (libamdhip64, ROCm 5 to 7), plus NVRTC and hipRTC for
compiling a module's source when no prebuilt image fits.

Everything that touches a vendor library sits here, so the rest of the loader is pure Python and
testable without a GPU. Modules are loaded into the device's primary context (CUDA) or on the
device (HIP), the same place PyTorch and CuPy put their memory and streams, so their pointers and
streams can be passed straight to a launch.

A launch goes through the C extension ``kernelpack._launcher`` when it was built (it checks and
packs the arguments and calls the launch function in one C call), else through ctypes; both keep
the caller's current context or device unchanged. docs/loader.md has the measurements.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from . import args as kargs
from . import arrays
from .errors import KernelpackError, RuntimeLibraryError

# Where each library is looked for, in order: sonames first (the dynamic linker's search: ldconfig,
# LD_LIBRARY_PATH), then the folders the vendors install to. HIP's soname carries the ROCm major.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "cuda": ("libcuda.so.1",),
    "hip": ("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"),
    "nvrtc": ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"),
    "hiprtc": ("libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"),
}

_HINTS: dict[str, str] = {
    "cuda": "install the NVIDIA driver (it provides libcuda.so.1)",
    "hip": "install ROCm's HIP runtime (libamdhip64) or add its lib folder to LD_LIBRARY_PATH",
    "nvrtc": "install NVRTC: pip install nvidia-cuda-nvrtc, or the CUDA toolkit",
    "hiprtc": "install ROCm's hipRTC (libhiprtc), or the ROCm runtime",
}


def _library_folders(kind: str) -> list[Path]:
    """Vendor install folders searched after the sonames (toolkits and pip's NVIDIA wheels)."""
    if kind in ("hip", "hiprtc"):
        rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
        return [Path(rocm) / "lib"]
    if kind == "nvrtc":
        folders = [
            Path(p) / "lib64"
            for p in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"))
            if p
        ]
        folders.append(Path("/usr/local/cuda/lib64"))
        for entry in sys.path:
            folders += [
                Path(entry) / "nvidia" / "cu13" / "lib",
                Path(entry) / "nvidia" / "cuda_nvrtc" / "lib",
            ]
        return folders
    return []


def open_library(kind: str, names: Sequence[str] | None = None) -> ctypes.CDLL:
    """The vendor library ``kind``, or a RuntimeLibraryError naming what was tried and what to do."""
    candidates = list(names if names is not None else LIBRARIES[kind])
    if names is None:
        candidates += [
            str(folder / name) for folder in _library_folders(kind) for name in LIBRARIES[kind]
        ]
    failures = []
    for name in candidates:
        if "/" in name and not Path(name).exists():
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as error:
            failures.append(f"{name} ({error})" if "/" in name else name)
    tried = ", ".join(failures) if failures else ", ".join(candidates)
    raise RuntimeLibraryError(f"{kind} runtime library not found (tried {tried}); {_HINTS[kind]}")


class _DlInfo(ctypes.Structure):
    _fields_ = (
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    )


def library_file(lib: ctypes.CDLL, symbol: str) -> str:
    """The file a library was loaded from, links resolved (libhiprtc.so.6 -> .../libhiprtc.so.6.4.43484):
    the full version, which the run-time compilers' own version calls do not all report."""
    info = _DlInfo()
    try:
        dladdr = ctypes.CDLL(None).dladdr
        found = dladdr(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p), ctypes.byref(info))
    except (AttributeError, OSError):
        found = 0
    if not found or not info.dli_fname:
        return str(getattr(lib, "_name", "?"))
    return os.path.realpath(str(info.dli_fname.decode(errors="replace")))


def _native_launcher() -> Any:
    """The C launcher class, or None where the extension was not built (the ctypes path runs)."""
    try:
        from ._launcher import Launcher
    except ImportError:
        return None
    return Launcher


class LoadedModule(NamedTuple):
    """A module loaded on one device: the runtime's handle and the ordinal it lives on."""

    handle: int
    ordinal: int


LaunchFn = Callable[..., None]  # launch(grid, block, *args, shared_mem=0, stream=None)
# fail(code, grid, block, args, shared_mem, stream): raises the error for a launch that did not
# happen (code -1: arguments, grid, block, shared memory or stream that do not fit) or failed
FailFn = Callable[[int, object, object, tuple[object, ...], object, object], None]


class Runtime:
    """What the loader needs from a vendor runtime. Subclasses bind CUDA and HIP."""

    vendor: str
    library: str
    binding: str  # "native" (the C extension) or "ctypes"

    def version(self) -> str:
        raise NotImplementedError

    def device_count(self) -> int:
        raise NotImplementedError

    def pci_bus_id(self, ordinal: int) -> str:
        raise NotImplementedError

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        raise NotImplementedError

    def function(self, module: LoadedModule, name: str) -> int:
        raise NotImplementedError

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        """Kernel.launch for one kernel: checks, packs and launches, or calls ``fail``."""
        raise NotImplementedError

    def error_name(self, code: int) -> str:
        raise NotImplementedError

    def ordinal_for(self, pci_bus_id: str | None, position: int) -> int:
        """The runtime's number for a detected GPU: matched by PCI address where detection knows
        it (the runtime may order devices differently), else its position among this vendor's."""
        if pci_bus_id:
            wanted = pci_bus_id.lower()
            for ordinal in range(self.device_count()):
                if self.pci_bus_id(ordinal).lower() == wanted:
                    return ordinal
        return position


def _c_string(value: bytes | None) -> str:
    return value.decode(errors="replace") if value else ""


# ---- CUDA --------------------------------------------------------------------------------------

# cuLaunchKernel and hipModuleLaunchKernel: function, grid x/y/z, block x/y/z, shared memory
# bytes, stream, kernelParams, extra
_CU_LAUNCH_TYPES: list[Any] = [
    ctypes.c_void_p,
    *[ctypes.c_uint] * 7,
    ctypes.c_void_p,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_void_p,
]
_CU_JIT_INPUT_PTX = 1
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class CudaRuntime(Runtime):
    """CUDA's driver API from libcuda.so.1, modules in each device's primary context."""

    vendor = "nvidia"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self._lib = lib if lib is not None else open_library("cuda")
        self.library = str(getattr(self._lib, "_name", "libcuda.so.1"))
        native = _native_launcher() if binding in (None, "native") else None
        if binding == "native" and native is None:
            raise RuntimeLibraryError("the C launcher kernelpack._launcher was not built")
        self._native = native
        self.binding = "native" if native is not None else "ctypes"
        self._lock = threading.Lock()
        self._contexts: dict[int, int] = {}
        lib_ = self._lib
        lib_.cuGetErrorName.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
        lib_.cuLaunchKernel.argtypes = _CU_LAUNCH_TYPES
        lib_.cuCtxPushCurrent_v2.argtypes = (ctypes.c_void_p,)
        lib_.cuModuleLoadData.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
        lib_.cuModuleGetFunction.argtypes = (
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            ctypes.c_char_p,
        )
        self._check(lib_.cuInit(0), "cuInit")

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self._lib.cuGetErrorName(code, ctypes.byref(name)) != 0:
            return f"CUDA error {code}"
        return f"{_c_string(name.value)} ({code})"

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeLibraryError(f"{call} failed: {self.error_name(code)}")

    def version(self) -> str:
        value = ctypes.c_int()
        self._check(self._lib.cuDriverGetVersion(ctypes.byref(value)), "cuDriverGetVersion")
        return f"{value.value // 1000}.{value.value % 1000 // 10}"

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check(self._lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        return count.value

    def _device(self, ordinal: int) -> int:
        device = ctypes.c_int()
        self._check(self._lib.cuDeviceGet(ctypes.byref(device), ordinal), f"cuDeviceGet({ordinal})")
        return device.value

    def pci_bus_id(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(32)
        self._check(
            self._lib.cuDeviceGetPCIBusId(text, 32, self._device(ordinal)), "cuDeviceGetPCIBusId"
        )
        return _c_string(text.value)

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        device, major, minor = self._device(ordinal), ctypes.c_int(), ctypes.c_int()
        for value, attribute in (
            (major, _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            (minor, _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        ):
            self._check(
                self._lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, device),
                "cuDeviceGetAttribute",
            )
        return major.value, minor.value

    def context(self, ordinal: int) -> int:
        """The device's primary context, retained once for the life of the process."""
        with self._lock:
            found = self._contexts.get(ordinal)
            if found is None:
                context = ctypes.c_void_p()
                self._check(
                    self._lib.cuDevicePrimaryCtxRetain(
                        ctypes.byref(context), self._device(ordinal)
                    ),
                    f"cuDevicePrimaryCtxRetain({ordinal})",
                )
                found = self._contexts[ordinal] = int(context.value or 0)
            return found

    def _in_context(self, ordinal: int, work: Callable[[], int], call: str) -> None:
        """Run ``work`` with the device's context pushed, leaving the caller's current one as it was."""
        self._check(self._lib.cuCtxPushCurrent_v2(self.context(ordinal)), "cuCtxPushCurrent")
        try:
            self._check(work(), call)
        finally:
            popped = ctypes.c_void_p()
            self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped))

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        handle = ctypes.c_void_p()
        self._in_context(
            ordinal,
            lambda: self._lib.cuModuleLoadData(ctypes.byref(handle), image),
            "cuModuleLoadData",
        )
        return LoadedModule(int(handle.value or 0), ordinal)

    def function(self, module: LoadedModule, name: str) -> int:
        handle = ctypes.c_void_p()
        self._check(
            self._lib.cuModuleGetFunction(ctypes.byref(handle), module.handle, name.encode()),
            f"cuModuleGetFunction({name})",
        )
        return int(handle.value or 0)

    def jit_ptx(self, ordinal: int, ptx: bytes) -> bytes:
        """PTX compiled by the driver into a cubin for this device (then cached on disk by the
        loader, so the 100+ ms driver compile happens once per machine, not once per process)."""
        lib, state = self._lib, ctypes.c_void_p()
        cubin, size = ctypes.c_void_p(), ctypes.c_size_t()
        log = ctypes.create_string_buffer(8192)
        options = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER, its size in bytes
        values = (ctypes.c_void_p * 2)(ctypes.addressof(log), len(log))
        data = ptx if ptx.endswith(b"\0") else ptx + b"\0"
        result: list[bytes] = []

        def link() -> int:
            code: int = lib.cuLinkCreate_v2(2, options, values, ctypes.byref(state))
            if code != 0:
                return code
            try:
                code = lib.cuLinkAddData_v2(
                    state,
                    _CU_JIT_INPUT_PTX,
                    data,
                    ctypes.c_size_t(len(data)),
                    b"module.ptx",
                    0,
                    None,
                    None,
                )
                if code == 0:
                    code = lib.cuLinkComplete(state, ctypes.byref(cubin), ctypes.byref(size))
                if code == 0:
                    result.append(ctypes.string_at(cubin.value or 0, size.value))
                return code
            finally:
                lib.cuLinkDestroy(state)

        try:
            self._in_context(ordinal, link, "PTX compile (cuLink)")
        except RuntimeLibraryError as error:
            raise RuntimeLibraryError(f"{error}: {_c_string(log.value)}") from None
        return result[0]

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        context = self.context(module.ordinal)
        lib = self._lib
        if self._native is not None:
            return _native_launch(
                self._native, lib.cuLaunchKernel, function, signature, fail, binding=1,
                get_current=lib.cuCtxGetCurrent, enter=lib.cuCtxPushCurrent_v2,
                leave=lib.cuCtxPopCurrent_v2, context=context,
            )  # fmt: skip
        return _ctypes_launcher(
            signature,
            lib.cuLaunchKernel,
            function,
            fail,
            lambda: _cuda_current(lib),
            context,
            lambda: lib.cuCtxPushCurrent_v2(context),
            lambda: lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())),
        )


def _cuda_current(lib: ctypes.CDLL) -> int:
    current = ctypes.c_void_p()
    lib.cuCtxGetCurrent(ctypes.byref(current))
    return current.value or 0


def _address(function: Any) -> int:
    return int(ctypes.cast(function, ctypes.c_void_p).value or 0)


def _native_launch(
    native: Any,
    launch: Any,
    function: int,
    signature: kargs.Signature,
    fail: FailFn,
    *,
    binding: int,
    get_current: Any,
    enter: Any,
    leave: Any,
    context: int,
) -> LaunchFn:
    """The C launcher's bound method: Kernel.launch with no Python frame of its own."""
    launcher = native(
        launch=_address(launch),
        function=function,
        codes=signature.codes,
        binding=binding,
        get_current=_address(get_current),
        enter=_address(enter),
        leave=_address(leave),
        context=context,
        pointer_getters=arrays.POINTER_GETTERS,
        pointer_of=arrays.pointer_of,
        torch_getter=arrays.torch_pointer,
        stream_of=arrays.stream_of,
        fail=fail,
    )
    return launcher.launch  # type: ignore[no-any-return]


def _ctypes_launcher(
    signature: kargs.Signature,
    launch: Any,
    function: int,
    fail: FailFn,
    current: Callable[[], int],
    wanted: int,
    enter: Callable[[], int],
    leave: Callable[[], object],
) -> LaunchFn:
    """The pure-Python launch: pack into a per-thread buffer, then one ctypes call.

    It behaves as the C launcher does: anything that does not fit, and any error the runtime
    returns, goes to ``fail``, which raises.
    """
    pack_into = struct.Struct(signature.struct_format).pack_into
    count = len(signature.types)
    pointers = signature.pointer_positions
    bools = signature.bool_positions
    pointer_of, stream_of, dims = arrays.pointer_of, arrays.stream_of, kargs.dims
    local = threading.local()
    function_handle = ctypes.c_void_p(function)

    def packed(args: tuple[object, ...], shared_mem: object, stream: object) -> Any:
        """(buffer pointers, stream handle), or None when something does not fit."""
        try:
            params = local.params
        except AttributeError:
            local.buffer = ctypes.create_string_buffer(max(count, 1) * kargs.SLOT)
            base = ctypes.addressof(local.buffer)
            params = local.params = (ctypes.c_void_p * max(count, 1))(
                *[base + kargs.SLOT * i for i in range(count)]
            )
        if len(args) != count or type(shared_mem) is not int or not 0 <= shared_mem < 2**32:
            return None
        values: Sequence[object] = args
        try:
            if any(type(args[p]) is not int for p in pointers):
                values = [pointer_of(a) if p in pointers and type(a) is not int else a
                          for p, a in enumerate(args)]  # fmt: skip
            if any(not isinstance(args[p], int) for p in bools):
                return None
            pack_into(local.buffer, 0, *values)
            handle = stream if type(stream) is int else stream_of(stream)
        except Exception:  # the fail path names the argument and raises what fits
            return None
        return params, handle

    def run(
        grid: object, block: object, *args: object, shared_mem: int = 0, stream: object = None
    ) -> None:
        ready = packed(args, shared_mem, stream)
        try:
            gx, gy, gz = dims(grid, "grid")
            bx, by, bz = dims(block, "block")
        except KernelpackError:
            ready = None
        if ready is None:
            return fail(-1, grid, block, args, shared_mem, stream)
        params, handle = ready
        call = (function_handle, gx, gy, gz, bx, by, bz, shared_mem, handle, params, None)
        if current() == wanted:
            code = int(launch(*call))
        else:
            code = enter()
            if not code:
                try:
                    code = int(launch(*call))
                finally:
                    leave()
        if code:
            fail(code, grid, block, args, shared_mem, stream)
        return None

    return run


# ---- HIP ---------------------------------------------------------------------------------------


class HipRuntime(Runtime):
    """HIP's module API from libamdhip64 (ROCm 5, 6 and 7 export the same calls used here)."""

    vendor = "amd"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self._lib = lib if lib is not None else open_library("hip")
        self.library = str(getattr(self._lib, "_name", "libamdhip64"))
        native = _native_launcher() if binding in (None, "native") else None
        if binding == "native" and native is None:
            raise RuntimeLibraryError("the C launcher kernelpack._launcher was not built")
        self._native = native
        self.binding = "native" if native is not None else "ctypes"
        lib_ = self._lib
        lib_.hipGetErrorName.restype = ctypes.c_char_p
        lib_.hipGetErrorName.argtypes = (ctypes.c_int,)
        lib_.hipModuleLaunchKernel.argtypes = _CU_LAUNCH_TYPES
        lib_.hipModuleLoadData.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
        lib_.hipModuleGetFunction.argtypes = (
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            ctypes.c_char_p,
        )
        self._lock = threading.Lock()
        self._check(lib_.hipInit(0), "hipInit")

    def error_name(self, code: int) -> str:
        return f"{_c_string(self._lib.hipGetErrorName(code)) or 'HIP error'} ({code})"

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeLibraryError(f"{call} failed: {self.error_name(code)}")

    def version(self) -> str:
        value = ctypes.c_int()
        self._check(self._lib.hipRuntimeGetVersion(ctypes.byref(value)), "hipRuntimeGetVersion")
        v = value.value  # major * 10_000_000 + minor * 100_000 + patch
        return f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check(self._lib.hipGetDeviceCount(ctypes.byref(count)), "hipGetDeviceCount")
        return count.value

    def pci_bus_id(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(32)
        self._check(self._lib.hipDeviceGetPCIBusId(text, 32, ordinal), "hipDeviceGetPCIBusId")
        return _c_string(text.value)

    def _on_device(self, ordinal: int, work: Callable[[], int], call: str) -> None:
        """Run ``work`` with ``ordinal`` current, then give the thread its device back."""
        lib, previous = self._lib, ctypes.c_int(-1)
        self._check(lib.hipGetDevice(ctypes.byref(previous)), "hipGetDevice")
        self._check(lib.hipSetDevice(ordinal), f"hipSetDevice({ordinal})")
        try:
            self._check(work(), call)
        finally:
            lib.hipSetDevice(previous.value)

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        handle = ctypes.c_void_p()
        with self._lock:
            self._on_device(
                ordinal,
                lambda: self._lib.hipModuleLoadData(ctypes.byref(handle), image),
                "hipModuleLoadData",
            )
        return LoadedModule(int(handle.value or 0), ordinal)

    def function(self, module: LoadedModule, name: str) -> int:
        handle = ctypes.c_void_p()
        self._check(
            self._lib.hipModuleGetFunction(ctypes.byref(handle), module.handle, name.encode()),
            f"hipModuleGetFunction({name})",
        )
        return int(handle.value or 0)

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        lib, ordinal = self._lib, module.ordinal
        if self._native is not None:
            return _native_launch(
                self._native, lib.hipModuleLaunchKernel, function, signature, fail, binding=2,
                get_current=lib.hipGetDevice, enter=lib.hipSetDevice, leave=lib.hipSetDevice,
                context=ordinal,
            )  # fmt: skip
        previous = threading.local()

        def current() -> int:
            device = ctypes.c_int(-1)
            lib.hipGetDevice(ctypes.byref(device))
            previous.device = device.value
            return device.value

        return _ctypes_launcher(
            signature,
            lib.hipModuleLaunchKernel,
            function,
            fail,
            current,
            ordinal,
            lambda: lib.hipSetDevice(ordinal),
            lambda: lib.hipSetDevice(previous.device),
        )


# ---- run-time compilers ------------------------------------------------------------------------


class SourceCompiler:
    """NVRTC or hipRTC: a module's CUDA source compiled for one GPU when no prebuilt image fits."""

    def __init__(self, kind: str, lib: ctypes.CDLL | None = None) -> None:
        self.kind = kind
        self._prefix = kind  # "nvrtc" / "hiprtc": the two APIs differ only in their prefix
        self._lib = lib if lib is not None else open_library(kind)
        self._fn("GetErrorString").restype = ctypes.c_char_p
        self._fn("GetErrorString").argtypes = (ctypes.c_int,)

    def _fn(self, name: str) -> Any:
        return getattr(self._lib, self._prefix + name)

    def _check(self, code: int, call: str, log: str = "") -> None:
        if code != 0:
            message = _c_string(self._fn("GetErrorString")(code))
            detail = f":\n{log.strip()}" if log.strip() else ""
            raise KernelpackError(f"{self.kind} {call} failed: {message} ({code}){detail}")

    def version(self) -> str:
        """ "nvrtc 13.0 (libnvrtc.so.13.0.88)": part of the disk cache's key for compiled images."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._fn("Version")(ctypes.byref(major), ctypes.byref(minor)), "Version")
        file = Path(library_file(self._lib, self._prefix + "Version")).name
        return f"{self.kind} {major.value}.{minor.value} ({file})"

    def compile(self, source: str, name: str, target: str) -> bytes:
        """A cubin (NVRTC, target sm_XY) or an AMDGPU code object (hipRTC, target gfx...)."""
        program = ctypes.c_void_p()
        self._check(
            self._fn("CreateProgram")(
                ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None
            ),
            "CreateProgram",
        )
        try:
            arch = (
                f"--gpu-architecture={target}"
                if self.kind == "nvrtc"
                else f"--offload-arch={target}"
            )
            options = [arch.encode(), b"-std=c++17"]
            code = self._fn("CompileProgram")(
                program, len(options), (ctypes.c_char_p * len(options))(*options)
            )
            log_size = ctypes.c_size_t()
            self._fn("GetProgramLogSize")(program, ctypes.byref(log_size))
            log = ctypes.create_string_buffer(max(log_size.value, 1))
            self._fn("GetProgramLog")(program, log)
            self._check(code, f"compile of {name} for {target}", _c_string(log.value))
            get_size, get = (
                ("GetCUBINSize", "GetCUBIN") if self.kind == "nvrtc" else ("GetCodeSize", "GetCode")
            )
            size = ctypes.c_size_t()
            self._check(self._fn(get_size)(program, ctypes.byref(size)), get_size)
            output = ctypes.create_string_buffer(size.value)
            self._check(self._fn(get)(program, output), get)
            return output.raw
        finally:
            self._fn("DestroyProgram")(ctypes.byref(program))


def open_runtime(vendor: str) -> Runtime:
    """The runtime for a vendor's GPUs ("nvidia" or "amd")."""
    return CudaRuntime() if vendor == "nvidia" else HipRuntime()


def open_compiler(vendor: str) -> SourceCompiler:
    return SourceCompiler("nvrtc" if vendor == "nvidia" else "hiprtc")


def library_versions() -> dict[str, str]:
    """Each vendor library's version, or "not found", without initialising any GPU (for
    ``kernelpack info``: what a user reports when asking why nothing loads)."""
    found: dict[str, str] = {}
    for kind in LIBRARIES:
        try:
            lib = open_library(kind)
        except RuntimeLibraryError:
            found[kind] = "not found"
            continue
        symbol = {"cuda": "cuDriverGetVersion", "hip": "hipRuntimeGetVersion"}.get(
            kind, kind + "Version"
        )
        name = library_file(lib, symbol)
        value, minor = ctypes.c_int(), ctypes.c_int()
        if kind == "cuda":
            code = lib.cuDriverGetVersion(ctypes.byref(value))
            text = f"{value.value // 1000}.{value.value % 1000 // 10}"
        elif kind == "hip":
            code = lib.hipRuntimeGetVersion(ctypes.byref(value))
            v = value.value
            text = f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"
        else:
            code = getattr(lib, kind + "Version")(ctypes.byref(value), ctypes.byref(minor))
            text = f"{value.value}.{minor.value}"
        found[kind] = f"{text} ({name})" if code == 0 else f"error {code} ({name})"
    return found
