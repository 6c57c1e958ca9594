"""kernelpack's MLP kernels as torch custom ops: ``torch.ops.kernelpack.<op>``.

``import kernelpack.torch_ops`` registers them (once; importing kernelpack itself never imports
torch). Each op has a fake (meta) implementation, so torch.compile traces it without a graph
break (``fullgraph=True``) and CUDA graphs capture it; the functional ops have autograd formulas
whose backward passes are kernels of the same source (``*_backward``), so a model trains through
them:

- ``swiglu(gate, up) -> silu(gate) * up``
- ``silu_and_mul(x) -> silu(x[..., :d]) * x[..., d:]``
- ``rms_norm(x, weight, eps=1e-6)``
- ``add_rms_norm(x, residual, weight, eps=1e-6) -> (rms_norm(x + residual), x + residual)``
- ``fused_add_rms_norm(x, residual, weight, eps=1e-6) -> ()``: the same in place (x gets the norm,
  residual the sum), declared as mutating both, for inference; no autograd (use add_rms_norm).
- ``rms_norm_with_scale(x, weight, eps=1e-6) -> (rms_norm(x), row scales)`` and
  ``add_rms_norm_with_scale(x, residual, weight, eps=1e-6) -> (norm, sum, row scales)``: the two
  norms with each row's scale 1 / sqrt(mean(x^2) + eps) besides (float32, shape x.shape[:-1]),
  which their backward reads, so that it computes one sum a row instead of two. rms_norm and
  add_rms_norm take these where a gradient is wanted (the scales are not differentiable), and
  stay on the inference path, which stores no scales, where none is.

Inputs may be any layout (they are made contiguous), on one GPU, of one dtype among float32,
float16 and bfloat16; a bad argument raises kernelpack's UsageError (a ValueError) naming it, from
the fake implementation as well, so torch.compile reports it while tracing. torch on ROCm names
its GPUs "cuda" too: the ops are registered for the CUDA dispatch key, which serves both vendors.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import mlp_hot, mlp_launch
from .errors import UsageError

NAMESPACE = "kernelpack"
DEFAULT_EPS = 1e-6  # the schemas' eps=1e-06

# name -> schema (the functional ops, their backward ops, and the in-place op)
SCHEMAS = {
    "swiglu": "swiglu(Tensor gate, Tensor up) -> Tensor",
    "silu_and_mul": "silu_and_mul(Tensor x) -> Tensor",
    "rms_norm": "rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "add_rms_norm": (
        "add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"
    ),
    "fused_add_rms_norm": (
        "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps=1e-06) -> ()"
    ),
    "swiglu_backward": "swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)",
    "silu_and_mul_backward": "silu_and_mul_backward(Tensor grad, Tensor x) -> Tensor",
    "rms_norm_with_scale": (
        "rms_norm_with_scale(Tensor x, Tensor weight, float eps=1e-06) -> (Tensor, Tensor)"
    ),
    "add_rms_norm_with_scale": (
        "add_rms_norm_with_scale(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) "
        "-> (Tensor, Tensor, Tensor)"
    ),
    # row_scales: the forward's (the _with_scale ops' last result)
    "rms_norm_backward": (
        "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, Tensor row_scales) "
        "-> (Tensor, Tensor)"
    ),
    # one input gradient: x's and residual's are the same (the sum's)
    "add_rms_norm_backward": (
        "add_rms_norm_backward(Tensor grad, Tensor grad_sum, Tensor summed, Tensor weight, "
        "Tensor row_scales) -> (Tensor, Tensor)"
    ),
}

DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}

_lock = threading.Lock()
_LIBRARY: list[Any] = []  # the torch.library.Library, kept alive: dropping it unregisters the ops
_KEYSETS_KEPT = 256  # keysets an Autograd kernel remembers before its memo starts over


# ---- checks shared by the real and the fake implementations -----------------------------------


def _dtype(name: str, tensor: torch.Tensor) -> str:
    found = DTYPE_NAMES.get(tensor.dtype)
    if found is None:
        raise UsageError(
            f"{name}: dtype {str(tensor.dtype).removeprefix('torch.')} is not supported; "
            f"expected one of {mlp_launch.SUPPORTED}"
        )
    return found


def _same(first: tuple[str, torch.Tensor], *others: tuple[str, torch.Tensor]) -> str:
    """The dtype name of the first tensor, after checking the others share its dtype and device."""
    name, tensor = first
    dtype = _dtype(name, tensor)
    for other_name, other in others:
        if other.dtype != tensor.dtype:
            raise UsageError(
                f"{other_name}: dtype {str(other.dtype).removeprefix('torch.')} differs from "
                f"{name}'s {str(tensor.dtype).removeprefix('torch.')}"
            )
        if other.device != tensor.device:
            raise UsageError(f"{other_name}: on {other.device}, but {name} is on {tensor.device}")
    return dtype


def _shape(name: str, tensor: torch.Tensor, shape: Any, what: str) -> None:
    if tuple(tensor.shape) != tuple(shape):
        raise UsageError(
            f"{name}: shape {tuple(tensor.shape)} does not match {what} {tuple(shape)}"
        )


def _check_rows(x: torch.Tensor, weight: torch.Tensor) -> str:
    """x's rows and the weight of a norm (forward or backward): the dtype name."""
    if x.dim() == 0:
        raise UsageError("x: must have at least one dimension (the normalised one)")
    if x.shape[-1] > mlp_launch.MAX_ROW:
        raise UsageError(f"x: rows of {x.shape[-1]} elements; at most 2**30 are supported")
    dtype = _same(("x", x), ("weight", weight))
    _shape("weight", weight, x.shape[-1:], "x's last dimension")
    return dtype


