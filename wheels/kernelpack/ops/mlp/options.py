"""The options a model can adopt (mlp.cu's option kernels): their names, geometry and launches.

The Gemma offset (``weight + offset``), Liger-Kernel's casting modes, a weightless norm, a float32
weight with 16-bit activations, rows at a stride (in-place norms over a view), SwiGLU's
multipliers on the gate and the down projection (Falcon-H1), and silu_and_mul with torch's own
roundings. They are kernels of their own, launched only by the ops of the table that take these
options (:mod:`.table`, :mod:`.torch_impl`), so the tuned forms and their hot path keep their code:
a default call never pays for an option. Correctness first: a block a row, any alignment; the
geometry is a function of the shape alone, so a shape's weight gradient has the same bits every
run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import launch
from .geometry import KERNEL_TYPE, weight_grad_geometry
from .table import CASTING_MODES
from .tuning import BLOCK_MIN, ELEMENTWISE_BLOCK, MAX_GRID_Y

OPTIONS_THREADS = 512  # kOptionsThreads, the option kernels' __launch_bounds__
# The rows a backward's grid covers at once: each block leaves a float32 row of weight-gradient
# shares, so this bounds the scratch (and keeps the sum's order a function of the shape).
BACKWARD_BLOCKS_MAX = 256
GRID_MAX = 2**16  # blocks of the forward norms and elementwise grids (their loops stride)


def kernels() -> tuple[str, ...]:
    """Every option kernel mlp.cu instantiates: the norms for each rows' dtype with its own
    weight dtype or float32 (the weight rule of the table), each casting mode, with and without
    a residual, and their backward; the elementwise ones for each dtype."""
    names: list[str] = []
    for dtype in KERNEL_TYPE:
        for weight_dtype in sorted({dtype, "float32"}):
            for mode in CASTING_MODES:
                names += [
                    norm_name(residual, dtype, weight_dtype, mode) for residual in (False, True)
                ]
            names.append(backward_name(dtype, weight_dtype))
        for op in ("swiglu_scaled", "swiglu_scaled_backward", "silu_and_mul_as_torch"):
            names.append(elementwise_name(op, dtype))
    return tuple(names)


def norm_name(residual: bool, dtype: str, weight_dtype: str, casting_mode: str) -> str:
    """ "mlp::rms_norm_options<__nv_bfloat16, float, 1>": the norm of ``dtype`` rows with a
    ``weight_dtype`` weight (the rows' dtype for a weightless norm) in ``casting_mode``."""
    op = "add_rms_norm_options" if residual else "rms_norm_options"
    types = (KERNEL_TYPE[dtype], KERNEL_TYPE[weight_dtype], str(CASTING_MODES[casting_mode]))
    return f"mlp::{op}<{', '.join(types)}>"


def backward_name(dtype: str, weight_dtype: str) -> str:
    return f"mlp::rms_norm_options_backward<{KERNEL_TYPE[dtype]}, {KERNEL_TYPE[weight_dtype]}>"


def elementwise_name(op: str, dtype: str) -> str:
    """ "mlp::swiglu_scaled<float>", "mlp::silu_and_mul_as_torch<__half>"."""
    return f"mlp::{op}<{KERNEL_TYPE[dtype]}>"


def row_threads(cols: int) -> int:
    """A row's threads: a power of two covering it, from BLOCK_MIN to OPTIONS_THREADS."""
    return max(BLOCK_MIN, min(OPTIONS_THREADS, 1 << max(cols - 1, 0).bit_length()))


def backward_blocks(rows: int) -> int:
    """The backward's blocks, each a row of ``partial`` (at least one: its sum reads a row)."""
    return max(1, min(rows, BACKWARD_BLOCKS_MAX))


def launch_norm(
    device: str,
    dtype: str,
    weight_dtype: str,
    casting_mode: str,
    pointers: tuple[Any, ...],
    strides: tuple[int, ...],
    rows: int,
    cols: int,
    eps: float,
    offset: float,
    stream: int,
) -> None:
    """The norm with options: ``pointers`` (x, weight or 0, out, row scales or 0) and ``strides``
    (x's, out's rows), or with a residual (x, residual, weight or 0, out, residual_out, row scales
    or 0) and (x's, residual's, out's, residual_out's); nothing for no elements."""
    if not rows * cols:
        return
    residual = len(pointers) == 6
    kernel = launch.load_kernel(device, norm_name(residual, dtype, weight_dtype, casting_mode))
    grid = min(rows, GRID_MAX)
    kernel.launch(
        grid, row_threads(cols), *pointers, rows, cols, *strides, eps, offset, stream=stream
    )


def launch_norm_in_place(
    device: str,
    dtype: str,
    weight_dtype: str,
    casting_mode: str,
    views: Sequence[tuple[Any, int]],
    weight: Any,
    *scalars: Any,
) -> None:
    """The in-place norms over views at row strides: ``views`` ((x, its row stride),) for
    rms_norm_options_in_place, or with (residual, its row stride) for fused_add_rms_norm (x gets
    the norm, the residual the sum); ``weight`` or 0; ``scalars`` as :func:`launch_norm` takes
    them (rows, cols, eps, offset, stream). Each view is read and written at its own stride, so
    nothing between its rows is touched."""
    (x, x_stride), *rest = views
    if not rest:
        pointers: tuple[Any, ...] = (x, weight, x, 0)
        strides: tuple[int, ...] = (x_stride, x_stride)
    else:
        ((residual, residual_stride),) = rest
        pointers = (x, residual, weight, x, residual, 0)
        strides = (x_stride, residual_stride, x_stride, residual_stride)
    launch_norm(device, dtype, weight_dtype, casting_mode, pointers, strides, *scalars)


def launch_norm_backward(
    device: str,
    dtype: str,
    weight_dtype: str,
    pointers: tuple[Any, ...],
    partial: Any,
    grad_weight: Any,
    rows: int,
    cols: int,
    offset: float,
    stream: int,
) -> None:
    """grad_x and (unless the weight pointer is 0) grad_weight of the norm with options:
    ``pointers`` (x, row scales, weight or 0, grad, grad_extra or 0, grad_x), all contiguous;
    ``partial`` float32 [backward_blocks(rows), cols], summed into grad_weight by
    rms_norm_weight_grad in a fixed order."""
    if not cols:
        return
    weighted = not (isinstance(pointers[2], int) and pointers[2] == 0)  # a tensor, or 0
    blocks = backward_blocks(rows)
    if rows:
        kernel = launch.load_kernel(device, backward_name(dtype, weight_dtype))
        kernel.launch(
            blocks, row_threads(cols), *pointers, partial, rows, cols, offset, stream=stream
        )
    if not weighted:
        return
    if not rows:
        blocks = 0  # no rows: the sum of none is zeros
    columns, block = weight_grad_geometry(cols, blocks)
    name = f"mlp::rms_norm_weight_grad<{KERNEL_TYPE[weight_dtype]}>"
    launch.load_kernel(device, name).launch(
        columns, block, partial, grad_weight, blocks, cols, stream=stream
    )


def elementwise_grid(n: int) -> int:
    return min(-(-n // ELEMENTWISE_BLOCK), GRID_MAX)


def launch_swiglu_scaled(
    device: str,
    dtype: str,
    pointers: tuple[Any, ...],
    n: int,
    gate_multiplier: float,
    down_multiplier: float,
    stream: int,
) -> None:
    """silu(gate * gate_multiplier) * up * down_multiplier: ``pointers`` (gate, up, out); with
    five (gate, up, grad, grad_gate, grad_up) its backward."""
    if not n:
        return
    op = "swiglu_scaled_backward" if len(pointers) == 5 else "swiglu_scaled"
    kernel = launch.load_kernel(device, elementwise_name(op, dtype))
    kernel.launch(
        elementwise_grid(n),
        ELEMENTWISE_BLOCK,
        *pointers,
        n,
        gate_multiplier,
        down_multiplier,
        stream=stream,
    )


def launch_silu_and_mul_as_torch(
    device: str, dtype: str, x: Any, out: Any, rows: int, cols: int, stream: int
) -> None:
    """silu_and_mul with torch's roundings over ``rows`` rows of ``cols`` outputs."""
    if not rows * cols:
        return
    kernel = launch.load_kernel(device, elementwise_name("silu_and_mul_as_torch", dtype))
    grid = (elementwise_grid(cols), min(rows, MAX_GRID_Y))
    kernel.launch(grid, ELEMENTWISE_BLOCK, x, out, rows, cols, stream=stream)
