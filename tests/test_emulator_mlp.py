"""The MLP module on the emulator: every op forward and backward, every dtype, every kernel form.

On gfx942 and gfx950 (wave64) and gfx1100 and gfx1201 (wave32), each op runs through the host's
own launch functions (kernelpack.ops.mlp.launch's launch_*, which choose the kernel and its grid for the
shape and the pointers' alignment), with the emulator answering their kernel look-ups; each case
says which kernels the host must choose for its shape and fails if the host chose others. A form
the host takes only for shapes too large to emulate (past 64 MiB moved, past 132 rows) is
launched by name on the grid the host would give it (DIRECT says why, case by case). The last
test asserts that every kernel of the mlp module's index ran on every target.

Inputs are random from a seed printed with any failure; outputs, partial sums and scratch are
poisoned (0xFF bytes: NaN) before the launch and must be written whole, and nothing may be
written past either end of an output (DeviceArray.guards_intact). The references are in float64:
the forwards against tests/test_mlp.py's (its tolerances), the backwards against
tests/test_mlp_torch.py's gradients and their bound of the terms (torch on the CPU).
"""

from __future__ import annotations

import secrets
import time
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from kernelpack.emulator import DeviceArray, Emulator
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp import options as mlp_options
from kernelpack.ops.mlp.table import TABLE
from tests.test_emulator import RUN_TARGETS, emulator, timed_launch
from tests.test_mlp import (
    DTYPES,
    EPS,
    assert_row_scales,
    np_assert_close,
    np_rms_norm,
    np_swiglu,
    numpy_dtype,
)

torch = pytest.importorskip(
    "torch", reason="torch (in the test dependency group) computes the refs"
)
from tests.test_mlp_torch import (  # noqa: E402
    assert_close,
    ref_rms_norm_grads,
    ref_row_scales,
    ref_swiglu_grads,
)

pytestmark = pytest.mark.amd_emulator

# The multiprocessors the host's choices are made for here (what an sm_90 GPU of 132 SMs takes):
# the emulator runs one compute unit, so the count only steers which forms the host picks.
SMS = 132

LAUNCHED: dict[str, set[str]] = defaultdict(set)  # target -> kernel names launched this run
DIRECT: dict[str, str] = {}  # kernel name -> why it was launched by name, not by the host

BLOCK = mlp_geometry.ELEMENTWISE_BLOCK
SECONDS: dict[str, list[float]] = defaultdict(list)  # target -> each launch's wall time


@pytest.fixture(scope="module", autouse=True)
def _print_launches() -> Any:
    yield
    for target, seconds in sorted(SECONDS.items()):
        print(
            f"\nmlp on {target}: {len(seconds)} launches of {len(LAUNCHED[target])} kernels, "
            f"{sum(seconds):.1f} s (slowest {max(seconds):.1f} s)"
        )


def vector_width(dtype: str) -> int:
    """Elements of a 16-byte vector."""
    return mlp_geometry.VECTOR_BYTES // mlp_geometry.ITEM_SIZE[dtype]


def form(template: str, dtype: str) -> str:
    """A kernel's name from its form, "swiglu_exact<{T}, 8>", for ``dtype``."""
    return "mlp::" + template.format(T=mlp_geometry.KERNEL_TYPE[dtype])