def _check_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> str:
    dtype = _check_rows(x, weight)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise UsageError(f"eps: must be a finite number >= 0, got {eps!r}")
    return dtype


def _check_row_scales(row_scales: torch.Tensor, x: torch.Tensor) -> None:
    """The forward's row scales, as the backward kernels read them: float32, one a row of x,
    contiguous, on x's device."""
    if row_scales.dtype != torch.float32:
        raise UsageError(
            f"row_scales: dtype {str(row_scales.dtype).removeprefix('torch.')}; expected "
            "float32 (the row scales rms_norm_with_scale returns)"
        )
    if row_scales.device != x.device:
        raise UsageError(f"row_scales: on {row_scales.device}, but x is on {x.device}")
    _shape("row_scales", row_scales, x.shape[:-1], "x's leading dimensions")
    if not row_scales.is_contiguous():
        raise UsageError("row_scales: must be contiguous (as rms_norm_with_scale returns them)")


def _check_swiglu(gate: torch.Tensor, up: torch.Tensor) -> str:
    dtype = _same(("gate", gate), ("up", up))
    _shape("up", up, gate.shape, "gate's")
    return dtype


def _check_silu_and_mul(x: torch.Tensor) -> str:
    if x.dim() == 0 or x.shape[-1] % 2:
        raise UsageError(
            f"x: shape {tuple(x.shape)}: the last dimension must be even (gate and up)"
        )
    return _dtype("x", x)


def _check_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> str:
    dtype = _check_norm(x, weight, eps)
    _same(("x", x), ("residual", residual))
    _shape("residual", residual, x.shape, "x's")
    return dtype


def _check_grad(grad: torch.Tensor, like: tuple[str, torch.Tensor], shape: Any, what: str) -> None:
    """An incoming gradient: the dtype and device of ``like``, the shape of the result."""
    _same(like, ("grad", grad))
    _shape("grad", grad, shape, what)


def _check_norm_backward(
    grad: torch.Tensor,
    grad_sum: torch.Tensor | None,
    x: torch.Tensor,
    weight: torch.Tensor,
    row_scales: torch.Tensor,
) -> str:
    dtype = _check_rows(x, weight)
    _check_row_scales(row_scales, x)
    _check_grad(grad, ("x", x), x.shape, "x's")
    if grad_sum is not None:
        _same(("x", x), ("grad_sum", grad_sum))
        _shape("grad_sum", grad_sum, x.shape, "x's")
    return dtype


def _rows(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1]
    return (x.numel() // cols if cols else math.prod(x.shape[:-1])), cols


def _like(tensor: torch.Tensor, shape: Any = None) -> torch.Tensor:
    """A new tensor of tensor's dtype and device, tensor's shape unless given (fakes)."""
    size = tensor.shape if shape is None else shape
    return torch.empty(size, dtype=tensor.dtype, device=tensor.device)


def _row_scales_like(x: torch.Tensor) -> torch.Tensor:
    """A new float32 tensor for x's row scales: one a row, on x's device."""
    return torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)


