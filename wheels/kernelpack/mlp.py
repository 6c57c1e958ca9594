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
same checks read straight off the tensors (:func:`hot_plan`), and the kernel's launch prepared
per shape (:class:`TorchPlan`), so a call costs the launch, the allocation of its result (none
with ``out=``) and about 1.5 µs of Python on the H200's host (docs/bench-mlp-notes.md).
Tensors that need autograd go through the custom ops of :mod:`kernelpack.torch_ops`
(``torch.ops.kernelpack.*``), which also serve torch.compile and share the hot path's launches.
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
        TORCH_TYPES.add(type(array.value))
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

TORCH_TYPES: set[type] = set()  # torch.Tensor and its subclasses seen so far (nn.Parameter)

# op -> its launch geometry from (rows, cols, dtype); swiglu counts its elements as rows
_GEOMETRY: dict[str, Callable[[int, int, str], tuple[Any, Any]]] = {
    "swiglu": lambda rows, cols, dtype: swiglu_geometry(rows * cols, dtype),
    "silu_and_mul": silu_and_mul_geometry,
    "rms_norm": row_geometry,
    "add_rms_norm": row_geometry,
}
_LAUNCHES_KEPT = 4096  # shapes remembered per (op, dtype, device) before the memo starts over


class TorchPlan:
    """What torch calls on one (dtype, device) need, found once: the device's and dtype's
    names, torch's raw current-stream accessor, torch.empty_like and torch.is_grad_enabled, and
    per (op, shape) a prepared launch: the kernel's launch with its grid and block bound (a
    functools.partial of the C launcher) and the size arguments the kernel takes after its
    pointers, so that a call reads its tensors, the stream, and makes one C call.

    The stream is read on every call (a capture or a ``torch.cuda.stream`` block changes it);
    the kernel was loaded and its image's sha256 checked once, when the plan first launched it.
    """

    __slots__ = ("device", "dtype", "empty_like", "grad_enabled", "index", "prepared", "stream")

    def __init__(self, device: str, dtype: str, index: int, torch: Any) -> None:
        self.device = device
        self.dtype = dtype
        self.index = index
        self.stream = torch._C._cuda_getCurrentRawStream
        self.empty_like = torch.empty_like
        self.grad_enabled = torch.is_grad_enabled
        # op -> {shape of the op's first tensor: (launch, size arguments), launch None: no work}
        self.prepared: dict[str, dict[Any, tuple[Any, tuple[int, ...]]]] = {
            op: {} for op in _GEOMETRY
        }

    def prepare(self, op: str, shape: Any) -> tuple[Any, tuple[int, ...]]:
        """``op``'s prepared launch for a first tensor of ``shape`` (swiglu: gate's; the row
        ops: x's, the last dimension a row), made on the first call of that shape."""
        memo = self.prepared[op]
        if len(memo) >= _LAUNCHES_KEPT:
            memo.clear()
        cols = shape[-1] if shape else 1
        sizes: tuple[int, ...]
        n = math.prod(shape)
        if op == "swiglu":
            rows, cols, sizes = n, 1, (n,)
        else:
            if op == "silu_and_mul":
                cols //= 2
            rows = n // shape[-1] if cols else 0
            sizes = (rows, cols)
        launch = None
        if rows * cols:
            grid, block = _GEOMETRY[op](rows, cols, self.dtype)
            kernel = load_kernel(self.device, kernel_name(op, self.dtype))
            launch = functools.partial(kernel.launch, grid, block)
        memo[shape] = prepared = (launch, sizes)
        return prepared


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
        plan = _TORCH_PLANS[key] = TorchPlan(f"{vendor}:{index}", dtype, index, torch)
    return plan


def hot_plan(first: Any, *others: Any) -> TorchPlan | None:
    """The plan when a call can take the hot path, else None (the call goes through the full
    checks, which explain what is wrong): every argument a torch tensor of first's dtype on
    first's GPU, a dtype and device a call has planned before, C-contiguous, and none needing
    autograd (requires_grad is read only where grad mode is on). Shapes are the caller's to
    check."""
    if type(first) not in TORCH_TYPES:
        return None
    dtype = first.dtype
    index = first.get_device()
    plan = _TORCH_PLANS.get((dtype, index))
    if plan is None or not first.is_contiguous():
        return None
    for other in others:
        if (
            type(other) not in TORCH_TYPES
            or other.dtype is not dtype
            or other.get_device() != index
            or not other.is_contiguous()
        ):
            return None
    if plan.grad_enabled() and (
        first.requires_grad or any(other.requires_grad for other in others)
    ):
        return None
    return plan


def hot_norm(shape: Any, weight: Any, eps: object) -> bool:
    """The hot path's check of a norm's shapes and eps (any failure: the full checks)."""
    return (
        type(eps) is float
        and 0.0 <= eps < math.inf
        and len(shape) > 0
        and weight.shape == shape[-1:]
        and shape[-1] <= MAX_ROW
    )


# The launches of the hot path, shared with torch.ops.kernelpack's CUDA implementations: checked
# C-contiguous tensors of the plan's dtype and device in, with the first tensor's shape as read by
# the caller, new tensors (or ``out``) out.


def torch_swiglu(plan: TorchPlan, gate: Any, up: Any, shape: Any, out: Any = None) -> Any:
    result = plan.empty_like(gate) if out is None else out
    launch, sizes = plan.prepared["swiglu"].get(shape) or plan.prepare("swiglu", shape)
    if launch is not None:
        launch(gate, up, result, *sizes, stream=plan.stream(plan.index))
    return result


def torch_silu_and_mul(plan: TorchPlan, x: Any, shape: Any, out: Any = None) -> Any:
    launch, sizes = plan.prepared["silu_and_mul"].get(shape) or plan.prepare("silu_and_mul", shape)
    result = x.new_empty((*shape[:-1], shape[-1] // 2)) if out is None else out
    if launch is not None:
        launch(x, result, *sizes, stream=plan.stream(plan.index))
    return result


def torch_rms_norm(
    plan: TorchPlan, x: Any, weight: Any, eps: float, shape: Any, out: Any = None
) -> Any:
    result = plan.empty_like(x) if out is None else out
    launch, sizes = plan.prepared["rms_norm"].get(shape) or plan.prepare("rms_norm", shape)
    if launch is not None:
        launch(x, weight, result, *sizes, eps, stream=plan.stream(plan.index))
    return result


def torch_add_rms_norm(
    plan: TorchPlan,
    x: Any,
    residual: Any,
    weight: Any,
    eps: float,
    shape: Any,
    out: Any,
    summed: Any,
) -> None:
    """out = rms_norm(summed), summed = x + residual; in place when out is x and summed is
    residual."""
    launch, sizes = plan.prepared["add_rms_norm"].get(shape) or plan.prepare("add_rms_norm", shape)
    if launch is not None:
        launch(x, residual, weight, out, summed, *sizes, eps, stream=plan.stream(plan.index))


def _needs_autograd(*tensors: Any) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _torch_ops() -> Any:
    """torch.ops.kernelpack, registered on first use (autograd goes through the custom ops)."""
    import torch

    from . import torch_ops

    torch_ops.register()
    return torch.ops.kernelpack


# ---- the checked path: any framework; numpy through device copies -----------------------------


def _run(
    operands: list[Array], written: list[int], launch: Callable[[str, list[int], int], None]
) -> None:
    """``launch(device, addresses, stream)`` over checked operands. GPU arrays are launched on
    in place (a torch tensor's plan is made here, so its next call takes the hot path); numpy
    arrays go through device copies made with torch or CuPy, and those at ``written`` are
    copied back."""
    first = operands[0]
    if first.on_gpu:
        if first.framework == "torch":
            torch_plan(first.value)
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
    plan = hot_plan(gate, up) if out is None else hot_plan(gate, up, out)
    if plan is not None:
        shape = gate.shape
        if up.shape == shape and (out is None or out.shape == shape):
            return torch_swiglu(plan, gate, up, shape, out)
    g = _array("gate", gate)
    u = _array("up", up)
    _check_same(g, u)
    _check_shape(u, g.shape, "gate's")
    if out is None and g.framework == "torch" and _needs_autograd(g.value, u.value):
        return _torch_ops().swiglu(g.value, u.value)
    result = _output(out, g, g.shape) or arrays.empty(g, g.shape)
    n = math.prod(g.shape)
    _run(
        [g, u, result],
        [2],
        lambda device, p, stream: launch_swiglu(device, g.dtype, p[0], p[1], p[2], n, stream),
    )
    return result.value


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """silu(gate) * up where x is [..., 2d] holding gate (first half) and up (second half) in
    each row, the layout inference servers use; the result is [..., d]."""
    plan = hot_plan(x) if out is None else hot_plan(x, out)
    if plan is not None:
        shape = x.shape
        if shape and not shape[-1] % 2:
            cols = shape[-1] // 2
            if out is None or out.shape == (*shape[:-1], cols):
                return torch_silu_and_mul(plan, x, shape, out)
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
    plan = hot_plan(x, weight) if out is None else hot_plan(x, weight, out)
    if plan is not None:
        shape = x.shape
        if hot_norm(shape, weight, eps) and (out is None or out.shape == shape):
            return torch_rms_norm(plan, x, weight, eps, shape, out)
    a = _array("x", x)
    w = _array("weight", weight)
    eps_value = _check_norm_args(a, w, eps)
    if out is None and a.framework == "torch" and _needs_autograd(a.value, w.value):
        return _torch_ops().rms_norm(a.value, w.value, eps_value)
    result = _output(out, a, a.shape) or arrays.empty(a, a.shape)
    rows, cols = math.prod(a.shape[:-1]), a.shape[-1]
    _run(
        [a, w, result],
        [2],
        lambda device, p, stream: launch_rms_norm(
            device, a.dtype, p[0], p[1], p[2], rows, cols, eps_value, stream
        ),
    )
    return result.value


def fused_add_rms_norm(x: Any, residual: Any, weight: Any, eps: float = 1e-6) -> None:
    """In place, in one pass: residual += x, then x = rms_norm(residual, weight, eps).

    The sum is rounded to the storage dtype when stored, and the norm is taken of the stored
    value, exactly as the two steps done one after the other. (In place, so no autograd: for
    training, torch.ops.kernelpack.add_rms_norm returns both results as new tensors.)
    """
    plan = hot_plan(x, residual, weight)
    if plan is not None:
        shape = x.shape
        if hot_norm(shape, weight, eps) and residual.shape == shape:
            torch_add_rms_norm(plan, x, residual, weight, eps, shape, x, residual)
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
        [a, r, w],
        [0, 1],
        lambda device, p, stream: launch_add_rms_norm(  # out = x, residual_out = residual
            device, a.dtype, p[0], p[1], p[2], p[0], p[1], rows, cols, eps_value, stream
        ),
    )
