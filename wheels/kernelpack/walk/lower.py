"""From a checked program to the straight-line slot code that the walkers run.

Both walkers (the GPU kernels of kernel_sources/walk/walk.cu and the numpy walker) run the same
lowered form, so this module is where the two agree on what a step does. The register machine
becomes a value graph: LOAD_AXIS, LOAD_CONST and COPY name values instead of computing them, NEG
becomes a subtraction from zero, and instructions whose values reach no entry of M are dropped.
Each remaining value gets a slot; a slot is reused once its value is dead. No subexpressions are
merged here, so no more values are alive at once than registers were (at most 64).

The residue walk advances in one of three forms:

- registers: when every entry of M is a polynomial of degree at most D in n (D read off the
  program, D <= REGISTER_DEGREES[m]), run the program for n = 0..D once at setup, turn each
  entry's values into forward differences T[0..D], and move it from n to n + 1 with
  T[k] += T[k+1], k = 0..D-1: exact modulo p, and in walk.cu's register kernels a step is the
  product and m*m*D additions in registers;
- tables: the same with the tables in shared memory, one per distinct entry at its own degree,
  for higher degrees;
- evaluate: run the program every step (``step`` code), with each axis advanced as a table of
  degree 1 (slot 2j holds x_j, slot 2j+1 holds dir_j).

Between the last two, the one that costs fewer kernel instructions over the walk (:data:`COSTS`).

The float walk evaluates the program every step, or, when the residue walk takes the register
form and the degree has a float register kernel (:data:`FLOAT_REGISTER_DEGREES`), runs the
residue setup code in float64 and advances the same differences in registers. Float64
differences drift from the exact values once they pass 2^53, so the GPU walker takes that kernel
only for walks whose values it has bounded (kernelpack.walk.gpu.float_registers_exact).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .program import Op, Program

# Slot-code operations, numbered as walk.cu's enum Op.
ADD, SUB, MUL = 0, 1, 2

# The register kernels of walk.cu (walk_registers<m, D>): every D from 1 to this, per m.
REGISTER_DEGREES = {2: 4, 3: 4, 4: 2}
# The float register kernels (walk_float_registers<m, D>): m*m*(D + 1) doubles of tables,
# at most 36, beside the float product, keep ptxas within 128 registers without spilling.
FLOAT_REGISTER_DEGREES = {2: 4, 3: 3, 4: 1}
# Beyond this degree an entry is not advanced by tables (D + 1 slots, D additions a step).
MAX_TABLE_DEGREE = 32
# Tables are not used when they would give a thread more slots than this: the residue kernel's
# blocks then keep at least 64 threads within 48 KiB of shared memory.
MAX_TABLE_SLOTS = 160

# Instruction counts of the residue kernel's loops (read off its sm_90 SASS), to choose between
# evaluating the program every step and advancing tables: a code row (load the row, read two
# slots, operate, write, loop), one table addition, and the per-table overhead of a step.
COSTS = {"row": 15, "mul_row": 18, "table_add": 8, "table": 6}

# An operand before slots are numbered: ("axis", j), ("const", c) or ("temp", t).
Operand = tuple[str, int]
Row = tuple[int, int, int, int]


@dataclass(frozen=True)
class ResidueCode:
    """The residue walk's slots: 2*dim axis/dir slots, constants, temporaries, then tables.

    ``setup`` runs once, ``step`` before each product, then each table (slot of T[0], degree)
    advances. ``out`` is the slot of each entry of M, row-major. In the "registers" form the
    tables are the m*m entries' own, of degree ``degree``, one after the other from out[0].
    """

    n_slots: int
    setup: npt.NDArray[np.int64]  # (n, 4) rows (op, dst, a, b)
    step: npt.NDArray[np.int64]
    tables: npt.NDArray[np.int64]  # (n, 2)
    out: npt.NDArray[np.int64]
    form: str  # "registers", "tables" or "evaluate"
    degree: int  # the tables' degree in the "registers" form, else 0


@dataclass(frozen=True)
class FloatCode:
    """The float walk's slots: dim axes (double), dim positions and dim dirs (int64),
    constants, temporaries. ``step`` runs before each product."""

    n_slots: int
    step: npt.NDArray[np.int64]
    out: npt.NDArray[np.int64]


@dataclass(frozen=True)
class Lowered:
    m: int
    dim: int
    consts: tuple[int, ...]  # the constant slots' values, in slot order
    residue: ResidueCode
    float: FloatCode


@dataclass(frozen=True)
class _Value:
    kind: str  # "axis", "const" or "op"
    index: int = 0  # axis number or constant pool index
    op: int = ADD
    a: int = -1  # value ids of the operands
    b: int = -1


class _Graph:
    """The program's values (leaves shared), each entry's value, and the constant pool."""

    def __init__(self, program: Program) -> None:
        self.values: list[_Value] = []
        self.pool: list[int] = []
        self._leaves: dict[tuple[str, int], int] = {}
        register: dict[int, int] = {}
        kernel_op = {Op.ADD: ADD, Op.SUB: SUB, Op.MUL: MUL}
        for row in program.instrs:
            op, dst, a, b = (int(v) for v in row)
            name = Op(op)
            if name is Op.LOAD_AXIS:
                register[dst] = self._leaf("axis", a)
            elif name is Op.LOAD_CONST:
                register[dst] = self.constant(int(program.consts[a]))
            elif name is Op.COPY:
                register[dst] = register[a]
            elif name is Op.NEG:
                register[dst] = self._op(SUB, self.constant(0), register[a])
            else:
                register[dst] = self._op(kernel_op[name], register[a], register[b])
        self.outputs = [register[int(r)] for r in program.out_reg]
        self.live = self._live()

    def _leaf(self, kind: str, index: int) -> int:
        key = (kind, index)
        if key not in self._leaves:
            self._leaves[key] = len(self.values)
            self.values.append(_Value(kind, index))
        return self._leaves[key]

    def constant(self, value: int) -> int:
        if value not in self.pool:
            self.pool.append(value)
        return self._leaf("const", self.pool.index(value))

    def _op(self, op: int, a: int, b: int) -> int:
        self.values.append(_Value("op", op=op, a=a, b=b))
        return len(self.values) - 1

    def _live(self) -> list[bool]:
        live = [False] * len(self.values)
        for root in self.outputs:
            live[root] = True
        for index in range(len(self.values) - 1, -1, -1):
            value = self.values[index]
            if live[index] and value.kind == "op":
                live[value.a] = live[value.b] = True
        return live

    def axes_read(self) -> list[int]:
        return sorted(
            {
                v.index
                for v, alive in zip(self.values, self.live, strict=True)
                if alive and v.kind == "axis"
            }
        )

    def degrees(self) -> list[int]:
        """A bound on each value's degree as a polynomial in n, capped past MAX_TABLE_DEGREE."""
        degrees: list[int] = []
        for value in self.values:
            if value.kind == "axis":
                degrees.append(1)
            elif value.kind == "const":
                degrees.append(0)
            elif value.op == MUL:
                degrees.append(min(MAX_TABLE_DEGREE + 1, degrees[value.a] + degrees[value.b]))
            else:
                degrees.append(max(degrees[value.a], degrees[value.b]))
        return degrees

    def operand(self, index: int, temp_of: dict[int, int]) -> Operand:
        value = self.values[index]
        return ("temp", temp_of[index]) if value.kind == "op" else (value.kind, value.index)

    def evaluation(self) -> tuple[list[tuple[int, Operand, Operand, Operand]], list[Operand], int]:
        """Code computing every entry: rows over symbolic operands, each entry's operand and the
        number of temporaries (reused after their last read; entries are never overwritten)."""
        last_read: dict[int, int] = {}
        for index, value in enumerate(self.values):
            if self.live[index] and value.kind == "op":
                last_read[value.a] = last_read[value.b] = index
        for index in self.outputs:
            last_read[index] = len(self.values)
        temp_of: dict[int, int] = {}
        free: list[int] = []
        n_temps = 0
        rows: list[tuple[int, Operand, Operand, Operand]] = []
        for index, value in enumerate(self.values):
            if not self.live[index] or value.kind != "op":
                continue
            a, b = self.operand(value.a, temp_of), self.operand(value.b, temp_of)
            for read in {value.a, value.b}:
                if self.values[read].kind == "op" and last_read[read] == index:
                    free.append(temp_of[read])
            if free:
                temp = min(free)
                free.remove(temp)
            else:
                temp, n_temps = n_temps, n_temps + 1
            temp_of[index] = temp
            rows.append((value.op, ("temp", temp), a, b))
        return rows, [self.operand(index, temp_of) for index in self.outputs], n_temps


