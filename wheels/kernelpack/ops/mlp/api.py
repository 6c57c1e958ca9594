"""SwiGLU and RMSNorm, the MLP kernels of LLaMA-style transformer blocks.

Each op takes the arrays of whatever framework the caller uses: torch tensors and CuPy arrays
directly; other GPU arrays (JAX, Numba, ...) through ``__cuda_array_interface__`` or DLPack, viewed
without a copy as torch tensors (or CuPy arrays where torch is absent); numpy arrays are copied to
the GPU and the results back. Outputs are allocated in the framework of the first array argument
unless ``out=`` is given, and the kernel runs on that framework's current stream, so it orders with
the caller's own work like any of the framework's ops.

Every op is an entry of the op table (:mod:`.table`): its checks (:mod:`.checks`), results and
launch (:mod:`.launch`) are read from there; :func:`function` makes the function of any entry.
Arguments are checked before anything touches a GPU, so a wrong dtype, shape, layout or device fails
with a UsageError (a ValueError) naming the argument on any machine. GPU arrays are C-contiguous,
but those an in-place op writes where the table gives it a ``strided`` op (fused_add_rms_norm's x
and residual): views at a row stride, read off any framework's strides, take that op's kernel.
Arithmetic is in float32 for every storage type (float32, float16, bfloat16).

Torch tensors take a hot path once one call of a (dtype, device, shape) went through the checks:
one C call reads the same checks straight off the tensors, allocates the result (none with
``out=``) and launches the kernel prepared for the shape (:mod:`kernelpack.ops.mlp.hot`); anything it
does not accept comes back here and goes through the full checks (docs/bench-mlp.md has
the host's cost per call).
Tensors that need autograd go through the custom ops of :mod:`kernelpack.ops.mlp.torch_ops`
(``torch.ops.kernelpack.*``), which also serve torch.compile and share the hot path's launches.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Collection
from typing import Any

from ...devices import arrays
from ...devices.arrays import Array
from ...errors import UsageError
from . import hot, options
from .checks import (
    Operand,
    check,
    check_eps,
    check_options,
    check_shape,
    in_place_row_stride,
    shape_of,
)
from .geometry import KERNEL_TYPE, SUPPORTED
from .launch import launch_op
from .table import DEFAULT_EPS, TABLE, Op

__all__ = ["check_eps", "function", "fused_add_rms_norm", "rms_norm", "silu_and_mul", "swiglu"]

HOT = hot.HOT


def _array(name: str, value: object) -> Array:
    array = arrays.wrap(name, value)
    if array.dtype not in KERNEL_TYPE:
        raise UsageError(
            f"{array.name}: dtype {array.dtype} is not supported; expected one of {SUPPORTED}"
        )
    if array.framework == "torch":
        hot.TORCH_TYPES.add(type(array.value))
    return array


def _operand(array: Array) -> Operand:
    return Operand(array.name, array.dtype, tuple(array.shape), array.device_name, array.contiguous)


def _check_same(first: Array, *others: Array, strided: Collection[int] = ()) -> None:
    """Every array has the first's dtype and the same kind of memory, and device arrays are
    C-contiguous (but those at the positions ``strided``, which an op takes at a row stride)
    and on one device (the kernels take raw pointers)."""
    for other in others:
        if other.dtype != first.dtype:
            raise UsageError(
                f"{other.name}: dtype {other.dtype} differs from {first.name}'s {first.dtype}"
            )
        if other.on_gpu != first.on_gpu:
            where = "GPU" if first.on_gpu else "host (numpy)"
            raise UsageError(
                f"{other.name}: {first.name} is a {where} array, so {other.name} must be one too"
            )
    if not first.on_gpu:
        return
    for position, array in enumerate((first, *others)):
        if position not in strided and not array.contiguous:
            raise UsageError(
                f"{array.name}: must be C-contiguous (call .contiguous() or "
                "ascontiguousarray first)"
            )
        if array.device_name != first.device_name:
            raise UsageError(
                f"{array.name}: on {array.device_name}, but {first.name} is on {first.device_name}"
            )


def _output(out: object, like: Array, shape: tuple[int, ...]) -> Array | None:
    """The checked ``out=`` array, or None when the op allocates its own."""
    if out is None:
        return None
    array = _array("out", out)
    _check_same(like, array)
    check_shape(_operand(array), shape, "the result's")
    if not array.on_gpu and not array.value.flags.writeable:
        raise UsageError("out: is read-only")
    return array


def _needs_autograd(*tensors: Any) -> bool:
    import torch  # deferred: torch is optional

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _torch_ops() -> Any:
    """torch.ops.kernelpack, registered on first use (autograd goes through the custom ops)."""
    import torch  # deferred: torch is optional

    from . import torch_ops  # deferred: it imports torch, an optional dependency

    torch_ops.register()
    return torch.ops.kernelpack


def _compiling() -> bool:
    """Whether torch.compile or torch.export is tracing the call (torch imported, and its
    compiler says so): their tracer cannot enter the array wrappers, so the call goes to
    torch.ops.kernelpack's op, which they trace. Asked on the full path alone: the hot calls
    are traced through by the polyfills torch_ops.register gives them, so that an eager call
    pays nothing for it."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch.compiler.is_compiling())


