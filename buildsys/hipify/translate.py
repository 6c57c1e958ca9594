"""CUDA -> HIP translation of one source text: pure, no file I/O (the builder calls it directly).

The translator walks the token stream (lexer.py) and replaces whole identifier tokens by the
tables (tables.py); calls whose arguments change shape (warp intrinsics, kernel-pointer
arguments, launches) are rewritten argument by argument, recursively, so nested calls translate
too. Diagnostics point at the CUDA source's line and column. Output is deterministic and
translating it again gives it back unchanged: nothing the translator emits is a CUDA name, the
inserted include and macro are only inserted when absent, and the generated-file header line is
kept when the input already starts with one.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

from .diagnostics import CODES_BY_NAME, Diagnostic, Severity, allowed_codes
from .hazards import Finding, MaskKind, classify_mask, find_hazards, full_mask_names
from .lexer import Kind
from .structure import Directive, SourceView
from .tables import (
    ACTIVEMASK_REPLACEMENT,
    ASM_HINTS,
    BALLOT_NAMES,
    BALLOT_WIDENING,
    CALL_REWRITES,
    CG_SYNC_MEMBERS,
    COMPAT_CG_MEMBERS,
    COMPAT_FUNCTIONS,
    COMPAT_HEADER,
    CUDA_ARCH_MACRO,
    CUDA_ARCH_REPLACEMENT,
    CUDA_LOOKALIKES,
    HEADER_ADVICE,
    HEADERS,
    HIP_DEVICE_PASS_MACRO,
    HIP_RUNTIME_HEADER,
    HIP_RUNTIME_HEADERS,
    KERNEL_POINTER_ARG,
    RENAMES,
    SYNCWARP_REPLACEMENT,
    UNSUPPORTED_BY_NAME,
    UNSUPPORTED_TEMPLATES,
    VERSION_MACROS,
    WARP_BY_NAME,
    WARP_SYNC_MACRO,
    library_rename,
)

GENERATED_PREFIX = "// hipify: generated from "
# Findings about one construct that repeat through a file (every asm, every use of a macro that
# looks like CUDA): one diagnostic per (code, name) per file, at the first use, with a count.
ONCE_PER_FILE_CODES = frozenset({"inline-asm", "unsupported-api", "untranslated"})

_CUDA_NAME_RE = re.compile(r"^(?:cuda|cu)[A-Z]\w*$|^(?:CUDA|CU|CUDART)_\w+$|^cudnn\w+$")
_PTX_RE = re.compile(
    r"\b(?:mov|ld|st|add|sub|mul|mad|fma|cvt|shfl|bar|vote|atom|red|cp|mma|ldmatrix|prmt|bfe|bfi|lop3|setp|selp|membar|fence)\.[a-z0-9]"
)
_PRAGMA_ONCE_RE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[^\n]*\n", re.MULTILINE)
_ASM_NAMES = frozenset({"asm", "__asm__", "__asm"})
_ASM_QUALIFIERS = frozenset({"volatile", "__volatile__", "goto", "inline"})
_NOT_TYPES = frozenset(
    {
        "return",
        "else",
        "case",
        "throw",
        "new",
        "delete",
        "sizeof",
        "do",
        "goto",
        "co_return",
        "co_await",
        "co_yield",
        "typeid",
        "alignof",
        "decltype",
        "if",
        "while",
        "for",
        "switch",
        "defined",
        "and",
        "or",
        "not",
    }
)
_DEVICE_MARKERS = frozenset(
    {
        "__global__",
        "__device__",
        "__shared__",
        "__constant__",
        "threadIdx",
        "blockIdx",
        "blockDim",
        "gridDim",
        "__syncthreads",
        "dim3",
        "<<<",
    }
)
_CG_GROUP_MAKERS = frozenset(
    {"tiled_partition", "coalesced_threads", "thread_block_tile", "coalesced_group"}
)


@dataclass(frozen=True)
class HipifyOptions:
    """How to translate. launch_macro: rewrite ``k<<<g, b, s, st>>>(args)`` as
    ``hipLaunchKernelGGL(k, g, b, s, st, args)`` (HIP compiles <<<...>>> too, so the default keeps it)."""

    launch_macro: bool = False


@dataclass(frozen=True, order=True)
class Conversion:
    kind: str
    cuda: str
    hip: str
    count: int


@dataclass(frozen=True)
class HipifyStats:
    """What hipify-perl's --print-stats reports: references converted by kind and name, lines."""

    lines: int
    conversions: tuple[Conversion, ...]

    @property
    def converted(self) -> int:
        return sum(c.count for c in self.conversions)

    def by_kind(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for conversion in self.conversions:
            totals[conversion.kind] += conversion.count
        return dict(sorted(totals.items()))

    def as_json(self) -> dict[str, object]:
        return {
            "lines": self.lines,
            "converted": self.converted,
            "by_kind": self.by_kind(),
            "by_name": [
                {"kind": c.kind, "cuda": c.cuda, "hip": c.hip, "count": c.count}
                for c in self.conversions
            ],
        }


@dataclass(frozen=True)
class HipifyResult:
    text: str
    diagnostics: tuple[Diagnostic, ...]
    stats: HipifyStats

    def count(self, severity: Severity) -> int:
        return sum(1 for d in self.diagnostics if d.severity is severity)

    @property
    def has_errors(self) -> bool:
        return self.count(Severity.ERROR) > 0


def source_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def generated_header(path: str, text: str) -> str:
    """The first line of every generated file: which source, and which version of it."""
    return f"{GENERATED_PREFIX}{path} sha256 {source_sha256(text)}\n"


def hipify_source(text: str, path: str, *, options: HipifyOptions | None = None) -> HipifyResult:
    """Translate one CUDA source. ``path`` names it in diagnostics and in the header line."""
    view = SourceView(text)
    translator = _Translator(view, path, options or HipifyOptions())
    body = translator.emit(0, len(view.tokens))
    body = translator.insert_prelude(body)
    if not text.startswith(GENERATED_PREFIX):
        body = generated_header(path, text) + body
    diagnostics = translator.diagnostics()
    conversions = tuple(
        sorted(Conversion(kind, cuda, hip, n) for (kind, cuda, hip), n in translator.counts.items())
    )
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    return HipifyResult(body, diagnostics, HipifyStats(lines, conversions))


@dataclass
class _Translator:
    view: SourceView
    path: str
    options: HipifyOptions
    counts: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    warp_sync_member: int | None = None
    uses_compat: bool = False

    def __post_init__(self) -> None:
        self.full_names = full_mask_names(self.view)
        self.declared = _declared_names(self.view)
        self.group_variables = _cg_group_variables(self.view)
        self.launches = _find_launches(self.view) if self.options.launch_macro else {}
        self.cg_aliases = _namespace_aliases(self.view, "cooperative_groups")

    # ---- emission -----------------------------------------------------------------------

    def emit(self, lo: int, hi: int, *, launch_at_start: bool = True) -> str:
        """The translation of tokens[lo:hi] (a launch starting at lo kept as is if not launch_at_start)."""
        view = self.view
        out: list[str] = []
        k = lo
        while k < hi:
            token = view.tokens[k]
            directive = view.directive_at.get(k)
            if directive is not None and directive.start == k and directive.name == "include":
                out.append(self._include(directive))
                k = directive.end
                continue
            if k in self.launches and (launch_at_start or k != lo):
                text, k = self._launch(k)
                out.append(text)
                continue
            if token.kind is Kind.IDENT:
                rewritten = self._identifier(k)
                if rewritten is not None:
                    out.append(rewritten[0])
                    k = rewritten[1]
                    continue
            out.append(token.text)
            k += 1
        return "".join(out)

    def _count(self, kind: str, cuda: str, hip: str) -> None:
        self.counts[(kind, cuda, hip)] += 1

    def _identifier(self, k: int) -> tuple[str, int] | None:
        view = self.view
        name = view.tokens[k].text
        before = view.prev_sig(k)
        before_text = view.text_of(before)
        if before_text in (".", "->"):
            self._note_group_member(k, before)
            return None
        if name == "cuda" and self._is_cuda_std(k) and not self._in_user_scope(before):
            # libcu++'s cuda::std mirrors the standard library, whose constexpr parts
            # (numeric_limits, ...) HIP compiles in device code.
            std = view.next_sig(view.next_sig(k) or k)
            self._count("namespace", "cuda::std", "std")
            return "std", (std or k) + 1
        if before_text == "::" and before is not None:
            scope = view.prev_sig(before)
            if scope is not None and view.tokens[scope].kind is Kind.IDENT:
                if name in COMPAT_CG_MEMBERS and self._is_cg_scope(view.tokens[scope].text):
                    self.uses_compat = True
                return None  # a member of a user's namespace or class, not the CUDA API
        parens = view.call_parens(k)
        intrinsic = WARP_BY_NAME.get(name)
        if intrinsic is not None and parens is not None:
            return self._warp_call(k, intrinsic.hip, intrinsic.mask_arg, parens)
        if name == "__activemask" and parens is not None and not view.arguments(*parens):
            self._count("warp", name, ACTIVEMASK_REPLACEMENT)
            return ACTIVEMASK_REPLACEMENT, parens[1] + 1
        if name == "__syncwarp" and parens is not None:
            self._count("warp", name, "__builtin_amdgcn_wave_barrier")
            return SYNCWARP_REPLACEMENT, parens[1] + 1
        if name in BALLOT_WIDENING and parens is not None and self._has_ballot(*parens):
            wide = BALLOT_WIDENING[name]
            self._count("warp", name, wide)
            return wide + self.emit(k + 1, parens[1] + 1), parens[1] + 1
        if name in CALL_REWRITES and parens is not None:
            template = CALL_REWRITES[name]
            args = [self.emit(start, end).strip() for start, end in view.arguments(*parens)]
            if len(args) == template.count("{"):
                self._count("device_function", name, template.split("(", 1)[0])
                return template.format(*args), parens[1] + 1
        if name in VERSION_MACROS and not self._in_conditional(k):
            self._count("version", name, VERSION_MACROS[name])
            return VERSION_MACROS[name], k + 1
        if name == CUDA_ARCH_MACRO:
            if self._tests_definition(k):
                self._count("define", name, HIP_DEVICE_PASS_MACRO)
                return HIP_DEVICE_PASS_MACRO, k + 1
            self.uses_compat = True
            self._count("define", name, CUDA_ARCH_REPLACEMENT)
            return CUDA_ARCH_REPLACEMENT, k + 1
        if name in COMPAT_FUNCTIONS and parens is not None:
            self.uses_compat = True
        rename = RENAMES.get(name)
        if rename is not None:
            self._count(rename.kind, name, rename.hip)
            position = KERNEL_POINTER_ARG.get(rename.hip)
            if position is not None and parens is not None:
                return self._kernel_pointer_call(rename.hip, k, position, parens)
            return rename.hip, k + 1
        library = library_rename(name)
        if library is not None:
            self._count("library", name, library)
            return library, k + 1
        return None

    def _warp_call(
        self, k: int, hip: str, mask_arg: int, parens: tuple[int, int]
    ) -> tuple[str, int]:
        view = self.view
        open_index, close_index = parens
        args = view.arguments(open_index, close_index)
        name = view.tokens[k].text
        if len(args) <= mask_arg + 1:
            return name + self.emit(k + 1, close_index + 1), close_index + 1
        mask_start, mask_end = args[mask_arg]
        kind, _ = classify_mask(view, mask_start, mask_end, self.full_names)
        if kind is MaskKind.VARIABLE:
            mask_sig = view.sig_in(mask_start, mask_end)
            self.findings.append(
                Finding(
                    mask_sig[0],
                    "mask-dropped",
                    f"lane mask '{view.range_text(mask_start, mask_end)}' of {name} dropped: "
                    f"{hip} acts on the lanes that are active, which is what an active-lane mask asks for",
                )
            )
        kept = [self.emit(start, end) for n, (start, end) in enumerate(args) if n != mask_arg]
        kept[0] = kept[0].lstrip()
        self._count("warp", name, hip)
        return hip + self.emit(k + 1, open_index) + "(" + ",".join(kept) + ")", close_index + 1

    def _kernel_pointer_call(
        self, hip: str, k: int, position: int, parens: tuple[int, int]
    ) -> tuple[str, int]:
        open_index, close_index = parens
        pieces = [
            self.emit(start, end) for start, end in self.view.arguments(open_index, close_index)
        ]
        if position < len(pieces):
            piece = pieces[position]
            stripped = piece.strip()
            if not stripped.startswith(("reinterpret_cast", "(const void", "(void", "static_cast")):
                lead = piece[: len(piece) - len(piece.lstrip())]
                trail = piece[len(piece.rstrip()) :]
                pieces[position] = f"{lead}reinterpret_cast<const void*>({stripped}){trail}"
        return hip + self.emit(k + 1, open_index) + "(" + ",".join(pieces) + ")", close_index + 1

    def _has_ballot(self, open_index: int, close_index: int) -> bool:
        tokens = self.view.tokens
        return any(tokens[i].text in BALLOT_NAMES for i in range(open_index, close_index))

    def _in_user_scope(self, before: int | None) -> bool:
        """Whether the token before a name is the '::' of ``scope::`` (a user's namespace)."""
        if self.view.text_of(before) != "::" or before is None:
            return False
        scope = self.view.prev_sig(before)
        return (
            scope is not None
            and self.view.tokens[scope].kind is Kind.IDENT
            and self.view.tokens[scope].text not in _NOT_TYPES
        )

    def _is_cuda_std(self, k: int) -> bool:
        """Whether tokens[k] ('cuda') starts ``cuda::std``."""
        colons = self.view.next_sig(k)
        if self.view.text_of(colons) != "::" or colons is None:
            return False
        return self.view.text_of(self.view.next_sig(colons)) == "std"

    def _is_cg_scope(self, scope: str) -> bool:
        """Whether ``scope`` names cooperative_groups (itself or a namespace alias of it)."""
        return scope == "cooperative_groups" or scope in self.cg_aliases

    def _in_conditional(self, k: int) -> bool:
        directive = self.view.directive_at.get(k)
        return directive is not None and directive.name in ("if", "elif", "ifdef", "ifndef")

    def _tests_definition(self, k: int) -> bool:
        """Whether __CUDA_ARCH__ at k is tested for being defined (#ifdef, defined(...))."""
        directive = self.view.directive_at.get(k)
        if directive is None:
            return False
        if directive.name in ("ifdef", "ifndef"):
            return True
        before = self.view.prev_sig(k)
        if self.view.text_of(before) == "(" and before is not None:
            before = self.view.prev_sig(before)
        return self.view.text_of(before) == "defined"

    def _note_group_member(self, k: int, dot: int | None) -> None:
        """Remember a cooperative-groups vote member call (tile.ballot(p)) that HIP guards."""
        view = self.view
        if view.tokens[k].text not in CG_SYNC_MEMBERS or view.call_parens(k) is None or dot is None:
            return
        owner = view.prev_sig(dot)
        owner_text = view.text_of(owner)
        is_group = owner_text in self.group_variables
        if owner_text == ")" and owner is not None:
            start, end = view.statement_bounds(owner)
            is_group = any(view.tokens[i].text in _CG_GROUP_MAKERS for i in range(start, end))
        if is_group and self.warp_sync_member is None:
            self.warp_sync_member = k

    def _include(self, directive: Directive) -> str:
        view = self.view
        sig = view.sig_in(directive.start, directive.end)
        text = "".join(t.text for t in view.tokens[directive.start : directive.end])
        if len(sig) < 3:
            return text
        first = view.tokens[sig[2]]
        if first.kind is Kind.STRING and first.text.startswith('"'):
            header, open_text, close_text, last = first.text[1:-1], '"', '"', sig[2]
        elif first.text == "<":
            closing = next((i for i in sig[3:] if view.tokens[i].text == ">"), None)
            if closing is None:
                return text
            header = "".join(t.text for t in view.tokens[sig[2] + 1 : closing])
            open_text, close_text, last = "<", ">", closing
        else:
            return text
        target = HEADERS.get(header)
        if target is None:
            return text
        self._count("include", header, target)
        head = "".join(t.text for t in view.tokens[directive.start : sig[2]])
        tail = "".join(t.text for t in view.tokens[last + 1 : directive.end])
        return f"{head}{open_text}{target}{close_text}{tail}"

    def _launch(self, k: int) -> tuple[str, int]:
        launch = self.launches[k]
        name = self.emit(k, launch.open_config, launch_at_start=False).strip()
        if "<" in name:
            name = f"HIP_KERNEL_NAME({name})"
        config = [
            self.emit(start, end).strip()
            for start, end in self.view.arguments(launch.open_config, launch.close_config)
        ]
        config += ["0"] * (4 - len(config))
        kernel_args = self.emit(launch.open_args + 1, launch.close_args).strip()
        self._count("kernel_launch", "<<<>>>", "hipLaunchKernelGGL")
        parts = [name, *config] + ([kernel_args] if kernel_args else [])
        return "hipLaunchKernelGGL(" + ", ".join(parts) + ")", launch.close_args + 1

    # ---- what goes above the translated text ----------------------------------------------

    def insert_prelude(self, body: str) -> str:
        """Add the HIP runtime include (nvcc includes cuda_runtime.h implicitly, hipcc does not)
        and HIP_ENABLE_WARP_SYNC_BUILTINS where tile votes need it, each only when absent."""
        view = self.view
        lines: list[str] = []
        defined = any(
            d.name == "define" and WARP_SYNC_MACRO in view.range_text(d.start, d.end).split()
            for d in view.directives
        )
        if self.warp_sync_member is not None and not defined:
            lines.append(f"#define {WARP_SYNC_MACRO}\n")
            self.findings.append(
                Finding(
                    self.warp_sync_member,
                    "warp-sync-builtins",
                    f"{WARP_SYNC_MACRO} defined: HIP 6.4 declares cooperative-groups tile votes only "
                    "behind it (they build their own 64-bit masks)",
                )
            )
        if self._needs_runtime_include(body):
            lines.append(f"#include <{HIP_RUNTIME_HEADER}>\n")
        if (
            self.uses_compat
            and f"<{COMPAT_HEADER}>" not in body
            and f'"{COMPAT_HEADER}"' not in body
        ):
            lines.append(f"#include <{COMPAT_HEADER}>\n")
        if not lines:
            return body
        prelude = "".join(lines)
        offset = 0
        if body.startswith(GENERATED_PREFIX):
            offset = body.index("\n") + 1 if "\n" in body else len(body)
        first = view.directives[0] if view.directives else None
        if first is not None and view.range_text(first.start, first.end) == "# pragma once":
            once = _PRAGMA_ONCE_RE.search(body, offset)
            if once is not None:
                offset = once.end()
        return body[:offset] + prelude + body[offset:]

    def _needs_runtime_include(self, body: str) -> bool:
        view = self.view
        uses_hip = any(kind != "include" for kind, _, _ in self.counts) or any(
            view.tokens[i].text in _DEVICE_MARKERS for i in view.sig
        )
        if not uses_hip:
            return False
        return not any(f"<{h}>" in body or f'"{h}"' in body for h in HIP_RUNTIME_HEADERS)

    # ---- diagnostics --------------------------------------------------------------------

    def diagnostics(self) -> tuple[Diagnostic, ...]:
        """Findings as diagnostics: none in a CUDA-only branch (``#ifndef USE_ROCM``), no
        inline-asm finding in a ROCm branch (that asm is AMD's), allowed codes dropped, and each
        repeated API finding (same code and name) reported once, at its first use, with a count."""
        view = self.view
        findings = [*find_hazards(view, self.full_names), *self.findings, *self._api_findings()]
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
            result.add(Diagnostic(self.path, token.line, token.col, finding.code, message))
        for line, codes in allowed.items():
            unknown = sorted(c for c in codes if c not in CODES_BY_NAME)
            if unknown:
                result.add(
                    Diagnostic(
                        self.path,
                        line,
                        1,
                        "bad-allow",
                        f"hipify: allow() names unknown code(s) {', '.join(unknown)}; known: wave32, "
                        + ", ".join(CODES_BY_NAME),
                    )
                )
        return tuple(sorted(result))

    def _api_findings(self) -> list[Finding]:
        view = self.view
        found: list[Finding] = []
        for directive in view.directives:
            if directive.name != "include":
                continue
            sig = view.sig_in(directive.start, directive.end)
            header = "".join(view.tokens[i].text for i in sig[2:]).strip('<>"')
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
                asm = self._inline_asm(k)
                if asm is not None:
                    found.append(asm)
                continue
            if before in (".", "->") or (
                k in view.directive_at and view.directive_at[k].name == "include"
            ):
                continue
            if name in UNSUPPORTED_BY_NAME:
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
                    Finding(
                        k, "unsupported-api", f"{name}<...>: {UNSUPPORTED_TEMPLATES[name]}", name
                    )
                )
            elif name == "cuda" and after_text == "::" and not self._is_cuda_std(k):
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
                name in VERSION_MACROS
                and k in view.directive_at
                and view.directive_at[k].name in ("if", "elif")
            ):
                found.append(
                    Finding(
                        k,
                        "untranslated",
                        f"{name} tested in #{view.directive_at[k].name}: HIP has no CUDA version, so "
                        "the test sees 0 under hipcc; choose the branch for HIP explicitly",
                        name,
                    )
                )
            elif (
                _CUDA_NAME_RE.match(name)
                and name not in RENAMES
                and name not in VERSION_MACROS
                and library_rename(name) is None
                and name not in self.declared
                and name not in CUDA_LOOKALIKES
            ):
                found.append(
                    Finding(k, "untranslated", f"{name} has no HIP mapping; left as is", name)
                )
        return found

    def _inline_asm(self, k: int) -> Finding | None:
        view = self.view
        after = view.next_sig(k)
        while after is not None and view.tokens[after].text in _ASM_QUALIFIERS:
            after = view.next_sig(after)
        if view.text_of(after) != "(" or after is None or after not in view.match:
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


