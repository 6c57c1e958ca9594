"""Shared fixtures: the provisioned AMD toolchain and the GPU gate.

Tests marked ``toolchain`` get the AMD compiler through the same provisioning a user gets
(buildsys.toolchain); tests marked ``gpu`` are skipped where no GPU can be used, and those marked
``nvcc`` where NVIDIA's compiler is not installed, and those marked ``amd_emulator`` where
KERNELPACK_AMD_EMULATOR is unset.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain


@functools.cache
def gpu_available() -> bool:
    """True when the CUDA driver loads and reports a device (the GPU tests run on an NVIDIA GPU),
    asked through kernelpack's own binding of libcuda."""
    from kernelpack.devices.detect import cuda_driver_devices

    return bool(cuda_driver_devices())


@functools.cache
def nvcc_available() -> bool:
    """True when the CUDA toolkit's nvcc is installed (tests marked ``nvcc`` compile with it)."""
    from buildsys.toolchain import cuda_toolchain

    return cuda_toolchain() is not None


def amd_emulator_named() -> bool:
    """True when KERNELPACK_AMD_EMULATOR names a folder; one that is no emulator checkout fails
    the tests marked ``amd_emulator`` with the emulator's message, never skips them."""
    return bool(os.environ.get("KERNELPACK_AMD_EMULATOR", "").strip())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gates = {
        "gpu": (gpu_available, "no GPU on this machine (libcuda absent or no device)"),
        "nvcc": (nvcc_available, "no nvcc on this machine (install the CUDA toolkit)"),
        "amd_emulator": (
            amd_emulator_named,
            "KERNELPACK_AMD_EMULATOR is not set (a checkout of tinygrad's repository: docs/amd.md)",
        ),
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
