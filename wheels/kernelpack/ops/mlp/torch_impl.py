"""The MLP ops' torch implementations: the real ones (CUDA dispatch key) and the fakes, from the
op table.

Every op of the table gets a fake made from its entry (:func:`fake`: the entry's checks, then
empty results of the entry's shapes and dtypes), so torch.compile traces it and reports a bad
argument while tracing. A forward op with a plan gets its real implementation from its entry too
(:func:`real`): its hot call first (below autograd: requires_grad is not read), else the entry's
checks, its inputs made contiguous, and the launch (which prepares the hot call for the shape).
The training path's norms (which store row scales) and the backward ops launch kernels of their
own: :data:`BY_HAND`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...errors import UsageError
from . import hot, launch, options
from .checks import Operand, check, check_options, in_place_row_stride, row_stride, shape_of
from .geometry import backward_row_geometry, short_backward_scratch, short_backward_threads
from .table import DEFAULT_CASTING_MODE, DEFAULT_EPS, TABLE, Op, subject

Impl = Callable[..., Any]


def operands(op: Op, args: tuple[Any, ...]) -> tuple[list[Operand | None], Any]:
    """The op's tensor arguments as the checks see them (None for an optional one left out),
    and eps (the default where the dispatcher left it out)."""
    tensors = args[: len(op.inputs)]
    found = [
        None
        if tensor is None
        else Operand(
            spec.name,
            str(tensor.dtype).removeprefix("torch."),
            tuple(tensor.shape),
            tensor.device,
            tensor.is_contiguous() if spec.contiguous else True,
        )
        for spec, tensor in zip(op.inputs, tensors, strict=True)
    ]
    eps = (args[len(op.inputs)] if len(args) > len(op.inputs) else DEFAULT_EPS) if op.eps else None
    return found, eps


def _dtype_of(rule: str, like: Tensor, weight: Tensor | None) -> torch.dtype:
    if rule == "weight" and weight is not None:
        return weight.dtype
    return torch.float32 if rule == "float32" else like.dtype


def _shape_of(rule: str, like: Tensor, weight: Tensor | None) -> tuple[int, ...]:
    if rule == "weight":
        return (0,) if weight is None else tuple(weight.shape)
    return shape_of(rule, tuple(like.shape))


def _weight_of(op: Op, args: tuple[Any, ...]) -> Tensor | None:
    """The op's weight argument (None where it has none, or it was left out)."""
    names = [tensor.name for tensor in op.inputs]
    return args[names.index("weight")] if "weight" in names else None


def fake(op: Op) -> Impl:
    """The fake of ``op``: its checks, then empty results of its shapes, dtypes and device."""

    def implementation(*args: Any) -> Any:
        found, eps = operands(op, args)
        check(op, found, eps)
        after = len(op.inputs) + (1 if op.eps else 0)
        check_options(op, args[after:])
        like, weight = args[subject(op)], _weight_of(op, args)
        results = tuple(
            torch.empty(
                _shape_of(result.shape, like, weight),
                dtype=_dtype_of(result.dtype, like, weight),
                device=like.device,
            )
            for result in op.results
        )
        if not results:
            return None
        return results[0] if len(results) == 1 else results

    implementation.__name__ = f"{op.name}_fake"
    return implementation


def real(op: Op) -> Impl:
    """The CUDA implementation of a forward op with a plan: its hot call, else its checks and
    the launch through :func:`kernelpack.ops.mlp.hot.torch_run`."""
    name = op.name
    inputs = len(op.inputs)
    tail = (None,) if op.out else ()
    calls = hot.HOT_BELOW_AUTOGRAD

    def implementation(*args: Any) -> Any:
        result = calls[name](*args)  # eps and out= left out take their defaults
        if result is NotImplemented:
            found, eps = operands(op, args)
            check(op, found, eps)
            tensors = list(args[:inputs])
            if op.in_place and not all(tensors[i].is_contiguous() for i in op.in_place):
                strided = STRIDED.get(name)
                if strided is None:
                    names = " and ".join(op.inputs[i].name for i in op.in_place)
                    raise UsageError(
                        f"{op.inputs[0].name}: {names} are updated in place and must be contiguous"
                    )
                return strided(*args)
            contiguous = [t if i in op.in_place else t.contiguous() for i, t in enumerate(tensors)]
            extra = () if eps is None else (float(eps),)  # the default where left out
            result = hot.torch_run(name, *contiguous, *extra, *tail)
        return result

    implementation.__name__ = name
    return implementation


