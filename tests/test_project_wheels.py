"""examples/vecops, a third-party-style project, through ``python -m buildsys wheels --project``
and through its PEP 517 backend (``pip wheel``, ``python -m build``): every wheel named after the
project, depending on the runtime, byte-identical across builds."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from builder_env import builder_env

from buildsys import REPO_ROOT
from buildsys.index_writer import read_index
from buildsys.wheelfile import read_wheel

EXAMPLE = REPO_ROOT / "examples" / "vecops"
TARGETS = "gfx942,gfx1100"
VERSION = "0.2.0"  # examples/vecops/pyproject.toml


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=builder_env())


@pytest.fixture(scope="module")
def vecops_dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The example's wheels, built twice into two folders."""
    outs = []
    for name in ("first", "second"):
        out = tmp_path_factory.mktemp(name) / "dist"
        result = _run(
            [
                sys.executable,
                "-m",
                "buildsys",
                "wheels",
                "--project",
                str(EXAMPLE),
                "--targets",
                TARGETS,
                "--out",
                str(out),
                "--provision",
            ],
            cwd=tmp_path_factory.getbasetemp(),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        (out.parent / "stderr.txt").write_text(result.stderr)  # what the user saw (CI mode)
        outs.append(out)
    return outs[0], outs[1]


def _files(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# Every file dist/ should hold, written out by hand from the project's name and the two targets.
EXPECTED = {
    f"vecops_kernels-{VERSION}-0host-py3-none-any.whl",  # the plain name is the fat wheel's
    f"vecops_kernels-{VERSION}-py3-none-any-null.whl",
    f"vecops_kernels-{VERSION}-py3-none-any-gfx942.whl",
    f"vecops_kernels-{VERSION}-py3-none-any-gfx1100.whl",
    f"vecops_kernels_device_gfx942-{VERSION}-py3-none-any.whl",
    f"vecops_kernels_device_gfx1100-{VERSION}-py3-none-any.whl",
    f"vecops_kernels-{VERSION}-variants.json",
    ".kernelpack-dist.json",  # what the run wrote, for the next run to replace
}


@pytest.mark.toolchain
def test_the_wheels_are_named_after_the_project_and_byte_identical(
    vecops_dists: tuple[Path, Path],
) -> None:
    first, second = vecops_dists
    assert {p.name for p in first.iterdir() if p.is_file()} == EXPECTED
    assert _files(first) == _files(second)
    projects = {p.name for p in (first / "simple").iterdir() if p.is_dir()}
    assert projects == {
        "vecops-kernels",
        "vecops-kernels-device-gfx942",
        "vecops-kernels-device-gfx1100",
    }


@pytest.mark.toolchain
def test_each_step_of_the_packing_is_said_as_it_starts(vecops_dists: tuple[Path, Path]) -> None:
    """After the build's progress, packing a large module's images takes minutes: one plain line
    per step on stderr (CI mode), none of them silent."""
    stderr = (vecops_dists[0].parent / "stderr.txt").read_text()
    stages = [line for line in stderr.splitlines() if line.startswith("wheels: ")]
    expected = [
        "wheels: the fat wheel (",
        "wheels: the host wheel and the device wheels, split from the fat wheel [",
        "wheels: the variant wheels and the variants JSON [",
        f"wheels: done: {vecops_dists[0]} [",
    ]
    assert len(stages) == len(expected), stages
    for line, start in zip(stages, expected, strict=True):
        assert line.startswith(start) and line.endswith(" s]"), line
    assert " MB of device files; pip wheel, then auditwheel) [" in stages[0]


@pytest.mark.toolchain
def test_each_wheel_depends_on_the_runtime_and_declares_the_package(
    vecops_dists: tuple[Path, Path],
) -> None:
    dist = vecops_dists[0]
    host = read_wheel(dist / f"vecops_kernels-{VERSION}-0host-py3-none-any.whl")
    info = f"vecops_kernels-{VERSION}.dist-info"
    metadata = host[f"{info}/METADATA"].decode()
    assert "Name: vecops-kernels\n" in metadata
    assert "Requires-Dist: kernelpack>=" in metadata
    assert f'Requires-Dist: vecops-kernels-device-gfx942=={VERSION}; extra == "gfx942"' in metadata
    assert (
        host[f"{info}/entry_points.txt"]
        == b"[kernelpack.packages]\nvecops_kernels = vecops_kernels\n"
    )
    # the project's own Python code, not a generated one
    assert (
        host["vecops_kernels/__init__.py"]
        == (EXAMPLE / "vecops_kernels" / "__init__.py").read_bytes()
    )
    index = read_index(host["vecops_kernels/_index.py"].decode())
    assert (index["package"], index["distribution"]) == ("vecops_kernels", "vecops-kernels")
    assert index["device_wheels"] == {"gfx942": "gfx942", "gfx1100": "gfx1100"}
    assert not [n for n in host if n.endswith((".hsaco", ".cubin", ".ptx"))]

    device = read_wheel(dist / f"vecops_kernels_device_gfx942-{VERSION}-py3-none-any.whl")
    device_info = f"vecops_kernels_device_gfx942-{VERSION}.dist-info"
    assert (
        f"Requires-Dist: vecops-kernels=={VERSION}\n" in device[f"{device_info}/METADATA"].decode()
    )
    assert device[f"{device_info}/entry_points.txt"] == (
        b"[kernelpack.device]\nvecops_kernels.gfx942 = vecops_kernels_device_gfx942\n"
    )
    fragment = read_index(device["vecops_kernels_device_gfx942/_index.py"].decode())
    assert fragment["package"] == "vecops_kernels"
    assert {i["target"] for m in fragment["modules"].values() for i in m["images"]} == {"gfx942"}

    fat = read_wheel(dist / f"vecops_kernels-{VERSION}-py3-none-any-null.whl")
    fat_index = read_index(fat["vecops_kernels/_index.py"].decode())
    assert sorted(fat_index["modules"]) == ["axpy", "dot", "elementwise"]
    targets = {i["target"] for m in fat_index["modules"].values() for i in m["images"]}
    assert targets == {"gfx942", "gfx1100"}


@pytest.mark.toolchain
def test_variantlib_accepts_the_projects_variant_wheels(vecops_dists: tuple[Path, Path]) -> None:
    variantlib = Path(sys.executable).parent / "variantlib"
    for label in ("null", "gfx942"):
        wheel = vecops_dists[0] / f"vecops_kernels-{VERSION}-py3-none-any-{label}.whl"
        result = subprocess.run(
            [str(variantlib), "analyze-wheel", "-i", str(wheel)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert f"Variant: `{label}`" in result.stdout


@pytest.mark.toolchain
def test_pip_wheel_through_the_backend_gives_the_fat_wheel(
    vecops_dists: tuple[Path, Path], tmp_path: Path
) -> None:
    """``pip wheel DIR`` (the [build-system] table of the example) makes the fat wheel: the files
    of the null variant but its variant.json."""
    result = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "-q",
            str(EXAMPLE),
            "--config-settings",  # pip 23.1 and later also take -C
            f"targets={TARGETS}",
            "-w",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = tmp_path.glob("*.whl")
    assert built.name == f"vecops_kernels-{VERSION}-py3-none-any.whl"
    # one name, one content: no file of `wheels` takes the fat wheel's plain name; the host
    # wheel says its build tag in WHEEL as its name does
    assert built.name not in {p.name for p in vecops_dists[0].iterdir()}
    host = read_wheel(vecops_dists[0] / f"vecops_kernels-{VERSION}-0host-py3-none-any.whl")
    assert "\nBuild: 0host\n" in host[f"vecops_kernels-{VERSION}.dist-info/WHEEL"].decode()
    null = read_wheel(vecops_dists[0] / f"vecops_kernels-{VERSION}-py3-none-any-null.whl")
    info = f"vecops_kernels-{VERSION}.dist-info"
    del null[f"{info}/variant.json"], null[f"{info}/RECORD"]
    files = read_wheel(built)
    del files[f"{info}/RECORD"]
    assert files == null


@pytest.mark.toolchain
def test_python_build_makes_the_sdist_and_a_wheel_from_it(tmp_path: Path) -> None:
    result = _run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--skip-dependency-check",
            "-C",
            "targets=gfx942",
            "-o",
            str(tmp_path / "out"),
            str(EXAMPLE),
        ],
        cwd=tmp_path,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    sdist = tmp_path / "out" / f"vecops_kernels-{VERSION}.tar.gz"
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    base = f"vecops_kernels-{VERSION}"
    for name in (
        "pyproject.toml",
        "PKG-INFO",
        "arch_matrix.toml",
        "kernel_sources/axpy/axpy.cu",
        "kernel_sources/include/vecops_math.cuh",
        "vecops_kernels/__init__.py",
    ):
        assert f"{base}/{name}" in names
    assert not [n for n in names if "/build/" in n or "/dist/" in n or "__pycache__" in n]
    wheel = read_wheel(tmp_path / "out" / f"{base}-py3-none-any.whl")  # built from the sdist
    index = read_index(wheel["vecops_kernels/_index.py"].decode())
    assert {i["target"] for m in index["modules"].values() for i in m["images"]} == {"gfx942"}


def test_a_bad_config_setting_is_one_line(tmp_path: Path) -> None:
    result = _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            str(EXAMPLE),
            "--config-settings",  # pip 23.1 and later also take -C
            "tragets=gfx942",
            "-w",
            str(tmp_path),
        ],
        cwd=tmp_path,
    )
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "error: config setting 'tragets': not a kernelpack setting; known:" in output
    assert "Traceback" not in output
