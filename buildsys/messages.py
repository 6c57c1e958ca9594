"""A compiler's messages with the paths a user knows.

Every job compiles in its module's folder of a source tree the build writes into its scratch
folder (buildsys.trees), so the compilers name files relative to that folder (``axpy.cu(6)``,
``../include/vecops_math.cuh:3``), the hipified copy rather than the source (``axpy.hip:6:12``),
and now and then the scratch folder itself. A user reads the message to open the file: each path
is put back as the project names it (``kernel_sources/axpy/axpy.cu:6:12``; hipify keeps every
line where it was, so a ``.hip`` line is its ``.cu`` line), the builder's own headers by where they
are installed, and hipcc's echo of the clang command it ran (scratch paths, internal flags) is
left out: the build's summary says which job failed.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from pathlib import Path

# A relative path of a C/C++/CUDA file as compilers print it: after a line's start, a space, a
# quote or a parenthesis, before a colon, a parenthesis, a quote, a comma or the line's end.
_RELATIVE = (
    r"(?<![\w./+-])(?P<path>(?:\.\./)*[\w.+-]+(?:/[\w.+-]+)*\.(?:cu|cuh|hip|h|hh|hpp|inc|inl))"
    r"(?=[:(\",\s]|$)"
)
# hipcc's echo of the clang command that failed: scratch-relative paths and internal options.
_HIPCC_ECHO = re.compile(r"^failed to execute:.*\n?", re.M)


def with_project_paths(
    message: str, module: str, shown: Callable[[str], str], scratch_tree: Path
) -> str:
    """``message`` of a compiler run in ``module``'s folder of the tree written at
    ``scratch_tree``, each path it names as ``shown`` gives its tree path (``module/unit.cu``,
    ``include/x.cuh``); paths that lead outside the tree are left as they are."""
    absolute = rf"(?P<absolute>{re.escape(str(scratch_tree))}/(?P<inside>[\w./+-]+))"
    paths = re.compile(f"{absolute}|{_RELATIVE}", re.M)

    def replace(match: re.Match[str]) -> str:
        if match["absolute"]:
            return shown(posixpath.normpath(match["inside"]))
        path = match["path"]
        tree_path = posixpath.normpath(posixpath.join(module, path))
        return path if tree_path.split("/")[0] == ".." else shown(tree_path)

    return paths.sub(replace, _HIPCC_ECHO.sub("", message)).strip()
