"""The compat header's helpers, executed on the AMD emulator at wave64 and wave32, against CUDA.

tests/compat_probe.py writes probe kernels, CUDA source as a user writes it, that call every
helper buildsys/hipify/compat/kernelpack_hip_compat.h defines (and the warp intrinsics the
translator rewrites to HIP's: shuffles at widths 32, 16 and 4, ballot, any, all, activemask). The
real builder translates and compiles them for gfx942 and gfx950 (wave64) and gfx1100 and gfx1201
(wave32) into a package the emulator loads; each kernel writes one row of results per call, so
seven launches a target check them all. Inputs are random (edge words and patterns mixed in) from
a seed printed with a failure; outputs are poisoned (0xFF bytes) before each launch, and a result
left unwritten shows as a mismatch. The references are CUDA's documented semantics, computed
exactly on the host (Python integers, fractions, numpy), in tests/compat_probe.py.

The list of helpers is read from the header itself (compat_probe.helpers_defined), so a helper
added without a check here fails test_every_helper_of_the_header_is_checked.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from buildsys.hipify.tables import COMPAT_FUNCTIONS
from kernelpack.files.paths import user_cache_folder
from tests import compat_probe as cp
from tests.test_emulator import RUN_TARGETS, emulator

PACKAGE = "kp_compat_probe"
WAVE = {"gfx942": 64, "gfx950": 64, "gfx1100": 32, "gfx1201": 32}
POISON32 = 0xFFFFFFFF
SECONDS: dict[str, float] = {}  # "kernel target" -> wall time of its launch

# Which probe rows check each helper the header defines (the keys must be exactly
# helpers_defined()): the words kernel's rows by name, the other kernels' by what they call.
COVERAGE: dict[str, str] = {
    **{name: "words" for name in cp.SIMD_NAMES},
    "__dp4a": "words: int, unsigned, char4, uchar4",
    "__dp2a_lo": "words: int, unsigned",
    "__dp2a_hi": "words: int, unsigned",
    "min": "words: (int, unsigned), (unsigned, int), long and long long pairs",
    "max": "words: (int, unsigned), (unsigned, int), long and long long pairs",
    "__hmax_nan": "halves",
    "__hmin_nan": "halves",
    **{
        f"__{kind}2bfloat16_rn": "halves"
        for kind in ("int", "uint", "short", "ushort", "ll", "ull")
    },
    **{
        f"ptx::{name}": "ptx"
        for name in (
            "cvt_rn_f16_f32",
            "cvt_f32_f16",
            "cvt_rn_bf16_f32",
            "cvt_f32_bf16",
            "cvt_rn_f16x2_f32",
            "cvt_rn_bf16x2_f32",
            "mov_b32_pack",
            "mov_b32_unpack",
            "mov_b16",
            "mov_b32",
        )
    },
    "__float2bfloat16_rn": "ptx: beside cvt.rn.bf16.f32",
    "__float2bfloat162_rn": "ptx: beside cvt.rn.bf16.f32",
    "make_bfloat162": "ptx: the 16-bit inputs paired",
    "htanh_approx": "ptx: within one half ulp of tanh",
    "h2tanh_approx": "ptx: within one half ulp of tanh, both halves",
    **{name.split("(")[0]: "warp: full mask, two 16-lane masks" for name, _, _ in cp.REDUCTIONS},
    **{
        f"{op}(bf16)": "warp: widths 32, 16, 4"
        for op in (
            "__shfl",
            "__shfl_xor",
            "__shfl_up",
            "__shfl_down",
        )
    },
    "cg::reduce": "tiles, tile64: sizes 2-64, six operators, float plus",
    "cg::inclusive_scan": "tiles: sizes 8, 32",
    "cg::exclusive_scan": "tiles: sizes 8, 32",
    "cg::block_tile_memory": "tiles: this_thread_block(scratch)",
    **{
        f"tiled_partition<{size}>": "multi_warp_tiles: cg::reduce (cannot run on the emulator)"
        for size in (64, 128, 256)
    },
    "tiled_partition<512>": "not run: a block of 512 (the same code as 128 and 256)",
    **{f"tile.shfl<{size}>": "tiles: int4, float2, __half, bf16" for size in (16, 32)},
    **{f"tile.shfl<{size}>": "not run: the same template as 16 and 32" for size in (2, 4, 8)},
    "tile.shfl<64>": "not run: the same template as 16 and 32 (wave64 only)",
    "atomicCAS": "atomics: 16-bit, neighbours sharing a word",
    "atomicAdd": "atomics: __half, bf16, __half2, bf16x2; contended sums",
    **{name: "memory: uint4, unsigned, bf16" for name in (*cp.LOADS, *cp.STORES)},
    **{
        name: "memory: 16, 8, 4 bytes, zfill"
        for name in (
            "__pipeline_memcpy_async",
            "__pipeline_commit",
            "__pipeline_wait_prior",
        )
    },
    "__trap": "trap_unless: compiled, not taken",
}


def test_every_helper_of_the_header_is_checked() -> None:
    defined = cp.helpers_defined()
    assert defined >= COMPAT_FUNCTIONS  # the translator's own list, an independent one
    assert set(COVERAGE) - defined == set(), "checks of helpers the header no longer defines"
    assert defined - set(COVERAGE) == set(), "helpers of the header without a check"


def test_an_unknown_helper_macro_is_not_overlooked() -> None:
    with pytest.raises(ValueError, match="unknown helper macro KP_NEW_KIND"):
        cp.helpers_defined(cp.HEADER.read_text(encoding="utf-8") + "KP_NEW_KIND(__vfoo4)\n")


# ---- the probe on the emulator ----------------------------------------------------------------


@pytest.fixture(scope="module")
def probe_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The probe built by the builder (hipify, compat header, compile) for the four emulated
    targets into an importable package folder."""
    from tests.build_project import make_project, matrix_text

    root = tmp_path_factory.mktemp("compat_probe")
    files = {"compat_probe/compat_probe.cu": cp.PROBE_SOURCE}
    project = make_project(root, files=files, matrix=matrix_text(tuple(RUN_TARGETS)))
    site = root / "site"
    (site / PACKAGE).mkdir(parents=True)
    (site / PACKAGE / "__init__.py").write_text("")
    # the user's compile cache, as `nox -s amd` builds with: a warm run compiles nothing
    project.build(out=site / PACKAGE, cache_dir=user_cache_folder() / "build")
    return site


