"""Liger-Kernel's own tests of its RMSNorm and SwiGLU, adapted to kernelpack.nn and
torch.ops.kernelpack: does a model Liger-Kernel patches get the same from kernelpack?

Written from Liger-Kernel's test/transformers/test_rms_norm.py (test_correctness,
test_correctness_functional) and test/transformers/test_swiglu.py (test_correctness_llamamlp,
test_correctness_mixtralblocksparsetop2mlp, test_correctness_phi3mlp, test_correctness_functional,
test_correctness_silumul_with_multipliers, test_silumul_default_multipliers_backward_compat,
test_correctness_falcon_h1_mlp) at linkedin/Liger-Kernel ead96b6: their shapes, dtypes,
tolerances and references. The references are Liger's own modules (BaseRMSNorm, LlamaRMSNorm,
GemmaRMSNorm) and Hugging Face's MLPs (LlamaMLP, MixtralBlockSparseTop2MLP, Phi3MLP, Falcon-H1's),
written out here as plain torch (transformers is not a dependency). Liger's module or function
is replaced by kernelpack's:

- LigerRMSNorm(offset, casting_mode, in_place, elementwise_affine) -> kernelpack.nn.RMSNorm with
  the same options (in_place: Liger's backward writes over the incoming gradient, kernelpack's
  forward over its input where no gradient is wanted; here a gradient is, so it returns a new
  tensor either way), liger_rms_norm -> torch.ops.kernelpack.rms_norm_options;
- LigerSwiGLUMLP and LigerBlockSparseTop2MLP -> kernelpack.nn.SwiGLUMLP, LigerPhi3SwiGLUMLP ->
  the fused projection through torch.ops.kernelpack.silu_and_mul, LigerSiLUMulFunction ->
  torch.ops.kernelpack.swiglu (swiglu_scaled with multipliers), LigerFalconH1SwiGLUMLP ->
  SwiGLUMLP(gate_multiplier, down_multiplier).

Not adapted, listed so: the DTensor tests (8 GPUs), LigerExperts (transformers 5's MixtralExperts,
a mixture-of-experts kernel kernelpack has not) and the Blackwell tiled path (Liger's own kernel
forms). Liger's seeds (set_seed(42)) and its deterministic-algorithms mode are kept.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = [pytest.mark.gpu, pytest.mark.torch, pytest.mark.peer]

from kernelpack import nn as kernelpack_nn  # noqa: E402

OPS = torch.ops.kernelpack
nn = torch.nn
F = torch.nn.functional


@pytest.fixture(autouse=True)
def _cuda() -> Any:
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    torch.manual_seed(42)


# ---- RMSNorm ----------------------------------------------------------------------------------


class BaseRMSNorm(nn.Module):
    """Every step in the input's dtype (Liger's casting mode "none")."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, elementwise_affine: bool = True):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size)) if elementwise_affine else None
        self.variance_epsilon = eps

    def forward(self, hidden_states: Any) -> Any:
        dtype = hidden_states.dtype
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        out = hidden_states.to(dtype)
        return out if self.weight is None else self.weight * out


class LlamaRMSNorm(BaseRMSNorm):
    """transformers' LlamaRMSNorm: the scale in float32, the weight's product in the dtype."""

    def forward(self, hidden_states: Any) -> Any:
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return h.to(dtype) if self.weight is None else self.weight * h.to(dtype)


class GemmaRMSNorm(BaseRMSNorm):
    """transformers' GemmaRMSNorm: all in float32, the weight plus 1."""

    def forward(self, x: Any) -> Any:
        h = x.float()
        out = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        if self.weight is not None:
            out = out * (1.0 + self.weight.float())
        return out.type_as(x)


def assert_verbose_allclose(a: Any, b: Any, atol: float, rtol: float) -> None:
    """Liger's assert_verbose_allclose: |a - b| <= atol + rtol |b| everywhere, NaNs equal."""
    a, b = a.float(), b.float()
    bad = ~((a - b).abs() <= atol + rtol * b.abs()) & ~(a.isnan() & b.isnan())
    assert not bool(bad.any()), f"{int(bad.sum())} of {bad.numel()} elements off"


