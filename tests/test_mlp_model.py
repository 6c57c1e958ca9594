"""A small LLaMA-style model with its norms and MLPs swapped for kernelpack's: the logits and one
training step's gradients match the original's, eager and under torch.compile(fullgraph=True).

The model is written here (random weights, no downloads, no transformers): token embedding, blocks
of pre-norm causal attention with rotary position embeddings and a SwiGLU MLP, a final norm and
the output projection. Its RMSNorm and MLP are LLaMA's definitions (LlamaRMSNorm: float32
variance, rounded to the input dtype before the weight; LlamaMLP: down(silu(gate(x)) * up(x))).
The swap keeps the parameters (load_state_dict), so the two models hold the same weights.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
# Importing torch's inductor (torch 2.11) warns through torch.jit's deprecated script_method, and
# inductor suggests TF32 for the float32 model's matrix products (kept off: the reference is
# float64, and TF32 would swamp the differences this test looks for).
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:TensorFloat32 tensor cores:UserWarning"),
]

from kernelpack import nn as kp_nn  # noqa: E402  (needs torch)

F = torch.nn.functional

VOCAB, HIDDEN, INTERMEDIATE, LAYERS, HEADS, SEQUENCE, BATCH = 512, 256, 688, 2, 4, 24, 3
EPS = 1e-5


class LlamaRMSNorm(torch.nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: Any) -> Any:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaMLP(torch.nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: Any) -> Any:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rotate_half(x: Any) -> Any:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o_proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        batch, length, _ = x.shape
        shape = (batch, length, HEADS, HIDDEN // HEADS)
        q, k, v = (
            p(x).view(shape).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, HIDDEN))


class Block(torch.nn.Module):
    def __init__(self, norm: type, mlp: type) -> None:
        super().__init__()
        self.input_layernorm = norm(HIDDEN, eps=EPS)
        self.self_attn = Attention()
        self.post_attention_layernorm = norm(HIDDEN, eps=EPS)
        self.mlp = mlp(HIDDEN, INTERMEDIATE)

    def forward(self, x: Any, cos: Any, sin: Any) -> Any:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLlama(torch.nn.Module):
    def __init__(self, norm: type = LlamaRMSNorm, mlp: type = LlamaMLP) -> None:
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(VOCAB, HIDDEN)
        self.layers = torch.nn.ModuleList(Block(norm, mlp) for _ in range(LAYERS))
        self.norm = norm(HIDDEN, eps=EPS)
        self.lm_head = torch.nn.Linear(HIDDEN, VOCAB, bias=False)
        dim = HIDDEN // HEADS
        inverse = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        angles = torch.outer(torch.arange(SEQUENCE).float(), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, tokens: Any) -> Any:
        x = self.embed_tokens(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def randomised(model: Any) -> Any:
    """Random norm weights too (LLaMA starts them at one, which would hide a weight bug)."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                parameter.copy_(1 + 0.2 * torch.randn_like(parameter))
    return model


def step(model: Any, forward: Any, tokens: Any, targets: Any) -> tuple[Any, dict[str, Any]]:
    """One training step's forward (through ``forward``: the model or its compiled form) and
    backward: the logits and every parameter's gradient, by the model's own parameter names."""
    model.zero_grad(set_to_none=True)
    logits = forward(tokens)
    loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def relative(got: Any, expected: Any) -> float:
    got, expected = got.detach().double(), expected.detach().double()
    return float((got - expected).norm() / expected.norm())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)], ids=["f32", "bf16"]
)
def test_swapped_model_matches_the_original(dtype: Any, tolerance: float, compiled: bool) -> None:
    torch.manual_seed(1234 + LAYERS)
    original = randomised(TinyLlama()).to("cuda", dtype)
    swapped = TinyLlama(norm=kp_nn.RMSNorm, mlp=kp_nn.SwiGLUMLP).to("cuda", dtype)
    swapped.load_state_dict(original.state_dict())
    assert sum(isinstance(m, kp_nn.RMSNorm) for m in swapped.modules()) == 2 * LAYERS + 1
    assert sum(isinstance(m, kp_nn.SwiGLUMLP) for m in swapped.modules()) == LAYERS
    # The reference runs in float64 for float32 models (the difference is then ours alone) and
    # as the original model in bfloat16 (both sides round alike).
    reference = TinyLlama().to("cuda", torch.float64 if dtype == torch.float32 else dtype)
    reference.load_state_dict(original.state_dict())
    tokens = torch.randint(0, VOCAB, (BATCH, SEQUENCE), device="cuda")
    targets = torch.randint(0, VOCAB, (BATCH, SEQUENCE), device="cuda")
    forward = swapped
    if compiled:
        torch._dynamo.reset()
        forward = torch.compile(swapped, fullgraph=True)
    logits, grads = step(swapped, forward, tokens, targets)
    expected_logits, expected_grads = step(reference, reference, tokens, targets)
    assert logits.dtype == dtype
    assert relative(logits, expected_logits) < tolerance
    assert grads.keys() == expected_grads.keys()
    for name, grad in grads.items():
        assert grad is not None and grad.dtype == dtype, name
        assert relative(grad, expected_grads[name]) < tolerance, (
            name,
            relative(grad, expected_grads[name]),
        )


@pytest.mark.parametrize(
    ("dtype", "tolerance"), [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)], ids=["f32", "bf16"]
)
def test_swapped_model_decodes_through_the_hot_calls(
    dtype: Any, tolerance: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under torch.inference_mode the swapped modules take kernelpack.mlp's hot calls (after
    the first pass, which prepares each shape through torch.ops), and the logits still match
    the reference's."""
    from kernelpack.ops.mlp import hot as mlp_hot

    torch.manual_seed(4321)
    original = randomised(TinyLlama()).to("cuda", dtype)
    swapped = TinyLlama(norm=kp_nn.RMSNorm, mlp=kp_nn.SwiGLUMLP).to("cuda", dtype)
    swapped.load_state_dict(original.state_dict())
    reference = TinyLlama().to("cuda", torch.float64 if dtype == torch.float32 else dtype)
    reference.load_state_dict(original.state_dict())
    tokens = torch.randint(0, VOCAB, (BATCH, SEQUENCE), device="cuda")
    with torch.inference_mode():
        swapped(tokens)
        answers: list[bool] = []
        for op in ("rms_norm", "swiglu"):
            hot = mlp_hot.HOT[op]

            def recorded(*args: Any, hot: Any = hot) -> Any:
                result = hot(*args)
                answers.append(result is not NotImplemented)
                return result

            monkeypatch.setitem(mlp_hot.HOT, op, recorded)
        logits = swapped(tokens)
        expected = reference(tokens)
    assert len(answers) == 3 * LAYERS + 1 and all(answers)
    assert relative(logits, expected) < tolerance
