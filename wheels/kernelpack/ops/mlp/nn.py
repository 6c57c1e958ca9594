"""Drop-in torch modules for LLaMA-style models, on kernelpack's custom ops.

:class:`RMSNorm` and :class:`SwiGLUMLP` have the parameters, names and arithmetic of LLaMA's
``LlamaRMSNorm`` and ``LlamaMLP`` (Hugging Face transformers), so a state dict moves between them
and a model's modules can be swapped in place. They call ``torch.ops.kernelpack.*``, so they train
(the backward passes are kernels too) and compile without graph breaks; run eagerly where no
gradient is wanted (inference, decoding), they take kernelpack.mlp's hot call instead: the same
kernel, for less of the host's time a call than torch.ops takes (docs/bench-mlp.md's host rows).

Differences, all within rounding: LlamaRMSNorm rounds the normalised value to the input's dtype
and then multiplies by the weight; here the product is taken in float32 and rounded once. The
weight takes the input's dtype when they differ (LLaMA would promote the result instead).
"""

from __future__ import annotations

from typing import Any

import torch

from . import hot, torch_ops

torch_ops.register()


def _hot(op: str, *args: object) -> Any:
    """kernelpack.mlp's hot call of ``op`` where the module runs eagerly, which hands back
    (NotImplemented) any call autograd must see; NotImplemented under torch.compile and
    torch.export, which trace the op instead (their tracer cannot enter the hot call, a C
    function of kernelpack's)."""
    return NotImplemented if torch.compiler.is_compiling() else hot.HOT[op](*args)


class RMSNorm(torch.nn.Module):
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension (LlamaRMSNorm)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-6,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: torch.Tensor = self.weight
        if weight.dtype != hidden_states.dtype:
            weight = weight.to(hidden_states.dtype)
        result: torch.Tensor = _hot("rms_norm", hidden_states, weight, self.variance_epsilon, None)
        if result is NotImplemented:
            result = torch.ops.kernelpack.rms_norm(hidden_states, weight, self.variance_epsilon)
        return result

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"


class SwiGLUMLP(torch.nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) (LlamaMLP with hidden_act="silu")."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        options = {"bias": bias, "device": device, "dtype": dtype}
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, **options)  # type: ignore[arg-type]
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, **options)  # type: ignore[arg-type]
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, **options)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        hidden = _hot("swiglu", gate, up, None)
        if hidden is NotImplemented:
            hidden = torch.ops.kernelpack.swiglu(gate, up)
        result: torch.Tensor = self.down_proj(hidden)
        return result
