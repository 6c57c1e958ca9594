"""``python -m buildsys``: the builder's command line.

Subcommands: matrix, toolchain, hipify, build, merge, wheels, export. Each prints a table on a terminal, plain
lines in CI and JSON with ``--json``; errors are one line with exit status 1 (work failed) or 2
(bad input), through kernelpack's one error hierarchy.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from kernelpack._console import add_version, print_json, print_table, program_name, run_cli

from . import toolchain as tc
from .matrix import load_matrix
from .settings import add_arguments, resolve_settings


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose arguments, and so their modules, are added only when that subcommand is
    the one run: a no-op ``build`` takes a fraction of a second, and importing the wheel writer,
    the exporters and hipify's translator it never uses was a third of it. ``--help`` lists
    every subcommand from its ``help`` alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pending: set[str] = set()

    def add_command(self, name: str, **kwargs: Any) -> None:
        self.add_parser(name, **kwargs)
        self._pending.add(name)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, Sequence) and values and values[0] in self._pending:
            name = str(values[0])
            self._pending.remove(name)
            _subcommand_arguments(name, self._name_parser_map[name])
        super().__call__(parser, namespace, values, option_string)


def _runtime_version() -> str:
    from .packaging import runtime_version  # deferred: only --version reads it (see _Commands)

    return runtime_version()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name("kernelpack-build", "buildsys"),
        description="kernelpack's builder: a kernel project's CUDA sources (--project: yours, or "
        "kernelpack's own) to code objects for every AMD and NVIDIA target of its matrix, "
        "bundles, the embedded index, wheels, and Rust or C exports.",
    )
    add_version(parser, "kernelpack-build", _runtime_version)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", action=_Commands
    )
    assert isinstance(commands, _Commands)
    commands.add_command("matrix", help="validate arch_matrix.toml and list its targets")
    commands.add_command(
        "toolchain", help="find (or provision) the compilers and say which targets each builds"
    )
    commands.add_command(
        "build", help="compile the device code (cached, parallel) and write the embedded index"
    )
    commands.add_command("merge", help="recombine per-target shards into one output")
    commands.add_command(
        "hipify",
        help="translate CUDA sources to HIP and report where they assume 32-lane warps",
        description="Translate CUDA sources to HIP. Diagnostics: file:line:col: severity[code]: "
        "message; silence a reviewed line with // hipify: allow(<code>) or allow(wave32).",
    )
    commands.add_command("wheels", help="build the fat and split wheels into dist/")
    commands.add_command(
        "export",
        help="build, then write the modules as Rust (kernels.rs) or C (kernels.h, kernels.c)",
        conflict_handler="resolve",
    )
    return parser


def _subcommand_arguments(name: str, parser: argparse.ArgumentParser) -> None:
    """Subcommand ``name``'s arguments and handler on ``parser``: matrix's and toolchain's are
    this module's; every other subcommand's module is imported here, when it runs (_Commands)."""
    if name in ("matrix", "toolchain"):
        add_arguments(parser, name)
        parser.set_defaults(handler=_matrix if name == "matrix" else _toolchain)
        return
    # each import below is deferred: a subcommand's module, imported when it runs
    if name == "build":
        from .build import add_arguments as arguments  # deferred: see above
    elif name == "merge":
        from .merge import add_arguments as arguments  # deferred: see above
    elif name == "hipify":
        from .hipify.cli import add_arguments as arguments  # deferred: see above
    elif name == "wheels":
        from .wheels import add_arguments as arguments  # deferred: see above
    elif name == "export":
        from .export.command import add_arguments as arguments  # deferred: see above
    else:
        raise AssertionError(f"subcommand {name} has no arguments function")
    arguments(parser)


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
        from kernelpack.formats import require_zstd  # deferred: see _Commands

        require_zstd()  # before compiling anything: a missing zstandard used to fail at the end
    result: int = args.handler(args)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m buildsys``: kernelpack's run_cli gives both command lines one error and exit
    rule, a reader that leaves early (``--json | head -1``) included: status 141, as for a tool
    SIGPIPE ended, not 1, which says the work failed."""
    return run_cli(_main, argv)
