"""Where code meets the hardware wavefront: the device functions that use it, and the kernels a
host function launches.

A warp size written in a host function (``const int warp_size = 32``, ``grid = n / 32``) is a
launch shape. It is a wave64 hazard only where it meets a kernel that counts lanes with the
hardware wavefront (warpSize, ballots, lane masks): a grid of ``n / 32`` blocks for a kernel that
takes ``blockIdx.x * warpSize`` columns covers twice the columns on wave64. A host function that
launches only kernels of 32-lane groups (or none) builds its shapes for those groups, which is
correct on every wave size.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from .finding import Finding
from .lexer import Kind
from .source_scan import find_launches
from .structure import SourceView
from .tables import BALLOT_NAMES

# Names whose value depends on the hardware wavefront (64 lanes on gfx9): code that also counts
# lanes in 32s mixes two warp sizes, which is where a literal 32 becomes a bug on wave64.
HARDWARE_WAVE_NAMES = frozenset(
    {"warpSize", "__lane_id", "__lanemask_lt", "__lanemask_le", "__lanemask_gt", "__lanemask_ge"}
    | BALLOT_NAMES
)


# PTX's lane registers in an asm string (which the translation may turn into __lane_id()).
_PTX_LANE_RE = re.compile(r"%%?(?:laneid|lanemask_\w+)\b")


def mixing_ranges(view: SourceView) -> set[tuple[int, int]]:
    """Device function bodies that use a hardware-wavefront name (or PTX lane register)."""
    return {
        (start, end)
        for start, end in view.device_ranges
        if any(
            view.tokens[k].text in HARDWARE_WAVE_NAMES
            or (view.tokens[k].kind is Kind.STRING and _PTX_LANE_RE.search(view.tokens[k].text))
            for k in range(start, end)
        )
    }


# What may stand between a function's ')' and its body's '{'.
_AFTER_PARAMETERS = frozenset({")", "const", "noexcept", "override", "final"})
# Operators that make a literal 32 count lanes in a launch shape.
_SHAPE_OPERATORS = frozenset({"/", "*", "%", "/=", "*="})


@dataclass(frozen=True)
class HostFunction:
    body: tuple[int, int]  # token indexes of its '{' and '}'
    launches: tuple[tuple[str, tuple[int, int]], ...]  # (kernel name, <<<...>>> token range)


def function_name(view: SourceView, brace: int) -> str:
    """The name of the function whose body opens at ``brace`` ('' when there is none)."""
    k = view.prev_sig(brace)
    while k is not None and view.tokens[k].text in _AFTER_PARAMETERS - {")"}:
        k = view.prev_sig(k)
    if view.text_of(k) != ")" or k is None or k not in view.match:
        return ""
    name = view.prev_sig(view.match[k])
    return view.text_of(name) if name is not None and view.tokens[name].kind is Kind.IDENT else ""


def host_functions(view: SourceView) -> list[HostFunction]:
    """The bodies of functions outside device code, with the kernels each launches."""
    device = view.device_ranges
    launches = find_launches(view)
    found: list[HostFunction] = []
    inside_until = -1
    for index in view.sig:
        if index <= inside_until or view.tokens[index].text != "{" or index not in view.match:
            continue
        if any(start <= index <= end for start, end in device) or not function_name(view, index):
            continue
        close = view.match[index]
        inside_until = close
        named = tuple(
            (
                _kernel_name(view, start, launch.open_config),
                (launch.open_config, launch.close_config),
            )
            for start, launch in launches.items()
            if index < start < close
        )
        found.append(HostFunction((index, close), named))
    return found


def _kernel_name(view: SourceView, start: int, open_config: int) -> str:
    """The unqualified kernel name of a launch (``ns::kernel<T><<<`` gives ``kernel``)."""
    name = ""
    for k in view.sig_in(start, open_config):
        if view.tokens[k].text == "<":
            break
        if view.tokens[k].kind is Kind.IDENT:
            name = view.tokens[k].text
    return name


def launch_shape_literals(view: SourceView, function: HostFunction) -> Iterator[int]:
    """Literal 32s that count lanes (``n / 32``, ``32 * x``) in a launch's grid or block shape:
    in those ``<<<...>>>`` arguments, or in the initializer of a variable named there. The
    dynamic shared-memory size is left out: per-32-lane sizes are an upper bound of what a kernel
    indexing by warpSize needs (``(threads / 32) * sizeof(T)`` slots for ``tid / warpSize``)."""
    start, end = function.body
    named: set[str] = set()
    places: list[tuple[int, int]] = []
    for _, (open_config, close_config) in function.launches:
        for first, last in view.arguments(open_config, close_config)[:2]:
            places.append((first, last))
            named |= {
                view.tokens[k].text
                for k in view.sig_in(first, last)
                if view.tokens[k].kind is Kind.IDENT
            }
    for k in view.sig_in(start, end):
        after = view.next_sig(k)
        if view.tokens[k].text in named and view.text_of(after) == "=" and after is not None:
            places.append(view.statement_bounds(after))
    seen: set[int] = set()
    for first, last in places:
        for k in view.sig_in(first, last):
            token = view.tokens[k]
            if k in seen or token.kind is not Kind.NUMBER or token.text.rstrip("uU") != "32":
                continue
            neighbours = {view.text_of(view.prev_sig(k)), view.text_of(view.next_sig(k))}
            if neighbours & _SHAPE_OPERATORS:
                seen.add(k)
                yield k


def launch_shape_message(function: HostFunction, mixing_kernels: set[str]) -> str:
    kernels = sorted({name for name, _ in function.launches if name in mixing_kernels})
    return (
        f"32 in the launch shape of {', '.join(kernels)}, which counts lanes with warpSize: on "
        "wave64 the kernel covers 64 lanes per warp and the shape 32; compute the shape from the "
        "device's warp size (hipDeviceAttributeWarpSize)"
    )


def lane_reduction_helpers(view: SourceView, starts: list[int]) -> list[tuple[str, int, bool]]:
    """Each device function: its name, line, and whether it is a 32-lane shuffle reduction (holds
    one of ``starts``, the tokens of hazards.shuffle_offsets, and does not use warpSize itself)."""
    mixing = mixing_ranges(view)
    return [
        (
            function_name(view, start),
            view.tokens[start].line,
            (start, end) not in mixing and any(start < k < end for k in starts),
        )
        for start, end in view.device_ranges
        if function_name(view, start)
    ]


def helper_calls(
    view: SourceView, mixing: set[tuple[int, int]], helpers: Mapping[str, str]
) -> Iterator[Finding]:
    """The first call of each 32-lane reduction helper in a function that uses warpSize."""
    for start, end in sorted(mixing):
        called: set[str] = set()
        for k in view.sig_in(start, end):
            name = view.tokens[k].text
            if name in helpers and name not in called and view.call_parens(k) is not None:
                called.add(name)
                yield Finding(
                    k,
                    "shfl-offset16",
                    f"{name} ({helpers[name]}) reduces over 32 lanes (shuffles from offset 16) "
                    "while this function counts lanes with warpSize: on a wave64 each half of the "
                    "wavefront gets its own result; reduce from warpSize / 2, or count lanes in 32s",
                )
