"""Finding the vendor libraries: libcuda, libamdhip64, NVRTC and hipRTC, opened through ctypes.

Nothing is linked: each library is looked for by its sonames first (the dynamic linker's search:
ldconfig, LD_LIBRARY_PATH), then in the folders the vendors install to, and a missing one is a
RuntimeLibraryError that lists what was tried and what to install.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import RuntimeLibraryError

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


def cuda_version_text(value: int) -> str:
    """cuDriverGetVersion's number as text: 13000 -> "13.0"."""
    return f"{value // 1000}.{value % 1000 // 10}"


def hip_version_text(value: int) -> str:
    """hipRuntimeGetVersion's number (major * 10_000_000 + minor * 100_000 + patch) as text."""
    return f"{value // 10_000_000}.{value // 100_000 % 100}.{value % 100_000}"


def c_string(value: bytes | None) -> str:
    """A C string from a vendor library as text ("" for NULL)."""
    return value.decode(errors="replace") if value else ""


CheckFn = Callable[[int, str], None]  # check(status, call): raises for a status other than 0


def int_out(check: CheckFn, function: Any, *args: object) -> int:
    """The C int a vendor call writes through its first argument (``cuDeviceGetCount(&count)``),
    after ``check`` has seen the call's status and the call as made ("cuDeviceGet(1)")."""
    value = ctypes.c_int()
    call = f"{function.__name__}({', '.join(map(str, args))})" if args else function.__name__
    check(function(ctypes.byref(value), *args), call)
    return value.value
