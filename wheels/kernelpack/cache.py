"""The on-disk cache: images taken out of compressed bundles, and images compiled at run time.

One folder (``KERNELPACK_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernelpack``, else
``~/.cache/kernelpack``), mode 0700, one file per entry named by its key (64 hex digits). A file
holds a magic, the sha256 of its payload and the payload, so a truncated or tampered file is told
apart from a good one on every read; a bad one is removed and the caller makes the entry again.
Writes go to a temporary file in the folder and are renamed into place, so readers (other
processes too) see a whole entry or none. The folder is kept under a size bound by removing the
entries least recently used (a read touches the file's time).

A folder that cannot be created or written turns the cache into an in-memory one for the rest of
the process, with one warning: kernelpack still works, it only repeats the work in each process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
import warnings
from pathlib import Path
from typing import NamedTuple

from .errors import KernelpackWarning
from .paths import cache_folder

MAGIC = b"KPCACHE1"
_HEADER = len(MAGIC) + 32
_KEY = re.compile(r"[0-9a-f]{64}")
SUFFIX = ".bin"
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: every image of the default matrix many times over


def default_folder(environ: dict[str, str] | None = None) -> Path:
    """Where the cache lives: KERNELPACK_CACHE_DIR, else the XDG user cache folder."""
    return cache_folder("KERNELPACK_CACHE_DIR", "", environ)


def cache_key(*parts: str) -> str:
    """A key for something made from several inputs (source hash, target, compiler version)."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class Entry(NamedTuple):
    key: str
    path: Path
    size: int
    mtime: float


class Sweep(NamedTuple):
    """What ``verify`` or ``clear`` did, entry by entry, as ``kernelpack cache`` reports it."""

    good: list[Entry]  # whole entries left in place (verify)
    removed: list[Entry]  # damaged (verify) or all (clear) entries that are gone now
    failed: list[tuple[Path, str]]  # files that should have gone and are still there, and why


def _frame(payload: bytes) -> bytes:
    return MAGIC + hashlib.sha256(payload).digest() + payload


def _unframe(data: bytes) -> bytes | None:
    """The payload of a cache file, or None when the file is not whole and as written."""
    if len(data) < _HEADER or not data.startswith(MAGIC):
        return None
    payload = data[_HEADER:]
    if hashlib.sha256(payload).digest() != data[len(MAGIC) : _HEADER]:
        return None
    return payload


class DiskCache:
    """Entries by key; see the module's docstring for the guarantees."""

    def __init__(self, folder: Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.folder = folder if folder is not None else default_folder()
        self.max_bytes = max_bytes
        self._memory: dict[str, bytes] | None = None  # set once the folder proved unusable
        self._lock = threading.Lock()
        self.removed_bad = 0  # entries found damaged and removed, for tests and `cache verify`

    @property
    def in_memory(self) -> bool:
        return self._memory is not None

    def _path(self, key: str) -> Path:
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key must be 64 hex digits, got {key!r}")
        return self.folder / (key + SUFFIX)

    def _fall_back(self, error: OSError) -> None:
        with self._lock:
            if self._memory is None:
                self._memory = {}
                warnings.warn(
                    f"kernelpack cache folder {self.folder} is not usable ({error.strerror or error}); "
                    "keeping extracted and compiled images in memory for this process. "
                    "Set KERNELPACK_CACHE_DIR to a writable folder to keep them across runs.",
                    KernelpackWarning,
                    stacklevel=4,
                )

    def get(self, key: str) -> bytes | None:
        """The entry's payload, or None when absent or damaged (a damaged file is removed)."""
        path = self._path(key)
        if self._memory is not None:
            return self._memory.get(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        payload = _unframe(data)
        if payload is None:
            self._discard(path)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)
        return payload

    def _discard(self, path: Path) -> str | None:
        """Remove a damaged entry; the OS's reason when it stays."""
        problem = _unlink(path)
        if problem is None:
            with self._lock:
                self.removed_bad += 1
        return problem

    def put(self, key: str, payload: bytes) -> None:
        """Store an entry atomically; an unusable folder switches to memory with one warning."""
        path = self._path(key)
        if self._memory is None:
            try:
                self._write(path, _frame(payload))
            except OSError as error:
                self._fall_back(error)
            else:
                self._evict(keep=path)
                return
        assert self._memory is not None
        self._memory[key] = payload

    def _write(self, path: Path, data: bytes) -> None:
        from .atomic import atomic_write  # only writers need it (and its tempfile import)

        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.folder.stat().st_mode & 0o077:
            os.chmod(self.folder, 0o700)
        atomic_write(path, data, private=True)

    def entries(self) -> list[Entry]:
        """Every entry file in the folder, oldest use first (stray temporary files excluded)."""
        found: list[Entry] = []
        try:
            listing = list(os.scandir(self.folder))
        except OSError:
            return found
        for item in listing:
            key = item.name[: -len(SUFFIX)]
            if not item.name.endswith(SUFFIX) or not _KEY.fullmatch(key):
                continue
            with contextlib.suppress(OSError):
                status = item.stat()
                found.append(Entry(key, Path(item.path), status.st_size, status.st_mtime))
        return sorted(found, key=lambda e: (e.mtime, e.key))

    def size(self) -> int:
        if self._memory is not None:
            return sum(len(v) for v in self._memory.values())
        return sum(e.size for e in self.entries())

    def _evict(self, keep: Path) -> None:
        """Remove the least recently used entries until the folder fits its bound."""
        entries = self.entries()
        total = sum(e.size for e in entries)
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.path == keep:
                continue
            with contextlib.suppress(OSError):
                entry.path.unlink()
                total -= entry.size

    def _start_sweep(self) -> Sweep:
        """An empty sweep, or one that says the folder itself cannot be listed (where
        :meth:`entries` sees nothing, which must not read as "nothing to do")."""
        try:
            os.scandir(self.folder).close()
        except FileNotFoundError:
            pass
        except OSError as error:
            return Sweep([], [], [(self.folder, error.strerror or str(error))])
        return Sweep([], [], [])

    def verify(self) -> Sweep:
        """Check every entry, removing damaged ones: what ``kernelpack cache verify`` reports."""
        sweep = self._start_sweep()
        for entry in self.entries():
            try:
                whole = _unframe(entry.path.read_bytes()) is not None
            except OSError:
                whole = False
            if whole:
                sweep.good.append(entry)
                continue
            problem = self._discard(entry.path)
            if problem is None:
                sweep.removed.append(entry)
            else:
                sweep.failed.append((entry.path, problem))
        return sweep

    def clear(self) -> Sweep:
        """Remove every entry and stray temporary file: what ``kernelpack cache clear`` reports."""
        sweep = self._start_sweep()
        for entry in self.entries():
            problem = _unlink(entry.path)
            if problem is None:
                sweep.removed.append(entry)
            else:
                sweep.failed.append((entry.path, problem))
        with contextlib.suppress(OSError):  # a folder that cannot be listed has no strays to see
            for stray in self.folder.glob(f".*{SUFFIX}.*.tmp"):  # atomic_write's temporary names
                problem = _unlink(stray)
                if problem is not None:
                    sweep.failed.append((stray, problem))
        if self._memory is not None:
            self._memory.clear()
        return sweep


def _unlink(path: Path) -> str | None:
    """Remove a file; None when it is gone (or was already), else the OS's reason."""
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        return error.strerror or str(error)
    return None
