"""Architecture features that AMD targets lack: inline PTX behind ``__CUDA_ARCH__`` guards.

The compat header answers ``__CUDA_ARCH__`` comparisons with one number per AMD target (890): the
GPU has half, bf16 and fp8 types, 16-bit CAS, ... But a guard can also select NVIDIA's tensor-core
PTX (``ldmatrix``, ``mma.sync``), which no AMD GPU has at any number. ggml-style sources name such a
feature once (``#if __CUDA_ARCH__ >= GGML_CUDA_CC_TURING`` / ``#define TURING_MMA_AVAILABLE``, in a
header) and test it everywhere else, often in another file, with a portable ``#else``.

The rule, one for every feature: a preprocessor branch selected by an architecture guard whose
body holds inline PTX, or calls a CUDA intrinsic of the guarded architecture that HIP lacks
(tables.ARCH_ONLY_INTRINSICS: sm_70's ``__match_any_sync``), is not taken on AMD when the source
offers an alternative branch, so the alternative is compiled, as on an NVIDIA GPU without the
feature. An architecture guard is a
value comparison of ``__CUDA_ARCH__`` (a *direct* guard) or a test of a *feature macro*: a macro
the sources ``#define`` only in branches of architecture guards and use only in preprocessor
conditions. For a feature macro the translator leaves the ``#define`` out, so every test of it,
in every file, agrees (the portable data layout and the portable arithmetic are chosen together);
that is done only when every branch that tests it (or a feature defined under it) and holds PTX
has an alternative. A direct guard's branch is switched off where it stands (``#if 0 && (...)``).
Without an alternative the PTX stays and is reported as ``inline-asm``: code is never dropped.

Which facts count is data in tables.py (ARCH_GUARD_NAMES); the files of a tree are scanned
together (``scan_arch_features``), since the definition and the uses are usually in different files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .lexer import Kind
from .reporting import inline_asm
from .structure import Branch, Directive, SourceView
from .tables import ARCH_GUARD_NAMES, ARCH_ONLY_INTRINSICS

_CONDITIONALS = frozenset({"if", "ifdef", "ifndef", "elif"})
_CONDITION_DIRECTIVES = _CONDITIONALS | {"undef"}
# What the translation writes in place of a feature's #define: translating the output again
# reads it as that definition, so the verdict (and the diagnostics) stay the same.
DROPPED_DEFINITION = "// hipify: left undefined on AMD (it selects inline PTX): #define "


@dataclass(frozen=True)
class Condition:
    """What a branch's condition requires, read as a conjunction (``A && B && ...``)."""

    requires: frozenset[str] = frozenset()  # names a conjunct needs defined / non-zero
    arch_value: bool = False  # a conjunct compares __CUDA_ARCH__ by value
    conjunctive: bool = True  # no top-level '||': every conjunct must hold
    dead: bool = False  # a conjunct is the literal 0 (never taken)


@dataclass(frozen=True)
class FeatureDefinition:
    name: str
    path: str
    line: int
    col: int
    guard: str  # the innermost architecture guard's condition, as written
    direct: bool  # some enclosing branch compares __CUDA_ARCH__ by value
    via: frozenset[str]  # names the enclosing branches require


@dataclass(frozen=True)
class PtxGuard:
    """A branch whose body holds inline PTX (a possible arch-guarded feature use)."""

    requires: frozenset[str]
    has_alternative: bool


@dataclass(frozen=True)
class FileFacts:
    definitions: tuple[FeatureDefinition, ...]
    used_in_code: frozenset[str]  # names used outside preprocessor conditions
    ptx_guards: tuple[PtxGuard, ...]


@dataclass(frozen=True)
class ArchFeatures:
    """The tree's verdict: feature macros left undefined on AMD, and why."""

    off: Mapping[str, FeatureDefinition] = field(default_factory=dict)
    undefined: frozenset[str] = frozenset()  # off, and features defined only under them
    ptx_branches: Mapping[str, int] = field(default_factory=dict)  # by off feature

    @property
    def digest(self) -> str:
        """What a cached translation depends on (the builder keys its hipify cache by it)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "off": {
                name: dataclasses.asdict(d) | {"via": sorted(d.via)} for name, d in self.off.items()
            },
            "undefined": sorted(self.undefined),
            "ptx_branches": dict(self.ptx_branches),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ArchFeatures:
        off = {
            name: FeatureDefinition(**(d | {"via": frozenset(d["via"])}))
            for name, d in data["off"].items()
        }
        return cls(off, frozenset(data["undefined"]), dict(data["ptx_branches"]))


def condition_of(
    view: SourceView, directive: Directive, earlier: tuple[Directive, ...]
) -> Condition:
    """The condition of a branch's directive. ``#else`` (and ``#elif``) inherit an architecture
    dependence from the branches before them; ``#ifndef X`` requires nothing."""
    sig = view.sig_in(directive.start, directive.end)[2:]
    inherited = any(condition_of(view, d, ()).arch_value for d in earlier)
    if directive.name == "ifdef":
        names = [view.tokens[k].text for k in sig if view.tokens[k].kind is Kind.IDENT]
        return Condition(frozenset(names[:1]))
    if directive.name not in ("if", "elif"):
        return Condition(arch_value=inherited)
    words = [view.tokens[k].text for k in sig]
    conjuncts = _conjuncts(words)
    if conjuncts is None:
        return Condition(arch_value=inherited, conjunctive=False)
    requires: set[str] = set()
    arch_value = inherited
    dead = False
    for conjunct in conjuncts:
        core = [w for w in conjunct if w not in ("(", ")")]
        if core[:1] == ["!"]:
            continue
        if core == ["0"]:
            dead = True
        elif (len(core) == 2 and core[0] == "defined") or (len(core) == 1 and _is_name(core[0])):
            requires.add(core[-1])
        elif any(w in ARCH_GUARD_NAMES for w in core) and "defined" not in core:
            arch_value = True
    return Condition(frozenset(requires), arch_value, True, dead)