def _rows_cost(ops: list[int]) -> int:
    return sum(COSTS["mul_row"] if op == MUL else COSTS["row"] for op in ops)


def lower(program: Program, dim: int, depth: int, *, registers: bool) -> Lowered:
    """Lower ``program`` for walks of ``dim`` axes and ``depth`` steps (see the module text).

    ``registers``: whether the register form may be chosen. The GPU walker's register kernels
    make it the fastest form; the numpy walker, for which every addition is a pass over memory,
    does better with one table per distinct entry at its own degree.
    """
    program.check_axes(dim)
    graph = _Graph(program)
    symbolic, out_operands, n_temps = graph.evaluation()
    axes = graph.axes_read()
    degrees = graph.degrees()
    register_degree = max(1, *(degrees[v] for v in graph.outputs))
    # In the "tables" form: the distinct values of M that are not constants.
    tabled = [v for v in dict.fromkeys(graph.outputs) if graph.values[v].kind != "const"]
    highest = max((degrees[v] for v in tabled), default=0)

    program_cost = _rows_cost([row[0] for row in symbolic])
    evaluate_cost = depth * (program_cost + len(axes) * (COSTS["table"] + COSTS["table_add"]))
    tables_cost = (highest + 1) * (program_cost + len(tabled) * COSTS["row"])
    tables_cost += sum(degrees[v] * (degrees[v] + 1) // 2 for v in tabled) * COSTS["row"]
    tables_cost += depth * sum(
        COSTS["table"] + degrees[v] * COSTS["table_add"] for v in tabled if degrees[v] > 0
    )
    table_slots = sum(degrees[v] + 1 for v in tabled)
    slots_with_tables = 2 * dim + len(graph.pool) + 1 + n_temps + table_slots
    if registers and register_degree <= REGISTER_DEGREES[program.m]:
        form = "registers"
    elif (
        highest <= MAX_TABLE_DEGREE
        and slots_with_tables <= MAX_TABLE_SLOTS
        and tables_cost < evaluate_cost
    ):
        form = "tables"
    else:
        form = "evaluate"
    if form != "evaluate":
        graph.constant(0)  # the setup copies an entry's value with an addition of zero

    consts = tuple(graph.pool)
    const_base = 2 * dim
    temp_base = const_base + len(consts)

    def slot(operand: Operand) -> int:
        kind, index = operand
        if kind == "axis":
            return 2 * index
        return (const_base if kind == "const" else temp_base) + index

    evaluate = [(op, slot(d), slot(a), slot(b)) for op, d, a, b in symbolic]
    entry_slots = [slot(o) for o in out_operands]
    first_table_slot = temp_base + n_temps
    zero = slot(("const", consts.index(0))) if form != "evaluate" else -1
    if form == "registers":
        setup, bases, n_slots = _difference_code(
            evaluate,
            entry_slots,
            [register_degree] * len(entry_slots),
            axes,
            zero,
            first_table_slot,
        )
        residue = ResidueCode(
            n_slots=n_slots,
            setup=_rows(setup),
            step=_rows([]),
            tables=np.array([(b, register_degree) for b in bases], dtype=np.int64),
            out=np.array(bases, dtype=np.int64),
            form=form,
            degree=register_degree,
        )
    elif form == "tables":
        value_slots = dict(zip(graph.outputs, entry_slots, strict=True))
        setup, bases, n_slots = _difference_code(
            evaluate,
            [value_slots[v] for v in tabled],
            [degrees[v] for v in tabled],
            axes,
            zero,
            first_table_slot,
        )
        base_of = dict(zip(tabled, bases, strict=True))
        residue = ResidueCode(
            n_slots=n_slots,
            setup=_rows(setup),
            step=_rows([]),
            tables=np.array(
                [(base_of[v], degrees[v]) for v in tabled if degrees[v] > 0], dtype=np.int64
            ).reshape(-1, 2),
            out=np.array([base_of.get(v, value_slots[v]) for v in graph.outputs], dtype=np.int64),
            form=form,
            degree=0,
        )
    else:
        residue = ResidueCode(
            n_slots=first_table_slot,
            setup=_rows([]),
            step=_rows(evaluate),
            tables=np.array([(2 * j, 1) for j in axes], dtype=np.int64).reshape(-1, 2),
            out=np.array(entry_slots, dtype=np.int64),
            form=form,
            degree=0,
        )

    float_const_base = 3 * dim
    float_temp_base = float_const_base + len(consts)

    def float_slot(operand: Operand) -> int:
        kind, index = operand
        if kind == "axis":
            return index
        return (float_const_base if kind == "const" else float_temp_base) + index

    floats = FloatCode(
        n_slots=float_temp_base + n_temps,
        step=_rows([(op, float_slot(d), float_slot(a), float_slot(b)) for op, d, a, b in symbolic]),
        out=np.array([float_slot(o) for o in out_operands], dtype=np.int64),
    )
    return Lowered(program.m, dim, consts, residue, floats)


def _rows(rows: list[Row]) -> npt.NDArray[np.int64]:
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def _difference_code(
    evaluate: list[Row],
    entry_slots: list[int],
    degrees: list[int],
    axes: list[int],
    zero: int,
    first_slot: int,
) -> tuple[list[Row], list[int], int]:
    """Setup code leaving the forward differences of each entry (its value in entry_slots[i],
    its degree degrees[i]) in a table of degrees[i] + 1 slots from first_slot on: the program
    run for n = 0..max degree, each value copied out, then differenced in place. Returns the
    code, each table's first slot and the first slot after the tables."""
    bases: list[int] = []
    next_slot = first_slot
    for degree in degrees:
        bases.append(next_slot)
        next_slot += degree + 1
    highest = max(degrees, default=0)
    setup: list[Row] = []
    for n in range(highest + 1):
        setup.extend(evaluate)
        setup.extend(
            (ADD, base + n, value, zero)
            for base, value, degree in zip(bases, entry_slots, degrees, strict=True)
            if degree >= n
        )
        if n < highest:
            setup.extend((ADD, 2 * j, 2 * j, 2 * j + 1) for j in axes)
    for base, degree in zip(bases, degrees, strict=True):
        for order in range(1, degree + 1):
            setup.extend((SUB, at, at, at - 1) for at in range(base + degree, base + order - 1, -1))
    return setup, bases, next_slot
