"""``python -m kernelpack info``: GPUs, the image each module would load on each and why, checked.

It covers every installed kernelpack-built package (:func:`kernelpack.loader.catalog.kernelpack_packages`:
kernelpack itself and the entry point group ``kernelpack.packages``), each module with its kernels.
For every module and GPU the report says which image the loader would take (or what stands in,
and what to do when nothing does), and it reads each chosen image and checks its sha256 against
the index as a load would: an image that would be refused is reported damaged, with both digests
whole, and the command exits 1. A package that cannot be read (a stale ``kernelpack.packages``
registration, a damaged ``_index.py``) is listed with its error and no modules, the others as
usual, and the command exits 2 with one ``error:`` line per such package. The same facts come
out as a table or as ``--json``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._console import print_json, print_table, printable
from ..backends.support import library_versions
from ..devices.argument import device_name
from ..devices.detect import detect_gpus
from ..errors import IntegrityError, NoImageError
from ..loader.cache import DiskCache
from ..loader.catalog import package_provenance
from ..loader.hints import fixes
from ..loader.images import read_image
from ..loader.load import installed_loaders

if TYPE_CHECKING:
    from ..devices.detect import Gpu
    from ..formats import BundleEntry
    from ..loader.catalog import Catalog, Choice, Unreadable
    from ..loader.load import Loader


def info_report(
    loaders: Sequence[Loader],
    *,
    gpus: Sequence[Gpu] | None = None,
    unreadable: Sequence[Unreadable] = (),
) -> dict[str, Any]:
    """What ``python -m kernelpack info`` shows: GPUs; per package (one loader each, sharing the
    GPUs) and module its kernels and, per GPU, the image chosen (its sha256 checked) and why, or
    why none and what to do; the cache and the runtime libraries.

    ``gpus`` defaults to the first loader's; ``unreadable`` are the installed packages whose
    index could not be read (:func:`kernelpack.loader.load.installed_loaders`), each listed with its
    ``error`` and no modules, after the others."""
    if gpus is None:
        gpus = loaders[0].gpus() if loaders else []
    checks = _Checks()
    packages: dict[str, dict[str, Any]] = {}
    for loader in loaders:
        catalog = loader.catalog(with_device_wheels=True)
        modules: dict[str, dict[str, Any]] = {}
        for name in sorted(catalog.modules):
            modules[name] = {
                "kernels": sorted(catalog.modules[name]["kernels"]),
                "symbols": _symbols(catalog, name),
                "images": [_row(loader, catalog, checks, loader.choose(name, gpu)) for gpu in gpus],
            }
        packages[loader.package] = {
            "distribution": catalog.distribution,
            "version": catalog.version,
            "indexes": catalog.origins,
            "modules": modules,
            "provenance": package_provenance(loader.package, catalog.distribution),
            "error": None,
        }
    for broken in unreadable:
        packages[broken.package] = {
            "distribution": broken.distribution,
            "version": "",
            "indexes": [],
            "modules": {},
            "provenance": {},
            "error": broken.problem,
        }
    cache = loaders[0].cache if loaders else DiskCache()
    entries = cache.entries()
    return {
        "gpus": [{"device": device_name(gpu), **gpu.to_json()} for gpu in gpus],
        "packages": packages,
        "problems": list(dict.fromkeys(checks.problems.values())),
        "cache": {
            "folder": str(cache.folder),
            "entries": len(entries),
            "bytes": sum(e.size for e in entries),
            "max_bytes": cache.max_bytes,
        },
        "runtimes": library_versions(),
    }


def _symbols(catalog: Catalog, module: str) -> dict[str, str]:
    """Kernel name -> its symbol in the images (mangled for C++ kernels), where the two differ:
    ``inspect`` shows a file's symbols, ``load(...).kernel()`` takes the names, and a reader of
    either needs the other."""
    symbols: dict[str, str] = {}
    for located in catalog.images.get(module, []):
        for name, symbol in located.image.get("symbols", {}).items():
            if symbol != name:
                symbols.setdefault(name, symbol)
    return dict(sorted(symbols.items()))


class _Checks:
    """Each file's verdict, read once however many GPUs would load it."""

    def __init__(self) -> None:
        self.problems: dict[tuple[Path, str], str] = {}  # (file, sha256) -> what is wrong
        self.done: set[tuple[Path, str]] = set()
        self.bundles: dict[Path, list[BundleEntry]] = {}