def run(op: Op, values: tuple[Any, ...], eps: object = None, out: object = None) -> Any:
    """``op`` on any framework's arrays through the full checks (the path every call takes that
    the hot call did not): checked, autograd sent to torch.ops, results allocated in the first
    array's framework (or ``out``), launched; numpy arrays through device copies made with torch
    or CuPy, the results copied back. For a torch tensor the launch is prepared on the way, so
    that the next call of its shape takes the hot path. Under torch.compile the call goes to
    the op's torch op instead (:func:`.hot.traced_call`)."""
    if _compiling():
        as_hot = (*values, *((eps,) if op.eps else ()), *((out,) if op.out else ()))
        return hot.traced_call(op.name, as_hot, _torch_ops())
    inputs = [_array(spec.name, value) for spec, value in zip(op.inputs, values, strict=True)]
    first = inputs[0]
    _check_same(*inputs, strided=op.in_place if op.strided else ())
    eps_value = check(op, [_operand(a) for a in inputs], eps)
    epsilon = () if eps_value is None else (eps_value,)
    tensors = [a.value for a in inputs]  # a foreign array's torch tensor, not its wrapper
    if first.framework == "torch" and _needs_autograd(*tensors):
        if op.in_place:
            names = " and ".join(op.inputs[i].name for i in op.in_place)
            raise UsageError(
                f"{first.name}: {op.name} updates {names} in place, which autograd cannot "
                "differentiate; use torch.ops.kernelpack.add_rms_norm (new tensors) for training"
            )
        if out is None:
            return getattr(_torch_ops(), op.name)(*tensors, *epsilon)
    if op.strided and first.on_gpu and not all(inputs[i].contiguous for i in op.in_place):
        _launch_strided(op, inputs, eps_value)
        return None
    if op.in_place:
        if not first.on_gpu:
            for position in op.in_place:
                if not inputs[position].value.flags.writeable:
                    raise UsageError(
                        f"{inputs[position].name}: is read-only; it is updated in place"
                    )
        results = [inputs[i] for i in op.in_place]
        written = list(op.in_place)
    else:
        shapes = [shape_of(result.shape, first.shape) for result in op.results]
        given = _output(out, first, shapes[0]) if op.out else None
        results = [given] if given is not None else [arrays.empty(first, s) for s in shapes]
        written = list(range(len(inputs), len(inputs) + len(results)))
    operands = inputs + ([] if op.in_place else results)
    _launch(op, first, operands, written, eps_value)
    if op.in_place:
        return None
    return results[0].value if len(results) == 1 else tuple(r.value for r in results)


def _launch(
    op: Op, first: Array, operands: list[Array], written: list[int], eps: float | None
) -> None:
    """The launch over checked operands (inputs, then the results made or given). GPU arrays
    are launched on in place; numpy arrays go through device copies, and those at ``written`` are
    copied back."""
    if first.on_gpu:
        if first.framework == "torch" and op.name in hot.OPS:
            hot.prepare(op.name, first.value, hot.torch_plan(first.value).device)
        on = operands
    else:
        framework = arrays.gpu_framework()
        on = [arrays.to_gpu(host, framework) for host in operands]
    pointers = [a.pointer for a in on]
    pointers += [pointers[i] for i in op.in_place]
    pointers += [0] * op.nulls
    shape = tuple(first.shape)
    stream = arrays.current_stream(on[0])
    launch_op(on[0].device_name, op, first.dtype, shape, tuple(pointers), eps, stream)
    if not first.on_gpu:
        for position in written:
            arrays.to_host(on[position], operands[position])