@dataclass(frozen=True)
class _Launch:
    open_config: int  # '<<<'
    close_config: int  # '>>>'
    open_args: int
    close_args: int


def _find_launches(view: SourceView) -> dict[int, _Launch]:
    """Kernel launches ``name<<<...>>>(...)`` by the token index where the kernel name starts."""
    launches: dict[int, _Launch] = {}
    for index in view.sig:
        if view.tokens[index].text != "<<<":
            continue
        close_config = next(
            (i for i in view.sig if i > index and view.tokens[i].text == ">>>"), None
        )
        if close_config is None:
            continue
        parens = view.call_parens(close_config)
        start = _kernel_name_start(view, index)
        if parens is None or start is None:
            continue
        launches[start] = _Launch(index, close_config, parens[0], parens[1])
    return launches


def _kernel_name_start(view: SourceView, launch: int) -> int | None:
    k = view.prev_sig(launch)
    if k is None:
        return None
    if view.tokens[k].text == ">":
        depth = 0
        while k is not None:
            text = view.tokens[k].text
            if text == ">":
                depth += 1
            elif text == "<":
                depth -= 1
                if depth == 0:
                    break
            k = view.prev_sig(k)
        if k is None:
            return None
        k = view.prev_sig(k)
    if k is None or view.tokens[k].kind is not Kind.IDENT:
        return None
    while True:
        scope = view.prev_sig(k)
        if view.text_of(scope) != "::" or scope is None:
            return k
        qualifier = view.prev_sig(scope)
        if qualifier is None or view.tokens[qualifier].kind is not Kind.IDENT:
            return scope
        k = qualifier


