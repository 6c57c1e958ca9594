"""``python -m kernelpack``: inspect files, detect GPUs, explain image selection, manage the cache.

Every subcommand prints a table on a terminal, plain lines elsewhere, and JSON with ``--json``.
Errors come out as one line with the exit status of kernelpack.errors.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._console import print_json, print_table, run_cli
from .coverage import run_targets
from .detect import Gpu, detect_gpus
from .errors import UsageError
from .formats import describe


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kernelpack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = commands.add_parser(
        "inspect", help="list a bundle's entries and each code object's kernels"
    )
    inspect.add_argument("file", help="a bundle (.hsaco, .co), a code object, a cubin or PTX")
    inspect.add_argument("--json", action="store_true", help="print JSON for tools")
    inspect.set_defaults(handler=_inspect)

    detect = commands.add_parser("detect", help="list this machine's GPUs and their targets")
    detect.add_argument("--json", action="store_true", help="print JSON for tools")
    detect.add_argument(
        "--sysfs-root", metavar="DIR", help="read DIR in place of /sys (diagnosis and tests)"
    )
    detect.set_defaults(handler=_detect)

    info = commands.add_parser(
        "info", help="GPUs, the image each module would load and why, cache, runtime libraries"
    )
    info.add_argument("--json", action="store_true", help="print JSON for tools")
    info.add_argument(
        "--sysfs-root", metavar="DIR", help="read DIR in place of /sys (diagnosis and tests)"
    )
    info.set_defaults(handler=_info)

    targets = commands.add_parser(
        "targets", help="every AMD processor LLVM knows: the image it would load and why"
    )
    targets.add_argument("--json", action="store_true", help="print JSON for tools")
    targets.add_argument(
        "--targets", metavar="LIST", help="judge these built targets (a,b,...), not the installed"
    )
    targets.set_defaults(handler=lambda args: run_targets(args.json, args.targets))

    doctor = commands.add_parser(
        "doctor", help="per GPU: image installed or the pip command; runtimes; known problems"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON for tools")
    doctor.add_argument(
        "--sysfs-root", metavar="DIR", help="read DIR in place of /sys (diagnosis and tests)"
    )
    doctor.set_defaults(handler=_doctor)

    cache = commands.add_parser("cache", help="the disk cache of extracted and compiled images")
    cache.add_argument(
        "action",
        choices=("path", "verify", "clear"),
        help="path: where it is and its size; verify: check every entry, removing damaged ones; "
        "clear: remove every entry",
    )
    cache.add_argument("--json", action="store_true", help="print JSON for tools")
    cache.set_defaults(handler=_cache)
    return parser


def _inspect(args: argparse.Namespace) -> int:
    path = str(args.file)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise UsageError(
            f"{path}: cannot read it ({error.strerror}); give a bundle, code object, cubin or PTX"
        ) from None
    report = describe(data, path)
    if args.json:
        print_json(report)
        return 0

    def code_object(title: str, image: dict[str, Any]) -> None:
        heading = f"{title}: {image['target']}, code object v{image['code_object_version']}"
        if image["generic_version"]:
            heading += f", generic version {image['generic_version']}"
        columns = ("kernel", "VGPR", "SGPR", "AGPR", "LDS", "scratch", "spills", "wavefront",
                   "max workgroup")  # fmt: skip
        rows = [
            (k["name"], k["vgpr"], k["sgpr"], k["agpr"], k["lds"], k["scratch"],
             k["sgpr_spills"] + k["vgpr_spills"], k["wavefront"], k["max_workgroup"])
            for k in image["kernels"]
        ]  # fmt: skip
        print_table(heading, columns, rows)

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
                code_object(entry["id"], entry["image"])
    elif report["format"] == "code_object":
        code_object(path, report)
    elif report["format"] == "cubin":
        kernels = [
            (k["name"], k["registers"], k["shared"], k["local"], k["max_threads"])
            for k in report["kernels"]
        ]
        title = f"{path}: cubin {report['target']} (CUDA ELF ABI {report['elf_abi_version']})"
        print_table(title, ("kernel", "registers", "shared", "local", "max threads"), kernels)
    else:
        title = f"{path}: PTX {report['version']}, .target {report['target']}"
        print_table(title, ("entry",), [(name,) for name in report["entries"]])
    return 0


def _detect(args: argparse.Namespace) -> int:
    gpus = detect_gpus(sysfs_root=args.sysfs_root)
    notes = []
    if args.sysfs_root is not None:
        notes.append(f"NVIDIA GPUs not probed: {args.sysfs_root} is read in place of this machine")
    if not gpus:
        notes.append("no GPU found")
    if args.json:
        print_json({"gpus": [gpu.to_json() for gpu in gpus], "notes": notes})
        return 0
    columns = ("index", "vendor", "target", "name", "location", "source")
    rows = [
        (gpu.index, gpu.vendor, gpu.target, gpu.name, gpu.location, _found_by(gpu)) for gpu in gpus
    ]
    print_table("GPUs", columns, rows)
    for note in notes:
        print(note)
    return 0


def _found_by(gpu: Gpu) -> str:
    """How a GPU was found and what changed its target, in a few words."""
    found = f"kfd node {gpu.node}" if gpu.node is not None else gpu.source
    if not gpu.override or gpu.source == "KERNELPACK_TARGET":
        return found
    return f"{found}; {gpu.override} (hardware {gpu.hardware})"


def _info(args: argparse.Namespace) -> int:
    from .loader import Loader, info_report

    report = info_report(Loader(gpus=detect_gpus(sysfs_root=args.sysfs_root)))
    if args.json:
        print_json(report)
        return 0
    gpu_rows = [
        (g["device"], g["vendor"], g["target"], g["name"], _found_by_json(g))
        for g in report["gpus"]
    ]
    print_table(
        "GPUs",
        ("device", "vendor", "target", "name", "found by"),
        gpu_rows or [("-", "no GPU found", "", "", "")],
    )
    rows = []
    for module, choices in report["modules"].items():
        for row in choices:
            image = row["image"]
            chosen = (
                f"{image['target']} {image['kind']} ({image['package']}/{image['file']})"
                if image
                else "none"
            )
            why = (
                next((r for r in row["reasons"] if "selected" in r), "")
                if image
                else row["instead"].splitlines()[0]
            )
            rows.append((module, row["device"], row["target"], chosen, why))
    packages = ", ".join(report["packages"]) or (
        "no index installed: `python -m buildsys build` makes one in a source tree"
    )
    print()
    print_table(
        f"Modules (kernelpack {report['version'] or '?'}; {packages})",
        ("module", "device", "target", "image", "why"),
        rows,
    )
    cache = report["cache"]
    print()
    print(
        f"cache: {cache['folder']}: {cache['entries']} entries, {cache['bytes']} bytes (bound {cache['max_bytes']})"
    )
    print(
        "runtimes: "
        + ", ".join(f"{kind} {version}" for kind, version in report["runtimes"].items())
    )
    return 0


def _found_by_json(gpu: dict[str, Any]) -> str:
    found = f"kfd node {gpu['node']}" if gpu["node"] is not None else str(gpu["source"])
    return f"{found}; {gpu['override']}" if gpu["override"] else found


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    return run_doctor(args.json, args.sysfs_root)


def _cache(args: argparse.Namespace) -> int:
    from .cache import DiskCache

    cache = DiskCache()
    result: dict[str, Any] = {"folder": str(cache.folder)}
    if args.action == "verify":
        good, bad = cache.verify()
        result.update(good=len(good), removed=[str(e.path) for e in bad])
        message = f"{cache.folder}: {len(good)} entries good, {len(bad)} damaged and removed"
    elif args.action == "clear":
        result["removed"] = cache.clear()
        message = f"{cache.folder}: removed {result['removed']} entries"
    else:
        entries = cache.entries()
        result.update(entries=len(entries), bytes=sum(e.size for e in entries))
        message = f"{cache.folder} ({len(entries)} entries, {result['bytes']} bytes)"
    if args.json:
        print_json(result)
    else:
        print(message)
    return 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)
