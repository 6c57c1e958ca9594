"""``python -m buildsys``: the builder's command line.

Subcommands: matrix, toolchain, hipify, build, merge, wheels, export. Each prints a table on a terminal, plain
lines in CI and JSON with ``--json``; errors are one line with exit status 1 (work failed) or 2
(bad input), through kernelpack's one error hierarchy.
"""

from __future__ import annotations

import argparse

from kernelpack._console import add_version, print_json, print_table, program_name, run_cli
from kernelpack.formats import require_zstd

from . import build as build_step
from . import hipify as hipify_step
from . import merge as merge_step
from . import toolchain as tc
from . import wheels as wheels_step
from .export import command as export_step
from .matrix import load_matrix
from .packaging import runtime_version
from .settings import add_arguments, resolve_settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name("kernelpack-build", "buildsys"),
        description="kernelpack's builder: a kernel project's CUDA sources (--project: yours, or "
        "kernelpack's own) to code objects for every AMD and NVIDIA target of its matrix, "
        "bundles, the embedded index, wheels, and Rust or C exports.",
    )
    add_version(parser, "kernelpack-build", runtime_version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    matrix = commands.add_parser("matrix", help="validate arch_matrix.toml and list its targets")
    add_arguments(matrix, "matrix")
    matrix.set_defaults(handler=_matrix)

    toolchain = commands.add_parser(
        "toolchain", help="find (or provision) the compilers and say which targets each builds"
    )
    add_arguments(toolchain, "toolchain")
    toolchain.set_defaults(handler=_toolchain)

    build = commands.add_parser(
        "build", help="compile the device code (cached, parallel) and write the embedded index"
    )
    add_arguments(build, "build")
    build.set_defaults(handler=build_step.main_build)
    merge = commands.add_parser("merge", help="recombine per-target shards into one output")
    merge_step.add_arguments(merge)
    merge.set_defaults(handler=merge_step.main_merge)
    hipify_step.add_parser(commands)

    wheels = commands.add_parser("wheels", help="build the fat and split wheels into dist/")
    wheels_step.add_arguments(wheels)
    wheels.set_defaults(handler=wheels_step.main_wheels)

    export_step.add_parser(commands)
    return parser


def _matrix(args: argparse.Namespace) -> int:
    matrix = load_matrix(resolve_settings(args, command="matrix").matrix)
    if args.json:
        print_json(matrix.as_json())
        return 0
    rows = [
        (t.vendor, t.target, t.kind, t.as_json().get("wavefront", ""), t.source)
        for t in matrix.targets
    ]
    print_table(
        f"{matrix.path}: {len(rows)} targets",
        ("vendor", "target", "kind", "wavefront", "from"),
        rows,
    )
    return 0


def _toolchain(args: argparse.Namespace) -> int:
    settings = resolve_settings(args, command="toolchain")
    matrix = load_matrix(settings.matrix)
    amd_targets = [t.target for t in matrix.amd]
    nvidia_targets = [t.target for t in matrix.nvidia]
    found = tc.reported_toolchains(amd_targets, provision=settings.provision)
    report = []
    for chain in found:
        wanted = amd_targets if chain.kind == "hip" else nvidia_targets
        buildable = chain.buildable(wanted)
        report.append(
            {
                "kind": chain.kind,
                "name": chain.name,
                "version": chain.version,
                "runs": chain.runs,
                "location": str(chain.rootfs or chain.bindir),
                "buildable": sorted(t for t, ok in buildable.items() if ok),
                "not_buildable": sorted(t for t, ok in buildable.items() if not ok),
            }
        )
    covered = {t for entry in report for t in entry["buildable"]}
    uncovered = [t for t in amd_targets + nvidia_targets if t not in covered]
    if args.json:
        print_json({"toolchains": report, "not_buildable": uncovered})
    else:
        print_table(
            "toolchains",
            ("kind", "name", "version", "runs", "builds", "cannot build"),
            [
                (
                    e["kind"],
                    e["name"],
                    e["version"],
                    e["runs"],
                    ", ".join(e["buildable"]) or "-",
                    ", ".join(e["not_buildable"]) or "-",
                )
                for e in report
            ],
        )
        if uncovered:
            hint = "" if settings.provision else "; `--provision` makes an AMD toolchain"
            print(f"not buildable by any toolchain found: {', '.join(uncovered)}{hint}")
    return 1 if uncovered else 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    if (
        args.command in ("build", "merge", "wheels", "export")
        and getattr(args, "compress", None) is not False
    ):
        require_zstd()  # before compiling anything: a missing zstandard used to fail at the end
    result: int = args.handler(args)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m buildsys``: kernelpack's run_cli gives both command lines one error and exit
    rule, a reader that leaves early (``--json | head -1``) included: status 141, as for a tool
    SIGPIPE ended, not 1, which says the work failed."""
    return run_cli(_main, argv)
