"""The project's setuptools-scm version, cached with the git state it was computed from.

setuptools-scm computes a version with its import and half a dozen git subprocesses: a tenth of
a second or more, which was a third of a no-op build. The version depends only on the commit
HEAD names, the tags (``git describe``), whether a tracked file differs from HEAD, the date of
the newest change (a dirty tree's ``+g<node>.d<date>``), the project's setuptools-scm settings,
setuptools-scm itself and the environment variables it and git read. :func:`git_state` reads
those without a subprocess:

- in the git folder: ``HEAD``, the ref it names, ``packed-refs``, the tags, ``shallow`` and the
  index (which ``git add``, ``commit``, ``checkout`` and ``reset`` rewrite), each by content or
  by (inode, size, mtime in ns): git replaces a ref or the index by a rename, a new inode;
- every tracked file's (size, mtime in ns), from the list ``git ls-files`` gave when the
  version was last computed: an edit of a tracked file changes its mtime;
- pyproject.toml's bytes, setuptools-scm's installed files, the UTC day (its fallback date),
  and the ``SETUPTOOLS_SCM_*``, ``VCS_VERSIONING_*``, ``GIT_*`` and ``SOURCE_DATE_EPOCH``
  variables.

The state is read before and after setuptools-scm runs and kept only when the two agree but
for the index, which its ``git status`` rewrites to refresh its stat data. The record (one per project folder) is stored in the build cache's ``version``
namespace; a cache folder that cannot take it only costs the next build the same tenth of a
second. Only a project whose folder is a git checkout's top (``.git`` in it) is cached: any
other has nothing for setuptools-scm to read, or a layout this reader does not follow.

The cache folder is untrusted input (docs/security.md): a record that is not exactly the shape
written here is read as absent.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernelpack.files.atomic import atomic_write

from .cache import key_of, stored_record
from .metadata import checked_version

_NAMESPACE = "version"
_ENVIRONMENT_PREFIXES = ("SETUPTOOLS_SCM", "VCS_VERSIONING", "GIT_", "SOURCE_DATE_EPOCH")


def _stat(path: Path | str) -> list[int] | None:
    """(inode, size, mtime in ns), None when the path does not exist."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_ino, found.st_size, found.st_mtime_ns]


def _size_and_mtime(path: str) -> list[int]:
    """A tracked file's (size, mtime in ns), (-1, -1) when missing; a plain string path, as this
    runs for every tracked file."""
    try:
        found = os.stat(path)
    except OSError:
        return [-1, -1]
    return [found.st_size, found.st_mtime_ns]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def git_folders(project: Path) -> tuple[Path, Path] | None:
    """The project's git folder and the common one (a worktree's ``.git`` is a file naming its
    own folder, whose ``commondir`` names the repository's), or None where ``project`` is no
    checkout's top."""
    dot_git = project / ".git"
    if dot_git.is_dir():
        return dot_git, dot_git
    text = _text(dot_git)
    if text is None or not text.startswith("gitdir:"):
        return None
    folder = (project / text.removeprefix("gitdir:").strip()).resolve()
    common = _text(folder / "commondir")
    return folder, (folder / common.strip()).resolve() if common else folder


def _scm_files() -> list[list[Any]]:
    """Each of setuptools-scm's (and vcs_versioning's, where it delegates) packages by its
    ``__init__.py`` and that file's stat: an upgrade reinstalls them."""
    found: list[list[Any]] = []
    for name in ("setuptools_scm", "vcs_versioning"):
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        found.append([name, origin, _stat(Path(origin)) if origin else None])
    return found


def git_state(project: Path, folders: tuple[Path, Path], tracked: list[str]) -> dict[str, Any]:
    """What the version depends on (see the module's docstring), ``tracked`` the tracked files."""
    folder, common = folders
    head = _text(folder / "HEAD") or ""
    ref = head.removeprefix("ref:").strip() if head.startswith("ref:") else ""
    tags = sorted(common.joinpath("refs", "tags").rglob("*"))
    reftable = sorted(common.joinpath("reftable").glob("*"))
    now = datetime.datetime.now(datetime.UTC)
    root = os.fspath(project)
    return {
        "head": head,
        "ref": _text(common / ref) if ref else None,
        "packed_refs": _stat(common / "packed-refs"),
        "tags": [[str(p.relative_to(common)), _stat(p)] for p in tags],
        "reftable": [[p.name, _stat(p)] for p in reftable],
        "shallow": _stat(common / "shallow"),
        "index": _stat(folder / "index"),
        "tracked": [[path, _size_and_mtime(f"{root}/{path}")] for path in tracked],
        "pyproject": _text(project / "pyproject.toml"),
        "setuptools_scm": _scm_files(),
        "day": now.date().isoformat(),
        "environment": sorted(
            [k, v] for k, v in os.environ.items() if k.startswith(_ENVIRONMENT_PREFIXES)
        ),
    }


def _tracked_files(project: Path) -> list[str] | None:
    """``git ls-files`` in the project: the files whose edits make the tree dirty."""
    try:
        result = subprocess.run(
            ["git", "-C", str(project), "ls-files", "-z"], capture_output=True, check=False
        )
    except OSError:  # no git installed
        return None
    if result.returncode != 0:
        return None
    return sorted(os.fsdecode(p) for p in result.stdout.split(b"\0") if p)


def _record_path(cache_dir: Path, project: Path) -> Path:
    key = key_of({"project": str(project.resolve())})
    return cache_dir / _NAMESPACE / key[:2] / key


def _read_record(path: Path) -> tuple[dict[str, Any], str] | None:
    """A stored (state, version), or None for anything but the shape :func:`cached_version`
    writes."""
    try:
        record = stored_record(path.read_bytes(), ("state", "version"))
    except OSError:
        return None
    if record is None:
        return None
    state, version = record["state"], record["version"]
    if not (isinstance(state, dict) and isinstance(version, str)):
        return None
    tracked = state.get("tracked")
    if not (isinstance(tracked, list) and all(type(t) is list and len(t) == 2 for t in tracked)):
        return None
    if not all(type(t[0]) is str for t in tracked):
        return None
    return state, version


def cached_version(project: Path, cache_dir: Path, compute: Callable[[Path], str]) -> str:
    """``compute(project)`` (buildsys.project.package_version), or the version it gave an
    earlier build whose git state was the same as now."""
    folders = git_folders(project)
    if folders is None:
        return compute(project)
    path = _record_path(cache_dir, project)
    stored = _read_record(path)
    if stored is not None:
        state, version = stored
        tracked = [t[0] for t in state["tracked"]]
        if git_state(project, folders, tracked) == state:
            return checked_version(version, f"{path}: the cached version")
    tracked_now = _tracked_files(project)
    if tracked_now is None:
        return compute(project)
    before = git_state(project, folders, tracked_now)
    version = compute(project)
    after = git_state(project, folders, tracked_now)
    if {**before, "index": None} != {**after, "index": None}:
        return version  # something changed while it ran: not kept, asked again next time
    # The state after: setuptools-scm's ``git status`` rewrites the index to refresh its stat
    # data, which alone changes no version. A cache folder that cannot take the record only
    # costs the next build the same computation.
    record = json.dumps({"state": after, "version": version}, sort_keys=True)
    with contextlib.suppress(OSError):
        atomic_write(path, record.encode())
    return version
