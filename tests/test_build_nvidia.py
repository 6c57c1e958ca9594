"""NVIDIA-only builds: they must work on a machine with nvcc and no AMD compiler at all (the GPU
machine), and never look for one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from build_project import make_project

from buildsys import REPO_ROOT
from buildsys.index_writer import read_index
from buildsys.toolchain import cuda_toolchain

pytestmark = pytest.mark.nvcc


def run_cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.fixture
def no_amd_toolchain(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An environment where no AMD compiler can be found: no ROCm, no provisioned root fs."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ROCM_PATH", "HIP_PATH", "KERNELPACK_TOOLCHAIN_DIR")
    }
    env["KERNELPACK_TOOLCHAIN_DIR"] = str(tmp_path / "no-toolchains")
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "hipcc").exists()
    )
    cuda = cuda_toolchain()
    assert cuda is not None  # the nvcc marker's gate found it
    env["CUDA_HOME"] = str(cuda.bindir.parent)
    yield env


@pytest.mark.parametrize("selection", [["--vendor", "nvidia"], ["--targets", "sm_90,compute_80"]])
def test_nvidia_builds_never_need_the_amd_toolchain(
    tmp_path: Path, no_amd_toolchain: dict[str, str], selection: list[str]
) -> None:
    project = make_project(tmp_path, matrix="")
    (tmp_path / "matrix.toml").write_text(
        '[amd]\ntargets = ["gfx90a"]\n[nvidia]\ntargets = ["sm_90"]\nptx = ["compute_80"]\n'
    )
    common = [
        "--sources",
        str(project.settings.sources),
        "--matrix",
        str(project.settings.matrix),
        "--cache-dir",
        str(project.settings.cache_dir),
        "--out",
        str(project.settings.out),
    ]
    amd = run_cli("build", *common, "--targets", "gfx90a", env=no_amd_toolchain)
    assert amd.returncode == 1 and "--provision" in amd.stderr  # really no AMD compiler here
    result = run_cli("build", *common, *selection, "--json", env=no_amd_toolchain)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert {(j["module"], j["target"]) for j in summary["jobs"]} == {
        (m, t) for m in ("other", "tiny") for t in ("sm_90", "compute_80")
    }
    index = read_index((project.settings.out / "_index.py").read_text())
    assert set(index["build"]["toolchains"]) == {"cuda"}
    for module in index["modules"].values():
        kinds = {(i["target"], i["kind"]) for i in module["images"]}
        assert kinds == {("sm_90", "cubin"), ("compute_80", "ptx")}
    manifest = json.loads((project.settings.out / "shard.json").read_text())
    assert manifest["targets"] == ["compute_80", "sm_90"]