RMS_DTYPES = [(torch.float32, 1e-4, 1e-6), (torch.bfloat16, 2e-1, 2e-2)]
REFERENCES = [
    (LlamaRMSNorm, 0.0, "llama"),
    (GemmaRMSNorm, 1.0, "gemma"),
    (BaseRMSNorm, 0.0, "none"),
]


@pytest.mark.parametrize("elementwise_affine", [True, False])
@pytest.mark.parametrize("in_place", [True, False])
@pytest.mark.parametrize(("reference", "offset", "casting_mode"), REFERENCES)
@pytest.mark.parametrize(("dtype", "atol", "rtol"), RMS_DTYPES)
@pytest.mark.parametrize(("bs", "sl", "hd"), [(2, 128, 512), (5, 123, 123)])
def test_rms_norm_correctness(
    bs: int,
    sl: int,
    hd: int,
    dtype: Any,
    atol: float,
    rtol: float,
    reference: Any,
    offset: float,
    casting_mode: str,
    in_place: bool,
    elementwise_affine: bool,
) -> None:
    torch.use_deterministic_algorithms(True)
    try:
        tensor = torch.randn(bs, sl, hd, device="cuda", dtype=dtype)
        h1 = tensor.clone().requires_grad_(True)
        h2 = tensor.clone().requires_grad_(True)
        do = torch.randn(bs, sl, hd, device="cuda", dtype=dtype)
        ref = reference(hidden_size=hd, elementwise_affine=elementwise_affine).to("cuda").to(dtype)
        ref_o = ref(h1)
        ref_o.backward(do)
        ours = kernelpack_nn.RMSNorm(
            hd,
            offset=offset,
            casting_mode=casting_mode,
            in_place=in_place,
            elementwise_affine=elementwise_affine,
        )
        ours = ours.to("cuda").to(dtype)
        o = ours(h2)
        o.backward(do.clone())
        assert_verbose_allclose(ref_o, o, atol, rtol)
        if elementwise_affine:
            assert_verbose_allclose(ref.weight.grad, ours.weight.grad, atol, rtol)
        assert_verbose_allclose(h1.grad, h2.grad, atol, rtol)
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("elementwise_affine", [True, False])
@pytest.mark.parametrize(("reference", "offset", "casting_mode"), REFERENCES[:2])
@pytest.mark.parametrize(("dtype", "atol", "rtol"), RMS_DTYPES)
@pytest.mark.parametrize(("bs", "sl", "hd"), [(2, 2, 8), (9, 7, 41)])
def test_rms_norm_correctness_functional(
    bs: int,
    sl: int,
    hd: int,
    dtype: Any,
    atol: float,
    rtol: float,
    reference: Any,
    offset: float,
    casting_mode: str,
    elementwise_affine: bool,
) -> None:
    """The functional op against the module (Liger: liger_rms_norm against its Function)."""
    tensor = torch.randn(bs, sl, hd, device="cuda", dtype=dtype)
    h1 = tensor.clone().requires_grad_(True)
    h2 = tensor.clone().requires_grad_(True)
    w = torch.randn(hd, device="cuda", dtype=dtype) if elementwise_affine else None
    y1 = OPS.rms_norm_options(h1, w, 1e-6, offset, casting_mode)
    module = kernelpack_nn.RMSNorm(
        hd, offset=offset, casting_mode=casting_mode, elementwise_affine=elementwise_affine
    ).to("cuda", dtype)
    if w is not None:
        module.weight.data.copy_(w)
    y2 = module(h2)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    grad = torch.randn_like(y2)
    y1.backward(grad.clone())
    y2.backward(grad.clone())
    assert torch.allclose(h1.grad, h2.grad, atol=atol, rtol=rtol)


