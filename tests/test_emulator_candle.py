"""candle's kernels on the AMD emulator: a sample of candle-kernels built as a user builds it and
run through ``kernelpack.emulator`` on gfx942 and gfx950 (wave64), gfx1100 and gfx1201 (wave32).

candle's affine, binary, cast, reduce (with its softmax) and unary modules are laid out with no
source edits (bench/candle_project.py), built by ``python -m buildsys wheels --project`` for the
four targets, and the host wheel and the device wheels installed with pip into a folder put on
sys.path; ``Emulator(target).load(module, package="candle_kernels")`` then runs them. Every launch
passes what candle's own Rust callers pass (candle-core/src/cuda_backend/mod.rs and
candle-nn/src/ops.rs at candle 2a13b0f): element count, rank, the layout's dims and strides as a
device array of size_t (NULL for a contiguous layout, as ``SlicePtrOrNull::Null``), the source
pointer at the layout's start offset, LaunchConfig::for_num_elems's grid of 1024-thread blocks;
the reductions' reordered dims with the block and grid FastReduce computes; softmax's (1, 32, 1)
block a row. Strided cases are numpy views (a transpose, a broadcast with stride 0, an offset
slice) whose dims, strides and offset are read off numpy itself.

Inputs are random from a seed printed with any failure, outputs 0xFF-filled (NaN, or an
impossible index) before the launch and checked written whole and not written past. References:
numpy in float64 for the floating results (bounds below, per kernel), numpy's own float32 or
integer arithmetic where the kernel's result is exact (adds, products, maxima, argmins, casts),
and the bfloat16 rounding worked out on the float32 bits (numpy has no bfloat16).

candle's sources are not part of this repository (KERNELPACK_CANDLE_SRC, as tests/test_candle.py);
without them, or without the emulator, these tests are skipped with the reason.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from builder_env import builder_env

from bench.candle_project import lay_out
from kernelpack.emulator import DeviceArray, Emulator
from tests.test_emulator import RUN_TARGETS, emulator

CANDLE_SRC = Path(os.environ.get("KERNELPACK_CANDLE_SRC", "/work/corpus/candle/candle-kernels/src"))
PACKAGE = "candle_kernels"
MODULES = ["affine", "binary", "cast", "reduce", "unary"]
BLOCK = 1024  # cudarc's LaunchConfig::for_num_elems
EPS32 = 2.0**-23
SECONDS: dict[str, dict[str, float]] = defaultdict(dict)  # case -> target -> launch wall time

pytestmark = [
    pytest.mark.amd_emulator,
    pytest.mark.toolchain,
    pytest.mark.skipif(
        not (CANDLE_SRC / "unary.cu").is_file(),
        reason=f"candle's candle-kernels sources are not at {CANDLE_SRC} (set KERNELPACK_CANDLE_SRC)",
    ),
]


@pytest.fixture(scope="module")
def candle_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """candle's sample built by ``wheels --project`` for the four targets and installed by pip
    (host wheel and device wheels) into a folder on sys.path for this module's tests."""
    root = tmp_path_factory.mktemp("candle_emulated")
    project = root / "candle"
    assert lay_out(CANDLE_SRC, project, MODULES, tuple(RUN_TARGETS)) == MODULES
    dist, site = root / "dist", root / "site"
    argv = [sys.executable, "-m", "buildsys", "wheels", "--project", str(project)]
    built = subprocess.run(
        [*argv, "--out", str(dist)], cwd=root, capture_output=True, text=True, env=builder_env()
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    wheels = [*dist.glob(f"{PACKAGE}-*-0host-*.whl"), *dist.glob(f"{PACKAGE}_device_*.whl")]
    assert len(wheels) == 1 + len(RUN_TARGETS), sorted(p.name for p in dist.iterdir())
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    installed = subprocess.run(
        [*pip, "--target", str(site), *map(str, wheels)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    sys.path.insert(0, str(site))
    yield site
    sys.path.remove(str(site))
    for name in [m for m in sys.modules if m.split(".")[0].startswith(PACKAGE)]:
        del sys.modules[name]


@pytest.fixture(scope="module", autouse=True)
def _print_seconds() -> Iterator[None]:
    yield
    if SECONDS:
        targets = sorted({t for row in SECONDS.values() for t in row})
        print("\ncandle on the emulator, launch wall time (s):", *targets, sep="\t")
        for case, row in sorted(SECONDS.items()):
            print(case, *(f"{row[t]:.1f}" if t in row else "-" for t in targets), sep="\t")


# ---- layouts as candle passes them ---------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """A view's candle Layout: dims and strides in elements, the start offset into its buffer."""

    dims: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, view: np.ndarray, buffer: np.ndarray) -> Layout:
        """Read off numpy: the view's shape, its strides in elements and where it starts in
        ``buffer`` (the contiguous array it views)."""
        size = view.itemsize
        start = view.__array_interface__["data"][0] - buffer.__array_interface__["data"][0]
        assert start % size == 0 and all(s % size == 0 for s in view.strides)
        return cls(view.shape, tuple(s // size for s in view.strides), start // size)

    def contiguous(self) -> bool:
        """candle's is_contiguous (cuda_utils.cuh): row-major strides, dims of 1 ignored."""
        expected = 1
        for dim, stride in zip(reversed(self.dims), reversed(self.strides), strict=True):
            if dim > 1 and stride != expected:
                return False
            expected *= dim
        return True


class Run:
    """One target's emulator and its candle modules; launches timed under the case's name."""

    def __init__(self, target: str, case: str, seed: int) -> None:
        self.emu: Emulator = emulator(target)
        self.target, self.case, self.seed = target, case, seed
        self.rng = np.random.default_rng(seed)

    def launch(self, module: str, kernel: str, grid: Any, block: Any, *args: Any) -> None:
        found = self.emu.load(module, package=PACKAGE).kernel(kernel)
        started = time.perf_counter()
        found.launch(grid, block, *args)
        SECONDS[self.case][self.target] = time.perf_counter() - started

    def pointer(self, array: DeviceArray, layout: Layout) -> int:
        """The source pointer candle passes: the buffer at the layout's start offset."""
        return int(array.address) + layout.offset * int(array.dtype.itemsize)

    def info(self, *rows: tuple[int, ...]) -> DeviceArray:
        """dims and strides concatenated, as the device array of size_t candle uploads."""
        return self.emu.array(np.array([v for row in rows for v in row], dtype=np.uint64))

    def out(self, shape: tuple[int, ...], dtype: Any) -> DeviceArray:
        return self.emu.empty(shape, dtype)

    def result(self, out: DeviceArray) -> np.ndarray:
        """The output copied out, after checking nothing was written past either end."""
        assert out.guards_intact(), f"{self.case} on {self.target}: wrote past its output"
        return self.emu.numpy(out)

    def where(self) -> str:
        return f"{self.case} on {self.target} (seed {self.seed})"


def grid_for(numel: int) -> tuple[int, int, int]:
    """LaunchConfig::for_num_elems's grid."""
    return ((numel + BLOCK - 1) // BLOCK, 1, 1)


def assert_written(got: np.ndarray, run: Run) -> None:
    assert not np.isnan(got.astype(np.float64)).any(), f"{run.where()}: elements left unwritten"


def assert_within(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, run: Run) -> None:
    """|got - ref| <= bound element by element (ref and bound in float64)."""
    assert_written(got, run)
    error = np.abs(got.astype(np.float64) - ref)
    worst = int(np.argmax(error - bound))
    assert (error <= bound).all(), (
        f"{run.where()}: element {worst}: got {got.flat[worst]!r}, float64 {ref.flat[worst]!r}, "
        f"error {error.flat[worst]:.3g} > bound {bound.flat[worst]:.3g}"
    )


def assert_exact(got: np.ndarray, ref: np.ndarray, run: Run) -> None:
    """Bit for bit (a NaN left by the poison never equals a computed value here)."""
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, got.shape, ref.shape)
    bits, expected = got.view(f"u{got.itemsize}"), ref.view(f"u{ref.itemsize}")
    differ = np.flatnonzero(bits != expected)
    assert differ.size == 0, (
        f"{run.where()}: {differ.size} of {got.size} differ, first at {int(differ[0])}: "
        f"got {got.flat[differ[0]]!r}, expected {ref.flat[differ[0]]!r}"
    )


# ---- the cases: each as candle's caller launches it ---------------------------------------------


def unary_like(
    run: Run, module: str, kernel: str, buffer: np.ndarray, view: np.ndarray, out_dtype: Any,
    *scalars: float,
) -> np.ndarray:  # fmt: skip
    """A kernel of (numel, num_dims, info, inp, out, scalars...) on ``view`` of ``buffer``:
    affine, unary and cast as candle-core launches them (info NULL for a contiguous layout)."""
    layout = Layout.of(view, buffer)
    numel = view.size
    source = run.emu.array(buffer)
    info = 0 if layout.contiguous() else run.info(layout.dims, layout.strides)
    out = run.out((numel,), out_dtype)
    args = (numel, len(layout.dims), info, run.pointer(source, layout), out, *scalars)
    run.launch(module, kernel, grid_for(numel), (BLOCK, 1, 1), *args)
    return run.result(out).reshape(view.shape)


def affine_bound(x: np.ndarray, mul: float, add: float) -> np.ndarray:
    """Two float32 roundings (a product and a sum, or one fused): within an ulp of each term."""
    return EPS32 * (np.abs(x.astype(np.float64) * mul) + abs(add))


def case_affine_f32_contiguous(run: Run) -> None:
    x = run.rng.standard_normal(3000).astype(np.float32) * 100
    got = unary_like(run, "affine", "affine_f32", x, x, np.float32, 1.75, -0.5)
    ref = x.astype(np.float64) * 1.75 - 0.5
    assert_within(got, ref, affine_bound(x, 1.75, -0.5), run)


def case_affine_f32_transposed_slice(run: Run) -> None:
    buffer = run.rng.standard_normal((40, 52)).astype(np.float32)
    view = buffer[:, 2:].T  # dims (50, 40), strides (1, 52), offset 2
    assert not Layout.of(view, buffer).contiguous()
    got = unary_like(run, "affine", "affine_f32", buffer, view, np.float32, -3.0, 0.25)
    ref = view.astype(np.float64) * -3.0 + 0.25
    assert_within(got, ref, affine_bound(view, -3.0, 0.25), run)


def case_affine_i32_broadcast(run: Run) -> None:
    buffer = run.rng.integers(-10_000, 10_000, (1, 300), dtype=np.int32)
    view = np.broadcast_to(buffer, (7, 300))  # stride 0 on the first dim
    got = unary_like(run, "affine", "affine_i32", buffer, view, np.int32, 7, -3)
    assert_exact(got, (view.astype(np.int64) * 7 - 3).astype(np.int32), run)


def case_uexp_f32_contiguous(run: Run) -> None:
    x = run.rng.uniform(-10, 10, 2500).astype(np.float32)
    got = unary_like(run, "unary", "uexp_f32", x, x, np.float32)
    ref = np.exp(x.astype(np.float64))
    assert_within(got, ref, 4 * EPS32 * ref, run)  # ocml's expf: within 1 ulp; 4 allowed


def case_ugelu_f32_transposed(run: Run) -> None:
    buffer = (run.rng.standard_normal((33, 64)) * 3).astype(np.float32)
    view = buffer.T
    got = unary_like(run, "unary", "ugelu_f32", buffer, view, np.float32)
    x = view.astype(np.float64)
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    assert_within(got, ref, 1e-6 + 1e-5 * np.abs(ref), run)


def case_cast_f32_f16_contiguous(run: Run) -> None:
    # magnitudes 2^-10 .. 2^10: normal float16 (the emulator flushes subnormals)
    x = (np.exp2(run.rng.uniform(-10, 10, 2000)) * run.rng.choice([-1, 1], 2000)).astype(np.float32)
    got = unary_like(run, "cast", "cast_f32_f16", x, x, np.float16)
    assert_exact(got, x.astype(np.float16), run)  # numpy rounds to nearest even, as the GPU


def case_cast_f16_f32_transposed(run: Run) -> None:
    buffer = run.rng.standard_normal((24, 70)).astype(np.float16)
    view = buffer.T
    got = unary_like(run, "cast", "cast_f16_f32", buffer, view, np.float32)
    assert_exact(got, view.astype(np.float32), run)


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 by round to nearest even on the bits (finite inputs)."""
    bits = x.view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def case_cast_f32_bf16_contiguous(run: Run) -> None:
    x = run.rng.standard_normal(2000).astype(np.float32) * 1000
    got = unary_like(run, "cast", "cast_f32_bf16", x, x, np.uint16)
    assert_exact(got, bfloat16_bits(x), run)


def binary(
    run: Run, kernel: str, lhs: tuple[np.ndarray, np.ndarray], rhs: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """binary.cu's (numel, num_dims, dims_and_strides, lhs, rhs, out) as candle's Map2 passes it:
    NULL when both layouts are contiguous, else dims, lhs strides, rhs strides."""
    (lhs_buffer, lhs_view), (rhs_buffer, rhs_view) = lhs, rhs
    left, right = Layout.of(lhs_view, lhs_buffer), Layout.of(rhs_view, rhs_buffer)
    assert left.dims == right.dims
    numel = lhs_view.size
    a, b = run.emu.array(lhs_buffer), run.emu.array(rhs_buffer)
    both = left.contiguous() and right.contiguous()
    info = 0 if both else run.info(left.dims, left.strides, right.strides)
    out = run.out((numel,), lhs_view.dtype)
    args = (numel, len(left.dims), info, run.pointer(a, left), run.pointer(b, right), out)
    run.launch("binary", kernel, grid_for(numel), (BLOCK, 1, 1), *args)
    return run.result(out).reshape(lhs_view.shape)


def case_badd_f32_contiguous(run: Run) -> None:
    x, y = (run.rng.standard_normal(2100).astype(np.float32) for _ in range(2))
    assert_exact(binary(run, "badd_f32", (x, x), (y, y)), x + y, run)


def case_bmul_f32_broadcast_rhs(run: Run) -> None:
    x = run.rng.standard_normal((12, 130)).astype(np.float32)
    row = run.rng.standard_normal((1, 130)).astype(np.float32)
    rhs = np.broadcast_to(row, x.shape)  # the lhs-contiguous branch
    assert_exact(binary(run, "bmul_f32", (x, x), (row, rhs)), x * rhs, run)


def case_bsub_f32_both_strided(run: Run) -> None:
    buffer = run.rng.standard_normal((90, 20)).astype(np.float32)
    col = run.rng.standard_normal((20, 1)).astype(np.float32)
    lhs, rhs = buffer.T, np.broadcast_to(col, (20, 90))
    assert_exact(binary(run, "bsub_f32", (buffer, lhs), (col, rhs)), lhs - rhs, run)


def fast_reduce(
    run: Run, kernel: str, buffer: np.ndarray, view: np.ndarray, sum_dims: tuple[int, ...],
    out_dtype: Any,
) -> np.ndarray:  # fmt: skip
    """reduce.cu's fast_* as candle-core's FastReduce launches them: the kept dims then the
    reduced ones (with their strides), one block per output element of min(1024, reduced
    count) rounded up to a power of two, (src_numel, el_to_sum_per_block, num_dims, info,
    src, dst)."""
    layout = Layout.of(view, buffer)
    kept = [d for d in range(view.ndim) if d not in sum_dims]
    order = [*kept, *sum_dims]
    dims = tuple(layout.dims[d] for d in order)
    strides = tuple(layout.strides[d] for d in order)
    dst_el = int(np.prod([layout.dims[d] for d in kept], dtype=np.int64))
    per_block = view.size // dst_el
    block = 1 << (min(BLOCK, per_block) - 1).bit_length()
    source = run.emu.array(buffer)
    out = run.out((dst_el,), out_dtype)
    args = (view.size, per_block, view.ndim, run.info(dims, strides), run.pointer(source, layout))
    run.launch("reduce", kernel, (dst_el, 1, 1), (block, 1, 1), *args, out)
    return run.result(out).reshape([view.shape[d] for d in kept])


def case_fast_sum_f32_last_dim(run: Run) -> None:
    x = run.rng.standard_normal((6, 700)).astype(np.float32)
    got = fast_reduce(run, "fast_sum_f32", x, x, (1,), np.float32)
    terms = np.abs(x.astype(np.float64)).sum(axis=1)
    bound = 700 * EPS32 * terms  # n roundings of partial sums no larger than the terms' sum
    assert_within(got, x.astype(np.float64).sum(axis=1), bound, run)


def case_fast_max_f32_first_dim_transposed(run: Run) -> None:
    buffer = run.rng.standard_normal((5, 300)).astype(np.float32)
    view = buffer.T  # (300, 5), reduced over its first dim
    assert_exact(fast_reduce(run, "fast_max_f32", buffer, view, (0,), np.float32),
                 view.max(axis=0), run)  # fmt: skip


def case_fast_argmin_f32_middle_dim(run: Run) -> None:
    x = run.rng.standard_normal((4, 129, 3)).astype(np.float32)
    got = fast_reduce(run, "fast_argmin_f32", x, x, (1,), np.uint32)
    assert_exact(got, x.argmin(axis=1).astype(np.uint32), run)


def softmax(run: Run, kernel: str, x: np.ndarray) -> np.ndarray:
    """candle-nn's softmax_last_dim: (src, dst, n_cols), a block of (1, 32, 1) a row."""
    rows, cols = x.shape
    source, out = run.emu.array(x), run.out(x.shape, x.dtype)
    run.launch("reduce", kernel, (rows, 1, 1), (1, 32, 1), source, out, cols)
    return run.result(out)


def case_softmax_f32(run: Run) -> None:
    x = (run.rng.standard_normal((5, 300)) * 4).astype(np.float32)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    got = softmax(run, "softmax_f32", x)
    # expf within an ulp or two, a float32 sum of 300 terms in 32 lanes' parts, one division
    assert_within(got, ref, 64 * EPS32 * ref, run)


def case_softmax_f16(run: Run) -> None:
    x = (run.rng.standard_normal((3, 200)) * 2).astype(np.float16)
    wide = x.astype(np.float64)
    e = np.exp(wide - wide.max(axis=1, keepdims=True))
    ref = e / e.sum(axis=1, keepdims=True)
    got = softmax(run, "softmax_f16", x)
    # candle computes x - max, its exp and the scaling in half precision: the difference d
    # rounded (an error of |d| 2^-11 in the exponent, so |d| 2^-11 relative in the result), then
    # exp, the stored value, the product and the float32 sum's share, 2^-11 relative each
    d = wide - wide.max(axis=1, keepdims=True)
    assert_within(got, ref, 2.0**-11 * (np.abs(d) + 6) * ref + 2.0**-24, run)


CASES: dict[str, Callable[[Run], None]] = {
    name.removeprefix("case_"): function
    for name, function in sorted(globals().items())
    if name.startswith("case_")
}


# What the emulator cannot run, by (case, target), and why: never run (the process would die).
CANNOT_RUN = {
    ("softmax_f32", target): (
        "the emulator's process dies (SIGSEGV) in ds_bpermute_b32, candle's 32-wide shuffles with "
        "32 of a wave64's 64 lanes active (block (1, 32, 1)); softmax_f16 runs the same "
        "shuffles and passes"
    )
    for target in ("gfx942", "gfx950")
}


def _params() -> list[Any]:
    return [
        pytest.param(
            target,
            case,
            marks=[pytest.mark.xfail(reason=CANNOT_RUN[case, target], run=False, strict=True)]
            if (case, target) in CANNOT_RUN
            else [],
        )
        for target in RUN_TARGETS
        for case in sorted(CASES)
    ]


@pytest.mark.parametrize(("target", "case"), _params())
def test_candle_kernel_on_the_emulator(candle_site: Path, target: str, case: str) -> None:
    CASES[case](Run(target, case, secrets.randbits(62)))