def _row(loader: Loader, catalog: Catalog, checks: _Checks, choice: Choice) -> dict[str, Any]:
    gpu = choice.gpu
    row: dict[str, Any] = {
        "device": device_name(gpu),
        "target": str(gpu.target),
        "image": None,
        "reasons": choice.reasons,
        "instead": None,
        "advice": [],
        "problem": None,
    }
    if choice.located is not None:
        image, root = choice.located.image, choice.located.root
        key = (choice.located.path, image["sha256"])
        if key not in checks.done:
            checks.done.add(key)
            try:
                read_image(root, image, bundles=checks.bundles)
            except IntegrityError as error:
                checks.problems[key] = str(error)
        row["problem"] = checks.problems.get(key)
        row["image"] = {
            "target": image["target"],
            "kind": image["kind"],
            "file": image["file"],
            "package": choice.located.origin,
            "compression": image["compression"],
            "sha256": image["sha256"],
            "verified": row["problem"] is None,
        }
        return row
    built = sorted({e.image["target"] for e in catalog.images.get(choice.module, [])})
    row["advice"] = fixes(gpu, catalog, built)
    try:
        compiler = loader.compiler_for(choice.module, gpu, choice)
    except NoImageError as error:
        row["instead"] = str(error)
        return row
    row["instead"] = f"run-time compile with {compiler.version()}"
    key = (catalog.sources[choice.module], catalog.modules[choice.module]["source_sha256"])
    if key not in checks.done:
        checks.done.add(key)
        try:
            loader.source_text(choice.module, catalog.modules[choice.module], gpu.vendor)
        except IntegrityError as error:
            checks.problems[key] = str(error)
    row["problem"] = checks.problems.get(key)
    return row


def found_by(gpu: Mapping[str, Any]) -> str:
    """How a GPU (:meth:`kernelpack.devices.detect.Gpu.to_json`) was found and what changed its target."""
    found = f"kfd node {gpu['node']}" if gpu["node"] is not None else str(gpu["source"])
    if not gpu["override"] or gpu["source"] == "KERNELPACK_TARGET":
        return found
    return f"{found}; {gpu['override']} (hardware {gpu['hardware']})"


def _stand_in(instead: str) -> str:
    """What runs where no image fits: the run-time compiler, or why there is none."""
    if instead.startswith("run-time compile with"):
        return instead
    problem = next(
        (line.strip() for line in instead.splitlines() if "run-time compilation:" in line), ""
    )
    return problem.replace("run-time compilation:", "no run-time compilation:", 1) or instead


def _built_from(record: Any) -> str:
    """One line of a wheel's provenance file (buildsys.provenance), for the text report."""
    if record is None:
        return "no provenance recorded (not installed from a wheel kernelpack's builder wrote)"
    if "error" in record:
        return f"provenance unreadable: {record['error']}"
    source = record.get("source", {})
    state = {True: ", with uncommitted changes", False: "", None: ", tree state unknown"}
    commit = source.get("commit") or "an unknown commit"
    return f"built from {commit}{state.get(source.get('dirty'), '')}"


