"""``python -m kernelpack`` (the ``kernelpack`` command): inspect files, detect GPUs, explain image
selection, manage the cache. The help text is :data:`DESCRIPTION`, plain text for a terminal.

Every subcommand prints a table on a terminal, plain lines elsewhere, and JSON with ``--json``.
Errors come out as one line with the exit status of kernelpack.errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._console import add_version, print_json, print_table, program_name, run_cli
from ..devices.argument import device_name
from ..devices.detect import detect_gpus
from ..errors import UsageError
from ..files.paths import builder_folders, human_bytes
from ..files.regular import IMAGE_FILE_LIMIT, read_regular
from ..loader.cache import DiskCache
from ..loader.catalog import runtime_version
from .coverage import run_targets
from .doctor import run_doctor
from .info import found_by, run_info
from .inspection import describe, installed_names, print_report
from .sweep_command import add_parser as add_sweep

_INSPECTED = "a bundle, code object, cubin or PTX"
DESCRIPTION = (
    "kernelpack's run-time tools: inspect kernel files, detect GPUs, explain which image each "
    "module loads and why, diagnose an install, manage the disk cache, run walk sweeps. Every "
    "command prints a table on a terminal, plain lines elsewhere, and JSON with --json; errors "
    "are one line, exit status 1 (the work failed) or 2 (bad input)."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name("kernelpack", "kernelpack"), description=DESCRIPTION
    )
    add_version(parser, "kernelpack", runtime_version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inspect = _command(
        commands, "inspect", _inspect, "list a bundle's entries and each code object's kernels"
    )
    inspect.add_argument("file", help="a bundle (.hsaco, .co), a code object, a cubin or PTX")
    _command(
        commands, "detect", _detect, "list this machine's GPUs and their targets", sysfs_root=True
    )
    info = _command(
        commands,
        "info",
        _info,
        "GPUs, the image each module would load and why, cache, runtime libraries",
        sysfs_root=True,
    )
    info.add_argument(
        "--kernels", action="store_true", help="list each module's kernels (default: a count)"
    )
    targets = _command(
        commands,
        "targets",
        lambda args: run_targets(args.json, args.targets, args.sysfs_root),
        "every AMD processor LLVM knows: the image it would load and why; this machine's GPUs: "
        "the pip command for theirs",
        sysfs_root=True,
    )
    targets.add_argument(
        "--targets", metavar="LIST", help="judge these built targets (a,b,...), not the installed"
    )
    _command(
        commands,
        "doctor",
        _doctor,
        "per GPU: image installed or the pip command; runtimes; known problems",
        sysfs_root=True,
    )
    cache = _command(commands, "cache", _cache, "the disk cache of extracted and compiled images")
    cache.add_argument(
        "action",
        choices=("path", "verify", "clear"),
        help="path: where it is and its size (or why it is not used), and the builder's compile "
        "cache and toolchains, each with its files and size; verify: check every entry, "
        "removing damaged ones; clear: remove every entry (verify and clear refuse a folder that "
        "is not yours with mode 0700)",
    )

    add_sweep(commands)
    return parser


def _command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    handler: Callable[[argparse.Namespace], int],
    description: str,
    *,
    sysfs_root: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand with the options they share: ``--json``, and ``--sysfs-root`` for those that
    read this machine's GPUs (so a test or a bug report can give a recorded /sys instead)."""
    command = commands.add_parser(name, help=description)
    command.add_argument("--json", action="store_true", help="print JSON for tools")
    if sysfs_root:
        command.add_argument(
            "--sysfs-root", metavar="DIR", help="read DIR in place of /sys (diagnosis and tests)"
        )
    command.set_defaults(handler=handler)
    return command


def _inspect(args: argparse.Namespace) -> int:
    path = str(args.file)
    try:
        data = read_regular(path, limit=IMAGE_FILE_LIMIT, what=_INSPECTED)
    except OSError as error:  # absent: read_regular leaves that to the caller to word
        raise UsageError(f"{path}: cannot read it ({error.strerror}); give {_INSPECTED}") from None
    report = describe(data, path)
    if args.json:
        print_json(report)
    else:
        print_report(path, report, installed_names())
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
    columns = ("device", "vendor", "target", "name", "location", "source")
    rows = [
        (device_name(gpu), gpu.vendor, gpu.target, gpu.name, gpu.location, found_by(gpu.to_json()))
        for gpu in gpus
    ]
    print_table("GPUs", columns, rows)
    for note in notes:
        print(note)
    return 0


def _info(args: argparse.Namespace) -> int:
    return run_info(args.json, args.sysfs_root, args.kernels)


def _doctor(args: argparse.Namespace) -> int:
    return run_doctor(args.json, args.sysfs_root)


def _cache(args: argparse.Namespace) -> int:
    cache = DiskCache()
    result: dict[str, Any] = {"folder": str(cache.folder)}
    failed: list[tuple[Path, str]] = []
    if args.action == "verify":
        sweep = cache.verify()
        failed = sweep.failed
        result.update(good=len(sweep.good), removed=[str(e.path) for e in sweep.removed])
        message = (
            f"{cache.folder}: {len(sweep.good)} entries good, {len(sweep.removed)} damaged and "
            f"removed"
        )
    elif args.action == "clear":
        sweep = cache.clear()
        failed = sweep.failed
        result["removed"] = len(sweep.removed)
        message = f"{cache.folder}: removed {len(sweep.removed)} entries"
    else:
        refusal = cache.refusal()
        entries = cache.entries()
        result.update(entries=len(entries), bytes=cache.size(), refused=refusal)
        message = f"{cache.folder} ({len(entries)} entries, {human_bytes(result['bytes'])})"
        if refusal is not None:
            message = refusal
        # The builder's folders sit inside the image cache's by default: each said on its own.
        builder = builder_folders()
        result["builder"] = [
            {"what": use.what, "folder": str(use.folder), "files": use.files, "bytes": use.bytes}
            for use in builder
        ]
        message = "\n".join(
            [
                f"image cache: {message}",
                *(
                    f"{use.what}: {use.folder} ({use.files} file{'' if use.files == 1 else 's'}, "
                    f"{human_bytes(use.bytes)})"
                    for use in builder
                ),
            ]
        )
    if args.action != "path":
        result["not_removed"] = [{"path": str(path), "error": why} for path, why in failed]
        if failed:
            message += f", {len(failed)} could not be removed"
    if args.json:
        print_json(result)
    else:
        print(message)
    for path, why in failed:
        print(
            f"could not remove {path}: {why}; make {cache.folder} writable by this user, or set "
            "KERNELPACK_CACHE_DIR to another folder",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)