class Device:
    """kernelpack.ops.mlp.launch's host path on the emulator of one target: its kernel look-ups answered by the
    emulator's mlp module, every launch recorded (``names``, and LAUNCHED for the coverage)."""

    def __init__(self, target: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.target = target
        self.emu: Emulator = emulator(target)
        self.module = self.emu.load("mlp")
        self.names: list[str] = []
        monkeypatch.setattr(mlp_launch, "load_kernel", lambda _device, name: self.kernel(name))
        facts = mlp_geometry.DeviceFacts(target, SMS)
        monkeypatch.setattr(mlp_launch, "device_facts", lambda _device: facts)

    def kernel(self, name: str) -> Recorded:
        return Recorded(self, self.module.kernel(name))

    def direct(self, name: str, why: str) -> Recorded:
        """``name`` launched by name (the host would not take it for this shape), and why."""
        DIRECT[name] = why
        return self.kernel(name)


class Recorded:
    """A Kernel whose launches are timed and recorded."""

    def __init__(self, device: Device, kernel: Any) -> None:
        self.device, self.kernel = device, kernel

    def launch(self, grid: Any, block: Any, *args: Any, **options: Any) -> None:
        started = time.perf_counter()
        timed_launch(self.device.emu, self.kernel, grid, block, *args, **options)
        SECONDS[self.device.target].append(time.perf_counter() - started)
        self.device.names.append(self.kernel.name)
        LAUNCHED[self.device.target].add(self.kernel.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)


def inputs(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0
) -> np.ndarray:
    """Random normal values of ``dtype`` (times ``scale``: gates past the sigmoid's knee)."""
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(numpy_dtype(dtype))


def on(emu: Emulator, host: np.ndarray, offset: int) -> DeviceArray:
    """``host`` in the emulator's memory, ``offset`` elements past a 256-byte boundary."""
    return emu.array(host, misalign=offset * host.dtype.itemsize)


def poisoned(emu: Emulator, shape: tuple[int, ...], dtype: Any, offset: int = 0) -> DeviceArray:
    return emu.empty(shape, np.dtype(dtype), misalign=offset * np.dtype(dtype).itemsize)


def written(emu: Emulator, array: DeviceArray, what: str) -> np.ndarray:
    """The array's contents, every element written and nothing past either end."""
    assert array.guards_intact(), f"{what}: a kernel wrote outside its output"
    got = emu.numpy(array)
    unwritten = np.isnan(got.astype(np.float64))
    assert not unwritten.any(), f"{what}: {int(unwritten.sum())} elements left unwritten"
    return got


def t64(array: np.ndarray) -> Any:
    """A float64 CPU tensor of ``array`` (any float dtype, bfloat16 included)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float64))


def expect(device: Device, names: list[str], what: str) -> None:
    assert device.names == names, f"{what}: launched {device.names}, the case expects {names}"


# ---- the elementwise ops ------------------------------------------------------------------------


def streaming_n(dtype: str) -> int:
    """The fewest elements whose grid in 16-byte vectors is a block a multiprocessor (not
    narrowed to 8-byte vectors): the host's streaming exact form."""
    return SMS * BLOCK * vector_width(dtype)


# case -> (n, offset in elements, the kernel the host takes, or DIRECT's reason to launch it by
# name on a grid of a block for each 128 16-byte vectors)
SWIGLU_CASES: dict[str, tuple[Any, int, str, str]] = {
    "exact 8-byte": (1000, 0, "swiglu_exact<{T}, 8>", ""),
    "general, vectors and a tail": (1001, 0, "swiglu<{T}>", ""),
    "general, misaligned (scalar)": (1000, 1, "swiglu<{T}>", ""),
    "exact streaming": ("streaming", 0, "swiglu_exact_streaming<{T}>", ""),
    "exact 16-byte plain": (1000, 0, "swiglu_exact<{T}, 16>", "the host's past 64 MiB moved"),
}
SWIGLU_BACKWARD_CASES: dict[str, tuple[Any, int, str, str]] = {
    "exact 8-byte": (1000, 0, "swiglu_backward_exact<{T}, 8>", ""),
    "general, vectors and a tail": (1001, 0, "swiglu_backward<{T}>", ""),
    "general, misaligned (scalar)": (1000, 1, "swiglu_backward<{T}>", ""),
    "exact streaming": ("streaming", 0, "swiglu_backward_exact_streaming<{T}>", ""),
}


def swiglu_n(n: Any, dtype: str) -> int:
    if n == "streaming":
        return streaming_n(dtype)
    return int(n)


@pytest.mark.parametrize("case", SWIGLU_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_swiglu(target: str, dtype: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    size, offset, template, why = SWIGLU_CASES[case]
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu, n, name = device.emu, swiglu_n(size, dtype), form(template, dtype)
    gate, up = inputs(rng, (n,), dtype, 4.0), inputs(rng, (n,), dtype)
    g, u = on(emu, gate, offset), on(emu, up, offset)
    out = poisoned(emu, (n,), gate.dtype, offset)
    if why:
        grid = -(-n // (BLOCK * vector_width(dtype)))
        device.direct(name, why).launch(grid, BLOCK, g, u, out, n)
    else:
        swiglu = TABLE["swiglu"]
        mlp_launch.launch_op("emulator", swiglu, dtype, (n,), (g, u, out), None, 0)
    what = f"{name} n={n}+{offset} on {target}"
    expect(device, [name], what)
    np_assert_close(written(emu, out, what), np_swiglu(gate, up), dtype, what, seed)


@pytest.mark.parametrize("case", SWIGLU_BACKWARD_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_swiglu_backward(
    target: str, dtype: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    size, offset, template, _ = SWIGLU_BACKWARD_CASES[case]
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu, n, name = device.emu, swiglu_n(size, dtype), form(template, dtype)
    gate, up, grad = (inputs(rng, (n,), dtype, s) for s in (4.0, 1.0, 1.0))
    arrays = [on(emu, a, offset) for a in (gate, up, grad)]
    grad_gate, grad_up = (poisoned(emu, (n,), gate.dtype, offset) for _ in range(2))
    mlp_launch.launch_swiglu_backward("emulator", dtype, *arrays, grad_gate, grad_up, n, 0)
    what = f"{name} n={n}+{offset} on {target}"
    expect(device, [name], what)
    ref_gate, terms_gate, ref_up, terms_up = ref_swiglu_grads(t64(gate), t64(up), t64(grad))
    got_gate = t64(written(emu, grad_gate, what + " d_gate"))
    got_up = t64(written(emu, grad_up, what + " d_up"))
    assert_close(got_gate, ref_gate, terms_gate, dtype, seed, what + " d_gate")
    assert_close(got_up, ref_up, terms_up, dtype, seed, what + " d_up")


# case -> (rows, cols, offset in elements, the kernel the host takes, or DIRECT's reason)
SILU_AND_MUL_CASES: dict[str, tuple[int, Any, int, str, str]] = {
    "exact 8-byte": (3, 96, 0, "silu_and_mul_exact<{T}, 8>", ""),
    "general, vectors and a tail": (3, 97, 0, "silu_and_mul<{T}>", ""),
    "general, misaligned (scalar)": (3, 96, 1, "silu_and_mul<{T}>", ""),
    "one row": (1, 96, 0, "silu_and_mul_exact<{T}, 8>", ""),
    "exact streaming": (132, "a block a row", 0, "silu_and_mul_exact_streaming<{T}>", ""),
    "exact 16-byte plain": (
        3,
        96,
        0,
        "silu_and_mul_exact<{T}, 16>",
        "the host's past 64 MiB moved",
    ),
}
SILU_AND_MUL_BACKWARD_CASES: dict[str, tuple[int, Any, int, str, str]] = {
    "exact 8-byte": (3, 96, 0, "silu_and_mul_backward_exact<{T}, 8>", ""),
    "general, vectors and a tail": (3, 97, 0, "silu_and_mul_backward<{T}>", ""),
    "general, misaligned (scalar)": (3, 96, 1, "silu_and_mul_backward<{T}>", ""),
    "one row": (1, 96, 0, "silu_and_mul_backward_exact<{T}, 8>", ""),
    "exact streaming": (
        132,
        "a block a row",
        0,
        "silu_and_mul_backward_exact_streaming<{T}>",
        "",
    ),
}


def silu_cols(cols: Any, dtype: str) -> int:
    """Columns: a number, or a row of one block of 128 16-byte vectors (132 such rows are the
    host's streaming grid: one block a row, 132 blocks)."""
    return BLOCK * vector_width(dtype) if cols == "a block a row" else int(cols)


@pytest.mark.parametrize("case", SILU_AND_MUL_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_silu_and_mul(target: str, dtype: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rows, size, offset, template, why = SILU_AND_MUL_CASES[case]
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu, cols, name = device.emu, silu_cols(size, dtype), form(template, dtype)
    x = np.concatenate(
        [inputs(rng, (rows, cols), dtype, 4.0), inputs(rng, (rows, cols), dtype)], axis=1
    )
    xs = on(emu, x, offset)
    out = poisoned(emu, (rows, cols), x.dtype, offset)
    if why:  # a thread a 16-byte vector of a row, grid.y a row
        grid = (-(-cols // (mlp_geometry.BLOCK_MIN * vector_width(dtype))), rows)
        device.direct(name, why).launch(grid, mlp_geometry.BLOCK_MIN, xs, out, rows, cols)
    else:
        halves = TABLE["silu_and_mul"]
        mlp_launch.launch_op("emulator", halves, dtype, (rows, 2 * cols), (xs, out), None, 0)
    what = f"{name} {rows}x{cols}+{offset} on {target}"
    expect(device, [name], what)
    reference = np_swiglu(x[:, :cols], x[:, cols:])
    np_assert_close(written(emu, out, what), reference, dtype, what, seed)


@pytest.mark.parametrize("case", SILU_AND_MUL_BACKWARD_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_silu_and_mul_backward(
    target: str, dtype: str, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, size, offset, template, _ = SILU_AND_MUL_BACKWARD_CASES[case]
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu, cols, name = device.emu, silu_cols(size, dtype), form(template, dtype)
    gate, up = inputs(rng, (rows, cols), dtype, 4.0), inputs(rng, (rows, cols), dtype)
    x, grad = np.concatenate([gate, up], axis=1), inputs(rng, (rows, cols), dtype)
    grad_x = poisoned(emu, (rows, 2 * cols), x.dtype, offset)
    mlp_launch.launch_silu_and_mul_backward(
        "emulator", dtype, on(emu, x, offset), on(emu, grad, offset), grad_x, rows, cols, 0
    )
    what = f"{name} {rows}x{cols}+{offset} on {target}"
    expect(device, [name], what)
    got = t64(written(emu, grad_x, what))
    ref_gate, terms_gate, ref_up, terms_up = ref_swiglu_grads(t64(gate), t64(up), t64(grad))
    assert_close(got[:, :cols], ref_gate, terms_gate, dtype, seed, what + " d_gate")
    assert_close(got[:, cols:], ref_up, terms_up, dtype, seed, what + " d_up")


# ---- the forward norms --------------------------------------------------------------------------

FIXED_ROWS = 2  # rows of the fixed-length cases: the grid is a block a row, any count serves


def norm_cases() -> list[tuple[str, str, int, int, bool]]:
    """(op, form, rows, cols, in place): the general kernel, the
    short-row one, the fixed-length few-row and many-row forms of every length mlp.cu
    instantiates; add_rms_norm in place as fused_add_rms_norm calls it."""
    cases = []
    for op in ("rms_norm", "add_rms_norm"):
        cases += [(op, op, 3, 202, False), (op, f"{op}_short", 3, 200, False)]
        for cols in mlp_geometry.FIXED_COLUMNS:
            for suffix in ("_fixed", "_fixed_full"):
                cases.append((op, f"{op}{suffix}", FIXED_ROWS, cols, False))
    cases += [("add_rms_norm", "add_rms_norm", 3, 202, True)]
    cases += [("add_rms_norm", "add_rms_norm_short", 3, 200, True)]
    return cases


NORM_CASES = [
    pytest.param(
        op,
        name,
        rows,
        cols,
        dtype,
        in_place,
        id=f"{name}-{rows}x{cols}-{dtype}{'-in-place' if in_place else ''}",
    )
    for op, name, rows, cols, in_place in norm_cases()
    for dtype in DTYPES
]


def fixed_name(name: str, cols: int, dtype: str) -> str:
    """A norm kernel's full name: the fixed-length forms carry their length."""
    fixed = "_fixed" in name
    return mlp_geometry.kernel_name(name, dtype, *([cols] if fixed else []))


@pytest.mark.parametrize(("op", "form_name", "rows", "cols", "dtype", "in_place"), NORM_CASES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_forward_norm(
    target: str,
    op: str,
    form_name: str,
    rows: int,
    cols: int,
    dtype: str,
    in_place: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The forward norm's kernel ``form_name`` for rows x cols, with row scales stored (the
    training path's call); the host's choice where it takes that form for the shape, else
    launched by name on the host's grid for the form (a block a row of fixed_threads)."""
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu, name = device.emu, fixed_name(form_name, cols, dtype)
    x, weight = inputs(rng, (rows, cols), dtype), inputs(rng, (cols,), dtype)
    residual = inputs(rng, (rows, cols), dtype)
    xs, w = emu.array(x), emu.array(weight)
    scales = poisoned(emu, (rows,), np.float32)
    if op == "rms_norm":
        out = poisoned(emu, (rows, cols), x.dtype)
        pointers: tuple[Any, ...] = (xs, w, out, scales)
    else:
        res = emu.array(residual)
        if in_place:  # fused_add_rms_norm: out is x, residual_out is residual
            out, summed = xs, res
        else:
            out, summed = (poisoned(emu, (rows, cols), x.dtype) for _ in range(2))
        pointers = (xs, res, w, out, summed, scales)
    host = mlp_geometry.norm_launch(op, rows, cols, dtype, mlp_geometry.DeviceFacts(target, SMS))
    if host.name == name:
        norm = TABLE[op]
        mlp_launch.launch_op("emulator", norm, dtype, (rows, cols), pointers, EPS, 0)
    else:
        why = f"the host takes {host.name} for {rows} x {cols} on {target}"
        block = (mlp_geometry.fixed_threads(cols, dtype), 1)
        device.direct(name, why).launch(rows, block, *pointers, rows, cols, EPS)
    what = f"{name} {rows}x{cols}{' in place' if in_place else ''} on {target}"
    expect(device, [name], what)
    of = x.astype(np.float64)
    if op == "add_rms_norm":
        stored = (x.astype(np.float64) + residual.astype(np.float64)).astype(x.dtype)
        got_sum = written(emu, summed, what + " residual_out")
        np_assert_close(got_sum, stored.astype(np.float64), dtype, what + " residual_out", seed)
        of = stored.astype(np.float64)
    got = written(emu, out, what)
    np_assert_close(got, np_rms_norm(of, weight, EPS), dtype, what, seed)
    got_scales = torch.from_numpy(written(emu, scales, what + " row scales"))
    assert_row_scales((torch, None, seed), got_scales, got_scales, t64(of), EPS, what)


# ---- the backward norms -------------------------------------------------------------------------

# case -> (rows, cols, offset in elements, grad_extra (add_rms_norm's backward, with the copy of
# grad_x), the kernels the host takes: the backward, then the weight-gradient sum)
BACKWARD_CASES: dict[str, tuple[int, int, int, bool, dict[str, list[str]]]] = {
    "general": (3, 202, 0, False, {"": ["rms_norm_backward<{T}>", "rms_norm_weight_grad<{T}>"]}),
    "general, extra": (
        3,
        202,
        0,
        True,
        {"": ["rms_norm_backward<{T}>", "rms_norm_weight_grad<{T}>"]},
    ),
    "short": (
        3,
        200,
        0,
        False,
        {
            "float32": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad<{T}>"],
            "": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad_inputs<{T}>"],
        },
    ),
    "short, extra": (
        3,
        200,
        0,
        True,
        {
            "float32": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad<{T}>"],
            "": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad_inputs<{T}>"],
        },
    ),
    "short, one row": (1, 200, 0, False, {"": ["rms_norm_backward_short<{T}>"]}),
    "short, misaligned": (
        3,
        200,
        1,
        False,
        {
            "float32": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad<{T}>"],
            "": ["rms_norm_backward_short<{T}>", "rms_norm_weight_grad_inputs<{T}>"],
        },
    ),
    "fixed 4096": (
        FIXED_ROWS,
        4096,
        0,
        False,
        {
            "float32": ["rms_norm_backward_fixed<{T}, 4096>", "rms_norm_weight_grad<{T}>"],
            "": ["rms_norm_backward_fixed<{T}, 4096>", "rms_norm_weight_grad_inputs<{T}>"],
        },
    ),
    "fixed 8192": (  # 16-bit types only: float32's 2048 vectors are more than 512 threads' two
        FIXED_ROWS,
        8192,
        0,
        False,
        {"": ["rms_norm_backward_fixed<{T}, 8192>", "rms_norm_weight_grad_inputs<{T}>"]},
    ),
}
BACKWARD_PARAMS = [
    pytest.param(case, dtype, id=f"{case}-{dtype}")
    for case in BACKWARD_CASES
    for dtype in DTYPES
    if not (case == "fixed 8192" and dtype == "float32")
]


def norm_backward(
    dtype: str,
    x: DeviceArray,
    row_scales: DeviceArray,
    weight: DeviceArray,
    grad: DeviceArray,
    extra: DeviceArray | int,
    grad_x: DeviceArray,
    grad_x_copy: DeviceArray | int,
    grad_weight: DeviceArray,
    emu: Emulator,
    rows: int,
    cols: int,
) -> None:
    """The RMSNorm backward as kernelpack.torch_ops calls the host (its _norm_backward): the
    short-row kernels where mlp_geometry.short_backward_threads says so, with float32 scratch
    where short_backward_scratch asks for it, else the general kernel and its partial rows
    (both poisoned)."""
    arrays = mlp_launch.NormGrads(x, row_scales, weight, grad, extra, grad_x, grad_weight)
    threads = mlp_geometry.short_backward_threads(rows, cols, dtype, SMS)
    if threads:
        shape = mlp_geometry.short_backward_scratch(rows, cols, dtype)
        scratch: DeviceArray | int = 0 if shape is None else poisoned(emu, shape, np.float32)
        mlp_launch.launch_rms_norm_backward_short(
            "emulator", dtype, arrays, scratch, rows, cols, threads, 0
        )
        return
    blocks = mlp_geometry.backward_row_geometry(
        rows, cols, dtype, mlp_launch.device_facts("emulator")
    )[0]
    partial = poisoned(emu, (max(blocks, 1), cols), np.float32)
    mlp_launch.launch_rms_norm_backward(
        "emulator", dtype, arrays, grad_x_copy, partial, rows, cols, 0
    )


@pytest.mark.parametrize(("case", "dtype"), BACKWARD_PARAMS)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_rms_norm_backward(
    target: str, case: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, cols, offset, extra, forms = BACKWARD_CASES[case]
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu = device.emu
    names = [form(t, dtype) for t in forms.get(dtype, forms.get("", []))]
    x, weight = inputs(rng, (rows, cols), dtype), inputs(rng, (cols,), dtype)
    grad, grad_extra = inputs(rng, (rows, cols), dtype), inputs(rng, (rows, cols), dtype)
    scales = ref_row_scales(t64(x), EPS).numpy()
    grad_x = poisoned(emu, (rows, cols), x.dtype, offset)
    short = mlp_geometry.short_backward_threads(rows, cols, dtype, SMS) > 0
    # the general backward's copy of grad_x (add_rms_norm's x and residual); the short has none
    copy = poisoned(emu, (rows, cols), x.dtype, offset) if extra and not short else 0
    grad_weight = poisoned(emu, (cols,), x.dtype, offset)
    norm_backward(
        dtype,
        on(emu, x, offset),
        emu.array(scales),
        on(emu, weight, offset),
        on(emu, grad, offset),
        on(emu, grad_extra, offset) if extra else 0,
        grad_x,
        copy,
        grad_weight,
        emu,
        rows,
        cols,
    )
    what = f"{names[0]} {rows}x{cols}+{offset}{' extra' if extra else ''} on {target}"
    expect(device, names, what)
    ref_x, terms_x, ref_w, terms_w = ref_rms_norm_grads(t64(x), t64(weight), t64(grad), EPS)
    if extra:
        ref_x, terms_x = ref_x + t64(grad_extra), terms_x + t64(grad_extra).abs()
    got_x = written(emu, grad_x, what + " d_x")
    assert_close(t64(got_x), ref_x, terms_x, dtype, seed, what + " d_x")
    # the same bound as tests/test_mlp_torch.py's for sums over the rows
    got_w = t64(written(emu, grad_weight, what + " d_w"))
    assert_close(got_w, ref_w, terms_w, dtype, seed, what + " d_w", 1e-5 * 40)
    if not isinstance(copy, int):
        assert np.array_equal(
            written(emu, copy, what + " copy").view(np.uint8), got_x.view(np.uint8)
        )


# ---- every kernel ran ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_mlp_kernel_ran(target: str) -> None:
    """Every kernel of the mlp module's index was launched on ``target`` by the tests above (this
    test comes last in the module and needs them in the same run), but the option kernels, which
    tests/test_emulator_mlp_options.py runs and counts."""
    names = set(emulator(target).load("mlp").kernel_names) - set(mlp_options.kernels())
    missing = sorted(names - LAUNCHED[target])
    assert not missing, (
        f"{len(missing)} of the {len(names)} mlp kernels did not run on {target} in this run "
        f"(run the whole of tests/test_emulator_mlp.py): {', '.join(missing)}"
    )
    direct = sorted(names & DIRECT.keys())
    print(
        f"\n{target}: all {len(names)} mlp kernels ran, {len(names) - len(direct)} by the host's "
        f"choice, {len(direct)} launched by name (DIRECT): {', '.join(direct)}"
    )
