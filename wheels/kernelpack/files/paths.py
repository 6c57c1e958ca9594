"""Where kernelpack keeps its files on the user's machine: the one cache-folder lookup.

The loader's image cache, the builder's compile cache and the provisioned toolchains all live under
one per-user folder, ``$XDG_CACHE_HOME/kernelpack`` (else ``~/.cache/kernelpack``), each in its own
place inside it; an environment variable per use moves one of them elsewhere. Nothing is kept under
a source checkout, so tests and concurrent builds never write into the tree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


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
