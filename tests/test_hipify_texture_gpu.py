"""The compat layer's software texture fetches against CUDA's texture unit on an NVIDIA GPU
(tests/hipify_texture_gpu.cu: every address mode x filter mode x normalized flag for tex1D, tex2D,
tex3D and tex2DLayered, float and normalized uchar4 texels, and tex1Dfetch). Where OUT is set
(the GPU machine's output folder) the differing fetches are also written to
$OUT/texture_mismatches.json, for working out the texture unit's rules offline. Every fetch equals
the unit's but tex3D's trilinear ones, held within TRILINEAR_QUANTA weight steps (docs/hipify.md
says what is measured and what is not yet known)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from buildsys.hipify import COMPAT_DIR

PROGRAM = Path(__file__).with_name("hipify_texture_gpu.cu")
# tex3D's trilinear fetches: within this many 1/256 weight steps of the texels' range of the unit's
TRILINEAR_QUANTA = 2
NVCC = ["nvcc", "-std=c++17", "-O2", "-arch=sm_90", "-DKERNELPACK_COMPAT_RENAME"]


def build(tmp_path: Path) -> Path:
    binary = tmp_path / "texture_gpu"
    subprocess.run([*NVCC, "-I", str(COMPAT_DIR), str(PROGRAM), "-o", str(binary)], check=True)
    return binary


@pytest.mark.nvcc
def test_the_comparison_compiles_under_nvcc(tmp_path: Path) -> None:
    assert build(tmp_path).is_file()


@pytest.mark.gpu
@pytest.mark.nvcc
def test_software_fetches_equal_the_texture_unit(tmp_path: Path) -> None:
    out = os.environ.get("OUT")
    folder = Path(out) if out else tmp_path
    partial = folder / "texture_mismatches.json.partial"
    run = subprocess.run(
        [str(build(tmp_path)), str(partial)], capture_output=True, text=True, check=False
    )
    print(run.stdout)
    if partial.is_file():
        os.replace(partial, folder / "texture_mismatches.json")
    if run.returncode == 0:
        return
    report = json.loads((folder / "texture_mismatches.json").read_text())
    for texture in report["textures"]:
        what = " ".join(texture[k] for k in ("kind", "format", "mode", "filter", "coordinates"))
        # every fetch but tex3D's trilinear one equals the unit's (docs/hipify.md: the rule of
        # its eight weights' rounding is not yet known)
        assert (texture["kind"], texture["filter"]) == ("tex3D", "linear"), run.stdout
        assert texture["differ"] <= report["fetches_per_texture"] // 16, what
        span = 1.0 if texture["format"].startswith("uchar") else 2.0  # the texels' range
        for _, _, theirs, ours in texture["fetches"]:
            worst = max(abs(a - b) for a, b in zip(theirs, ours, strict=True))
            assert worst <= TRILINEAR_QUANTA * span / 256, (what, theirs, ours)