def _declared_names(view: SourceView) -> frozenset[str]:
    """Names the file itself defines (macros, functions, variables, types): not left-over CUDA API."""
    names: set[str] = set()
    for directive in view.directives:
        if directive.name == "define":
            sig = view.sig_in(directive.start, directive.end)
            if len(sig) >= 3:
                names.add(view.tokens[sig[2]].text)
    for pos in range(1, len(view.sig) - 1):
        token = view.tokens[view.sig[pos]]
        if token.kind is not Kind.IDENT:
            continue
        before = view.tokens[view.sig[pos - 1]]
        after = view.tokens[view.sig[pos + 1]].text
        type_like = (
            before.kind is Kind.IDENT and before.text not in _NOT_TYPES
        ) or before.text in ("*", "&", ">")
        if type_like and after in ("(", "=", ";", ",", "[", ")", "{"):
            names.add(token.text)
    return frozenset(names)


def _namespace_aliases(view: SourceView, namespace: str) -> frozenset[str]:
    """Names declared as ``namespace alias = <namespace>;`` (``namespace cg = cooperative_groups``)."""
    aliases: set[str] = set()
    for pos in range(len(view.sig) - 3):
        texts = [view.tokens[view.sig[pos + n]].text for n in range(4)]
        if texts[0] == "namespace" and texts[2] == "=" and texts[3] == namespace:
            aliases.add(texts[1])
    return frozenset(aliases)


def _cg_group_variables(view: SourceView) -> frozenset[str]:
    """Variables holding cooperative-groups tiles or coalesced groups."""
    names: set[str] = set()
    for index in view.sig:
        if view.tokens[index].text not in _CG_GROUP_MAKERS:
            continue
        start, end = view.statement_bounds(index)
        sig = view.sig_in(start, end)
        texts = [view.tokens[i].text for i in sig]
        if "=" in texts:
            at = texts.index("=")
            if at > 0 and view.tokens[sig[at - 1]].kind is Kind.IDENT:
                names.add(texts[at - 1])
        elif texts and view.tokens[sig[-1]].kind is Kind.IDENT:
            names.add(texts[-1])
    return frozenset(names)
