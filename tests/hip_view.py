"""A pytest plugin (``-p hip_view``) for GPU tests run in the HIP view of tests/hip_shim.py, which
starts them: torch reports a ROCm build, and the shim's counts are written out at the end.

``torch.version.hip`` is what a ROCm build of torch sets and what kernelpack reads to name torch's
GPUs "hip:N" (torch calls them "cuda" on both vendors); the view sets it before any test runs, as
such a build would have it. With KERNELPACK_HIP_VIEW_REPORT set, the session writes there, as
JSON, the kernelpack package it imported and the shim's launches and module loads by HIP device,
so that the test that started it can tell that the HIP path served the tests.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import pytest

HIP_VERSION = "7.0.0"  # the version the shim reports through hipRuntimeGetVersion
DEVICES_REPORTED = 4


def pytest_configure(config: pytest.Config) -> None:
    import torch

    # torch's CUDA build reads torch.version.hip while it initialises (which devices are visible,
    # whether to check its cubins): initialise it as the CUDA build it is, then report ROCm.
    torch.cuda.init()
    torch.version.hip = HIP_VERSION


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    report = os.environ.get("KERNELPACK_HIP_VIEW_REPORT")
    if not report:
        return
    import kernelpack

    shim = ctypes.CDLL(os.environ["KERNELPACK_HIP_SHIM"])  # the instance kernelpack opened
    counts = {}
    for name in ("launches", "loads"):
        count = getattr(shim, f"hip_over_cuda_{name}")
        count.restype = ctypes.c_longlong
        counts[name] = [int(count(device)) for device in range(DEVICES_REPORTED)]
    Path(report).write_text(json.dumps({"package": kernelpack.__file__, **counts}), "utf-8")
