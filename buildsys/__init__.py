"""The kernelpack builder: matrix, toolchain, hipify, compile, bundle, index, wheels.

It reads and writes device code with the shipped package's own readers (kernelpack.formats,
kernelpack.targets). Importing it changes nothing: the command line (``python -m buildsys``, see
__main__) puts this checkout's ``wheels/`` first on the import path, so that the builder uses the
kernelpack it is building; tests and tools that import it set their path themselves.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
WHEELS_DIR = REPO_ROOT / "wheels"
