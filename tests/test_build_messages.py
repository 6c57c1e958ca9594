"""A failed compile names each file as the project does (``kernel_sources/axpy/axpy.cu:6:12``),
never the build's scratch copy, its folder or hipcc's echo of its clang command (issue 50,
smaller): the compilers run in a tree the build writes into a scratch folder, so left alone they
name ``axpy.hip:6:12`` and ``../include/x.cuh``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildsys import REPO_ROOT
from buildsys.build import shown_path
from buildsys.findings import explaining, parse_findings
from buildsys.hipify.compat import COMPAT_DIR
from buildsys.messages import with_project_paths
from buildsys.settings import BuildSettings

SCRATCH = Path("/home/u/.cache/kernelpack/build/.scratch/a1b2/hip")


def _shown(tree_path: str) -> str:
    """The expectation written out: the project's sources folder is ``kernel_sources``."""
    return (
        "kernel_sources/"
        + tree_path.removesuffix(".hip")
        + (".cu" if tree_path.endswith(".hip") else "")
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            "axpy.hip:6:12: error: expected expression",
            "kernel_sources/axpy/axpy.cu:6:12: error: expected expression",
        ),
        (
            'axpy.cu(6): error: expected an expression\n1 error detected in the compilation of "axpy.cu".',
            "kernel_sources/axpy/axpy.cu(6): error: expected an expression\n"
            '1 error detected in the compilation of "kernel_sources/axpy/axpy.cu".',
        ),
        (
            "In file included from norm.hip:3:\n../include/vecops_math.cuh:4:1: error: x",
            "In file included from kernel_sources/dot/norm.cu:3:\n"
            "kernel_sources/include/vecops_math.cuh:4:1: error: x",
        ),
        (
            f"{SCRATCH}/axpy/axpy.hip:2:1: error: y\n"
            "failed to execute:/usr/lib/llvm-21/bin/clang++ --offload-arch=gfx942 -I ../include "
            'axpy.hip -o "axpy.gfx942.co"\n',
            "kernel_sources/axpy/axpy.cu:2:1: error: y",
        ),
        (  # outside the tree: as the compiler gave it
            "/usr/lib/llvm-21/lib/clang/21/include/__clang_hip_runtime_wrapper.h:23:35: note: m\n"
            "../../outside.h:1:1: error: z",
            "/usr/lib/llvm-21/lib/clang/21/include/__clang_hip_runtime_wrapper.h:23:35: note: m\n"
            "../../outside.h:1:1: error: z",
        ),
    ],
    ids=["clang", "nvcc", "include", "absolute-and-hipcc-echo", "outside"],
)
def test_compiler_paths_become_the_projects(raw: str, expected: str) -> None:
    module = "dot" if "norm" in raw else "axpy"
    assert with_project_paths(raw, module, _shown, SCRATCH) == expected


def test_shown_paths_are_the_projects_the_include_folders_and_the_builders(
    tmp_path: Path,
) -> None:
    vendored = tmp_path / "third_party" / "include"
    elsewhere = tmp_path.parent / "shared-headers"
    settings = BuildSettings(project=tmp_path, sources=tmp_path / "kernel_sources")
    folders = [vendored, elsewhere]
    assert shown_path(settings, folders, "axpy/axpy.hip") == "kernel_sources/axpy/axpy.cu"
    assert shown_path(settings, folders, "include/m.cuh") == "kernel_sources/include/m.cuh"
    assert shown_path(settings, folders, ".include/0/a/b.h") == "third_party/include/a/b.h"
    assert shown_path(settings, folders, ".include/1/c.h") == str(elsewhere / "c.h")
    assert shown_path(settings, folders, "include/kernelpack_hip_compat.h") == str(
        COMPAT_DIR / "kernelpack_hip_compat.h"
    )
    assert shown_path(settings, folders, "") == "kernel_sources"


def test_hipify_findings_still_explain_a_message_in_project_paths() -> None:
    lines = ["m/m.cu:9:20: warning[warp-size]: assumes 32 lanes"]
    message = "kernel_sources/m/m.cu:9:20: error: no matching function for call to '__shfl_xor'"
    assert [f.text for f in explaining(message, "m", parse_findings(lines), "kernel_sources")] == (
        lines
    )


BROKEN = {
    "pyproject.toml": '[project]\nname = "broken-kernels"\nversion = "1.0"\n',
    "arch_matrix.toml": '[amd]\ntargets = ["gfx942"]\n[nvidia]\ntargets = ["sm_90"]\n',
    "kernel_sources/include/shared.cuh": "#pragma once\n__device__ float twice(float x) { return 2 * x; }\n",
    "kernel_sources/scale/scale.cu": (
        '#include "shared.cuh"\n'
        'extern "C" __global__ void scale(float* y) {\n'
        "  y[0] = twice(y[0]) +;\n"
        "}\n"
    ),
}


def _broken_build(tmp_path: Path, target: str) -> subprocess.CompletedProcess[str]:
    project = tmp_path / "broken"
    for relative, text in BROKEN.items():
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text(text)
    argv = ["build", "--project", str(project), "--targets", target, "--cache-dir"]
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *argv, str(tmp_path / "cache"), "--jobs", "1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "KERNELPACK_DEBUG"},
    )


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("sm_90", marks=pytest.mark.nvcc),
        pytest.param("gfx942", marks=pytest.mark.toolchain),
    ],
)
def test_a_failed_compile_names_the_projects_file(tmp_path: Path, target: str) -> None:
    result = _broken_build(tmp_path, target)
    assert result.returncode == 1, result.stderr[-3000:]
    line = "kernel_sources/scale/scale.cu" + ("(3)" if target == "sm_90" else ":3:")
    assert line in result.stderr
    assert str(tmp_path / "cache") not in result.stderr  # no scratch folder
    assert "scale.hip" not in result.stderr and "failed to execute" not in result.stderr
    assert "\nscale.cu" not in result.stderr  # never the file without its folder