@pytest.fixture(scope="module", autouse=True)
def _print_timings() -> Any:
    yield
    if SECONDS:
        total = sum(SECONDS.values())
        print(f"\ncompat probe launches: {total:.1f} s in all (wall time, this machine)")
        for what, seconds in sorted(SECONDS.items()):
            print(f"  {what}: {seconds:.2f} s")


class Probe:
    """The probe module loaded on one target, launching with poisoned outputs and timing."""

    def __init__(self, target: str, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.syspath_prepend(str(site))
        self.target = target
        self.wave = WAVE[target]
        self.emu = emulator(target)
        self.module = self.emu.load("compat_probe", package=PACKAGE)

    def launch(self, kernel: str, grid: int, block: int, *args: Any) -> None:
        started = time.perf_counter()
        self.module.kernel(kernel).launch(grid, block, *args)
        SECONDS[f"{kernel} {self.target}"] = time.perf_counter() - started


@pytest.fixture(params=RUN_TARGETS)
def probe(
    request: pytest.FixtureRequest, probe_site: Path, monkeypatch: pytest.MonkeyPatch
) -> Probe:
    return Probe(request.param, probe_site, monkeypatch)


def compare_rows(got: np.ndarray, want: np.ndarray, names: list[str], what: str, seed: int) -> None:
    """Row by row, exactly: one line per row with mismatches (count, first element)."""
    bad = []
    for row, name in enumerate(names):
        wrong = np.flatnonzero(got[row] != want[row])
        if wrong.size:
            k = int(wrong[0])
            bad.append(
                f"{name}: {wrong.size} of {got.shape[1]} (element {k}: got {int(got[row, k]):#x}, "
                f"CUDA {int(want[row, k]):#x})"
            )
    assert not bad, f"{what} (seed {seed}):\n  " + "\n  ".join(bad)


EDGE_BYTES = [0x00, 0x01, 0x7F, 0x80, 0x81, 0xFE, 0xFF, 0x40]


def mixed_words(rng: np.random.Generator, n: int) -> np.ndarray:
    """n 32-bit words: the first half made of edge bytes, the rest uniform."""
    edge = rng.choice(np.array(EDGE_BYTES, np.uint32), (n // 2, 4))
    words = edge[:, 0] | edge[:, 1] << 8 | edge[:, 2] << 16 | edge[:, 3] << 24
    return np.concatenate([words, rng.integers(0, 2**32, n - n // 2, dtype=np.uint32)])


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_simd_dot_and_mixed_min_max(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 256
    a, b = mixed_words(rng, n), mixed_words(rng, n)
    rng.shuffle(b)
    c = rng.integers(0, 2**32, n, dtype=np.uint32)
    c[: n // 4] = rng.choice(np.array([0, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], np.uint32), n // 4)
    out = probe.emu.empty((len(cp.WORD_ROWS), n), np.uint32)
    emu = probe.emu
    probe.launch("words", 2, 128, emu.array(a), emu.array(b), emu.array(c), out, n)
    names = [name for name, _ in cp.WORD_ROWS]
    want = np.array(
        [
            [
                cp.word_reference(name, int(x), int(y), int(z))
                for x, y, z in zip(a, b, c, strict=True)
            ]
            for name in names
        ],
        np.uint32,
    )
    compare_rows(emu.numpy(out), want, names, f"words on {probe.target}", seed)


BF16_EDGES = [
    0x0000,
    0x8000,
    0x7F80,
    0xFF80,
    0x7FC0,
    0x7F81,
    0xFFFF,
    0x0001,
    0x8001,
    0x3F80,
    0xBF80,
    0x007F,
    0x7F7F,
    0xFF7F,
]


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_bf16_max_min_and_integer_conversions(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 256
    a = rng.integers(0, 2**16, n, dtype=np.uint16)
    b = rng.integers(0, 2**16, n, dtype=np.uint16)
    edges = np.array(BF16_EDGES, np.uint16)
    a[: edges.size**2 // 2] = np.repeat(edges, edges.size)[: edges.size**2 // 2]
    b[: edges.size**2 // 2] = np.tile(edges, edges.size)[: edges.size**2 // 2]
    # integers near bf16's rounding points (k * 2^s + 2^(s-1) + {-1, 0, 1}) and at random widths
    shifts = rng.integers(1, 62, n)
    ints = (rng.integers(128, 256, n) << shifts) + (1 << (shifts - 1)) + rng.integers(-1, 2, n)
    ints = ints.astype(np.int64) * rng.choice([-1, 1], n)
    ints[::4] = rng.integers(-(2**63), 2**63 - 1, n // 4, dtype=np.int64, endpoint=True)
    ints[1::8] = rng.integers(-70000, 70000, n // 8)
    emu = probe.emu
    out = emu.empty((8, n), np.uint16)
    probe.launch("halves", 2, 128, emu.array(a), emu.array(b), emu.array(ints), out, n)

    def casts(v: int) -> list[int]:
        low32, low16 = v & 0xFFFFFFFF, v & 0xFFFF
        return [
            low32 - (1 << 32) if low32 >> 31 else low32,  # (int)
            low32,
            low16 - (1 << 16) if low16 >> 15 else low16,  # (short)
            low16,
            v,
            v & (2**64 - 1),
        ]

    want = np.zeros((8, n), np.uint16)
    for i in range(n):
        want[0, i] = cp.bf16_max_min_nan(int(a[i]), int(b[i]), True)
        want[1, i] = cp.bf16_max_min_nan(int(a[i]), int(b[i]), False)
        want[2:, i] = [cp.int_to_bf16(x) for x in casts(int(ints[i]))]
    names = ["__hmax_nan", "__hmin_nan"]
    names += [f"__{k}2bfloat16_rn" for k in ("int", "uint", "short", "ushort", "ll", "ull")]
    got = emu.numpy(out)
    # the emulator flushes float32 subnormals on the host (DAZ), and bf16's subnormals widen to
    # them: max and min of those pairs are not compared here (the NVIDIA test compares them)
    flushed = bf16_subnormal(a) | bf16_subnormal(b)
    got[:2, flushed] = want[:2, flushed]
    compare_rows(got, want, names, f"halves on {probe.target}", seed)


def bf16_subnormal(bits: np.ndarray) -> np.ndarray:
    return ((bits & 0x7F80) == 0) & ((bits & 0x7F) != 0)


def float_bits(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.float32).view(np.uint32)


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_ptx_conversions_and_moves(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 256
    # normal float32 values over half's and bf16's ranges (the emulator flushes float32
    # subnormals), specials, and values on half's rounding points and overflow edge
    f = (rng.standard_normal(n) * 10.0 ** rng.integers(-9, 7, n)).astype(np.float32)
    f[:16] = [
        0.0,
        -0.0,
        np.inf,
        -np.inf,
        np.nan,
        65504,
        65519.99,
        65520,
        -65536,
        6e-8,
        3e-8,
        1e-6,
        2.0**-24,
        2.0**-25,
        3.4e38,
        -1.0 - 2.0**-11,
    ]
    h = rng.integers(0, 2**16, n, dtype=np.uint16)
    nan16 = ((h & 0x7C00) == 0x7C00) & ((h & 0x3FF) != 0) | ((h & 0x7F80) == 0x7F80) & (
        (h & 0x7F) != 0
    )
    h[nan16] = h[nan16] & 0x3FFF  # no NaN in either format: NaN widening is not compared
    w = rng.integers(0, 2**32, n, dtype=np.uint32)
    emu = probe.emu
    out = emu.empty((len(cp.PTX_ROWS), n), np.uint32)
    probe.launch("ptx", 2, 128, emu.array(f), emu.array(h), emu.array(w), out, n)
    fb = float_bits(f)
    partner = np.arange(n) ^ 1
    tanh = [half_tanh(int(x)) for x in h]
    half = [cp.float_to(int(x), cp.HALF) for x in fb]
    bf16 = [cp.float_to(int(x), cp.BF16) for x in fb]
    want = np.array(
        [
            half,
            [cp.widen(int(x), cp.HALF) for x in h],
            bf16,
            [cp.widen(int(x), cp.BF16) for x in h],
            [half[i] << 16 | half[partner[i]] for i in range(n)],
            [bf16[i] << 16 | bf16[partner[i]] for i in range(n)],
            [int(h[i]) | int(h[partner[i]]) << 16 for i in range(n)],
            w & 0xFFFF,
            w >> 16,
            h,
            fb,
            w,
            bf16,
            [b << 16 | b for b in bf16],
            [int(h[i]) | int(h[partner[i]]) << 16 for i in range(n)],
            tanh,
            [tanh[i] | tanh[partner[i]] << 16 for i in range(n)],
        ],
        np.uint32,
    )
    got = emu.numpy(out)
    # a half NaN keeps the hardware's conversion (the header says so): any half NaN is right
    for row, shift, source_nan in (
        (0, 0, np.isnan(f)),
        (4, 16, np.isnan(f)),
        (4, 0, np.isnan(f[partner])),
    ):
        sixteen = (got[row] >> shift) & 0xFFFF
        accept = source_nan & ((sixteen & 0x7FFF) > cp.HALF.inf)
        keep = np.uint32(~(0xFFFF << shift) & 0xFFFFFFFF)
        got[row][accept] = (got[row][accept] & keep) | (want[row][accept] & ~keep)
    # the approximate tanh may be one half ulp off the rounded tanh, each half on its own
    for row in (15, 16):
        for shift in (0, 16) if row == 16 else (0,):
            mine, exact = (got[row] >> shift) & 0xFFFF, (want[row] >> shift) & 0xFFFF
            close = np.abs(half_order(mine) - half_order(exact)) <= 1
            keep = np.uint32(~(0xFFFF << shift) & 0xFFFFFFFF)
            got[row][close] = (got[row][close] & keep) | (want[row][close] & ~keep)
    compare_rows(got, want, cp.PTX_ROWS, f"ptx on {probe.target}", seed)


def half_tanh(bits: int) -> int:
    """tanh of a (non-NaN) half, rounded to half: the exact value's nearest neighbour."""
    value = math.tanh(float(cp.HALF.value(bits)))
    return (bits & 0x8000) if value == 0 else cp.HALF.round(Fraction(value))


def half_order(bits: np.ndarray) -> np.ndarray:
    """16-bit float patterns as integers in the order of their values (-0 and +0 alike)."""
    magnitude = (bits & 0x7FFF).astype(np.int64)
    return np.where(bits & 0x8000, -magnitude, magnitude)


def by_groups(values: np.ndarray, size: int, reduce: Callable[[np.ndarray], int]) -> np.ndarray:
    """Each element's group of ``size`` consecutive threads, reduced and repeated."""
    groups = values.reshape(-1, size)
    return np.repeat(np.array([reduce(g) for g in groups], np.uint32), size)


def warp_reference(
    v: np.ndarray, src: np.ndarray, p: np.ndarray, masks: np.ndarray, wave: int
) -> tuple[np.ndarray, list[str]]:
    """The warp kernel's rows as CUDA gives them; ballot, any, all and activemask over the
    wavefront (on wave32 CUDA's 32-lane warp; on wave64 the translator's documented meaning,
    the whole wavefront of 64 lanes)."""
    n = v.size
    rows: list[np.ndarray] = []
    names: list[str] = []
    for name, _, reduce in cp.REDUCTIONS:
        rows.append(by_groups(v, 32, reduce))
        names.append(f"{name} full mask")
    for name, _, reduce in cp.REDUCTIONS:
        row = np.full(n, POISON32, np.uint32)
        for warp in range(n // 32):
            for named in (masks[warp], ~masks[warp] & POISON32):
                lanes = [warp * 32 + lane for lane in range(32) if named >> lane & 1]
                row[lanes] = reduce(v[lanes])
        rows.append(row)
        names.append(f"{name} two 16-lane masks")
    for kind, values in (("bf16", v & 0xFFFF), ("int", v)):
        for width, lane_mask, delta in cp.SHUFFLE_SHAPES:
            rows += [
                cp.shfl(values, src.astype(np.int64), width),
                cp.shfl_xor(values, lane_mask, width),
                cp.shfl_up(values, delta, width),
                cp.shfl_down(values, delta, width),
            ]
            names += [
                f"__shfl{op}_sync({kind}, width {width})" for op in ("", "_xor", "_up", "_down")
            ]

    def wave_masks(bits: np.ndarray) -> np.ndarray:
        per_wave = bits.reshape(-1, wave).astype(np.uint64) << np.arange(wave, dtype=np.uint64)
        return np.repeat(np.bitwise_or.reduce(per_wave, axis=1), wave)

    ballot = wave_masks(p & 1)
    rows += [(ballot & 0xFFFFFFFF).astype(np.uint32), (ballot >> 32).astype(np.uint32)]
    rows.append(by_groups((p & 4) != 0, wave, lambda g: int(g.any())))
    rows.append(by_groups((p & 8) != 0, wave, lambda g: int(g.all())))
    active = wave_masks((p & 2) >> 1)
    inactive = (p & 2) == 0
    rows += [
        np.where(inactive, POISON32, active & 0xFFFFFFFF).astype(np.uint32),
        np.where(inactive, POISON32, active >> 32).astype(np.uint32),
    ]
    names += ["__ballot_sync lo", "__ballot_sync hi", "__any_sync", "__all_sync"]
    names += ["__activemask lo", "__activemask hi"]
    return np.array(rows, np.uint32), names


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_warp_reductions_shuffles_and_votes(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 128
    v = rng.integers(0, 2**32, n, dtype=np.uint32)
    v[::3] &= 0x8000FFFF  # small magnitudes of both signs beside full-width words
    src = rng.integers(0, 64, n, dtype=np.uint32)
    p = rng.integers(0, 16, n, dtype=np.uint32)
    p[:64] |= 8  # the first 64 lanes all true: __all_sync true at either width
    p[64:128] &= ~np.uint32(4)  # the last 64 all false: __any_sync false
    # 16 lanes of each warp named, the other 16 reducing over the complement at the same call:
    # every lane takes part (the emulator's ds_bpermute reads inactive lanes' addresses and
    # crashes on them, so a mask that leaves lanes idle cannot run there)
    masks = np.array(
        [sum(1 << int(k) for k in rng.choice(32, 16, replace=False)) for _ in range(n // 32)],
        np.uint32,
    )
    emu = probe.emu
    out = emu.empty((cp.WARP_ROW_COUNT, n), np.uint32)
    probe.launch("warp", 1, n, emu.array(v), emu.array(src), emu.array(p), emu.array(masks), out, n)
    want, names = warp_reference(v, src, p, masks, probe.wave)
    compare_rows(emu.numpy(out), want, names, f"warp on {probe.target}", seed)


def tiles_reference(
    v: np.ndarray, src: np.ndarray, f: np.ndarray, sizes: list[int], extras: bool
) -> tuple[np.ndarray, list[str], np.ndarray]:
    """CUDA's cg::reduce, scans and tile shuffles of a tiles kernel, and its float sums."""
    n = v.size
    rows: list[np.ndarray] = []
    names: list[str] = []
    for size in sizes:
        for op, _, reduce in cp.CG_OPS:
            rows.append(by_groups(v, size, reduce))
            names.append(f"cg::reduce tile {size} {op}")
    for size in cp.SCAN_SIZES if extras else []:
        inclusive = np.cumsum(v.reshape(-1, size).astype(np.uint64), axis=1) & 0xFFFFFFFF
        exclusive = np.zeros_like(inclusive)
        exclusive[:, 1:] = inclusive[:, :-1]
        rows += [inclusive.reshape(-1), exclusive.reshape(-1)]
        names += [f"cg::inclusive_scan tile {size}", f"cg::exclusive_scan tile {size}"]
    lane = np.arange(n)
    for size in cp.TILE_SHUFFLE_SIZES if extras else []:
        start = lane - lane % size
        source = start + src.astype(np.int64) % size
        quad = [v, src, v ^ src, ~v]
        rows += [q[source] for q in quad]
        other = start + (lane % size ^ 3)
        rows += [float_bits(f[other]), float_bits(-f[other])]
        rows.append(np.where(lane % size >= 2, src[np.maximum(lane - 2, 0)], src) & 0xFFFF)
        down = lane % size + 5 < size
        rows.append(np.where(down, v[np.minimum(lane + 5, n - 1)], v) & 0xFFFF)
        names += [f"tile<{size}>.shfl(int4).{c}" for c in "xyzw"]
        names += [f"tile<{size}>.shfl_xor(float2).{c}" for c in "xy"]
        names += [f"tile<{size}>.shfl_up(__half)", f"tile<{size}>.shfl_down(bf16)"]
    sums = np.array([np.repeat(f.reshape(-1, s).sum(axis=1), s) for s in sizes], np.float32)
    return np.array(rows, np.uint32), names, sums


def check_tiles(probe: Probe, kernel: str) -> None:
    """One tiles kernel on a block of 256 threads against CUDA's results."""
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    sizes, extras = cp.TILE_KERNELS[kernel]
    n = 256
    v = rng.integers(0, 2**32, n, dtype=np.uint32)
    v[::3] &= 0x8000FFFF
    src = rng.integers(0, 2**16, n, dtype=np.uint32)
    f = (rng.integers(-100, 101, n) * 0.5).astype(np.float32)  # exact sums in any order
    emu = probe.emu
    out = emu.empty((cp.tile_rows(sizes, extras), n), np.uint32)
    fout = emu.empty((len(sizes), n), np.float32)
    probe.launch(kernel, 1, n, emu.array(v), emu.array(src), emu.array(f), out, fout, n)
    want, names, sums = tiles_reference(v, src, f, sizes, extras)
    what = f"{kernel} on {probe.target}"
    compare_rows(emu.numpy(out), want, names, what, seed)
    sum_names = [f"cg::reduce tile {s} plus<float>" for s in sizes]
    compare_rows(float_bits(emu.numpy(fout)), float_bits(sums), sum_names, what, seed)


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_cooperative_groups_tiles(probe: Probe) -> None:
    """Tiles of 2 to 32 threads everywhere; of 64 where that is one wavefront (HIP's own tile)."""
    check_tiles(probe, "tiles")
    if probe.wave == 64:
        check_tiles(probe, "tile64")


MULTI_WARP_CASES = [
    *((target, "multi_warp_tiles") for target in RUN_TARGETS),
    *((target, "tile64") for target in RUN_TARGETS if WAVE[target] == 32),
]


@pytest.mark.amd_emulator
@pytest.mark.toolchain
@pytest.mark.xfail(
    run=False,
    reason="the emulator cannot run the multi-warp tiles: their barrier reads its generation "
    "through a FLAT load of the shared aperture (SIGSEGV: the emulator maps no LDS aperture), and "
    "it runs each wave until s_barrier, so waves spinning on one another would never end",
)
@pytest.mark.parametrize(("target", "kernel"), MULTI_WARP_CASES)
def test_multi_warp_tiles(
    target: str, kernel: str, probe_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_tiles(Probe(target, probe_site, monkeypatch), kernel)


def addends16(rng: np.random.Generator, n: int, fmt: cp.Format) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of random finite 16-bit floats of ``fmt``, the first few special: inf + -inf (NaN),
    inf + 1, NaN + 1, +0 + -0, -0 + -0, the largest + itself (overflow)."""
    pair = rng.integers(0, 2**16, (2, n), dtype=np.uint16)
    nan = (pair & 0x7FFF) > fmt.inf
    pair[nan] ^= np.uint16(1 << (fmt.mantissa + fmt.exponent - 1))  # a finite value instead
    if fmt is cp.BF16:  # sums that stay normal in float32, which the emulator flushes (DAZ, FTZ)
        tiny = (pair & 0x7F80) < (24 << 7)
        pair[tiny] |= np.uint16(24 << 7)
    one, largest = fmt.round(cp.Fraction(1)), fmt.inf - 1
    pair[0, :6] = [fmt.inf, fmt.inf, fmt.inf | 1, 0, 0x8000, largest]
    pair[1, :6] = [fmt.inf | 0x8000, one, one, 0x8000, 0x8000, largest]
    return pair[0], pair[1]


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_16_bit_atomics(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 128
    cas = rng.integers(0, 2**16, n, dtype=np.uint16)
    compare = np.where(
        rng.integers(0, 2, n) == 1, cas, cas ^ rng.integers(1, 2**16, n).astype(np.uint16)
    )
    value = rng.integers(0, 2**16, n, dtype=np.uint16)
    h, hx = addends16(rng, n, cp.HALF)
    bh, bx = addends16(rng, n, cp.BF16)
    h2, h2x = (x.view(np.uint32) for x in addends16(rng, n, cp.HALF))
    b2, b2x = (x.view(np.uint32) for x in addends16(rng, n, cp.BF16))
    emu = probe.emu
    d = {
        name: emu.array(x)
        for name, x in {
            "cas": cas,
            "h": h,
            "bh": bh,
            "h2": h2,
            "b2": b2,
            "sums": np.zeros(4, np.uint16),
        }.items()
    }
    old = emu.empty((5, n), np.uint32)
    probe.launch(
        "atomics",
        1,
        n,
        d["cas"],
        emu.array(compare),
        emu.array(value),
        d["h"],
        emu.array(hx),
        d["bh"],
        emu.array(bx),
        d["h2"],
        emu.array(h2x),
        d["b2"],
        emu.array(b2x),
        d["sums"],
        old,
        n,
    )

    def pairs(a: np.ndarray, b: np.ndarray, fmt: cp.Format) -> np.ndarray:
        return np.array(
            [
                cp.add16(int(x) & 0xFFFF, int(y) & 0xFFFF, fmt)
                | cp.add16(int(x) >> 16, int(y) >> 16, fmt) << 16
                for x, y in zip(a, b, strict=True)
            ],
            np.uint32,
        )

    finals = {
        "atomicCAS(unsigned short)": (d["cas"], np.where(compare == cas, value, cas)),
        "atomicAdd(__half)": (
            d["h"],
            [cp.add16(int(x), int(y), cp.HALF) for x, y in zip(h, hx, strict=True)],
        ),
        "atomicAdd(bf16)": (
            d["bh"],
            [cp.add16(int(x), int(y), cp.BF16) for x, y in zip(bh, bx, strict=True)],
        ),
        "atomicAdd(__half2)": (d["h2"], pairs(h2, h2x, cp.HALF)),
        "atomicAdd(bf16x2)": (d["b2"], pairs(b2, b2x, cp.BF16)),
    }
    quarter = {k: cp.HALF.round(cp.Fraction(k, 4)) for k in range(4)}
    total = [sum(cp.Fraction(i % 4, 4) for i in range(n) if i % 2 == j) for j in (0, 1)] + [
        sum(cp.Fraction((i // 2) % 2) for i in range(n) if i % 2 == j) for j in (0, 1)
    ]
    assert quarter  # the addends are exact in half: the contended sums are exact in any order
    want_sums = [cp.HALF.round(total[0]), cp.HALF.round(total[1])]
    want_sums += [cp.BF16.round(total[2]), cp.BF16.round(total[3])]
    bad = [
        f"{name}: {np.count_nonzero(emu.numpy(array) != np.asarray(want, array.dtype))} wrong"
        for name, (array, want) in finals.items()
        if (emu.numpy(array) != np.asarray(want, array.dtype)).any()
    ]
    if list(emu.numpy(d["sums"])) != want_sums:
        bad.append(f"contended sums: got {list(emu.numpy(d['sums']))}, exact {want_sums}")
    half_n = np.where(np.arange(n) < n // 2, 0, POISON32).astype(np.uint32)
    want_old = np.array(
        [
            cas,
            h,
            bh,
            np.where(half_n == 0, np.resize(h2, n), POISON32),
            np.where(half_n == 0, np.resize(b2, n), POISON32),
        ],
        np.uint32,
    )
    assert not bad, f"atomics on {probe.target} (seed {seed}): " + "; ".join(bad)
    compare_rows(
        emu.numpy(old),
        want_old,
        [f"{name} old" for name in finals],
        f"atomics on {probe.target}",
        seed,
    )


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_cache_hinted_loads_stores_and_pipeline_copies(probe: Probe) -> None:
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    n = 64
    src4 = rng.integers(0, 2**32, (n, 4), dtype=np.uint32)
    src1 = rng.integers(0, 2**32, n, dtype=np.uint32)
    srcb = rng.integers(0, 2**16, n, dtype=np.uint16)
    emu = probe.emu
    rows = len(cp.LOADS) + len(cp.STORES)
    out4, out1 = emu.empty((rows, n, 4), np.uint32), emu.empty((rows, n), np.uint32)
    outb = emu.empty((rows, n), np.uint16)
    pipe16, pipe8 = emu.empty((n, 4), np.uint32), emu.empty((n, 2), np.uint32)
    pipe4, pipez = emu.empty((n,), np.uint32), emu.empty((n, 4), np.uint32)
    probe.launch(
        "memory",
        1,
        n,
        emu.array(src4),
        emu.array(src1),
        emu.array(srcb),
        out4,
        out1,
        outb,
        pipe16,
        pipe8,
        pipe4,
        pipez,
        n,
    )
    names = [*cp.LOADS, *cp.STORES]
    what = f"memory on {probe.target}"
    for kind, got, want in (
        (
            "uint4",
            emu.numpy(out4).view(np.uint8).reshape(rows, -1),
            src4.view(np.uint8).reshape(-1),
        ),
        ("unsigned", emu.numpy(out1), src1),
        ("bf16", emu.numpy(outb), srcb),
    ):
        compare_rows(got, np.tile(want, (rows, 1)), [f"{x}({kind})" for x in names], what, seed)
    raw = src4.view(np.uint8).reshape(n, 16)
    zfilled = raw.copy()
    for i in range(n):
        zfilled[i, 16 - i % 17 :] = 0
    copies = [
        ("__pipeline_memcpy_async 16", pipe16, raw.reshape(-1)),
        ("__pipeline_memcpy_async 8", pipe8, raw.reshape(-1)[: 8 * n]),
        ("__pipeline_memcpy_async 4", pipe4, src1.view(np.uint8)),
        ("__pipeline_memcpy_async 16 zfill i % 17", pipez, zfilled.reshape(-1)),
    ]
    got = [emu.numpy(a).view(np.uint8).reshape(1, -1) for _, a, _ in copies]
    for (name, _, want), row in zip(copies, got, strict=True):
        compare_rows(row, want.reshape(1, -1), [name], what, seed)


@pytest.mark.amd_emulator
@pytest.mark.toolchain
def test_trap_compiles_and_is_not_taken(probe: Probe) -> None:
    flag = probe.emu.array(np.zeros(1, np.int32))
    probe.launch("trap_unless", 1, 1, flag)
    assert int(probe.emu.numpy(flag)[0]) == 1