# ---- the launches of their own: the training path's norms and the backward ops ---------------


def _rows(x: Tensor) -> tuple[int, int]:
    cols = x.shape[-1]
    return (x.numel() // cols if cols else math.prod(x.shape[:-1])), cols


def _checked(name: str, *args: Any) -> str:
    """The dtype name of op ``name``'s subject, after the op's checks."""
    op = TABLE[name]
    found, eps = operands(op, args)
    check(op, found, eps)
    return _subject_dtype(op, found)


def _subject_dtype(op: Op, found: list[Operand | None]) -> str:
    """The dtype of the subject, which the checks have found a tensor."""
    first = found[subject(op)]
    assert first is not None  # check() refuses a missing subject
    return first.dtype


def _norm_with_scale(
    x: Tensor, residual: Tensor | None, weight: Tensor, eps: float
) -> tuple[Tensor, ...]:
    """(norm, row scales), or with a residual (norm, sum, row scales): the forward norms of the
    training path, which store each row's scale (not the hot path's launch, which stores none).
    Rows of no elements get NaN scales, as the kernel's 0 / 0 would give."""
    if residual is None:
        dtype = _checked("rms_norm_with_scale", x, weight, eps)
    else:
        dtype = _checked("add_rms_norm_with_scale", x, residual, weight, eps)
    x, weight = x.contiguous(), weight.contiguous()
    out = torch.empty_like(x)
    row_scales = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if x.shape[-1] == 0:
        row_scales.fill_(math.nan)
    plan = hot.torch_plan(x)
    device, stream = plan.device, plan.stream(plan.index)
    shape = tuple(x.shape)
    if residual is None:
        pointers: tuple[Any, ...] = (x, weight, out, row_scales)
        launch.launch_op(device, TABLE["rms_norm"], dtype, shape, pointers, float(eps), stream)
        return out, row_scales
    residual = residual.contiguous()
    summed = torch.empty_like(x)
    pointers = (x, residual, weight, out, summed, row_scales)
    launch.launch_op(device, TABLE["add_rms_norm"], dtype, shape, pointers, float(eps), stream)
    return out, summed, row_scales


def _rms_norm_with_scale(
    x: Tensor, weight: Tensor, eps: float = DEFAULT_EPS
) -> tuple[Tensor, Tensor]:
    out, row_scales = _norm_with_scale(x, None, weight, eps)
    return out, row_scales


def _add_rms_norm_with_scale(
    x: Tensor, residual: Tensor, weight: Tensor, eps: float = DEFAULT_EPS
) -> tuple[Tensor, Tensor, Tensor]:
    out, summed, row_scales = _norm_with_scale(x, residual, weight, eps)
    return out, summed, row_scales


def _swiglu_backward(grad: Tensor, gate: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    dtype = _checked("swiglu_backward", grad, gate, up)
    grad, gate, up = grad.contiguous(), gate.contiguous(), up.contiguous()
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
    plan = hot.torch_plan(gate)
    stream = plan.stream(plan.index)
    launch.launch_swiglu_backward(
        plan.device, dtype, gate, up, grad, grad_gate, grad_up, gate.numel(), stream
    )
    return grad_gate, grad_up


def _silu_and_mul_backward(grad: Tensor, x: Tensor) -> Tensor:
    dtype = _checked("silu_and_mul_backward", grad, x)
    grad, x = grad.contiguous(), x.contiguous()
    grad_x = torch.empty_like(x)
    rows, cols = _rows(x)
    plan = hot.torch_plan(x)
    stream = plan.stream(plan.index)
    launch.launch_silu_and_mul_backward(
        plan.device, dtype, x, grad, grad_x, rows, cols // 2, stream
    )
    return grad_x


def _norm_backward(
    grad: Tensor, grad_sum: Tensor | None, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    """(input gradient, weight gradient) of RMSNorm from x and the forward's row scales; with
    grad_sum (add_rms_norm, x being the sum), the input gradient is the sum's, which x and the
    residual share."""
    if grad_sum is None:
        dtype = _checked("rms_norm_backward", grad, x, weight, row_scales)
    else:
        dtype = _checked("add_rms_norm_backward", grad, grad_sum, x, weight, row_scales)
    grad, x, weight = grad.contiguous(), x.contiguous(), weight.contiguous()
    extra = 0 if grad_sum is None else grad_sum.contiguous()
    rows, cols = _rows(x)
    grad_x = torch.empty_like(x)
    grad_weight = torch.empty_like(weight)
    plan = hot.torch_plan(x)
    device, stream = plan.device, plan.stream(plan.index)
    facts = launch.device_facts(device)
    arrays = launch.NormGrads(x, row_scales, weight, grad, extra, grad_x, grad_weight)
    threads = short_backward_threads(rows, cols, dtype, facts.multiprocessors)
    if threads:
        shape = short_backward_scratch(rows, cols, dtype)
        scratch: Any = (
            0 if shape is None else torch.empty(shape, dtype=torch.float32, device=x.device)
        )
        launch.launch_rms_norm_backward_short(
            device, dtype, arrays, scratch, rows, cols, threads, stream
        )
        return grad_x, grad_weight
    blocks = backward_row_geometry(rows, cols, dtype, facts)[0] if rows else 0
    partial = torch.empty((max(blocks, 1), cols), dtype=torch.float32, device=x.device)
    launch.launch_rms_norm_backward(device, dtype, arrays, 0, partial, rows, cols, stream)
    return grad_x, grad_weight


def _rms_norm_backward(
    grad: Tensor, x: Tensor, weight: Tensor, row_scales: Tensor
) -> tuple[Tensor, Tensor]:
    return _norm_backward(grad, None, x, weight, row_scales)


# ---- the options (kernelpack.ops.mlp.options): their own kernels, launched here ---------------


def _dtype_name(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _strided(name: str, tensor: Tensor) -> int:
    """The row stride of an input the op writes in place (it cannot take a copy): the layout
    rule kernelpack.mlp applies too (:func:`.checks.in_place_row_stride`)."""
    return in_place_row_stride(name, tuple(tensor.shape), tuple(tensor.stride()))


def _checked_options(
    name: str, tensors: tuple[Any, ...], eps: Any, values: tuple[Any, ...]
) -> tuple[str, float, tuple[Any, ...]]:
    """(subject's dtype, eps, options) of op ``name`` after its checks."""
    op = TABLE[name]
    found, checked_eps = operands(op, (*tensors, eps) if op.eps else tensors)
    check(op, found, checked_eps)
    return _subject_dtype(op, found), float(checked_eps or 0.0), check_options(op, values)


def _weight_pointer(weight: Tensor | None, dtype: str) -> tuple[Any, str]:
    """(the weight's launch argument, its dtype name): 0 and the rows' dtype where weightless."""
    if weight is None:
        return 0, dtype
    return weight.contiguous(), _dtype_name(weight)


def _options_norm(
    name: str,
    x: Tensor,
    residual: Tensor | None,
    weight: Tensor | None,
    eps: float,
    offset: float,
    casting_mode: str,
) -> tuple[Tensor, ...]:
    """The norms with options: rms_norm_options (out,), its _with_scale form (out, row scales),
    rms_norm_options_in_place and fused_add_rms_norm_options (nothing: x gets the norm, the
    residual the sum, at their own row strides). Out of place, x is read at its row stride
    where it has one (else a contiguous copy)."""
    tensors = (x, weight) if residual is None else (x, residual, weight)
    dtype, eps, (offset, mode) = _checked_options(name, tensors, eps, (offset, casting_mode))
    op = TABLE[name]
    pointer, weight_dtype = _weight_pointer(weight, dtype)
    rows, cols = _rows(x)
    plan = hot.torch_plan(x)
    device, stream = plan.device, plan.stream(plan.index)
    scales = name.endswith("_with_scale")
    row_scales: Any = 0
    if scales:
        row_scales = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
        if cols == 0:
            row_scales.fill_(math.nan)
    if op.in_place:
        views = [(x, _strided("x", x))]
        if residual is not None:
            views.append((residual, _strided("residual", residual)))
        options.launch_norm_in_place(
            device,
            dtype,
            weight_dtype,
            str(mode),
            views,
            pointer,
            rows,
            cols,
            eps,
            float(offset),
            stream,
        )
        return ()
    stride = row_stride(tuple(x.shape), tuple(x.stride()))
    if stride is None:
        x, stride = x.contiguous(), cols
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    options.launch_norm(
        device,
        dtype,
        weight_dtype,
        str(mode),
        (x, pointer, out, row_scales),
        (stride, cols),
        rows,
        cols,
        eps,
        float(offset),
        stream,
    )
    return (out, row_scales) if scales else (out,)


def _rms_norm_options(
    x: Tensor,
    weight: Tensor | None,
    eps: float = DEFAULT_EPS,
    offset: float = 0.0,
    casting_mode: str = DEFAULT_CASTING_MODE,
) -> Tensor:
    return _options_norm("rms_norm_options", x, None, weight, eps, offset, casting_mode)[0]


def _rms_norm_options_with_scale(
    x: Tensor,
    weight: Tensor | None,
    eps: float = DEFAULT_EPS,
    offset: float = 0.0,
    casting_mode: str = DEFAULT_CASTING_MODE,
) -> tuple[Tensor, Tensor]:
    out, row_scales = _options_norm(
        "rms_norm_options_with_scale", x, None, weight, eps, offset, casting_mode
    )
    return out, row_scales


def _rms_norm_options_in_place(
    x: Tensor,
    weight: Tensor | None,
    eps: float = DEFAULT_EPS,
    offset: float = 0.0,
    casting_mode: str = DEFAULT_CASTING_MODE,
) -> None:
    _options_norm("rms_norm_options_in_place", x, None, weight, eps, offset, casting_mode)


def _fused_add_rms_norm_options(
    x: Tensor,
    residual: Tensor,
    weight: Tensor | None,
    eps: float = DEFAULT_EPS,
    offset: float = 0.0,
    casting_mode: str = DEFAULT_CASTING_MODE,
) -> None:
    _options_norm("fused_add_rms_norm_options", x, residual, weight, eps, offset, casting_mode)


def _rms_norm_options_backward(
    grad: Tensor, x: Tensor, weight: Tensor | None, row_scales: Tensor, offset: float = 0.0
) -> tuple[Tensor, Tensor]:
    """(input gradient, weight gradient: an empty tensor where weightless)."""
    dtype, _, (offset,) = _checked_options(
        "rms_norm_options_backward", (grad, x, weight, row_scales), None, (offset,)
    )
    pointer, weight_dtype = _weight_pointer(weight, dtype)
    grad, x = grad.contiguous(), x.contiguous()
    rows, cols = _rows(x)
    grad_x = torch.empty_like(x)
    partial: Any = 0
    if weight is None:
        grad_weight = x.new_empty((0,))
    else:
        grad_weight = torch.empty_like(pointer)
        blocks = options.backward_blocks(rows)
        partial = torch.empty((blocks, cols), dtype=torch.float32, device=x.device)
    plan = hot.torch_plan(x)
    options.launch_norm_backward(
        plan.device,
        dtype,
        weight_dtype,
        (x, row_scales, pointer, grad, 0, grad_x),
        partial,
        grad_weight if weight is not None else 0,
        rows,
        cols,
        float(offset),
        plan.stream(plan.index),
    )
    return grad_x, grad_weight


def _swiglu_scaled(
    gate: Tensor, up: Tensor, gate_multiplier: float = 1.0, down_multiplier: float = 1.0
) -> Tensor:
    dtype, _, (gm, dm) = _checked_options(
        "swiglu_scaled", (gate, up), None, (gate_multiplier, down_multiplier)
    )
    gate, up = gate.contiguous(), up.contiguous()
    out = torch.empty_like(gate)
    plan = hot.torch_plan(gate)
    options.launch_swiglu_scaled(
        plan.device,
        dtype,
        (gate, up, out),
        gate.numel(),
        float(gm),
        float(dm),
        plan.stream(plan.index),
    )
    return out


def _swiglu_scaled_backward(
    grad: Tensor,
    gate: Tensor,
    up: Tensor,
    gate_multiplier: float = 1.0,
    down_multiplier: float = 1.0,
) -> tuple[Tensor, Tensor]:
    dtype, _, (gm, dm) = _checked_options(
        "swiglu_scaled_backward", (grad, gate, up), None, (gate_multiplier, down_multiplier)
    )
    grad, gate, up = grad.contiguous(), gate.contiguous(), up.contiguous()
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
    plan = hot.torch_plan(gate)
    options.launch_swiglu_scaled(
        plan.device,
        dtype,
        (gate, up, grad, grad_gate, grad_up),
        gate.numel(),
        float(gm),
        float(dm),
        plan.stream(plan.index),
    )
    return grad_gate, grad_up


def _silu_and_mul_as_torch(x: Tensor) -> Tensor:
    dtype, _, _ = _checked_options("silu_and_mul_as_torch", (x,), None, ())
    x = x.contiguous()
    out = x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
    rows, cols = _rows(x)
    plan = hot.torch_plan(x)
    options.launch_silu_and_mul_as_torch(
        plan.device, dtype, x, out, rows, cols // 2, plan.stream(plan.index)
    )
    return out


# op -> its real implementation, for the ops the table gives no plan
BY_HAND: dict[str, Impl] = {
    "rms_norm_with_scale": _rms_norm_with_scale,
    "add_rms_norm_with_scale": _add_rms_norm_with_scale,
    "swiglu_backward": _swiglu_backward,
    "silu_and_mul_backward": _silu_and_mul_backward,
    "rms_norm_backward": _rms_norm_backward,
    # (grad, grad_sum, summed, weight, row_scales): the norm's backward with the sum's gradient
    "add_rms_norm_backward": _norm_backward,
    "rms_norm_options": _rms_norm_options,
    "rms_norm_options_with_scale": _rms_norm_options_with_scale,
    "rms_norm_options_in_place": _rms_norm_options_in_place,
    "fused_add_rms_norm_options": _fused_add_rms_norm_options,
    "rms_norm_options_backward": _rms_norm_options_backward,
    "swiglu_scaled": _swiglu_scaled,
    "swiglu_scaled_backward": _swiglu_scaled_backward,
    "silu_and_mul_as_torch": _silu_and_mul_as_torch,
}

# in-place op -> the implementation its views at a row stride take (the table's ``strided``:
# vLLM's fused_add_rms_norm over x[..., :hidden]), at its default options; contiguous tensors
# keep the op's own kernels and hot call
STRIDED: dict[str, Impl] = {op.name: BY_HAND[op.strided] for op in TABLE.values() if op.strided}


def implementations(op: Op) -> tuple[Impl, Impl]:
    """(real, fake) of ``op``: from its table entry where it has a plan, else BY_HAND's."""
    return (real(op) if op.plan is not None else BY_HAND[op.name]), fake(op)
