"""The on-disk cache: images taken out of compressed bundles, and images compiled at run time.

One folder (``KERNELPACK_CACHE_DIR``, else ``$XDG_CACHE_HOME/kernelpack``, else
``~/.cache/kernelpack``), mode 0700, one file per entry named by its key (64 hex digits). The folder
is kept under a size bound by removing the entries least recently used (a read touches the file's
time).

Trust. What the cache holds is handed to the GPU as code, so the folder is used only when it is this
user's own. It is opened with ``O_DIRECTORY | O_NOFOLLOW`` (a symbolic link in its place is refused,
never followed, so no link's target is chmodded or written) and checked with ``fstat`` on that
descriptor: owned by the effective user and writable by nobody else. A folder of the user's that
others may read but not write is made 0700 through the descriptor; one of another owner, or one
that group or others may write, is refused: entries another user could have put there are never
loaded. Every later step (open, rename, remove, list) is relative to the checked descriptor, so a
folder swapped for a link or another folder after the check changes nothing.

A refused folder, like one that cannot be created or written, turns the cache into an in-memory one
for the rest of the process, with one :class:`KernelpackWarning` a process that names the folder,
the owner and mode found and what to do. The loader does not fail: the user's kernels still load
(the installed images are verified against the index either way), only the extraction and
compilation are repeated in each process; the command that manages the cache (``kernelpack cache
verify|clear``) refuses such a folder in one line instead, since managing it is what was asked.

Entries. A file holds a magic, an HMAC-SHA256 of its key and payload and the payload, checked on
every read, so a truncated, tampered or planted file is told apart from a good one; a bad one is
removed and the caller makes the entry again. A plain hash would do against damage, not against a
writer: the images extracted from bundles could be checked against the index's sha256 (the loader
does that too), but the cubins the driver makes from PTX and the objects NVRTC or hipRTC make from
source are in no index, and a plain hash of planted GPU code is as valid as one of ours. So the
check is keyed, with 32 random bytes in ``.key``, a 0600 file of this user inside the 0700 folder:
whoever can read it can already read and write the folder (this user, or root), and whoever could
once write the folder but cannot read the key (a folder that used to be shared, storage mounted
elsewhere with other uids, a restored copy) cannot make an entry that passes. The key is made on
first use under a temporary name and hard-linked into place, so processes racing to make it agree
on one; a key file that is not a 32-byte regular file of this user with mode 0600 is replaced, and
the entries made with the old key become misses. The entry's key is under the HMAC too, so an entry
renamed to another key is refused.

Entry files are read through :mod:`kernelpack.loader.cache_files` (``O_NOFOLLOW | O_NONBLOCK``, then ``fstat`` on
the descriptor): a link, a FIFO, a device or a file over :data:`ENTRY_LIMIT` is a damaged entry,
removed, never followed, waited on or read whole. A read takes the bytes into memory, checks them,
and hands over those same bytes, so nothing can be swapped between the check and the load.

Writes. An entry is written to ``.<key>.bin.<random>.tmp`` in the folder (created exclusively,
0600, locked with ``flock`` while it is written) and renamed into place, so readers (other
processes too) see a whole entry or none. A writer killed midway leaves its temporary file behind,
unlocked (the kernel drops a dead process's locks): the trimming pass after each write counts every
temporary file in the size bound and removes those older than :data:`STALE_TEMP_SECONDS` that no
live writer holds locked. A writer whose temporary file was taken that way (stopped for longer than
that) only skips storing its entry.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import contextlib
import hashlib
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from ..errors import KernelpackWarning, UsageError
from ..files.paths import cache_folder
from .cache_files import (
    ENTRY_LIMIT,
    HEADER,
    MAGIC,
    SUFFIX,
    BadEntry,
    UntrustedFolder,
    frame,
    open_folder,
    read_entry,
    secret,
    unframe,
    unlink,
    unlocked,
    whole,
    write_entry,
)

_KEY = re.compile(r"[0-9a-f]{64}")
#: Temporary files of entry and key writers (and of the older writer, atomic_write's names).
_TEMP = re.compile(r"\.(?:[0-9a-f]{64}\.bin|key)\..+\.tmp")
DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB: every image of the default matrix many times over
#: A temporary file unchanged this long and unlocked is a dead writer's; a live one writes its
#: whole payload within a second of creating it.
STALE_TEMP_SECONDS = 60.0

_said: set[tuple[str, str]] = set()  # (folder, reason) warned about in this process
_said_lock = threading.Lock()


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


class DiskCache:
    """Entries by key; see the module's docstring for the guarantees."""

    def __init__(self, folder: Path | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.folder = folder if folder is not None else default_folder()
        self.max_bytes = max_bytes
        self._memory: dict[str, bytes] | None = None  # set once the folder proved unusable
        self._lock = threading.Lock()
        self.removed_bad = 0  # entries found damaged and removed, for tests and `cache verify`
        self.reclaimed = 0  # dead writers' temporary files removed, for tests

    @property
    def in_memory(self) -> bool:
        return self._memory is not None

    def _name(self, key: str) -> str:
        if not _KEY.fullmatch(key):
            raise ValueError(f"cache key must be 64 hex digits, got {key!r}")
        return key + SUFFIX

    # -- the folder and its key

    @contextlib.contextmanager
    def _opened(self, *, create: bool) -> Iterator[int | None]:
        """The folder's descriptor, checked (see the module's docstring), or None when it does
        not exist and ``create`` is false. Raises :class:`UntrustedFolder` or the OSError."""
        fd = open_folder(self.folder, create=create)
        if fd is None:
            yield None
            return
        try:
            yield fd
        finally:
            os.close(fd)

    def refusal(self) -> str | None:
        """Why the folder is not used (one line), or None when it is this user's own or absent."""
        try:
            with self._opened(create=False):
                return None
        except UntrustedFolder as refused:
            return str(refused)
        except OSError:
            return None

    def _fall_back(self, reason: str) -> dict[str, bytes]:
        """The in-memory store from now on; the warning, once a process for a folder and reason."""
        with self._lock:
            if self._memory is None:
                self._memory = {}
            memory = self._memory
        with _said_lock:
            said = (os.fspath(self.folder), reason)
            if said in _said:
                return memory
            _said.add(said)
        warnings.warn(
            f"{reason}; keeping extracted and compiled images in memory for this process",
            KernelpackWarning,
            stacklevel=4,
        )
        return memory

    def _unusable(self, error: OSError) -> str:
        return (
            f"kernelpack cache folder {self.folder} is not usable ({error.strerror or error}); "
            "set KERNELPACK_CACHE_DIR to a writable folder of your own to keep images across runs"
        )

    # -- entries

    def get(self, key: str) -> bytes | None:
        """The entry's payload, or None when absent or damaged (a damaged file is removed)."""
        name = self._name(key)
        if self._memory is not None:
            return self._memory.get(key)
        try:
            with self._opened(create=False) as fd:
                if fd is None:
                    return None
                try:
                    data = read_entry(fd, name)
                except BadEntry:
                    data = b""  # damaged: removed below
                if data is None:
                    return None
                payload = unframe(secret(fd), key, data)
                if payload is None:
                    self._discard(fd, name)
                    return None
                with contextlib.suppress(OSError):
                    os.utime(name, dir_fd=fd, follow_symlinks=False)
                return payload
        except UntrustedFolder as refused:
            return self._fall_back(str(refused)).get(key)
        except OSError:
            return None

    def _discard(self, fd: int, name: str) -> str | None:
        """Remove a damaged entry; the OS's reason when it stays."""
        problem = unlink(fd, name)
        if problem is None:
            with self._lock:
                self.removed_bad += 1
        return problem

    def put(self, key: str, payload: bytes) -> None:
        """Store an entry atomically; an unusable or refused folder switches to memory with one
        warning."""
        name = self._name(key)
        memory = self._memory
        if memory is None:
            if len(payload) > ENTRY_LIMIT - HEADER:
                return  # never read back (ENTRY_LIMIT): made again by each process
            try:
                with self._opened(create=True) as fd:
                    assert fd is not None
                    write_entry(fd, name, frame(secret(fd), key, payload))
                    self._trim(fd, keep=name)
                return
            except UntrustedFolder as refused:
                memory = self._fall_back(str(refused))
            except OSError as error:
                memory = self._fall_back(self._unusable(error))
        memory[key] = payload

    def _listing(self, fd: int) -> tuple[list[Entry], list[Entry]]:
        """The folder's entry files, oldest use first, and its temporary files (neither
        followed: a link is listed as itself)."""
        entries: list[Entry] = []
        temps: list[Entry] = []
        with os.scandir(fd) as listing:
            items = list(listing)
        for item in items:
            name = item.name
            is_entry = name.endswith(SUFFIX) and _KEY.fullmatch(name[: -len(SUFFIX)]) is not None
            if not is_entry and not _TEMP.fullmatch(name):
                continue
            with contextlib.suppress(OSError):
                status = item.stat(follow_symlinks=False)
                found = Entry(
                    name[: -len(SUFFIX)] if is_entry else "",
                    self.folder / name,
                    status.st_size,
                    status.st_mtime,
                )
                (entries if is_entry else temps).append(found)
        return sorted(entries, key=lambda e: (e.mtime, e.key)), temps

    def _listed(self) -> tuple[list[Entry], list[Entry]]:
        try:
            with self._opened(create=False) as fd:
                return ([], []) if fd is None else self._listing(fd)
        except (UntrustedFolder, OSError):
            return [], []

    def entries(self) -> list[Entry]:
        """Every entry file in the folder, oldest use first (temporary files excluded); none
        where the folder is absent, cannot be listed or is refused (see :meth:`refusal`)."""
        return self._listed()[0]

    def size(self) -> int:
        """The bytes the cache takes: its entries and every temporary file, a dead writer's too."""
        if self._memory is not None:
            return sum(len(v) for v in self._memory.values())
        entries, temps = self._listed()
        return sum(e.size for e in entries) + sum(t.size for t in temps)

    def _trim(self, fd: int, keep: str) -> None:
        """Reclaim dead writers' temporary files, then remove the least recently used entries
        until the folder, temporary files included, fits its bound."""
        entries, temps = self._listing(fd)
        total = sum(e.size for e in entries) + sum(t.size for t in temps)
        now = time.time()
        for temp in temps:
            stale = now - temp.mtime > STALE_TEMP_SECONDS and unlocked(fd, temp.path.name)
            if stale and unlink(fd, temp.path.name) is None:
                total -= temp.size
                with self._lock:
                    self.reclaimed += 1
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.path.name == keep:
                continue
            if unlink(fd, entry.path.name) is None:
                total -= entry.size

    # -- what `kernelpack cache` does

    def verify(self) -> Sweep:
        """Check every entry, removing damaged ones: what ``kernelpack cache verify`` reports. An
        entry that is not a regular file (a link, a FIFO, a device) or is over the size limit is
        damaged; none is followed, waited on or read whole. A refused folder is a UsageError."""
        return self._sweep(self._verify)

    def clear(self) -> Sweep:
        """Remove every entry and temporary file: what ``kernelpack cache clear`` reports (the key
        stays; a writer whose temporary file goes only skips storing its entry). A refused folder
        is a UsageError."""
        if self._memory is not None:
            self._memory.clear()
        return self._sweep(self._clear)

    def _sweep(self, work: Callable[[int, Sweep], None]) -> Sweep:
        """``work`` done on the folder: an empty sweep where it is absent, one that says the
        folder cannot be used where that fails (where :meth:`entries` sees nothing, which must
        not read as "nothing to do"), a UsageError (one line, exit 2) where it is refused."""
        sweep = Sweep([], [], [])
        try:
            with self._opened(create=False) as fd:
                if fd is not None:
                    work(fd, sweep)
        except UntrustedFolder as refused:
            raise UsageError(str(refused)) from None
        except OSError as error:
            sweep.failed.append((self.folder, error.strerror or str(error)))
        return sweep

    def _verify(self, fd: int, sweep: Sweep) -> None:
        key = secret(fd)
        for entry in self._listing(fd)[0]:
            verdict = whole(fd, key, entry.key)
            if verdict is None:  # gone meanwhile (another process's clear or trim)
                continue
            if verdict:
                sweep.good.append(entry)
                continue
            problem = self._discard(fd, entry.path.name)
            if problem is None:
                sweep.removed.append(entry)
            else:
                sweep.failed.append((entry.path, problem))

    def _clear(self, fd: int, sweep: Sweep) -> None:
        entries, temps = self._listing(fd)
        for entry in entries:
            problem = unlink(fd, entry.path.name)
            if problem is None:
                sweep.removed.append(entry)
            else:
                sweep.failed.append((entry.path, problem))
        for temp in temps:
            problem = unlink(fd, temp.path.name)
            if problem is not None:
                sweep.failed.append((temp.path, problem))


__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAGIC",
    "STALE_TEMP_SECONDS",
    "DiskCache",
    "Entry",
    "Sweep",
    "UntrustedFolder",
    "cache_key",
    "default_folder",
]
