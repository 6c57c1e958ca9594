"""The MLP ops' argument checks, written once from the op table and made by every path: the
public functions on any framework's arrays, the torch ops' real and fake implementations.

Each path describes its arguments as :class:`Operand` values (name, dtype name, shape, device,
contiguity); :func:`check` applies the op's rules (:mod:`.table`) and raises a UsageError naming
the argument at fault. The hot path makes the same checks in C on what it accepts, and hands
anything else back here. :func:`in_place_row_stride` is the layout rule of the views an in-place
norm writes at a row stride, read off shapes and element strides of any framework.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

from ...errors import UsageError
from .geometry import KERNEL_TYPE, SUPPORTED
from .table import HALVES, ROWS, Op, Option, subject
from .tuning import MAX_ROW


class Operand(NamedTuple):
    """A tensor argument as the checks see it: ``dtype`` a name ("bfloat16"), ``device`` anything
    that compares equal for one device and prints as its name."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    device: object
    contiguous: bool = True


def shape_of(rule: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape ``rule`` ("same", "last", "leading", "half") makes of the subject's ``shape``."""
    if rule == "same":
        return shape
    if rule == "last":
        return shape[-1:]
    if rule == "leading":
        return shape[:-1]
    if rule == "half":
        return (*shape[:-1], shape[-1] // 2)
    raise ValueError(f"unknown shape rule {rule!r}")


def _described(rule: str, name: str) -> str:
    """How a message names the shape ``rule`` asks for, of the input ``name``."""
    return {
        "same": f"{name}'s",
        "last": f"{name}'s last dimension",
        "leading": f"{name}'s leading dimensions",
        "half": "the result's",
    }[rule]


def check_dtype(operand: Operand) -> None:
    if operand.dtype not in KERNEL_TYPE:
        raise UsageError(
            f"{operand.name}: dtype {operand.dtype} is not supported; expected one of {SUPPORTED}"
        )


def check_shape(operand: Operand, shape: tuple[int, ...], what: str) -> None:
    if tuple(operand.shape) != tuple(shape):
        raise UsageError(
            f"{operand.name}: shape {tuple(operand.shape)} does not match {what} {tuple(shape)}"
        )


def check_first(op: Op, first: Operand) -> None:
    """The subject's own rule: a normalised last dimension, or one of two halves."""
    if op.first == ROWS:
        if not first.shape:
            raise UsageError(f"{first.name}: must have at least one dimension (the normalised one)")
        if first.shape[-1] > MAX_ROW:
            raise UsageError(
                f"{first.name}: rows of {first.shape[-1]} elements; at most 2**30 are supported"
            )
    elif op.first == HALVES and (not first.shape or first.shape[-1] % 2):
        raise UsageError(
            f"{first.name}: shape {tuple(first.shape)}: the last dimension must be even "
            "(gate and up)"
        )


def check_eps(eps: object) -> float:
    """eps as a float, or a UsageError: a finite number >= 0."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise UsageError(f"eps: expected a float, got {type(eps).__name__}")
    value = float(eps)
    if not (math.isfinite(value) and value >= 0.0):
        raise UsageError(f"eps: must be a finite number >= 0, got {eps!r}")
    return value


def check_option(option: Option, value: object) -> float | str:
    """An option's value as its kind, or a UsageError naming it: a finite float, or a str among
    its choices."""
    if option.kind == "str":
        if value not in option.choices:
            raise UsageError(
                f"{option.name}: {value!r} is not one of {', '.join(map(repr, option.choices))}"
            )
        return str(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"{option.name}: expected a float, got {type(value).__name__}")
    if not math.isfinite(float(value)):
        raise UsageError(f"{option.name}: must be a finite number, got {value!r}")
    return float(value)


def check_options(op: Op, values: Sequence[object]) -> tuple[float | str, ...]:
    """``op``'s options checked, in the table's order: ``values`` those given (the dispatcher
    leaves trailing defaults out), the rest their defaults."""
    given = list(values) + [option.default for option in op.options[len(values) :]]
    return tuple(
        check_option(option, value) for option, value in zip(op.options, given, strict=True)
    )


def check(op: Op, operands: Sequence[Operand | None], eps: object = None) -> float | None:
    """``op``'s rules over its tensor arguments (in the table's order; None for an optional one
    left out) and eps: the subject's own rule and dtype, then each other input's dtype, device,
    shape and, where the table asks, contiguity. The checked eps (None for an op without one)."""
    at = subject(op)
    first = operands[at]
    if first is None:
        raise UsageError(f"{op.inputs[at].name}: expected a tensor, got None")
    check_first(op, first)
    check_dtype(first)
    for position, (spec, operand) in enumerate(zip(op.inputs, operands, strict=True)):
        if position == at:
            continue
        if operand is None:
            if not spec.optional:
                raise UsageError(f"{spec.name}: expected a tensor, got None")
            continue
        if spec.dtype == "weight":
            if operand.dtype not in (first.dtype, "float32"):
                wanted = "" if first.dtype == "float32" else f"{first.dtype} or "
                raise UsageError(
                    f"{operand.name}: dtype {operand.dtype}; expected {first.name}'s "
                    f"{wanted}float32"
                )
        elif spec.dtype == "float32":
            if operand.dtype != "float32":
                raise UsageError(
                    f"{operand.name}: dtype {operand.dtype}; expected float32 (the row scales "
                    "rms_norm_with_scale returns)"
                )
        elif operand.dtype != first.dtype:
            raise UsageError(
                f"{operand.name}: dtype {operand.dtype} differs from {first.name}'s {first.dtype}"
            )
        if operand.device != first.device:
            raise UsageError(
                f"{operand.name}: on {operand.device}, but {first.name} is on {first.device}"
            )
        check_shape(operand, shape_of(spec.shape, first.shape), _described(spec.shape, first.name))
        if spec.contiguous and not operand.contiguous:
            raise UsageError(
                f"{operand.name}: must be contiguous (as rms_norm_with_scale returns them)"
            )
    return check_eps(eps) if op.eps else None


def row_stride(shape: tuple[int, ...], strides: tuple[int, ...]) -> int | None:
    """The elements between the starts of consecutive rows (the last dimension's) of an array
    of ``shape`` at element ``strides``, where every row lies one stride from the last and the
    last dimension's stride is 1 (vLLM's views of wider rows); None where they do not. The
    leading dimensions fold into one as torch's ``view(-1, cols)`` folds them: those of one
    element are free, the others must each be a whole number of the next. No elements, or one
    row: the row length (any stride serves)."""
    cols = shape[-1]
    if math.prod(shape) == 0:
        return cols
    if cols > 1 and strides[-1] != 1:
        return None
    leading = [(n, s) for n, s in zip(shape[:-1], strides[:-1], strict=True) if n != 1]
    for (_, outer), (n, inner) in itertools.pairwise(leading):
        if outer != inner * n:
            return None
    return leading[-1][1] if leading else cols


def in_place_row_stride(name: str, shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """The row stride of ``name``, an input the op writes in place (so it cannot take a copy),
    or a UsageError saying what to pass: rows one stride apart with a last dimension of stride
    1, none of them overlapping another (each element is written by one thread)."""
    stride = row_stride(shape, strides)
    cols = shape[-1]
    if stride is None:
        if cols > 1 and strides[-1] != 1:
            raise UsageError(
                f"{name}: its last dimension has stride {strides[-1]} (strides {strides}); the "
                "kernel takes each row as adjacent elements and updates it in place, so pass a "
                "view whose last dimension has stride 1 (or a contiguous copy, then copy it back)"
            )
        raise UsageError(
            f"{name}: rows at strides {strides} of shape {shape} are not one stride apart (its "
            "leading dimensions do not fold into one); it is updated in place, so pass a view "
            "whose rows are (or a contiguous copy, then copy it back)"
        )
    if abs(stride) < cols and math.prod(shape[:-1]) > 1:
        raise UsageError(
            f"{name}: rows {stride} elements apart overlap (each has {cols}); it is updated in "
            f"place, so each row needs memory of its own: pass a view at a row stride of at "
            f"least {cols}"
        )
    return stride
