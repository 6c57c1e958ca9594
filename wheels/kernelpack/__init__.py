"""kernelpack: GPU kernels written once in CUDA, shipped for AMD and NVIDIA GPUs.

``import kernelpack`` stays cheap: it loads no vendor library and reads no device file until a
module is asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import FormatError, KernelpackError, NoImageError, RuntimeLibraryError, UsageError

if TYPE_CHECKING:
    from .loader import Kernel, Module, load

__all__ = [
    "FormatError",
    "Kernel",
    "KernelpackError",
    "Module",
    "NoImageError",
    "RuntimeLibraryError",
    "UsageError",
    "load",
]

_LAZY = {"load", "Module", "Kernel"}  # from .loader, imported on first use


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'kernelpack' has no attribute {name!r}")
