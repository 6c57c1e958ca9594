"""The host half of the software textures against HIP's own headers: describe_texture turns HIP's
channel format and texture description into the descriptor the device fetch reads (compared with
the layout written out by hand here, the one tests/test_emulator_texture.py writes too), and
refuses what CUDA's cudaCreateTextureObject refuses. Host pass only: no GPU."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys.hipify import COMPAT_DIR

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = pytest.mark.toolchain

PROGRAM = Path(__file__).with_name("hipify_texture_host.hip")
DATA, PITCH, SLICE, WIDTH, HEIGHT = 0x7F0012345600, 256, 2048, 16, 8
BORDER = (0.25, -0.5, 1.0, 2.0)
WRAP, CLAMP, MIRROR, BORDER_MODE = 0, 1, 2, 3
SIGNED, UNSIGNED, FLOAT = 0, 1, 2


def layout(
    depth: int, layers: int, kind: int, bits: int, channels: int, mode: int, *flags: int
) -> str:
    """texture_descriptor's bytes: flags are linear, normalized-float read, normalized coords."""
    packed = struct.pack(
        "<QQQ4i3i3i3i4f4x",
        DATA,
        PITCH,
        SLICE,
        WIDTH,
        HEIGHT,
        depth,
        layers,
        kind,
        bits,
        channels,
        mode,
        mode,
        mode,
        *flags,
        *BORDER,
    )
    return packed.hex()


EXPECTED = {
    "uchar4-mirror-linear": layout(1, 0, UNSIGNED, 8, 4, MIRROR, 1, 1, 1),
    "float-border-point-3d": layout(4, 0, FLOAT, 32, 1, BORDER_MODE, 0, 0, 0),
    # a float format read as "normalized float" is read as itself, as in CUDA
    "half2-wrap-layered": layout(1, 3, FLOAT, 16, 2, WRAP, 1, 0, 1),
    "short-clamp-point": layout(1, 0, SIGNED, 16, 1, CLAMP, 0, 0, 0),
    "three-channels": "refused",
    "unequal-channels": "refused",
    "linear-integers": "refused",
    "normalized-int32": "refused",
    "float8": "refused",
}


def test_descriptors_from_hip_descriptions(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    argv = ["hipcc", "-x", "hip", "--cuda-host-only", "--offload-arch=gfx942"]
    argv += ["-I", str(COMPAT_DIR), str(PROGRAM), "-o", "describe"]
    amd_toolchain.run(argv, cwd=tmp_path)
    run = amd_toolchain.run(["./describe"], cwd=tmp_path)
    got = dict(line.split(" ", 1) for line in run.stdout.splitlines())
    assert got == EXPECTED
