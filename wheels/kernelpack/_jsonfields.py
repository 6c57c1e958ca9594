"""The JSON shape of kernelpack's frozen dataclasses: one rule for every ``--json`` report.

The readers (bundles, code objects, cubins, PTX), the detected GPUs, doctor's findings and the
coverage table are frozen dataclasses; their ``to_json`` is :func:`json_fields` of themselves, so a
field added to one of them appears in ``--json`` the day it is added, under its own name, instead
of waiting for a hand-written dict to be kept in step. A class adds what is not a field (a derived
property, a ``format`` tag) or spells one field differently around this call.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


def json_fields(
    value: DataclassInstance, *, also: Collection[str] = (), skip: Collection[str] = ()
) -> dict[str, Any]:
    """``value``'s fields in declaration order (less ``skip``), then the attributes named in
    ``also`` (properties), each as JSON: see :func:`json_value`."""
    names = [f.name for f in fields(value) if f.name not in skip]
    return {name: json_value(getattr(value, name)) for name in [*names, *also]}


def json_value(value: object) -> Any:
    """A field's value as JSON: scalars as they are, tuples and lists as lists, an object with a
    ``to_json`` through it, and a value that prints as its own text (a TargetId: ``gfx90a:xnack-``)
    as that text. Anything else (bytes, a memoryview) is a TypeError: leave it out with ``skip``."""
    if value is None or isinstance(value, str | int | float):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        raise TypeError(f"no JSON form for {type(value).__name__}: skip the field")
    if isinstance(value, tuple | list):
        return [json_value(item) for item in value]
    to_json = getattr(value, "to_json", None)
    if callable(to_json):
        return to_json()
    if type(value).__str__ is not object.__str__:
        return str(value)
    raise TypeError(f"no JSON form for {type(value).__name__}: skip the field")
