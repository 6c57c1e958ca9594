"""Wave-size hazards: where CUDA code assumes that a warp has 32 lanes.

AMD GPUs run wavefronts of 64 lanes (gfx9 and CDNA, gfx90a) or 32 lanes (RDNA, gfx1100). Code that
writes the warp size as a literal computes lanes, warp ids, masks and reduction trees that are right
on NVIDIA and on wave32 but silently wrong on wave64. These checks look for the shapes such code has
in practice; each finding names the class (its code) and is silenced on a reviewed line by
``// hipify: allow(<code>)`` or ``// hipify: allow(wave32)``.

The checks read CUDA and HIP spellings alike (``__shfl_down_sync`` and ``__shfl_down``), so running
them on translated output reports the same hazards as on the source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from enum import Enum

from .ballot_voters import votes_only_below_lane_32
from .finding import Finding
from .launch_shapes import (
    function_name,
    helper_calls,
    host_functions,
    launch_shape_literals,
    launch_shape_message,
    mixing_ranges,
)
from .lexer import COMPOUND_ASSIGNMENTS, Kind, literal_value
from .structure import SourceView
from .tables import BALLOT_NAMES, BALLOT_WIDENING, SHUFFLE_DELTA_ARG, WARP_BY_NAME

# Identifiers that make an operand a lane, a thread index or a warp id.
_LANE_RE = re.compile(
    r"lane|warp|^w?tid|tid$|tid_|threadidx|thread_rank|^wid$|blockdim", re.IGNORECASE
)
# Identifiers that put a statement in warp-mask context.
_MASK_CONTEXT_RE = re.compile(r"ballot|activemask|lane|warp|mask|vote", re.IGNORECASE)
_WARP_NAME_RE = re.compile(r"warp", re.IGNORECASE)
# The words of a 32-bit integer type, and with them the words a declaration or a cast may put
# around it (``static const unsigned int``, ``std::uint32_t``).
_INT32_CORE = frozenset({"unsigned", "int", "uint32_t", "int32_t", "uint"})
_INT32_TYPE_WORDS = _INT32_CORE | {"const", "static", "register", "std", "::", "volatile"}
# Operators after which (or before which) a literal is an operand worth checking, by value.
_OPS_FOR_VALUE: dict[int, frozenset[str]] = {
    32: frozenset({"%", "/", "*", "%=", "/=", "*=", "<", "<=", ">", ">=", "==", "!="}),
    31: frozenset({"&", "&=", "==", "!=", "<", "<=", ">", ">=", "-"}),
    5: frozenset({">>", "<<", ">>=", "<<="}),
}
# Delimiters that end an operand when walking away from an operator.
_OPERAND_STOPS = frozenset(
    {";", "{", "}", ",", "=", "?", ":", "&&", "||", "return", "#", *COMPOUND_ASSIGNMENTS}
)
_CONSUMING_CALLS = frozenset(BALLOT_WIDENING) | frozenset(BALLOT_WIDENING.values())
FULL_MASK_VALUES = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


class MaskKind(Enum):
    FULL = "full"
    PARTIAL = "partial"
    VARIABLE = "variable"


def full_mask_names(view: SourceView) -> frozenset[str]:
    """Names the file defines as a full lane mask: ``#define FULL 0xffffffff``, ``mask = ~0u``."""
    names: set[str] = set()
    for _, sig in view.directives_named("define"):
        if (
            len(sig) >= 4
            and view.tokens[sig[2]].kind is Kind.IDENT
            and _is_full_literal(view, sig[3:])
        ):
            names.add(view.tokens[sig[2]].text)
    for pos, index in enumerate(view.sig):
        token = view.tokens[index]
        if token.text != "=" or pos == 0:
            continue
        name = view.tokens[view.sig[pos - 1]]
        before = view.tokens[view.sig[pos - 2]] if pos >= 2 else None
        if name.kind is not Kind.IDENT or before is None or before.kind is not Kind.IDENT:
            continue
        value: list[int] = []
        for k in view.sig[pos + 1 :]:
            if view.tokens[k].text in (";", ","):
                break
            value.append(k)
        if value and _is_full_literal(view, value):
            names.add(name.text)
    return frozenset(names)


def _is_full_literal(view: SourceView, sig: list[int]) -> bool:
    texts = [view.tokens[k].text for k in sig]
    while len(texts) >= 2 and texts[0] == "(" and texts[-1] == ")":
        texts = texts[1:-1]
    if len(texts) == 1:
        return literal_value(texts[0]) in FULL_MASK_VALUES
    if len(texts) == 2 and texts[0] == "~":
        return literal_value(texts[1]) == 0
    return len(texts) == 2 and texts[0] == "-" and literal_value(texts[1]) == 1


