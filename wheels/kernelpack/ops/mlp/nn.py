"""Drop-in torch modules for LLaMA-style models, on kernelpack's custom ops.

:class:`RMSNorm` and :class:`SwiGLUMLP` have the parameters, names and arithmetic of LLaMA's
``LlamaRMSNorm`` and ``LlamaMLP`` (Hugging Face transformers), so a state dict moves between them
and a model's modules can be swapped in place. They call ``torch.ops.kernelpack.*``, so they train
(the backward passes are kernels too) and compile without graph breaks; run eagerly where no
gradient is wanted (inference, decoding), they take kernelpack.mlp's hot call instead: the same
kernel, for less of the host's time a call than torch.ops takes (docs/bench-mlp.md's host rows).

Differences, all within rounding: LlamaRMSNorm rounds the normalised value to the input's dtype
and then multiplies by the weight; here the product is taken in float32 and rounded once
(``casting_mode="llama"`` rounds as LLaMA does). A weight of another dtype than the input's takes
the input's, except a float32 weight, which the kernel reads as it is (LLaMA would promote the
result instead; the result keeps the input's dtype).

The options other models need (:mod:`.options`): RMSNorm's ``offset`` (Gemma's weight + 1),
``casting_mode`` (Liger-Kernel's "llama", "gemma", "none"), ``elementwise_affine=False``
(weightless) and ``in_place`` (the norm written over the input where no gradient is wanted);
SwiGLUMLP's ``gate_multiplier`` and ``down_multiplier`` (Falcon-H1). A module at its defaults
takes the default kernels and their hot call, as before.
"""

from __future__ import annotations

from typing import Any

import torch

from . import hot, torch_ops
from .checks import check_option
from .table import DEFAULT_CASTING_MODE, TABLE

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
        *,
        offset: float = 0.0,
        casting_mode: str = DEFAULT_CASTING_MODE,
        elementwise_affine: bool = True,
        in_place: bool = False,
    ) -> None:
        super().__init__()
        weight = torch.ones(hidden_size, device=device, dtype=dtype) if elementwise_affine else None
        self.weight = None if weight is None else torch.nn.Parameter(weight)
        self.variance_epsilon = eps
        offset_option, mode_option = TABLE["rms_norm_options"].options
        self.offset = float(check_option(offset_option, offset))
        self.casting_mode = str(check_option(mode_option, casting_mode))
        self.in_place = in_place
        # the default kernels (and their hot call) serve a module with no option set
        self.options = offset != 0.0 or casting_mode != DEFAULT_CASTING_MODE or in_place

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight: torch.Tensor | None = self.weight
        if self.options or weight is None or weight.dtype != hidden_states.dtype:
            return self._with_options(hidden_states, weight)
        # _default's body, inline: the eager call's path, one method call fewer
        result: torch.Tensor = _hot("rms_norm", hidden_states, weight, self.variance_epsilon, None)
        if result is NotImplemented:
            result = torch.ops.kernelpack.rms_norm(hidden_states, weight, self.variance_epsilon)
        return result

    def _with_options(
        self, hidden_states: torch.Tensor, weight: torch.Tensor | None
    ) -> torch.Tensor:
        """The option kernels (a weight of another dtype than float32 and the input's takes
        the input's): in place where asked and no gradient is wanted (autograd cannot
        differentiate a norm written over its own input), else a new tensor."""
        if weight is not None and weight.dtype not in (hidden_states.dtype, torch.float32):
            weight = weight.to(hidden_states.dtype)
            if not self.options:
                return self._default(hidden_states, weight)
        scalars = (self.variance_epsilon, self.offset, self.casting_mode)
        wanted = torch.is_grad_enabled() and (
            hidden_states.requires_grad or (weight is not None and weight.requires_grad)
        )
        if self.in_place and not wanted:
            torch.ops.kernelpack.rms_norm_options_in_place(hidden_states, weight, *scalars)
            return hidden_states
        result: torch.Tensor = torch.ops.kernelpack.rms_norm_options(
            hidden_states, weight, *scalars
        )
        return result

    def _default(self, hidden_states: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """rms_norm's kernels and hot call (no option set, the weight of the input's dtype)."""
        result: torch.Tensor = _hot("rms_norm", hidden_states, weight, self.variance_epsilon, None)
        if result is NotImplemented:
            result = torch.ops.kernelpack.rms_norm(hidden_states, weight, self.variance_epsilon)
        return result

    def extra_repr(self) -> str:
        shape = None if self.weight is None else tuple(self.weight.shape)
        extra = f", offset={self.offset}" if self.offset else ""
        if self.casting_mode != DEFAULT_CASTING_MODE:
            extra += f", casting_mode={self.casting_mode!r}"
        return f"{shape}, eps={self.variance_epsilon}{extra}{', in_place' if self.in_place else ''}"


class SwiGLUMLP(torch.nn.Module):
    """down_proj(silu(gate_proj(x)) * up_proj(x)) (LlamaMLP with hidden_act="silu"); with
    multipliers down_proj(silu(gate_proj(x) * gate_multiplier) * up_proj(x)) * down_multiplier
    (Falcon-H1's). Without a bias the down multiplier is taken in the kernel, before the
    projection, which is linear (the same within rounding, and no pass over the output); with
    one, after it."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        bias: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        *,
        gate_multiplier: float = 1.0,
        down_multiplier: float = 1.0,
    ) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.gate_multiplier = gate_multiplier
        self.down_multiplier = down_multiplier
        options = {"bias": bias, "device": device, "dtype": dtype}
        self.gate_proj = torch.nn.Linear(hidden_size, intermediate_size, **options)  # type: ignore[arg-type]
        self.up_proj = torch.nn.Linear(hidden_size, intermediate_size, **options)  # type: ignore[arg-type]
        self.down_proj = torch.nn.Linear(intermediate_size, hidden_size, **options)  # type: ignore[arg-type]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.gate_multiplier != 1.0 or self.down_multiplier != 1.0:
            after = self.down_proj.bias is not None
            inside = 1.0 if after else self.down_multiplier
            scaled: torch.Tensor = self.down_proj(
                torch.ops.kernelpack.swiglu_scaled(gate, up, self.gate_multiplier, inside)
            )
            return scaled * self.down_multiplier if after else scaled
        hidden = _hot("swiglu", gate, up, None)
        if hidden is NotImplemented:
            hidden = torch.ops.kernelpack.swiglu(gate, up)
        result: torch.Tensor = self.down_proj(hidden)
        return result
