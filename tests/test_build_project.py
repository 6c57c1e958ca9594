"""A kernel project other than kernelpack's own checkout, built through ``--project``: its
[tool.kernelpack] table gives the defaults, the defines, the include folders and per-module flags,
and the compiler itself checks that each reached the command (an ``#error`` otherwise)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys import REPO_ROOT
from buildsys.index_writer import read_index

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

PYPROJECT = """\
[project]
name = "demo-kernels"
version = "0.3.0"

[tool.kernelpack]
defines = ["FROM_PROJECT=1"]
include-dirs = ["third_party/include"]

[tool.kernelpack.modules.scale]
defines = ["FROM_MODULE"]
flags = ["-DFROM_FLAGS"]
"""
SOURCES = {
    "kernel_sources/scale/scale.cu": (
        '#include "extra.cuh"\n'
        "#if !defined(FROM_PROJECT) || !defined(FROM_MODULE) || !defined(FROM_FLAGS)\n"
        '#error "a define of [tool.kernelpack] did not reach the compiler"\n'
        "#endif\n"
        "#if defined(__HIP_PLATFORM_AMD__) && !defined(USE_ROCM)\n"
        '#error "USE_ROCM is not defined for AMD"\n'
        "#endif\n"
        'extern "C" __global__ void scale(float* y) { y[threadIdx.x] *= EXTRA_FACTOR; }\n'
    ),
    "kernel_sources/plain/plain.cu": (
        "#ifdef FROM_MODULE\n"
        '#error "a per-module define leaked into another module"\n'
        "#endif\n"
        'extern "C" __global__ void plain(float* y) { y[threadIdx.x] = 1.0f; }\n'
    ),
    "third_party/include/extra.cuh": "#pragma once\n#define EXTRA_FACTOR 3.0f\n",
    "arch_matrix.toml": '[amd]\ntargets = ["gfx90a"]\n',
}


HIPRTC = """
import sys
from kernelpack.formats import read_code_object
from kernelpack.backends.rtc import SourceCompiler
compiled = SourceCompiler("hiprtc").compile(open(sys.argv[1]).read(), "scale", "gfx90a")
print(*(k.name for k in read_code_object(compiled.image, "hiprtc").kernels))
"""


@pytest.mark.toolchain
def test_a_project_builds_with_its_own_config(tmp_path: Path, amd_toolchain: Toolchain) -> None:
    project = tmp_path / "demo"
    (project / "pyproject.toml").parent.mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT)
    for relative, text in SOURCES.items():
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "buildsys", "build", "--project", str(project),
         "--cache-dir", str(tmp_path / "cache"), "--json"],
        cwd=tmp_path, capture_output=True, text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("KERNELPACK_BUILD_")}
        | {"PYTHONPATH": str(REPO_ROOT)},  # the builder from this checkout, run from elsewhere
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout)  # --json: nothing but the JSON on stdout
    assert summary["compiled"] == 2 and summary["failed"] == 0
    out = project / "build" / "device"  # the default output, inside the project
    index = read_index((out / "_index.py").read_text())
    assert index["version"] == "0.3.0"
    assert sorted(index["modules"]) == ["plain", "scale"]
    assert [i["target"] for i in index["modules"]["scale"]["images"]] == ["gfx90a"]
    # the self-contained source has the extra include folder's header pasted in
    assert "EXTRA_FACTOR 3.0f" in (out / "device" / "scale.cu").read_text()
    # and starts with the defines the compiler got, so that hipRTC (below) and NVRTC compile it
    # alone: the #error lines above check them again
    defines = "#define FROM_PROJECT 1\n#define FROM_MODULE 1\n#define FROM_FLAGS 1\n"
    assert (out / "device" / "scale.cu").read_text().startswith(defines + "#line 1 ")
    hip = (out / "device" / "scale.hip").read_text()
    assert hip.startswith("#define FROM_PROJECT 1\n#define USE_ROCM 1\n#define FROM_MODULE 1\n")
    assert (out / "device" / "plain.cu").read_text().startswith("#define FROM_PROJECT 1\n#line ")
    argv = [
        *("/usr/bin/env", f"PYTHONPATH={REPO_ROOT / 'wheels'}", "python3", "-c", HIPRTC),
        str(out / "device" / "scale.hip"),
    ]
    done = subprocess.run(amd_toolchain.command(argv), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["scale"]
