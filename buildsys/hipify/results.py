"""What a translation returns: options, the translated text, diagnostics and statistics."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .diagnostics import Diagnostic, Severity

if TYPE_CHECKING:
    from .tree_facts import TreeFacts

GENERATED_PREFIX = "// hipify: generated from "


@dataclass(frozen=True)
class HipifyOptions:
    """How to translate. launch_macro: rewrite ``k<<<g, b, s, st>>>(args)`` as
    ``hipLaunchKernelGGL(k, g, b, s, st, args)`` (HIP compiles <<<...>>> too, so the default keeps it).
    tree: ``tree_facts.scan_tree`` over every source the file is compiled with (a feature macro
    or a reduction helper is usually defined in one header and used in others); None reads the
    file alone."""

    launch_macro: bool = False
    tree: TreeFacts | None = None


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
