"""CUDA -> HIP translation that knows about wavefronts.

The build pipeline calls :func:`hipify_source` (pure: text in, text, diagnostics and statistics
out); ``python -m buildsys hipify`` is the file-level front (:func:`add_parser`,
:func:`main_hipify`). Mapping tables are data in :mod:`.tables`; the wave-size checks are in
:mod:`.hazards`.
"""

from __future__ import annotations

from .arch_features import ArchFeatures, scan_arch_features
from .cli import add_parser, main_hipify
from .compat import COMPAT_DIR, compat_headers
from .diagnostics import CODES, WAVE_SIZE_CODES, Diagnostic, Severity
from .translate import (
    Conversion,
    HipifyOptions,
    HipifyResult,
    HipifyStats,
    generated_header,
    hipify_source,
)
from .tree_facts import TreeFacts, scan_tree

__all__ = [
    "CODES",
    "COMPAT_DIR",
    "WAVE_SIZE_CODES",
    "ArchFeatures",
    "Conversion",
    "Diagnostic",
    "HipifyOptions",
    "HipifyResult",
    "HipifyStats",
    "Severity",
    "TreeFacts",
    "add_parser",
    "compat_headers",
    "generated_header",
    "hipify_source",
    "main_hipify",
    "scan_arch_features",
    "scan_tree",
]
