"""A kernel project's folder: which one, its pyproject.toml, its version, paths kept inside it.

A kernel project is any folder with a ``pyproject.toml``; when none is named it is this checkout
where the builder runs from one, else the current folder. The project is untrusted input
(docs/security.md): what it names must stay inside it (:func:`check_inside_project`), and its
version must be a PEP 440 one, since it names files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelpack.errors import UsageError
from kernelpack.files.regular import read_toml

from . import REPO_ROOT
from .errors import ProjectError
from .metadata import checked_version

PYPROJECT_LIMIT = 16 * 2**20  # bytes of a pyproject.toml read at most


def package_version(project: Path = REPO_ROOT) -> str:
    """The version the wheels will carry: setuptools-scm's (as scikit-build-core computes it),
    else pyproject's fallback_version where there is no git checkout or no setuptools-scm.

    Whichever it is, it must be a PEP 440 version (it names files): it is returned normalised, and
    anything else is a ProjectError naming where it came from."""
    path = project / "pyproject.toml"
    data = read_pyproject(project)
    table = data.get("project", {})
    if isinstance(table, dict) and "version" in table:
        static = table["version"]
        if not isinstance(static, str):
            raise ProjectError(f'{path}: project.version = {static!r}: expected a string, "1.0.0"')
        return checked_version(static, f"{path}: project.version")
    fallback = checked_version(
        str(data.get("tool", {}).get("setuptools_scm", {}).get("fallback_version", "0.0.0")),
        f"{path}: tool.setuptools_scm.fallback_version",
    )
    try:
        from setuptools_scm import get_version  # deferred: a build requirement only
    except ImportError:
        return fallback
    try:
        version: str = get_version(root=str(project), fallback_version=fallback)
    except (LookupError, OSError):
        return fallback
    return checked_version(version, f"{project}: the version setuptools-scm gives (git tags)")


def read_pyproject(project: Path) -> dict[str, Any]:
    """The project's pyproject.toml, read as any untrusted TOML file is (one clear line for a
    file that is not one), or a UsageError saying the folder is not a kernel project."""
    try:
        return read_toml(
            project / "pyproject.toml", limit=PYPROJECT_LIMIT, what="a pyproject.toml (TOML)"
        )
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(
            f"{project}: not a kernel project (no pyproject.toml); name one with --project DIR"
        ) from None


def check_inside_project(project: Path, path: Path, where: str, remedy: str) -> Path:
    """``path`` resolved (links followed), which must be ``project`` or inside it: else a
    ProjectError naming ``where`` and ``remedy``. What a project names is read, written or
    published by the build; outside the project it could be anything the user can reach."""
    root = project.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise ProjectError(
            f"{where}: {path} leads outside the project {root} (to {resolved}); {remedy}"
        )
    return resolved


def _runs_from_checkout() -> bool:
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "kernel_sources").is_dir()


def default_project() -> Path:
    """The project when none is named: this checkout where the builder runs from one, else the
    current folder (the builder installed as kernelpack-buildsys)."""
    return REPO_ROOT if _runs_from_checkout() else Path.cwd()


def default_project_words() -> str:
    """:func:`default_project` as ``--help`` says it: what this builder will take, not both."""
    if _runs_from_checkout():
        return f"kernelpack's own checkout, {REPO_ROOT}, which this builder runs from"
    return "the current folder"
