"""The error tree: exit statuses as the command lines promise them, and no bare base class."""

from __future__ import annotations

import pytest

from kernelpack import errors
from kernelpack.errors import (
    CompileError,
    FormatError,
    IntegrityError,
    KernelpackError,
    NoImageError,
    RuntimeLibraryError,
    SweepError,
    UsageError,
)

# Written by hand from the contract in the project's brief and docs/loader.md: bad input exits 2,
# a failure of the work exits 1.
EXPECTED_EXIT = {
    UsageError: 2,
    FormatError: 2,
    IntegrityError: 1,
    NoImageError: 1,
    RuntimeLibraryError: 1,
    CompileError: 1,
    SweepError: 1,
}


def _instance(cls: type[KernelpackError]) -> KernelpackError:
    return cls("f.bin", 4, "a magic") if cls is FormatError else cls("message")  # type: ignore[call-arg]


@pytest.mark.parametrize("cls", list(EXPECTED_EXIT), ids=lambda c: c.__name__)
def test_each_class_carries_its_exit_status(cls: type[KernelpackError]) -> None:
    error = _instance(cls)
    assert error.exit_code == EXPECTED_EXIT[cls]
    assert isinstance(error, KernelpackError)


def test_every_error_class_is_listed_above() -> None:
    """A class added to errors.py without an expected exit status here fails this test."""
    defined = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, KernelpackError)
    }
    assert defined - {KernelpackError} == set(EXPECTED_EXIT)


def test_usage_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="bad"):
        raise UsageError("bad")
    assert isinstance(FormatError("f", 0, "x"), ValueError)
    assert not isinstance(IntegrityError("x"), ValueError)


def test_the_base_class_is_never_raised_bare() -> None:
    with pytest.raises(TypeError, match="raise the subclass"):
        KernelpackError("what failed?")


def test_format_error_names_file_offset_and_expectation() -> None:
    error = FormatError("lib.hsaco", 24, "a 24-byte bundle entry header")
    assert str(error) == "lib.hsaco: at offset 24: expected a 24-byte bundle entry header"
    assert (error.path, error.offset, error.expected) == (
        "lib.hsaco",
        24,
        "a 24-byte bundle entry header",
    )
