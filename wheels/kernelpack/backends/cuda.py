"""CUDA's driver API (libcuda.so.1), bound once: the GPUs it numbers, and the runtime the loader uses.

:class:`CudaDriver` is the ctypes binding of libcuda itself (argument types, error names, device
queries); detection lists NVIDIA GPUs through it (:func:`cuda_driver_devices`), the test suite asks
it whether a GPU is there, and :class:`CudaRuntime` loads modules and launches kernels through it.
Modules live in each device's primary context, where PyTorch and CuPy put their memory and streams.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import launching
from .errors import RuntimeLibraryError
from .libraries import cuda_version_text, open_library
from .runtime import (
    Runtime,
    c_string,
    capping_shared_mem,
    int_out,
    load_module,
    module_function,
)

if TYPE_CHECKING:
    from . import args as kargs
    from .detect import NvidiaDevice
    from .runtime import FailFn, LaunchFn, LoadedModule

_CU_JIT_INPUT_PTX = 1
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CudaDriver:
    """libcuda.so.1 through ctypes: every call kernelpack makes into it is declared here.

    Opening it does not initialise CUDA; :meth:`init` does (cuInit), and device queries need it.
    """

    def __init__(self, lib: ctypes.CDLL | None = None) -> None:
        self.lib: Any = lib if lib is not None else open_library("cuda")
        lib_ = self.lib
        lib_.cuGetErrorName.argtypes = (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p))
        lib_.cuCtxPushCurrent_v2.argtypes = (ctypes.c_void_p,)
        lib_.cuFuncGetAttribute.argtypes = (
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_int,
            ctypes.c_void_p,
        )
        lib_.cuFuncSetAttribute.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_int)
        lib_.cuOccupancyMaxActiveBlocksPerMultiprocessor.argtypes = (
            ctypes.POINTER(ctypes.c_int),
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_size_t,
        )
        launching.declare_module_calls(
            lib_.cuModuleLoadData, lib_.cuModuleGetFunction, lib_.cuLaunchKernel
        )

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(name)) != 0:
            return f"CUDA error {code}"
        return f"{c_string(name.value)} ({code})"

    def check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeLibraryError(f"{call} failed: {self.error_name(code)}")

    def init(self) -> int:
        """cuInit's status: 0, or why this process cannot use CUDA (no device, no kernel driver)."""
        return int(self.lib.cuInit(0))

    def version(self) -> str:
        """The driver's CUDA version, "13.0" (needs no cuInit)."""
        return cuda_version_text(int_out(self.check, self.lib.cuDriverGetVersion))

    def device_count(self) -> int:
        return int_out(self.check, self.lib.cuDeviceGetCount)

    def device(self, ordinal: int) -> int:
        return int_out(self.check, self.lib.cuDeviceGet, ordinal)

    def pci_bus_id(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(64)
        self.check(
            self.lib.cuDeviceGetPCIBusId(text, len(text), self.device(ordinal)),
            "cuDeviceGetPCIBusId",
        )
        return c_string(text.value)

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        major = self.attribute(ordinal, _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = self.attribute(ordinal, _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        return major, minor

    def attribute(self, ordinal: int, attribute: int) -> int:
        """cuDeviceGetAttribute of the device ``ordinal``."""
        return int_out(self.check, self.lib.cuDeviceGetAttribute, attribute, self.device(ordinal))

    def name(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(256)
        self.check(
            self.lib.cuDeviceGetName(text, len(text), self.device(ordinal)), "cuDeviceGetName"
        )
        return c_string(text.value)

    def uuid(self, ordinal: int) -> str:
        """GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as nvidia-smi and NVML spell it."""
        get_uuid = getattr(self.lib, "cuDeviceGetUuid_v2", None) or self.lib.cuDeviceGetUuid
        raw = (ctypes.c_ubyte * 16)()
        self.check(get_uuid(raw, self.device(ordinal)), "cuDeviceGetUuid")
        digits = bytes(raw).hex()
        spans = ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
        return "GPU-" + "-".join(digits[a:b] for a, b in spans)


def cuda_driver_devices() -> list[NvidiaDevice] | None:
    """The GPUs the CUDA driver numbers for this process; None without libcuda, [] when cuInit
    fails (no device, no kernel driver, a stub library): the driver then runs nothing here."""
    from .detect import NvidiaDevice, normalise_bus_id

    try:
        driver = CudaDriver()
    except RuntimeLibraryError:
        return None
    if driver.init() != 0:
        return []
    devices = []
    for ordinal in range(driver.device_count()):
        major, minor = driver.compute_capability(ordinal)
        devices.append(
            NvidiaDevice(
                name=driver.name(ordinal),
                major=major,
                minor=minor,
                location=normalise_bus_id(driver.pci_bus_id(ordinal)),
                uuid=driver.uuid(ordinal),
                source="cuda",
            )
        )
    return devices


class CudaRuntime(Runtime):
    """CUDA's driver API from libcuda.so.1, modules in each device's primary context."""

    vendor = "nvidia"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self.driver = CudaDriver(lib)
        self._lib = self.driver.lib
        self.library = str(getattr(self._lib, "_name", "libcuda.so.1"))
        self._native, self.binding = launching.choose_launcher(binding)
        self._lock = threading.Lock()
        self._contexts: dict[int, int] = {}
        self.driver.check(self.driver.init(), "cuInit")

    def error_name(self, code: int) -> str:
        return self.driver.error_name(code)

    def version(self) -> str:
        return self.driver.version()

    def device_count(self) -> int:
        return self.driver.device_count()

    def pci_bus_id(self, ordinal: int) -> str:
        return self.driver.pci_bus_id(ordinal)

    def compute_capability(self, ordinal: int) -> tuple[int, int]:
        return self.driver.compute_capability(ordinal)

    def context(self, ordinal: int) -> int:
        """The device's primary context, retained once for the life of the process."""
        with self._lock:
            found = self._contexts.get(ordinal)
            if found is None:
                context = ctypes.c_void_p()
                self.driver.check(
                    self._lib.cuDevicePrimaryCtxRetain(
                        ctypes.byref(context), self.driver.device(ordinal)
                    ),
                    f"cuDevicePrimaryCtxRetain({ordinal})",
                )
                found = self._contexts[ordinal] = int(context.value or 0)
            return found

    def _in_context(self, ordinal: int, work: Callable[[], int], call: str) -> None:
        """Run ``work`` with the device's context pushed, leaving the caller's current one as it was."""
        self.driver.check(self._lib.cuCtxPushCurrent_v2(self.context(ordinal)), "cuCtxPushCurrent")
        try:
            self.driver.check(work(), call)
        finally:
            popped = ctypes.c_void_p()
            self._lib.cuCtxPopCurrent_v2(ctypes.byref(popped))

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        return load_module(self._in_context, self._lib.cuModuleLoadData, ordinal, image)

    def function(self, module: LoadedModule, name: str) -> int:
        return module_function(self.driver.check, self._lib.cuModuleGetFunction, module, name)

    def shared_mem_for_blocks(
        self, module: LoadedModule, function: int, threads: int, blocks: int
    ) -> int:
        """The driver's occupancy calculator (cuOccupancyMaxActiveBlocksPerMultiprocessor) asked
        for the least dynamic shared memory that holds ``function`` to ``blocks`` blocks of
        ``threads`` a multiprocessor; the function is first allowed the most a block may have
        (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: past 48 KB a launch must opt in)."""
        driver, lib, ordinal = self.driver, self._lib, module.ordinal
        shared: list[int] = []

        def function_attribute(attribute: int) -> int:
            return int_out(driver.check, lib.cuFuncGetAttribute, attribute, function)

        def resident(dynamic: int) -> int:
            return int_out(
                driver.check,
                lib.cuOccupancyMaxActiveBlocksPerMultiprocessor,
                function,
                threads,
                dynamic,
            )

        def cap() -> int:
            static = function_attribute(_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
            most = driver.attribute(ordinal, _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            most -= static
            code: int = lib.cuFuncSetAttribute(
                function, _CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, most
            )
            if code == 0:
                shared.append(
                    capping_shared_mem(
                        resident,
                        blocks,
                        driver.attribute(
                            ordinal, _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
                        ),
                        driver.attribute(
                            ordinal, _CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK
                        ),
                        static,
                        most,
                    )
                )
            return code

        self._in_context(ordinal, cap, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        return shared[0]

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
            raise RuntimeLibraryError(f"{error}: {c_string(log.value)}") from None
        return result[0]

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        context = self.context(module.ordinal)
        lib = self._lib
        if self._native is not None:
            push, pop = lib.cuCtxPushCurrent_v2, lib.cuCtxPopCurrent_v2
            binding = launching.DeviceBinding(1, lib.cuCtxGetCurrent, push, pop, context)
            return launching.native_launch(
                self._native, lib.cuLaunchKernel, function, signature, fail, binding
            )
        return launching.ctypes_launcher(
            signature,
            lib.cuLaunchKernel,
            function,
            fail,
            lambda: _current_context(lib),
            context,
            lambda: lib.cuCtxPushCurrent_v2(context),
            lambda: lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())),
        )


def _current_context(lib: ctypes.CDLL) -> int:
    current = ctypes.c_void_p()
    lib.cuCtxGetCurrent(ctypes.byref(current))
    return current.value or 0