def _is_name(word: str) -> bool:
    return word.replace("_", "a").isalnum() and not word[0].isdigit()


def _conjuncts(words: list[str]) -> list[list[str]] | None:
    """The top-level ``&&`` operands of a condition (parenthesised conjunctions opened up), or
    None when a top-level ``||`` makes it a disjunction."""
    while len(words) >= 2 and words[0] == "(" and _closing(words, 0) == len(words) - 1:
        words = words[1:-1]
    parts: list[list[str]] = [[]]
    depth = 0
    for word in words:
        if word == "(":
            depth += 1
        elif word == ")":
            depth -= 1
        if depth == 0 and word == "||":
            return None
        if depth == 0 and word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    result: list[list[str]] = []
    for part in parts:
        inner = part
        while len(inner) >= 2 and inner[0] == "(" and _closing(inner, 0) == len(inner) - 1:
            inner = inner[1:-1]
        if inner is not part and "&&" in inner:
            nested = _conjuncts(inner)
            result.extend(nested if nested is not None else [part])
        else:
            result.append(part)
    return result


def _closing(words: list[str], start: int) -> int:
    depth = 0
    for k in range(start, len(words)):
        depth += {"(": 1, ")": -1}.get(words[k], 0)
        if depth == 0:
            return k
    return -1


def ptx_tokens(view: SourceView) -> list[int]:
    """Token indexes of what no AMD GPU has: inline PTX statements and calls of
    ARCH_ONLY_INTRINSICS (AMD's own code in a ROCm branch excluded)."""
    found: list[int] = []
    for k in view.sig:
        text = view.tokens[k].text
        if view.platform_at(k) is not None:
            continue
        is_asm = text in ("asm", "__asm__", "__asm") and inline_asm(view, k) is not None
        if is_asm or (text in ARCH_ONLY_INTRINSICS and k not in view.directive_at):
            found.append(k)
    return found


def missing_feature(view: SourceView, k: int) -> str:
    """What the token ``k`` of ptx_tokens() stands for, in a finding: inline PTX or the name."""
    text = view.tokens[k].text
    return text if text in ARCH_ONLY_INTRINSICS else "inline PTX"


def scan_file(view: SourceView, path: str) -> FileFacts:
    """One file's feature definitions, names used in code, and branches holding inline PTX."""
    conditions = {
        b.directive.start: condition_of(view, b.directive, b.earlier) for b in view.branches
    }
    definitions: list[FeatureDefinition] = []
    defined_at: set[int] = set()
    for index, name in _definitions(view):
        defined_at.add(index)
        enclosing = view.enclosing_branches(index)
        guards = [b for b in enclosing if _is_guard(conditions[b.directive.start])]
        via: set[str] = set()
        for branch in enclosing:
            via |= conditions[branch.directive.start].requires
        token = view.tokens[index]
        guard = source_text(view, *_condition_range(view, guards[0].directive)) if guards else ""
        definitions.append(
            FeatureDefinition(
                name,
                path,
                token.line,
                token.col,
                guard,
                any(conditions[b.directive.start].arch_value for b in enclosing),
                frozenset(via),
            )
        )
    used: set[str] = set()
    for k in view.sig:
        token = view.tokens[k]
        if token.kind is not Kind.IDENT or k in defined_at:
            continue
        directive = view.directive_at.get(k)
        if directive is not None and directive.name in _CONDITION_DIRECTIVES:
            continue
        if directive is not None and directive.name == "include":
            continue
        used.add(token.text)
    guards_with_ptx: dict[int, PtxGuard] = {}
    for k in ptx_tokens(view):
        for branch in view.enclosing_branches(k):
            condition = conditions[branch.directive.start]
            guards_with_ptx[branch.directive.start] = PtxGuard(
                condition.requires, branch.has_alternative
            )
    return FileFacts(tuple(definitions), frozenset(used), tuple(guards_with_ptx.values()))