# ---- SwiGLU -----------------------------------------------------------------------------------

HIDDEN_ACT_SHAPES = [(2, 256, 256, 512), (6, 42, 123, 431)]
MLP_DTYPES = [(torch.float32, 1e-0, 1e-5), (torch.bfloat16, 1e4, 1e-2)]


class LlamaMLP(nn.Module):
    """transformers' LlamaMLP (hidden_act "silu", no bias)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: Any) -> Any:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def assert_grads_close(
    pairs: list[tuple[Any, Any]], x1: Any, x2: Any, atol: float, rtol: float
) -> None:
    for ref, ours in pairs:
        assert torch.allclose(ref.weight.grad, ours.weight.grad, atol=atol, rtol=rtol)
    assert torch.allclose(x1.grad, x2.grad, atol=atol, rtol=rtol)


def swiglu_mlp(hidden_size: int, intermediate_size: int, dtype: Any, **options: Any) -> Any:
    return kernelpack_nn.SwiGLUMLP(hidden_size, intermediate_size, **options).to("cuda", dtype)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), MLP_DTYPES)
@pytest.mark.parametrize(("bsz", "seq_len", "hidden_size", "intermediate_size"), HIDDEN_ACT_SHAPES)
@pytest.mark.parametrize("form", ["llama", "mixtral_block_sparse_top2"])
def test_swiglu_mlp_correctness(
    form: str,
    bsz: int,
    seq_len: int,
    hidden_size: int,
    intermediate_size: int,
    dtype: Any,
    atol: float,
    rtol: float,
) -> None:
    """LlamaMLP, and Mixtral's expert MLP (w2(silu(w1 x) * w3 x): the same arithmetic under
    other names), against SwiGLUMLP."""
    data = torch.randn(bsz, seq_len, hidden_size, device="cuda", dtype=dtype)
    x1, x2 = data.clone().requires_grad_(True), data.clone().requires_grad_(True)
    g = torch.randn(hidden_size, intermediate_size, device="cuda", dtype=dtype)
    u = torch.randn(hidden_size, intermediate_size, device="cuda", dtype=dtype)
    d = torch.randn(intermediate_size, hidden_size, device="cuda", dtype=dtype)
    ref = LlamaMLP(hidden_size, intermediate_size).to("cuda", dtype)
    ours = swiglu_mlp(hidden_size, intermediate_size, dtype)
    for mlp in (ref, ours):
        mlp.gate_proj.weight.data, mlp.up_proj.weight.data = g.T, u.T
        mlp.down_proj.weight.data = d.T
    y1, y2 = ref(x1), ours(x2)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    dy = torch.randn_like(y1)
    y1.backward(dy.clone(), retain_graph=True)
    y2.backward(dy.clone(), retain_graph=True)
    names = ("gate_proj", "up_proj", "down_proj")
    pairs = [(getattr(ref, n), getattr(ours, n)) for n in names]
    assert_grads_close(pairs, x1, x2, atol, rtol)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), MLP_DTYPES)
@pytest.mark.parametrize(("bsz", "seq_len", "hidden_size", "intermediate_size"), HIDDEN_ACT_SHAPES)
def test_phi3_mlp_correctness(
    bsz: int,
    seq_len: int,
    hidden_size: int,
    intermediate_size: int,
    dtype: Any,
    atol: float,
    rtol: float,
) -> None:
    """Phi3MLP's fused gate and up projection: silu_and_mul over its output's halves."""
    data = torch.randn(bsz, seq_len, hidden_size, device="cuda", dtype=dtype)
    x1, x2 = data.clone().requires_grad_(True), data.clone().requires_grad_(True)
    gu = torch.randn(hidden_size, intermediate_size * 2, device="cuda", dtype=dtype)
    d = torch.randn(intermediate_size, hidden_size, device="cuda", dtype=dtype)
    projections = []
    for _ in range(2):
        gate_up = nn.Linear(hidden_size, 2 * intermediate_size, bias=False).to("cuda", dtype)
        down = nn.Linear(intermediate_size, hidden_size, bias=False).to("cuda", dtype)
        gate_up.weight.data, down.weight.data = gu.T, d.T
        projections.append((gate_up, down))
    (ref_gu, ref_down), (our_gu, our_down) = projections
    gate, up = ref_gu(x1).chunk(2, dim=-1)
    y1 = ref_down(up * F.silu(gate))
    y2 = our_down(OPS.silu_and_mul(our_gu(x2)))
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    dy = torch.randn_like(y1)
    y1.backward(dy.clone(), retain_graph=True)
    y2.backward(dy.clone(), retain_graph=True)
    assert_grads_close([(ref_gu, our_gu), (ref_down, our_down)], x1, x2, atol, rtol)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), MLP_DTYPES)
@pytest.mark.parametrize(("bsz", "seq_len", "size"), [(2, 8, 8), (9, 7, 41)])
def test_swiglu_functional_correctness(
    bsz: int, seq_len: int, size: int, dtype: Any, atol: float, rtol: float
) -> None:
    """The op against the module's path (Liger: liger_swiglu against its Function)."""
    a = torch.randn(bsz, seq_len, size, device="cuda", dtype=dtype)
    b = torch.randn(bsz, seq_len, size, device="cuda", dtype=dtype)
    x1, x2 = a.clone().requires_grad_(True), a.clone().requires_grad_(True)
    b1, b2 = b.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y1 = OPS.swiglu(x1, b1)
    y2 = OPS.swiglu_scaled(x2, b2)
    assert torch.allclose(y1, y2, atol=atol, rtol=rtol)
    grad = torch.randn_like(y1)
    y1.backward(grad)
    y2.backward(grad)
    assert torch.allclose(x1.grad, x2.grad, atol=atol, rtol=rtol)
    assert torch.allclose(b1.grad, b2.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    ("dtype", "atol", "rtol"), [(torch.float32, 1e-3, 1e-5), (torch.bfloat16, 1e-1, 1e-2)]
)
@pytest.mark.parametrize(
    ("gate_multiplier", "down_multiplier"), [(0.7, 1.3), (1.5, 0.5), (1.0, 1.0)]
)
@pytest.mark.parametrize(("bsz", "seq_len", "size"), [(2, 8, 8), (9, 7, 41)])
def test_silumul_with_multipliers_correctness(
    bsz: int,
    seq_len: int,
    size: int,
    gate_multiplier: float,
    down_multiplier: float,
    dtype: Any,
    atol: float,
    rtol: float,
) -> None:
    a = torch.randn(bsz, seq_len, size, device="cuda", dtype=dtype)
    b = torch.randn(bsz, seq_len, size, device="cuda", dtype=dtype)
    a1, b1 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    a2, b2 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y_ref = F.silu(a1 * gate_multiplier) * b1 * down_multiplier
    y = OPS.swiglu_scaled(a2, b2, gate_multiplier, down_multiplier)
    torch.testing.assert_close(y_ref, y, atol=atol, rtol=rtol)
    grad = torch.randn_like(y_ref)
    y_ref.backward(grad.clone())
    y.backward(grad.clone())
    torch.testing.assert_close(a1.grad, a2.grad, atol=atol, rtol=rtol)
    torch.testing.assert_close(b1.grad, b2.grad, atol=atol, rtol=rtol)


