"""The MLP ops' torch implementations: the real ones (CUDA dispatch key) and the fakes, from the
op table.

Every op of the table gets a fake made from its entry (:func:`fake`: the entry's checks, then
empty results of the entry's shapes and dtypes), so torch.compile traces it and reports a bad
argument while tracing. A forward op with a plan gets its real implementation from its entry too
(:func:`real`): its hot call first (below autograd: requires_grad is not read), else the entry's
checks, its inputs made contiguous, and the launch (which prepares the hot call for the shape).
The training path's norms (which store row scales), the backward ops and the options launch
kernels of their own (:data:`BY_HAND`): each launch is one function of the arguments that its
entry has split and checked (:class:`Call`), and :func:`by_hand` makes it the op's implementation.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from ...errors import UsageError
from . import hot, launch, options
from .checks import Operand, check, check_options, in_place_row_stride, row_stride, shape_of
from .geometry import backward_row_geometry, short_backward_scratch, short_backward_threads
from .table import DEFAULT_EPS, TABLE, Op, subject

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


class Call(NamedTuple):
    """An op's arguments as the dispatcher passes them (trailing defaults left out), split by
    its table entry and checked: so that a launch reads each by name, and no launch repeats its
    op's signature."""

    op: Op
    dtype: str  # the subject's
    tensors: tuple[Any, ...]  # in the table's order; None for an optional one left out
    eps: float  # the default where left out; 0.0 for an op without eps
    options: tuple[Any, ...]  # in the table's order, the defaults filled in

    def tensor(self, name: str) -> Any:
        """The tensor argument ``name``: None where the op has none of that name, or it was
        left out."""
        names = [tensor.name for tensor in self.op.inputs]
        return self.tensors[names.index(name)] if name in names else None

    @property
    def subject(self) -> Any:
        """The tensor the rules are relative to (:func:`.table.subject`)."""
        return self.tensors[subject(self.op)]


def checked(op: Op, args: tuple[Any, ...]) -> Call:
    """``op``'s arguments after its checks (its entry's rules, then its options')."""
    found, eps = operands(op, args)
    check(op, found, eps)
    first = found[subject(op)]
    assert first is not None  # check() refuses a missing subject
    after = len(op.inputs) + (1 if op.eps else 0)
    tensors = tuple(args[: len(op.inputs)])
    return Call(op, first.dtype, tensors, float(eps or 0.0), check_options(op, args[after:]))


def _as_declared(op: Op, results: tuple[Tensor, ...]) -> Any:
    """``results`` as the op's schema returns them: nothing, one tensor, or a tuple."""
    if not op.results:
        return None
    return results[0] if len(op.results) == 1 else results


def _dtype_of(rule: str, like: Tensor, weight: Tensor | None) -> torch.dtype:
    if rule == "weight" and weight is not None:
        return weight.dtype
    return torch.float32 if rule == "float32" else like.dtype


def _shape_of(rule: str, like: Tensor, weight: Tensor | None) -> tuple[int, ...]:
    if rule == "weight":
        return (0,) if weight is None else tuple(weight.shape)
    return shape_of(rule, tuple(like.shape))


def fake(op: Op) -> Impl:
    """The fake of ``op``: its checks, then empty results of its shapes, dtypes and device."""

    def implementation(*args: Any) -> Any:
        call = checked(op, args)
        like, weight = call.subject, call.tensor("weight")
        results = tuple(
            torch.empty(
                _shape_of(result.shape, like, weight),
                dtype=_dtype_of(result.dtype, like, weight),
                device=like.device,
            )
            for result in op.results
        )
        return _as_declared(op, results)

    implementation.__name__ = f"{op.name}_fake"
    return implementation


def real(op: Op) -> Impl:
    """The CUDA implementation of a forward op with a plan: its hot call, else its checks and
    the launch through :func:`kernelpack.ops.mlp.hot.torch_run`."""
    name = op.name
    inputs = len(op.inputs)
    tail = (None,) if op.out else ()
    calls = hot.HOT_BELOW_AUTOGRAD
    strided = by_hand(TABLE[STRIDED[name]]) if name in STRIDED else None

    def implementation(*args: Any) -> Any:
        result = calls[name](*args)  # eps and out= left out take their defaults
        if result is NotImplemented:
            found, eps = operands(op, args)
            check(op, found, eps)
            tensors = list(args[:inputs])
            if op.in_place and not all(tensors[i].is_contiguous() for i in op.in_place):
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


# ---- the launches of their own: the training path's norms, the backward ops, the options -------


