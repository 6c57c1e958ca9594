"""Which findings a translated file reports, and how: API findings (unsupported headers and
names, inline PTX, CUDA names left untranslated) joined with the wave-size hazards, filtered by
platform branch and ``hipify: allow(...)`` comments, each repeated construct reported once."""

from __future__ import annotations

import re
from collections.abc import Mapping

from .diagnostics import CODES_BY_NAME, Diagnostic, allowed_codes
from .finding import Finding
from .hazards import find_hazards
from .lexer import Kind
from .structure import SourceView
from .tables import (
    ASM_HINTS,
    CUDA_LOOKALIKES,
    HEADER_ADVICE,
    HEADERS,
    NO_IMAGE_TARGETS,
    PORTABLE_HEADER_NOTICES,
    PTX_ASYNC_COPY_WAITS,
    PTX_CALL_NAMESPACE,
    PTX_CALLS,
    PTX_IDIOMS,
    QUALIFIED_RENAMES,
    RENAMES,
    SOFTWARE_TEXTURE_FUNCTIONS,
    TEXTURE_FUNCTIONS,
    UNSUPPORTED_BY_NAME,
    UNSUPPORTED_TEMPLATES,
    VERSION_MACROS,
    library_rename,
)

# Findings about one construct that repeat through a file (every asm, every use of a macro that
# looks like CUDA): one diagnostic per (code, name) per file, at the first use, with a count.
ONCE_PER_FILE_CODES = frozenset(
    {
        "inline-asm",
        "unsupported-api",
        "untranslated",
        "texture-targets",
        "wmma-portable",
        "register-removed",
    }
)

_CUDA_NAME_RE = re.compile(r"^(?:cuda|cu)[A-Z]\w*$|^(?:CUDA|CU|CUDART)_\w+$|^cudnn\w+$")
_PTX_RE = re.compile(
    r"\b(?:mov|ld|st|add|sub|mul|mad|fma|cvt|shfl|bar|vote|atom|red|cp|mma|ldmatrix|prmt|bfe|bfi|lop3|setp|selp|membar|fence)\.[a-z0-9]"
)
_ASM_NAMES = frozenset({"asm", "__asm__", "__asm"})
_ASM_QUALIFIERS = frozenset({"volatile", "__volatile__", "goto", "inline"})


def is_cuda_std(view: SourceView, k: int) -> bool:
    """Whether tokens[k] ('cuda') starts ``cuda::std``."""
    colons = view.next_sig(k)
    if view.text_of(colons) != "::" or colons is None:
        return False
    return view.text_of(view.next_sig(colons)) == "std"


def report(
    view: SourceView,
    path: str,
    findings: list[Finding],
    full_names: frozenset[str],
    declared: frozenset[str],
    dead_ranges: tuple[tuple[int, int], ...] = (),
    lane_reductions: Mapping[str, str] | None = None,
) -> tuple[Diagnostic, ...]:
    """Findings as diagnostics: none in a CUDA-only branch (``#ifndef USE_ROCM``) or in a branch
    AMD never compiles (``dead_ranges``: PTX behind an architecture guard, arch_features.py), no
    inline-asm finding in a ROCm branch (that asm is AMD's), allowed codes dropped, and each
    repeated API finding (same code and name) reported once, at its first use, with a count."""
    hazards = find_hazards(view, full_names, lane_reductions or {})
    findings = [*hazards, *findings, *api_findings(view, declared)]
    findings = [
        f for f in findings if not any(start <= f.token < end for start, end in dead_ranges)
    ]
    allowed: dict[int, frozenset[str]] = {
        line: allowed_codes(" ".join(texts)) for line, texts in view.line_comments().items()
    }
    kept: list[Finding] = []
    for finding in sorted(findings, key=lambda f: f.token):
        platform = view.platform_at(finding.token)
        if platform == "cuda" or (platform == "rocm" and finding.code == "inline-asm"):
            continue
        if finding.code in allowed.get(view.tokens[finding.token].line, frozenset()):
            continue
        kept.append(finding)
    repeats: dict[tuple[str, str], list[Finding]] = {}
    for finding in kept:
        if finding.code in ONCE_PER_FILE_CODES:
            repeats.setdefault((finding.code, finding.key), []).append(finding)
    result: set[Diagnostic] = set()
    for finding in kept:
        message = finding.message
        group = repeats.get((finding.code, finding.key))
        if group is not None:
            if group[0] is not finding:
                continue
            if len(group) > 1:
                lines = sorted({view.tokens[f.token].line for f in group})
                shown = ", ".join(map(str, lines[:8])) + (", ..." if len(lines) > 8 else "")
                message += f" ({len(group)} in this file, lines {shown})"
        token = view.tokens[finding.token]
        result.add(Diagnostic(path, token.line, token.col, finding.code, message))
    for line, codes in allowed.items():
        unknown = sorted(c for c in codes if c not in CODES_BY_NAME)
        if unknown:
            result.add(
                Diagnostic(
                    path,
                    line,
                    1,
                    "bad-allow",
                    f"hipify: allow() names unknown code(s) {', '.join(unknown)}; known: wave32, "
                    + ", ".join(CODES_BY_NAME),
                )
            )
    return tuple(sorted(result))


