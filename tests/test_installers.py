"""What the installers people use take from a kernelpack-built index: uv with wheel variants and pip
with extras, each into a fresh virtual environment, on this GPU-less machine and with each
installer's documented override naming a GPU; then ``kernelpack info`` says which images load.

Small on purpose: examples/vecops for three targets (gfx942, gfx1100, and sm_90 where nvcc is
installed: the NVIDIA tests are marked ``nvcc``) and kernelpack's own wheels for one. uv is the one pinned in the test dependency group (the version whose behaviour
docs/wheels.md describes); numpy, zstandard and rich come from the package index (marker ``network``).
The expectations are written by hand from docs/wheels.md's installer table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from builder_env import builder_env
from conftest import nvcc_available

from buildsys import REPO_ROOT
from kernelpack.formats.index import PROVENANCE_FILE

EXAMPLE = REPO_ROOT / "examples" / "vecops"
MI300X = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"
RX7900 = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "laptop-gfx1100-gfx1151"
UV = Path(sys.executable).parent / "uv"
MODULES = ("axpy", "dot", "elementwise")
# NVIDIA's provider (uv runs it built in) reads these; without a driver it reports nothing at all.
SM_90 = {
    "NV_VARIANT_PROVIDER_FORCE_SM_ARCH": "9.0",
    "NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION": "13.0",
}

pytestmark = [pytest.mark.toolchain, pytest.mark.network]


def _wheels(out: Path, *args: str) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "buildsys", "wheels", "--provision", "--out", str(out), *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=builder_env(),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def indexes(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """vecops' dist/ (gfx942, gfx1100, sm_90), kernelpack's (gfx942) and a folder of numpy,
    zstandard and rich wheels (kernelpack's dependencies): everything an install needs, nothing from elsewhere."""
    root = tmp_path_factory.mktemp("indexes")
    vecops = _wheels(
        root / "vecops", "--project", str(EXAMPLE), "--targets", "gfx942,gfx1100,sm_90"
    )
    runtime = _wheels(root / "kernelpack", "--targets", "gfx942")
    wheelhouse = root / "wheelhouse"
    download = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "-d",
            str(wheelhouse),
            "numpy",
            "zstandard",
            "rich",
        ],
        capture_output=True,
        text=True,
    )
    # a test marked network fails offline rather than skipping: deselect it with -m "not network"
    assert download.returncode == 0, (
        f"cannot download numpy, zstandard, rich: {download.stderr[-300:]}"
    )
    return [vecops, runtime, wheelhouse]


def _clean_env(**extra: str) -> dict[str, str]:
    """No PIP_*, UV_* or KERNELPACK_* setting of the caller's reaches the installers."""
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], **extra}