def _definitions(view: SourceView) -> list[tuple[int, str]]:
    """Each ``#define NAME`` (by the name's token) and each definition an earlier translation
    left out (by its comment)."""
    found: list[tuple[int, str]] = []
    for index, token in enumerate(view.tokens):
        if token.kind is Kind.COMMENT and token.text.startswith(DROPPED_DEFINITION):
            found.append((index, token.text[len(DROPPED_DEFINITION) :].strip()))
    for _, sig in view.directives_named("define"):
        if len(sig) >= 3 and view.tokens[sig[2]].kind is Kind.IDENT:
            found.append((sig[2], view.tokens[sig[2]].text))
    return sorted(found)


def source_text(view: SourceView, start: int, end: int) -> str:
    """tokens[start:end] as written, on one line (continuations and runs of blanks as one space)."""
    return " ".join("".join(t.text for t in view.tokens[start:end]).replace("\\\n", " ").split())


def _is_guard(condition: Condition) -> bool:
    return condition.arch_value or bool(condition.requires)


def _condition_range(view: SourceView, directive: Directive) -> tuple[int, int]:
    sig = view.sig_in(directive.start, directive.end)
    return (sig[2], sig[-1] + 1) if len(sig) > 2 else (directive.end, directive.end)


def decide(facts: Iterable[FileFacts]) -> ArchFeatures:
    """Which feature macros AMD leaves undefined, from every file's facts (see the module doc)."""
    facts = list(facts)
    by_name: dict[str, list[FeatureDefinition]] = {}
    for file in facts:
        for definition in file.definitions:
            by_name.setdefault(definition.name, []).append(definition)
    used_in_code = frozenset().union(*(f.used_in_code for f in facts))
    features: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, definitions in by_name.items():
            if name in features or name in used_in_code:
                continue
            if all(d.direct or d.via & features for d in definitions):
                features.add(name)
                changed = True
    ptx_guards = [g for file in facts for g in file.ptx_guards]
    off: dict[str, FeatureDefinition] = {}
    counts: dict[str, int] = {}
    for name in sorted(features):
        family = _defined_under(name, by_name, features)
        gating = [g for g in ptx_guards if name in g.requires]
        blocking = [g for g in ptx_guards if g.requires & family and not g.has_alternative]
        if gating and not blocking:
            off[name] = next(d for d in by_name[name] if d.direct or d.via & features)
            counts[name] = len(gating)
    undefined = set(off)
    changed = True
    while changed:
        changed = False
        for name, definitions in by_name.items():
            if name not in undefined and all(d.via & undefined for d in definitions):
                undefined.add(name)
                changed = True
    return ArchFeatures(off, frozenset(undefined), counts)


def _defined_under(
    name: str, by_name: Mapping[str, list[FeatureDefinition]], features: set[str]
) -> set[str]:
    """``name`` and the features defined (transitively) under a test of it."""
    family = {name}
    changed = True
    while changed:
        changed = False
        for other in features - family:
            if any(d.via & family for d in by_name[other]):
                family.add(other)
                changed = True
    return family


def scan_arch_features(texts: Mapping[str, str]) -> ArchFeatures:
    """The verdict over a set of sources (a project's tree, or a file and what it includes)."""
    return decide(scan_file(SourceView(text), path) for path, text in texts.items())


@dataclass(frozen=True)
class FileDecisions:
    """What one file's translation does under a tree's verdict."""

    dropped_definitions: dict[int, FeatureDefinition]  # by directive start
    # directive starts of direct guards not taken on AMD: what their branch holds that AMD lacks
    switched_guards: Mapping[int, str]
    dead_ranges: tuple[tuple[int, int], ...]  # token ranges AMD never compiles


def decisions_for(view: SourceView, features: ArchFeatures) -> FileDecisions:
    ptx = ptx_tokens(view)
    dropped: dict[int, FeatureDefinition] = {}
    for directive, sig in view.directives_named("define"):
        if len(sig) >= 3 and view.tokens[sig[2]].text in features.off:
            dropped[directive.start] = features.off[view.tokens[sig[2]].text]
    switched: dict[int, str] = {}
    dead: list[tuple[int, int]] = []
    for branch in view.branches:
        condition = condition_of(view, branch.directive, branch.earlier)
        if condition.dead or condition.requires & features.undefined:
            dead.append((branch.directive.end, branch.end))
        elif _is_direct_ptx_guard(view, branch, condition) and branch.has_alternative:
            inside = [k for k in ptx if branch.directive.end <= k < branch.end]
            if inside:
                switched[branch.directive.start] = missing_feature(view, inside[0])
                dead.append((branch.directive.end, branch.end))
    return FileDecisions(dropped, switched, tuple(dead))


def _is_direct_ptx_guard(view: SourceView, branch: Branch, condition: Condition) -> bool:
    """An ``#if``/``#elif`` whose own condition compares __CUDA_ARCH__ as one of its conjuncts."""
    if branch.directive.name not in ("if", "elif") or not condition.conjunctive:
        return False
    own = condition_of(view, branch.directive, ())
    return own.arch_value
