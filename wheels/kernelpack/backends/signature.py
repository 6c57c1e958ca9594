"""Kernel arguments: checked against the parameter layout in the index, packed for the vendor runtime.

A launch passes each argument by address (``kernelParams``), so every parameter gets its own 8-byte
slot and one ``struct`` format packs them all at once; ``struct`` also enforces the integer range of
each C type, so the common case costs one call. When packing fails, :meth:`Signature.explain` walks
the arguments again to name the one at fault.

Pointer arguments may be raw device addresses (``int``), objects with ``__cuda_array_interface__``
or DLPack producers; :mod:`kernelpack.devices.pointers` reads the address out of them.

A parameter of a kernel with C linkage has no type in the index (its symbol names none, and the
objects give sizes only), so a 4- or 8-byte one is passed by the Python value, one rule for both
launch paths (this module and _native/launcher.c): a Python ``float`` (``isinstance(v, float)``,
numpy.float64 included) as an IEEE float32 (4 bytes) or float64 (8 bytes), anything else as an
integer of that size, signed or unsigned (two's complement); for 8 bytes anything but an ``int``
is a pointer (an array's address, as for a typed pointer).
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import operator
import struct
from collections.abc import Sequence
from typing import NamedTuple

from ..devices.pointers import pointer_of
from ..errors import UsageError
from ..formats.index import KernelParam

SLOT = 8  # bytes per parameter slot; every supported C type fits and is aligned in 8


class CType(NamedTuple):
    """How a C parameter type travels: its ``struct`` code, size and what Python values fit."""

    code: str  # struct format character; "P" marks a pointer (packed as "Q"), "u"/"v" untyped
    size: int
    kind: str  # "pointer", "int", "float", "bool" or "untyped" (by the Python value)


_POINTER = CType("P", 8, "pointer")

# C type spelling (after dropping qualifiers) -> how it is passed. LP64 Linux: long is 64-bit.
C_TYPES: dict[str, CType] = {
    "bool": CType("?", 1, "bool"),
    "_Bool": CType("?", 1, "bool"),
    "char": CType("b", 1, "int"),
    "signed char": CType("b", 1, "int"),
    "unsigned char": CType("B", 1, "int"),
    "int8_t": CType("b", 1, "int"),
    "uint8_t": CType("B", 1, "int"),
    "short": CType("h", 2, "int"),
    "short int": CType("h", 2, "int"),
    "unsigned short": CType("H", 2, "int"),
    "unsigned short int": CType("H", 2, "int"),
    "int16_t": CType("h", 2, "int"),
    "uint16_t": CType("H", 2, "int"),
    "int": CType("i", 4, "int"),
    "signed": CType("i", 4, "int"),
    "signed int": CType("i", 4, "int"),
    "unsigned": CType("I", 4, "int"),
    "unsigned int": CType("I", 4, "int"),
    "int32_t": CType("i", 4, "int"),
    "uint32_t": CType("I", 4, "int"),
    "long": CType("q", 8, "int"),
    "long int": CType("q", 8, "int"),
    "long long": CType("q", 8, "int"),
    "long long int": CType("q", 8, "int"),
    "int64_t": CType("q", 8, "int"),
    "ptrdiff_t": CType("q", 8, "int"),
    "ssize_t": CType("q", 8, "int"),
    "unsigned long": CType("Q", 8, "int"),
    "unsigned long int": CType("Q", 8, "int"),
    "unsigned long long": CType("Q", 8, "int"),
    "unsigned long long int": CType("Q", 8, "int"),
    "uint64_t": CType("Q", 8, "int"),
    "size_t": CType("Q", 8, "int"),
    "float": CType("f", 4, "float"),
    "double": CType("d", 8, "float"),
}

_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict"})

# struct code -> the integer range it accepts (for the error message; struct enforces it)
_INT_RANGES: dict[str, tuple[int, int]] = {
    "b": (-(2**7), 2**7 - 1),
    "B": (0, 2**8 - 1),
    "h": (-(2**15), 2**15 - 1),
    "H": (0, 2**16 - 1),
    "i": (-(2**31), 2**31 - 1),
    "I": (0, 2**32 - 1),
    "q": (-(2**63), 2**63 - 1),
    "Q": (0, 2**64 - 1),
    "P": (0, 2**64 - 1),
}


def c_type(spelling: str) -> CType:
    """The passing rule for a C parameter type as written in the source."""
    if "*" in spelling or "[" in spelling:
        return _POINTER
    words = [w for w in spelling.replace("\t", " ").split(" ") if w and w not in _QUALIFIERS]
    found = C_TYPES.get(" ".join(words))
    if found is None:
        raise UsageError(
            f"C parameter type {spelling!r} cannot be passed from Python; "
            f"kernel parameters must be pointers or one of: {', '.join(sorted(C_TYPES))}"
        )
    return found


# A parameter of a kernel with C linkage: its symbol names no type, so it is passed by its size:
# 1 and 2 bytes as an unsigned integer, 4 and 8 bytes by the Python value (the module's
# docstring): codes "u" (4 bytes) and "v" (8 bytes), packed as the slot's bits ("I", "Q").
_BY_SIZE: dict[int, CType] = {
    1: CType("B", 1, "int"),
    2: CType("H", 2, "int"),
    4: CType("u", 4, "untyped"),
    8: CType("v", 8, "untyped"),
}
# untyped code -> (struct code of its bits, float format, the integers it takes)
_UNTYPED: dict[str, tuple[str, str, tuple[int, int]]] = {
    "u": ("I", "<f", (-(2**31), 2**32 - 1)),
    "v": ("Q", "<d", (-(2**63), 2**64 - 1)),
}


def untyped_bits(value: object, code: str) -> int:
    """The bits a value of an untyped (C-linkage) parameter travels as: a float's IEEE bits, an
    integer's two's complement, for 8 bytes an array's address. Raises TypeError, OverflowError
    or UsageError (from kernelpack.devices.pointers) for a value that does not fit."""
    bits, float_format, (low, high) = _UNTYPED[code]
    mask = (1 << (8 * struct.calcsize(bits))) - 1
    if isinstance(value, float):
        packed = struct.pack(float_format, value)  # OverflowError past FLT_MAX for float32
        return int.from_bytes(packed, "little")
    if code == "v" and type(value) is not int:
        return pointer_of(value)  # as a typed pointer: an int exactly, else an array's address
    number = operator.index(value)  # type: ignore[arg-type]
    if not low <= number <= high:
        raise OverflowError(f"{number} is out of range [{low}, {high}]")
    return number & mask


def param_type(kernel: str, position: int, param: KernelParam) -> CType:
    """How one parameter of the index travels: by its C type where the symbol spells one (checked
    against the size the object gives), else by its size."""
    if not param["type"]:
        found = _BY_SIZE.get(param["size"])
        if found is None:
            raise UsageError(
                f"kernel {kernel}: parameter {position} is {param['size']} bytes with no type "
                "(C linkage); kernelpack passes 1, 2, 4 or 8-byte values only"
            )
        return found
    found = c_type(param["type"])
    if found.size != param["size"]:
        raise UsageError(
            f"kernel {kernel}: parameter {position} ({param['type']}) is {param['size']} bytes in "
            f"the compiled object, not {found.size}; the index does not match this kernelpack"
        )
    return found


class Signature(NamedTuple):
    """A kernel's parameters as the index lists them, with the packing derived from them."""

    kernel: str
    spellings: tuple[str, ...]  # the C types; "<N bytes>" for a parameter of a C-linkage kernel
    types: tuple[CType, ...]

    @classmethod
    def from_index(cls, kernel: str, params: Sequence[KernelParam]) -> "Signature":
        return cls(
            kernel,
            tuple(p["type"] or f"<{p['size']} bytes>" for p in params),
            tuple(param_type(kernel, i, p) for i, p in enumerate(params)),
        )

    @property
    def codes(self) -> str:
        """One struct code per parameter ("P" for pointers): what the native launcher reads."""
        return "".join(t.code for t in self.types)

    @property
    def struct_format(self) -> str:
        """Little-endian format with every parameter padded to its 8-byte slot (an untyped one
        as its bits, :func:`untyped_bits`)."""
        parts = []
        for t in self.types:
            code = "Q" if t.code == "P" else _UNTYPED[t.code][0] if t.kind == "untyped" else t.code
            pad = SLOT - t.size
            parts.append(code + (f"{pad}x" if pad else ""))
        return "<" + "".join(parts)

    @property
    def pointer_positions(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.types) if t.kind == "pointer")

    @property
    def untyped_positions(self) -> tuple[int, ...]:
        """Where a value goes by its Python type (C linkage, 4 or 8 bytes)."""
        return tuple(i for i, t in enumerate(self.types) if t.kind == "untyped")

    def with_untyped_bits(self, values: Sequence[object]) -> list[object]:
        """The values with each untyped one as its bits (raises as untyped_bits does)."""
        converted = list(values)
        for position in self.untyped_positions:
            converted[position] = untyped_bits(values[position], self.types[position].code)
        return converted

    @property
    def bool_positions(self) -> tuple[int, ...]:
        """Where ``struct`` would take any object's truth value; only ints and bools are let in."""
        return tuple(i for i, t in enumerate(self.types) if t.kind == "bool")

    def describe(self) -> str:
        return f"{self.kernel}({', '.join(self.spellings)})"

    def explain(self, args: Sequence[object]) -> UsageError:
        """The error for arguments that did not pack: which one, its C type and what fits."""
        if len(args) != len(self.types):
            return UsageError(
                f"kernel {self.describe()} takes {len(self.types)} arguments, got {len(args)}"
            )
        for position, (value, ctype) in enumerate(zip(args, self.types, strict=True)):
            problem = _problem(value, ctype)
            if problem:
                return UsageError(
                    f"kernel {self.kernel}: argument {position} ({self.spellings[position]}): "
                    f"{problem}"
                )
        return UsageError(f"kernel {self.describe()}: arguments {args!r} cannot be packed")

    def pack(self, args: Sequence[object]) -> bytes:
        """All arguments in their slots (the pure-Python path and the tests)."""
        if len(args) != len(self.types):
            raise self.explain(args)
        values = list(args)
        for position in self.pointer_positions:
            if type(values[position]) is not int:
                values[position] = pointer_of(values[position])
        if any(not isinstance(values[p], int) for p in self.bool_positions):
            raise self.explain(values)
        try:
            return struct.pack(self.struct_format, *self.with_untyped_bits(values))
        except (struct.error, TypeError, OverflowError, UsageError):
            raise self.explain(values) from None