def _rows(x: Tensor) -> tuple[int, int]:
    cols = x.shape[-1]
    return (x.numel() // cols if cols else math.prod(x.shape[:-1])), cols


def _on(tensor: Tensor) -> tuple[str, Any]:
    """(device string, stream) of the launch over ``tensor``."""
    plan = hot.torch_plan(tensor)
    return plan.device, plan.stream(plan.index)


def _row_scales(x: Tensor) -> Tensor:
    """The row scales' buffer; rows of no elements get NaN scales, as the kernel's 0 / 0 would."""
    row_scales = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    if x.shape[-1] == 0:
        row_scales.fill_(math.nan)
    return row_scales


def _norm_with_scale(call: Call) -> tuple[Tensor, ...]:
    """(norm, row scales), or with a residual (norm, sum, row scales): the forward norms of the
    training path, which store each row's scale (not the hot path's launch, which stores none)."""
    x, weight = call.tensor("x").contiguous(), call.tensor("weight").contiguous()
    residual = call.tensor("residual")
    out, row_scales = torch.empty_like(x), _row_scales(x)
    device, stream = _on(x)
    shape = tuple(x.shape)
    if residual is None:
        pointers: tuple[Any, ...] = (x, weight, out, row_scales)
        launch.launch_op(device, TABLE["rms_norm"], call.dtype, shape, pointers, call.eps, stream)
        return out, row_scales
    residual = residual.contiguous()
    summed = torch.empty_like(x)
    pointers = (x, residual, weight, out, summed, row_scales)
    launch.launch_op(device, TABLE["add_rms_norm"], call.dtype, shape, pointers, call.eps, stream)
    return out, summed, row_scales


def _swiglu_backward(call: Call) -> tuple[Tensor, ...]:
    grad, gate, up = (tensor.contiguous() for tensor in call.tensors)
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
    device, stream = _on(gate)
    launch.launch_swiglu_backward(
        device, call.dtype, gate, up, grad, grad_gate, grad_up, gate.numel(), stream
    )
    return grad_gate, grad_up


def _silu_and_mul_backward(call: Call) -> tuple[Tensor, ...]:
    grad, x = (tensor.contiguous() for tensor in call.tensors)
    grad_x = torch.empty_like(x)
    rows, cols = _rows(x)
    device, stream = _on(x)
    launch.launch_silu_and_mul_backward(
        device, call.dtype, x, grad, grad_x, rows, cols // 2, stream
    )
    return (grad_x,)


def _norm_backward(call: Call) -> tuple[Tensor, ...]:
    """(input gradient, weight gradient) of RMSNorm from x and the forward's row scales; with
    grad_sum (add_rms_norm's, its subject the sum), the input gradient is the sum's, which x and
    the residual share."""
    dtype = call.dtype
    grad, x = call.tensor("grad").contiguous(), call.subject.contiguous()
    weight, row_scales = call.tensor("weight").contiguous(), call.tensor("row_scales")
    grad_sum = call.tensor("grad_sum")
    extra = 0 if grad_sum is None else grad_sum.contiguous()
    rows, cols = _rows(x)
    grad_x = torch.empty_like(x)
    grad_weight = torch.empty_like(weight)
    device, stream = _on(x)
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


def _dtype_name(tensor: Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _strided(name: str, tensor: Tensor) -> int:
    """The row stride of an input the op writes in place (it cannot take a copy): the layout
    rule kernelpack.mlp applies too (:func:`.checks.in_place_row_stride`)."""
    return in_place_row_stride(name, tuple(tensor.shape), tuple(tensor.stride()))


def _weight_pointer(weight: Tensor | None, dtype: str) -> tuple[Any, str]:
    """(the weight's launch argument, its dtype name): 0 and the rows' dtype where weightless."""
    if weight is None:
        return 0, dtype
    return weight.contiguous(), _dtype_name(weight)


def _options_norm(call: Call) -> tuple[Tensor, ...]:
    """The norms with options: rms_norm_options (out,), its _with_scale form (out, row scales),
    rms_norm_options_in_place and fused_add_rms_norm_options (nothing: x gets the norm, the
    residual the sum, at their own row strides). Out of place, x is read at its row stride
    where it has one (else a contiguous copy)."""
    x, residual = call.tensor("x"), call.tensor("residual")
    offset, mode = call.options
    pointer, weight_dtype = _weight_pointer(call.tensor("weight"), call.dtype)
    rows, cols = _rows(x)
    device, stream = _on(x)
    scalars = (rows, cols, call.eps, float(offset), stream)
    if call.op.in_place:
        views = [(x, _strided("x", x))]
        if residual is not None:
            views.append((residual, _strided("residual", residual)))
        options.launch_norm_in_place(
            device,
            call.dtype,
            weight_dtype,
            str(mode),
            views,
            pointer,
            *scalars,
        )
        return ()
    scales = call.op.name.endswith("_with_scale")
    row_scales: Any = _row_scales(x) if scales else 0
    stride = row_stride(tuple(x.shape), tuple(x.stride()))
    if stride is None:
        x, stride = x.contiguous(), cols
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    pointers = (x, pointer, out, row_scales)
    options.launch_norm(
        device, call.dtype, weight_dtype, str(mode), pointers, (stride, cols), *scalars
    )
    return (out, row_scales) if scales else (out,)


def _options_norm_backward(call: Call) -> tuple[Tensor, ...]:
    """(input gradient, weight gradient: an empty tensor where weightless)."""
    (offset,) = call.options
    weight = call.tensor("weight")
    pointer, weight_dtype = _weight_pointer(weight, call.dtype)
    grad, x = call.tensor("grad").contiguous(), call.tensor("x").contiguous()
    rows, cols = _rows(x)
    grad_x = torch.empty_like(x)
    partial: Any = 0
    if weight is None:
        grad_weight = x.new_empty((0,))
    else:
        grad_weight = torch.empty_like(pointer)
        blocks = options.backward_blocks(rows)
        partial = torch.empty((blocks, cols), dtype=torch.float32, device=x.device)
    device, stream = _on(x)
    options.launch_norm_backward(
        device,
        call.dtype,
        weight_dtype,
        (x, call.tensor("row_scales"), pointer, grad, 0, grad_x),
        partial,
        grad_weight if weight is not None else 0,
        rows,
        cols,
        float(offset),
        stream,
    )
    return grad_x, grad_weight


def _swiglu_scaled(call: Call) -> tuple[Tensor, ...]:
    """swiglu_scaled (out,) and its backward (grad_gate, grad_up): one kernel family, whose
    backward form takes the incoming gradient after gate and up."""
    *grad, gate, up = (tensor.contiguous() for tensor in call.tensors)
    results = tuple(torch.empty_like(gate) for _ in call.op.results)
    gate_multiplier, down_multiplier = call.options
    device, stream = _on(gate)
    options.launch_swiglu_scaled(
        device,
        call.dtype,
        (gate, up, *grad, *results),
        gate.numel(),
        float(gate_multiplier),
        float(down_multiplier),
        stream,
    )
    return results


def _silu_and_mul_as_torch(call: Call) -> tuple[Tensor, ...]:
    x = call.tensor("x").contiguous()
    out = x.new_empty((*x.shape[:-1], x.shape[-1] // 2))
    rows, cols = _rows(x)
    device, stream = _on(x)
    options.launch_silu_and_mul_as_torch(device, call.dtype, x, out, rows, cols // 2, stream)
    return (out,)


# op -> its launch, for the ops the table gives no plan
BY_HAND: dict[str, Callable[[Call], tuple[Tensor, ...]]] = {
    "rms_norm_with_scale": _norm_with_scale,
    "add_rms_norm_with_scale": _norm_with_scale,
    "swiglu_backward": _swiglu_backward,
    "silu_and_mul_backward": _silu_and_mul_backward,
    "rms_norm_backward": _norm_backward,
    "add_rms_norm_backward": _norm_backward,
    "rms_norm_options": _options_norm,
    "rms_norm_options_with_scale": _options_norm,
    "rms_norm_options_in_place": _options_norm,
    "fused_add_rms_norm_options": _options_norm,
    "rms_norm_options_backward": _options_norm_backward,
    "swiglu_scaled": _swiglu_scaled,
    "swiglu_scaled_backward": _swiglu_scaled,
    "silu_and_mul_as_torch": _silu_and_mul_as_torch,
}

# in-place op -> the op its views at a row stride take (the table's ``strided``: vLLM's
# fused_add_rms_norm over x[..., :hidden]), at its default options; contiguous tensors keep the
# op's own kernels and hot call
STRIDED: dict[str, str] = {op.name: op.strided for op in TABLE.values() if op.strided}


def by_hand(op: Op) -> Impl:
    """The real implementation of an op without a plan: its arguments split and checked by its
    entry, its BY_HAND launch, and the launch's results as its schema returns them."""
    launch_of = BY_HAND[op.name]

    def implementation(*args: Any) -> Any:
        return _as_declared(op, launch_of(checked(op, args)))

    implementation.__name__ = op.name
    return implementation


def implementations(op: Op) -> tuple[Impl, Impl]:
    """(real, fake) of ``op``: from its table entry where it has a plan, else its BY_HAND launch."""
    return (real(op) if op.plan is not None else by_hand(op)), fake(op)
