"""candle's candle-kernels, laid out one module per folder with no source edits
(bench/candle_project.py), through ``python -m buildsys wheels --project`` into installable wheels:
``info --json`` lists every kernel the objects define and picks gfx942 on an MI300X topology, and on
an NVIDIA GPU a few kernels from those wheels are checked against numpy.

candle's sources are not part of this repository: the tests use the folder KERNELPACK_CANDLE_SRC
names (default /work/corpus/candle/candle-kernels/src, candle 2a13b0f, docs/hipify-corpus.toml)
and are skipped where it is absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from builder_env import builder_env

from bench.candle_project import lay_out
from buildsys import REPO_ROOT

CANDLE_SRC = Path(os.environ.get("KERNELPACK_CANDLE_SRC", "/work/corpus/candle/candle-kernels/src"))
MI300X = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"
needs_candle = pytest.mark.skipif(
    not (CANDLE_SRC / "unary.cu").is_file(),
    reason=f"candle's candle-kernels sources are not at {CANDLE_SRC} (set KERNELPACK_CANDLE_SRC)",
)


def _wheels(project: Path, dist: Path, *extra: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildsys",
            "wheels",
            "--project",
            str(project),
            "--out",
            str(dist),
            *extra,
        ],
        cwd=project.parent,
        capture_output=True,
        text=True,
        env=builder_env(),
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def _install(dist: Path, site: Path, *names: str) -> None:
    """The named wheels of dist into the folder site (pip --target), without dependencies: the
    runtime is this checkout's kernelpack."""
    wheels = [str(p) for name in names for p in dist.glob(name)]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--target",
            str(site),
            *wheels,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def _cubin_kernels(cubin: Path) -> list[str]:
    """The kernel symbols a cubin defines, as binutils' readelf lists them: the functions of any
    binding (a device-linked cubin makes template instances weak; local ones are the kernels of
    internal linkage) that are marked as entries (``[<other>: 10]``, CUDA's STO_CUDA_ENTRY),
    defined there (an undefined ``__assertfail`` is what assert() calls)."""
    listing = subprocess.run(["readelf", "-sW", str(cubin)], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr
    names = []
    for line in listing.stdout.splitlines():
        fields = line.split()
        if (
            len(fields) >= 8
            and fields[3] == "FUNC"
            and fields[4] in ("GLOBAL", "WEAK", "LOCAL")
            and "UND" not in fields
            and "[<other>:" in line
            and int(line.split("[<other>:")[1].split("]")[0], 16) & 0x10
        ):
            names.append(fields[-1])
    return sorted(names)


# CCCL's versioned inline namespaces as CUDA 13.0 spells them for one target (CCCL 3.0.1, sm_90:
# cub::CUB_300001_SM_900::, thrust::THRUST_300001_SM_900_NS::, libcu++'s cuda::std::__4::), which
# the kernel-name rule leaves out (docs/loader.md)
_CCCL_NAMESPACES = re.compile(r"CUB_\d+_SM_\d+::|THRUST_\d+_SM_\d+_NS::|(?<=cuda::std::)__4::")
# What nvcc adds to a unit's internal symbols and the source never spells: nvlink's input prefix
# __nv_static_<n>_<unit id>_ (the id: _<hash>_<length>_<file, . as _>_<hash>), the namespace of
# the unit's internal functions, the unnamed namespace.
_NVLINK_PREFIX = re.compile(r"^__nv_static_(\d+)_")
_UNIT_FILE = re.compile(r"_[0-9a-f]+_(\d+)_(\w+)_[0-9a-f]+")
_UNSPELLED = re.compile(r"_INTERNAL_\w+::|\(anonymous namespace\)::")


def _demangled(symbols: list[str]) -> list[str]:
    """The lookup names of a cubin's kernel symbols by the kernel-name rule of docs/loader.md,
    worked out here from binutils' c++filt -p (no parameter list): each template's leading
    return type, CCCL's inline namespaces and what nvcc adds to internal symbols dropped; a name
    that internal kernels of several units share gets ``@<unit's file>``."""
    units, bare = [], []
    for symbol in symbols:
        prefix = _NVLINK_PREFIX.match(symbol)
        if prefix is None:
            units.append("")
            bare.append(symbol)
            continue
        length, end = int(prefix.group(1)), prefix.end()
        unit = _UNIT_FILE.fullmatch(symbol[end : end + length])
        assert unit is not None, symbol
        file = unit.group(2)[: int(unit.group(1))]
        units.append(file[: -len("_cu")] + ".cu")
        bare.append(symbol[end + length + 1 :])
    result = subprocess.run(
        ["c++filt", "-p"], input="\n".join(bare), capture_output=True, text=True, check=True
    )
    names = [
        _UNSPELLED.sub("", _CCCL_NAMESPACES.sub("", line.removeprefix("void ")))
        for line in result.stdout.splitlines()
    ]
    units_of: dict[str, set[str]] = {}
    for name, unit in zip(names, units, strict=True):
        units_of.setdefault(name, set()).add(unit)
    shared = {name for name, found in units_of.items() if len(found) > 1}
    return sorted(
        f"{name}@{unit}" if unit and name in shared else name
        for name, unit in zip(names, units, strict=True)
    )


@needs_candle
@pytest.mark.toolchain
@pytest.mark.nvcc
def test_candle_kernels_become_wheels_that_info_lists_and_selects(tmp_path: Path) -> None:
    project = tmp_path / "candle"
    # the top-level modules (the next test builds moe/; mmq_gguf/ takes half an hour of one core
    # per target: docs/your-kernels.md)
    top_level = sorted(p.stem for p in CANDLE_SRC.glob("*.cu"))
    modules = lay_out(CANDLE_SRC, project, top_level)
    dist = tmp_path / "dist"
    _wheels(project, dist)
    site = tmp_path / "site"
    _install(dist, site, "candle_kernels-*-py3-none-any.whl", "candle_kernels_device_*.whl")
    fat = next(dist.glob("candle_kernels-*-null.whl"))
    unpacked = tmp_path / "fat"
    subprocess.run([sys.executable, "-m", "zipfile", "-e", str(fat), str(unpacked)], check=True)
    info = subprocess.run(
        [sys.executable, "-P", "-m", "kernelpack", "info", "--json", "--sysfs-root", str(MI300X)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=builder_env()
        | {
            "PYTHONPATH": f"{site}:{REPO_ROOT / 'wheels'}",
            "KERNELPACK_CACHE_DIR": str(tmp_path / "cache"),
        },
    )
    assert info.returncode == 0, info.stderr[-3000:]
    candle = json.loads(info.stdout)["packages"]["candle_kernels"]
    assert sorted(candle["modules"]) == modules
    for module, entry in candle["modules"].items():
        cubin = unpacked / "candle_kernels" / "device" / f"{module}.sm_90.cubin"
        assert entry["kernels"] == _demangled(_cubin_kernels(cubin)), module
        chosen = [(r["image"]["package"], r["image"]["target"]) for r in entry["images"]]
        assert chosen == [("candle_kernels_device_gfx942", "gfx942")] * 8, module
        assert all(r["image"]["verified"] for r in entry["images"])


@needs_candle
@pytest.mark.toolchain
@pytest.mark.nvcc
def test_candles_folder_of_several_units_becomes_one_module(tmp_path: Path) -> None:
    """moe/ (3 units) device-linked for gfx942 and sm_90 into wheels: info lists exactly the
    kernels readelf finds in the linked cubin (c++filt names them), its static ones included, and
    those that two units define each under its unit's name; CUB's kernels on NVIDIA and rocPRIM's
    on AMD (a thrust call) each on their vendor only. mmq_gguf/ (11 units, about half an hour of
    one core per target) goes the same way in bench/candle_project.py (docs/your-kernels.md)."""
    project = tmp_path / "candle"
    assert lay_out(CANDLE_SRC, project, ["moe"], ("gfx942", "sm_90")) == ["moe"]
    dist = tmp_path / "dist"
    _wheels(project, dist)
    site = tmp_path / "site"
    _install(dist, site, "candle_kernels-*-py3-none-any.whl", "candle_kernels_device_*.whl")
    info = subprocess.run(
        [sys.executable, "-P", "-m", "kernelpack", "info", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=builder_env()
        | {
            "PYTHONPATH": f"{site}:{REPO_ROOT / 'wheels'}",
            "KERNELPACK_CACHE_DIR": str(tmp_path / "cache"),
            "KERNELPACK_TARGET": "sm_90",
        },
    )
    assert info.returncode == 0, info.stderr[-3000:]
    candle = json.loads(info.stdout)["packages"]["candle_kernels"]
    device = site / "candle_kernels_device_sm90" / "device"
    moe = candle["modules"]["moe"]
    nvidia = _demangled(_cubin_kernels(device / "moe.sm_90.cubin"))
    amd_only = [k for k in moe["kernels"] if k not in nvidia]
    assert amd_only and all(k.startswith("rocprim::") for k in amd_only), amd_only
    assert sorted(set(moe["kernels"]) - set(amd_only)) == nvidia
    assert any(k.startswith("cub::") for k in nvidia)
    # a static kernel that two units define (gguf.cuh's, included by both), each by its unit
    assert {"quantize_q8_1@moe_gguf.cu", "quantize_q8_1@moe_wmma_gguf.cu"} <= set(nvidia)
    assert len(moe["kernels"]) > 10  # each unit's template instances, all in one image
    (row,) = moe["images"]
    assert (row["image"]["target"], row["image"]["verified"]) == ("sm_90", True)


@pytest.fixture(scope="module")
def candle_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """candle's affine, unary and binary modules built for sm_90 as wheels, the host and sm90
    device wheels installed into a folder on sys.path."""
    root = tmp_path_factory.mktemp("candle")
    lay_out(CANDLE_SRC, root / "project", ["affine", "binary", "unary"], ("sm_90",))
    _wheels(root / "project", root / "dist")
    site = root / "site"
    _install(
        root / "dist", site, "candle_kernels-*-py3-none-any.whl", "candle_kernels_device_sm90-*.whl"
    )
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))


def _poisoned(torch: object, n: int) -> object:
    return torch.full((n,), float("nan"), device="cuda")  # type: ignore[attr-defined]


@needs_candle
@pytest.mark.gpu
@pytest.mark.nvcc
def test_candle_kernels_from_the_wheels_match_numpy(candle_site: Path) -> None:
    import numpy as np
    import torch

    import kernelpack

    rng = np.random.default_rng(14)
    n = 100_003
    x_host = rng.standard_normal(n).astype(np.float32)
    x = torch.from_numpy(x_host).cuda()
    blocks = (n + 255) // 256

    unary = kernelpack.load("unary", package="candle_kernels")
    assert unary.image.startswith("sm_90 cubin (candle_kernels_device_sm90/")
    out = _poisoned(torch, n)
    absolute = x.abs()
    unary.kernel("usqrt_f32").launch(blocks, 256, n, 1, 0, absolute, out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), np.sqrt(np.abs(x_host)), rtol=1e-6)

    # affine's mul and add are floats of a C-linkage kernel: Python floats go as float32
    # (kernelpack/backends/signature.py), an int would go as an integer
    affine = kernelpack.load("affine", package="candle_kernels")
    mul, add = float(rng.uniform(-4, 4)), float(rng.uniform(-4, 4))
    out = _poisoned(torch, n)
    affine.kernel("affine_f32").launch(blocks, 256, n, 1, 0, x, out, mul, add)
    torch.cuda.synchronize()
    expected = x_host.astype(np.float64) * np.float32(mul) + np.float32(add)
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-5, atol=1e-5)

    # binary add with the left operand read through strides: a 2-D transpose (candle's layout
    # info: dims, then the strides of lhs and rhs)
    rows, cols = 300, 333
    a_host = rng.standard_normal((cols, rows)).astype(np.float32)
    b_host = rng.standard_normal((rows, cols)).astype(np.float32)
    info = torch.tensor([rows, cols, 1, rows, cols, 1], dtype=torch.int64, device="cuda")
    a, b = torch.from_numpy(a_host).cuda(), torch.from_numpy(b_host).cuda()
    binary = kernelpack.load("binary", package="candle_kernels")
    out = _poisoned(torch, rows * cols)
    binary.kernel("badd_f32").launch(
        (rows * cols + 255) // 256, 256, rows * cols, 2, info, a, b, out
    )
    torch.cuda.synchronize()
    expected = (a_host.T.astype(np.float64) + b_host).reshape(-1)
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-6, atol=1e-6)
