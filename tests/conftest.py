"""Shared fixtures: the provisioned AMD toolchain and the GPU gate.

Tests marked ``toolchain`` get the AMD compiler through the same provisioning a user gets
(buildsys.toolchain); tests marked ``gpu`` are skipped where no GPU can be used.
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no GPU on this machine (libcuda absent or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def amd_toolchain() -> Toolchain:
    """The AMD HIP toolchain, provisioned on first use exactly as `buildsys toolchain --provision`."""
    from buildsys.toolchain import amd_toolchain

    return amd_toolchain(provision=True)
