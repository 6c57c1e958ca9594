"""The one error hierarchy of kernelpack and its builder.

Every error a user can meet is a subclass of :class:`KernelpackError` and carries the exit status
that the command lines return for it (0 success, 1 a failure of the work, 2 bad input). The command
lines catch the hierarchy in one place (:func:`kernelpack._console.run_cli`) and print one line;
``KERNELPACK_DEBUG=1`` adds the traceback.

Each class stands for one kind of failure a user acts on differently, and its message names the
file, argument or library at fault and what to do next:

============================  ====  =============================================================
class                         exit  raised when
============================  ====  =============================================================
:class:`UsageError`           2     an argument, a file or a key cannot be used as given (also a
                                    ValueError, so ``except ValueError`` in a caller still works)
:class:`FormatError`          2     a file is not what it claims to be (truncated, corrupt, hostile)
:class:`IntegrityError`       1     installed or built bytes disagree with their index (sha256,
                                    size): the install or the build output was damaged
:class:`NoImageError`         1     no image of a module fits the GPU and nothing can stand in
:class:`RuntimeLibraryError`  1     the vendor runtime (libcuda, libamdhip64) is missing or failed
:class:`CompileError`         1     a compiler (NVRTC, hipRTC, and the builder's) rejected a source
:class:`SweepError`           1     a sweep could not go on: its database locked or its disk full,
                                    the Dask scheduler unreachable, a shard failed on every attempt
                                    (a rerun resumes it once the cause is fixed)
============================  ====  =============================================================

The base class is never raised itself: constructing it raises TypeError, so every failure has to
say which of these it is.
"""

from __future__ import annotations

import os
from typing import Any


def debug_enabled() -> bool:
    """Whether KERNELPACK_DEBUG asks for tracebacks and the loader's every decision. Here, with
    the errors, rather than with the terminal output: the loader needs it, not argparse, json and
    traceback, which the command lines' module imports (4 to 8 ms of a first load, docs/loader.md)."""
    return os.environ.get("KERNELPACK_DEBUG", "") not in ("", "0")


class KernelpackError(Exception):
    """The base of every kernelpack failure; catch it, raise a subclass."""

    exit_code: int = 1

    def __new__(cls, *args: Any, **kwargs: Any) -> KernelpackError:
        if cls is KernelpackError:
            raise TypeError(
                "KernelpackError is the base class; raise the subclass that says what failed "
                "(UsageError, IntegrityError, NoImageError, RuntimeLibraryError, CompileError, "
                "SweepError)"
            )
        return super().__new__(cls, *args, **kwargs)


class UsageError(KernelpackError, ValueError):
    """Bad input: an argument, a file or a key that cannot be used as given.

    The message names it, the value given and what would have worked.
    """

    exit_code = 2


class FormatError(UsageError):
    """A file that is not what it claims to be: truncated, corrupt or hostile.

    The message names the file, what was expected and the byte offset where reading stopped.
    """

    def __init__(self, path: str, offset: int, expected: str) -> None:
        self.path = path
        self.offset = offset
        self.expected = expected
        super().__init__(f"{path}: at offset {offset}: expected {expected}")


class IntegrityError(KernelpackError):
    """Bytes that disagree with the index that describes them: a sha256 or a size that differs.

    The message names the file, both values in full and what restores it (reinstall, rebuild).
    """


class NoImageError(KernelpackError):
    """No image of a module fits the GPU: says which target was looked for and what to do."""


class RuntimeLibraryError(KernelpackError):
    """The vendor runtime (libcuda, libamdhip64) is missing or reported an error."""


class CompileError(KernelpackError):
    """A compiler rejected a source: names the module, the target and the compiler's log."""


class SweepError(KernelpackError):
    """A walk sweep stopped on a failure of its store or its engine (not of its input): names the
    database or the scheduler, SQLite's or Dask's own words, and says that a rerun resumes."""


class KernelpackWarning(UserWarning):
    """Something worked, but slower or differently than it should: each is said once a process."""
