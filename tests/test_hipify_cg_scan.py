"""cooperative_groups/scan.h (``cg::inclusive_scan``, ``cg::exclusive_scan`` over tiles) in the
compat header: tests/hipify_cg_scan.cu translated and compiled for a wave64 (gfx942) and a wave32
(gfx1100) target, compiled as CUDA by nvcc, and run on the AMD emulator at both wave sizes
against numpy's cumulative sums and maxima (the expectation is computed here, from the inputs,
independently of the header)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from buildsys.hipify import COMPAT_DIR, hipify_source
from kernelpack.formats.code_objects import read_code_object

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

SOURCE = Path(__file__).with_name("hipify_cg_scan.cu")
TILES = (2, 4, 8, 16, 32, 64)
BLOCK = 64
KERNELS = [f"cg_scan_{n}" for n in TILES]
PACKAGE = "kp_cg_scan"


def test_scan_header_maps_to_the_compat_header() -> None:
    result = hipify_source(SOURCE.read_text(encoding="utf-8"), "hipify_cg_scan.cu")
    assert not result.diagnostics
    assert "#include <kernelpack_hip_compat.h>" in result.text
    assert "#include <cooperative_groups/scan.h>" not in result.text


@pytest.mark.toolchain
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"], ids=["wave64", "wave32"])
def test_scans_compile_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path, target: str
) -> None:
    result = hipify_source(SOURCE.read_text(encoding="utf-8"), "hipify_cg_scan.cu")
    source = tmp_path / "scan.hip"
    source.write_text(result.text)
    argv = ["hipcc", "-std=c++17", "-DUSE_ROCM", "-I", str(COMPAT_DIR), "-x", "hip"]
    argv += ["--cuda-device-only", "--no-gpu-bundle-output", f"--offload-arch={target}"]
    amd_toolchain.run([*argv, "-c", str(source)], cwd=tmp_path)
    (code_object,) = tmp_path.glob(f"*{target}*")
    kernels = {k.name for k in read_code_object(code_object.read_bytes(), "scan").kernels}
    assert set(KERNELS) <= kernels


@pytest.mark.nvcc
def test_the_same_source_compiles_as_cuda(tmp_path: Path) -> None:
    """The test source is CUDA's own API: nvcc compiles it against CUDA's cooperative_groups."""
    argv = ["nvcc", "-std=c++17", "-arch=sm_90", "-c", str(SOURCE), "-o", str(tmp_path / "s.o")]
    subprocess.run(argv, check=True, capture_output=True, text=True)


def expected(x: np.ndarray, tile: int) -> tuple[np.ndarray, np.ndarray]:
    """What CUDA's scans give thread i of a block of x (ints and floats as the kernel lays them
    out): cumulative sums and maxima within each tile, the exclusive forms shifted by one with
    a value-initialized value (0) at the tile's first thread."""
    rows = x.reshape(-1, tile).astype(np.int64)

    def exclusive(inclusive: np.ndarray) -> np.ndarray:
        shifted = np.zeros_like(inclusive)
        shifted[:, 1:] = inclusive[:, :-1]
        return shifted

    total = np.cumsum(rows, axis=1)
    peak = np.maximum.accumulate(rows, axis=1)
    ints = [total, exclusive(total), peak, exclusive(peak), total, peak]
    ints += [exclusive(total), exclusive(peak)]
    floats = [total * 0.5, exclusive(total) * 0.5]
    flat = [a.reshape(-1) for a in ints]
    return np.concatenate(flat).astype(np.int32), np.concatenate(
        [a.reshape(-1) for a in floats]
    ).astype(np.float32)


@pytest.fixture(scope="module")
def scan_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test source built by the builder (hipify, compat header, compile) for gfx942 and
    gfx1100 into an importable package folder."""
    from tests.build_project import make_project, matrix_text

    root = tmp_path_factory.mktemp("cg_scan")
    files = {"cg_scan/cg_scan.cu": SOURCE.read_text(encoding="utf-8")}
    project = make_project(root, files=files, matrix=matrix_text(("gfx942", "gfx1100")))
    site = root / "site"
    (site / PACKAGE).mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("")
    project.build(out=site / PACKAGE)
    return site


@pytest.mark.amd_emulator
@pytest.mark.toolchain
@pytest.mark.parametrize("target", ["gfx942", "gfx1100"], ids=["wave64", "wave32"])
def test_scans_on_the_emulator(
    scan_site: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    from kernelpack.emulator import Emulator

    monkeypatch.syspath_prepend(str(scan_site))
    emu = Emulator(target)
    module = emu.load("cg_scan", package=PACKAGE)
    rng = np.random.default_rng(51)
    x = rng.integers(-100, 101, BLOCK, dtype=np.int32)
    wave = 64 if target == "gfx942" else 32
    for tile in TILES:
        if tile > wave:
            continue  # a tile of 64 on wave32 spans two wavefronts (not this header's)
        ints = emu.array(np.full(8 * BLOCK, -1, np.int32))
        floats = emu.array(np.full(2 * BLOCK, np.nan, np.float32))
        module.kernel(f"cg_scan_{tile}").launch(1, BLOCK, emu.array(x), ints, floats)
        want_ints, want_floats = expected(x, tile)
        np.testing.assert_array_equal(emu.numpy(ints), want_ints, err_msg=f"tile {tile}")
        np.testing.assert_array_equal(emu.numpy(floats), want_floats, err_msg=f"tile {tile}")
