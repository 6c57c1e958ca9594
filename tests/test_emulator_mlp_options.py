"""The MLP option kernels (kernelpack.ops.mlp.options) on the emulator, against float64.

Each kernel is launched through the host's own launch functions, the emulator answering their
kernel look-ups (tests/test_emulator_mlp.py's Device). Inputs are random from a seed printed with
any failure, outputs poisoned (NaN) before the launch; rows at a stride are views into rows twice
as long, whose second halves must stay poisoned. References: float64, with the roundings each
casting mode makes (mlp.cu's comment) applied to the float64 values, and the bound of
tests/test_mlp.py's tolerance for each rounding the mode takes; torch's SiLU-and-mul roundings
against float64's silu rounded as torch rounds it.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import pytest

from kernelpack.ops.mlp import options
from tests.test_emulator import RUN_TARGETS, emulator
from tests.test_emulator_mlp import LAUNCHED, Device, expect, inputs, poisoned, written
from tests.test_mlp import ATOL, DTYPES, EPS, RTOL, numpy_dtype

pytestmark = pytest.mark.amd_emulator

ROWS, COLS = 3, 100  # a row of no whole vectors' alignment, several rows a block's loop takes
WEIGHT_DTYPES = [(d, d) for d in DTYPES] + [("float16", "float32"), ("bfloat16", "float32")]
# (rows' dtype, the weight's: None for a weightless norm)
WEIGHT_CASES = WEIGHT_DTYPES + [(d, None) for d in DTYPES]
# roundings of T a mode's result goes through (the bound grows by one tolerance each)
ROUNDINGS = {"gemma": 1, "llama": 2, "none": 4}


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values rounded to ``dtype`` (through float32) and widened back."""
    kind = numpy_dtype(dtype)
    return values.astype(np.float32).astype(kind).astype(np.float64)


def reference_norm(
    x: np.ndarray, weight: np.ndarray | None, dtype: str, mode: str, offset: float
) -> tuple[np.ndarray, np.ndarray]:
    """(output, row scales) in float64 with ``mode``'s roundings to ``dtype``."""
    x = x.astype(np.float64)
    mean = np.mean(x * x, axis=-1, keepdims=True)
    if mode == "none":
        mean = rounded(mean, dtype)
        scale = rounded(1.0 / np.sqrt(rounded(mean + rounded(np.array(EPS), dtype), dtype)), dtype)
    else:
        scale = 1.0 / np.sqrt(mean + EPS)
    shifted = None if weight is None else offset + weight.astype(np.float64)
    if mode == "gemma":
        out = x * scale if shifted is None else x * scale * shifted
        return out, scale[..., 0]
    normalised = rounded(x * scale, dtype)
    if shifted is None:
        return normalised, scale[..., 0]
    if mode == "none":
        shifted = rounded(rounded(np.array(offset), dtype) + weight.astype(np.float64), dtype)
    return normalised * shifted, scale[..., 0]


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, times: int, what: str) -> None:
    got64 = got.astype(np.float64)
    bound = times * (RTOL[dtype] * np.abs(want) + ATOL[dtype]) + 1e-7 * (times > 1)
    bad = ~(np.abs(got64 - want) <= bound)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} off; first {got64[bad][0]!r} expected "
        f"{want[bad][0]!r}"
    )