# ---- real implementations (CUDA dispatch key) ------------------------------------------------
# The forward ops first try kernelpack.mlp's hot call (one C call: tensors of a dtype, device and
# shape it has prepared, contiguous; requires_grad is not read, the op runs below autograd), else
# check their arguments in full, make them contiguous, and launch (preparing the hot call).

HOT = mlp_hot.HOT_BELOW_AUTOGRAD


def _swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    result: Any = HOT["swiglu"](gate, up, None)
    if result is NotImplemented:
        _check_swiglu(gate, up)
        result = mlp_hot.torch_run("swiglu", gate.contiguous(), up.contiguous(), None)
    return result  # type: ignore[no-any-return]


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    result: Any = HOT["silu_and_mul"](x, None)
    if result is NotImplemented:
        _check_silu_and_mul(x)
        result = mlp_hot.torch_run("silu_and_mul", x.contiguous(), None)
    return result  # type: ignore[no-any-return]


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    result: Any = HOT["rms_norm"](x, weight, eps, None)
    if result is NotImplemented:
        _check_norm(x, weight, eps)
        result = mlp_hot.torch_run(
            "rms_norm", x.contiguous(), weight.contiguous(), float(eps), None
        )
    return result  # type: ignore[no-any-return]


def _add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    result: Any = HOT["add_rms_norm"](x, residual, weight, eps)
    if result is NotImplemented:
        _check_add_rms_norm(x, residual, weight, eps)
        contiguous = (x.contiguous(), residual.contiguous(), weight.contiguous())
        result = mlp_hot.torch_run("add_rms_norm", *contiguous, float(eps))
    return result  # type: ignore[no-any-return]


def _fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> None:
    if HOT["fused_add_rms_norm"](x, residual, weight, eps) is NotImplemented:
        _check_add_rms_norm(x, residual, weight, eps)
        if not (x.is_contiguous() and residual.is_contiguous()):
            raise UsageError("x: x and residual are updated in place and must be contiguous")
        mlp_hot.torch_run("fused_add_rms_norm", x, residual, weight.contiguous(), float(eps))


def _norm_with_scale(
    x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
) -> tuple[Tensor, ...]:
    """(norm, row scales), or with a residual (norm, sum, row scales): the forward norms of the
    training path, which store each row's scale (not the hot path's launch, which stores none).
    Rows of no elements get NaN scales, as the kernel's 0 / 0 would give."""
    if residual is None:
        dtype = _check_norm(x, weight, eps)
    else:
        dtype = _check_add_rms_norm(x, residual, weight, eps)
    x, weight = x.contiguous(), weight.contiguous()
    out = torch.empty_like(x)
    row_scales = _row_scales_like(x)
    rows, cols = _rows(x)
    if cols == 0:
        row_scales.fill_(math.nan)
    plan = mlp_hot.torch_plan(x)
    device, stream = plan.device, plan.stream(plan.index)
    if residual is None:
        mlp_launch.launch_rms_norm(
            device, dtype, x, weight, out, row_scales, rows, cols, float(eps), stream
        )
        return out, row_scales
    residual = residual.contiguous()
    summed = torch.empty_like(x)
    mlp_launch.launch_add_rms_norm(
        device, dtype, x, residual, weight, out, summed, row_scales, rows, cols, float(eps), stream
    )
    return out, summed, row_scales


