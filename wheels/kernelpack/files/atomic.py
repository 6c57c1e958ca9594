"""Atomic writes: a reader sees the old file (or folder) or the new one, never a half-written one.

The one implementation for the whole project: the loader's disk cache, the builder's cache and
output folders, wheels and the benchmark tables. A file is written to a temporary name in its own
folder and renamed into place; a folder is made complete beside its final place and then swapped in.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once at import: setting the umask is the only way to read it, and not safe once threads run.
_UMASK = _read_umask()


def atomic_write(path: Path, data: bytes | str, *, private: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically, making its folder if needed.

    The file gets the permissions an ordinary write would give, or owner-only with ``private``
    (cache entries of one user).
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            if not private:
                os.fchmod(handle.fileno(), 0o666 & ~_UMASK)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the
    system or the file system cannot (the caller falls back or refuses), OSError for any other
    failure. The one swap of the project: :func:`atomic_folder` and the toolchain's update use it."""
    import ctypes  # deferred: only a swap needs it, and a build with nothing to write swaps nothing

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    result = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


@contextlib.contextmanager
def atomic_folder(path: Path) -> Iterator[Path]:
    """Yield an empty staging folder beside ``path``; when the block ends normally, the staging
    folder becomes ``path`` in one step and the old folder is removed. An error in the block leaves
    ``path`` as it was.

    Where the system cannot swap two folders in one step, the old folder is renamed away first: a
    reader may then briefly find no folder, never a mixed one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.new-"))
    try:
        os.chmod(staging, 0o777 & ~_UMASK)
        yield staging
        if not path.exists():
            os.rename(staging, path)
            return
        if exchange(staging, path):
            shutil.rmtree(staging)
            return
        old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.old-"))
        os.rename(path, old / "folder")
        os.rename(staging, path)
        shutil.rmtree(old)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
