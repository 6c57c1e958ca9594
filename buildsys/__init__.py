"""The kernelpack builder: matrix, toolchain, hipify, compile, bundle, index, wheels.

It reads and writes device code with the shipped package's own readers (kernelpack.formats,
kernelpack.targets), so the source tree's ``wheels/`` folder goes first on the import path: the
builder always uses the kernelpack it is building, never an installed one.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WHEELS_DIR = REPO_ROOT / "wheels"

if str(WHEELS_DIR) not in sys.path:
    sys.path.insert(0, str(WHEELS_DIR))
