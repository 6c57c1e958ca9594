"""SwiGLU and RMSNorm, the MLP kernels of LLaMA-style transformer blocks.

Each op takes the arrays of whatever framework the caller uses: torch tensors and CuPy arrays
directly; other GPU arrays (JAX, Numba, ...) through ``__cuda_array_interface__`` or DLPack, viewed
without a copy as torch tensors (or CuPy arrays where torch is absent); numpy arrays are copied to
the GPU and the results back. Outputs are allocated in the framework of the first array argument
unless ``out=`` is given, and the kernel runs on that framework's current stream, so it orders with
the caller's own work like any of the framework's ops.

Arguments are checked before anything touches a GPU, so a wrong dtype, shape, layout or device fails
with a UsageError (a ValueError) naming the argument on any machine. Arithmetic is in float32 for
every storage type (float32, float16, bfloat16).

Torch tensors take a hot path once one call of a (dtype, device, shape) went through the checks:
one C call reads the same checks straight off the tensors, allocates the result (none with
``out=``) and launches the kernel prepared for the shape (:mod:`kernelpack.mlp_hot`); anything it
does not accept comes back here and goes through the full checks (docs/bench-mlp-notes.md has
the host's cost per call).
Tensors that need autograd go through the custom ops of :mod:`kernelpack.torch_ops`
(``torch.ops.kernelpack.*``), which also serve torch.compile and share the hot path's launches.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import mlp_hot
from .devices import arrays
from .devices.arrays import Array
from .errors import UsageError
from .mlp_hot import HOT
from .mlp_launch import (
    KERNEL_TYPE,
    MAX_ROW,
    SUPPORTED,
    launch_add_rms_norm,
    launch_rms_norm,
    launch_silu_and_mul,
    launch_swiglu,
)

__all__ = ["fused_add_rms_norm", "rms_norm", "silu_and_mul", "swiglu"]


def _check_dtype(array: Array) -> None:
    if array.dtype not in KERNEL_TYPE:
        raise UsageError(
            f"{array.name}: dtype {array.dtype} is not supported; expected one of {SUPPORTED}"
        )


def _array(name: str, value: object) -> Array:
    array = arrays.wrap(name, value)
    _check_dtype(array)
    if array.framework == "torch":
        mlp_hot.TORCH_TYPES.add(type(array.value))
    return array


def _check_same(first: Array, *others: Array) -> None:
    """Every array has the first's dtype and the same kind of memory, and device arrays are
    C-contiguous and on one device."""
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
    for array in (first, *others):
        if not array.contiguous:
            raise UsageError(
                f"{array.name}: must be C-contiguous (call .contiguous() or "
                "ascontiguousarray first)"
            )
        if array.device_name != first.device_name:
            raise UsageError(
                f"{array.name}: on {array.device_name}, but {first.name} is on {first.device_name}"
            )


def _check_shape(array: Array, shape: tuple[int, ...], what: str) -> None:
    if array.shape != shape:
        raise UsageError(f"{array.name}: shape {array.shape} does not match {what} {shape}")


def check_eps(eps: object) -> float:
    """eps as a float, or a UsageError: a finite number >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise UsageError(f"eps: expected a float, got {type(eps).__name__}")
    value = float(eps)
    if not (math.isfinite(value) and value >= 0.0):
        raise UsageError(f"eps: must be a finite number >= 0, got {eps!r}")
    return value


def _output(out: object, like: Array, shape: tuple[int, ...]) -> Array | None:
    """The checked ``out=`` array, or None when the op allocates its own."""
    if out is None:
        return None
    array = _array("out", out)
    _check_same(like, array)
    _check_shape(array, shape, "the result's")
    if not array.on_gpu and not array.value.flags.writeable:
        raise UsageError("out: is read-only")
    return array


# ---- torch tensors: the hot path (kernelpack.mlp_hot) and the checked launches ----------------


def _needs_autograd(*tensors: Any) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _torch_ops() -> Any:
    """torch.ops.kernelpack, registered on first use (autograd goes through the custom ops)."""
    import torch

    from . import torch_ops  # deferred: it imports torch, an optional dependency

    torch_ops.register()
    return torch.ops.kernelpack


# ---- the checked path: any framework; numpy through device copies -----------------------------


def _run(
    op: str,
    operands: list[Array],
    written: list[int],
    launch: Callable[[str, list[int], int], None],
) -> None:
    """``launch(device, addresses, stream)`` over checked operands. GPU arrays are launched on
    in place (for a torch tensor ``op``'s launch is prepared here, so that its next call of the
    shape takes the hot path); numpy arrays go through device copies made with torch or CuPy,
    and those at ``written`` are copied back."""
    first = operands[0]
    if first.on_gpu:
        if first.framework == "torch":
            mlp_hot.prepare(op, first.value, mlp_hot.torch_plan(first.value).device)
        launch(first.device_name, [a.pointer for a in operands], arrays.current_stream(first))
        return
    framework = arrays.gpu_framework()
    copies = [arrays.to_gpu(host, framework) for host in operands]
    launch(copies[0].device_name, [c.pointer for c in copies], arrays.current_stream(copies[0]))
    for position in written:
        arrays.to_host(copies[position], operands[position])


