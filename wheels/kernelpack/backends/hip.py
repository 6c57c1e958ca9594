"""HIP's module API (libamdhip64, ROCm 5 to 7), the runtime the loader uses on AMD GPUs.

The same calls as CUDA's driver API under other names (hipModuleLoadData, hipModuleLaunchKernel),
with the device made current around each call and given back after, as PyTorch and CuPy expect.

This launch path has run on no AMD GPU anywhere: no AMD hardware was available to the project.
What runs without one is tested for real (tests/test_loader_rocm.py: every symbol bound here
resolves in ROCm's libamdhip64, hipInit reports "no device" as a clear error, hipRTC compiles a
module into a code object the readers check, and the launcher packs arguments byte for byte).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..devices.libraries import c_string, hip_version_text, int_out, open_library
from ..errors import RuntimeLibraryError
from . import launch as launching
from .runtime import Runtime, load_module, module_function

if TYPE_CHECKING:
    from . import signature as kargs
    from .runtime import FailFn, LaunchFn, LoadedModule

# hipDeviceAttributeMultiprocessorCount in hip_runtime_api.h's hipDeviceAttribute_t (ROCm 5 to 7)
_HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 63


class HipRuntime(Runtime):
    """HIP's module API from libamdhip64 (ROCm 5, 6 and 7 export the same calls used here)."""

    vendor = "amd"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self._lib = lib if lib is not None else open_library("hip")
        self.library = str(getattr(self._lib, "_name", "libamdhip64"))
        self._native, self.binding = launching.choose_launcher(binding)
        lib_ = self._lib
        lib_.hipGetErrorName.restype = ctypes.c_char_p
        lib_.hipGetErrorName.argtypes = (ctypes.c_int,)
        launching.declare_module_calls(
            lib_.hipModuleLoadData, lib_.hipModuleGetFunction, lib_.hipModuleLaunchKernel
        )
        self._lock = threading.Lock()
        self._check(lib_.hipInit(0), "hipInit")

    def error_name(self, code: int) -> str:
        return f"{c_string(self._lib.hipGetErrorName(code)) or 'HIP error'} ({code})"

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeLibraryError(f"{call} failed: {self.error_name(code)}")

    def version(self) -> str:
        return hip_version_text(int_out(self._check, self._lib.hipRuntimeGetVersion))

    def device_count(self) -> int:
        return int_out(self._check, self._lib.hipGetDeviceCount)

    def pci_bus_id(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(32)
        self._check(self._lib.hipDeviceGetPCIBusId(text, 32, ordinal), "hipDeviceGetPCIBusId")
        return c_string(text.value)

    def multiprocessor_count(self, ordinal: int) -> int:
        count = ctypes.c_int()
        status = self._lib.hipDeviceGetAttribute(
            ctypes.byref(count), _HIP_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ordinal
        )
        self._check(status, "hipDeviceGetAttribute(hipDeviceAttributeMultiprocessorCount)")
        return count.value

    def _on_device(self, ordinal: int, work: Callable[[], int], call: str) -> None:
        """Run ``work`` with ``ordinal`` current, then give the thread its device back."""
        lib = self._lib
        previous = int_out(self._check, lib.hipGetDevice)
        self._check(lib.hipSetDevice(ordinal), f"hipSetDevice({ordinal})")
        try:
            self._check(work(), call)
        finally:
            lib.hipSetDevice(previous)

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        with self._lock:
            return load_module(self._on_device, self._lib.hipModuleLoadData, ordinal, image)

    def function(self, module: LoadedModule, name: str) -> int:
        return module_function(self._check, self._lib.hipModuleGetFunction, module, name)

    def launcher(
        self, module: LoadedModule, function: int, signature: kargs.Signature, fail: FailFn
    ) -> LaunchFn:
        lib, ordinal = self._lib, module.ordinal
        if self._native is not None:
            binding = launching.DeviceBinding(
                2, lib.hipGetDevice, lib.hipSetDevice, lib.hipSetDevice, ordinal
            )
            launch = lib.hipModuleLaunchKernel
            return launching.native_launch(self._native, launch, function, signature, fail, binding)
        previous = threading.local()

        def current() -> int:
            device = ctypes.c_int(-1)
            lib.hipGetDevice(ctypes.byref(device))
            previous.device = device.value
            return device.value

        return launching.ctypes_launcher(
            signature,
            lib.hipModuleLaunchKernel,
            function,
            fail,
            current,
            ordinal,
            lambda: lib.hipSetDevice(ordinal),
            lambda: lib.hipSetDevice(previous.device),
        )
