"""Finding the vendor libraries: libcuda, libamdhip64, NVRTC and hipRTC, opened through ctypes.

Nothing is linked: each library is looked for by its sonames first (the dynamic linker's search:
ldconfig, LD_LIBRARY_PATH), then in the folders the vendors install to, and a missing one is a
RuntimeLibraryError that lists what was tried and what to install.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import RuntimeLibraryError

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
        if kind == "cuda":
            from .cuda import CudaDriver

            try:
                found[kind] = f"{CudaDriver(lib).version()} ({name})"
            except RuntimeLibraryError as error:
                found[kind] = f"{error} ({name})"
            continue
        value, minor = ctypes.c_int(), ctypes.c_int()
        if kind == "hip":
            code = lib.hipRuntimeGetVersion(ctypes.byref(value))
            text = hip_version_text(value.value)
        else:
            code = getattr(lib, kind + "Version")(ctypes.byref(value), ctypes.byref(minor))
            text = f"{value.value}.{minor.value}"
        found[kind] = f"{text} ({name})" if code == 0 else f"error {code} ({name})"
    return found
