"""CUDA -> HIP translation that knows about wavefronts.

The build pipeline calls :func:`hipify_source` (pure: text in, text, diagnostics and statistics
out); ``python -m buildsys hipify`` is the file-level front (:func:`add_arguments`,
:func:`main_hipify`). Mapping tables are data in :mod:`.tables`; the wave-size checks are in
:mod:`.hazards`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .arch_features import ArchFeatures, scan_arch_features
    from .cli import add_arguments, main_hipify
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

# Each name's module, imported on first use (PEP 562): a build whose sources were hipified
# before reads the results from its cache and needs only .tables, .compat and .tree_facts, not
# the translator (a third of a no-op build's time went to importing it).
_MODULES = {
    "ArchFeatures": "arch_features",
    "scan_arch_features": "arch_features",
    "add_arguments": "cli",
    "main_hipify": "cli",
    "COMPAT_DIR": "compat",
    "compat_headers": "compat",
    "CODES": "diagnostics",
    "WAVE_SIZE_CODES": "diagnostics",
    "Diagnostic": "diagnostics",
    "Severity": "diagnostics",
    "Conversion": "translate",
    "HipifyOptions": "translate",
    "HipifyResult": "translate",
    "HipifyStats": "translate",
    "generated_header": "translate",
    "hipify_source": "translate",
    "TreeFacts": "tree_facts",
    "scan_tree": "tree_facts",
}

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
    "add_arguments",
    "compat_headers",
    "generated_header",
    "hipify_source",
    "main_hipify",
    "scan_arch_features",
    "scan_tree",
]


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
