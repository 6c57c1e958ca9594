"""The disk cache's files, each reached through the folder's checked descriptor.

The primitives under :mod:`kernelpack.loader.cache` (whose docstring gives the guarantees and why):
opening and checking the folder (:func:`open_folder`), its key (:func:`secret`), entry frames
(:func:`frame`, :func:`unframe`), reading an entry file without following a link, blocking on a
FIFO or reading a device or a huge file whole (:func:`read_entry`, :func:`whole`), the locked
temporary file an entry is written to and renamed from (:func:`write_entry`, :func:`unlocked`).

Every name given to a function here is a name inside the folder, opened, created, renamed or
removed relative to the folder's descriptor (``dir_fd``), never a path: a folder renamed or
replaced by a link after its check leads nothing elsewhere. :func:`kernelpack.files.regular.
read_regular` is the same check for files named by path; an entry needs it relative to the folder
and with ``O_NOFOLLOW``. :func:`kernelpack.files.atomic.atomic_write` is the same write by path; an entry
needs it relative to the folder and with its temporary file locked while it is written.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from ..files.regular import IMAGE_FILE_LIMIT

MAGIC = b"KPCACHE2"  # KPCACHE1 entries (a plain sha256) are damaged to this version: made again
HEADER = len(MAGIC) + 32
SUFFIX = ".bin"
KEY_FILE = ".key"
_SECRET_BYTES = 32
#: The largest entry file read: an image of the largest file the loader reads, with its header.
ENTRY_LIMIT = IMAGE_FILE_LIMIT + HEADER

_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class UntrustedFolder(Exception):
    """The folder is not this user's own (see :mod:`kernelpack.loader.cache`); the message is one line
    that names it, says what was found and what to do."""


class BadEntry(Exception):
    """An entry file that is not a regular file of this user within :data:`ENTRY_LIMIT`."""


def open_folder(path: Path, *, create: bool) -> int | None:
    """The cache folder's descriptor, checked by :func:`check_folder`; None where it does not
    exist and ``create`` is false. Raises :class:`UntrustedFolder`, or the OSError."""
    folder = os.fspath(path)
    if create:
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.mkdir(folder, 0o700)
    try:
        fd = os.open(folder, _FOLDER_FLAGS)
    except FileNotFoundError:
        if create:
            raise
        return None
    except OSError as error:
        # O_NOFOLLOW | O_DIRECTORY on a link: ELOOP or (Linux) ENOTDIR; lstat says which
        if error.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(folder):
            raise UntrustedFolder(_link_refusal(folder)) from None
        raise
    try:
        check_folder(fd, folder)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def check_folder(fd: int, folder: str) -> None:
    """Refuse a folder not owned by the effective user or writable by group or others; make one
    of the user's that others may only read private."""
    info = os.fstat(fd)
    mode = stat.S_IMODE(info.st_mode)
    found = f"owned by {_owner(info.st_uid)} with mode {mode:04o}"
    me = os.geteuid()
    if info.st_uid != me:
        raise UntrustedFolder(
            f"kernelpack cache folder {folder} is {found}, not yours ({_owner(me)}): not using "
            "it; set KERNELPACK_CACHE_DIR to a folder of your own"
        )
    if mode & 0o022:
        raise UntrustedFolder(
            f"kernelpack cache folder {folder} is {found}, writable by others: not using it; "
            f"run `chmod 700 {folder}` (then `python -m kernelpack cache verify`), or set "
            "KERNELPACK_CACHE_DIR to a folder of your own"
        )
    if mode & 0o077:
        os.fchmod(fd, 0o700)