def test_silumul_default_multipliers_backward_compat() -> None:
    """swiglu_scaled at its default multipliers is the given 1.0 and 1.0."""
    a = torch.randn(4, 16, 32, device="cuda", dtype=torch.float32)
    b = torch.randn(4, 16, 32, device="cuda", dtype=torch.float32)
    a1, b1 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    a2, b2 = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    y_default = OPS.swiglu_scaled(a1, b1)
    y_explicit = OPS.swiglu_scaled(a2, b2, 1.0, 1.0)
    torch.testing.assert_close(y_default, y_explicit)
    grad = torch.randn_like(y_default)
    y_default.backward(grad.clone())
    y_explicit.backward(grad.clone())
    torch.testing.assert_close(a1.grad, a2.grad)
    torch.testing.assert_close(b1.grad, b2.grad)


class FalconH1MLP(LlamaMLP):
    """Falcon-H1's MLP: the gate scaled before the SiLU, the output after the down projection."""

    def __init__(self, hidden: int, intermediate: int, gate_mult: float, down_mult: float) -> None:
        super().__init__(hidden, intermediate)
        self.gate_multiplier, self.down_multiplier = gate_mult, down_mult

    def forward(self, x: Any) -> Any:
        activated = F.silu(self.gate_proj(x) * self.gate_multiplier) * self.up_proj(x)
        return self.down_proj(activated) * self.down_multiplier


