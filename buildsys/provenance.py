"""Provenance inside every wheel the builder writes: ``<dist-info>/kernelpack-provenance.json``.

What a wheel says about how it was made, for someone holding only the file: the source commit and
whether the tree had changes beyond it (tracked files edited, or files git does not ignore added),
the compilers the build ran (name and version, as the index records them) and, per image the wheel
carries, its module, target, kind, sha256 and the compiler and flags that made it.

Deterministic on purpose: no time, no host name, no path, keys and images sorted, so that the same
tree gives the same bytes and two builds of a commit stay byte-identical. Where the project is no
git checkout (a tree from a tarball, git not installed) commit and dirty are null: unknown, not
clean. GitHub's build-provenance attestations (.github/workflows/wheels.yml, job ``attest``) sign
the wheels from outside; this file is what travels inside them.

A leaf of the wheel builder: the index reader and target data, nothing of the orchestration.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kernelpack.formats.index import PROVENANCE_FILE, Index

from .index_writer import INDEX_FILE, read_index

PROVENANCE_SCHEMA = 1
# the toolchain of the index's build facts that compiles each vendor's images
TOOLCHAIN_BY_VENDOR = {"amd": "hip", "nvidia": "cuda"}


@dataclass(frozen=True)
class SourceState:
    """The commit a tree is at and whether it differs from it; None where git cannot say."""

    commit: str | None
    dirty: bool | None


def _git(project: Path, *args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", "-C", str(project), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError:  # no git installed
        return None
    return result.stdout if result.returncode == 0 else None


def source_state(project: Path) -> SourceState:
    """The project's HEAD commit and whether ``git status`` shows anything under the project
    folder (edited, staged, deleted, or untracked and not ignored files)."""
    commit = _git(project, "rev-parse", "--verify", "HEAD")
    if commit is None:
        return SourceState(None, None)
    status = _git(project, "status", "--porcelain", "--untracked-files=normal", "--", ".")
    return SourceState(commit.strip(), None if status is None else bool(status.strip()))


def _wheel_index(files: Mapping[str, bytes]) -> Index | None:
    """The index a wheel's package carries (``<package>/_index.py``), if any."""
    names = [n for n in files if n.count("/") == 1 and n.endswith(f"/{INDEX_FILE}")]
    return read_index(files[names[0]].decode(), names[0]) if len(names) == 1 else None


def provenance(files: Mapping[str, bytes], source: SourceState, build: Index | None) -> bytes:
    """The provenance file for a wheel of ``files``. ``build`` is the run's full index, whose build
    facts name the compilers even in a wheel without images (host, variant, provider)."""
    own = _wheel_index(files)
    described = own or build
    toolchains = described["build"]["toolchains"] if described else {}
    flags = described["build"]["flags"] if described else {}
    images = sorted(
        (
            {
                "module": module,
                "target": image["target"],
                "kind": image["kind"],
                "sha256": image["sha256"],
                "compiler": toolchains.get(TOOLCHAIN_BY_VENDOR.get(image["vendor"], ""), ""),
                "flags": list(flags.get(image["kind"], [])),
            }
            for module, entry in (own["modules"] if own else {}).items()
            for image in entry["images"]
        ),
        key=lambda row: (row["module"], row["target"], row["kind"]),
    )
    document = {
        "schema": PROVENANCE_SCHEMA,
        "source": {"commit": source.commit, "dirty": source.dirty},
        "toolchains": dict(toolchains),
        "images": images,
    }
    return (json.dumps(document, indent=1, sort_keys=True) + "\n").encode()


def with_provenance(
    files: Mapping[str, bytes], source: SourceState, build: Index | None
) -> dict[str, bytes]:
    """``files`` with the provenance file added to (or replaced in) their dist-info folder."""
    dist_info = next(n.split("/")[0] for n in files if n.split("/")[0].endswith(".dist-info"))
    return {**files, f"{dist_info}/{PROVENANCE_FILE}": provenance(files, source, build)}
