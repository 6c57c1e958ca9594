"""The ``sweep`` subcommand's arguments, apart from the sweep code.

The sweep code imports numpy (and Dask where it runs), which ``detect``, ``info``, ``doctor``,
``targets``, ``inspect`` and ``cache`` need nothing of: the README's checkout command runs them
with rich and zstandard only. So the parser is defined here and :mod:`kernelpack.sweep` is
imported when a sweep action runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

_SPEC_HELP = (
    "the sweep's spec, a TOML file: the matrix rows and axes, the ranges of shifts and directions, "
    "the target constant, depth, top_k and the hit threshold (docs/sweeps.md, 'The spec')"
)


def add_parser(commands: Any) -> None:
    """The ``sweep`` subcommand and its two actions, on kernelpack's subcommand parsers."""
    sweep = commands.add_parser("sweep", help="walk sweeps: run a spec (resumable), list the best")
    actions = sweep.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="run SPEC.toml's walks into DIR; rerun to resume",
        description="Run every walk SPEC.toml names, shard by shard, keeping each shard's hits "
        "and best walks in DIR/sweep.sqlite. Running it again with the same DIR resumes: the "
        "shards already recorded are skipped. `sweep top DIR` lists the best walks.",
    )
    run.add_argument("spec", type=Path, metavar="SPEC.toml", help=_SPEC_HELP)
    run.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="the folder of the results (created if absent): DIR/sweep.sqlite holds the spec, "
        "the shards done and the walks kept; the same DIR resumes a sweep",
    )
    run.add_argument(
        "--backend",
        choices=("gpu", "numpy"),
        default="gpu",
        help="gpu: screen the walks with the walk kernels on every GPU (default); numpy: the "
        "same walks on CPU cores, for a machine without a GPU (much slower)",
    )
    run.add_argument("--workers", type=int, help="local workers (default: one per GPU or core)")
    run.add_argument(
        "--verifiers",
        type=int,
        help="local CPU workers that verify the kept walks exactly, with --backend gpu "
        "(default: the cores left over, at least 1)",
    )
    run.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler to use")
    run.add_argument("--retries", type=int, default=2, help="times a failed shard is retried")
    run.add_argument("--json", action="store_true", help="print the summary as JSON")
    run.set_defaults(handler=_run)
    top = actions.add_parser("top", help="the best walks of DIR by exact delta, best first")
    top.add_argument("dir", type=Path, metavar="DIR", help="a folder `sweep run --out` wrote")
    top.add_argument("-k", type=int, default=10, help="how many (default 10)")
    top.add_argument("--json", action="store_true", help="print JSON for tools")
    top.set_defaults(handler=_top)


def _run(args: argparse.Namespace) -> int:
    # deferred: the sweep code imports numpy and Dask, which the other subcommands run without
    from ..sweep import run_command

    return run_command(args)


def _top(args: argparse.Namespace) -> int:
    # deferred: the sweep code imports numpy and Dask, which the other subcommands run without
    from ..sweep import top_command

    return top_command(args)
