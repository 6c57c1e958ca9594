"""What the installed vendor runtimes are and can load: their versions, asked once per process.

:func:`library_versions` opens each vendor library and reads its version without starting a GPU
(``kernelpack info``); :func:`runtime_versions` keeps the answer for the process.

Generic AMD images are code object v6, which the HIP runtime loads from ROCm 6.2 on; the loader
passes :func:`amd_code_object_v6` to :func:`kernelpack.targets.select_image` so that an older
runtime gets a specific image or run-time compilation instead of a generic image it would refuse.
``kernelpack doctor`` reports the same facts.
"""

from __future__ import annotations

import ctypes
import functools

from ..devices.cuda_driver import CudaDriver
from ..devices.libraries import (
    LIBRARIES,
    hip_version_text,
    library_file,
    open_library,
)
from ..errors import RuntimeLibraryError
from ..targets import runs_code_object_v6


@functools.cache
def runtime_versions() -> dict[str, str]:
    """Each vendor library's version text ("6.4.43484 (/opt/rocm/lib/libamdhip64.so.6)", or
    "not found"), read once: kernelpack.backends.support.library_versions opens the libraries."""
    return library_versions()


def hip_version() -> str | None:
    """The HIP runtime's version ("6.4.43484"), None when no HIP runtime is found."""
    text = runtime_versions().get("hip", "not found")
    if text == "not found" or text.startswith("error"):
        return None
    return text.split()[0]


def amd_code_object_v6() -> bool | None:
    """Whether the HIP runtime here loads code object v6 (generic images); None when no HIP
    runtime is found or its version does not parse (nothing is then known to rule them out)."""
    version = hip_version()
    return None if version is None else runs_code_object_v6(version)


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