def classify_mask(
    view: SourceView, start: int, end: int, full_names: frozenset[str]
) -> tuple[MaskKind, int | None]:
    """Whether the mask argument in [start, end) is full, a partial literal, or a variable.

    The second value is the literal's token index for a partial mask.
    """
    sig = view.sig_in(start, end)
    texts = [view.tokens[k].text for k in sig]
    if _is_full_literal(view, sig):
        return MaskKind.FULL, None
    if len(texts) == 1 and texts[0] in full_names:
        return MaskKind.FULL, None
    if texts[:1] == ["__activemask"] and texts[1:] == ["(", ")"]:
        return MaskKind.FULL, None
    core = [k for k in sig if view.tokens[k].text not in ("(", ")")]
    if len(core) == 1 and view.tokens[core[0]].kind is Kind.NUMBER:
        return MaskKind.PARTIAL, core[0]
    return MaskKind.VARIABLE, None


def find_hazards(
    view: SourceView, full_names: frozenset[str], lane_reductions: Mapping[str, str]
) -> list[Finding]:
    """All wave-size findings of one source, at most one per token, in source order.

    A literal 32 as lane count, lane id, warp id, reduction start or tile size (codes warp-size,
    shfl-offset16, tile32) defines 32-lane "virtual warps". On a wave64 these stay correct: shuffles by 16
    or less, xor butterflies and width-32 shuffles never leave their half of the wavefront, so a
    reduction still ends in lane 0 of each 32-lane group, which is where ``tid % 32 == 0`` looks.
    They are reported only where the same function (or, at file scope, the file) also uses the
    hardware wavefront (warpSize, ballots, lane masks): there the two warp sizes meet, also
    through a call of a 32-lane reduction helper (``lane_reductions``, from any file of the tree).
    """
    mixing = mixing_ranges(view)
    file_mixes = bool(mixing)
    mixing_kernels = {function_name(view, start) for start, _ in mixing}
    hosts = host_functions(view)
    # Host functions whose launch shapes meet the hardware wavefront: they launch a kernel that
    # uses it. A warp size written elsewhere in host code shapes 32-lane groups only.
    meeting = [h for h in hosts if any(name in mixing_kernels for name, _ in h.launches)]
    findings: dict[int, Finding] = {}
    for finding in (
        *(
            Finding(k, "warp-size", launch_shape_message(f, mixing_kernels))
            for f in meeting
            for k in launch_shape_literals(view, f)
        ),
        *shuffle_offsets(view),
        *_tiles(view),
        *_ballots_in_32_bits(view),
        *_mask_literals(view, full_names),
        *_warp_size_definitions(view),
        *_lane_arithmetic(view),
        *_warp_reductions(view),
        *helper_calls(view, mixing, lane_reductions),
    ):
        if _WARP_REDUCE_RE.match(view.tokens[finding.token].text):
            if not file_mixes:  # a helper of its own, called where lane ids come from warpSize
                continue
        elif finding.code in VIRTUAL_WARP_CODES:
            inside = [r for r in view.device_ranges if r[0] < finding.token < r[1]]
            if inside and inside[0] not in mixing:
                continue
            host = [h for h in hosts if h.body[0] < finding.token < h.body[1]]
            if not inside and host and host[0] not in meeting:
                continue
            if not inside and not file_mixes:
                continue
        findings.setdefault(finding.token, finding)
    return [findings[k] for k in sorted(findings)]


# A 32-thread tile is 32 threads on every GPU (HIP builds it inside a wave64), so it joins the
# classes that are only reported where the hardware wavefront is used too.
VIRTUAL_WARP_CODES = frozenset({"warp-size", "shfl-offset16", "tile32"})


# __reduce_*_sync reduce over the 32 lanes their 32-bit mask names (the compat layer keeps that on
# wave64). They are usually called from a helper of their own, so the file, not the function,
# decides: a file that also uses the hardware wavefront reads their results with 64-lane ids.
WARP_REDUCE_CODE = "shfl-offset16"
_WARP_REDUCE_RE = re.compile(r"^__reduce_(?:add|min|max|and|or|xor)_sync$")


def _warp_reductions(view: SourceView) -> Iterator[Finding]:
    for index in view.sig:
        token = view.tokens[index]
        if _WARP_REDUCE_RE.match(token.text) and view.call_parens(index) is not None:
            yield Finding(
                index,
                WARP_REDUCE_CODE,
                f"{token.text} reduces over 32 lanes (the lanes its 32-bit mask names) while this "
                "file uses warpSize: on a wave64 each half of the wavefront keeps its own result; "
                "reduce with __shfl_xor over warpSize, or count lanes in 32s throughout",
            )


