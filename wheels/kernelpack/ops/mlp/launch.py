"""Launching the MLP kernels: the loaded kernels of each device, and the calls that start them.

The step from checked arguments to a launch: :func:`launch_op` launches a forward op of the table
(:mod:`.table`) at its plan for the shape (:mod:`.geometry`), as the public functions and the torch
ops do when they do not take the hot path; the backward kernels, which only the torch ops launch,
have a function each. Checking arguments and choosing a framework is the callers' job.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ...loader.load import load
from .geometry import (
    DeviceFacts,
    Plan,
    alignment_of,
    backward_row_geometry,
    kernel_name,
    short_backward_kernel,
    silu_and_mul_launch,
    sums_from_inputs,
    swiglu_launch,
    weight_grad_geometry,
    weight_grad_inputs_launch,
)
from .table import Op

MODULE = "mlp"

_MODULES: dict[str, Any] = {}  # "cuda:0" -> the loaded module
_KERNELS: dict[tuple[str, str], Any] = {}  # ("cuda:0", kernel name) -> Kernel
_FACTS: dict[str, DeviceFacts] = {}  # "cuda:0" -> its target and multiprocessor count


def _module(device: str) -> Any:
    module = _MODULES.get(device)
    if module is None:
        module = _MODULES[device] = load(MODULE, device=device)
    return module


def load_kernel(device: str, name: str) -> Any:
    """The kernel ``name`` on ``device`` ("cuda:0"), loaded once per process."""
    kernel = _KERNELS.get((device, name))
    if kernel is None:
        kernel = _KERNELS[(device, name)] = _module(device).kernel(name)
    return kernel


def device_facts(device: str) -> DeviceFacts:
    """What the geometry reads of ``device``: the code-object target of the module loaded there
    ("sm_90") and the device's multiprocessor count, as its runtime reports it; asked once."""
    facts = _FACTS.get(device)
    if facts is None:
        module = _module(device)
        facts = _FACTS[device] = DeviceFacts(str(module.gpu.target), module.multiprocessor_count())
    return facts


def plan_for(op: Op, shape: tuple[int, ...], dtype: str, device: str) -> Plan | None:
    """``op``'s plan for a first input of ``shape`` on ``device`` (None: no elements)."""
    if op.plan is None:
        raise ValueError(f"{op.name} has no plan: its launch is its own")
    return op.plan(op.kernel_family, shape, dtype, device_facts(device))


def launch_plan(
    device: str, plan: Plan, pointers: tuple[Any, ...], eps: float | None, stream: int
) -> None:
    """``plan``'s launch over ``pointers`` (the tensors', then any null or row-scale pointer),
    its sizes and eps: the general kernel where the pointers are short of the plan's alignment."""
    name, grid = plan.kernel_for(alignment_of(*pointers))
    kernel = load_kernel(device, name)
    extra = () if eps is None else (eps,)
    kernel.launch(
        grid,
        plan.block,
        *pointers,
        *plan.sizes,
        *extra,
        stream=stream,
    )


def launch_op(
    device: str,
    op: Op,
    dtype: str,
    shape: tuple[int, ...],
    pointers: tuple[Any, ...],
    eps: float | None,
    stream: int,
) -> None:
    """``op``'s launch for a first input of ``shape``: ``pointers`` its inputs', its results'
    (its in-place inputs' where it writes in place), then its null pointers' (0) or, on the
    training path, the row scales'; nothing for no elements."""
    plan = plan_for(op, shape, dtype, device)
    if plan is not None:
        launch_plan(device, plan, pointers, eps, stream)


def launch_swiglu_backward(
    device: str,
    dtype: str,
    gate: Any,
    up: Any,
    grad: Any,
    grad_gate: Any,
    grad_up: Any,
    n: int,
    stream: int,
) -> None:
    if n == 0:
        return
    launch = swiglu_launch("swiglu_backward", n, dtype, device_facts(device).multiprocessors)
    name, grid = launch.kernel_for(alignment_of(gate, up, grad, grad_gate, grad_up))
    load_kernel(device, name).launch(
        grid, launch.block, gate, up, grad, grad_gate, grad_up, n, stream=stream
    )


def launch_silu_and_mul_backward(
    device: str, dtype: str, x: Any, grad: Any, grad_x: Any, rows: int, cols: int, stream: int
) -> None:
    if rows * cols == 0:
        return
    sms = device_facts(device).multiprocessors
    launch = silu_and_mul_launch("silu_and_mul_backward", rows, cols, dtype, sms)
    name, grid = launch.kernel_for(alignment_of(x, grad, grad_x))
    load_kernel(device, name).launch(grid, launch.block, x, grad, grad_x, rows, cols, stream=stream)