def api_findings(view: SourceView, declared: frozenset[str]) -> list[Finding]:
    """Unsupported headers and names, inline PTX, CUDA names with no HIP mapping."""
    found: list[Finding] = []
    for _, sig in view.directives_named("include"):
        header = "".join(view.tokens[i].text for i in sig[2:]).strip('<>"')
        if header in PORTABLE_HEADER_NOTICES:
            found.append(Finding(sig[2], "wmma-portable", PORTABLE_HEADER_NOTICES[header], header))
        if header in HEADERS and HEADERS[header] is None:
            advice = HEADER_ADVICE.get(header, "guard its use with #ifndef USE_ROCM")
            found.append(
                Finding(
                    sig[2],
                    "unsupported-api",
                    f"{header} has no HIP counterpart: {advice}",
                    header,
                )
            )
    for k in view.sig:
        token = view.tokens[k]
        if token.kind is not Kind.IDENT:
            continue
        before = view.text_of(view.prev_sig(k))
        after = view.next_sig(k)
        after_text = view.text_of(after)
        name = token.text
        if name in _ASM_NAMES:
            asm = inline_asm(view, k)
            if asm is not None:
                found.append(asm)
            continue
        if before in (".", "->") or (
            k in view.directive_at and view.directive_at[k].name == "include"
        ):
            continue
        if (
            name in TEXTURE_FUNCTIONS
            and name not in SOFTWARE_TEXTURE_FUNCTIONS
            and after_text in ("(", "<")
            and name not in declared
        ):
            found.append(Finding(k, "texture-targets", texture_message(name), name))
        elif name in UNSUPPORTED_BY_NAME:
            found.append(
                Finding(
                    k,
                    "unsupported-api",
                    f"{name}: {UNSUPPORTED_BY_NAME[name].reason}",
                    UNSUPPORTED_BY_NAME[name].construct or name,
                )
            )
        elif name in UNSUPPORTED_TEMPLATES and after_text == "<" and before != "::":
            found.append(
                Finding(k, "unsupported-api", f"{name}<...>: {UNSUPPORTED_TEMPLATES[name]}", name)
            )
        elif (
            name == "cuda"
            and after_text == "::"
            and not is_cuda_std(view, k)
            and not (  # thrust::cuda:: is rocThrust's thrust::hip::, translated
                before == "::"
                and (view.text_of(view.prev_sig(view.prev_sig(k) or k)), name) in QUALIFIED_RENAMES
            )
        ):
            found.append(
                Finding(
                    k,
                    "unsupported-api",
                    "cuda:: (libcu++) has no HIP counterpart in the HIP runtime; use std:: or "
                    "guard it with #ifndef USE_ROCM",
                    "cuda::",
                )
            )
        elif (
            _CUDA_NAME_RE.match(name)
            and name not in RENAMES
            and name not in VERSION_MACROS
            and library_rename(name) is None
            and name not in declared
            and name not in CUDA_LOOKALIKES
        ):
            found.append(Finding(k, "untranslated", f"{name} has no HIP mapping; left as is", name))
    return found


def texture_message(name: str) -> str:
    """What a texture or surface fetch means for the targets without image instructions."""
    return (
        f"{name} reads through the texture unit, which {', '.join(NO_IMAGE_TARGETS)} (MI300, "
        "MI350) lack: HIP marks it unavailable there, so the compile for those targets fails "
        "(the others build). The compat layer fetches tex1D, tex1Dfetch, tex2D, tex3D, "
        "tex1DLayered and tex2DLayered there in software; for this one read the data through a "
        "pointer (a plain load or __ldg), or leave those targets out of the matrix "
        "(arch_matrix.toml, the project's `matrix`)"
    )


def _asm_opening(view: SourceView, k: int) -> int | None:
    """The index of the parenthesis that opens the asm statement at k (after its qualifiers),
    where it has a matching one."""
    after = view.next_sig(k)
    while after is not None and view.tokens[after].text in _ASM_QUALIFIERS:
        after = view.next_sig(after)
    if view.text_of(after) != "(" or after is None or after not in view.match:
        return None
    return after


