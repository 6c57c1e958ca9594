"""A small kernel-sources tree and matrix for the build and merge tests (not a test module).

Two modules so that "only the edited module recompiles" can be seen; one includes a shared header
from include/ and the other does not, so that header tracking can be seen too. Two AMD targets, one
wave64 and one wave32, keep a cold build to four small compiles.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from buildsys.build import build
from buildsys.jobs import BuildResult
from buildsys.settings import BuildSettings

TINY_SOURCES = {
    "include/common.cuh": "#pragma once\n#define SCALE 2.0f\n",
    "tiny/tiny.cu": (
        '#include "common.cuh"\n'
        'extern "C" __global__ void scale(const float* x, float* y, int n) {\n'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] = SCALE * x[i];\n"
        "}\n"
    ),
    "other/other.cu": (
        'extern "C" __global__ void add_one(float* y, long long n) {\n'
        "  long long i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] += 1.0f;\n"
        "}\n"
    ),
}
AMD_TARGETS = ("gfx90a", "gfx1100")
NVIDIA_TARGETS = ("sm_90",)
PTX_TARGETS = ("compute_80",)


def matrix_text(amd: tuple[str, ...] = AMD_TARGETS, nvidia: bool = False) -> str:
    text = "[amd]\ntargets = [" + ", ".join(f'"{t}"' for t in amd) + "]\n"
    if nvidia:
        text += "[nvidia]\ntargets = " + str(list(NVIDIA_TARGETS)).replace("'", '"') + "\n"
        text += "ptx = " + str(list(PTX_TARGETS)).replace("'", '"') + "\n"
    return text


@dataclass(frozen=True)
class Project:
    root: Path
    settings: BuildSettings

    def build(self, **changes: Any) -> BuildResult:
        return build(replace(self.settings, **changes), progress=False)

    def write(self, relative: str, text: str) -> None:
        path = self.settings.sources / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def copy(self, root: Path) -> Project:
        """The same project under another folder, cache and output included."""
        shutil.copytree(self.root, root, dirs_exist_ok=True)
        return make_project(root, files={}, matrix=None)


def make_project(
    root: Path, *, files: dict[str, str] | None = None, matrix: str | None = ""
) -> Project:
    """A project folder: sources/, matrix.toml, out/ and cache/ (files None: TINY_SOURCES)."""
    for relative, text in (TINY_SOURCES if files is None else files).items():
        path = root / "sources" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if matrix is not None:
        (root / "matrix.toml").write_text(matrix or matrix_text())
    settings = BuildSettings(
        sources=root / "sources",
        matrix=root / "matrix.toml",
        out=root / "out",
        cache_dir=root / "cache",
        jobs=2,
        package_version="1.0.0",
    )
    return Project(root, settings)


def compiled(result: BuildResult) -> set[tuple[str, str]]:
    """(module, target) of each job that ran the compiler."""
    return {
        (o.job.module.name, o.job.target.target) for o in result.outcomes if o.status == "compiled"
    }


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }
