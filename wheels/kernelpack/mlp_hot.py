"""The MLP ops' hot path for torch tensors: a call's checks, its allocation and its launch in one C
call (``kernelpack.backends._launcher.TorchHotPath``). Where that extension was not built there is no hot
path: every call goes through the full checks, which are the same checks in Python.

Why: at 1 x 4096 a kernel runs for about 2 µs and cuLaunchKernel costs 3.2 µs of the host's time
from C, so every microsecond of Python per call shows (docs/bench-mlp-notes.md has the steps).
A call of :mod:`kernelpack.mlp` looks its op up in :data:`HOT` and calls it once: the checks the
full path makes (torch tensor, one dtype and device, C-contiguous, the shapes, eps, no autograd
wanted) are made there on what torch's DLPack C exchange API reports of each tensor (no Python
attribute reads), results are allocated through the same API, the kernel's launch was prepared
per (dtype, device, shape) by the first call that went through the full checks, and anything not
accepted returns ``NotImplemented``, after which the caller's full checks name what is wrong.
Nothing here raises for bad input; a launch that fails raises as it would anywhere, and an
allocation that fails leaves the hot path, so that the full path's allocation raises torch's
own error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from .devices.argument import DeviceString
from .devices.arrays import torch_runtime
from .errors import UsageError
from .mlp_launch import (
    KERNEL_TYPE,
    ElementwiseLaunch,
    NormLaunch,
    alignment_of,
    device_target,
    kernel_name,
    load_kernel,
    norm_launch,
    norm_shared_mem,
    silu_and_mul_launch,
    swiglu_launch,
)


class HotSpec(NamedTuple):
    """An op's arguments on the hot path, as launcher.c's ``HotSpec`` reads them (same order):
    its tensor inputs, then eps when it has one, then ``out`` when it takes one; ``weight`` is the
    input whose shape is the last dimension of the first's (-1: none; the other inputs have the
    first's shape); ``allocates`` is how many results it makes when ``out`` is None."""

    kind: int  # launcher.c's enum hot_kind
    inputs: int
    weight: int
    eps: bool
    out: bool
    allocates: int


SPECS = {
    "swiglu": HotSpec(0, 2, -1, False, True, 1),
    "silu_and_mul": HotSpec(1, 1, -1, False, True, 1),
    "rms_norm": HotSpec(2, 2, 1, True, True, 1),
    "add_rms_norm": HotSpec(3, 3, 2, True, False, 2),
    "fused_add_rms_norm": HotSpec(4, 3, 2, True, False, 0),
}
# op -> the kernel it launches (fused_add_rms_norm is add_rms_norm in place)
KERNEL_OF = {op: op.removeprefix("fused_") for op in SPECS}

# A prepared launch, launcher.c's entry: (launch: a C Launcher, another launch callable, or None
# when there are no elements; grid; block; the integers the kernel takes after the tensors'
# pointers: its sizes, for the norms after a null row_scales (0: the hot path, inference, stores
# no row scales); the weight's shape or None; the result's shape, None where it is the first
# input's; the alignment in bytes every pointer must have for this launch (an exact elementwise
# form's vector, else 1); the general kernel's launch and its grid (same block and arguments),
# for pointers short of it (None where the alignment is 1). The C hot call refuses pointers short
# of the alignment (the full path then launches the general kernel).
Entry = tuple[Any, Any, Any, tuple[int, ...], Any, Any, int, tuple[Any, Any] | None]
Key = tuple[Any, int, Any]  # (torch dtype, device index, the first tensor's torch.Size)

TORCH_TYPES: set[type] = set()  # torch.Tensor and the subclasses accepted (nn.Parameter)
PREPARED: dict[str, dict[Key, Entry]] = {op: {} for op in SPECS}
_PREPARED_KEPT = 4096  # entries an op keeps before its memo starts over


def not_hot(*args: object) -> Any:
    """The hot call of an op that has none (yet): the caller's full checks serve."""
    return NotImplemented


# op -> its hot call: the entry point of kernelpack.mlp (autograd wanted: not hot), and the one
# of torch.ops.kernelpack's CUDA kernels (called below autograd: requires_grad is not read).
# Both answer NotImplemented until torch_enable() ran.
HOT: dict[str, Callable[..., Any]] = {op: not_hot for op in SPECS}
HOT_BELOW_AUTOGRAD: dict[str, Callable[..., Any]] = {op: not_hot for op in SPECS}


