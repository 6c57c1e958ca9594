"""The shape of a token stream that translation and the hazard checks both need.

Not a C++ parser: brackets matched, call arguments split at top-level commas, preprocessor lines
found, and the bodies of ``__global__``/``__device__`` functions located. That is enough to rewrite
calls argument by argument and to ask "is this device code?" without guessing from text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

from .lexer import Kind, Token, is_directive_start, tokenize

_OPEN = {"(": ")", "[": "]", "{": "}"}
DEVICE_QUALIFIERS = frozenset({"__global__", "__device__"})
# Macros whose definition means "compiling for AMD": USE_ROCM is PyTorch's and vLLM's convention
# (the builder defines it on AMD), the others are HIP's and llama.cpp's.
ROCM_MACROS = frozenset(
    {
        "USE_ROCM",
        "__HIP_PLATFORM_AMD__",
        "__HIP_PLATFORM_HCC__",
        "__HIP__",
        "__HIPCC__",
        "GGML_USE_HIP",
    }
)


@dataclass(frozen=True)
class Directive:
    start: int  # token index of '#'
    end: int  # token index one past the directive's last token (its newline excluded)
    name: str  # include, define, if, ifdef, ... ('' for a null directive)


@dataclass(frozen=True)
class Branch:
    """One branch of a conditional (``#if``/``#ifdef``/``#ifndef``, ``#elif`` or ``#else``): its
    directive, its body [directive.end, end), and whether a later branch of the same conditional
    exists (an alternative the preprocessor takes when this one is not)."""

    directive: Directive
    end: int  # token index of the next #elif/#else/#endif of the conditional
    has_alternative: bool
    earlier: tuple[Directive, ...]  # the conditional's branches before this one


class SourceView:
    """Tokens of one source with bracket matches, directive ranges and device-code ranges."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[Token] = tokenize(text)
        self.sig: list[int] = [
            i for i, t in enumerate(self.tokens) if t.kind not in (Kind.SPACE, Kind.COMMENT)
        ]
        self._sig_pos = {index: n for n, index in enumerate(self.sig)}
        self.match: dict[int, int] = self._match_brackets()

    def _match_brackets(self) -> dict[int, int]:
        match: dict[int, int] = {}
        stack: list[int] = []
        for index in self.sig:
            text = self.tokens[index].text
            if text in _OPEN:
                stack.append(index)
            elif text in (")", "]", "}"):
                # An unbalanced closer (inside #if branches, say) is skipped, not fatal.
                for depth in range(len(stack) - 1, -1, -1):
                    if _OPEN[self.tokens[stack[depth]].text] == text:
                        opener = stack[depth]
                        del stack[depth:]
                        match[opener] = index
                        match[index] = opener
                        break
        return match

    def next_sig(self, index: int) -> int | None:
        """The first significant token after ``index`` (which may itself be insignificant)."""
        k = index + 1
        while k < len(self.tokens):
            if self.tokens[k].kind not in (Kind.SPACE, Kind.COMMENT):
                return k
            k += 1
        return None

    def prev_sig(self, index: int) -> int | None:
        k = index - 1
        while k >= 0:
            if self.tokens[k].kind not in (Kind.SPACE, Kind.COMMENT):
                return k
            k -= 1
        return None

    def text_of(self, index: int | None) -> str:
        return "" if index is None else self.tokens[index].text

    def call_parens(self, index: int) -> tuple[int, int] | None:
        """For an identifier followed by '(', the indexes of that '(' and its ')'."""
        open_index = self.next_sig(index)
        if open_index is None or self.tokens[open_index].text != "(":
            return None
        close_index = self.match.get(open_index)
        return None if close_index is None else (open_index, close_index)

    def arguments(self, open_index: int, close_index: int) -> list[tuple[int, int]]:
        """Top-level arguments between a '(' and its ')', each as a token range [start, end).

        Ranges include surrounding space; an empty call gives no arguments.
        """
        args: list[tuple[int, int]] = []
        start = open_index + 1
        k = start
        while k < close_index:
            text = self.tokens[k].text
            if text in _OPEN and k in self.match:
                k = self.match[k] + 1
                continue
            if text == "," and self.tokens[k].kind is Kind.PUNCT:
                args.append((start, k))
                start = k + 1
            k += 1
        if args or any(
            self.tokens[j].kind not in (Kind.SPACE, Kind.COMMENT) for j in range(start, close_index)
        ):
            args.append((start, close_index))
        return args

    def sig_in(self, start: int, end: int) -> list[int]:
        """Significant token indexes within [start, end)."""
        return [
            i for i in range(start, end) if self.tokens[i].kind not in (Kind.SPACE, Kind.COMMENT)
        ]

    def range_text(self, start: int, end: int) -> str:
        """The significant tokens of [start, end) joined by single spaces (for comparisons)."""
        return " ".join(self.tokens[i].text for i in self.sig_in(start, end))

    @cached_property
    def directives(self) -> list[Directive]:
        found: list[Directive] = []
        for index, token in enumerate(self.tokens):
            if token.text != "#" or not is_directive_start(self.tokens, index):
                continue
            end = index + 1
            while end < len(self.tokens):
                piece = self.tokens[end]
                if piece.kind is Kind.SPACE and "\n" in _without_continuations(piece.text):
                    break
                end += 1
            name_index = self.next_sig(index)
            name = ""
            if (
                name_index is not None
                and name_index < end
                and self.tokens[name_index].kind is Kind.IDENT
            ):
                name = self.tokens[name_index].text
            found.append(Directive(index, end, name))
        return found

    def directives_named(self, name: str) -> Iterator[tuple[Directive, list[int]]]:
        """Each ``#<name>`` directive with its significant tokens: ``#``, the name, then what
        the directive says (``sig[2]`` is a #define's macro, an #include's header)."""
        for directive in self.directives:
            if directive.name == name:
                yield directive, self.sig_in(directive.start, directive.end)

    @cached_property
    def directive_at(self) -> dict[int, Directive]:
        """Directive by the token index of each token it contains."""
        at: dict[int, Directive] = {}
        for directive in self.directives:
            for k in range(directive.start, directive.end):
                at[k] = directive
        return at

    @cached_property
    def device_ranges(self) -> list[tuple[int, int]]:
        """Token ranges [open brace, close brace] of __global__ and __device__ function bodies.

        From each qualifier outside a device body, the body is the first '{' after the closing ')'
        of the parameter list; a ';' first means a declaration or a __device__ variable.
        """
        ranges: list[tuple[int, int]] = []
        inside_until = -1
        for index in self.sig:
            if index <= inside_until or self.tokens[index].text not in DEVICE_QUALIFIERS:
                continue
            if index in self.directive_at:
                continue
            k = self.next_sig(index)
            seen_params = False
            while k is not None:
                text = self.tokens[k].text
                if text == "(" and k in self.match:
                    seen_params = True
                    k = self.match[k]
                elif text == ";" or (text == "{" and not seen_params):
                    break
                elif text == "{" and k in self.match:
                    ranges.append((k, self.match[k]))
                    inside_until = self.match[k]
                    break
                k = self.next_sig(k)
        return ranges

    @cached_property
    def branches(self) -> list[Branch]:
        """Every conditional branch, in source order (an unterminated conditional is dropped)."""
        found: list[Branch] = []
        stack: list[list[Directive]] = []  # the open conditionals, each as its branches so far
        for directive in self.directives:
            name = directive.name
            if name in ("if", "ifdef", "ifndef"):
                stack.append([directive])
            elif name in ("elif", "else", "endif") and stack:
                chain = stack[-1]
                found.append(Branch(chain[-1], directive.start, name != "endif", tuple(chain[:-1])))
                if name == "endif":
                    stack.pop()
                else:
                    chain.append(directive)
        return sorted(found, key=lambda b: b.directive.start)

    def enclosing_branches(self, index: int) -> list[Branch]:
        """The branches whose body holds tokens[index], innermost first."""
        found = [b for b in self.branches if b.directive.end <= index < b.end]
        return sorted(found, key=lambda b: b.end - b.directive.end)

    @cached_property
    def platform_branches(self) -> list[tuple[int, int, str]]:
        """Token ranges [start, end) of conditional branches that select a platform, with
        "rocm" (``#ifdef USE_ROCM``, ``#if defined(__HIP_PLATFORM_AMD__)``) or "cuda" (their
        negations, and the ``#else`` of a ROCm test). ``#elif`` and other tests select nothing."""
        branches: list[tuple[int, int, str]] = []
        stack: list[tuple[str | None, int]] = []  # (platform of the open branch, its start)
        for directive in self.directives:
            name = directive.name
            if name in ("if", "ifdef", "ifndef"):
                stack.append((self._platform_of(directive), directive.end))
            elif name in ("elif", "else", "endif") and stack:
                platform, start = stack.pop()
                if platform is not None:
                    branches.append((start, directive.start, platform))
                if name == "else":
                    flipped = {"rocm": "cuda", "cuda": "rocm"}.get(platform or "")
                    stack.append((flipped, directive.end))
                elif name == "elif":
                    stack.append((None, directive.end))
        return branches

    def _platform_of(self, directive: Directive) -> str | None:
        sig = self.sig_in(directive.start, directive.end)
        words = [self.tokens[k].text for k in sig[2:]]
        if directive.name in ("ifdef", "ifndef"):
            if len(words) != 1 or words[0] not in ROCM_MACROS:
                return None
            return "rocm" if directive.name == "ifdef" else "cuda"
        negated = words[:1] == ["!"]
        core = [w for w in (words[1:] if negated else words) if w not in ("(", ")", "defined")]
        if len(core) != 1 or core[0] not in ROCM_MACROS:
            return None
        return "cuda" if negated else "rocm"

    def platform_at(self, index: int) -> str | None:
        """ "cuda" or "rocm" when tokens[index] sits in a platform branch (innermost wins)."""
        found: str | None = None
        width = len(self.tokens) + 1
        for start, end, platform in self.platform_branches:
            if start <= index < end and end - start < width:
                found, width = platform, end - start
        return found

    def in_device_code(self, index: int) -> bool:
        return any(start < index < end for start, end in self.device_ranges)

    def statement_bounds(self, index: int) -> tuple[int, int]:
        """The token range of the statement (or directive line) around ``index``.

        Bounded by ';', '{' or '}' at the same bracket depth, so a for-header's clauses count as
        one statement with the loop head.
        """
        directive = self.directive_at.get(index)
        if directive is not None:
            return directive.start, directive.end
        pos = self._sig_pos[index]
        start = pos
        depth = 0
        while start > 0:
            text = self.tokens[self.sig[start - 1]].text
            if text in (")", "]"):
                depth += 1
            elif text in ("(", "["):
                if depth == 0:
                    start -= 1
                    continue
                depth -= 1
            elif depth == 0 and text in (";", "{", "}"):
                break
            start -= 1
        end = pos
        depth = 0
        while end < len(self.sig) - 1:
            text = self.tokens[self.sig[end + 1]].text
            if text in ("(", "["):
                depth += 1
            elif text in (")", "]"):
                if depth == 0:
                    end += 1
                    continue
                depth -= 1
            elif depth == 0 and text in (";", "{", "}"):
                break
            end += 1
        return self.sig[start], self.sig[end] + 1

    def line_comments(self) -> dict[int, list[str]]:
        """Comment texts by the line each starts on."""
        comments: dict[int, list[str]] = {}
        for token in self.tokens:
            if token.kind is Kind.COMMENT:
                comments.setdefault(token.line, []).append(token.text)
        return comments


def _without_continuations(text: str) -> str:
    return text.replace("\\\r\n", "").replace("\\\n", "")
