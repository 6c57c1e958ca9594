"""Lookup dicts over the data tables (targets, image kinds, emulated targets, ops): one rule.

Each table is a tuple of frozen rows, and the dicts that find a row by its name are built once at
import by :func:`unique_index`, which refuses a name twice: a second row would otherwise silently
hide the first.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
Row = TypeVar("Row")


def unique_index(rows: Iterable[Row], key: Callable[[Row], Key], what: str) -> dict[Key, Row]:
    """``rows`` by ``key(row)``, in table order; a ValueError naming ``what`` and the key where
    two rows share one (a mistake in the table, found at import)."""
    found: dict[Key, Row] = {}
    for row in rows:
        name = key(row)
        if name in found:
            raise ValueError(f"{what} {name!r} is in the table twice")
        found[name] = row
    return found
