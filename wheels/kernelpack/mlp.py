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

Torch tensors take a hot path once one call of a (dtype, device) went through the checks: the
same checks read straight off the tensors, and the kernel handle and stream accessor cached, so a
call costs little more than the launch. Tensors that need autograd go through the custom ops of
:mod:`kernelpack.torch_ops` (``torch.ops.kernelpack.*``), which also serve torch.compile.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from . import arrays
from .arrays import Array
from .errors import UsageError
from .mlp_launch import (
    KERNEL_TYPE,
    MAX_ROW,
    kernel_name,
    launch_add_rms_norm,
    launch_rms_norm,
    launch_silu_and_mul,
    launch_swiglu,
    load_kernel,
    row_geometry,
    silu_and_mul_geometry,
    swiglu_geometry,
)

__all__ = ["fused_add_rms_norm", "rms_norm", "silu_and_mul", "swiglu"]

SUPPORTED = ", ".join(KERNEL_TYPE)


def _check_dtype(array: Array) -> None:
    if array.dtype not in KERNEL_TYPE:
        raise UsageError(
            f"{array.name}: dtype {array.dtype} is not supported; expected one of {SUPPORTED}"
        )


def _array(name: str, value: object) -> Array:
    array = arrays.wrap(name, value)
    _check_dtype(array)
    if array.framework == "torch":
        _TORCH_TYPES.add(type(array.value))
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


# ---- the torch hot path -----------------------------------------------------------------------

_TORCH_TYPES: set[type] = set()  # torch.Tensor and its subclasses seen so far (nn.Parameter)

# op -> its launch geometry from (rows, cols, dtype); swiglu counts its elements as rows
_GEOMETRY: dict[str, Callable[[int, int, str], tuple[Any, Any]]] = {
    "swiglu": lambda rows, cols, dtype: swiglu_geometry(rows * cols, dtype),
    "silu_and_mul": silu_and_mul_geometry,
    "rms_norm": row_geometry,
    "add_rms_norm": row_geometry,
}
_LAUNCHES_KEPT = 4096  # sizes remembered per (dtype, device) before the memo starts over


class TorchPlan:
    """What torch calls on one (dtype, device) need, found once: the device's and dtype's
    names, the raw current-stream accessor and torch.empty_like, and per (op, size) the kernel's
    launch with its grid and block already bound (a functools.partial of the C launcher), so a
    call spends its time in the launch rather than in Python."""

    __slots__ = ("device", "dtype", "empty_like", "index", "launches", "stream")

    def __init__(self, device: str, dtype: str, index: int, stream: Any, empty_like: Any) -> None:
        self.device = device
        self.dtype = dtype
        self.index = index
        self.stream = stream  # torch._C._cuda_getCurrentRawStream
        self.empty_like = empty_like
        self.launches: dict[tuple[str, int, int], Any] = {}

    def launcher(self, op: str, rows: int, cols: int) -> Any:
        """``op``'s kernel.launch for this size, grid and block bound; rows * cols > 0."""
        key = (op, rows, cols)
        launch = self.launches.get(key)
        if launch is None:
            if len(self.launches) >= _LAUNCHES_KEPT:
                self.launches.clear()
            grid, block = _GEOMETRY[op](rows, cols, self.dtype)
            kernel = load_kernel(self.device, kernel_name(op, self.dtype))
            launch = self.launches[key] = functools.partial(kernel.launch, grid, block)
        return launch


_TORCH_PLANS: dict[tuple[Any, int], TorchPlan] = {}  # (torch dtype, device index) -> plan


def torch_plan(tensor: Any) -> TorchPlan:
    """The plan for a CUDA (or ROCm) torch tensor of a supported dtype."""
    import torch

    index = tensor.get_device()
    key = (tensor.dtype, index)
    plan = _TORCH_PLANS.get(key)
    if plan is None:
        vendor = "hip" if torch.version.hip else "cuda"
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in KERNEL_TYPE or index < 0:
            raise UsageError(f"no kernel for a {dtype} tensor on {tensor.device}")
        plan = _TORCH_PLANS[key] = TorchPlan(
            f"{vendor}:{index}", dtype, index, torch._C._cuda_getCurrentRawStream, torch.empty_like
        )
    return plan


def _grad_enabled() -> bool:
    import torch

    return torch.is_grad_enabled()


def _needs_autograd(*tensors: Any) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _torch_ops() -> Any:
    """torch.ops.kernelpack, registered on first use (autograd goes through the custom ops)."""
    import torch

    from . import torch_ops

    torch_ops.register()
    return torch.ops.kernelpack


# ---- numpy: through a GPU framework, copies in and out -----------------------------------------


def _on_gpu(*hosts: Array) -> list[Array]:
    framework = arrays.gpu_framework()
    return [arrays.to_gpu(host, framework) for host in hosts]


