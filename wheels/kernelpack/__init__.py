"""kernelpack: GPU kernels written once in CUDA, shipped for AMD and NVIDIA GPUs.

``import kernelpack`` stays cheap: it loads no vendor library and reads no device file until a
module is asked for.
"""

from __future__ import annotations

from .errors import FormatError, KernelpackError, NoImageError, RuntimeLibraryError, UsageError

__all__ = [
    "FormatError",
    "KernelpackError",
    "NoImageError",
    "RuntimeLibraryError",
    "UsageError",
]
