"""The JSON shape of kernelpack's records: one rule for every ``--json`` report.

The readers (bundles, code objects, cubins, PTX), doctor's findings and the coverage table are
frozen dataclasses, whose ``to_json`` is :func:`json_fields` of themselves; the detected GPUs are
NamedTuples (a load makes them, and dataclasses would cost it the import of dataclasses and
inspect, docs/loader.md "Ready time"), whose ``to_json`` is :func:`json_record`. So a field added
to one of them appears in ``--json`` the day it is added, under its own name, instead of waiting
for a hand-written dict to be kept in step. A class adds what is not a field (a derived property,
a ``format`` tag) or spells one field differently around this call.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class Record(Protocol):
    """A NamedTuple, as :func:`json_record` reads it."""

    def _asdict(self) -> dict[str, Any]: ...


def json_fields(
    value: DataclassInstance, *, also: Collection[str] = (), skip: Collection[str] = ()
) -> dict[str, Any]:
    """``value``'s fields in declaration order (less ``skip``), then the attributes named in
    ``also`` (properties), each as JSON: see :func:`json_value`."""
    from dataclasses import fields  # deferred: a load's records are NamedTuples (json_record)

    names = [f.name for f in fields(value) if f.name not in skip]
    return {name: json_value(getattr(value, name)) for name in [*names, *also]}


def json_record(value: Record) -> dict[str, Any]:
    """A NamedTuple's fields in declaration order, each as JSON: :func:`json_fields`' rule."""
    return {name: json_value(item) for name, item in value._asdict().items()}


def json_value(value: object) -> Any:
    """A field's value as JSON: scalars as they are, tuples and lists as lists, an object with a
    ``to_json`` through it, and a value that prints as its own text (a TargetId: ``gfx90a:xnack-``)
    as that text. Anything else (bytes, a memoryview) is a TypeError: leave it out with ``skip``."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"no JSON form for {type(value).__name__}: skip the field")
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if type(value).__str__ is not object.__str__:  # a NamedTuple with its own text: TargetId
        return str(value)
    if isinstance(value, tuple | list):
        return [json_value(item) for item in value]
    raise TypeError(f"no JSON form for {type(value).__name__}: skip the field")
