"""The MLP options on the GPU (kernelpack.ops.mlp.options), through torch.ops.kernelpack and
kernelpack.nn, against float64 and torch's own expressions.

The emulator checks the same kernels on AMD's builds (tests/test_emulator_mlp_options.py, whose
float64 references with each casting mode's roundings serve here too); these run the NVIDIA build
and the torch layer: strided views written in place and nothing past their rows, torch's
SiLU-and-mul bits, gradients with the offset and a float32 weight. Inputs are random from a seed
printed with any failure; outputs written over NaN where the op takes an output.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = [pytest.mark.gpu, pytest.mark.torch]

from kernelpack import nn  # noqa: E402
from kernelpack.ops.mlp import options  # noqa: E402
from tests.test_emulator_mlp_options import assert_close, reference_norm  # noqa: E402

OPS = torch.ops.kernelpack
DTYPES = ["float32", "float16", "bfloat16"]
EPS = 1e-6
ROUNDINGS = {"gemma": 1, "llama": 2, "none": 4}


@pytest.fixture
def seed() -> int:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    value = secrets.randbits(62)
    torch.manual_seed(value)
    return value


def bits(tensor: Any) -> Any:
    """The tensor's elements as integers of their width (so that -0.0 and NaNs compare too)."""
    return tensor.reshape(-1).view(torch.int32 if tensor.element_size() == 4 else torch.int16)


def numpy_of(tensor: Any) -> np.ndarray:
    return tensor.detach().double().cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 5, 2 * 1001), (2048, 2 * 13824), (1, 8)], ids=str)
def test_silu_and_mul_as_torch_is_bit_identical_to_the_native_expression(
    seed: int, dtype: str, shape: tuple[int, ...]
) -> None:
    """Gates past both saturations of the sigmoid (x 12) and an odd half (1001)."""
    x = torch.randn(shape, device="cuda").mul_(12).to(getattr(torch, dtype))
    d = shape[-1] // 2
    want = torch.nn.functional.silu(x[..., :d]) * x[..., d:]
    got = OPS.silu_and_mul_as_torch(x)
    differ = bits(got) != bits(want)
    assert not bool(differ.any()), f"seed {seed}: {int(differ.sum())} of {got.numel()} differ"


@pytest.mark.parametrize("mode", list(options.CASTING_MODES))
@pytest.mark.parametrize(
    ("dtype", "weight_dtype"),
    [(d, d) for d in DTYPES] + [("bfloat16", "float32"), ("float16", "float32"), ("float32", None)],
    ids=str,
)
def test_norm_options_against_float64(
    seed: int, dtype: str, weight_dtype: str | None, mode: str
) -> None:
    """Every casting mode, the offset, a float32 weight, weightless, on 3-D rows of 4096 (the
    length the tuned forms take) and 777."""
    for cols in (4096, 777):
        x = torch.randn(2, 33, cols, device="cuda").to(getattr(torch, dtype))
        weight = None
        if weight_dtype is not None:
            weight = (torch.randn(cols, device="cuda") * 0.1).to(getattr(torch, weight_dtype))
        offset = 1.0 if mode == "gemma" else 0.25
        got = OPS.rms_norm_options(x, weight, EPS, offset, mode)
        assert got.dtype == x.dtype and got.shape == x.shape
        want, _ = reference_norm(
            numpy_of(x), None if weight is None else numpy_of(weight), dtype, mode, offset
        )
        what = f"rms_norm_options {dtype} weight {weight_dtype} {mode} x{cols} (seed {seed})"
        assert_close(got.float().cpu().numpy(), want, dtype, ROUNDINGS[mode], what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_norms_over_strided_views(seed: int, dtype: str) -> None:
    """rms_norm_options_in_place and fused_add_rms_norm (vLLM's views of rows twice as long):
    the rows written, their other halves untouched; the in-place norm has the out-of-place
    op's bits, fused_add_rms_norm's norm and sum are float64's."""
    kind = getattr(torch, dtype)
    hidden = 769
    wide = torch.randn(83, 2 * hidden, device="cuda").to(kind)
    weight = torch.randn(hidden, device="cuda").to(kind)
    x = wide.clone()[:, :hidden]
    want = OPS.rms_norm_options(x.contiguous(), weight, EPS)
    OPS.rms_norm_options_in_place(x, weight, EPS)
    assert torch.equal(x, want), f"seed {seed}"
    assert torch.equal(x._base[:, hidden:], wide[:, hidden:])
    residual_wide = torch.randn(83, 2 * hidden, device="cuda").to(kind)
    x, residual = wide.clone()[:, :hidden], residual_wide.clone()[:, :hidden]
    summed = (numpy_of(x) + numpy_of(residual)).astype(np.float32)
    OPS.fused_add_rms_norm(x, residual, weight, EPS)
    what = f"fused_add_rms_norm strided {dtype} (seed {seed})"
    stored = numpy_of(residual)
    assert_close(stored, summed.astype(np.float64), dtype, 1, what + " residual")
    norm, _ = reference_norm(stored, numpy_of(weight), dtype, "gemma", 0.0)
    assert_close(numpy_of(x), norm, dtype, 1, what)
    assert torch.equal(x._base[:, hidden:], wide[:, hidden:])
    assert torch.equal(residual._base[:, hidden:], residual_wide[:, hidden:])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_norm_options_gradients_against_float64(seed: int, dtype: str) -> None:
    """kernelpack.nn.RMSNorm with Gemma's offset and a float32 weight (bfloat16 rows): the input
    and weight gradients against float64 autograd of the same function."""
    kind = getattr(torch, dtype)
    norm = nn.RMSNorm(1000, offset=1.0, device="cuda", dtype=torch.float32)
    with torch.no_grad():
        norm.weight.normal_(0.0, 0.1)
    x = torch.randn(4, 7, 1000, device="cuda").to(kind).requires_grad_()
    grad = torch.randn(4, 7, 1000, device="cuda").to(kind)
    norm(x).backward(grad)
    x64 = x.detach().double().requires_grad_()
    w64 = norm.weight.detach().double().requires_grad_()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * (1.0 + w64)
    y64.backward(grad.double())
    tolerance = {"float32": 2e-5, "bfloat16": 1e-2}[dtype]
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(norm.weight.grad.double(), w64.grad, rtol=2e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_with_multipliers_against_float64(seed: int, dtype: str) -> None:
    kind = getattr(torch, dtype)
    gate = (torch.randn(5, 4099, device="cuda") * 4).to(kind).requires_grad_()
    up = torch.randn(5, 4099, device="cuda").to(kind).requires_grad_()
    out = OPS.swiglu_scaled(gate, up, 0.7, 1.3)
    grad = torch.randn_like(out)
    out.backward(grad)
    g64 = gate.detach().double().requires_grad_()
    u64 = up.detach().double().requires_grad_()
    want = torch.nn.functional.silu(g64 * 0.7) * u64 * 1.3
    want.backward(grad.double())
    rtol = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}[dtype]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=1e-5)
    torch.testing.assert_close(gate.grad.double(), g64.grad, rtol=rtol, atol=1e-4)
    torch.testing.assert_close(up.grad.double(), u64.grad, rtol=rtol, atol=1e-4)