def shuffle_offsets(view: SourceView) -> Iterator[Finding]:
    """Reductions written for 32 lanes: delta 16 first, or a butterfly that stops below 32."""
    for index in view.sig:
        name = view.tokens[index].text
        if name in SHUFFLE_DELTA_ARG:
            parens = view.call_parens(index)
            if parens is None:
                continue
            args = view.arguments(*parens)
            position = SHUFFLE_DELTA_ARG[name]
            if len(args) > position + 1:
                continue  # an explicit width: the shuffle stays inside its width-lane segment
            if position < len(args):
                sig = view.sig_in(*args[position])
                if len(sig) == 1 and literal_value(view.tokens[sig[0]].text) == 16:
                    yield Finding(
                        sig[0],
                        "shfl-offset16",
                        f"{name} by 16 lanes: a reduction that starts at offset 16 covers 32 lanes, "
                        "half a wave64; start at warpSize / 2",
                    )
        elif name == "for":
            yield from _shuffle_loop(view, index)


def _shuffle_loop(view: SourceView, for_index: int) -> Iterator[Finding]:
    parens = view.call_parens(for_index)
    if parens is None:
        return
    open_index, close_index = parens
    clauses = _split_for_clauses(view, open_index, close_index)
    if clauses is None:
        return
    init, cond, _ = clauses
    init_sig = view.sig_in(*init)
    if len(init_sig) < 3 or view.tokens[init_sig[-2]].text != "=":
        return
    variable = view.tokens[init_sig[-3]].text
    start_value = literal_value(view.tokens[init_sig[-1]].text)
    body_start = view.next_sig(close_index)
    if body_start is None:
        return
    if view.tokens[body_start].text == "{" and body_start in view.match:
        body_end = view.match[body_start]
    else:
        body_end = body_start
        while body_end < len(view.tokens) and view.tokens[body_end].text != ";":
            body_end += 1
    if not _shuffles_by(view, body_start, body_end, variable):
        return
    if start_value == 16:
        yield Finding(
            init_sig[-1],
            "shfl-offset16",
            f"shuffle loop starts at offset 16: it reduces 32 lanes, half a wave64; start {variable} "
            "at warpSize / 2",
        )
        return
    cond_sig = view.sig_in(*cond)
    for k in cond_sig:
        if literal_value(view.tokens[k].text) in (16, 32) and view.tokens[k].kind is Kind.NUMBER:
            yield Finding(
                k,
                "shfl-offset16",
                f"shuffle loop bounded by {view.tokens[k].text}: it combines 32 lanes, half a "
                "wave64; bound it by warpSize",
            )


def _split_for_clauses(
    view: SourceView, open_index: int, close_index: int
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]] | None:
    cuts: list[int] = []
    k = open_index + 1
    while k < close_index:
        if view.tokens[k].text in ("(", "[", "{") and k in view.match:
            k = view.match[k]
        elif view.tokens[k].text == ";":
            cuts.append(k)
        k += 1
    if len(cuts) != 2:
        return None
    return (open_index + 1, cuts[0]), (cuts[0] + 1, cuts[1]), (cuts[1] + 1, close_index)


def _shuffles_by(view: SourceView, start: int, end: int, variable: str) -> bool:
    for index in range(start, end):
        name = view.tokens[index].text
        if name not in SHUFFLE_DELTA_ARG:
            continue
        parens = view.call_parens(index)
        if parens is None:
            continue
        args = view.arguments(*parens)
        position = SHUFFLE_DELTA_ARG[name]
        explicit_width = len(args) > position + 1
        if (
            position < len(args)
            and not explicit_width
            and variable in view.range_text(*args[position]).split()
        ):
            return True
    return False


def _tiles(view: SourceView) -> Iterator[Finding]:
    reported: set[tuple[int, int]] = set()
    for index in view.sig:
        name = view.tokens[index].text
        if name not in ("thread_block_tile", "tiled_partition"):
            continue
        after = view.next_sig(index)
        literal: int | None = None
        if view.text_of(after) == "<" and after is not None:
            literal = view.next_sig(after)
        elif view.text_of(after) == "(" and after is not None and after in view.match:
            args = view.arguments(after, view.match[after])
            if len(args) == 2:
                sig = view.sig_in(*args[1])
                literal = sig[0] if len(sig) == 1 else None
        if literal is not None and literal_value(view.tokens[literal].text) == 32:
            statement = view.statement_bounds(index)
            if statement in reported:
                continue  # thread_block_tile<32> t = tiled_partition<32>(...): one finding
            reported.add(statement)
            yield Finding(
                literal,
                "tile32",
                f"{name} of 32 threads is a whole warp on NVIDIA but half a wavefront on wave64; "
                "warp ids, per-warp slots and ballots taken from it are wrong there",
            )