def _launch_strided(op: Op, inputs: list[Array], eps: float | None) -> None:
    """In-place ``op`` over checked GPU arrays of which some it writes are views at a row stride:
    the kernel of its strided op (the table's ``strided``) at that op's default options, each
    view at its own row stride, as torch.ops.kernelpack's op launches it. The inputs are the
    views, then the weight (contiguous, :func:`_check_same`)."""
    strided = TABLE[op.strided]
    offset, casting_mode = check_options(strided, ())
    first, weight = inputs[0], inputs[len(op.in_place)]
    views = tuple(
        (view.pointer, in_place_row_stride(view.name, tuple(view.shape), view.strides))
        for view in (inputs[i] for i in op.in_place)
    )
    shape = tuple(first.shape)
    options.launch_norm_in_place(
        first.device_name,
        first.dtype,
        weight.dtype,
        str(casting_mode),
        views,
        weight.pointer,
        math.prod(shape[:-1]),
        shape[-1],
        float(eps or 0.0),
        float(offset),
        arrays.current_stream(first),
    )


def function(op: Op) -> Callable[..., Any]:
    """A kernelpack.mlp function for ``op``, its signature from the table: the inputs, then
    ``eps=1e-6`` and ``out=None`` where it takes them; its hot call first, then the full path."""
    names = [tensor.name for tensor in op.inputs]
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    if op.eps:
        params.append(
            inspect.Parameter("eps", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=DEFAULT_EPS)
        )
    if op.out:
        params.append(
            inspect.Parameter("out", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None)
        )
    signature = inspect.Signature(params)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        values = tuple(given[n] for n in names)
        eps, out = given.get("eps"), given.get("out")
        hot_args = (*values, *((eps,) if op.eps else ()), *((out,) if op.out else ()))
        hot_call: Callable[..., Any] = HOT.get(op.name, hot.not_hot)
        result = hot_call(*hot_args)
        if result is not NotImplemented:
            return result
        return run(op, values, eps, out)

    call.__name__ = call.__qualname__ = op.name
    call.__signature__ = signature  # type: ignore[attr-defined]
    return call


# ---- the ops (their signatures are the table's: tests/test_mlp_table.py checks them) ----------

SWIGLU, SILU_AND_MUL = TABLE["swiglu"], TABLE["silu_and_mul"]
RMS_NORM, FUSED_ADD_RMS_NORM = TABLE["rms_norm"], TABLE["fused_add_rms_norm"]


def swiglu(gate: Any, up: Any, out: Any = None) -> Any:
    """silu(gate) * up, elementwise; gate and up have one shape.

    Returns ``out``, or a new array of gate's framework.
    """
    result = HOT["swiglu"](gate, up, out)
    if result is not NotImplemented:
        return result
    return run(SWIGLU, (gate, up), None, out)


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """silu(gate) * up where x is [..., 2d] holding gate (first half) and up (second half) in
    each row, the layout inference servers use; the result is [..., d]."""
    result = HOT["silu_and_mul"](x, out)
    if result is not NotImplemented:
        return result
    return run(SILU_AND_MUL, (x,), None, out)


def rms_norm(x: Any, weight: Any, eps: float = DEFAULT_EPS, out: Any = None) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension of x; weight is 1-D.

    Returns ``out``, or a new array of x's framework.
    """
    result = HOT["rms_norm"](x, weight, eps, out)
    if result is not NotImplemented:
        return result
    return run(RMS_NORM, (x, weight), eps, out)


def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = DEFAULT_EPS) -> None:
    """In place, in one pass: residual += x, then x = rms_norm(residual, weight, eps).

    The sum is rounded to the storage dtype when stored, and the norm is taken of the stored
    value, exactly as the two steps done one after the other. (In place, so no autograd: for
    training, torch.ops.kernelpack.add_rms_norm returns both results as new tensors.)

    x and residual may be views whose rows lie one stride apart with a last dimension of stride
    1 (vLLM's ``x[..., :hidden]``), in any GPU framework: they take the kernel the torch op
    takes them with, and nothing between their rows is written; contiguous arrays keep the
    tuned kernels and the hot call.
    """
    if HOT["fused_add_rms_norm"](x, residual, weight, eps) is not NotImplemented:
        return
    run(FUSED_ADD_RMS_NORM, (x, residual, weight), eps)
