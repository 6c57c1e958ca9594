"""The build cache: compile results stored by what went into them, safe to share between builds.

A compile job's result depends on its command (compiler identity and version, flags, target),
its main source and every header the compiler read. The headers are known only after a compile,
from the compiler's dependency output, so lookups work in two steps (ccache's "direct mode"):

1. The *job key* hashes the command and the main source. It names a manifest that lists, for
   each earlier compile of that job, the headers it read with their hashes, and the object made.
2. An entry whose recorded header hashes all equal the headers' current hashes is a hit: the
   object is read back and checked against its stored sha256. No compiler starts.

Layout under the cache root: ``manifests/<k[:2]>/<k>.json`` and ``objects/<o[:2]>/<o>`` with
``<o>.json`` beside it (the object's sha256 and what was read off it); derived results by their
inputs' key under ``<namespace>/<k[:2]>/<k>``: ``hipify`` (translations), ``discovery`` (what an
object holds), ``demangle`` (c++filt's output), ``bundles`` (compressed bundles, behind their
sha256) and ``version`` (setuptools-scm's, buildsys.scm_version). Every file is written to a
temporary name in its folder and renamed into place, so a reader sees a whole file or none, and
two builds sharing one cache need no lock: the worst a race does is lose a manifest entry, which
costs one recompile later. A manifest is written after its object, so it never names a missing one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpack.errors import UsageError
from kernelpack.files.atomic import atomic_write

# A manifest keeps the newest entries for one job key: enough to switch between a few branches
# without recompiling, small enough to read in microseconds.
MANIFEST_ENTRIES = 8


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_of(value: object) -> str:
    """A stable hash of a JSON-able value (sorted keys, no whitespace)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return sha256_hex(text.encode())


def stored_record(text: str | bytes, keys: Collection[str]) -> dict[str, Any] | None:
    """The JSON object a record read back from the cache holds, when its keys are exactly
    ``keys``; None for anything else. The cache folder is untrusted input (docs/security.md):
    what is not the shape written is read as absent, and the work is done again. The caller
    checks the values."""
    try:
        record = json.loads(text)
    except ValueError:  # not JSON, or bytes that are not UTF-8
        return None
    return record if isinstance(record, dict) and set(record) == set(keys) else None


@dataclass(frozen=True)
class CachedObject:
    data: bytes
    info: dict[str, Any]  # what the builder stored with it: resources, compile seconds


class BuildCache:
    """The content-addressed store under one root folder (the settings' cache_dir: by default
    ``~/.cache/kernelpack/build``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _manifest_path(self, job_key: str) -> Path:
        return self.root / "manifests" / job_key[:2] / f"{job_key}.json"

    def _object_path(self, object_key: str) -> Path:
        return self.root / "objects" / object_key[:2] / object_key

    def lookup(
        self, job_key: str, dependency_hash: Callable[[str], str | None]
    ) -> CachedObject | None:
        """The object of an earlier compile whose dependencies still hash the same, or None.

        ``dependency_hash(path)`` gives the current sha256 of a dependency (None when it no longer
        exists); the caller memoises it, since every target of a module asks about the same files.
        """
        for entry in self._entries(job_key):
            dependencies: dict[str, str] = entry["dependencies"]
            if all(dependency_hash(path) == digest for path, digest in dependencies.items()):
                found = self._read_object(entry["object"])
                if found is not None:
                    return found
        return None

    def store(
        self, job_key: str, dependencies: Mapping[str, str], data: bytes, info: Mapping[str, Any]
    ) -> None:
        """Record a compile: its object, then the manifest entry that leads to it."""
        object_key = key_of({"job": job_key, "dependencies": dict(dependencies)})
        path = self._object_path(object_key)
        record = {**info, "sha256": sha256_hex(data)}
        self._write(path, data)
        self._write(
            path.with_name(f"{object_key}.json"), json.dumps(record, sort_keys=True).encode()
        )
        entries = [e for e in self._entries(job_key) if e["object"] != object_key]
        entries.insert(
            0, {"dependencies": dict(sorted(dependencies.items())), "object": object_key}
        )
        manifest = json.dumps({"entries": entries[:MANIFEST_ENTRIES]}, sort_keys=True)
        self._write(self._manifest_path(job_key), manifest.encode())

    def _entries(self, job_key: str) -> list[dict[str, Any]]:
        try:
            manifest = json.loads(self._manifest_path(job_key).read_bytes())
            entries: list[dict[str, Any]] = manifest["entries"]
        except (OSError, ValueError, KeyError, TypeError):
            return []
        return entries

    def _read_object(self, object_key: str) -> CachedObject | None:
        """The object and its record; None when either is missing or the bytes do not match
        (a damaged cache costs a recompile, never a wrong object)."""
        path = self._object_path(object_key)
        try:
            data = path.read_bytes()
            info: dict[str, Any] = json.loads(path.with_name(f"{object_key}.json").read_bytes())
        except (OSError, ValueError):
            return None
        if info.get("sha256") != sha256_hex(data):
            return None
        return CachedObject(data, info)

    def get_text(self, namespace: str, key: str) -> str | None:
        """A derived text stored by its inputs' key (hipified sources), or None."""
        try:
            return (self.root / namespace / key[:2] / key).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def put_text(self, namespace: str, key: str, text: str) -> None:
        self._write(self.root / namespace / key[:2] / key, text.encode("utf-8"))

    def get_blob(self, namespace: str, key: str) -> bytes | None:
        """Bytes stored by :meth:`put_blob`, or None when absent or damaged (they no longer
        match the sha256 stored before them)."""
        try:
            stored = (self.root / namespace / key[:2] / key).read_bytes()
        except OSError:
            return None
        digest, newline, data = stored[:64], stored[64:65], stored[65:]
        return data if newline == b"\n" and sha256_hex(data).encode() == digest else None

    def put_blob(self, namespace: str, key: str, data: bytes) -> None:
        """A derived file (a compressed bundle) by its inputs' key, behind its sha256."""
        self._write(self.root / namespace / key[:2] / key, sha256_hex(data).encode() + b"\n" + data)

    def _write(self, path: Path, data: bytes) -> None:
        """One file of the cache, atomically; a folder that cannot take it is a UsageError that
        says how to name another (a read-only or full cache is not a failure of the build)."""
        try:
            atomic_write(path, data)
        except OSError as error:
            raise UsageError(
                f"{self.root} (--cache-dir / KERNELPACK_BUILD_CACHE_DIR): cannot write "
                f"{path.relative_to(self.root)} ({error.strerror or error}); name a writable "
                "folder with --cache-dir DIR"
            ) from None