# ---- the ops ----------------------------------------------------------------------------------


def swiglu(gate: Any, up: Any, out: Any = None) -> Any:
    """silu(gate) * up, elementwise; gate and up have one shape.

    Returns ``out``, or a new array of gate's framework.
    """
    kind = type(gate)
    if out is None and kind in _TORCH_TYPES and type(up) in _TORCH_TYPES:
        plan = _TORCH_PLANS.get((gate.dtype, gate.get_device()))
        if (
            plan is not None
            and up.dtype is gate.dtype
            and up.get_device() == gate.get_device()
            and up.shape == gate.shape
            and gate.is_contiguous()
            and up.is_contiguous()
            and not ((gate.requires_grad or up.requires_grad) and _grad_enabled())
        ):
            result = plan.empty_like(gate)
            n = gate.numel()
            if n:
                plan.launcher("swiglu", n, 1)(gate, up, result, n, stream=plan.stream(plan.index))
            return result
    g = _array("gate", gate)
    u = _array("up", up)
    _check_same(g, u)
    _check_shape(u, g.shape, "gate's")
    if out is None and g.framework == "torch" and _needs_autograd(g.value, u.value):
        return _torch_ops().swiglu(g.value, u.value)
    result = _output(out, g, g.shape) or arrays.empty(g, g.shape)
    n = math.prod(g.shape)
    if not g.on_gpu:
        device_gate, device_up = _on_gpu(g, u)
        device_out = arrays.empty(device_gate, g.shape)
        launch_swiglu(
            device_gate.device_name, g.dtype, device_gate.pointer, device_up.pointer,
            device_out.pointer, n, arrays.current_stream(device_gate),
        )  # fmt: skip
        arrays.to_host(device_out, result)
    else:
        if g.framework == "torch":
            torch_plan(g.value)
        launch_swiglu(
            g.device_name, g.dtype, g.pointer, u.pointer, result.pointer, n,
            arrays.current_stream(g),
        )  # fmt: skip
    return result.value


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """silu(gate) * up where x is [..., 2d] holding gate (first half) and up (second half) in
    each row, the layout inference servers use; the result is [..., d]."""
    if out is None and type(x) in _TORCH_TYPES:
        plan = _TORCH_PLANS.get((x.dtype, x.get_device()))
        shape = x.shape
        if (
            plan is not None
            and shape
            and not shape[-1] % 2
            and x.is_contiguous()
            and not (x.requires_grad and _grad_enabled())
        ):
            cols = shape[-1] // 2
            result = x.new_empty((*shape[:-1], cols))
            rows = x.numel() // shape[-1] if cols else 0
            if rows:
                launch = plan.launcher("silu_and_mul", rows, cols)
                launch(x, result, rows, cols, stream=plan.stream(plan.index))
            return result
    a = _array("x", x)
    if not a.shape or a.shape[-1] % 2:
        raise UsageError(f"x: shape {a.shape}: the last dimension must be even (gate and up)")
    shape = (*a.shape[:-1], a.shape[-1] // 2)
    _check_same(a)
    if out is None and a.framework == "torch" and _needs_autograd(a.value):
        return _torch_ops().silu_and_mul(a.value)
    result = _output(out, a, shape) or arrays.empty(a, shape)
    rows, cols = math.prod(shape[:-1]), shape[-1]
    if not a.on_gpu:
        (device_x,) = _on_gpu(a)
        device_out = arrays.empty(device_x, shape)
        launch_silu_and_mul(
            device_x.device_name, a.dtype, device_x.pointer, device_out.pointer, rows, cols,
            arrays.current_stream(device_x),
        )  # fmt: skip
        arrays.to_host(device_out, result)
    else:
        if a.framework == "torch":
            torch_plan(a.value)
        launch_silu_and_mul(
            a.device_name, a.dtype, a.pointer, result.pointer, rows, cols, arrays.current_stream(a)
        )
    return result.value


def _check_norm_args(x: Array, weight: Array) -> None:
    if not x.shape:
        raise UsageError("x: must have at least one dimension (the normalised one)")
    if x.shape[-1] > MAX_ROW:
        raise UsageError(f"x: rows of {x.shape[-1]} elements; at most 2**30 are supported")
    _check_same(x, weight)
    _check_shape(weight, x.shape[-1:], "x's last dimension")


def rms_norm(x: Any, weight: Any, eps: float = 1e-6, out: Any = None) -> Any:
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension of x; weight is 1-D.

    Returns ``out``, or a new array of x's framework.
    """
    if out is None and type(x) in _TORCH_TYPES and type(weight) in _TORCH_TYPES:
        plan = _TORCH_PLANS.get((x.dtype, x.get_device()))
        shape = x.shape
        if (
            plan is not None
            and type(eps) is float
            and eps >= 0.0
            and eps != math.inf
            and weight.dtype is x.dtype
            and weight.get_device() == x.get_device()
            and shape
            and weight.shape == shape[-1:]
            and shape[-1] <= MAX_ROW
            and x.is_contiguous()
            and weight.is_contiguous()
            and not ((x.requires_grad or weight.requires_grad) and _grad_enabled())
        ):
            result = plan.empty_like(x)
            cols = shape[-1]
            rows = x.numel() // cols if cols else 0
            if rows:
                launch = plan.launcher("rms_norm", rows, cols)
                launch(x, weight, result, rows, cols, eps, stream=plan.stream(plan.index))
            return result
    a = _array("x", x)
    w = _array("weight", weight)
    _check_norm_args(a, w)
    eps_value = check_eps(eps)
    if out is None and a.framework == "torch" and _needs_autograd(a.value, w.value):
        return _torch_ops().rms_norm(a.value, w.value, eps_value)
    result = _output(out, a, a.shape) or arrays.empty(a, a.shape)
    rows, cols = math.prod(a.shape[:-1]), a.shape[-1]
    if not a.on_gpu:
        device_x, device_weight = _on_gpu(a, w)
        device_out = arrays.empty(device_x, a.shape)
        launch_rms_norm(
            device_x.device_name, a.dtype, device_x.pointer, device_weight.pointer,
            device_out.pointer, rows, cols, eps_value, arrays.current_stream(device_x),
        )  # fmt: skip
        arrays.to_host(device_out, result)
    else:
        if a.framework == "torch":
            torch_plan(a.value)
        launch_rms_norm(
            a.device_name, a.dtype, a.pointer, w.pointer, result.pointer, rows, cols, eps_value,
            arrays.current_stream(a),
        )  # fmt: skip
    return result.value


def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> None:
    """In place, in one pass: residual += x, then x = rms_norm(residual, weight, eps).

    The sum is rounded to the storage dtype when stored, and the norm is taken of the stored
    value, exactly as the two steps done one after the other. (In place, so no autograd: for
    training, torch.ops.kernelpack.add_rms_norm returns both results as new tensors.)
    """
    if type(x) in _TORCH_TYPES and type(residual) in _TORCH_TYPES and type(weight) in _TORCH_TYPES:
        plan = _TORCH_PLANS.get((x.dtype, x.get_device()))
        shape = x.shape
        if (
            plan is not None
            and type(eps) is float
            and eps >= 0.0
            and eps != math.inf
            and residual.dtype is x.dtype
            and weight.dtype is x.dtype
            and residual.get_device() == weight.get_device() == x.get_device()
            and shape
            and residual.shape == shape
            and weight.shape == shape[-1:]
            and shape[-1] <= MAX_ROW
            and x.is_contiguous()
            and residual.is_contiguous()
            and weight.is_contiguous()
            and not (x.requires_grad or residual.requires_grad or weight.requires_grad)
        ):
            cols = shape[-1]
            rows = x.numel() // cols if cols else 0
            if rows:
                launch = plan.launcher("add_rms_norm", rows, cols)
                launch(
                    x,
                    residual,
                    weight,
                    x,
                    residual,
                    rows,
                    cols,
                    eps,
                    stream=plan.stream(plan.index),
                )
            return
    a = _array("x", x)
    r = _array("residual", residual)
    w = _array("weight", weight)
    _check_norm_args(a, w)
    _check_same(a, r)
    _check_shape(r, a.shape, "x's")
    eps_value = check_eps(eps)
    if a.framework == "torch" and _needs_autograd(a.value, r.value, w.value):
        raise UsageError(
            "x: fused_add_rms_norm updates x and residual in place, which autograd cannot "
            "differentiate; use torch.ops.kernelpack.add_rms_norm (new tensors) for training"
        )
    rows, cols = math.prod(a.shape[:-1]), a.shape[-1]
    if not a.on_gpu:
        for host in (a, r):
            if not host.value.flags.writeable:
                raise UsageError(f"{host.name}: is read-only; it is updated in place")
        device_x, device_residual, device_weight = _on_gpu(a, r, w)
        launch_add_rms_norm(
            device_x.device_name, a.dtype, device_x.pointer, device_residual.pointer,
            device_weight.pointer, device_x.pointer, device_residual.pointer, rows, cols,
            eps_value, arrays.current_stream(device_x),
        )  # fmt: skip
        arrays.to_host(device_x, a)
        arrays.to_host(device_residual, r)
        return
    if a.framework == "torch":
        torch_plan(a.value)
    launch_add_rms_norm(
        a.device_name, a.dtype, a.pointer, r.pointer, w.pointer, a.pointer, r.pointer, rows, cols,
        eps_value, arrays.current_stream(a),
    )  # fmt: skip