def _uv_install(venv: Path, indexes: list[Path], **env: str) -> set[str]:
    vecops, runtime, wheelhouse = indexes
    subprocess.run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    result = subprocess.run(
        [
            str(UV), "pip", "install", "--preview-features", "wheel-variants", "--offline",
            "--no-cache", "--index-strategy", "unsafe-best-match",
            "--index-url", (vecops / "simple").as_uri(),
            "--index", (runtime / "simple").as_uri(),
            "--find-links", str(wheelhouse),
            "vecops-kernels",
        ],
        capture_output=True,
        text=True,
        env=_clean_env(VIRTUAL_ENV=str(venv), **env),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return _installed(venv)


def _pip_install(venv: Path, indexes: list[Path], requirement: str) -> set[str]:
    vecops, runtime, wheelhouse = indexes
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    result = subprocess.run(
        [
            str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
            "--find-links", str(vecops), "--find-links", str(runtime),
            "--find-links", str(wheelhouse), requirement,
        ],
        capture_output=True,
        text=True,
        env=_clean_env(PIP_DISABLE_PIP_VERSION_CHECK="1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return _installed(venv)


def _installed(venv: Path) -> set[str]:
    """The distributions in the venv, and which file each came from (variant.json's label)."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    names = set()
    for dist_info in site.glob("*.dist-info"):
        name = dist_info.name.split("-")[0].replace("_", "-")
        variant = dist_info / "variant.json"
        if variant.is_file():
            (label,) = json.loads(variant.read_text())["variants"]
            name += f" ({label})"
        names.add(name)
    return {n for n in names if "kernels" in n or n.startswith("kernelpack")}


def _info(
    venv: Path, tmp_path: Path, *, sysfs: Path | None = None, target: str = ""
) -> dict[str, Any]:
    """``kernelpack info --json`` of the venv's installed packages."""
    env = _clean_env(KERNELPACK_CACHE_DIR=str(tmp_path / "cache"))
    if target:
        env["KERNELPACK_TARGET"] = target
    argv = [str(venv / "bin" / "python"), "-m", "kernelpack", "info", "--json"]
    result = subprocess.run(
        [*argv, *(["--sysfs-root", str(sysfs)] if sysfs else [])],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the source tree: the installed packages must be what runs
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _chosen(
    venv: Path, tmp_path: Path, *, sysfs: Path | None = None, target: str = ""
) -> set[tuple[str, str]]:
    """(package the image comes from, its target) for every vecops module and GPU."""
    report = _info(venv, tmp_path, sysfs=sysfs, target=target)
    modules = report["packages"]["vecops_kernels"]["modules"]
    assert sorted(modules) == list(MODULES)
    return {
        (row["image"]["package"], row["image"]["target"]) if row["image"] else ("none", "")
        for module in modules.values()
        for row in module["images"]
    }


def test_uv_on_a_machine_without_a_gpu_installs_the_null_variant_with_every_image(
    indexes: list[Path], tmp_path: Path
) -> None:
    """Not the host wheel: the null variant (the fat wheel), whose images serve any built GPU."""
    venv = tmp_path / "venv"
    assert _uv_install(venv, indexes) == {"kernelpack (null)", "vecops-kernels (null)"}
    assert _chosen(venv, tmp_path, sysfs=MI300X) == {("vecops_kernels", "gfx942")}
    assert _chosen(venv, tmp_path, target="gfx1100") == {("vecops_kernels", "gfx1100")}
    if nvcc_available():
        assert _chosen(venv, tmp_path, target="sm_90") == {("vecops_kernels", "sm_90")}
    # what the null variant's wheel says of its making, as `kernelpack info --json` shows it
    (null,) = indexes[0].glob("vecops_kernels-*-null.whl")
    with zipfile.ZipFile(null) as wheel:
        carried = json.loads(wheel.read(f"vecops_kernels-0.2.0.dist-info/{PROVENANCE_FILE}"))
    assert _info(venv, tmp_path)["packages"]["vecops_kernels"]["provenance"] == {
        "vecops-kernels": carried
    }
    text = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "kernelpack", "info", "--sysfs-root", str(MI300X)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=_clean_env(KERNELPACK_CACHE_DIR=str(tmp_path / "cache")),
    ).stdout
    assert f"vecops-kernels: built from {carried['source']['commit']}" in text


@pytest.mark.nvcc
def test_uv_with_nvidias_override_for_sm_90_installs_the_sm90_variant(
    indexes: list[Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    assert _uv_install(venv, indexes, **SM_90) == {
        "kernelpack (null)",
        "vecops-kernels (sm90)",
        "vecops-kernels-device-sm90",
    }
    assert _chosen(venv, tmp_path, target="sm_90") == {("vecops_kernels_device_sm90", "sm_90")}


@pytest.mark.parametrize("target", ["gfx942", "gfx1100"])
def test_uv_runs_no_amd_provider_so_an_amd_gpu_gets_the_null_variant(
    indexes: list[Path], tmp_path: Path, target: str
) -> None:
    """uv 0.13 runs only its built-in providers (NVIDIA's, CPU ones): kernelpack's AMD provider
    and its override KERNELPACK_TARGET are not consulted, so the AMD variants are never chosen;
    the null variant still carries the GPU's images, and the loader takes them."""
    venv = tmp_path / "venv"
    assert _uv_install(venv, indexes, KERNELPACK_TARGET=target) == {
        "kernelpack (null)",
        "vecops-kernels (null)",
    }
    assert _chosen(venv, tmp_path, target=target) == {("vecops_kernels", target)}


@pytest.mark.parametrize(
    ("extra", "device", "target"),
    [
        ("gfx942", "gfx942", "gfx942"),
        ("gfx1100", "gfx1100", "gfx1100"),
        pytest.param("sm_90", "sm90", "sm_90", marks=pytest.mark.nvcc),
    ],
)
def test_pip_with_the_gpus_extra_installs_the_host_wheel_and_that_device_wheel(
    indexes: list[Path], tmp_path: Path, extra: str, device: str, target: str
) -> None:
    venv = tmp_path / "venv"
    assert _pip_install(venv, indexes, f"vecops-kernels[{extra}]") == {
        "kernelpack",
        "vecops-kernels",
        f"vecops-kernels-device-{device}",
    }
    assert _chosen(venv, tmp_path, target=target) == {(f"vecops_kernels_device_{device}", target)}


def test_pip_without_an_extra_installs_the_host_wheel_alone(
    indexes: list[Path], tmp_path: Path
) -> None:
    """pip reads no variant file name: the host wheel, no images (run-time compilation or the
    extra to install, which ``kernelpack info`` names)."""
    venv = tmp_path / "venv"
    assert _pip_install(venv, indexes, "vecops-kernels") == {"kernelpack", "vecops-kernels"}
    assert _chosen(venv, tmp_path, sysfs=RX7900) == {("none", "")}


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(EXAMPLE), *args], check=True, capture_output=True, text=True
    ).stdout


def test_every_wheel_says_its_commit_dirty_flag_and_the_compiler_of_each_image(
    indexes: list[Path],
) -> None:
    """Against git's own answers and the compilers' own --version lines."""
    commit, dirty = _git("rev-parse", "HEAD").strip(), bool(_git("status", "--porcelain", "."))
    nvcc = ""
    if nvcc_available():
        version = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
        nvcc = version.strip().splitlines()[-2].rsplit(" ", 1)[-1]  # "... release 13.0, V13.0.88"
    wheels = sorted(indexes[0].glob("*.whl"))
    assert len(wheels) >= 7
    for path in wheels:
        with zipfile.ZipFile(path) as wheel:
            (name,) = [n for n in wheel.namelist() if n.endswith(f".dist-info/{PROVENANCE_FILE}")]
            document = json.loads(wheel.read(name))
        assert document["source"] == {"commit": commit, "dirty": dirty}, path.name
        rows = {(r["module"], r["target"]) for r in document["images"]}
        label = path.name.removesuffix(".whl").rsplit("-", 1)[-1]
        if label == "null":
            targets = {"gfx942", "gfx1100", *(["sm_90"] if nvcc else [])}
        elif "_device_" in path.name:
            targets = {path.name.split("-")[0].split("_device_")[1].replace("sm90", "sm_90")}
        else:  # host and variant wheels carry no image
            targets = set()
        assert rows == {(m, t) for m in MODULES for t in targets}, path.name
        for row in document["images"]:
            if row["target"] == "sm_90":
                assert nvcc and nvcc in row["compiler"]
            else:
                assert "clang" in row["compiler"], row
