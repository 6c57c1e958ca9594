"""The backward kernels and torch.ops.kernelpack on the GPU: against float64 references, opcheck,
autograd, CUDA graphs and torch.compile.

Kernel tests launch the backward kernels directly into NaN-poisoned outputs (with NaN guard zones
after them, and a NaN-poisoned partial-sum buffer), on fresh random data from a new seed each run
(printed with any failure), and compare with the gradients written out in float64. The bound of
each element is a relative tolerance of the sum of the magnitudes of the terms that make it (so
a gradient that cancels to near zero is held to the rounding of its terms, not to its own tiny
size), plus the final rounding to the dtype.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from typing import Any

import pytest

from kernelpack import mlp
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import launch as mlp_launch

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
# Importing torch's inductor (torch 2.11) warns through torch.jit's deprecated script_method.
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

from kernelpack.ops.mlp import torch_ops  # noqa: E402  (registers torch.ops.kernelpack)

# The device the counted expectations are for: an sm_90 GPU of 132 SMs (the H100's and H200's).
H200 = mlp_geometry.DeviceFacts("sm_90", 132)
SMS = H200.multiprocessors

OPS = torch.ops.kernelpack
DTYPES = ["float32", "float16", "bfloat16"]
# Relative tolerance of the magnitude of the terms (float32 arithmetic with the fast exp and
# reciprocal), and the final rounding to the dtype (half an ulp).
TERMS = 2e-5
ROUNDING = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
ABSOLUTE = {"float32": 1e-30, "float16": 2.0**-24, "bfloat16": 1e-30}  # float16 subnormals
GUARD = 64
EPS = 1e-6
# Row scales: a float32 sum of squares (positive terms: a thread's few in turn, then a tree of a
# few levels, about 30 roundings at most), its square root taken by rsqrtf (2 ulp)
ROW_SCALE_TOLERANCE = 4e-6


@pytest.fixture
def rng() -> tuple[Any, int]:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    seed = secrets.randbits(62)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    return generator, seed


def randn(rng: tuple[Any, int], shape: tuple[int, ...], dtype: str, offset: int = 0) -> Any:
    n = math.prod(shape)
    buffer = torch.randn(offset + n, generator=rng[0], device="cuda")
    return buffer.to(getattr(torch, dtype))[offset:].view(shape)


def poisoned(shape: tuple[int, ...], dtype: Any, offset: int = 0) -> tuple[Any, Any]:
    n = math.prod(shape)
    buffer = torch.full((offset + n + GUARD,), math.nan, device="cuda", dtype=dtype)
    return buffer, buffer[offset : offset + n].view(shape)


def assert_guards(buffer: Any, offset: int, n: int) -> None:
    assert bool(buffer[:offset].isnan().all()) and bool(buffer[offset + n :].isnan().all()), (
        "a kernel wrote outside its output"
    )


def assert_close(
    got: Any, reference: Any, terms: Any, dtype: str, seed: int, what: str, tolerance: float = TERMS
) -> None:
    """|got - reference| <= tolerance * terms + rounding * |reference| + absolute, NaN failing."""
    error = (got.double() - reference).abs()
    bound = tolerance * terms + ROUNDING[dtype] * reference.abs() + ABSOLUTE[dtype]
    bad = ~(error <= bound)
    if bool(bad.any()):
        index = int(bad.reshape(-1).nonzero()[0])
        raise AssertionError(
            f"{what} {dtype} (seed {seed}): {int(bad.sum())} of {bad.numel()} elements off; first "
            f"at {index}: got {got.reshape(-1)[index].item()!r}, expected "
            f"{reference.reshape(-1)[index].item()!r} (bound {bound.reshape(-1)[index].item():.3g})"
        )


# ---- float64 references -----------------------------------------------------------------------


def ref_swiglu_grads(gate: Any, up: Any, grad: Any) -> tuple[Any, Any, Any, Any]:
    """(grad_gate, its terms, grad_up, its terms) in float64."""
    g, u, dy = gate.double(), up.double(), grad.double()
    s = torch.sigmoid(g)
    grad_up = dy * g * s
    grad_gate = dy * u * s * (1 + g * (1 - s))
    terms_gate = (dy * u * s).abs() * (1 + (g * (1 - s)).abs())
    return grad_gate, terms_gate, grad_up, grad_up.abs()


def ref_rms_norm_grads(x: Any, weight: Any, grad: Any, eps: float) -> tuple[Any, Any, Any, Any]:
    """(grad_x, its terms, grad_weight, its terms) in float64."""
    x, w, dy = x.double(), weight.double(), grad.double()
    cols = x.shape[-1]
    r = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
    dot = (dy * w * x).sum(-1, keepdim=True) / cols
    grad_x = r * w * dy - x * r**3 * dot
    terms_x = (r * w * dy).abs() + x.abs() * r**3 * (dy * w * x).abs().sum(-1, keepdim=True) / cols
    flat = (dy * x * r).reshape(-1, cols)
    return grad_x, terms_x, flat.sum(0), flat.abs().sum(0)


def ref_row_scales(x: Any, eps: float) -> Any:
    """Each row's scale 1 / sqrt(mean(x^2) + eps), from float64, as the float32 the backward
    kernels read (what the forward stores; test_mlp.py checks the forward's against the same)."""
    return (x.double().square().mean(-1) + eps).rsqrt().float().contiguous()


# ---- the backward kernels, launched directly --------------------------------------------------


def stream() -> int:
    return int(torch.cuda.current_stream().cuda_stream)


# 1: every array one element in, the scalar path; 4: 8 bytes in for 16-bit dtypes (8-byte vectors)
@pytest.mark.parametrize("offset", [0, 1, 4])
@pytest.mark.parametrize("n", [1, 7, 8, 9, 4099, 11008, 65536, 64 * 11008, 1_000_003])
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_backward(rng: Any, dtype: str, n: int, offset: int) -> None:
    gate = randn(rng, (n,), dtype, offset) * 4  # past the sigmoid's knee both ways
    up, grad = randn(rng, (n,), dtype, offset), randn(rng, (n,), dtype, offset)
    gate_buffer, grad_gate = poisoned((n,), gate.dtype, offset)
    up_buffer, grad_up = poisoned((n,), gate.dtype, offset)
    mlp_launch.launch_swiglu_backward(
        "cuda:0",
        dtype,
        gate.data_ptr(),
        up.data_ptr(),
        grad.data_ptr(),
        grad_gate.data_ptr(),
        grad_up.data_ptr(),
        n,
        stream(),
    )
    ref_gate, terms_gate, ref_up, terms_up = ref_swiglu_grads(gate, up, grad)
    assert_close(grad_gate, ref_gate, terms_gate, dtype, rng[1], f"swiglu d_gate n={n}+{offset}")
    assert_close(grad_up, ref_up, terms_up, dtype, rng[1], f"swiglu d_up n={n}+{offset}")
    assert_guards(gate_buffer, offset, n)
    assert_guards(up_buffer, offset, n)


@pytest.mark.parametrize("offset", [0, 1, 4])
@pytest.mark.parametrize(
    ("rows", "cols"),
    [(1, 1), (3, 3), (2, 8), (5, 9), (3, 4096), (1, 11008), (64, 11008), (70_001, 8)],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_backward(rng: Any, dtype: str, rows: int, cols: int, offset: int) -> None:
    x = randn(rng, (rows, 2 * cols), dtype, offset) * 4
    grad = randn(rng, (rows, cols), dtype, offset)
    buffer, grad_x = poisoned((rows, 2 * cols), x.dtype, offset)
    mlp_launch.launch_silu_and_mul_backward(
        "cuda:0", dtype, x.data_ptr(), grad.data_ptr(), grad_x.data_ptr(), rows, cols, stream()
    )
    ref_gate, terms_gate, ref_up, terms_up = ref_swiglu_grads(x[:, :cols], x[:, cols:], grad)
    what = f"silu_and_mul backward {rows}x{cols}+{offset}"
    assert_close(grad_x[:, :cols], ref_gate, terms_gate, dtype, rng[1], what + " d_gate")
    assert_close(grad_x[:, cols:], ref_up, terms_up, dtype, rng[1], what + " d_up")
    assert_guards(buffer, offset, rows * 2 * cols)


def exact_form(
    op: str, dtype: str, streaming: bool, vector_bytes: int = mlp_geometry.VECTOR_BYTES
) -> Any:
    """``op``'s exact form by name, whatever the host would choose for the call: the 16-byte
    streaming one ("mlp::swiglu_exact_streaming<float>") or the plain one in vectors of
    ``vector_bytes`` ("mlp::swiglu_exact<float, 16>")."""
    kernel_type = mlp_geometry.KERNEL_TYPE[dtype]
    form = (
        f"_exact_streaming<{kernel_type}>"
        if streaming
        else f"_exact<{kernel_type}, {vector_bytes}>"
    )
    return mlp_launch.load_kernel("cuda:0", f"mlp::{op}{form}")


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_forms_are_right_streaming_or_not(rng: Any, dtype: str, streaming: bool) -> None:
    """The exact forms of the four elementwise kernels the host takes up to STREAMING_MAX_BYTES
    (16-byte vectors through streaming cache hints) and past it (plain accesses: the forwards in
    16-byte vectors, the backwards in 8-byte ones), more than a test should move: launched by
    name at 64 x 11008 on the grid the host sizes for their vector, against float64."""
    rows, cols = 64, 11008
    n = rows * cols
    backward_bytes = mlp_geometry.VECTOR_BYTES if streaming else mlp_geometry.NARROW_BYTES

    def kernel(op: str) -> Any:
        vector_bytes = backward_bytes if op.endswith("_backward") else mlp_geometry.VECTOR_BYTES
        return exact_form(op, dtype, streaming, vector_bytes)

    gate = randn(rng, (rows, cols), dtype) * 4
    up, grad = randn(rng, (rows, cols), dtype), randn(rng, (rows, cols), dtype)
    g, u = gate.double(), up.double()
    ref_out = g * torch.sigmoid(g) * u
    ref_gate, terms_gate, ref_up, terms_up = ref_swiglu_grads(gate, up, grad)
    what = f"64x{cols} {'streaming' if streaming else 'plain'}"

    launch = mlp_geometry.swiglu_launch("swiglu", n, dtype, SMS)
    assert launch.alignment == 16
    out_buffer, out = poisoned((rows, cols), gate.dtype)
    kernel("swiglu").launch(launch.grid, launch.block, gate, up, out, n, stream=stream())
    assert_close(out, ref_out, ref_out.abs(), dtype, rng[1], "swiglu " + what)
    assert_guards(out_buffer, 0, n)
    grid, block = mlp_geometry.swiglu_geometry(n, dtype, SMS, backward_bytes)
    gate_buffer, grad_gate = poisoned((rows, cols), gate.dtype)
    up_buffer, grad_up = poisoned((rows, cols), gate.dtype)
    kernel("swiglu_backward").launch(
        grid, block, gate, up, grad, grad_gate, grad_up, n, stream=stream()
    )
    assert_close(grad_gate, ref_gate, terms_gate, dtype, rng[1], "swiglu d_gate " + what)
    assert_close(grad_up, ref_up, terms_up, dtype, rng[1], "swiglu d_up " + what)
    assert_guards(gate_buffer, 0, n)
    assert_guards(up_buffer, 0, n)

    x = torch.cat((gate, up), dim=1)
    launch = mlp_geometry.silu_and_mul_launch("silu_and_mul", rows, cols, dtype, SMS)
    assert launch.alignment == 16
    out_buffer, out = poisoned((rows, cols), gate.dtype)
    kernel("silu_and_mul").launch(launch.grid, launch.block, x, out, rows, cols, stream=stream())
    assert_close(out, ref_out, ref_out.abs(), dtype, rng[1], "silu_and_mul " + what)
    assert_guards(out_buffer, 0, n)
    grid_2d, block = mlp_geometry.silu_and_mul_geometry(rows, cols, dtype, SMS, backward_bytes)
    x_buffer, grad_x = poisoned((rows, 2 * cols), gate.dtype)
    kernel("silu_and_mul_backward").launch(
        grid_2d, block, x, grad, grad_x, rows, cols, stream=stream()
    )
    assert_close(grad_x[:, :cols], ref_gate, terms_gate, dtype, rng[1], "d_gate " + what)
    assert_close(grad_x[:, cols:], ref_up, terms_up, dtype, rng[1], "d_up " + what)
    assert_guards(x_buffer, 0, 2 * n)


# Gates at the ends of the sigmoid: where e^-g overflows float32 (below about -88) and where it
# underflows, as far out as float16 keeps g * u finite (|u| < 8); silu(g) * u is a signed zero
# there, or g * u.
SIGMOID_ENDS = [-8000.0, -1000.0, -100.0, -88.5, -87.0, -20.0, -1.0, -0.0]
SIGMOID_ENDS += [-g for g in SIGMOID_ENDS]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_forwards_at_the_ends_of_the_sigmoid(rng: Any, dtype: str, streaming: bool) -> None:
    """The exact forwards past STREAMING_MAX_BYTES (plain, silu_mul_divided: g / (1 + e^-g)) and
    up to it (streaming, the fast sigmoid), launched by name at 64 x 11008 on the host's grid,
    with every gate at an end of the sigmoid: within float64's rounding, never NaN."""
    rows, cols = 64, 11008
    n = rows * cols
    ends = torch.tensor(SIGMOID_ENDS, device="cuda", dtype=torch.float64)
    gate = ends.repeat(n // len(SIGMOID_ENDS)).to(getattr(torch, dtype)).view(rows, cols)
    up = randn(rng, (rows, cols), dtype)
    g, u = gate.double(), up.double()
    ref_out = g * torch.sigmoid(g) * u
    what = f"64x{cols} {'streaming' if streaming else 'plain'} at the sigmoid's ends"

    launch = mlp_geometry.swiglu_launch("swiglu", n, dtype, SMS)
    out_buffer, out = poisoned((rows, cols), gate.dtype)
    kernel = exact_form("swiglu", dtype, streaming)
    kernel.launch(launch.grid, launch.block, gate, up, out, n, stream=stream())
    assert_close(out, ref_out, ref_out.abs(), dtype, rng[1], "swiglu " + what)
    assert_guards(out_buffer, 0, n)

    x = torch.cat((gate, up), dim=1)
    launch = mlp_geometry.silu_and_mul_launch("silu_and_mul", rows, cols, dtype, SMS)
    out_buffer, out = poisoned((rows, cols), gate.dtype)
    kernel = exact_form("silu_and_mul", dtype, streaming)
    kernel.launch(launch.grid, launch.block, x, out, rows, cols, stream=stream())
    assert_close(out, ref_out, ref_out.abs(), dtype, rng[1], "silu_and_mul " + what)
    assert_guards(out_buffer, 0, n)


# Rows past the backward grid (264 blocks) and up to 100k, rows past the register cache (8192
# elements), odd lengths (the scalar path), one row.
NORM_CASES = [
    (1, 1),
    (3, 7),
    (2, 8),
    (5, 100),
    (1, 4096),
    (300, 4096),
    (2, 8200),
    (3, 16384),
    (2, 32776),
    (530, 16392),  # rows past the registers' cache, three rows a block on the longest
    (1000, 264),
    (100_003, 8),
]


@pytest.mark.parametrize("extra", [False, True])  # the add_rms_norm form: grad_extra and a copy
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize(("rows", "cols"), NORM_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_backward(
    rng: Any, dtype: str, rows: int, cols: int, offset: int, extra: bool
) -> None:
    seed = rng[1]
    x = randn(rng, (rows, cols), dtype, offset)
    weight = randn(rng, (cols,), dtype, offset)
    grad = randn(rng, (rows, cols), dtype, offset)
    grad_extra = randn(rng, (rows, cols), dtype, offset) if extra else None
    x_buffer, grad_x = poisoned((rows, cols), x.dtype, offset)
    copy_buffer, grad_copy = poisoned((rows, cols), x.dtype, offset)
    weight_buffer, grad_weight = poisoned((cols,), x.dtype, offset)
    blocks = mlp_geometry.backward_row_geometry(rows, cols, dtype, H200)[0]
    partial = torch.full((blocks, cols), math.nan, device="cuda")
    row_scales = ref_row_scales(x, EPS)
    arrays = mlp_launch.NormGrads(
        x.data_ptr(),
        row_scales.data_ptr(),
        weight.data_ptr(),
        grad.data_ptr(),
        grad_extra.data_ptr() if extra else 0,
        grad_x.data_ptr(),
        grad_weight.data_ptr(),
    )
    mlp_launch.launch_rms_norm_backward(
        "cuda:0",
        dtype,
        arrays,
        grad_copy.data_ptr() if extra else 0,
        partial.data_ptr(),
        rows,
        cols,
        stream(),
    )
    ref_x, terms_x, ref_weight, terms_weight = ref_rms_norm_grads(x, weight, grad, EPS)
    if grad_extra is not None:
        ref_x = ref_x + grad_extra.double()
        terms_x = terms_x + grad_extra.double().abs()
    what = f"rms_norm backward {rows}x{cols}+{offset}{' extra' if extra else ''}"
    assert_close(grad_x, ref_x, terms_x, dtype, seed, what + " d_x")
    # float32 sums over up to 100k rows: each block adds its rows, then the blocks are added.
    assert_close(grad_weight, ref_weight, terms_weight, dtype, seed, what + " d_w", 1e-5 * 40)
    assert_guards(x_buffer, offset, rows * cols)
    assert_guards(weight_buffer, offset, cols)
    if extra:
        assert torch.equal(grad_copy, grad_x)
        assert_guards(copy_buffer, offset, rows * cols)
    else:
        assert bool(copy_buffer.isnan().all()), "grad_x_copy written though not asked for"


# (rows, cols, grid, threads): the host's geometry (grid and threads None), and others the kernel
# must also get right: fewer blocks than rows (a block takes several), more blocks than rows
# (blocks without rows), rows longer than the registers' chunks, odd lengths (the scalar path).
SHORT_CASES = [
    (1, 8, None, None),
    (1, 4096, None, None),
    (2, 4096, None, None),
    (3, 136, None, None),
    (64, 4096, None, None),
    (132, 8192, None, None),
    (1, 4104, 1, 64),
    (5, 1000, 2, 128),
    (3, 200, 6, 64),
    (9, 9000, 4, 512),
    (2, 7, 2, 64),
]


@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize(("rows", "cols", "grid", "threads"), SHORT_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_backward_short(
    rng: Any,
    dtype: str,
    rows: int,
    cols: int,
    grid: int | None,
    threads: int | None,
    offset: int,
    extra: bool,
) -> None:
    name = mlp_geometry.kernel_name("rms_norm_backward_short", dtype)
    check_short_backward(rng, name, dtype, rows, cols, grid, threads, offset, extra)


# (rows, cols, grid, fixed length): the fixed-length backward at the host's geometry (grid None),
# with fewer and more blocks than rows, and on rows of another length (the scalar loop)
FIXED_BACKWARD_CASES = [
    (1, 4096, None, 4096),
    (64, 4096, None, 4096),
    (5, 4096, 2, 4096),
    (3, 4096, 6, 4096),
    (1, 8192, None, 8192),
    (132, 8192, None, 8192),
    (3, 1000, None, 4096),
]


@pytest.mark.parametrize("extra", [False, True])
@pytest.mark.parametrize("offset", [0, 1])
@pytest.mark.parametrize(
    ("dtype", "rows", "cols", "grid", "length"),
    [
        (dtype, *case)
        for dtype in DTYPES
        for case in FIXED_BACKWARD_CASES
        if mlp_geometry.fixed_backward(case[3], dtype)  # float32 8192 has none (2048 vectors)
    ],
)
def test_rms_norm_backward_fixed(
    rng: Any,
    dtype: str,
    rows: int,
    cols: int,
    grid: int | None,
    length: int,
    offset: int,
    extra: bool,
) -> None:
    name = mlp_geometry.kernel_name("rms_norm_backward_fixed", dtype, length)
    threads = mlp_geometry.SHORT_BACKWARD_THREADS
    check_short_backward(rng, name, dtype, rows, cols, grid, threads, offset, extra)


def check_short_backward(
    rng: Any,
    name: str,
    dtype: str,
    rows: int,
    cols: int,
    grid: int | None,
    threads: int | None,
    offset: int,
    extra: bool,
) -> None:
    """The short-row backward ``name`` launched directly into poisoned outputs (and poisoned
    scratch for float32 shares; null scratch where the kernel must not write any: one row in one
    block, and 16-bit types), with row scales from float64, then (unless one row in one block
    wrote the weight gradient itself) its weight sum: over the rows from the inputs and the row
    scales (16-bit types, a column a thread), or over the grid's rows of float32 shares (float32)."""
    seed = rng[1]
    x = randn(rng, (rows, cols), dtype, offset)
    weight = randn(rng, (cols,), dtype, offset)
    grad = randn(rng, (rows, cols), dtype, offset)
    grad_extra = randn(rng, (rows, cols), dtype, offset) if extra else None
    x_buffer, grad_x = poisoned((rows, cols), x.dtype, offset)
    weight_buffer, grad_weight = poisoned((cols,), x.dtype, offset)
    if threads is None:
        threads = mlp_geometry.short_backward_threads(rows, cols, dtype, SMS) or 512
    blocks = rows if grid is None else grid
    direct = rows == 1 and blocks == 1
    from_inputs = dtype in mlp_geometry.ROW_SCALE_DTYPES
    scratch = torch.full((blocks, cols), math.nan, device="cuda")
    row_scales = ref_row_scales(x, EPS)
    mlp_launch.load_kernel("cuda:0", name).launch(
        blocks,
        threads,
        x.data_ptr(),
        row_scales.data_ptr(),
        weight.data_ptr(),
        grad.data_ptr(),
        grad_extra.data_ptr() if extra else 0,
        grad_x.data_ptr(),
        grad_weight.data_ptr(),
        0 if direct or from_inputs else scratch.data_ptr(),
        rows,
        cols,
        stream=stream(),
    )
    if direct:
        pass  # the kernel wrote grad_weight itself
    elif from_inputs:
        assert bool(weight_buffer.isnan().all()), "the kernel wrote grad_weight"
        mlp_launch.launch_rms_norm_weight_grad_inputs(
            "cuda:0", dtype, x, grad, row_scales, grad_weight, rows, cols, stream()
        )
    else:
        assert bool(weight_buffer.isnan().all()), "the kernel wrote grad_weight beside its shares"
        columns, block = mlp_geometry.weight_grad_geometry(cols, blocks)
        sum_name = mlp_geometry.kernel_name("rms_norm_weight_grad", dtype)
        mlp_launch.load_kernel("cuda:0", sum_name).launch(
            columns, block, scratch, grad_weight, blocks, cols, stream=stream()
        )
    ref_x, terms_x, ref_weight, terms_weight = ref_rms_norm_grads(x, weight, grad, EPS)
    if grad_extra is not None:
        ref_x = ref_x + grad_extra.double()
        terms_x = terms_x + grad_extra.double().abs()
    what = f"{name} {rows}x{cols}+{offset} grid {blocks}x{threads}"
    what += " extra" if extra else ""
    assert_close(grad_x, ref_x, terms_x, dtype, seed, what + " d_x")
    assert_close(grad_weight, ref_weight, terms_weight, dtype, seed, what + " d_w", 1e-5 * 40)
    assert_guards(x_buffer, offset, rows * cols)
    assert_guards(weight_buffer, offset, cols)


@pytest.mark.parametrize("shape", [(4096, 4096), (64, 4096), (1, 4096)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_weight_gradient_is_deterministic(
    rng: Any, dtype: str, shape: tuple[int, int]
) -> None:
    """Bit for bit the same gradients every run, through the general backward (4096 rows) and
    the short-row one (64 and 1 row)."""
    x = randn(rng, shape, dtype)
    weight = randn(rng, shape[-1:], dtype)
    grad = randn(rng, shape, dtype)
    row_scales = ref_row_scales(x, EPS)
    results = [OPS.rms_norm_backward(grad, x, weight, row_scales) for _ in range(3)]
    for grad_x, grad_weight in results[1:]:
        assert torch.equal(grad_x, results[0][0])
        assert torch.equal(
            grad_weight.view(torch.int16 if dtype != "float32" else torch.int32),
            results[0][1].view(torch.int16 if dtype != "float32" else torch.int32),
        )


@pytest.mark.parametrize(
    ("grid", "block"),
    [(1, (32, 3)), (2, (16, 8)), (7, (32, 8)), (3, (128, 1)), (1, (64, 4)), (4, (16, 16))],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_gradient_sum_is_right_on_any_geometry(
    rng: Any, dtype: str, grid: int, block: tuple[int, int]
) -> None:
    """The column sum of the partial rows, at geometries other than the host's: fewer blocks
    than column groups (the blocks stride), slices that do not divide the rows."""
    blocks, cols = 37, 300
    partial = torch.randn(blocks, cols, generator=rng[0], device="cuda")
    buffer, grad_weight = poisoned((cols,), getattr(torch, dtype))
    kernel = mlp_launch.load_kernel(
        "cuda:0", mlp_geometry.kernel_name("rms_norm_weight_grad", dtype)
    )
    kernel.launch(grid, block, partial, grad_weight, blocks, cols, stream=stream())
    want = partial.double().sum(0)
    assert_close(grad_weight, want, partial.double().abs().sum(0), dtype, rng[1], f"{block}")
    assert_guards(buffer, 0, cols)


def test_rms_norm_backward_of_no_rows_gives_a_zero_weight_gradient() -> None:
    weight = torch.ones(64, device="cuda")
    grad_x, grad_weight = OPS.rms_norm_backward(
        torch.empty(0, 64, device="cuda"),
        torch.empty(0, 64, device="cuda"),
        weight,
        torch.empty(0, device="cuda"),
    )
    assert grad_x.shape == (0, 64) and bool((grad_weight == 0).all())


# ---- the ops: opcheck, autograd against float64, graphs, compile -----------------------------


def op_inputs(dtype: Any, rows: int = 5, cols: int = 96, grad: bool = True) -> dict[str, Any]:
    def make(*shape: int) -> Any:
        return torch.randn(shape, device="cuda", dtype=dtype).requires_grad_(grad)

    return {
        "swiglu": (make(rows, cols), make(rows, cols)),
        "silu_and_mul": (make(rows, 2 * cols),),
        "rms_norm": (make(rows, cols), make(cols), 1e-5),
        "add_rms_norm": (make(rows, cols), make(rows, cols), make(cols), 1e-5),
        "rms_norm_with_scale": (make(rows, cols), make(cols), 1e-5),
        "add_rms_norm_with_scale": (make(rows, cols), make(rows, cols), make(cols), 1e-5),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_opcheck_on_the_gpu(dtype: Any) -> None:
    cases = list(op_inputs(dtype).items())
    x = torch.randn(3, 64, device="cuda", dtype=dtype)
    weight = torch.randn(64, device="cuda", dtype=dtype)
    cases += [
        ("fused_add_rms_norm", (x.clone(), x.clone(), weight, 1e-6)),
        ("swiglu_backward", (x, x * 2, x * 3)),
        ("silu_and_mul_backward", (x[:, :32].contiguous(), x)),
        ("rms_norm_backward", (x, x * 2, weight, ref_row_scales(x * 2, 1e-6))),
        ("add_rms_norm_backward", (x, x * 2, x * 3, weight, ref_row_scales(x * 3, 1e-6))),
    ]
    # the options: a float32 weight, none, the offset and the casting modes, strided views
    wide = torch.randn(3, 128, device="cuda", dtype=dtype)
    weight32 = torch.randn(64, device="cuda")
    grad_x = x.clone().requires_grad_()
    cases += [
        ("rms_norm_options", (grad_x, weight32.clone().requires_grad_(), 1e-6, 1.0, "llama")),
        ("rms_norm_options_with_scale", (grad_x, None, 1e-6, 0.0, "none")),
        ("rms_norm_options_in_place", (wide.clone()[:, :64], weight)),
        ("fused_add_rms_norm_options", (wide.clone()[:, :64], x.clone(), None, 1e-6, 1.0)),
        ("rms_norm_options_backward", (x, x * 2, weight32, ref_row_scales(x * 2, 1e-6), 1.0)),
        ("swiglu_scaled", (grad_x, (x * 2).requires_grad_(), 0.7, 1.3)),
        ("swiglu_scaled_backward", (x, x * 2, x * 3, 1.5, 0.5)),
        ("silu_and_mul_as_torch", (grad_x,)),
    ]
    assert sorted(name for name, _ in cases) == sorted(torch_ops.SCHEMAS)
    for name, args in cases:
        results = torch.library.opcheck(getattr(OPS, name), args)
        assert set(results.values()) == {"SUCCESS"}, (name, results)


def reference(name: str) -> Callable[..., Any]:
    """Each op written with torch's own operations (run in float64 for the references)."""
    functions: dict[str, Callable[..., Any]] = {
        "swiglu": lambda g, u: torch.nn.functional.silu(g) * u,
        "silu_and_mul": lambda x: (
            torch.nn.functional.silu(x[..., : x.shape[-1] // 2]) * x[..., x.shape[-1] // 2 :]
        ),
        "rms_norm": lambda x, w, eps: x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w,
        "add_rms_norm": lambda x, r, w, eps: (
            (x + r) * torch.rsqrt((x + r).square().mean(-1, keepdim=True) + eps) * w,
            x + r,
        ),
    }
    return functions[name]


def relative(got: Any, expected: Any) -> float:
    got, expected = got.detach().double(), expected.detach().double()
    return float((got - expected).norm() / expected.norm().clamp_min(1e-300))


@pytest.mark.parametrize(
    ("dtype", "tolerance"),
    [(torch.float32, 2e-6), (torch.float16, 2e-3), (torch.bfloat16, 1.5e-2)],
)
@pytest.mark.parametrize("name", ["swiglu", "silu_and_mul", "rms_norm", "add_rms_norm"])
def test_autograd_against_float64(name: str, dtype: Any, tolerance: float) -> None:
    """Forward values and every input's gradient, through torch.autograd, against the same
    function in float64 autograd on the same (rounded) inputs."""
    args = op_inputs(dtype, rows=7, cols=136)[name]
    out = getattr(OPS, name)(*args)
    outs = out if isinstance(out, tuple) else (out,)
    grads_out = [torch.randn_like(o) for o in outs]
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    got = torch.autograd.grad(outs, tensors, grads_out)
    wide = [
        a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args
    ]
    expected_out = reference(name)(*wide)
    expected_outs = expected_out if isinstance(expected_out, tuple) else (expected_out,)
    expected = torch.autograd.grad(
        expected_outs,
        [a for a in wide if isinstance(a, torch.Tensor)],
        [g.double() for g in grads_out],
    )
    for o, e in zip(outs, expected_outs, strict=True):
        assert relative(o, e) < tolerance, (name, "forward", relative(o, e))
    for position, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g.dtype == dtype and g.shape == e.shape
        assert relative(g, e) < tolerance, (name, f"grad of input {position}", relative(g, e))


@pytest.mark.parametrize("used", ["norm", "sum"])
def test_add_rms_norm_gradients_when_one_output_reaches_the_loss(used: str) -> None:
    """The gradients of an output no loss used are None, not zeros (no fill kernel): the
    backward takes the norm's gradient alone, or passes the sum's to x and the residual."""
    x, residual, weight, eps = op_inputs(torch.float32, rows=5, cols=136)["add_rms_norm"]
    normed, summed = OPS.add_rms_norm(x, residual, weight, eps)
    out, index = (normed, 0) if used == "norm" else (summed, 1)
    grad_out = torch.randn_like(out)
    got = torch.autograd.grad(out, [x, residual, weight], grad_out, allow_unused=True)
    wide = [a.detach().double().requires_grad_() for a in (x, residual, weight)]
    expected_out = reference("add_rms_norm")(*wide, eps)[index]
    expected = torch.autograd.grad(expected_out, wide, grad_out.double(), allow_unused=True)
    for position, (g, e) in enumerate(zip(got, expected, strict=True)):
        if e is None:
            assert g is None or not bool(g.any()), (used, position)
            continue
        assert g is not None and relative(g, e) < 2e-6, (used, position)


def test_mlp_api_takes_the_autograd_path_for_tensors_that_need_it() -> None:
    gate = torch.randn(4, 64, device="cuda", requires_grad=True)
    up = torch.randn(4, 64, device="cuda", requires_grad=True)
    out = mlp.swiglu(gate, up)
    out.sum().backward()
    g = gate.detach().double()
    s = torch.sigmoid(g)
    expected = up.detach().double() * s * (1 + g * (1 - s))
    assert relative(gate.grad, expected) < 2e-6
    x = torch.randn(4, 64, device="cuda", requires_grad=True)
    with pytest.raises(ValueError, match="in place"):
        mlp.fused_add_rms_norm(x, torch.randn(4, 64, device="cuda"), torch.ones(64, device="cuda"))


def test_ops_without_gradients_still_reach_a_dispatch_mode() -> None:
    """The Autograd kernel's shortcut to the CUDA implementation (no gradient wanted) must not
    skip what sits below autograd: a TorchDispatchMode sees the op, and the result is right."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[Any] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            seen.append(func)
            return func(*args, **(kwargs or {}))

    gate = torch.randn(4, 64, device="cuda")
    up = torch.randn(4, 64, device="cuda")
    expected = gate.double() * torch.sigmoid(gate.double()) * up.double()
    with torch.no_grad():
        direct = OPS.swiglu(gate, up)
        with Record():
            recorded = OPS.swiglu(gate, up)
    assert seen == [torch.ops.kernelpack.swiglu.default]
    assert relative(direct, expected) < 2e-6
    assert torch.equal(direct, recorded)


def test_in_place_op_matches_the_functional_one() -> None:
    x = torch.randn(9, 4099, device="cuda", dtype=torch.bfloat16)
    residual = torch.randn_like(x)
    weight = torch.randn(4099, device="cuda", dtype=torch.bfloat16)
    out, summed = OPS.add_rms_norm(x, residual, weight, 1e-6)
    OPS.fused_add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(x, out) and torch.equal(residual, summed)


def train_step(x: Any, residual: Any, w1: Any, w2: Any) -> Any:
    """A chain of every op, for graphs and compile."""
    h, summed = OPS.add_rms_norm(x, residual, w1, 1e-6)
    h = OPS.rms_norm(OPS.swiglu(h, summed), w2, 1e-6)
    return OPS.silu_and_mul(torch.cat([h, summed], -1))


def eager_reference(x: Any, residual: Any, w1: Any, w2: Any) -> Any:
    summed = x + residual
    h = reference("rms_norm")(summed, w1, 1e-6)
    h = reference("rms_norm")(reference("swiglu")(h, summed), w2, 1e-6)
    return reference("silu_and_mul")(torch.cat([h, summed], -1))


def chain_inputs(grad: bool = True) -> list[Any]:
    shapes = [(6, 512), (6, 512), (512,), (512,)]
    return [torch.randn(s, device="cuda").requires_grad_(grad) for s in shapes]


def test_cuda_graph_capture_of_forward_and_backward() -> None:
    static = chain_inputs()
    stream_ = torch.cuda.Stream()
    stream_.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream_):  # warm-up on a side stream, as torch's docs do
        for _ in range(2):
            grads = torch.autograd.grad(train_step(*static).sum(), static)
    torch.cuda.current_stream().wait_stream(stream_)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = train_step(*static)
        static_grads = torch.autograd.grad(static_out.sum(), static)
    fresh = chain_inputs(grad=False)
    for s, f in zip(static, fresh, strict=True):
        s.data.copy_(f)
    static_out.fill_(math.nan)
    graph.replay()
    wide = [f.double().requires_grad_() for f in fresh]
    expected_out = eager_reference(*wide)
    expected = torch.autograd.grad(expected_out.sum(), wide)
    assert relative(static_out, expected_out) < 1e-5
    for g, e in zip(static_grads, expected, strict=True):
        assert relative(g, e) < 1e-5
    del grads


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
# cudagraph trees capture an empty graph when their manager starts (torch 2.11), which warns.
@pytest.mark.filterwarnings("ignore:The CUDA Graph is empty:UserWarning")
def test_torch_compile_fullgraph_forward_and_backward(mode: str) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(train_step, fullgraph=True, mode=mode)
    for _ in range(3):  # reduce-overhead records its CUDA graph on the later calls
        inputs = chain_inputs()
        out = compiled(*inputs)
        grads = torch.autograd.grad(out.sum(), inputs)
        wide = [i.detach().double().requires_grad_() for i in inputs]
        expected_out = eager_reference(*wide)
        expected = torch.autograd.grad(expected_out.sum(), wide)
        assert relative(out, expected_out) < 1e-5
        for g, e in zip(grads, expected, strict=True):
            assert relative(g, e) < 1e-5


@pytest.mark.parametrize("shape", [(1, 4096), (64, 4096), (3, 136), (300, 4096), (2, 3, 263)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_with_scale_ops_give_the_norms_and_their_row_scales(
    rng: Any, dtype: str, shape: tuple[int, ...]
) -> None:
    """The training path's forward: the same bits as the inference path's norm (which stores no
    row scales), and row scales (float32, x.shape[:-1]) within float32 rounding of float64's."""
    x, residual = randn(rng, shape, dtype), randn(rng, shape, dtype)
    weight = randn(rng, shape[-1:], dtype)
    out, row_scales = OPS.rms_norm_with_scale(x, weight, EPS)
    assert torch.equal(out, OPS.rms_norm(x, weight, EPS))
    checks = [(row_scales, x, "rms_norm_with_scale")]
    out, summed, row_scales = OPS.add_rms_norm_with_scale(x, residual, weight, EPS)
    want_out, want_summed = OPS.add_rms_norm(x, residual, weight, EPS)
    assert torch.equal(out, want_out) and torch.equal(summed, want_summed)
    checks.append((row_scales, summed, "add_rms_norm_with_scale"))
    for got, of, what in checks:
        assert (got.shape, got.dtype, got.is_contiguous()) == (shape[:-1], torch.float32, True)
        want = (of.double().square().mean(-1) + EPS).rsqrt()
        bad = ~((got.double() - want).abs() <= ROW_SCALE_TOLERANCE * want)
        assert not bool(bad.any()), f"{what} {dtype} {shape} (seed {rng[1]}): row scales off"