def _asm_operands(view: SourceView, k: int) -> tuple[list[list[int]], str, int] | None:
    """The asm statement at k split at its colons (the token indices of its template, outputs,
    inputs and clobbers), its template as one instruction text with the spacing made regular,
    and the index of its closing parenthesis; None where the template is not string literals."""
    opening = _asm_opening(view, k)
    if opening is None:
        return None
    close = view.match[opening]
    parts: list[list[int]] = [[]]
    for index in view.sig_in(opening + 1, close):
        if view.tokens[index].text in (":", "::"):  # `::` is two empty operand lists
            parts.extend([] for _ in range(view.tokens[index].text.count(":")))
        else:
            parts[-1].append(index)
    if not parts[0] or any(view.tokens[i].kind is not Kind.STRING for i in parts[0]):
        return None
    text = "".join(view.tokens[i].text[1:-1] for i in parts[0]).replace("\\n", " ")
    instruction = " ".join(text.replace(",", ", ").split()).replace(" ,", ",")
    return parts, instruction, close


def ptx_idiom(view: SourceView, k: int) -> tuple[str, tuple[int, int] | None, int] | None:
    """For ``asm("<instruction>" : "=r"(x))`` at k with the instruction in PTX_IDIOMS: the HIP
    expression, the token range of ``x`` and the index of the asm's closing parenthesis; for an
    operand-free asynchronous-copy wait (PTX_ASYNC_COPY_WAITS), a no-op and no output."""
    found = _asm_operands(view, k)
    if found is None:
        return None
    parts, instruction, close = found
    if not any(parts[1:]) and PTX_ASYNC_COPY_WAITS.fullmatch(instruction):
        return "((void)0)", None, close
    if len(parts) < 2 or any(parts[2:]):
        return None
    output = parts[1]
    hip = PTX_IDIOMS.get(instruction if instruction.endswith(";") else instruction + ";")
    if hip is None or len(output) < 3 or view.tokens[output[0]].text != '"=r"':
        return None
    if view.tokens[output[1]].text != "(" or view.match.get(output[1]) != output[-1]:
        return None
    return hip, (output[1] + 1, output[-1]), close


def ptx_call(view: SourceView, k: int) -> tuple[str, list[tuple[int, int]], int] | None:
    """For an asm at k whose instruction and operand constraints are a 16-bit idiom of
    PTX_CALLS: the compat function, the token range of each operand's expression (outputs, then
    inputs) and the index of the asm's closing parenthesis."""
    found = _asm_operands(view, k)
    if found is None:
        return None
    parts, instruction, close = found
    if len(parts) > 3 and parts[3]:
        return None  # clobbers: not one of the idioms
    constraints: list[str] = []
    ranges: list[tuple[int, int]] = []
    for part in parts[1:3]:
        position = 0
        while position < len(part):
            constraint, opening = part[position], part[position + 1 : position + 2]
            if view.tokens[constraint].kind is not Kind.STRING or not opening:
                return None
            if view.tokens[opening[0]].text != "(" or opening[0] not in view.match:
                return None
            closing = view.match[opening[0]]
            constraints.append(view.tokens[constraint].text[1:-1])
            ranges.append((opening[0] + 1, closing))
            position = part.index(closing) + 1
            if position < len(part):
                if view.tokens[part[position]].text != ",":
                    return None
                position += 1
    instruction = instruction.replace("{ ", "{").replace(" }", "}")
    if not instruction.endswith(";"):
        instruction += ";"
    name = PTX_CALLS.get((instruction, tuple(constraints)))
    if name is None:
        return None
    return PTX_CALL_NAMESPACE + name, ranges, close


def inline_asm(view: SourceView, k: int) -> Finding | None:
    """A finding for inline PTX at k (asm in device code, or asm whose text reads as PTX) that
    is not one of the exact idioms the translation rewrites (PTX_IDIOMS)."""
    if ptx_idiom(view, k) is not None or ptx_call(view, k) is not None:
        return None
    after = _asm_opening(view, k)
    if after is None:
        return None
    strings = [
        view.tokens[i].text
        for i in range(after, view.match[after])
        if view.tokens[i].kind is Kind.STRING
    ]
    code = " ".join(strings)
    if not view.in_device_code(k) and not _PTX_RE.search(code) and "%%" not in code:
        return None
    hints = [
        f"{reg} -> {hip}"
        for reg, hip in ASM_HINTS.items()
        if re.search(re.escape(reg) + r"\b", code)
    ]
    hint = f"; HIP has {', '.join(hints)}" if hints else "; rewrite it with HIP intrinsics"
    snippet = strings[0] if strings else ""
    return Finding(
        k,
        "inline-asm",
        f"inline PTX {snippet} cannot be translated{hint}, or keep it for NVIDIA only inside "
        "#ifndef USE_ROCM (the build defines USE_ROCM on AMD)",
    )
