"""What a project's metadata may say, checked where it enters, and core metadata written safely.

A kernel project's ``pyproject.toml`` is untrusted input (docs/security.md): its version becomes
file names (wheels, the sdist and its members), its name and import name become folders, entry
points and the names other packages are installed under, and every field becomes a line of
PKG-INFO or METADATA. So each is read through one function here that accepts what its standard
allows and nothing else, and returns the value in the form the standard writes:

- versions by PEP 440 (``packaging.version``), normalised (``1.0-rc1`` -> ``1.0rc1``);
- requirements by PEP 508 and ``Requires-Python`` by PEP 440's specifiers, as packaging writes them;
- distribution names by PEP 508's name grammar, import names as ASCII Python identifiers;
- one-line fields (the summary, every requirement) without any line break Python's ``splitlines``
  knows: the email parser that reads core metadata back splits there too, so ``\\u2028`` would
  start a header as surely as ``\\n``.

:func:`core_metadata` and :func:`add_fields` write the fields through :mod:`email.message` with a
policy that refuses a line break in any one-line field and indents the continuation lines of the
one multi-line field the builder writes (``License``), so no value can start a field of its own.
A bad value is a :class:`~buildsys.errors.ProjectError` naming where it came from (exit 2).
"""

from __future__ import annotations

import functools
import keyword
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from .errors import ProjectError

if TYPE_CHECKING:
    import email.policy

# PEP 508's names: letters and digits, with '.', '_' and '-' inside.
_DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_IMPORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Core metadata fields that may hold several lines, written as indented continuation lines.
MULTILINE_FIELDS = frozenset({"License"})
_CONTINUATION = "\n" + " " * 8


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters (a value may be huge)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def has_line_break(text: str) -> bool:
    """Whether ``text`` holds a line break by ``str.splitlines`` (the email parser's rule)."""
    return len((text + "x").splitlines()) > 1


def checked_line(text: str, where: str) -> str:
    """A one-line field as given; a line break anywhere is a ProjectError."""
    if has_line_break(text):
        raise ProjectError(f"{where} = {shown(text)}: holds a line break; write it on one line")
    return text


def checked_version(text: str, where: str) -> str:
    """A PEP 440 version in its normal form; anything else is a ProjectError naming ``where``."""
    try:
        version = str(Version(text))
    except ValueError:  # InvalidVersion, or a number of more digits than int() takes
        version = ""
    if not version:
        raise ProjectError(
            f"{where} = {shown(text)}: not a PEP 440 version; write one like 1.0.0, 2.1rc1 "
            "or 0.3.dev4"
        )
    return version


def checked_requirement(text: str, where: str) -> str:
    """A PEP 508 requirement as packaging writes it (``numpy >= 1.24`` -> ``numpy>=1.24``)."""
    # deferred: packaging's requirement parser is a tenth of a no-op build, which reads none
    from packaging.requirements import Requirement

    checked_line(text, where)
    try:
        requirement = str(Requirement(text))
    except ValueError as error:  # InvalidRequirement: its message spans lines; the first says why
        reason = str(error).splitlines()[0] if str(error) else "not a requirement"
        raise ProjectError(
            f"{where}: {shown(text)}: not a PEP 508 requirement ({reason}); write one like "
            "numpy>=1.24"
        ) from None
    return checked_line(requirement, where)


def checked_specifier(text: str, where: str) -> str:
    """A PEP 440 version specifier set (``Requires-Python``) as packaging writes it."""
    from packaging.specifiers import SpecifierSet  # deferred: see checked_requirement

    checked_line(text, where)
    try:
        return str(SpecifierSet(text))
    except ValueError:
        raise ProjectError(
            f"{where} = {shown(text)}: not a version specifier; write one like >=3.11"
        ) from None


def checked_distribution(name: str, where: str) -> str:
    """A distribution name by PEP 508's grammar, as given."""
    if not _DISTRIBUTION_NAME.fullmatch(name):
        raise ProjectError(
            f"{where} = {shown(name)}: not a valid distribution name; use letters, digits and "
            "'-', '_' or '.' inside, like demo-kernels"
        )
    return name


def checked_import_name(name: str, where: str) -> str:
    """A top-level import name: an ASCII Python identifier that is not a keyword (a non-ASCII one
    would be NFKC-folded by the import system onto another name)."""
    if not _IMPORT_NAME.fullmatch(name) or keyword.iskeyword(name):
        raise ProjectError(
            f"{where} = {shown(name)}: not a Python import name; use ASCII letters, digits and "
            "'_', like demo_kernels"
        )
    return name


# ---------------------------------------------------------------------------------------------
# Writing core metadata


@functools.cache
def core_metadata_policy() -> email.policy.EmailPolicy:
    """The email policy core metadata is written with (made on first use: the email package is
    a twentieth of a no-op build, which writes no metadata)."""
    import email.policy  # deferred: see the docstring

    class _CoreMetadataPolicy(email.policy.EmailPolicy):
        """Fields stored as given (no RFC 2047 decoding or encoding: core metadata is UTF-8 text),
        written as ``Name: value`` lines; a line break is refused in every field but the multi-line
        ones, whose further lines become indented continuation lines."""

        def header_store_parse(self, name: str, value: Any) -> tuple[str, Any]:
            text = str(value)
            if name in MULTILINE_FIELDS:
                text = _CONTINUATION.join(text.splitlines())
            elif has_line_break(text):
                raise ProjectError(f"core metadata field {name}: {shown(text)} holds a line break")
            return (name, text)

        def header_fetch_parse(self, name: str, value: str) -> str:
            return value

        def fold(self, name: str, value: str) -> str:
            return f"{name}: {value}{self.linesep}"

        def fold_binary(self, name: str, value: str) -> bytes:
            return self.fold(name, value).encode()

    return _CoreMetadataPolicy(utf8=True, linesep="\n", max_line_length=0, mangle_from_=False)


def core_metadata(fields: Iterable[tuple[str, str]], description: str = "") -> str:
    """PKG-INFO or METADATA: the fields in order, then the long description as the body."""
    import email.message  # deferred: see core_metadata_policy

    message = email.message.Message(policy=core_metadata_policy())
    for name, value in fields:
        message[name] = value
    message.set_payload(description)
    return message.as_string()


def add_fields(metadata: str, fields: Iterable[tuple[str, str]]) -> str:
    """``metadata`` with ``fields`` added after its own (the host wheel's extras)."""
    import email.parser  # deferred: see core_metadata_policy

    message = email.parser.Parser(policy=core_metadata_policy()).parsestr(metadata)
    for name, value in fields:
        message[name] = value
    return message.as_string()
