"""The compat header's 16-bit PTX idioms against the PTX instructions on an NVIDIA GPU, bit for
bit (tests/hipify_ptx_gpu.cu: every 32-bit and every 16-bit pattern)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from buildsys.hipify import COMPAT_DIR

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

PROGRAM = Path(__file__).with_name("hipify_ptx_gpu.cu")


def test_ptx_idioms_equal_the_instructions(tmp_path: Path) -> None:
    binary = tmp_path / "ptx_gpu"
    argv = ["nvcc", "-std=c++17", "-O2", "-arch=sm_90", "-DKERNELPACK_COMPAT_RENAME"]
    argv += ["-I", str(COMPAT_DIR), str(PROGRAM), "-o", str(binary)]
    subprocess.run(argv, check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=False)
    print(run.stdout)
    assert run.returncode == 0, run.stdout + run.stderr