def _ballots_in_32_bits(view: SourceView) -> Iterator[Finding]:
    narrow_names = _int32_variables(view)
    for index in view.sig:
        name = view.tokens[index].text
        if name not in BALLOT_NAMES or view.call_parens(index) is None:
            continue
        if _inside_call_to(view, index, _CONSUMING_CALLS):
            continue
        if votes_only_below_lane_32(view, index):
            continue  # bits 32..63 are zero on every GPU: 32 bits hold the whole ballot
        start, end = view.statement_bounds(index)
        sig = [k for k in view.sig_in(start, end)]
        texts = [view.tokens[k].text for k in sig]
        if "=" in texts:
            target = texts[: texts.index("=")]
            declared_32 = (
                bool(target)
                and all(t in _INT32_TYPE_WORDS for t in target[:-1])
                and any(t in _INT32_CORE for t in target[:-1])
            )
            assigned_32 = len(target) == 1 and target[0] in narrow_names
            if declared_32 or assigned_32:
                yield Finding(
                    index,
                    "ballot-32bit",
                    f"{name} result kept in 32 bits ({' '.join(target)}): a wave64 ballot has 64 "
                    "lanes; use unsigned long long (or auto)",
                )
                continue
        cast = view.prev_sig(index)
        if view.text_of(cast) == ")" and cast is not None and cast in view.match:
            inner = view.range_text(view.match[cast] + 1, cast).split()
            if inner and all(t in _INT32_TYPE_WORDS for t in inner):
                yield Finding(
                    index,
                    "ballot-32bit",
                    f"{name} result cast to {' '.join(inner)}: a wave64 ballot has 64 lanes",
                )


def _int32_variables(view: SourceView) -> frozenset[str]:
    """Names declared with a 32-bit integer type (``unsigned mask;``, ``uint32_t m = 0;``)."""
    names: set[str] = set()
    for pos, index in enumerate(view.sig[:-1]):
        if view.tokens[index].text not in _INT32_CORE:
            continue
        name = view.tokens[view.sig[pos + 1]]
        after = view.text_of(view.sig[pos + 2]) if pos + 2 < len(view.sig) else ""
        if (
            name.kind is Kind.IDENT
            and name.text not in _INT32_TYPE_WORDS
            and after in (";", "=", ",")
        ):
            names.add(name.text)
    return frozenset(names)


def _inside_call_to(view: SourceView, index: int, names: frozenset[str]) -> bool:
    """Whether tokens[index] lies in the argument list of a call to one of ``names``."""
    k = view.prev_sig(index)
    depth = 0
    while k is not None:
        text = view.tokens[k].text
        if text in (")", "]"):
            depth += 1
        elif text in ("(", "["):
            if depth == 0:
                callee = view.prev_sig(k)
                if view.text_of(callee) in names:
                    return True
            else:
                depth -= 1
        elif depth == 0 and text in (";", "{", "}"):
            return False
        k = view.prev_sig(k)
    return False


def _mask_literals(view: SourceView, full_names: frozenset[str]) -> Iterator[Finding]:
    """Partial literal masks of sync intrinsics, and 32-bit full masks used as lane-mask values."""
    mask_args: set[int] = set()
    for index in view.sig:
        name = view.tokens[index].text
        intrinsic = WARP_BY_NAME.get(name)
        if intrinsic is None and name != "__syncwarp":
            continue
        parens = view.call_parens(index)
        if parens is None:
            continue
        args = view.arguments(*parens)
        if not args:
            continue
        start, end = args[intrinsic.mask_arg if intrinsic else 0]
        mask_args.update(range(start, end))
        kind, literal = classify_mask(view, start, end, full_names)
        if kind is MaskKind.PARTIAL and literal is not None:
            yield Finding(
                literal,
                "warp-mask",
                f"partial lane mask {view.tokens[literal].text} in {name}: HIP's form runs on every "
                "active lane, and on wave64 a 32-bit mask names only lanes 0-31",
            )
    for index in view.sig:
        token = view.tokens[index]
        is_full = (
            token.kind is Kind.NUMBER and literal_value(token.text) == 0xFFFFFFFF
        ) or token.text in full_names
        if not is_full or index in mask_args or not view.in_device_code(index):
            continue
        neighbours = (view.text_of(view.prev_sig(index)), view.text_of(view.next_sig(index)))
        if not any(
            op in ("==", "!=", "&", "|", "^", ">>", "<<", "&=", "|=", "~") for op in neighbours
        ):
            continue
        start, end = view.statement_bounds(index)
        context = [
            view.tokens[k].text
            for k in view.sig_in(start, end)
            if view.tokens[k].kind is Kind.IDENT and k != index
        ]
        if any(_MASK_CONTEXT_RE.search(word) for word in context):
            yield Finding(
                index,
                "warp-mask",
                f"{token.text} used as a full lane mask: a wave64 has 64 lanes, so ballots and "
                "masks are 64-bit; compare with __ballot(1) or ~0ull",
            )