def _problem(value: object, ctype: CType) -> str:
    """Why one value does not fit its parameter, or '' when it does."""
    if ctype.kind == "untyped":
        try:
            untyped_bits(value, ctype.code)
        except TypeError:
            return f"expected an integer or a float, got {type(value).__name__}"
        except OverflowError as error:
            if isinstance(value, float):
                return f"{value!r} is out of range for float"
            return str(error)
        except UsageError as error:
            return str(error)
        return ""
    if ctype.kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                return f"expected a number, got {type(value).__name__}"
        try:
            struct.pack("<" + ctype.code, value)
        except (struct.error, OverflowError):
            return f"{value!r} is out of range for {'float' if ctype.code == 'f' else 'double'}"
        return ""
    if ctype.kind == "bool":
        return "" if isinstance(value, int) else f"expected a bool, got {type(value).__name__}"
    try:
        if ctype.kind == "pointer" and type(value) is not int:
            number = pointer_of(value)
        else:
            number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return f"expected an integer, got {type(value).__name__}"
    except UsageError as error:
        return str(error)
    low, high = _INT_RANGES[ctype.code]
    if not low <= number <= high:
        return f"{number} is out of range [{low}, {high}]"
    return ""


# ---- launch dimensions ------------------------------------------------------------------------


def dims(value: object, what: str) -> tuple[int, int, int]:
    """A grid or block given as an int or 1 to 3 ints, as the three sizes the runtime takes."""
    if type(value) is int:
        sizes: tuple[int, ...] = (value,)
    elif isinstance(value, (tuple, list)) and 1 <= len(value) <= 3:
        sizes = tuple(value)
    else:
        raise UsageError(f"{what} must be an int or 1 to 3 ints, got {value!r}")
    if not all(type(s) is int and 1 <= s < 2**32 for s in sizes):
        raise UsageError(f"{what} sizes must be ints from 1 to 2**32-1, got {value!r}")
    padded = (*sizes, 1, 1)
    return padded[0], padded[1], padded[2]
