"""kernelpack: GPU kernels written once in CUDA, shipped for AMD and NVIDIA GPUs.

``import kernelpack`` stays cheap: it loads no vendor library and reads no device file until a
module is asked for. ``kernelpack.load(module, device=None)`` gives a :class:`Module`, whose
``kernel(name)`` gives a :class:`Kernel` to launch (``kernelpack.Device`` is the type of the
``device`` argument); ``package="<import name>"`` loads a module of
any other kernelpack-built package the same way (docs/your-kernels.md); every failure is a :class:`KernelpackError`
subclass (kernelpack.errors). ``kernelpack.__version__`` is the installed distribution's version.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    CompileError,
    FormatError,
    IntegrityError,
    KernelpackError,
    NoImageError,
    RuntimeLibraryError,
    UsageError,
)

if TYPE_CHECKING:
    from .devices.argument import Device
    from .loader.load import load
    from .loader.module import Kernel, Module

__all__ = [
    "CompileError",
    "Device",
    "FormatError",
    "IntegrityError",
    "Kernel",
    "KernelpackError",
    "Module",
    "NoImageError",
    "RuntimeLibraryError",
    "UsageError",
    "load",
]

# Imported on first use, so that `import kernelpack` does not import the loader.
_LAZY = {
    "load": "loader.load",
    "Module": "loader.module",
    "Kernel": "loader.module",
    "Device": "devices.argument",  # the type of load's device argument, for packages' own load
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name == "__version__":  # read when asked: the installed metadata, or the built index
        return importlib.import_module(".loader.catalog", __name__).runtime_version()
    raise AttributeError(f"module 'kernelpack' has no attribute {name!r}")