def _native_types() -> tuple[Any, Any]:
    """(TorchHotPath, Launcher) of the C extension, or (None, None) where it was not built."""
    try:
        # deferred: the C extension, absent where it was not built
        from .backends._launcher import Launcher, TorchHotPath
    except ImportError:
        return None, None
    return TorchHotPath, Launcher


def torch_enable(torch: Any) -> None:
    """Turn the hot calls on (once torch is in use): torch's tensor types, its DLPack exchange API
    (``torch.Tensor.__dlpack_c_exchange_api__``, torch 2.10 and later) and grad mode, handed to
    the C extension's hot calls. Where the extension was not built, or torch has no exchange API
    of a version the extension reads, they stay off: every call takes the full checks."""
    if HOT["swiglu"] is not not_hot:
        return
    TORCH_TYPES.update((torch.Tensor, torch.nn.Parameter))
    native, _ = _native_types()
    exchange = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if native is None or exchange is None:
        return
    try:
        for op, spec in SPECS.items():
            for table, grad_enabled in ((HOT, torch.is_grad_enabled), (HOT_BELOW_AUTOGRAD, None)):
                table[op] = native(
                    spec.kind, TORCH_TYPES, PREPARED[op], exchange, grad_enabled
                ).call
    except ValueError:  # an exchange API of another major version: no hot path
        HOT.update(dict.fromkeys(SPECS, not_hot))
        HOT_BELOW_AUTOGRAD.update(dict.fromkeys(SPECS, not_hot))


def entry_key(tensor: Any) -> Key:
    return (tensor.dtype, tensor.get_device(), tensor.shape)


def prepare(op: str, tensor: Any, device: str) -> Entry:
    """``op``'s entry for a first tensor like ``tensor`` (a checked, contiguous torch tensor of a
    supported dtype on ``device``, "cuda:0"), made once and kept for the hot calls. The row ops
    take the last dimension as a row; swiglu counts elements."""
    memo = PREPARED[op]
    key = entry_key(tensor)
    found = memo.get(key)
    if found is not None:
        return found
    if len(memo) >= _PREPARED_KEPT:
        memo.clear()
    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = tuple(tensor.shape)
    n = math.prod(shape)
    cols = shape[-1] if shape else 1
    weight_shape = result_shape = None
    after_pointers: tuple[int, ...]
    name = kernel_name(KERNEL_OF[op], dtype)
    geometry: tuple[Any, Any] = (1, 1)  # no elements: nothing is launched
    norm: NormLaunch | None = None
    elementwise: ElementwiseLaunch | None = None
    if op == "swiglu":
        rows, after_pointers = n, (n,)
        elementwise = swiglu_launch(op, n, dtype) if n else None
    else:
        if op == "silu_and_mul":
            cols //= 2
            result_shape = (*shape[:-1], cols)
        else:
            weight_shape = shape[-1:]
        rows = n // shape[-1] if cols else 0
        after_pointers = (rows, cols) if op == "silu_and_mul" else (0, rows, cols)
        if rows * cols and op == "silu_and_mul":
            elementwise = silu_and_mul_launch(op, rows, cols, dtype)
        elif rows * cols:
            norm = norm_launch(KERNEL_OF[op], rows, cols, dtype, device_target(device))
            name, geometry = norm.name, (norm.grid, norm.block)
    alignment, general = 1, None
    if elementwise is not None:
        name, geometry = elementwise.name, (elementwise.grid, elementwise.block)
        alignment = elementwise.alignment
        if alignment > 1:
            general_launch = _bare_launch(load_kernel(device, elementwise.general).launch)
            general = (general_launch, elementwise.general_grid)
    launch = None
    if rows * cols:
        kernel = load_kernel(device, name)
        shared_mem = norm_shared_mem(kernel, norm) if norm is not None else 0
        if shared_mem:
            # a callable launcher.c calls with the stream as a keyword, a little slower than a
            # Launcher: only norms held to fewer blocks an SM, FIXED_CAP_ROWS rows or more, whose
            # kernels run for tens of microseconds
            launch = functools.partial(kernel.launch, shared_mem=shared_mem)
        else:
            launch = _bare_launch(kernel.launch)
    memo[key] = entry = (
        launch,
        geometry[0],
        geometry[1],
        after_pointers,
        weight_shape,
        result_shape,
        alignment,
        general,
    )
    return entry


