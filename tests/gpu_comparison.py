"""Build and run one of the tests' CUDA comparison programs (not a test module).

Each program (hipify_compat_gpu.cu, hipify_wmma_gpu.cu) compiles a kernelpack header for NVIDIA
under another name, compares it with CUDA's own on the GPU and prints one line per comparison:
`name tried=N mismatches=M [...]`, exiting 1 on any mismatch.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

_LINE_RE = re.compile(r"^(?P<name>.+?) tried=(?P<tried>\d+) mismatches=(?P<bad>\d+)", re.MULTILINE)


def run_comparison(program: Path, scratch: Path) -> dict[str, tuple[int, int]]:
    """{name: (tried, mismatches)} of ``program`` built with nvcc for this machine's GPU."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is not on PATH (the nvcc marker says this test needs it)")
    binary = scratch / program.stem
    build = subprocess.run(
        [nvcc, "-std=c++17", "-O2", "-arch=native", str(program), "-o", str(binary)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    print(run.stdout)
    assert run.returncode in (0, 1), run.stdout[-2000:] + run.stderr[-2000:]
    return {m["name"]: (int(m["tried"]), int(m["bad"])) for m in _LINE_RE.finditer(run.stdout)}
