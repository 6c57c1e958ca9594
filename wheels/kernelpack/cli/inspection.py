"""``python -m kernelpack inspect``: what a GPU code file holds, as JSON or as tables.

:func:`describe` is the JSON report (the file as :func:`kernelpack.formats.read_image_file` reads it,
and each bundle entry's own image); :func:`print_report` renders the same report as tables for a
person. Both take the report's strings from the file, so they are data: JSON keeps them exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._console import print_table
from ..errors import FormatError, KernelpackError
from ..formats import read_image_file
from ..formats.bundles import Bundle
from ..formats.elf import Buffer
from ..loader.load import installed_loaders


def describe(data: Buffer, path: str) -> dict[str, Any]:
    """What ``kernelpack inspect --json`` prints: the file as read_image_file reads it, and for a
    bundle each entry's image as well (null for the host entry and for entries that are not ELF,
    such as the bitcode of an -fgpu-rdc bundle).

    An entry whose bytes are an earlier entry's (the same place and size: hipcc never writes
    that, a hostile file may write it thousands of times) is read once: its row says
    ``same_bytes_as`` that entry and carries no image of its own. Entries read as images may
    together cover no more bytes than the bundle holds, so entries that overlap otherwise are
    refused: time and output stay proportional to the file.
    """
    image = read_image_file(data, path)
    report = image.to_json()
    if isinstance(image, Bundle):
        _describe_entries(image, report["entries"], path, len(data))
        report["kernel_targets"] = kernel_targets(report["entries"])
    return report


def kernel_targets(entries: list[dict[str, Any]]) -> dict[str, list[str]]:
    """The kernel-by-target table of a bundle: each kernel symbol and the entries (by target)
    whose code object defines it, so a kernel some targets lack shows at a glance."""
    table: dict[str, list[str]] = {}
    for entry in entries:
        image = entry["image"]
        if image is None or image.get("format") != "code_object":
            continue
        for kernel in image["kernels"]:
            table.setdefault(kernel["name"], []).append(image["target"])
    return dict(sorted(table.items()))


def _describe_entries(bundle: Bundle, rows: list[dict[str, Any]], path: str, size: int) -> None:
    holds = size + sum(header.uncompressed_size for header in bundle.compression)
    first_with: dict[tuple[int, int, int], str] = {}
    read = 0
    for entry, row in zip(bundle.entries, rows, strict=True):
        row["image"] = row["same_bytes_as"] = None
        if bytes(entry.view[:4]) != b"\x7fELF":
            continue
        place = (id(entry.view.obj), entry.offset, entry.size)
        if place in first_with:
            row["same_bytes_as"] = first_with[place]
            continue
        first_with[place] = entry.id
        read += entry.size
        if read > holds:
            raise FormatError(
                path,
                entry.offset,
                f"bundle entries that do not overlap: entry {entry.id} ({entry.size} bytes at "
                f"{entry.offset}) brings the bytes read as images beyond the {holds} the file "
                "and its decompressed bundles hold",
            )
        row["image"] = read_image_file(entry.view, f"{path}: entry {entry.id}").to_json()


def installed_names() -> dict[str, str]:
    """Symbol -> kernel name, over the images of every installed kernelpack-built package that
    reads (one that does not is ``info``'s to report, not a reason to refuse a file here)."""
    names: dict[str, str] = {}
    loaders, _ = installed_loaders([])
    for loader in loaders:
        try:
            catalog = loader.catalog(with_device_wheels=True)
        except KernelpackError:
            continue
        for located in catalog.images.values():
            for entry in located:
                for name, symbol in entry.image.get("symbols", {}).items():
                    names.setdefault(symbol, name)
    return names


def print_report(path: str, report: dict[str, Any], names: Mapping[str, str] | None = None) -> None:
    """The report of :func:`describe` as tables: a bundle's entries, then each image's kernels.

    ``names`` maps symbols to the kernel names an installed index gives them (what
    ``kernelpack.load(...).kernel()`` and ``info --kernels`` take): where a symbol of the file is
    one of them and differs (a mangled C++ kernel), the name follows it in brackets."""
    names = names or {}
    if report["format"] == "bundle":
        packing = "".join(
            f", CCOB v{c['version']} {c['method']} ({c['size']} -> {c['uncompressed_size']} bytes)"
            for c in report["compression"]
        )
        entries = report["entries"]
        layout = [(entry["id"], entry["offset"], entry["size"]) for entry in entries]
        print_table(f"{path}: offload bundle{packing}", ("entry", "offset", "size"), layout)
        for entry in entries:
            if entry["image"] is not None:
                print()
                _print_code_object(entry["id"], entry["image"], names)
        _print_kernel_targets(report)
    elif report["format"] == "code_object":
        _print_code_object(path, report, names)
    elif report["format"] == "cubin":
        kernels = [
            (_named(k["name"], names), k["registers"], k["shared"], k["local"], k["max_threads"])
            for k in report["kernels"]
        ]
        title = f"{path}: cubin {report['target']} (CUDA ELF ABI {report['elf_abi_version']})"
        print_table(title, ("kernel", "registers", "shared", "local", "max threads"), kernels)
    else:
        title = f"{path}: PTX {report['version']}, .target {report['target']}"
        print_table(title, ("entry",), [(name,) for name in report["entries"]])


def _print_kernel_targets(report: dict[str, Any]) -> None:
    targets = sorted({e["image"]["target"] for e in report["entries"] if e["image"] is not None})
    if not report["kernel_targets"]:
        return
    rows = []
    for kernel, present in report["kernel_targets"].items():
        missing = [t for t in targets if t not in present]
        cell = f"MISSING on {', '.join(missing)}" if missing else f"all {len(targets)}"
        rows.append((kernel, cell))
    print()
    print_table("kernels by target", ("kernel", "targets"), rows)


_CODE_OBJECT_COLUMNS = (
    "kernel",
    "VGPR",
    "SGPR",
    "AGPR",
    "LDS",
    "scratch",
    "spills",
    "wavefront",
    "max workgroup",
)


def _named(symbol: str, names: Mapping[str, str]) -> str:
    name = names.get(symbol)
    return f"{symbol} [{name}]" if name and name != symbol else symbol


def _print_code_object(title: str, image: dict[str, Any], names: Mapping[str, str]) -> None:
    heading = f"{title}: {image['target']}, code object v{image['code_object_version']}"
    if image["generic_version"]:
        heading += f", generic version {image['generic_version']}"
    rows = [
        (
            _named(k["name"], names),
            k["vgpr"],
            k["sgpr"],
            k["agpr"],
            k["lds"],
            k["scratch"],
            k["sgpr_spills"] + k["vgpr_spills"],
            k["wavefront"],
            k["max_workgroup"],
        )
        for k in image["kernels"]
    ]
    print_table(heading, _CODE_OBJECT_COLUMNS, rows)