@pytest.mark.parametrize("mode", list(options.CASTING_MODES))
@pytest.mark.parametrize("residual", [False, True], ids=["norm", "add"])
@pytest.mark.parametrize(("dtype", "weight_dtype"), WEIGHT_CASES, ids=str)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_norm_with_options(
    target: str,
    dtype: str,
    weight_dtype: str | None,
    residual: bool,
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows at a stride (views of rows twice as long), in place where there is a residual (as
    fused_add_rms_norm over vLLM's strided views), the Gemma offset, each casting mode; a
    weight of None is a weightless norm."""
    weighted = weight_dtype is not None
    wd = weight_dtype or dtype
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu = device.emu
    offset = 1.0 if mode == "gemma" else 0.5
    wide = inputs(rng, (ROWS, 2 * COLS), dtype)
    x = wide[:, :COLS]
    weight = inputs(rng, (COLS,), wd, 0.1) if weighted else None
    w = emu.array(weight) if weight is not None else 0
    xs = emu.array(wide)
    scales = poisoned(emu, (ROWS,), np.float32)
    stride = 2 * COLS
    name = options.norm_name(residual, dtype, wd, mode)
    if residual:
        residual_wide = inputs(rng, (ROWS, 2 * COLS), dtype)
        rs = emu.array(residual_wide)
        pointers: tuple[Any, ...] = (xs, rs, w, xs, rs, scales)
        strides: tuple[int, ...] = (stride,) * 4
    else:
        out = poisoned(emu, (ROWS, stride), wide.dtype)
        pointers, strides = (xs, w, out, scales), (stride, stride)
    options.launch_norm(
        "emulator",
        dtype,
        wd,
        mode,
        pointers,
        strides,
        ROWS,
        COLS,
        EPS,
        offset,
        0,
    )
    what = f"{name} {ROWS}x{COLS} at stride {stride} on {target} (seed {seed})"
    expect(device, [name], what)
    of = x.astype(np.float64)
    if residual:
        summed = rounded(of + residual_wide[:, :COLS].astype(np.float64), dtype)
        got_residual = emu.numpy(rs)
        assert_close(got_residual[:, :COLS], summed, dtype, 1, what + " residual")
        untouched = got_residual[:, COLS:].astype(np.float64)
        assert (untouched == residual_wide[:, COLS:].astype(np.float64)).all(), what
        of = summed
        got_wide = emu.numpy(xs)
        assert (got_wide[:, COLS:].astype(np.float64) == wide[:, COLS:].astype(np.float64)).all()
    else:
        got_wide = emu.numpy(out)
        assert np.isnan(got_wide[:, COLS:].astype(np.float64)).all(), what + ": wrote past a row"
    want, want_scales = reference_norm(of, weight, dtype, mode, offset)
    assert_close(got_wide[:, :COLS], want, dtype, ROUNDINGS[mode], what)
    got_scales = written(emu, scales, what + " row scales").astype(np.float64)
    assert_close(got_scales, want_scales, "float32", 2 if mode != "none" else 4e3, what)


def test_the_casting_modes_round_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    """llama's double rounding gives other bits than gemma's single one on bfloat16 rows: the
    mode reaches the kernel (else every mode's check above could pass on one kernel)."""
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(RUN_TARGETS[0], monkeypatch)
    emu = device.emu
    x, weight = inputs(rng, (ROWS, COLS), "bfloat16"), inputs(rng, (COLS,), "bfloat16")
    results = {}
    for mode in ("gemma", "llama"):
        out = poisoned(emu, (ROWS, COLS), x.dtype)
        pointers = (emu.array(x), emu.array(weight), out, 0)
        options.launch_norm(
            "emulator",
            "bfloat16",
            "bfloat16",
            mode,
            pointers,
            (COLS, COLS),
            ROWS,
            COLS,
            EPS,
            0.0,
            0,
        )
        results[mode] = written(emu, out, mode).astype(np.float64)
    assert (results["gemma"] != results["llama"]).any(), f"seed {seed}"


@pytest.mark.parametrize(("dtype", "weight_dtype"), WEIGHT_CASES, ids=str)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_norm_with_options_backward(
    target: str, dtype: str, weight_dtype: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """grad_x (with grad_extra) and grad_weight with the offset, against float64's formula
    from the row scales (tests/test_emulator_mlp.py's bound: a few roundings of the terms)."""
    weighted = weight_dtype is not None
    wd = weight_dtype or dtype
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu = device.emu
    rows, offset = 5, 1.0
    x, grad, extra = (inputs(rng, (rows, COLS), dtype) for _ in range(3))
    weight = inputs(rng, (COLS,), wd, 0.1) if weighted else None
    x64, dy = x.astype(np.float64), grad.astype(np.float64)
    r = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + EPS)
    scales = r[:, 0].astype(np.float32)
    shifted = 1.0 if weight is None else offset + weight.astype(np.float64)
    m = dy * shifted
    want_x = r * m - x64 * r**3 * np.mean(m * x64, axis=-1, keepdims=True) + extra
    grad_x = poisoned(emu, (rows, COLS), x.dtype)
    partial = poisoned(emu, (options.backward_blocks(rows), COLS), np.float32)
    grad_weight = poisoned(emu, (COLS,), numpy_dtype(wd)) if weighted else 0
    w = emu.array(weight) if weight is not None else 0
    pointers = (emu.array(x), emu.array(scales), w, emu.array(grad), emu.array(extra), grad_x)
    options.launch_norm_backward(
        "emulator", dtype, wd, pointers, partial, grad_weight, rows, COLS, offset, 0
    )
    names = [options.backward_name(dtype, wd)]
    if weighted:
        names.append(f"mlp::rms_norm_weight_grad<{options.KERNEL_TYPE[wd]}>")
    what = f"{names[0]} {rows}x{COLS} on {target} (seed {seed})"
    expect(device, names, what)
    # the terms' size bounds the float32 arithmetic's error; then one rounding to the dtype
    terms = np.abs(r * m) + np.abs(x64 * r**3 * np.mean(np.abs(m * x64), -1, keepdims=True))
    got_x = written(emu, grad_x, what).astype(np.float64)
    bound = RTOL[dtype] * np.abs(want_x) + 1e-5 * (terms + np.abs(extra)) + ATOL[dtype]
    bad = ~(np.abs(got_x - want_x) <= bound)
    assert not bad.any(), f"{what}: grad_x {int(bad.sum())} off"
    if weighted:
        want_w = (dy * x64 * r).sum(0)
        got_w = written(emu, grad_weight, what + " grad_weight").astype(np.float64)
        bound_w = RTOL[wd] * np.abs(want_w) + 1e-5 * np.abs(dy * x64 * r).sum(0) + ATOL[wd]
        assert (np.abs(got_w - want_w) <= bound_w).all(), f"{what}: grad_weight off"


MULTIPLIERS = [(0.7, 1.3), (1.0, 1.0)]


@pytest.mark.parametrize(("gate_multiplier", "down_multiplier"), MULTIPLIERS, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_swiglu_with_multipliers(
    target: str,
    dtype: str,
    gate_multiplier: float,
    down_multiplier: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Falcon-H1's silu(gate * m_gate) * up * m_down and its gradients, against float64."""
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu = device.emu
    n = 1001
    gate, up, grad = (
        inputs(rng, (n,), dtype, 3.0),
        inputs(rng, (n,), dtype),
        inputs(rng, (n,), dtype),
    )
    out = poisoned(emu, (n,), gate.dtype)
    g, u, dy = (a.astype(np.float64) for a in (gate, up, grad))
    options.launch_swiglu_scaled(
        "emulator",
        dtype,
        (emu.array(gate), emu.array(up), out),
        n,
        gate_multiplier,
        down_multiplier,
        0,
    )
    v = g * gate_multiplier
    s = 1.0 / (1.0 + np.exp(-v))
    what = f"swiglu_scaled {dtype} on {target} (seed {seed})"
    assert_close(written(emu, out, what), v * s * u * down_multiplier, dtype, 1, what)
    grad_gate, grad_up = poisoned(emu, (n,), gate.dtype), poisoned(emu, (n,), gate.dtype)
    arrays = (emu.array(gate), emu.array(up), emu.array(grad), grad_gate, grad_up)
    options.launch_swiglu_scaled("emulator", dtype, arrays, n, gate_multiplier, down_multiplier, 0)
    d = dy * down_multiplier
    want_up = d * v * s
    want_gate = d * u * s * (1 + v * (1 - s)) * gate_multiplier
    expect(
        device,
        [options.elementwise_name(k, dtype) for k in ("swiglu_scaled", "swiglu_scaled_backward")],
        what,
    )
    assert_close(written(emu, grad_up, what + " grad_up"), want_up, dtype, 2, what + " grad_up")
    assert_close(
        written(emu, grad_gate, what + " grad_gate"), want_gate, dtype, 3, what + " grad_gate"
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_silu_and_mul_with_torchs_roundings(
    target: str, dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """silu rounded to the dtype, then the product rounded: against float64's silu rounded so,
    times up, rounded (16-bit: the same bits but where float32's silu lies within its error of
    a rounding boundary of the dtype, rare; float32: within a few ulp, the expf's and the
    division's)."""
    seed = secrets.randbits(62)
    rng = np.random.default_rng(seed)
    device = Device(target, monkeypatch)
    emu = device.emu
    rows, cols = 3, 300
    x = inputs(rng, (rows, 2 * cols), dtype, 3.0)
    out = poisoned(emu, (rows, cols), x.dtype)
    options.launch_silu_and_mul_as_torch("emulator", dtype, emu.array(x), out, rows, cols, 0)
    what = f"silu_and_mul_as_torch {dtype} on {target} (seed {seed})"
    expect(device, [options.elementwise_name("silu_and_mul_as_torch", dtype)], what)
    g, u = x[:, :cols].astype(np.float64), x[:, cols:].astype(np.float64)
    want = rounded(rounded(g / (1.0 + np.exp(-g)), dtype) * u, dtype)
    got = written(emu, out, what).astype(np.float64)
    if dtype == "float32":
        assert_close(got, want, dtype, 1, what)
        return
    mismatched = got != want
    assert mismatched.mean() < 0.01, f"{what}: {int(mismatched.sum())} of {got.size} differ"
    # where they differ, by one step of the dtype: a silu on a rounding boundary
    assert_close(got, want, dtype, 3, what)


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_option_kernel_ran(target: str) -> None:
    """The option kernels of the mlp module's index are the ones options.kernels() names, and
    each ran on ``target`` in the tests above (this test comes last and needs them in the run)."""
    marks = ("_options<", "_options_backward<", "_scaled<", "_scaled_backward<", "_as_torch<")
    names = emulator(target).load("mlp").kernel_names
    built = {n for n in names if any(mark in n for mark in marks)}
    assert built == set(options.kernels()), sorted(set(options.kernels()) - built)
    missing = sorted(built - LAUNCHED[target])
    assert not missing, f"{len(missing)} option kernels did not run on {target}: {missing}"