def print_info(report: Mapping[str, Any], kernels: bool = False) -> int:
    """The report as tables and lines; the exit status (1 when a chosen file is damaged). A module's
    kernels are counted, and listed one a line with ``kernels`` (a module can have thousands:
    kernelpack's mlp has 4,722 characters of names)."""
    gpu_rows = [
        (g["device"], g["vendor"], g["target"], g["name"], found_by(g)) for g in report["gpus"]
    ]
    print_table(
        "GPUs",
        ("device", "vendor", "target", "name", "found by"),
        gpu_rows or [("-", "no GPU found", "", "", "")],
    )
    advice: dict[tuple[str, str, str], tuple[list[str], str, list[str]]] = {}
    for package, found in report["packages"].items():
        if found["error"] is not None:
            print()
            print(f"{package}: cannot be read; its modules are not listed (see the error below)")
            continue
        rows = []
        for module, entry in found["modules"].items():
            for row in entry["images"]:
                image = row["image"]
                check = "" if row["problem"] is None else "DAMAGED"
                if image is not None:
                    chosen = (
                        f"{image['target']} {image['kind']} ({image['package']}/{image['file']})"
                    )
                    why = next((r for r in row["reasons"] if "selected" in r), "")
                    check = check or "sha256 ok"
                else:
                    chosen = "none"
                    stand_in = _stand_in(row["instead"])
                    why = "no prebuilt image fits (below: what to do)"
                    devices, _, _ = advice.setdefault(
                        (package, module, row["target"]), ([], stand_in, row["advice"])
                    )
                    devices.append(row["device"])
                rows.append((module, row["device"], row["target"], chosen, check, why))
        indexes = ", ".join(found["indexes"]) or (
            "no index installed: `python -m buildsys build` makes one in a source tree"
        )
        print()
        print_table(
            f"Modules of {package} {found['version'] or '?'} ({indexes})",
            ("module", "device", "target", "image", "check", "why"),
            rows,
        )
        for module, entry in found["modules"].items():
            names = entry["kernels"]
            count = f"{module}: {len(names)} kernel{'' if len(names) == 1 else 's'}"
            if not kernels:
                print(f"{count} (--kernels lists them)")
                continue
            print(f"{count}:")
            for name in names:
                symbol = entry["symbols"].get(name)
                print(f"  {name}" + (f"  (symbol {symbol})" if symbol else ""))
        for distribution, record in found["provenance"].items():
            print(f"{distribution}: {_built_from(record)}")
    for (package, module, target), (devices, instead, fixes_) in advice.items():
        print()
        print(
            f"{module} ({package}) on {target} ({', '.join(devices)}): no prebuilt image fits; "
            f"{instead}"
        )
        print("what to do:")
        for line in fixes_:
            print(f"  - {line}")
    for problem in report["problems"]:
        print()
        print(f"damaged: {problem}")
    cache = report["cache"]
    print()
    print(
        f"cache: {cache['folder']}: {cache['entries']} entries, {cache['bytes']} bytes "
        f"(bound {cache['max_bytes']})"
    )
    print("runtimes: " + ", ".join(f"{kind} {text}" for kind, text in report["runtimes"].items()))
    return info_status(report)


def run_info(json_output: bool, sysfs_root: str | None, kernels: bool = False) -> int:
    """``python -m kernelpack info [--json] [--kernels] [--sysfs-root DIR]``: the report of every installed
    package (:func:`kernelpack.loader.load.installed_loaders`) and its exit status (:func:`info_status`)."""
    gpus = detect_gpus(sysfs_root=sysfs_root)
    loaders, unreadable = installed_loaders(gpus)
    report = info_report(loaders, gpus=gpus, unreadable=unreadable)
    if not json_output:
        return print_info(report, kernels)
    print_json(report)
    for problem in report["problems"]:
        print(f"damaged: {printable(problem)}", file=sys.stderr)
    return info_status(report)


def info_status(report: Mapping[str, Any]) -> int:
    """2 when an installed package cannot be read (each is one ``error:`` line on standard
    error), else 1 when a chosen file is damaged, else 0."""
    errors = [found["error"] for found in report["packages"].values() if found["error"]]
    for error in errors:
        print(f"error: {printable(error)}", file=sys.stderr)
    if errors:
        return 2
    return 1 if report["problems"] else 0
