"""Software texture fetches (compat/kernelpack_hip_texture.h) on the AMD emulator, against a numpy
reference of the CUDA programming guide's texture-fetching appendix.

A CUDA probe, as a user writes it (tex1D, tex1Dfetch, tex2D, tex3D, tex2DLayered over texture
objects), goes through the real builder for gfx942 (wave64, no image instructions: the software
path is the automatic one) and gfx1100 (wave32, which has image instructions: a second module
defines KERNELPACK_SOFTWARE_TEXTURES, the tests' switch). Each launch fetches from many textures
at once: every address mode x filter mode x normalized-coordinates flag, over float, half,
unsigned and signed 8-bit formats (read as element type or normalized float), 1 to 4 channels,
random texels and random coordinates from a seed printed with a failure; outputs are poisoned
(0xFF) before the launch.

The reference is written from the guide's text, not from the header: wrap and mirror transform
the coordinate (frac(x); frac(x) or 1 - frac(x) by floor(x)'s parity), clamp and border act on
texel indices, linear filtering weighs T[i] and T[i + 1] at i = floor(x - 0.5) with the fraction
in 9-bit fixed point (8 fractional bits, rounded to nearest, halves up). Where the guide leaves the
arithmetic open the reference takes what CUDA's texture unit was measured to do
(tests/hipify_texture_gpu.cu's log, docs/hipify.md): 2D corner weights are multiples of 1/256 (the
upper-upper product rounded, the others what is left of each axis's weight), tex1D is a 2D fetch at
y = 0 of a texture one texel high (half border colour under border addressing with linear
filtering), the border colour of uchar texels read as normalized floats passes through half
precision to the nearest k / 255 in [0, 1], their linear fetches come back as the nearest
k / 65535, 3D corner weights are x-z ones rounded as in 2D then split along y with the upper part
rounded, and a clamped axis whose two texels are both the edge one weighs 0. The header works on
texel indices
instead (mirror reflects index i to 2N - 1 - i); the two agree exactly wherever arithmetic is
exact, so coordinates are odd multiples of 1/1024 texel (their fractions times 256 end in .25 or
.75: never a rounding tie) or, to check the unit's halves-up rounding, of 1/512 (ties; not where
mirror reflects a normalized coordinate, as reflecting turns a tie's direction) and sizes are
powers of two. A header without the 9-bit rounding is
off by up to 1/512 of a texel step, far outside the tolerance.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from buildsys.settings import ModuleFlags
from kernelpack.files.paths import user_cache_folder
from tests.test_emulator import emulator

PACKAGE = "kp_texture_probe"
WRAP, CLAMP, MIRROR, BORDER = 0, 1, 2, 3
MODES = {"wrap": WRAP, "clamp": CLAMP, "mirror": MIRROR, "border": BORDER}
SIGNED, UNSIGNED, FLOAT = 0, 1, 2

PROBE = """#include <cuda_runtime.h>
// kind 1: tex1D, 2: tex2D, 3: tex3D, 4: tex2DLayered (layer at.w), 5: tex1Dfetch (index at.x)
extern "C" __global__ void fetch_float(const cudaTextureObject_t* objects, const int* which,
                                       const int* kinds, const float4* at, float4* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const cudaTextureObject_t t = objects[which[i]];
  const float4 c = at[i];
  switch (kinds[which[i]]) {
    case 1: out[i] = tex1D<float4>(t, c.x); break;
    case 2: out[i] = tex2D<float4>(t, c.x, c.y); break;
    case 3: out[i] = tex3D<float4>(t, c.x, c.y, c.z); break;
    case 4: out[i] = tex2DLayered<float4>(t, c.x, c.y, static_cast<int>(c.w)); break;
    default: out[i] = tex1Dfetch<float4>(t, static_cast<int>(c.x)); break;
  }
}
extern "C" __global__ void fetch_uchar(const cudaTextureObject_t* objects, const int* which,
                                       const int* kinds, const float4* at, uchar4* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const cudaTextureObject_t t = objects[which[i]];
  const float4 c = at[i];
  if (kinds[which[i]] == 2) {
    tex2D(&out[i], t, c.x, c.y);
  } else {
    out[i] = tex1Dfetch<uchar4>(t, static_cast<int>(c.x));
  }
}
"""


@dataclass(frozen=True)
class Texture:
    """One texture: its texels (depth or layers, height, width, channels) and its description."""

    texels: np.ndarray  # the stored values (float32, float16, uint8 or int8)
    kind: int  # 1D, 2D, 3D, layered or fetch (the probe's kinds)
    mode: int
    linear: bool
    normalized_coords: bool
    normalized_float: bool
    border: tuple[float, float, float, float]

    @property
    def channels(self) -> int:
        return int(self.texels.shape[-1])

    def values(self) -> np.ndarray:
        """The texels as the float path reads them (float64)."""
        v = self.texels.astype(np.float64)
        if self.normalized_float and self.texels.dtype == np.uint8:
            return v / 255.0
        if self.normalized_float and self.texels.dtype == np.int8:
            return np.maximum(v / 127.0, -1.0)
        return v


def channel_format(dtype: np.dtype[Any]) -> tuple[int, int]:
    return {
        np.dtype(np.float32): (FLOAT, 32),
        np.dtype(np.float16): (FLOAT, 16),
        np.dtype(np.uint8): (UNSIGNED, 8),
        np.dtype(np.int8): (SIGNED, 8),
    }[np.dtype(dtype)]


def descriptor(texture: Texture, address: int) -> bytes:
    """kernelpack_compat::texture_descriptor's 96 bytes for texels stored densely at address."""
    kind, bits = channel_format(texture.texels.dtype)
    slices, height, width, channels = texture.texels.shape
    pitch = width * channels * bits // 8
    layered = texture.kind == 4
    return struct.pack(
        "<QQQ4i3i3i3i4f4x",
        address,
        pitch,
        pitch * height,
        width,
        height,
        1 if layered else slices,
        slices if layered else 0,
        kind,
        bits,
        channels,
        *(texture.mode,) * 3,
        int(texture.linear),
        int(texture.normalized_float),
        int(texture.normalized_coords),
        *texture.border,
    )


