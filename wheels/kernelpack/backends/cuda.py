"""CUDA's driver API (libcuda.so.1) as the loader's runtime: modules loaded, kernels launched.

:class:`CudaRuntime` works through :class:`kernelpack.devices.cuda_driver.CudaDriver`, the one ctypes
binding of libcuda (detection and the test suite use it too), and declares the module calls it adds.
Modules live in each device's primary context, where PyTorch and CuPy put their memory and streams.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..devices.cuda_driver import (
    _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
    _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
    _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    _CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK,
    CudaDriver,
)
from ..devices.libraries import c_string, int_out
from ..errors import RuntimeLibraryError
from . import launch as launching
from .runtime import Runtime, capping_shared_mem, load_module, module_function

if TYPE_CHECKING:
    from . import signature as kargs
    from .runtime import FailFn, LaunchFn, LoadedModule

_CU_JIT_INPUT_PTX = 1
_CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1
_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class CudaRuntime(Runtime):
    """CUDA's driver API from libcuda.so.1, modules in each device's primary context."""

    vendor = "nvidia"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self.driver = CudaDriver(lib)
        self._lib = self.driver.lib
        launching.declare_module_calls(
            self._lib.cuModuleLoadData, self._lib.cuModuleGetFunction, self._lib.cuLaunchKernel
        )
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

    def multiprocessor_count(self, ordinal: int) -> int:
        return self.driver.attribute(ordinal, _CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)

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
