"""``python -m kernelpack``: inspect files, detect GPUs, explain image selection, manage the cache.

Every subcommand prints a table on a terminal, plain lines elsewhere, and JSON with ``--json``.
Errors come out as one line with the exit status of kernelpack.errors.
"""

from __future__ import annotations

import argparse

from ._console import run_cli


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
    return parser


def _inspect(args: argparse.Namespace) -> int:
    raise NotImplementedError


def _detect(args: argparse.Namespace) -> int:
    raise NotImplementedError


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    handler = args.handler
    result: int = handler(args)
    return result


def main(argv: list[str] | None = None) -> int:
    return run_cli(_main, argv)