# ---- the guide's formulas ---------------------------------------------------------------------


def guide_coordinate(x: float, n: int, mode: int, normalized: bool) -> tuple[float, int, bool]:
    """The texel-space coordinate after the guide's coordinate transforms, the address mode left
    for the texel indices (wrap and mirror exist only for normalized coordinates: clamp
    otherwise), and whether mirror reversed the axis."""
    if not normalized:
        return x, CLAMP if mode in (WRAP, MIRROR) else mode, False
    if mode == WRAP:
        return (x - np.floor(x)) * n, WRAP, False
    if mode == MIRROR:
        f = x - np.floor(x)
        odd = int(np.floor(x)) % 2 == 1
        return (1.0 - f if odd else f) * n, CLAMP, odd
    return x * n, mode, False


def guide_index(i: int, n: int, mode: int) -> int | None:
    """Texel index i under the address mode; None: outside (border)."""
    if mode == WRAP:
        return i % n
    if mode == BORDER:
        return i if 0 <= i < n else None
    return min(max(i, 0), n - 1)


def nine_bit(fraction: float) -> float:
    """The guide's 9-bit fixed-point weight (8 fractional bits), rounded to nearest, halves up (the
    texture unit's choice: x - 0.5 = 19.259765625 weighs texel 20 by 67/256)."""
    return float(np.floor(fraction * 256.0 + 0.5)) / 256.0


def corner_weight(weights: list[float], up: list[int], reversed_: list[bool]) -> float:
    """A corner's share of a linear fetch, as the texture unit holds it: in 1/256. 1D: the axis's
    weight. 2D: the upper-upper product rounded to nearest (halves up), each other corner what is
    left of its axes' weights. 3D: x and z as in 2D, then each of those split along y, the upper
    part rounded (halves up), the lower what is left. The unit's upper is along the untransformed
    axis, so an axis that mirror reversed is turned back first (a rounding tie goes the other way
    otherwise)."""
    w = [1.0 - a if r else a for a, r in zip(weights, reversed_, strict=True)]
    u = [b ^ int(r) for b, r in zip(up, reversed_, strict=True)]

    def nearest(v: float) -> float:
        return float(np.floor(v * 256.0 + 0.5)) / 256.0

    def plane(a: float, b: float, ua: int, ub: int) -> float:
        both = nearest(a * b)
        return {(1, 1): both, (1, 0): a - both, (0, 1): b - both, (0, 0): 1.0 - a - b + both}[
            (ua, ub)
        ]

    if len(w) == 1:
        return w[0] if u[0] else 1.0 - w[0]
    if len(w) == 2:
        return plane(w[0], w[1], u[0], u[1])
    share = plane(w[0], w[2], u[0], u[2])
    upper = nearest(share * w[1])
    return upper if u[1] else share - upper