@pytest.mark.parametrize(("dtype", "atol", "rtol"), MLP_DTYPES)
@pytest.mark.parametrize(("gate_multiplier", "down_multiplier"), [(0.7, 1.3), (1.5, 0.5)])
@pytest.mark.parametrize(("bsz", "seq_len", "hidden_size", "intermediate_size"), HIDDEN_ACT_SHAPES)
def test_falcon_h1_mlp_correctness(
    bsz: int,
    seq_len: int,
    hidden_size: int,
    intermediate_size: int,
    gate_multiplier: float,
    down_multiplier: float,
    dtype: Any,
    atol: float,
    rtol: float,
) -> None:
    data = torch.randn(bsz, seq_len, hidden_size, device="cuda", dtype=dtype)
    x1, x2 = data.clone().requires_grad_(True), data.clone().requires_grad_(True)
    g = torch.randn(hidden_size, intermediate_size, device="cuda", dtype=dtype)
    u = torch.randn(hidden_size, intermediate_size, device="cuda", dtype=dtype)
    d = torch.randn(intermediate_size, hidden_size, device="cuda", dtype=dtype)
    ref = FalconH1MLP(hidden_size, intermediate_size, gate_multiplier, down_multiplier)
    ref = ref.to("cuda", dtype)
    ours = swiglu_mlp(
        hidden_size,
        intermediate_size,
        dtype,
        gate_multiplier=gate_multiplier,
        down_multiplier=down_multiplier,
    )
    for mlp in (ref, ours):
        mlp.gate_proj.weight.data = g.T.contiguous()
        mlp.up_proj.weight.data = u.T.contiguous()
        mlp.down_proj.weight.data = d.T.contiguous()
    y1, y2 = ref(x1), ours(x2)
    torch.testing.assert_close(y1, y2, atol=atol, rtol=rtol)
    dy = torch.randn_like(y1)
    y1.backward(dy.clone(), retain_graph=True)
    y2.backward(dy.clone(), retain_graph=True)
    for name in ("gate_proj", "up_proj", "down_proj"):
        torch.testing.assert_close(
            getattr(ref, name).weight.grad, getattr(ours, name).weight.grad, atol=atol, rtol=rtol
        )
    torch.testing.assert_close(x1.grad, x2.grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize(
    "case",
    [
        "test_dtensor_rms_norm",
        "test_dtensor_liger_silumul",
        "test_correctness_mixtralexperts",
        "test_swiglu_blackwell_tiled_matches_original",
    ],
)
def test_not_adapted(case: str) -> None:
    reasons = {
        "test_dtensor_rms_norm": "DTensor sharding over 8 GPUs",
        "test_dtensor_liger_silumul": "DTensor sharding over 8 GPUs",
        "test_correctness_mixtralexperts": "a mixture-of-experts kernel (LigerExperts)",
        "test_swiglu_blackwell_tiled_matches_original": "Liger's own Blackwell kernel forms",
    }
    pytest.skip(f"not supported: {reasons[case]}")
