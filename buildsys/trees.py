"""The build's source trees: hipified in memory, written to a scratch folder only when a job must
compile, and the dependency files the compilers write there read back as tree paths.

Scratch folders live under the build cache (``<cache>/scratch/build-*``), never in the system's
temporary folder: each is locked (flock) by the build that uses it, and a build removes every
unlocked one it finds, so a build killed by SIGKILL leaves at most one folder until the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import posixpath
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .cache import BuildCache, key_of, sha256_hex, stored_record
from .hipify.compat import compat_headers  # the HIP compatibility layer, in the include folder
from .jobs import hip_main
from .modules import INCLUDE_DIR, KernelModule, SourceTree

if TYPE_CHECKING:
    from .hipify.tree_facts import TreeFacts

_LOCK_FILE = ".lock"


def read_depfile(text: str, folder: str) -> list[str]:
    """Tree paths from a Make-style dependency file written in the tree's ``folder``.

    Absolute paths are the toolchain's own headers (covered by the compiler's identity in the job
    key) and are left out.
    """
    _, _, prerequisites = text.replace("\\\n", " ").partition(":")
    paths = []
    for token in re.findall(r"(?:\\.|[^\s\\])+", prerequisites):
        path = re.sub(r"\\(.)", r"\1", token).replace("$$", "$")
        if not path.startswith("/"):
            paths.append(posixpath.normpath(posixpath.join(folder, path)))
    return sorted(set(paths))


def scratch_root(cache_dir: Path) -> Path:
    return cache_dir / "scratch"


def _remove_stale(root: Path) -> None:
    """Remove the scratch folders no running build holds (their lock is free)."""
    with contextlib.suppress(OSError):
        for folder in root.iterdir():
            if not folder.name.startswith("build-"):
                continue
            try:
                handle = os.open(folder / _LOCK_FILE, os.O_RDONLY)
            except FileNotFoundError:
                handle = -1  # killed before it took its lock, or half removed
            except OSError:
                continue
            try:
                if handle >= 0:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a running build holds it
            finally:
                if handle >= 0:
                    os.close(handle)
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def scratch_folder(cache_dir: Path) -> Iterator[Path]:
    """A fresh folder under the cache for this build, removed at the end; stale folders of killed
    builds are removed first."""
    root = scratch_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale(root)
    # Locked before it gets the name other builds clean up, so none removes it while in use.
    making = Path(tempfile.mkdtemp(dir=root, prefix="new-"))
    handle = os.open(making / _LOCK_FILE, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(handle, fcntl.LOCK_EX)
    folder = root / ("build-" + making.name.removeprefix("new-"))
    try:
        os.rename(making, folder)
        yield folder
    finally:
        shutil.rmtree(making, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        os.close(handle)


class SourceTrees:
    """The CUDA and hipified source trees of one build, and their files on disk once needed.

    Lookups use the texts in memory; a tree is written only when a job must compile, once per
    build, into the build's scratch folder (so concurrent builds never share one).
    """

    def __init__(self, trees: Mapping[str, SourceTree], scratch: Path) -> None:
        self.trees = trees
        self._hashes: dict[tuple[str, str], str | None] = {}
        self._scratch = scratch
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def dependency_hash(self, tree: str, path: str) -> str | None:
        key = (tree, path)
        if key not in self._hashes:
            files = self.trees[tree]
            self._hashes[key] = sha256_hex(files[path].encode()) if path in files else None
        return self._hashes[key]

    @property
    def temporary(self) -> Path:
        """The compilers' TMPDIR: a folder of the build's scratch folder, so the files they leave
        there (hipcc's ``<unit>-<target>-<hash>.o``, nvcc's ``tmpxft_*`` of a killed run) go with
        it, and no build sees another's. Absolute, since the compilers run in other folders; its
        path is the cache folder's (checked for nvcc's shell where the build starts:
        buildsys.names.check_shell_path) and names made of ``[A-Za-z0-9_/-]``."""
        with self._lock:
            folder = self._scratch.resolve() / "tmp"
            folder.mkdir(exist_ok=True)
            return folder

    def folder(self, tree: str) -> Path:
        with self._lock:
            root = self._scratch / tree
            if tree not in self._written:
                for path in self.trees[tree]:
                    target = root / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(self.trees[tree][path], encoding="utf-8")
                self._written.add(tree)
            return root


def _hipify_fingerprint() -> str:
    """The hipify implementation's own sources: a change to the translator re-hipifies."""
    folder = Path(__file__).with_name("hipify")
    return sha256_hex(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.py"))))


HIPIFY_FINGERPRINT = _hipify_fingerprint()


def _tree_facts(tree: SourceTree, cache: BuildCache) -> TreeFacts:
    """What each file's translation needs from the others (hipify.tree_facts: a feature macro or
    a reduction helper is defined in one file and used in others), cached by every file's content."""
    key = key_of(
        {
            "hipify": HIPIFY_FINGERPRINT,
            "tree_facts": [[p, sha256_hex(tree[p].encode())] for p in tree],
        }
    )
    from .hipify.tree_facts import TreeFacts, scan_tree  # deferred: see hipify_tree

    stored = cache.get_text("hipify", key)
    if stored is not None:
        return TreeFacts.from_json(json.loads(stored))
    features = scan_tree({p: tree[p] for p in tree})
    cache.put_text("hipify", key, json.dumps(features.to_json(), sort_keys=True))
    return features


def hipify_tree(
    tree: SourceTree, modules: Sequence[KernelModule], cache: BuildCache
) -> tuple[SourceTree, list[str]]:
    """Every source hipified, the modules' .cu files renamed to .hip, and hipify's diagnostics
    (``file:line:col: severity[code]: message``). Results are cached by content and by the
    translator's own sources: the whole tree's under one key (every path with its content's
    hash, and which are the modules' units), so a build of an unchanged tree reads one record
    and never imports the translator; each file's under its own, so an edit re-translates
    only the files whose facts changed."""
    mains = sorted({path for m in modules for path in m.sources})
    whole_key = key_of(
        {
            "hipify": HIPIFY_FINGERPRINT,
            "tree": [[p, sha256_hex(tree[p].encode())] for p in tree],
            "mains": mains,
        }
    )
    stored = cache.get_text("hipify", whole_key)
    whole = _whole_tree_record(stored) if stored is not None else None
    if whole is None:
        whole = _hipify_files(tree, set(mains), cache)
        cache.put_text("hipify", whole_key, json.dumps(whole, sort_keys=True))
    hipified = dict(whole["files"])
    hipified.update(compat_headers(INCLUDE_DIR))
    return SourceTree(hipified, tree.include_dirs), list(whole["diagnostics"])


def _whole_tree_record(text: str) -> dict[str, Any] | None:
    """A stored whole-tree record, or None for anything but the shape _hipify_files returns
    (the cache folder is untrusted input: docs/security.md)."""
    record = stored_record(text, ("files", "diagnostics"))
    if record is None:
        return None
    files, diagnostics = record["files"], record["diagnostics"]
    if not (isinstance(files, dict) and isinstance(diagnostics, list)):
        return None
    texts = [*files, *files.values(), *diagnostics]
    return record if all(isinstance(t, str) for t in texts) else None


def _hipify_files(tree: SourceTree, mains: set[str], cache: BuildCache) -> dict[str, Any]:
    """Each file hipified (through its own cache record) under its tree path, a unit's .cu
    renamed .hip, and the diagnostics of them all, in the tree's order."""
    from .hipify.translate import HipifyOptions, hipify_source  # deferred: see hipify_tree

    hipified: dict[str, str] = {}
    diagnostics: list[str] = []
    features = _tree_facts(tree, cache)
    options = HipifyOptions(tree=features)
    for path in tree:
        key = key_of(
            {
                "hipify": HIPIFY_FINGERPRINT,
                "path": path,
                "source": sha256_hex(tree[path].encode()),
                "tree_facts": features.digest,
            }
        )
        stored = cache.get_text("hipify", key)
        if stored is None:
            result = hipify_source(tree[path], path, options=options)
            record: dict[str, Any] = {
                "text": result.text,
                "diagnostics": [d.format() for d in result.diagnostics],
            }
            cache.put_text("hipify", key, json.dumps(record, sort_keys=True))
        else:
            record = json.loads(stored)
        hipified[hip_main(path) if path in mains else path] = record["text"]
        diagnostics += record["diagnostics"]
    return {"files": hipified, "diagnostics": diagnostics}
