"""What goes above a translated text: the header line, the includes and macros it needs, a #line.

nvcc includes cuda_runtime.h implicitly and hipcc does not, so a translation that uses HIP gets
the HIP runtime include; it gets the compat layer's headers where it calls what they add,
HIP_ENABLE_WARP_SYNC_BUILTINS where tile votes need it, and the CUDA version macros the source
uses. Each is inserted only when absent, and an earlier translation's prelude is recognised, so
translating a translation gives it back unchanged. A ``#line`` directive after the prelude keeps
the compiler's messages on the CUDA source's lines, as hipify's findings are (a compile failure
is matched to the finding on its line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .finding import Finding
from .results import GENERATED_PREFIX
from .structure import SourceView
from .tables import (
    COMPAT_HEADER,
    HIP_RUNTIME_HEADER,
    HIP_RUNTIME_HEADERS,
    LIBRARY_PRELUDE,
    TEXTURE_HEADER,
    VERSION_MACROS,
    WARP_SYNC_MACRO,
)

# An earlier translation's prelude: its lines and the #line after them (not the #line that
# follows a library prelude include, which the translation puts before a library's include)
_LINE_AFTER_PRELUDE_RE = re.compile(
    rf"(?:#[ \t]*(?:include|define)[^\n]*\n)*(?<!#include <{re.escape(LIBRARY_PRELUDE)}>\n)#line \d+\n"
)
_PRAGMA_ONCE_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*\n", re.MULTILINE)
# What only device code spells (qualifiers and the launch, built-in variables and types): a file
# with one needs the HIP runtime header even where nothing in it was renamed.
_DEVICE_MARKERS = frozenset(
    {"__global__", "__device__", "__shared__", "__constant__", "__syncthreads", "<<<"}
    | {"threadIdx", "blockIdx", "blockDim", "gridDim", "dim3"}
)


@dataclass(frozen=True)
class PreludeNeeds:
    """What the translation of one file found it needs above its text."""

    translated: bool  # something besides an include was translated
    compat: bool  # it calls what kernelpack_hip_compat.h adds
    texture: bool  # it fetches textures through kernelpack_hip_texture.h
    version_macros: frozenset[str]  # the CUDA version macros it uses
    warp_sync_member: int | None  # the token of a tile vote that needs WARP_SYNC_MACRO


def insert_prelude(
    view: SourceView, body: str, header: str, needs: PreludeNeeds
) -> tuple[str, Finding | None]:
    """``body`` (the translation of ``view``) with the generated-file ``header`` line and what
    ``needs`` asks for above it, each only when absent, the CUDA version macros as the release
    the compat layer stands for (tables.CUDA_RELEASE_SEEN), then a ``#line`` directive; and the
    finding that says why WARP_SYNC_MACRO was defined, when it was."""
    lines: list[str] = []
    finding = None
    defined = any(
        d.name == "define" and WARP_SYNC_MACRO in view.range_text(d.start, d.end).split()
        for d in view.directives
    )
    if needs.warp_sync_member is not None and not defined:
        lines.append(f"#define {WARP_SYNC_MACRO}\n")
        finding = Finding(
            needs.warp_sync_member,
            "warp-sync-builtins",
            f"{WARP_SYNC_MACRO} defined: HIP 6.4 declares cooperative-groups tile votes only "
            "behind it (they build their own 64-bit masks)",
        )
    if _needs_runtime_include(view, body, needs.translated):
        lines.append(f"#include <{HIP_RUNTIME_HEADER}>\n")
    for cuda_name in sorted(needs.version_macros):
        macro, value = VERSION_MACROS[cuda_name]
        lines.append(f"#define {macro} {value}\n")
    if needs.compat and f"<{COMPAT_HEADER}>" not in body and f'"{COMPAT_HEADER}"' not in body:
        lines.append(f"#include <{COMPAT_HEADER}>\n")
    if needs.texture and f"<{TEXTURE_HEADER}>" not in body:
        lines.append(f"#include <{TEXTURE_HEADER}>\n")
    if not lines and not header:
        return body, finding
    prelude = "".join(lines)
    offset = 0
    if body.startswith(GENERATED_PREFIX):
        offset = body.index("\n") + 1 if "\n" in body else len(body)
    first = view.directives[0] if view.directives else None
    if first is not None and view.range_text(first.start, first.end) == "# pragma once":
        once = _PRAGMA_ONCE_RE.search(body, offset)
        if once is not None:
            offset = once.end()
    if not lines and _LINE_AFTER_PRELUDE_RE.match(body, offset):
        return header + body, finding  # an earlier translation's prelude and #line are there
    line = body.count("\n", 0, offset) + 1 - (0 if header else 1)
    return header + body[:offset] + prelude + f"#line {line}\n" + body[offset:], finding


def _needs_runtime_include(view: SourceView, body: str, translated: bool) -> bool:
    uses_hip = translated or any(view.tokens[i].text in _DEVICE_MARKERS for i in view.sig)
    if not uses_hip:
        return False
    return not any(f"<{h}>" in body or f'"{h}"' in body for h in HIP_RUNTIME_HEADERS)