class NormGrads(NamedTuple):
    """The arrays of one RMSNorm backward (device arrays or addresses), in the order both backward
    kernels take them: the forward's input and row scales, the weight, the incoming gradient and
    the one added to the input gradient (0: none), then the input and weight gradients."""

    x: Any
    row_scales: Any
    weight: Any
    grad: Any
    grad_extra: Any
    grad_x: Any
    grad_weight: Any

    @property
    def leading(self) -> tuple[Any, ...]:
        """What the general kernel takes first: all but grad_weight, which its second kernel
        writes."""
        return self[:6]


def launch_rms_norm_backward(
    device: str,
    dtype: str,
    arrays: NormGrads,
    grad_x_copy: Any,
    partial: Any,
    rows: int,
    cols: int,
    stream: int,
) -> None:
    """grad_x (and grad_x_copy unless 0) = the input gradient of RMSNorm plus grad_extra (unless
    0), from x and the forward's row scales; grad_weight from ``partial``, float32 scratch of
    backward_row_geometry's grid x cols."""
    if cols == 0:
        return
    if rows:
        grid, threads = backward_row_geometry(rows, cols, dtype, device_facts(device))
        load_kernel(device, kernel_name("rms_norm_backward", dtype)).launch(
            grid, threads, *arrays.leading, grad_x_copy, partial, rows, cols, stream=stream
        )
    else:
        grid = 0
    launch_rms_norm_weight_grad(device, dtype, partial, arrays.grad_weight, grid, cols, stream)


def launch_rms_norm_weight_grad(
    device: str,
    dtype: str,
    partial: Any,
    grad_weight: Any,
    partial_rows: int,
    cols: int,
    stream: int,
) -> None:
    """grad_weight = the column sums of ``partial`` (float32, ``partial_rows`` x cols), the
    shares both backward forms leave: one kernel (:func:`weight_grad_geometry`)."""
    columns, block = weight_grad_geometry(cols, partial_rows)
    load_kernel(device, kernel_name("rms_norm_weight_grad", dtype)).launch(
        columns, block, partial, grad_weight, partial_rows, cols, stream=stream
    )


def launch_rms_norm_backward_short(
    device: str,
    dtype: str,
    arrays: NormGrads,
    scratch: Any,
    rows: int,
    cols: int,
    threads: int,
    stream: int,
) -> None:
    """grad_x = the input gradient of RMSNorm plus grad_extra (unless 0), and grad_weight, from x
    and the forward's row scales: one block a row of ``threads`` (:func:`short_backward_threads`;
    :func:`short_backward_kernel`); one row is one kernel; more rows' weight gradient is summed
    by a second kernel, from the inputs and row scales (:func:`sums_from_inputs`:
    :func:`launch_rms_norm_weight_grad_inputs`), or rms_norm_weight_grad from
    the float32 shares the backward leaves in ``scratch`` (of :func:`short_backward_scratch`'s
    shape; 0 where that is None)."""
    load_kernel(device, short_backward_kernel(threads, cols, dtype)).launch(
        rows, threads, *arrays, scratch, rows, cols, stream=stream
    )
    if rows == 1:
        return
    if sums_from_inputs(dtype):
        launch_rms_norm_weight_grad_inputs(
            device,
            dtype,
            arrays.x,
            arrays.grad,
            arrays.row_scales,
            arrays.grad_weight,
            rows,
            cols,
            stream,
        )
    else:
        launch_rms_norm_weight_grad(device, dtype, scratch, arrays.grad_weight, rows, cols, stream)


def launch_rms_norm_weight_grad_inputs(
    device: str,
    dtype: str,
    x: Any,
    grad: Any,
    row_scales: Any,
    grad_weight: Any,
    rows: int,
    cols: int,
    stream: int,
) -> None:
    """grad_weight = the sum over the rows of grad * x * row_scales[row] (a 16-bit dtype of
    ROW_SCALE_DTYPES): :func:`weight_grad_inputs_launch`, any alignment."""
    name, grid, block = weight_grad_inputs_launch(rows, cols, dtype)
    load_kernel(device, name).launch(
        grid, block, x, grad, row_scales, grad_weight, rows, cols, stream=stream
    )
