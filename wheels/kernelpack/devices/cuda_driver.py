"""libcuda.so.1 bound through ctypes: the driver's answers about the devices it numbers.

Detection lists NVIDIA GPUs through it (:func:`kernelpack.devices.detect.cuda_driver_devices`), the
test suite asks it whether a GPU is there, and :class:`kernelpack.backends.cuda.CudaRuntime` loads
modules and launches kernels through it. Opening it loads libcuda; only :meth:`CudaDriver.init`
starts CUDA.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ..errors import RuntimeLibraryError
from .libraries import c_string, cuda_version_text, int_out, open_library

_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
_CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111


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