def border_colour(texture: Texture) -> np.ndarray:
    """The border colour as fetched: uchar texels read as normalized floats get it in their format
    (the texture unit rounds it to half precision first, then to the nearest k / 255 in [0, 1])."""
    border = np.array(texture.border[: texture.channels], np.float64)
    if texture.normalized_float and texture.texels.dtype == np.uint8:
        half = border.astype(np.float16).astype(np.float64)
        return np.floor(np.clip(half, 0.0, 1.0) * 255.0 + 0.5) / 255.0
    return border


def guide_fetch(texture: Texture, coords: list[float], layer: int) -> np.ndarray:
    values = texture.values()
    depth, height, width, channels = values.shape
    sizes = [width, height, depth][: len(coords)]
    border = border_colour(texture)
    axes = [
        guide_coordinate(x, n, texture.mode, texture.normalized_coords)
        for x, n in zip(coords, sizes, strict=True)
    ]

    def texel(index: list[int]) -> np.ndarray:
        at = [guide_index(i, n, m) for i, n, (_, m, _) in zip(index, sizes, axes, strict=True)]
        if any(a is None for a in at):
            return border
        x, y, z = (*at, 0, 0)[:3]
        return values[layer if layer >= 0 else z, y, x]

    if not texture.linear:
        return texel([int(np.floor(u)) for u, _, _ in axes])
    low = [int(np.floor(u - 0.5)) for u, _, _ in axes]
    weights = [nine_bit((u - 0.5) - np.floor(u - 0.5)) for u, _, _ in axes]
    # clamp addressing (and wrap or mirror of unnormalized coordinates, which clamp): where both
    # texels are the edge one, the unit weighs the axis 0 (which shows in 3D's rounding)
    clamped = texture.mode == CLAMP or (
        not texture.normalized_coords and texture.mode in (WRAP, MIRROR)
    )
    if clamped:
        weights = [
            0.0 if lo < 0 or lo >= n - 1 else w
            for lo, n, w in zip(low, sizes, weights, strict=True)
        ]
    reversed_ = [r for _, _, r in axes]
    total = np.zeros(channels)
    for corner in range(1 << len(axes)):
        up = [(corner >> a) & 1 for a in range(len(axes))]
        total += corner_weight(weights, up, reversed_) * texel(
            [lo + u for lo, u in zip(low, up, strict=True)]
        )
    if texture.normalized_float and texture.texels.dtype == np.uint8:
        return sixteen_bit(total)
    return total


def sixteen_bit(value: np.ndarray) -> np.ndarray:
    """A linear fetch of uchar texels as the texture unit returns it: the nearest k / 65535
    (halves up). The value is an integer over 256 x 255 (weights in 1/256, texels in 1/255), so
    the tie is decided on that integer."""
    whole = np.round(value * 65280.0)
    return np.floor((whole * 257.0 + 128.0) / 256.0) / 65535.0


def guide_reference(texture: Texture, at: np.ndarray) -> np.ndarray:
    """A float4 (element reads of integers: their values) for the fetch at coordinates at."""
    out = np.zeros(4)
    if texture.kind == 5:
        index = int(at[0])
        width = texture.texels.shape[2]
        if 0 <= index < width:
            out[: texture.channels] = texture.values()[0, 0, index]
        return out
    dims = {1: 1, 2: 2, 3: 3, 4: 2}[texture.kind]
    layer = int(at[3]) if texture.kind == 4 else -1
    coords = [float(c) for c in at[:dims]]
    if texture.kind == 1:  # the texture unit's tex1D: y = 0 of a texture one texel high
        coords.append(0.0)
    out[: texture.channels] = guide_fetch(texture, coords, layer)
    return out


# ---- random textures and coordinates ----------------------------------------------------------

SHAPES = {1: (1, 1, 16), 2: (1, 8, 16), 3: (4, 4, 8), 4: (3, 8, 4), 5: (1, 1, 32)}


