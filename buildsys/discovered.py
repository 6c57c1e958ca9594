"""What buildsys.discovery reads off an object, cached with the objects it describes.

Reading a code object's kernels means parsing its MessagePack metadata (a fifth of a second for
mlp's 150 kernels on one gfx target), so a no-op build of the default matrix spent seconds reading
the objects it had just taken from the cache. The result (the object's target and each kernel's
symbol, parameter layout and resources) is stored in the build cache's ``discovery`` namespace,
keyed by the object's kind and sha256 and by :data:`READERS_FINGERPRINT`, the readers' own
sources: an edit to a reader or to discovery re-reads every object once.

The cache folder is untrusted input (docs/security.md): a record that is not exactly the shape
written here is read as absent, and the object is read again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import kernelpack
from kernelpack.formats.index import KernelResources

from .cache import BuildCache, key_of, sha256_hex, stored_record
from .discovery import ObjectKernel, object_kernels

_NAMESPACE = "discovery"
_RESOURCES = (
    "registers", "sgpr", "agpr", "lds", "scratch", "spills", "wavefront", "max_workgroup",
)  # fmt: skip  # kernelpack.formats.index.KernelResources' keys


def _readers_fingerprint() -> str:
    """The runtime package's sources (the readers are there, whatever its layout) and
    buildsys.discovery's; not the package's index, which a build of kernelpack's own project
    writes there (with it, every build that changed the index re-read every object)."""
    package = Path(kernelpack.__file__).parent
    files = sorted(p for p in package.rglob("*.py") if p != package / "_index.py")
    files.append(Path(__file__).with_name("discovery.py"))
    return sha256_hex(b"".join(p.read_bytes() for p in files))


READERS_FINGERPRINT = _readers_fingerprint()


def cached_object_kernels(
    cache: BuildCache, kind: str, data: bytes, name: str, digest: str
) -> tuple[str, list[ObjectKernel]]:
    """:func:`buildsys.discovery.object_kernels`, read from the cache when an earlier build
    read the same bytes with the same readers (``name`` names the object in errors; ``digest``
    is the sha256 of ``data``)."""
    key = key_of({"readers": READERS_FINGERPRINT, "kind": kind, "sha256": digest})
    stored = cache.get_text(_NAMESPACE, key)
    if stored is not None:
        found = _parse(stored)
        if found is not None:
            return found
    target, kernels = object_kernels(kind, data, name)
    record = {
        "target": target,
        # symbol, the layout's (offset, size) pairs flattened, the resources in _RESOURCES' order
        "kernels": [
            [k.symbol, [n for pair in k.layout for n in pair], _figures(k.resources)]
            for k in kernels
        ],
    }
    cache.put_text(_NAMESPACE, key, json.dumps(record, sort_keys=True, separators=(",", ":")))
    return target, kernels


def _parse(text: str) -> tuple[str, list[ObjectKernel]] | None:
    """A stored record, or None for anything but the exact shape :func:`cached_object_kernels`
    writes."""
    record = stored_record(text, ("target", "kernels"))
    if record is None:
        return None
    target, rows = record["target"], record["kernels"]
    if not isinstance(target, str) or not isinstance(rows, list):
        return None
    kernels: list[ObjectKernel] = []
    width = len(_RESOURCES)
    for row in rows:
        if not (type(row) is list and len(row) == 3 and type(row[0]) is str):
            return None
        symbol, layout, resources = row
        if not (type(layout) is list and len(layout) % 2 == 0 and _counts(layout)):
            return None
        if not (type(resources) is list and len(resources) == width and _counts(resources)):
            return None
        pairs = tuple(zip(layout[::2], layout[1::2], strict=True))
        figures = cast(KernelResources, dict(zip(_RESOURCES, resources, strict=True)))
        kernels.append(ObjectKernel(symbol, pairs, figures))
    return target, kernels


def _counts(values: list[Any]) -> bool:
    """Whether every value is a non-negative int (a bool is not one); by the set of the values'
    types, as a no-op build checks some hundred thousand of them."""
    return not values or ({*map(type, values)} == {int} and min(values) >= 0)


def _figures(resources: KernelResources) -> list[int]:
    """The resources in :data:`_RESOURCES`' order."""
    by_name = cast("dict[str, int]", resources)
    return [by_name[name] for name in _RESOURCES]
