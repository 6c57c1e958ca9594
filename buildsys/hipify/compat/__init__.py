"""The HIP compatibility headers that translated sources include (kernelpack_hip_compat.h).

The builder puts them into the include folder of the hipified tree, so compiles find them with the
tree's own ``-I`` and the cache keys cover their content like any other header; other callers
pass ``-I COMPAT_DIR``.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

COMPAT_DIR = Path(__file__).resolve().parent


def compat_headers(include_dir: str) -> dict[str, str]:
    """Tree path (``include_dir``/name) -> text of every compatibility header."""
    return {
        posixpath.join(include_dir, path.name): path.read_text(encoding="utf-8")
        for path in sorted(COMPAT_DIR.glob("*.h"))
    }
