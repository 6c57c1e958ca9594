"""What a project's metadata may say, checked where it enters.

A kernel project's ``pyproject.toml`` is untrusted input (docs/security.md): its version becomes
file names (wheels, the sdist and its members), its name and import name become folders, entry
points and the names other packages are installed under. So each is read through one function
here that accepts what its standard allows and nothing else, and returns the value in the form the
standard writes:

- versions by PEP 440 (``packaging.version``), normalised (``1.0-rc1`` -> ``1.0rc1``);
- distribution names by PEP 508's name grammar, import names as ASCII Python identifiers.

A bad value is a :class:`~buildsys.errors.ProjectError` naming where it came from (exit 2).
"""

from __future__ import annotations

import keyword
import re

from packaging.version import Version

from .errors import ProjectError

# PEP 508's names: letters and digits, with '.', '_' and '-' inside.
_DISTRIBUTION_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?")
_IMPORT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters (a value may be huge)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


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
