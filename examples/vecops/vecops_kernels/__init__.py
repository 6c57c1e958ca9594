"""vecops-kernels: element-wise and AXPY GPU kernels, built and loaded by kernelpack.

``load("elementwise")`` or ``load("axpy")`` gives the module loaded on the first GPU (``device=``
picks another) from the image that fits it, checked against its sha256.
"""

from __future__ import annotations

import kernelpack
from kernelpack import Device


def load(module: str, device: Device = None) -> kernelpack.Module:
    """This package's kernel module on a GPU (kernelpack.load does the work)."""
    return kernelpack.load(module, device, package=__name__)