def _is_link(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _link_refusal(folder: str) -> str:
    try:
        target = f" to {os.readlink(folder)}"
    except OSError:
        target = ""
    return (
        f"kernelpack cache folder {folder} is a symbolic link{target}: not following it; set "
        "KERNELPACK_CACHE_DIR to the real folder (yours, mode 0700), or remove the link"
    )


def _read_secret(fd: int) -> bytes | None:
    """The key file's 32 bytes, or None when it is absent or not a 0600 regular file of this
    user of that size (then it is removed, and made again)."""
    try:
        key_fd = os.open(KEY_FILE, _READ_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno != errno.ELOOP:
            raise
        unlink(fd, KEY_FILE)
        return None
    try:
        info = os.fstat(key_fd)
        ours = stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
        secret = os.read(key_fd, _SECRET_BYTES + 1) if ours else b""
        if ours and not info.st_mode & 0o077 and len(secret) == _SECRET_BYTES:
            return secret
    finally:
        os.close(key_fd)
    unlink(fd, KEY_FILE)
    return None


def secret(fd: int) -> bytes:
    """The folder's key, read on each use (so a folder made again, or a key replaced by another
    process, is followed at once), made on first use."""
    secret = _read_secret(fd)
    return secret if secret is not None else _make_secret(fd)


def _make_secret(fd: int) -> bytes:
    """A new key, written under a temporary name and linked into place; where another process
    linked its key first, that one."""
    secret = os.urandom(_SECRET_BYTES)
    temporary = f"{KEY_FILE}.{os.urandom(8).hex()}.tmp"
    key_fd = os.open(temporary, _CREATE_FLAGS, 0o600, dir_fd=fd)
    try:
        try:
            os.fchmod(key_fd, 0o600)
            _write_all(key_fd, secret)
        finally:
            os.close(key_fd)
        for _ in range(2):  # a bad key found in place is removed by _read_secret: link again
            try:
                os.link(temporary, KEY_FILE, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
            except FileExistsError:
                theirs = _read_secret(fd)
                if theirs is not None:
                    return theirs
            else:
                return secret
    finally:
        unlink(fd, temporary)
    raise OSError(errno.EEXIST, "its key file keeps being replaced", KEY_FILE)


# -- entry files


def frame(secret: bytes, key: str, payload: bytes) -> bytes:
    return MAGIC + _mac(secret, key, payload).digest() + payload


def _mac(secret: bytes, key: str, payload: bytes = b"") -> hmac.HMAC:
    mac = hmac.new(secret, key.encode("ascii"), hashlib.sha256)
    mac.update(payload)
    return mac


def unframe(secret: bytes, key: str, data: bytes) -> bytes | None:
    """The payload of a cache file, or None when the file is not whole and as written with this
    folder's key for this entry's key."""
    if len(data) < HEADER or not data.startswith(MAGIC):
        return None
    payload = data[HEADER:]
    if not hmac.compare_digest(_mac(secret, key, payload).digest(), data[len(MAGIC) : HEADER]):
        return None
    return payload


def _open_regular(fd: int, name: str) -> int:
    """A descriptor of the entry file ``name``, a regular file of this user within
    :data:`ENTRY_LIMIT`; :class:`BadEntry` for anything else (a link, a FIFO, a device, a folder),
    FileNotFoundError when absent. Opened without following a link or blocking on a FIFO, and
    checked on the descriptor, so the check and the read concern the same file."""
    try:
        entry_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise BadEntry(error.strerror) from None
    try:
        info = os.fstat(entry_fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise BadEntry("not a regular file of this user")
        if info.st_size > ENTRY_LIMIT:
            raise BadEntry("over the size limit")
        os.set_blocking(entry_fd, True)
    except BaseException:
        os.close(entry_fd)
        raise
    return entry_fd


def _chunks(entry_fd: int) -> Iterator[bytes]:
    """The file's bytes, a chunk at a time; :class:`BadEntry` once past :data:`ENTRY_LIMIT` (a file
    that grew after its check)."""
    remaining = ENTRY_LIMIT + 1
    while True:
        try:
            chunk = os.read(entry_fd, min(remaining, _CHUNK))
        except OSError as error:
            raise BadEntry(error.strerror) from None
        if not chunk:
            return
        remaining -= len(chunk)
        if remaining <= 0:
            raise BadEntry("over the size limit")
        yield chunk


def read_entry(fd: int, name: str) -> bytes | None:
    """The entry file's bytes, None when absent; :class:`BadEntry` when it is not an entry file."""
    try:
        entry_fd = _open_regular(fd, name)
    except FileNotFoundError:
        return None
    try:
        return b"".join(_chunks(entry_fd))
    finally:
        os.close(entry_fd)


def whole(fd: int, secret: bytes, key: str) -> bool | None:
    """Whether an entry file is whole and as written (None: it is gone), read in chunks (memory
    stays small whatever the file's size)."""
    try:
        entry_fd = _open_regular(fd, key + SUFFIX)
    except FileNotFoundError:
        return None
    except BadEntry:
        return False
    try:
        head = b""
        mac = _mac(secret, key)
        for chunk in _chunks(entry_fd):
            if len(head) < HEADER:
                take = HEADER - len(head)
                head, chunk = head + chunk[:take], chunk[take:]
            mac.update(chunk)
        return (
            len(head) == HEADER
            and head.startswith(MAGIC)
            and hmac.compare_digest(mac.digest(), head[len(MAGIC) :])
        )
    except BadEntry:
        return False
    finally:
        os.close(entry_fd)


def _write_all(out: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(out, view) :]


def write_entry(fd: int, name: str, data: bytes) -> None:
    """Write an entry under a locked temporary name and rename it into place (atomic for
    readers). A temporary file reclaimed meanwhile (its writer stopped for longer than
    :data:`STALE_TEMP_SECONDS`) means the entry is not stored, and nothing else."""
    temporary = f".{name}.{os.urandom(8).hex()}.tmp"
    out = os.open(temporary, _CREATE_FLAGS, 0o600, dir_fd=fd)
    try:
        with contextlib.suppress(OSError):  # a file system without locks: the age rule alone
            fcntl.flock(out, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _write_all(out, data)
        try:
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        except FileNotFoundError:
            return
    except BaseException:
        unlink(fd, temporary)
        raise
    finally:
        os.close(out)


def unlocked(fd: int, name: str) -> bool:
    """Whether no live writer holds the temporary file ``name`` (a link or a non-file in its
    place is nobody's either)."""
    try:
        temp_fd = os.open(name, _READ_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(temp_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True  # no locks here: the age alone says
    finally:
        os.close(temp_fd)
    return True


def unlink(fd: int, name: str) -> str | None:
    """Remove a file of the folder; None when it is gone (or was already), else the OS's reason."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except OSError as error:
        return error.strerror or str(error)
    return None
