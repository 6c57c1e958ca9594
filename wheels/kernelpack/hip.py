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

from .errors import RuntimeLibraryError
from .launching import LAUNCH_ARGTYPES, ctypes_launcher, native_launch, native_launcher_class
from .libraries import hip_version_text, open_library
from .runtime import FailFn, LaunchFn, LoadedModule, Runtime, c_string

if TYPE_CHECKING:
    from . import args as kargs


class HipRuntime(Runtime):
    """HIP's module API from libamdhip64 (ROCm 5, 6 and 7 export the same calls used here)."""

    vendor = "amd"

    def __init__(self, lib: ctypes.CDLL | None = None, *, binding: str | None = None) -> None:
        self._lib = lib if lib is not None else open_library("hip")
        self.library = str(getattr(self._lib, "_name", "libamdhip64"))
        native = native_launcher_class() if binding in (None, "native") else None
        if binding == "native" and native is None:
            raise RuntimeLibraryError("the C launcher kernelpack._launcher was not built")
        self._native = native
        self.binding = "native" if native is not None else "ctypes"
        lib_ = self._lib
        lib_.hipGetErrorName.restype = ctypes.c_char_p
        lib_.hipGetErrorName.argtypes = (ctypes.c_int,)
        lib_.hipModuleLaunchKernel.argtypes = LAUNCH_ARGTYPES
        lib_.hipModuleLoadData.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p)
        lib_.hipModuleGetFunction.argtypes = (
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_void_p,
            ctypes.c_char_p,
        )
        self._lock = threading.Lock()
        self._check(lib_.hipInit(0), "hipInit")

    def error_name(self, code: int) -> str:
        return f"{c_string(self._lib.hipGetErrorName(code)) or 'HIP error'} ({code})"

    def _check(self, code: int, call: str) -> None:
        if code != 0:
            raise RuntimeLibraryError(f"{call} failed: {self.error_name(code)}")

    def version(self) -> str:
        value = ctypes.c_int()
        self._check(self._lib.hipRuntimeGetVersion(ctypes.byref(value)), "hipRuntimeGetVersion")
        return hip_version_text(value.value)

    def device_count(self) -> int:
        count = ctypes.c_int()
        self._check(self._lib.hipGetDeviceCount(ctypes.byref(count)), "hipGetDeviceCount")
        return count.value

    def pci_bus_id(self, ordinal: int) -> str:
        text = ctypes.create_string_buffer(32)
        self._check(self._lib.hipDeviceGetPCIBusId(text, 32, ordinal), "hipDeviceGetPCIBusId")
        return c_string(text.value)

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
            return native_launch(
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

        return ctypes_launcher(
            signature,
            lib.hipModuleLaunchKernel,
            function,
            fail,
            current,
            ordinal,
            lambda: lib.hipSetDevice(ordinal),
            lambda: lib.hipSetDevice(previous.device),
        )