def _rms_norm_with_scale(x: Tensor, weight: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    out, row_scales = _norm_with_scale(x, None, weight, eps)
    return out, row_scales


def _add_rms_norm_with_scale(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor, Tensor]:
    out, summed, row_scales = _norm_with_scale(x, residual, weight, eps)
    return out, summed, row_scales


def _swiglu_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    dtype = _check_swiglu(gate, up)
    _check_grad(grad, ("gate", gate), gate.shape, "gate's")
    grad, gate, up = grad.contiguous(), gate.contiguous(), up.contiguous()
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
    plan = mlp_hot.torch_plan(gate)
    stream = plan.stream(plan.index)
    mlp_launch.launch_swiglu_backward(
        plan.device, dtype, gate, up, grad, grad_gate, grad_up, gate.numel(), stream
    )
    return grad_gate, grad_up


def _silu_and_mul_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    dtype = _check_silu_and_mul(x)
    _check_grad(grad, ("x", x), (*x.shape[:-1], x.shape[-1] // 2), "the result's")
    grad, x = grad.contiguous(), x.contiguous()
    grad_x = torch.empty_like(x)
    rows, cols = _rows(x)
    plan = mlp_hot.torch_plan(x)
    stream = plan.stream(plan.index)
    mlp_launch.launch_silu_and_mul_backward(
        plan.device, dtype, x, grad, grad_x, rows, cols // 2, stream
    )
    return grad_x


def _norm_backward(
    grad: Tensor, grad_sum: Tensor | None, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    """(input gradient, weight gradient) of RMSNorm from x and the forward's row scales; with
    grad_sum (add_rms_norm, x being the sum), the input gradient is the sum's, which x and the
    residual share."""
    dtype = _check_norm_backward(grad, grad_sum, x, weight, row_scales)
    grad, x, weight = grad.contiguous(), x.contiguous(), weight.contiguous()
    extra = 0 if grad_sum is None else grad_sum.contiguous()
    rows, cols = _rows(x)
    grad_x = torch.empty_like(x)
    grad_weight = torch.empty_like(weight)
    plan = mlp_hot.torch_plan(x)
    device, stream = plan.device, plan.stream(plan.index)
    threads = mlp_launch.short_backward_threads(rows, cols, dtype)
    if threads:
        shape = mlp_launch.short_backward_scratch(rows, cols, dtype)
        scratch: Any = (
            0 if shape is None else torch.empty(shape, dtype=torch.float32, device=x.device)
        )
        mlp_launch.launch_rms_norm_backward_short(
            device,
            dtype,
            x,
            row_scales,
            weight,
            grad,
            extra,
            grad_x,
            grad_weight,
            scratch,
            rows,
            cols,
            threads,
            stream,
        )
        return grad_x, grad_weight
    blocks = mlp_launch.backward_row_geometry(rows, cols, dtype)[0] if rows else 0
    partial = torch.empty((max(blocks, 1), cols), dtype=torch.float32, device=x.device)
    mlp_launch.launch_rms_norm_backward(
        device,
        dtype,
        x,
        row_scales,
        weight,
        grad,
        extra,
        grad_x,
        0,
        partial,
        grad_weight,
        rows,
        cols,
        stream,
    )
    return grad_x, grad_weight


def _rms_norm_backward(
    grad: Tensor, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    return _norm_backward(grad, None, x, weight, row_scales)


# ---- fake implementations: shapes, dtypes and the same checks --------------------------------


def _swiglu_fake(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    _check_swiglu(gate, up)
    return _like(gate)


def _silu_and_mul_fake(x: torch.Tensor) -> torch.Tensor:
    _check_silu_and_mul(x)
    return _like(x, (*x.shape[:-1], x.shape[-1] // 2))


def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    _check_norm(x, weight, eps)
    return _like(x)


def _add_rms_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_add_rms_norm(x, residual, weight, eps)
    return _like(x), _like(x)


def _fused_add_rms_norm_fake(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> None:
    _check_add_rms_norm(x, residual, weight, eps)


def _rms_norm_with_scale_fake(
    x: Tensor, weight: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    _check_norm(x, weight, eps)
    return _like(x), _row_scales_like(x)


def _add_rms_norm_with_scale_fake(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor, Tensor]:
    _check_add_rms_norm(x, residual, weight, eps)
    return _like(x), _like(x), _row_scales_like(x)


def _swiglu_backward_fake(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_swiglu(gate, up)
    _check_grad(grad, ("gate", gate), gate.shape, "gate's")
    return _like(gate), _like(gate)


def _silu_and_mul_backward_fake(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    _check_silu_and_mul(x)
    _check_grad(grad, ("x", x), (*x.shape[:-1], x.shape[-1] // 2), "the result's")
    return _like(x)


def _norm_backward_fake(
    grad: Tensor, grad_sum: Tensor | None, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    _check_norm_backward(grad, grad_sum, x, weight, row_scales)
    return _like(x), _like(x, weight.shape)


def _rms_norm_backward_fake(
    grad: Tensor, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    return _norm_backward_fake(grad, None, x, weight, row_scales)


# ---- autograd: the backward passes are kernels too --------------------------------------------


def _save_swiglu(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _swiglu_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    gate, up = ctx.saved_tensors
    grad_gate, grad_up = torch.ops.kernelpack.swiglu_backward(grad, gate, up)
    return grad_gate, grad_up


def _save_silu_and_mul(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def _silu_and_mul_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    result: torch.Tensor = torch.ops.kernelpack.silu_and_mul_backward(grad, x)
    return result


# The norms' row scales are a by-product for the backward, not a function to differentiate:
# marked so, they get no gradient. The gradients of outputs that reached no loss stay None
# (set_materialize_grads(False)): materialised, the row scales' zeros cost a fill kernel in every
# backward (0.76 µs at 1 x 4096 on the H200, torch.profiler; docs/bench-mlp-notes.md).


def _save_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(inputs[0], inputs[1], output[1])  # x, the weight, the row scales


def _rms_norm_grad(
    ctx: Any, grad: Tensor | None, grad_row_scales: Tensor | None
) -> tuple[Tensor | None, ...]:
    if grad is None:
        return None, None, None
    x, weight, row_scales = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.kernelpack.rms_norm_backward(grad, x, weight, row_scales)
    return grad_x, grad_weight, None


def _save_add_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.mark_non_differentiable(output[2])
    ctx.set_materialize_grads(False)
    # the sum, as stored, the weight and the row scales
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _add_rms_norm_grad(
    ctx: Any, grad: Tensor | None, grad_sum: Tensor | None, grad_row_scales: Tensor | None
) -> tuple[Tensor | None, ...]:
    summed, weight, row_scales = ctx.saved_tensors
    if grad is None:  # only the sum reached a loss: its gradient is x's and the residual's
        return grad_sum, grad_sum, None, None
    if grad_sum is None:
        grad_input, grad_weight = torch.ops.kernelpack.rms_norm_backward(
            grad, summed, weight, row_scales
        )
    else:
        grad_input, grad_weight = torch.ops.kernelpack.add_rms_norm_backward(
            grad, grad_sum, summed, weight, row_scales
        )
    # x and residual reach the output only through their sum: one gradient serves both (as
    # autograd's own add does), so the backward writes it once
    return grad_input, grad_input, grad_weight, None


IMPLEMENTATIONS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "swiglu": (_swiglu, _swiglu_fake),
    "silu_and_mul": (_silu_and_mul, _silu_and_mul_fake),
    "rms_norm": (_rms_norm, _rms_norm_fake),
    "add_rms_norm": (_add_rms_norm, _add_rms_norm_fake),
    "fused_add_rms_norm": (_fused_add_rms_norm, _fused_add_rms_norm_fake),
    "rms_norm_with_scale": (_rms_norm_with_scale, _rms_norm_with_scale_fake),
    "add_rms_norm_with_scale": (_add_rms_norm_with_scale, _add_rms_norm_with_scale_fake),
    "swiglu_backward": (_swiglu_backward, _swiglu_backward_fake),
    "silu_and_mul_backward": (_silu_and_mul_backward, _silu_and_mul_backward_fake),
    "rms_norm_backward": (_rms_norm_backward, _rms_norm_backward_fake),
    # (grad, grad_sum, summed, weight, row_scales): the norm's backward with the sum's gradient
    # added
    "add_rms_norm_backward": (_norm_backward, _norm_backward_fake),
}

# op -> (backward, setup_context) of its autograd formula
AUTOGRAD: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "swiglu": (_swiglu_grad, _save_swiglu),
    "silu_and_mul": (_silu_and_mul_grad, _save_silu_and_mul),
    "rms_norm_with_scale": (_rms_norm_grad, _save_rms_norm),
    "add_rms_norm_with_scale": (_add_rms_norm_grad, _save_add_rms_norm),
}

# op -> (the op with its autograd formula, how many of its results are the op's): where a
# gradient is wanted the norms run as their _with_scale ops, whose row scales the backward reads,
# and return the results they share; where none is, they stay on the hot path (no scales stored).
THROUGH: dict[str, tuple[str, int]] = {
    "rms_norm": ("rms_norm_with_scale", 1),
    "add_rms_norm": ("add_rms_norm_with_scale", 2),
}


def _with_grad(name: str) -> Callable[..., Any]:
    """The op's kernel (keyset, *args) where a gradient is wanted: the one
    torch.library.register_autograd makes from its AUTOGRAD formula, or for a THROUGH op a call
    of the op that has the formula (dispatched afresh, so that its own Autograd kernel records
    the backward) and the results the two share."""
    from torch._library import autograd as library_autograd  # what register_autograd uses

    ops = getattr(torch.ops, NAMESPACE)
    if name in THROUGH:
        through, shared = THROUGH[name]
        formula_op = getattr(ops, through).default
        if shared == 1:
            return lambda keyset, *args: formula_op(*args)[0]
        return lambda keyset, *args: formula_op(*args)[:shared]
    backward, setup = AUTOGRAD[name]
    return library_autograd.make_autograd_impl(
        getattr(ops, name).default, library_autograd.Info(backward, setup)
    )


def _autograd_kernel(name: str) -> Callable[..., Any]:
    """The op's kernel for the Autograd dispatch key: where a gradient is wanted,
    :func:`_with_grad`'s; otherwise, on plain CUDA tensors with nothing between autograd and the
    CUDA kernel (no mode, fake or functional tensor, vmap: the keys left below autograd show it),
    the CUDA implementation at once (its hot call first, for the ops that have one).

    Why: register_autograd's kernel redispatches even when no gradient is wanted, through Python
    frames that cost more than the launch (profiled on the H200, docs/bench-mlp-notes.md).
    Anything else takes the redispatch, as register_autograd's kernel would. Which keysets go
    straight to CUDA is remembered by the keyset's bits (one call where the keyset arithmetic
    takes four, each a few hundred ns).
    """
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    with_grad = _with_grad(name)
    real = IMPLEMENTATIONS[name][0]
    below_autograd = torch._C._after_autograd_keyset
    falls_through = torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView)  # functional op
    cuda = torch._C.DispatchKey.CUDA
    grad_enabled, any_requires_grad = torch.is_grad_enabled, torch._C._any_requires_grad

    straight: dict[int, bool] = {}  # keyset's bits -> whether CUDA is next below autograd
    # The CUDA implementation's hot call, made here without its Python frame (out= None where
    # the op's hot call takes one); anything it does not take goes to the implementation. The
    # _with_scale ops have none (the hot path stores no row scales).
    spec = mlp_hot.SPECS.get(name)
    hot = HOT[name] if spec is not None else mlp_hot.not_hot
    tail = (None,) if spec is not None and spec.out else ()
    # The dispatcher leaves a trailing argument given at its default out of args (eps=1e-06 in
    # every schema here), which the hot call needs: put back
    defaults = (DEFAULT_EPS,) if spec is not None and spec.eps else ()
    inputs = spec.inputs if spec is not None else 0

    def kernel(keyset: Any, *args: Any) -> Any:
        if grad_enabled() and any_requires_grad(*args):
            return with_grad(keyset, *args)
        bits = keyset.raw_repr()
        cuda_next = straight.get(bits)
        if cuda_next is None:
            if len(straight) >= _KEYSETS_KEPT:
                straight.clear()
            below = keyset & below_autograd
            cuda_next = straight[bits] = (below - falls_through).highestPriorityTypeId() == cuda
        if cuda_next:
            result = hot(*args, *defaults[len(args) - inputs :], *tail)
            return real(*args) if result is NotImplemented else result
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & below_autograd, *args)

    return kernel


def register() -> None:
    """Define the ops in torch's ``kernelpack`` namespace, once per process."""
    if _LIBRARY:
        return
    with _lock:
        if _LIBRARY:
            return
        mlp_hot.torch_enable(torch)  # the hot calls, which the Autograd kernels take
        make_library: Any = torch.library.Library  # untyped in torch
        library = make_library(NAMESPACE, "DEF")
        for name, schema in SCHEMAS.items():
            library.define(schema)
            real, fake = IMPLEMENTATIONS[name]
            library.impl(name, real, "CUDA")
            torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=library)
        for name in (*AUTOGRAD, *THROUGH):
            library.impl(name, _autograd_kernel(name), "Autograd", with_keyset=True)
        _LIBRARY.append(library)


register()
