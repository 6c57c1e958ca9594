"""The step program: a register machine that computes the entries of M(n) from the position.

WALK.md fixes the machine: registers r0..r63, instructions (op, dst, a, b) as uint8, constants as
int64, and ``out_reg`` naming the register of each entry. :class:`Program` holds one and checks it
as far as it can without knowing the number of axes; :meth:`Program.check_axes` finishes the check
once the walk inputs say how many there are. :func:`compile_program` writes a program from integer
polynomial expressions, sharing every common subexpression.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import UsageError

N_REGISTERS = 64
MAX_CONSTS = 256
MAX_AXES = 8
MATRIX_SIZES = (2, 3, 4)
MAX_POWER = 64  # the largest exponent compile_program expands (``x**64``)
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class Op(enum.IntEnum):
    """The opcodes of WALK.md, numbered as the instruction array stores them."""

    LOAD_AXIS = 0
    LOAD_CONST = 1
    ADD = 2
    SUB = 3
    MUL = 4
    NEG = 5
    COPY = 6


# Which operands each opcode reads as registers (a, b) and how it reads in a message.
_READS: dict[Op, tuple[str, ...]] = {
    Op.LOAD_AXIS: (),
    Op.LOAD_CONST: (),
    Op.ADD: ("a", "b"),
    Op.SUB: ("a", "b"),
    Op.MUL: ("a", "b"),
    Op.NEG: ("a",),
    Op.COPY: ("a",),
}
_SPELLING: dict[Op, str] = {
    Op.LOAD_AXIS: "r{dst} = x[{a}]",
    Op.LOAD_CONST: "r{dst} = consts[{a}]",
    Op.ADD: "r{dst} = r{a} + r{b}",
    Op.SUB: "r{dst} = r{a} - r{b}",
    Op.MUL: "r{dst} = r{a} * r{b}",
    Op.NEG: "r{dst} = -r{a}",
    Op.COPY: "r{dst} = r{a}",
}


def describe(instrs: npt.NDArray[np.uint8], index: int) -> str:
    """``instrs[3] (MUL r5 = r1 * r9)``: how error messages name an instruction."""
    op, dst, a, b = (int(v) for v in instrs[index])
    if op not in Op._value2member_map_:
        return f"instrs[{index}] (op {op})"
    name = Op(op)
    return f"instrs[{index}] ({name.name} {_SPELLING[name].format(dst=dst, a=a, b=b)})"


def integer_array(value: object, name: str, ndim: int) -> npt.NDArray[np.int64]:
    """``value`` as an int64 array of ``ndim`` dimensions, or a UsageError naming ``name``.

    Anything but an ndarray goes through an object array first: numpy would turn a list holding
    2**63 into float64 silently.
    """
    try:
        array = value if isinstance(value, np.ndarray) else np.array(value, dtype=object)
    except ValueError as error:
        raise UsageError(f"{name}: not an integer array ({error})") from None
    if array.ndim != ndim:
        raise UsageError(f"{name}: expected a {ndim}-dimensional array, got shape {array.shape}")
    if array.dtype == object:
        items = array.reshape(-1).tolist()
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items):
            raise UsageError(f"{name}: expected integers")
        if not all(INT64_MIN <= int(v) <= INT64_MAX for v in items):
            raise UsageError(f"{name}: integers must lie in the int64 range")
        return np.array([int(v) for v in items], dtype=np.int64).reshape(array.shape)
    if array.size and array.dtype.kind not in "iu":
        raise UsageError(f"{name}: expected integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        raise UsageError(f"{name}: integers must lie in the int64 range")
    return array.astype(np.int64, copy=False)


@dataclass(frozen=True, eq=False)
class Program:
    """The step matrix as a register machine (WALK.md), checked on construction.

    ``instrs`` (n, 4) uint8 rows (op, dst, a, b); ``consts`` int64 (at most 256); ``out_reg``
    (m*m) uint8, the register of entry (i, j) at i*m + j; ``m`` in 2..4. Arrays are copied into
    read-only arrays of those dtypes.
    """

    instrs: npt.NDArray[np.uint8]
    consts: npt.NDArray[np.int64]
    out_reg: npt.NDArray[np.uint8]
    m: int

    def __post_init__(self) -> None:
        if isinstance(self.m, bool) or not isinstance(self.m, (int, np.integer)):
            raise UsageError(f"m: expected an integer in {MATRIX_SIZES}, got {self.m!r}")
        if int(self.m) not in MATRIX_SIZES:
            raise UsageError(f"m: expected one of {MATRIX_SIZES}, got {self.m}")
        instrs = integer_array(self.instrs, "instrs", 2)
        if instrs.shape[1:] != (4,):
            raise UsageError(f"instrs: expected shape (n, 4), got {instrs.shape}")
        if instrs.size and (instrs.min() < 0 or instrs.max() > 255):
            raise UsageError("instrs: entries must be uint8 (0..255)")
        consts = integer_array(self.consts, "consts", 1)
        if len(consts) > MAX_CONSTS:
            raise UsageError(f"consts: at most {MAX_CONSTS} constants, got {len(consts)}")
        out_reg = integer_array(self.out_reg, "out_reg", 1)
        m = int(self.m)
        if out_reg.shape != (m * m,):
            raise UsageError(
                f"out_reg: expected {m * m} registers for m = {m}, got {out_reg.shape}"
            )
        for name, array, dtype in (
            ("instrs", instrs, np.uint8),
            ("consts", consts, np.int64),
            ("out_reg", out_reg, np.uint8),
        ):
            frozen = array.astype(dtype)
            frozen.flags.writeable = False
            object.__setattr__(self, name, frozen)
        object.__setattr__(self, "m", m)
        self._check()

    def _check(self) -> None:
        written: set[int] = set()
        for index, row in enumerate(self.instrs):
            op, dst, a, b = (int(v) for v in row)
            if op not in Op._value2member_map_:
                known = ", ".join(f"{o.value} {o.name}" for o in Op)
                raise UsageError(
                    f"{describe(self.instrs, index)}: unknown op {op} (known: {known})"
                )
            if dst >= N_REGISTERS:
                raise UsageError(
                    f"{describe(self.instrs, index)}: register r{dst} does not exist "
                    f"(r0..r{N_REGISTERS - 1})"
                )
            name = Op(op)
            if name is Op.LOAD_CONST and a >= len(self.consts):
                raise UsageError(
                    f"{describe(self.instrs, index)}: constant index {a} is out of range "
                    f"({len(self.consts)} constants)"
                )
            for operand in _READS[name]:
                register = a if operand == "a" else b
                if register not in written:
                    raise UsageError(
                        f"{describe(self.instrs, index)}: register r{register} is read before "
                        "any write"
                    )
            written.add(dst)
        for entry, register in enumerate(self.out_reg):
            if int(register) not in written:
                i, j = divmod(entry, self.m)
                raise UsageError(
                    f"out_reg[{entry}] (entry ({i}, {j})): register r{int(register)} is never "
                    "written"
                )

    def evaluate(self, axes: Sequence[Any]) -> list[Any]:
        """The entries of M at ``axes`` (one value per axis), row-major: the register machine run
        once on whatever the values are. Python integers give the exact matrix (unbounded, the
        definition the walkers are tested against); numpy object arrays of Python integers give
        every step's matrix in one pass (the exact verifier's integer walk). Constants stay
        Python integers, so an entry that reads no axis is one."""
        registers: list[Any] = [0] * N_REGISTERS
        for row in self.instrs.tolist():
            op, dst, a, b = row
            if op == Op.LOAD_AXIS:
                registers[dst] = axes[a]
            elif op == Op.LOAD_CONST:
                registers[dst] = int(self.consts[a])
            elif op == Op.ADD:
                registers[dst] = registers[a] + registers[b]
            elif op == Op.SUB:
                registers[dst] = registers[a] - registers[b]
            elif op == Op.MUL:
                registers[dst] = registers[a] * registers[b]
            elif op == Op.NEG:
                registers[dst] = -registers[a]
            else:
                registers[dst] = registers[a]
        return [registers[r] for r in self.out_reg.tolist()]

    def check_axes(self, dim: int) -> None:
        """Reject a LOAD_AXIS of an axis the walks do not have (``dim`` axes)."""
        for index, row in enumerate(self.instrs):
            if int(row[0]) == Op.LOAD_AXIS and int(row[2]) >= dim:
                raise UsageError(
                    f"{describe(self.instrs, index)}: axis {int(row[2])} >= dim {dim} "
                    "(the walks' shifts and dirs have that many columns)"
                )


# ---------------------------------------------------------------------------------------------
# compile_program: expressions -> a shared expression graph -> instructions

# A node of the expression graph: (kind, value, a, b) with kind "axis" (value: the axis),
# "const" (value: the integer), or "add", "sub", "mul", "neg" over child nodes a and b (-1 where
# unused). Equal keys are one node, which is how common subexpressions are shared.
_Key = tuple[str, int, int, int]
_OPS = ("add", "sub", "mul", "neg")


class _Graph:
    def __init__(self) -> None:
        self.keys: list[_Key] = []
        self.ids: dict[_Key, int] = {}

    def node(self, key: _Key) -> int:
        found = self.ids.get(key)
        if found is None:
            found = len(self.keys)
            self.keys.append(key)
            self.ids[key] = found
        return found

    def children(self, node: int) -> list[int]:
        kind, _, a, b = self.keys[node]
        if kind not in _OPS:
            return []
        return [a] if kind == "neg" else [a, b]

    def const_value(self, node: int) -> int | None:
        kind, value, _, _ = self.keys[node]
        return value if kind == "const" else None

    def const(self, value: int) -> int:
        return self.node(("const", value, -1, -1))

    def axis(self, index: int) -> int:
        return self.node(("axis", index, -1, -1))

    def binary(self, op: str, left: int, right: int) -> int:
        """left op right, folded when both are constants whose result fits int64, simplified
        by the identities x+0, x-0, 0-x, x-x, x*0, x*1 and ordered for + and *, which commute."""
        lv, rv = self.const_value(left), self.const_value(right)
        if lv is not None and rv is not None:
            value = {"add": lv + rv, "sub": lv - rv, "mul": lv * rv}[op]
            if INT64_MIN <= value <= INT64_MAX:
                return self.const(value)
        if op == "add":
            if lv == 0:
                return right
            if rv == 0:
                return left
        elif op == "sub":
            if rv == 0:
                return left
            if lv == 0:
                return self.negate(right)
            if left == right:
                return self.const(0)
        elif op == "mul":
            if lv == 0 or rv == 0:
                return self.const(0)
            if lv == 1:
                return right
            if rv == 1:
                return left
        if op in ("add", "mul") and left > right:
            left, right = right, left
        return self.node((op, 0, left, right))

    def negate(self, child: int) -> int:
        value = self.const_value(child)
        if value is not None and INT64_MIN <= -value <= INT64_MAX:
            return self.const(-value)
        kind, _, a, _ = self.keys[child]
        if kind == "neg":
            return a
        return self.node(("neg", 0, child, -1))

    def power(self, base: int, exponent: int) -> int:
        """base**exponent by repeated squaring; the squares are shared nodes too."""
        result = self.const(1)
        square = base
        while exponent:
            if exponent & 1:
                result = self.binary("mul", result, square)
            exponent >>= 1
            if exponent:
                square = self.binary("mul", square, square)
        return result


_ALLOWED = "+ - * ** (small non-negative integer exponents), unary -, integer literals, axis names"


def _expression(entry: object, where: str) -> ast.expr:
    if isinstance(entry, ast.Expression):
        return entry.body
    if isinstance(entry, ast.expr):
        return entry
    if isinstance(entry, bool):
        raise UsageError(f"{where}: {entry!r} is not an expression")
    if isinstance(entry, (int, np.integer)):
        return ast.Constant(int(entry))
    if isinstance(entry, str):
        try:
            return ast.parse(entry.strip(), mode="eval").body
        except SyntaxError as error:
            raise UsageError(f"{where}: {entry!r} is not an expression ({error.msg})") from None
    raise UsageError(f"{where}: expected a string or an ast expression, got {type(entry).__name__}")


def _build(graph: _Graph, node: ast.expr, axes: dict[str, int], where: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        if not INT64_MIN <= node.value <= INT64_MAX:
            raise UsageError(f"{where}: literal {node.value} is outside the int64 range")
        return graph.const(node.value)
    if isinstance(node, ast.Name):
        if node.id not in axes:
            raise UsageError(f"{where}: unknown name {node.id!r} (axes: {', '.join(axes)})")
        return graph.axis(axes[node.id])
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):  # -9223372036854775808 is a literal the int64 range holds, though its digits are not
        return _build(graph, ast.Constant(-node.operand.value), axes, where)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _build(graph, node.operand, axes, where)
        return graph.negate(operand) if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow):
            exponent = graph.const_value(_build(graph, node.right, axes, where))
            if exponent is None:
                raise UsageError(f"{where}: an exponent must be an integer constant")
            if not 0 <= exponent <= MAX_POWER:
                raise UsageError(f"{where}: exponent {exponent} is outside 0..{MAX_POWER}")
            return graph.power(_build(graph, node.left, axes, where), exponent)
        ops = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul"}
        op = ops.get(type(node.op))
        if op is not None:
            left = _build(graph, node.left, axes, where)
            right = _build(graph, node.right, axes, where)
            return graph.binary(op, left, right)
    raise UsageError(f"{where}: {ast.unparse(node)!r} is not allowed (allowed: {_ALLOWED})")


def compile_program(matrix: Sequence[Sequence[object]], axes: Sequence[str]) -> Program:
    """The program of a matrix of integer polynomials in the axes.

    ``matrix`` is m rows of m entries, each a string (``"2*n + 1"``), an ``ast`` expression or
    an int; ``axes`` names the axes in order (axis j is column j of the walks' shifts and
    dirs). Equal subexpressions are computed once, constants are folded where the result fits
    int64, and registers are reused as soon as a value is dead.
    """
    names = list(axes)
    if not 1 <= len(names) <= MAX_AXES:
        raise UsageError(f"axes: expected 1..{MAX_AXES} names, got {len(names)}")
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise UsageError(f"axes: {name!r} is not an identifier")
    if len(set(names)) != len(names):
        raise UsageError(f"axes: names repeat in {names}")
    axis_of = {name: j for j, name in enumerate(names)}
    rows = list(matrix)
    m = len(rows)
    if m not in MATRIX_SIZES:
        raise UsageError(f"matrix: expected {MATRIX_SIZES[0]}..{MATRIX_SIZES[-1]} rows, got {m}")
    graph = _Graph()
    outputs: list[int] = []
    for i, row in enumerate(rows):
        entries = list(row)
        if len(entries) != m:
            raise UsageError(f"matrix[{i}]: expected {m} entries, got {len(entries)}")
        for j, entry in enumerate(entries):
            where = f"matrix[{i}][{j}]"
            outputs.append(_build(graph, _expression(entry, where), axis_of, where))
    return _emit(graph, outputs, m)


def _emit(graph: _Graph, outputs: list[int], m: int) -> Program:
    """Instructions for the nodes the outputs need, in graph order (children come first)."""
    live = set(outputs)
    for node in range(len(graph.keys) - 1, -1, -1):
        if node in live:
            live.update(graph.children(node))
    order = sorted(live)
    last_use = {node: position for position, node in enumerate(order)}
    for position, node in enumerate(order):
        for child in graph.children(node):
            last_use[child] = position
    for node in outputs:
        last_use[node] = len(order)

    consts: list[int] = []
    const_index: dict[int, int] = {}
    register: dict[int, int] = {}
    free = list(range(N_REGISTERS))
    instrs: list[tuple[int, int, int, int]] = []
    opcode = {"add": Op.ADD, "sub": Op.SUB, "mul": Op.MUL, "neg": Op.NEG}
    for position, node in enumerate(order):
        kind, value, _, _ = graph.keys[node]
        children = graph.children(node)
        operands = [register[child] for child in children]
        free.extend(register[child] for child in set(children) if last_use[child] == position)
        if not free:
            raise UsageError(
                f"matrix: needs more than {N_REGISTERS} registers at once; split it into "
                "simpler entries"
            )
        dst = min(free)
        free.remove(dst)
        register[node] = dst
        if kind == "axis":
            instrs.append((Op.LOAD_AXIS, dst, value, 0))
        elif kind == "const":
            if value not in const_index:
                const_index[value] = len(consts)
                consts.append(value)
            instrs.append((Op.LOAD_CONST, dst, const_index[value], 0))
        else:
            operands.append(operands[0])  # NEG reads a only; b repeats it
            instrs.append((opcode[kind], dst, operands[0], operands[1]))
    if len(consts) > MAX_CONSTS:
        raise UsageError(f"matrix: needs {len(consts)} distinct constants, at most {MAX_CONSTS}")
    return Program(
        instrs=np.array(instrs, dtype=np.uint8).reshape(-1, 4),
        consts=np.array(consts, dtype=np.int64),
        out_reg=np.array([register[node] for node in outputs], dtype=np.uint8),
        m=m,
    )