def random_texels(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def coordinate(
    rng: np.random.Generator, n: int, normalized: bool, size: int, ties: bool
) -> np.ndarray:
    """Odd multiples of 1/1024 texel over [-n/2 - 2, 3n/2 + 2) texels (normalized: / n); with ties,
    every fourth an odd multiple of 1/512 instead, whose weight is a rounding tie (x - 0.5 ends in
    an odd multiple of 1/512: the texture unit rounds it up)."""
    steps = rng.integers(-(n // 2 + 2) * 512, (3 * n // 2 + 2) * 512, size)
    u = (2 * steps + 1) / 1024.0
    if ties:
        u[::4] = (2 * (steps[::4] // 2) + 1) / 512.0
    return (u / n if normalized else u).astype(np.float32)


def float_textures(rng: np.random.Generator) -> list[Texture]:
    """Every address mode x filter x normalized flag for each fetch kind, the formats taken in
    turn (element reads of float and half, normalized-float reads of uchar and char)."""
    formats = [(np.float32, False), (np.float16, False), (np.uint8, True), (np.int8, True)]
    textures = []
    turn = 0
    for kind in (1, 2, 3, 4):
        for mode in MODES.values():
            for linear in (False, True):
                for normalized in (False, True):
                    dtype, normalized_float = formats[turn % len(formats)]
                    channels = (1, 2, 4)[turn % 3]
                    turn += 1
                    b = rng.uniform(-1, 1, 4).astype(np.float32)
                    border = (float(b[0]), float(b[1]), float(b[2]), float(b[3]))
                    texels = random_texels(rng, (*SHAPES[kind], channels), dtype)
                    textures.append(
                        Texture(texels, kind, mode, linear, normalized, normalized_float, border)
                    )
    for dtype, normalized_float in formats:
        texels = random_texels(rng, (*SHAPES[5], 4), dtype)
        textures.append(Texture(texels, 5, CLAMP, False, False, normalized_float, (0, 0, 0, 0)))
    return textures


def uchar_textures(rng: np.random.Generator) -> list[Texture]:
    """uchar4 read as itself (point only): tex2D in every address mode, both coordinate kinds."""
    textures = [
        Texture(
            random_texels(rng, (*SHAPES[2], 4), np.uint8),
            2,
            mode,
            False,
            normalized,
            False,
            (0.0, 0.0, 0.0, 0.0),
        )
        for mode in MODES.values()
        for normalized in (False, True)
    ]
    textures.append(
        Texture(
            random_texels(rng, (*SHAPES[5], 4), np.uint8),
            5,
            CLAMP,
            False,
            False,
            False,
            (0.0, 0.0, 0.0, 0.0),
        )
    )
    return textures


def fetches(rng: np.random.Generator, textures: list[Texture], per: int) -> np.ndarray:
    """per fetch coordinates (x, y, z, layer) for each texture, in texture order."""
    rows = []
    for texture in textures:
        slices, height, width, _ = texture.texels.shape
        at = np.zeros((per, 4), np.float32)
        if texture.kind == 5:
            at[:, 0] = rng.integers(-2, width + 2, per)
        else:
            sizes = [width, height, slices][: {1: 1, 2: 2, 3: 3, 4: 2}[texture.kind]]
            # no ties under mirror addressing of normalized coordinates: the guide reflects the
            # coordinate, which turns a tie rounded up into one rounded down (the texture unit,
            # like the header, reflects the texel indices instead)
            ties = not (texture.normalized_coords and texture.mode == MIRROR)
            for a, n in enumerate(sizes):
                at[:, a] = coordinate(rng, n, texture.normalized_coords, per, ties)
            if texture.kind == 4:
                at[:, 3] = rng.integers(0, slices, per)
        rows.append(at)
    return np.concatenate(rows)


# ---- on the emulator --------------------------------------------------------------------------

RUNS = [("gfx942", "texture"), ("gfx1100", "texture_forced")]


@pytest.fixture(scope="module")
def probe_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe built by the builder for gfx942 and gfx1100, as two modules: ``texture`` (the
    automatic choice) and ``texture_forced`` (KERNELPACK_SOFTWARE_TEXTURES defined)."""
    from tests.build_project import make_project, matrix_text

    root = tmp_path_factory.mktemp("texture_probe")
    files = {"texture/texture.cu": PROBE, "texture_forced/texture.cu": PROBE}
    project = make_project(root, files=files, matrix=matrix_text(("gfx942", "gfx1100")))
    site = root / "site"
    (site / PACKAGE).mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("")
    forced = {"texture_forced": ModuleFlags(defines=("KERNELPACK_SOFTWARE_TEXTURES",))}
    project.build(out=site / PACKAGE, cache_dir=user_cache_folder() / "build", modules=forced)
    return site


def launch(
    target: str,
    module_name: str,
    site: Path,
    monkeypatch: pytest.MonkeyPatch,
    kernel: str,
    textures: list[Texture],
    at: np.ndarray,
    out_dtype: Any,
) -> np.ndarray:
    """Every texture's texels and descriptor in emulator memory, one launch over all fetches."""
    monkeypatch.syspath_prepend(str(site))
    emu = emulator(target)
    module = emu.load(module_name, package=PACKAGE)
    texel_arrays = [emu.array(t.texels) for t in textures]
    blob = b"".join(descriptor(t, a.address) for t, a in zip(textures, texel_arrays, strict=True))
    descriptors = emu.array(np.frombuffer(blob, np.uint8))
    objects = emu.array(
        np.array([descriptors.address + 96 * k for k in range(len(textures))], np.uint64)
    )
    per = at.shape[0] // len(textures)
    which = emu.array(np.repeat(np.arange(len(textures), dtype=np.int32), per))
    kinds = emu.array(np.array([t.kind for t in textures], np.int32))
    n = at.shape[0]
    out = emu.empty((n, 4), out_dtype)
    module.kernel(kernel).launch(
        (n + 127) // 128, 128, objects, which, kinds, emu.array(at), out, n
    )
    assert all(a.guards_intact() for a in texel_arrays), "a fetch wrote outside its texels"
    return emu.numpy(out)


def describe(texture: Texture) -> str:
    mode = next(name for name, value in MODES.items() if value == texture.mode)
    kind = {1: "tex1D", 2: "tex2D", 3: "tex3D", 4: "tex2DLayered", 5: "tex1Dfetch"}[texture.kind]
    return (
        f"{kind} {texture.texels.dtype}x{texture.channels} {mode} "
        f"{'linear' if texture.linear else 'point'} "
        f"{'normalized' if texture.normalized_coords else 'texel'} coords"
        f"{', normalized float' if texture.normalized_float else ''}"
    )


@pytest.mark.amd_emulator
@pytest.mark.toolchain
@pytest.mark.parametrize(("target", "module_name"), RUNS, ids=[t for t, _ in RUNS])
def test_float_fetches_equal_the_guides_formulas(
    target: str, module_name: str, probe_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    textures = float_textures(rng)
    per = 24
    at = fetches(rng, textures, per)
    got = launch(
        target, module_name, probe_site, monkeypatch, "fetch_float", textures, at, np.float32
    )
    bad = []
    for k, texture in enumerate(textures):
        for row in range(k * per, (k + 1) * per):
            want = guide_reference(texture, at[row])
            # uchar read as normalized floats is k / 255 or (linear) k / 65535: equal to float
            # precision, so that a value off by one 1/65535 step fails
            exact = texture.texels.dtype == np.uint8
            rtol, atol = (0.0, 1e-7) if exact else (1e-5, 2e-6)
            if not np.allclose(got[row], want, rtol=rtol, atol=atol):
                bad.append(
                    f"{describe(texture)} at {at[row].tolist()}: got {got[row].tolist()}, "
                    f"guide {want.tolist()}"
                )
                break
    assert not bad, f"{target} (seed {seed}), {len(bad)} of {len(textures)} textures:\n  " + (
        "\n  ".join(bad)
    )


@pytest.mark.amd_emulator
@pytest.mark.toolchain
@pytest.mark.parametrize(("target", "module_name"), RUNS, ids=[t for t, _ in RUNS])
def test_element_reads_of_uchar4_are_the_texels(
    target: str, module_name: str, probe_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    textures = uchar_textures(rng)
    per = 24
    at = fetches(rng, textures, per)
    got = launch(
        target, module_name, probe_site, monkeypatch, "fetch_uchar", textures, at, np.uint8
    )
    bad = []
    for k, texture in enumerate(textures):
        rows = range(k * per, (k + 1) * per)
        want = np.array([guide_reference(texture, at[r]) for r in rows]).astype(np.uint8)
        if not (got[k * per : (k + 1) * per] == want).all():
            bad.append(describe(texture))
    assert not bad, f"{target} (seed {seed}): " + "; ".join(bad)