# ---- the ops ----------------------------------------------------------------------------------


def swiglu(gate: Any, up: Any, out: Any = None) -> Any:
    """silu(gate) * up, elementwise; gate and up have one shape.

    Returns ``out``, or a new array of gate's framework.
    """
    result = HOT["swiglu"](gate, up, out)
    if result is not NotImplemented:
        return result
    g = _array("gate", gate)
    u = _array("up", up)
    _check_same(g, u)
    _check_shape(u, g.shape, "gate's")
    if out is None and g.framework == "torch" and _needs_autograd(g.value, u.value):
        return _torch_ops().swiglu(g.value, u.value)
    result = _output(out, g, g.shape) or arrays.empty(g, g.shape)
    n = math.prod(g.shape)
    _run(
        "swiglu",
        [g, u, result],
        [2],
        lambda device, p, stream: launch_swiglu(device, g.dtype, p[0], p[1], p[2], n, stream),
    )
    return result.value


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """silu(gate) * up where x is [..., 2d] holding gate (first half) and up (second half) in
    each row, the layout inference servers use; the result is [..., d]."""
    result = HOT["silu_and_mul"](x, out)
    if result is not NotImplemented:
        return result
    a = _array("x", x)
    if not a.shape or a.shape[-1] % 2:
        raise UsageError(f"x: shape {a.shape}: the last dimension must be even (gate and up)")
    result_shape = (*a.shape[:-1], a.shape[-1] // 2)
    _check_same(a)
    if out is None and a.framework == "torch" and _needs_autograd(a.value):
        return _torch_ops().silu_and_mul(a.value)
    result = _output(out, a, result_shape) or arrays.empty(a, result_shape)
    rows, cols = math.prod(result_shape[:-1]), result_shape[-1]
    _run(
        "silu_and_mul",
        [a, result],
        [1],
        lambda device, p, stream: launch_silu_and_mul(
            device, a.dtype, p[0], p[1], rows, cols, stream
        ),
    )
    return result.value


def _check_norm_args(x: Array, weight: Array, eps: object) -> float:
    """The checked eps, after checking x and weight."""
    if not x.shape:
        raise UsageError("x: must have at least one dimension (the normalised one)")
    if x.shape[-1] > MAX_ROW:
        raise UsageError(f"x: rows of {x.shape[-1]} elements; at most 2**30 are supported")
    _check_same(x, weight)
    _check_shape(weight, x.shape[-1:], "x's last dimension")
    return check_eps(eps)


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, out: Any = None) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension of x; weight is 1-D.

    Returns ``out``, or a new array of x's framework.
    """
    result = HOT["rms_norm"](x, weight, eps, out)
    if result is not NotImplemented:
        return result
    a = _array("x", x)
    w = _array("weight", weight)
    eps_value = _check_norm_args(a, w, eps)
    if out is None and a.framework == "torch" and _needs_autograd(a.value, w.value):
        return _torch_ops().rms_norm(a.value, w.value, eps_value)
    result = _output(out, a, a.shape) or arrays.empty(a, a.shape)
    rows, cols = math.prod(a.shape[:-1]), a.shape[-1]
    _run(
        "rms_norm",
        [a, w, result],
        [2],
        lambda device, p, stream: launch_rms_norm(  # no row scales: no backward here
            device, a.dtype, p[0], p[1], p[2], 0, rows, cols, eps_value, stream
        ),
    )
    return result.value


def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> None:
    """In place, in one pass: residual += x, then x = rms_norm(residual, weight, eps).

    The sum is rounded to the storage dtype when stored, and the norm is taken of the stored
    value, exactly as the two steps done one after the other. (In place, so no autograd: for
    training, torch.ops.kernelpack.add_rms_norm returns both results as new tensors.)
    """
    if HOT["fused_add_rms_norm"](x, residual, weight, eps) is not NotImplemented:
        return
    a = _array("x", x)
    r = _array("residual", residual)
    w = _array("weight", weight)
    eps_value = _check_norm_args(a, w, eps)
    _check_same(a, r)
    _check_shape(r, a.shape, "x's")
    if a.framework == "torch" and _needs_autograd(a.value, r.value, w.value):
        raise UsageError(
            "x: fused_add_rms_norm updates x and residual in place, which autograd cannot "
            "differentiate; use torch.ops.kernelpack.add_rms_norm (new tensors) for training"
        )
    if not a.on_gpu:
        for host in (a, r):
            if not host.value.flags.writeable:
                raise UsageError(f"{host.name}: is read-only; it is updated in place")
    rows, cols = math.prod(a.shape[:-1]), a.shape[-1]

    _run(
        "fused_add_rms_norm",
        [a, r, w],
        [0, 1],
        lambda device, p, stream: launch_add_rms_norm(  # out = x, residual_out = residual
            device, a.dtype, p[0], p[1], p[2], p[0], p[1], 0, rows, cols, eps_value, stream
        ),
    )
