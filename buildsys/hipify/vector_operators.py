"""User-defined arithmetic on CUDA vector types that HIP's vector types already define.

CUDA's float2, int4, ... are plain structs, so projects define their own operators
(cuda-samples' helper_math.h, copied into many projects: ``float2 operator/(float2 a, float2
b)``, ``void operator+=(float2& a, float2 b)``). HIP's vector types define the same componentwise
operators for two operands of one vector type (friend ``operator+ - * /``, members ``+= -= *=
/=``), so with both, every such use is ambiguous and the file does not compile. The user's
definition computes what HIP's does (each component with the scalar operator), so the
translation drops it and leaves a comment, keeping the line count; the forms HIP defines as
templates (vector and scalar, ``float2 operator*(float2 a, float b)``) lose overload resolution
to the user's non-template and stay.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lexer import Kind
from .structure import SourceView

VECTOR_TYPES = frozenset(
    f"{base}{lanes}"
    for base in (
        "char",
        "uchar",
        "short",
        "ushort",
        "int",
        "uint",
        "long",
        "ulong",
        "longlong",
        "ulonglong",
        "float",
        "double",
    )
    for lanes in (1, 2, 3, 4)
)
# HIP_vector_type's operators on two operands of its own type (amd_hip_vector_types.h).
HIP_VECTOR_OPERATORS = frozenset({"+", "-", "*", "/", "+=", "-=", "*=", "/="})
_PARAM_QUALIFIERS = frozenset({"const", "&", "__restrict__", "__restrict"})


@dataclass(frozen=True)
class RedundantOperator:
    """One definition to drop: tokens [start, end), the operator and the vector type."""

    start: int
    end: int
    operator: str
    vector_type: str


def _vector_parameter(view: SourceView, start: int, end: int) -> str | None:
    """The vector type of a parameter written ``[const] VT [&] [name]``, else None."""
    words = [view.tokens[i].text for i in view.sig_in(start, end)]
    kept = [w for w in words if w not in _PARAM_QUALIFIERS]
    if not kept or kept[0] not in VECTOR_TYPES or len(kept) > 2:
        return None
    if len(kept) == 2 and view.tokens[view.sig_in(start, end)[-1]].kind is not Kind.IDENT:
        return None
    return kept[0]


def redundant_vector_operators(view: SourceView) -> dict[int, RedundantOperator]:
    """Free operator definitions on two operands of one CUDA vector type that HIP defines too,
    by the index of their first token."""
    found: dict[int, RedundantOperator] = {}
    for k in view.sig:
        if view.tokens[k].text != "operator" or view.tokens[k].kind is not Kind.IDENT:
            continue
        operator = ""
        at = view.next_sig(k)
        while at is not None and view.tokens[at].kind is Kind.PUNCT and view.text_of(at) != "(":
            operator += view.text_of(at)
            at = view.next_sig(at)
        if operator not in HIP_VECTOR_OPERATORS or at is None or at not in view.match:
            continue
        close = view.match[at]
        params = view.arguments(at, close)
        types = {_vector_parameter(view, s, e) for s, e in params}
        body = view.next_sig(close)
        if len(params) != 2 or len(types) != 1 or None in types or view.text_of(body) != "{":
            continue
        assert body is not None
        start, before = k, view.prev_sig(k)
        while (
            before is not None
            and before not in view.directive_at
            and view.text_of(before) not in (";", "}", "{")
        ):
            start, before = before, view.prev_sig(before)
        if view.text_of(before) == "{":  # inside a class or namespace body: not a free operator
            continue
        (vector_type,) = types
        assert vector_type is not None
        found[start] = RedundantOperator(start, view.match[body] + 1, operator, vector_type)
    return found