def _warp_size_definitions(view: SourceView) -> Iterator[Finding]:
    """``#define WARP_SIZE 32``, ``constexpr int kWarpSize = 32``, ``int WarpSize = 32`` (template)."""
    for _, sig in view.directives_named("define"):
        if len(sig) >= 4 and _WARP_NAME_RE.search(view.tokens[sig[2]].text):
            values = [k for k in sig[3:] if view.tokens[k].text not in ("(", ")")]
            if len(values) == 1 and literal_value(view.tokens[values[0]].text) == 32:
                yield _warp_size_finding(view, values[0], view.tokens[sig[2]].text)
    for pos, index in enumerate(view.sig[1:-1], start=1):
        if view.tokens[index].text != "=":
            continue
        name = view.tokens[view.sig[pos - 1]]
        value = view.sig[pos + 1]
        after = view.text_of(view.sig[pos + 2]) if pos + 2 < len(view.sig) else ""
        if (
            name.kind is Kind.IDENT
            and name.text != "warpSize"
            and _WARP_NAME_RE.search(name.text)
            and literal_value(view.tokens[value].text) == 32
            and after in (";", ",", ">", "}", ")")
        ):
            yield _warp_size_finding(view, value, name.text)


def _warp_size_finding(view: SourceView, index: int, name: str) -> Finding:
    return Finding(
        index,
        "warp-size",
        f"{name} defined as 32: AMD wavefronts have 64 lanes on gfx9/CDNA; use warpSize "
        "(or query hipDeviceAttributeWarpSize on the host)",
    )


def _lane_arithmetic(view: SourceView) -> Iterator[Finding]:
    """``threadIdx.x % 32``, ``tid & 31``, ``tid >> 5``, ``lane == 31``, ``threadIdx.x < 32``."""
    for index in view.sig:
        token = view.tokens[index]
        if token.kind is not Kind.NUMBER:
            continue
        directive = view.directive_at.get(index)
        if not view.in_device_code(index) and (directive is None or directive.name != "define"):
            continue
        value = literal_value(token.text)
        if value not in _OPS_FOR_VALUE:
            continue
        before = view.prev_sig(index)
        after = view.next_sig(index)
        ops = _OPS_FOR_VALUE[value]
        operand: list[str] = []
        op_text = ""
        if view.text_of(before) in ops and before is not None:
            op_text = view.text_of(before)
            operand = _operand_words(view, before, step=-1)
        if not _is_lane(operand) and view.text_of(after) in ops and after is not None:
            op_text = view.text_of(after)
            operand = _operand_words(view, after, step=1)
        if _is_lane(operand):
            yield Finding(
                index,
                "warp-size",
                f"'{op_text} {token.text}' on {' '.join(operand)} assumes 32-lane warps; use "
                "warpSize (lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize)",
            )


def _operand_words(view: SourceView, op_index: int, *, step: int) -> list[str]:
    """The identifiers of the operand on one side of an operator, up to a delimiter."""
    words: list[str] = []
    k = view.prev_sig(op_index) if step < 0 else view.next_sig(op_index)
    depth = 0
    while k is not None:
        text = view.tokens[k].text
        closers, openers = ((")", "]"), ("(", "[")) if step < 0 else (("(", "["), (")", "]"))
        if text in closers:
            depth += 1
        elif text in openers:
            if depth == 0:
                break
            depth -= 1
        elif depth == 0 and text in _OPERAND_STOPS:
            break
        if view.tokens[k].kind is Kind.IDENT:
            words.append(text)
        k = view.prev_sig(k) if step < 0 else view.next_sig(k)
    return words[::-1] if step < 0 else words


def _is_lane(words: list[str]) -> bool:
    return any(_LANE_RE.search(w) for w in words if w != "warpSize")
