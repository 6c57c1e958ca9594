"""Reading a file kernelpack did not write: regular files of a bounded size only.

Every file a command is pointed at (``inspect FILE``, a sysfs tree, a cache entry, an index) may be
a FIFO that never answers, a device that never ends (``/dev/zero``) or a file of many gigabytes.
``Path.read_bytes`` hangs on the first and runs out of memory on the others. :func:`read_regular`
opens without blocking, checks with ``fstat`` on the open descriptor (so the check and the read
concern the same file, whatever is renamed meanwhile) that it is a regular file, and reads at most
``limit`` bytes: a longer file is refused, never truncated silently.

sysfs reports 4096 bytes for every attribute whatever its content, so the limit is checked against
what is read, not only against ``st_size``.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ..errors import UsageError

#: The largest file ``inspect`` and the loader read whole: bigger than any bundle a wheel ships.
IMAGE_FILE_LIMIT = 1 << 30

#: The largest kernel module source the loader reads (to compile it where no image fits).
SOURCE_FILE_LIMIT = 64 << 20

#: The largest sysfs attribute read: KFD ``properties`` files are about 1.5 KB.
SYSFS_FILE_LIMIT = 1 << 16


def read_regular(path: str | os.PathLike[str], *, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    ``what`` names the file's role in the error ("a bundle, code object, cubin or PTX"). Raises
    :class:`FileNotFoundError` / :class:`NotADirectoryError` for a missing file, so callers that
    accept absence can say so, and :class:`UsageError` (one line, exit status 2) for everything
    else: a FIFO, a device, a folder, a file over the limit, a read that fails.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as error:
        raise UsageError(f"{name}: cannot read it ({error.strerror}); give {what}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _kind(info.st_mode)
            raise UsageError(f"{name}: is {kind}, not a regular file; give {what}")
        if info.st_size > limit:
            raise UsageError(
                f"{name}: {info.st_size} bytes, over the {limit}-byte limit for {what}"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        remaining = limit + 1
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining <= 0:
            raise UsageError(f"{name}: longer than the {limit}-byte limit for {what}")
        return b"".join(chunks)
    except OSError as error:
        raise UsageError(f"{name}: cannot read it ({error.strerror}); give {what}") from None
    finally:
        os.close(fd)


def read_regular_text(path: str | os.PathLike[str], *, limit: int, what: str) -> str:
    """:func:`read_regular` decoded as UTF-8, undecodable bytes replaced (sysfs text)."""
    return read_regular(path, limit=limit, what=what).decode("utf-8", errors="replace")


def read_toml(path: str | os.PathLike[str], *, limit: int, what: str) -> dict[str, Any]:
    """The TOML document in ``path``, read as :func:`read_regular` reads (a missing file raises
    :class:`FileNotFoundError` / :class:`NotADirectoryError`, so the caller says what to give
    instead); text that is not UTF-8 or not TOML, or nests too deeply for tomllib (its
    RecursionError), is one UsageError naming the file, where the fault is and ``what`` to give.
    """
    import tomllib  # deferred: tomllib and datetime cost a cubin load 5 ms it never reads TOML

    name = os.fspath(path)
    data = read_regular(path, limit=limit, what=what)
    try:
        return tomllib.loads(data.decode())
    except UnicodeDecodeError as error:
        raise UsageError(f"{name}: not UTF-8 text (at byte {error.start}); give {what}") from None
    except tomllib.TOMLDecodeError as error:
        raise UsageError(f"{name}: not TOML ({error}); give {what}") from None
    except RecursionError:
        raise UsageError(f"{name}: arrays or tables nested too deeply; give {what}") from None


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


__all__ = [
    "IMAGE_FILE_LIMIT",
    "SOURCE_FILE_LIMIT",
    "SYSFS_FILE_LIMIT",
    "read_regular",
    "read_regular_text",
    "read_toml",
]
