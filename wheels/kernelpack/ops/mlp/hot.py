"""The MLP ops' hot path for torch tensors: a call's checks, its allocation and its launch in one C
call (kernelpack.backends.hotpath, the launcher's interface). Where that extension was not built
there is no hot path: every call goes through the full checks, which are the same checks in Python.

Why: at 1 x 4096 a kernel runs for about 2 µs and cuLaunchKernel costs about 3 µs of the host's
time from C, so every microsecond of Python per call shows (docs/bench-mlp.md has the host's cost).
Every op of the table with a plan (:mod:`.table`) has a hot call, made from its table entry
(:func:`.table.hot_op`): a call of :mod:`kernelpack.mlp` looks its op up in :data:`HOT` and calls
it once; the checks the full path makes are made there on what torch's DLPack C exchange API
reports of each tensor, results are allocated through the same API, and the kernel's launch was
prepared per (dtype, device, shape) by the first call that went through the full checks
(:func:`prepare`, from the op's plan). Anything not accepted returns ``NotImplemented``, after
which the caller's full checks name what is wrong. Nothing here raises for bad input; a launch
that fails raises as it would anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...backends.hotpath import Entry, HotOp, Key, bare_launch, hot_call
from ...devices.argument import DeviceString
from ...devices.arrays import torch_runtime
from ...errors import UsageError
from .checks import shape_of
from .geometry import KERNEL_TYPE, alignment_of
from .launch import load_kernel, plan_for
from .table import TABLE, Op, hot_op

__all__ = ["Entry", "Key"]

OPS: dict[str, Op] = {}  # the ops with a hot path: those of the table with a plan
SPECS: dict[str, HotOp] = {}  # op -> its hot call's descriptor
TORCH_TYPES: set[type] = set()  # torch.Tensor and the subclasses accepted (nn.Parameter)
PREPARED: dict[str, dict[Key, Entry]] = {}
_PREPARED_KEPT = 4096  # entries an op keeps before its memo starts over
_TORCH: list[Any] = []  # torch, once torch_enable ran


def not_hot(*args: object) -> Any:
    """The hot call of an op that has none (yet): the caller's full checks serve."""
    return NotImplemented


# op -> its hot call: the entry point of kernelpack.mlp (autograd wanted: not hot), and the one
# of torch.ops.kernelpack's CUDA kernels (called below autograd: requires_grad is not read).
# Both answer NotImplemented until torch_enable ran.
HOT: dict[str, Callable[..., Any]] = {}
HOT_BELOW_AUTOGRAD: dict[str, Callable[..., Any]] = {}


def add(op: Op) -> None:
    """Give ``op`` (a table entry with a plan) a hot path: its descriptor, memo and hot calls
    (off until torch is in use)."""
    if op.plan is None:
        raise ValueError(f"{op.name} has no plan, so no hot path")
    OPS[op.name] = op
    SPECS[op.name] = hot_op(op)
    PREPARED[op.name] = {}
    HOT[op.name] = HOT_BELOW_AUTOGRAD[op.name] = not_hot
    if _TORCH:
        _make_calls(op.name, _TORCH[0])


def _make_calls(name: str, torch: Any) -> None:
    exchange = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    for table, grad_enabled in ((HOT, torch.is_grad_enabled), (HOT_BELOW_AUTOGRAD, None)):
        call = hot_call(SPECS[name], TORCH_TYPES, PREPARED[name], exchange, grad_enabled)
        table[name] = not_hot if call is None else call


def traced_call(name: str, args: tuple[Any, ...], ops: Any) -> Any:
    """Op ``name``'s hot call as torch.compile traces it (its tracer cannot enter the C hot
    call): the op of ``ops`` (torch.ops.kernelpack) on the tensors, args as the hot call takes
    them (tensors, eps, out), ``out`` copied into."""
    spec = SPECS[name]
    eps = (args[spec.inputs],) if spec.eps else ()
    result = getattr(ops, name)(*args[: spec.inputs], *eps)
    out = args[-1] if spec.out else None
    if out is None:
        return result
    out.copy_(result)
    return out


def torch_enable(torch: Any) -> None:
    """Turn the hot calls on (once torch is in use): torch's tensor types, its DLPack exchange API
    (``torch.Tensor.__dlpack_c_exchange_api__``, torch 2.10 and later) and grad mode, handed to
    the C extension's hot calls. Where the extension was not built, or torch has no exchange API
    of a version the extension reads, they stay off: every call takes the full checks."""
    if _TORCH:
        return
    TORCH_TYPES.update((torch.Tensor, torch.nn.Parameter))
    _TORCH.append(torch)
    for name in SPECS:
        _make_calls(name, torch)


for _op in TABLE.values():
    if _op.plan is not None:
        add(_op)


def entry_key(tensor: Any) -> Key:
    return (tensor.dtype, tensor.get_device(), tensor.shape)


def prepare(name: str, tensor: Any, device: str) -> Entry:
    """The entry of op ``name`` for a first tensor like ``tensor`` (a checked, contiguous torch
    tensor of a supported dtype on ``device``, "cuda:0"), made once from the op's plan and kept
    for the hot calls: after the pointers, the op's null pointers (0) and the plan's sizes."""
    memo = PREPARED[name]
    key = entry_key(tensor)
    found = memo.get(key)
    if found is not None:
        return found
    if len(memo) >= _PREPARED_KEPT:
        memo.clear()
    op = OPS[name]
    dtype = str(tensor.dtype).removeprefix("torch.")
    shape = tuple(tensor.shape)
    weighted = any(tensor_input.shape == "last" for tensor_input in op.inputs)
    weight_shape = shape[-1:] if weighted else None
    rule = op.results[0].shape if op.results else "same"
    result_shape = None if rule == "same" else shape_of(rule, shape)
    nulls = (0,) * op.nulls
    plan = plan_for(op, shape, dtype, device)
    if plan is None:  # no elements: nothing is launched
        entry: Entry = (None, 1, 1, nulls, weight_shape, result_shape, 1, None)
    else:
        launch = bare_launch(load_kernel(device, plan.name).launch)
        general = None
        if plan.general is not None:
            general_name, general_grid = plan.general
            general = (bare_launch(load_kernel(device, general_name).launch), general_grid)
        sizes = nulls + plan.sizes
        entry = (
            launch,
            plan.grid,
            plan.block,
            sizes,
            weight_shape,
            result_shape,
            plan.alignment,
            general,
        )
    memo[key] = entry
    return entry


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
    spec: HotOp,
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
    if spec.in_place:
        results: tuple[Any, ...] = tuple(args[i] for i in spec.in_place)
    elif out is not None:
        results = (out,)
    else:
        results = tuple(
            empty_like(first) if entry[5] is None else first.new_empty(entry[5])
            for _ in range(spec.allocates)
        )
    launch_entry(entry, (*args[: spec.inputs], *results), eps, stream)
    if spec.in_place or not results:
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
    import torch  # deferred: torch is optional

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