def _bare_launch(launch: Any) -> Any:
    """A kernel's bound launch method as launcher.c calls it fastest: its C Launcher itself (called
    without the bound method), or the method where the extension was not built."""
    _, launcher_type = _native_types()
    owner = getattr(launch, "__self__", None)
    if launcher_type is not None and type(owner) is launcher_type:
        return owner
    return launch


def launch_entry(entry: Entry, pointers: tuple[Any, ...], eps: float | None, stream: int) -> None:
    """An entry's launch from Python, as launcher.c's hot_launch makes it; the general kernel's,
    on its own grid, where the pointers are short of the entry's alignment (which the hot call
    refuses)."""
    launch, grid, block, after_pointers = entry[0], entry[1], entry[2], entry[3]
    if launch is None:
        return
    if entry[7] is not None and alignment_of(*pointers) % entry[6]:
        launch, grid = entry[7]
    call: Any = getattr(launch, "launch", launch)  # a C Launcher's launch, or the callable
    extra = () if eps is None else (eps,)
    call(grid, block, *pointers, *after_pointers, *extra, stream=stream)


def finish(
    spec: HotSpec,
    entry: Entry,
    args: tuple[Any, ...],
    stream: int,
    empty_like: Callable[[Any], Any],
) -> Any:
    """The op's results allocated (unless ``out`` was given; none in place) and its launch made,
    as launcher.c's hot_call does once the checks passed: args as the hot call takes them."""
    first = args[0]
    out = args[-1] if spec.out else None
    eps = args[spec.inputs] if spec.eps else None
    if spec.allocates == 0:  # in place: x and residual are written
        results: tuple[Any, ...] = (args[0], args[1])
    elif out is not None:
        results = (out,)
    else:
        results = tuple(
            empty_like(first) if entry[5] is None else first.new_empty(entry[5])
            for _ in range(spec.allocates)
        )
    launch_entry(entry, (*args[: spec.inputs], *results), eps, stream)
    if spec.allocates == 0:
        return None
    return results[0] if len(results) == 1 else results


# ---- torch tensors that passed the full checks: their plan and launch ---------------------------


class TorchPlan:
    """What torch calls on one (dtype, device) need, found once: the device's and dtype's names
    and torch's raw current-stream accessor (read on every call: a capture or a
    ``torch.cuda.stream`` block changes it)."""

    __slots__ = ("device", "dtype", "empty_like", "index", "stream")

    def __init__(self, device: str, dtype: str, index: int, torch: Any) -> None:
        self.device = device
        self.dtype = dtype
        self.index = index
        self.stream = torch._C._cuda_getCurrentRawStream
        self.empty_like = torch.empty_like


_TORCH_PLANS: dict[tuple[Any, int], TorchPlan] = {}  # (torch dtype, device index) -> plan


def torch_plan(tensor: Any) -> TorchPlan:
    """The plan for a CUDA (or ROCm) torch tensor of a supported dtype; the first one turns the
    hot calls on."""
    import torch

    index = tensor.get_device()
    key = (tensor.dtype, index)
    plan = _TORCH_PLANS.get(key)
    if plan is None:
        dtype = str(tensor.dtype).removeprefix("torch.")
        if dtype not in KERNEL_TYPE or index < 0:
            raise UsageError(f"no kernel for a {dtype} tensor on {tensor.device}")
        plan = _TORCH_PLANS[key] = TorchPlan(
            DeviceString.of(torch_runtime(torch), index), dtype, index, torch
        )
        torch_enable(torch)
    return plan


def torch_run(op: str, *args: Any) -> Any:
    """``op`` on torch tensors that passed the full checks and are C-contiguous, args as its hot
    call takes them (tensors, eps, out): its results, allocated unless ``out`` is given. The
    launch is prepared for the hot calls of the same shape on the way."""
    plan = torch_plan(args[0])
    entry = prepare(op, args[0], plan.device)
    return finish(SPECS[op], entry, args, plan.stream(plan.index), plan.empty_like)
