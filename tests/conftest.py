"""Shared fixtures: the provisioned AMD toolchain and the GPU gate.

Tests marked ``toolchain`` get the AMD compiler through the same provisioning a user gets
(buildsys.toolchain); tests marked ``gpu`` are skipped where no GPU can be used, and those marked
``nvcc`` where NVIDIA's compiler is not installed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain


@functools.cache
def gpu_available() -> bool:
    """True when the CUDA driver loads and reports a device (the GPU tests run on an NVIDIA GPU),
    asked through kernelpack's own binding of libcuda."""
    from kernelpack.cuda import cuda_driver_devices

    return bool(cuda_driver_devices())


@functools.cache
def nvcc_available() -> bool:
    """True when the CUDA toolkit's nvcc is installed (tests marked ``nvcc`` compile with it)."""
    from buildsys.toolchain import cuda_toolchain

    return cuda_toolchain() is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gates = {
        "gpu": (gpu_available, "no GPU on this machine (libcuda absent or no device)"),
        "nvcc": (nvcc_available, "no nvcc on this machine (install the CUDA toolkit)"),
    }
    for marker, (available, reason) in gates.items():
        marked = [item for item in items if marker in item.keywords]
        if marked and not available():
            for item in marked:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def amd_toolchain() -> Toolchain:
    """The AMD HIP toolchain, provisioned on first use exactly as `buildsys toolchain --provision`."""
    from buildsys.toolchain import amd_toolchain

    return amd_toolchain(provision=True)
