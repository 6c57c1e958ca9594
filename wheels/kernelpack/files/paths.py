"""Where kernelpack keeps its files on the user's machine: the one cache-folder lookup.

The loader's image cache, the builder's compile cache and the provisioned toolchains all live under
one per-user folder, ``$XDG_CACHE_HOME/kernelpack`` (else ``~/.cache/kernelpack``), each in its own
place inside it; an environment variable per use moves one of them elsewhere. Nothing is kept under
a source checkout, so tests and concurrent builds never write into the tree.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple


def user_cache_folder(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/kernelpack``, else ``~/.cache/kernelpack`` (the XDG base directory rule:
    a relative ``XDG_CACHE_HOME`` is invalid and ignored, so no cache lands in whatever folder a
    command happens to run in, an untrusted checkout included)."""
    env = os.environ if environ is None else environ
    xdg = Path(env.get("XDG_CACHE_HOME") or "").expanduser()
    base = xdg if xdg.is_absolute() else Path.home() / ".cache"
    return base / "kernelpack"


def cache_folder(variable: str, default: str, environ: Mapping[str, str] | None = None) -> Path:
    """One use's folder: the environment variable ``variable`` when set, else ``default`` inside
    :func:`user_cache_folder` ("" for the user cache folder itself)."""
    env = os.environ if environ is None else environ
    chosen = env.get(variable)
    if chosen:
        return Path(chosen).expanduser()
    folder = user_cache_folder(env)
    return folder / default if default else folder


class FolderUse(NamedTuple):
    """One of kernelpack's folders on this machine and what it holds, for ``kernelpack cache path``."""

    what: str
    folder: Path
    files: int
    bytes: int


# The builder's folders under the user cache folder, beside the loader's image cache: (what, the
# variable that moves it, its place inside user_cache_folder). buildsys reads the same variables
# (KERNELPACK_BUILD_CACHE_DIR is the settings' cache-dir, KERNELPACK_TOOLCHAIN_DIR the toolchain's).
BUILDER_FOLDERS = (
    ("build cache", "KERNELPACK_BUILD_CACHE_DIR", "build"),
    ("toolchains", "KERNELPACK_TOOLCHAIN_DIR", "toolchains"),
)


def folder_use(what: str, folder: Path) -> FolderUse:
    """The regular files under ``folder`` and their bytes, links not followed (a provisioned root
    file system links into itself) and unreadable subfolders skipped: a size report, not a check."""
    files = total = 0
    for top, _, names in os.walk(folder):
        for name in names:
            try:
                status = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(status.st_mode):
                files += 1
                total += status.st_size
    return FolderUse(what, folder, files, total)


def builder_folders(environ: Mapping[str, str] | None = None) -> list[FolderUse]:
    """What each of :data:`BUILDER_FOLDERS` holds (none where the folder is absent)."""
    return [
        folder_use(what, cache_folder(variable, default, environ))
        for what, variable, default in BUILDER_FOLDERS
    ]


def human_bytes(count: int) -> str:
    """``1.2 GB``, ``3.9 MB``, ``512 bytes``: decimal units, as ``du --si`` and pip say them."""
    if count < 1000:
        return f"{count} bytes"
    power = min(3, (len(str(count)) - 1) // 3)
    return f"{count / 1000**power:.1f} {('kB', 'MB', 'GB')[power - 1]}"
