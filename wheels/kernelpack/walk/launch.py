"""What the walk kernels are given besides the walks: block sizes, Montgomery constants, and the
lowered program's slot code as byte offsets (:class:`Launch`), built on the host once per call.

:func:`float_registers_exact` decides whether the float kernel may take the register form (the
residue kernel's setup code and difference tables), where float64 stays exact for these walks.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import UsageError
from .inputs import CheckedWalks
from .lower import FLOAT_REGISTER_DEGREES, Lowered
from .program import Op

# Block sizes tried, largest first, until the block's slots fit SHARED_LIMIT; every target runs
# 48 KiB of dynamic shared memory without asking for more. The kernels' __launch_bounds__ is 256.
BLOCK_SIZES = (256, 128, 64, 32, 16)
# The residue kernel's blocks stop at 128 threads: a small batch then spreads evenly over the
# multiprocessors, and larger ones run the same (docs/bench-walk.md has the measurement).
RESIDUE_MAX_BLOCK = 128
SHARED_LIMIT = 48 * 1024
# Below 2^53 every integer is a float64; the margin of one bit covers the rounding of the
# float64 interval arithmetic that bounds the values (float_registers_exact).
FLOAT_EXACT_BOUND = 2.0**52


def montgomery_moduli(primes: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint32]:
    """(K, 4): p, -p^-1 mod 2^32, 2^64 mod p, 2^96 mod p for each prime (walk.cu's moduli)."""
    rows = [
        (p, (-pow(p, -1, 2**32)) % 2**32, 2**64 % p, 2**96 % p) for p in (int(v) for v in primes)
    ]
    return np.array(rows, dtype=np.uint32).reshape(-1, 4)


def constants_in_montgomery_form(
    consts: tuple[int, ...], primes: npt.NDArray[np.uint32]
) -> npt.NDArray[np.uint32]:
    """(K, n): each constant times 2^32 mod each prime, the form the residue kernel holds."""
    table = [[(c % int(p)) * 2**32 % int(p) for c in consts] for p in primes]
    return np.array(table, dtype=np.uint32).reshape(len(primes), len(consts))


def block_size(slots: int, slot_bytes: int, largest: int = BLOCK_SIZES[0]) -> int:
    """The largest block, up to ``largest``, whose threads' slots fit the shared-memory limit."""
    for size in BLOCK_SIZES:
        if size <= largest and slots * slot_bytes * size <= SHARED_LIMIT:
            return size
    raise UsageError(
        f"program: needs {slots} slots of {slot_bytes} bytes per thread, more than "
        f"{SHARED_LIMIT} bytes of shared memory hold for {BLOCK_SIZES[-1]} threads"
    )


def _interval(op: Op, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    if op is Op.ADD:
        return a[0] + b[0], a[1] + b[1]
    if op is Op.SUB:
        return a[0] - b[1], a[1] - b[0]
    if op is Op.MUL:
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if op is Op.NEG:
        return -a[1], -a[0]
    return a  # COPY


def float_registers_exact(inputs: CheckedWalks, degree: int) -> bool:
    """Whether the float register kernel of ``degree`` steps these walks exactly as evaluating the
    program in float64 would: every value the program computes at a position from step 0 to
    depth + degree (the setup evaluates steps 0..degree, the tables hold differences of the
    entries up to that far), and 2^degree times every entry (a bound on its differences), below
    FLOAT_EXACT_BOUND. Interval arithmetic over all walks at once, in float64; an overflow gives
    inf or NaN, which fails the bound."""
    program = inputs.program
    lows, highs = inputs.axis_ranges(inputs.depth + degree)
    register: dict[int, tuple[float, float]] = {}
    bounds: list[float] = []
    for row in program.instrs:
        op, dst, a, b = (int(v) for v in row)
        name = Op(op)
        if name is Op.LOAD_AXIS:
            value = float(lows[a]), float(highs[a])
        elif name is Op.LOAD_CONST:
            value = (float(program.consts[a]),) * 2
        else:
            value = _interval(name, register[a], register.get(b, (0.0, 0.0)))
        register[dst] = value
        bounds.extend(abs(v) for v in value)
    bounds.extend(abs(v) * 2.0**degree for r in program.out_reg for v in register[int(r)])
    return all(bound < FLOAT_EXACT_BOUND for bound in bounds)


def _offsets(slots: npt.NDArray[np.int64], stride: int) -> npt.NDArray[np.uint32]:
    return (slots * stride).astype(np.uint32)


def _code_rows(rows: npt.NDArray[np.int64], stride: int) -> npt.NDArray[np.uint32]:
    """Slot code as walk.cu reads it: (op, dst, a, b) with slots turned into byte offsets."""
    coded = _offsets(rows, stride)
    coded[:, 0] = rows[:, 0]
    return coded


@dataclass(frozen=True)
class Launch:
    """What both kernels need besides the walks: geometry and the arrays built from the program."""

    residue_block: int
    float_block: int
    float_registers: bool  # the float walk takes the register form (residue setup code, tables)
    code: npt.NDArray[np.uint32]  # setup rows, then step rows
    n_setup: int
    n_step: int
    tables: npt.NDArray[np.uint32]
    out: npt.NDArray[np.uint32]
    consts: npt.NDArray[np.uint32]  # (K, n_consts), Montgomery form
    moduli: npt.NDArray[np.uint32]
    float_code: npt.NDArray[np.uint32]  # step rows, or in the register form setup rows
    float_out: npt.NDArray[np.uint32]
    float_consts: npt.NDArray[np.float64]
    depth: int
    depth2: int

    @classmethod
    def build(cls, lowered: Lowered, inputs: CheckedWalks) -> Launch:
        residue, floats = lowered.residue, lowered.float
        block = block_size(residue.n_slots, 4, RESIDUE_MAX_BLOCK)
        stride = block * 4
        float_registers = (
            residue.form == "registers"
            and residue.degree <= FLOAT_REGISTER_DEGREES[lowered.m]
            and float_registers_exact(inputs, residue.degree)
        )
        float_rows, float_out = (
            (residue.setup, residue.out) if float_registers else (floats.step, floats.out)
        )
        float_block = block_size(residue.n_slots if float_registers else floats.n_slots, 8)
        float_stride = float_block * 8
        tables = _offsets(residue.tables, stride)
        tables[:, 1] = residue.tables[:, 1]
        return cls(
            residue_block=block,
            float_block=float_block,
            float_registers=float_registers,
            code=np.concatenate(
                [_code_rows(residue.setup, stride), _code_rows(residue.step, stride)]
            ),
            n_setup=len(residue.setup),
            n_step=len(residue.step),
            tables=tables,
            out=_offsets(residue.out, stride),
            consts=constants_in_montgomery_form(lowered.consts, inputs.primes),
            moduli=montgomery_moduli(inputs.primes),
            float_code=_code_rows(float_rows, float_stride),
            float_out=_offsets(float_out, float_stride),
            float_consts=np.array([float(c) for c in lowered.consts], dtype=np.float64),
            depth=inputs.depth,
            depth2=inputs.depth2,
        )

    def device_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The arrays the kernels read from device memory (every array field), by name."""
        values = {field.name: getattr(self, field.name) for field in fields(self)}
        return {name: value for name, value in values.items() if isinstance(value, np.ndarray)}
