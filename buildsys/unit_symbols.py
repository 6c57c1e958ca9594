"""How a device link renames the internal-linkage symbols of a module's units, and undoing it.

Kernels with internal linkage (``static``, an unnamed namespace, a template instantiated with a
file-local argument) are kernels like any other on every vendor: the loader finds them by their
symbol (a cubin's local entry, a code object's symbol that clang makes global; docs/loader.md). A
device link renames them so that each unit keeps its own (:func:`unit_symbol`); the tag it adds
tells which unit a symbol comes from (:func:`unit_tags`, :func:`unit_of_tag`), so that when several
units of one module define internal kernels of one name, each is named after its unit
(``clear@dot.cu``, buildsys.discovery), never one picked.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from .modules import KernelModule

# How a device link renames a unit's internal-linkage symbols so that two units' symbols never clash:
# nvlink's input (nvcc -rdc) prefixes ``__nv_static_<n>_<unit id of n characters>_``, the id naming
# the unit's file (``_c8701816_4_a_cu_41113dc9`` for a.cu); clang's -fgpu-rdc appends
# ``.intern.<hash of the unit's -cuid>`` (llvm::MD5Hash: the digest's first 8 bytes, little-endian,
# in hex).
_NV_STATIC = re.compile(r"__nv_static_(\d+)_")
_CLANG_INTERN = re.compile(r"\.intern\.([0-9a-f]+)$")


def unit_symbol(symbol: str) -> tuple[str, str]:
    """A kernel symbol as its translation unit named it, and the tag a device link added to it
    to tell the units' internal symbols apart ("" when it has none)."""
    nv_static = _NV_STATIC.match(symbol)
    if nv_static is not None:
        start = nv_static.end()
        end = start + int(nv_static.group(1))
        if symbol[end : end + 1] == "_" and len(symbol) > end + 1:
            return symbol[end + 1 :], symbol[start:end]
    intern = _CLANG_INTERN.search(symbol)
    if intern is not None:
        return symbol[: intern.start()], intern.group(1)
    return symbol, ""


def unit_tags(module: KernelModule) -> dict[str, str]:
    """The tags (:func:`unit_symbol`) each vendor's device link gives a linked module's units,
    to the unit's file name: clang's hash of the unit's ``-cuid``, and the ``<length>_<file name,
    non-word characters as _>`` that nvcc puts in its unit id."""
    tags: dict[str, str] = {}
    if not module.linked:
        return tags
    for unit in module.sources:
        file = unit.rsplit("/", 1)[-1]
        digest = hashlib.md5(module.cuid(unit).encode(), usedforsecurity=False).digest()
        tags[f"{int.from_bytes(digest[:8], 'little'):x}"] = file
        identifier = re.sub(r"\W", "_", file)
        tags[f"{len(identifier)}_{identifier}"] = file
    return tags


def unit_of_tag(tag: str, tags: Mapping[str, str]) -> str | None:
    """The unit a device link's tag names (clang's: the whole tag; nvcc's id holds
    ``_<length>_<file>_``), or None."""
    if tag in tags:
        return tags[tag]
    found = {file for key, file in tags.items() if f"_{key}_" in tag}
    return found.pop() if len(found) == 1 else None
