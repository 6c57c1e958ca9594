"""The one error hierarchy of kernelpack and its builder.

Every error a user can meet is a subclass of :class:`KernelpackError` and carries the exit status
that the command lines return for it (0 success, 1 a failure of the work, 2 bad input). The command
lines catch the hierarchy in one place (:func:`kernelpack._console.run_cli`) and print one line;
``KERNELPACK_DEBUG=1`` adds the traceback.
"""

from __future__ import annotations


class KernelpackError(Exception):
    """A failure of the work: a compile error, no fitting image, a missing runtime."""

    exit_code: int = 1


class UsageError(KernelpackError, ValueError):
    """Bad input: an argument, a file or a key that cannot be used as given (also a ValueError,
    what Python code expects of a bad argument)."""

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


class NoImageError(KernelpackError):
    """No image of a module fits the GPU: says which target was looked for and what to do."""


class RuntimeLibraryError(KernelpackError):
    """The vendor runtime (libcuda, libamdhip64) is missing or reported an error."""


class KernelpackWarning(UserWarning):
    """Something worked, but slower or differently than it should: each is said once a process."""
