"""What the translation of one file needs to know about the other files it is compiled with.

A file is translated alone (``hipify_source`` is pure), but two of its findings depend on code in
other files, usually headers:

- architecture features (arch_features.py): ``TURING_MMA_AVAILABLE`` is defined in one header and
  selects inline PTX in another;
- 32-lane reduction helpers: llm.c's ``warpReduceSum`` (common.h) reduces with shuffles from
  offset 16, which is right for code that counts lanes in 32s; a kernel in another file that
  counts lanes with ``warpSize`` and calls it gets two sums per wave64 (one per half).

The builder, the CLI and the benchmark scan every file of the tree once (``scan_tree``) and pass
the result to each translation (``HipifyOptions(tree=...)``); without it a file is read alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .arch_features import ArchFeatures, decide, scan_file
from .hazards import shuffle_offsets
from .launch_shapes import lane_reduction_helpers
from .structure import SourceView


@dataclass(frozen=True)
class TreeFacts:
    arch_features: ArchFeatures = field(default_factory=ArchFeatures)
    # device functions of 32-lane reductions: name -> "path:line" of the definition
    lane_reductions: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        """What a cached translation depends on (the builder keys its hipify cache by it)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {
            "arch_features": self.arch_features.to_json(),
            "lane_reductions": dict(self.lane_reductions),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TreeFacts:
        return cls(ArchFeatures.from_json(data["arch_features"]), dict(data["lane_reductions"]))


def scan_tree(texts: Mapping[str, str]) -> TreeFacts:
    """The facts of a set of sources (a project's tree, or a file and what it includes)."""
    views = {path: SourceView(text) for path, text in texts.items()}
    arch = decide(scan_file(view, path) for path, view in views.items())
    reductions: dict[str, str] = {}
    others: set[str] = set()  # names also defined as something else: not a helper
    for path, view in views.items():
        starts = [f.token for f in shuffle_offsets(view)]
        for name, line, is_reduction in lane_reduction_helpers(view, starts):
            if is_reduction:
                reductions.setdefault(name, f"{path}:{line}")
            else:
                others.add(name)
    helpers = {name: where for name, where in reductions.items() if name not in others}
    return TreeFacts(arch, helpers)
