"""Walk sweeps: a spec file, shards over every GPU (or CPU core, or a Dask cluster), results in
SQLite, resumable (``python -m kernelpack sweep run|top``, whose arguments
:mod:`kernelpack.cli.sweep_command` defines; docs/sweeps.md).

- :mod:`.spec`: SPEC.toml, the walks it names and their shards;
- :mod:`.store`: DIR/sweep.sqlite, one transaction per shard;
- :mod:`.engine`: the shards through Dask distributed (a GPU screen, then the kept walks
  verified exactly on CPU workers), progress, retries;
- :mod:`.report`: the kept walks and their exact deltas, ranked for ``top``.
"""

from __future__ import annotations

import argparse
import sys

from .._console import print_json, print_table
from .engine import EngineOptions, run_sweep
from .report import rows as ranked_rows
from .spec import Spec, load_spec
from .store import Store

__all__ = [
    "EngineOptions",
    "Spec",
    "Store",
    "load_spec",
    "run_command",
    "run_sweep",
    "top_command",
]


def run_command(args: argparse.Namespace) -> int:
    """``sweep run``: the arguments are cli.sweep_command's."""
    options = EngineOptions(
        args.backend, args.workers, args.scheduler, args.retries, verifiers=args.verifiers
    )
    spec = load_spec(args.spec)
    store = Store.open(args.out, spec)
    try:
        summary = run_sweep(spec, store, options)
    finally:
        store.close()
    if args.json:
        print_json(summary)
    else:
        print(
            f"{args.out}: {summary['shards_done']}/{summary['shards']} shards, "
            f"{summary['walks_done']:,}/{summary['walks']:,} walks; this run "
            f"{summary['walks_this_run']:,} walks in {summary['seconds']:.1f} s "
            f"({summary['triples_per_second']:.3g} triples/s), {summary['failures_total']} failures"
        )
    return 0


def top_command(args: argparse.Namespace) -> int:
    """``sweep top``: the arguments are cli.sweep_command's."""
    store, spec = Store.read(args.dir)
    try:
        rows = ranked_rows(store.top(max(0, args.k)))
        walks_done = store.progress()[1]
    finally:
        store.close()
    if args.k > spec.top_k:
        print(
            f"note: every shard keeps its best {spec.top_k} (the spec's top_k) and its hits; past "
            f"{spec.top_k} this list holds only walks that were kept",
            file=sys.stderr,
        )
    if args.json:
        print_json(
            {
                "walks_done": walks_done,
                "walks": spec.walks,
                "target": spec.target,
                "ranked_by": "delta_exact",
                "top": [
                    {
                        "walk": row.walk,
                        "delta_exact": row.delta_exact,
                        "digits": row.digits,
                        "delta": row.delta,
                        "est": row.est,
                        "shift": row.shift,
                        "dir": row.dir,
                        **({"note": row.note} if row.note else {}),
                    }
                    for row in rows
                ],
            }
        )
        return 0
    title = f"{args.dir}: best {len(rows)} of {walks_done:,}/{spec.walks:,} walks by exact delta"
    print_table(
        title,
        ("walk", "delta (exact)", "digits", "delta (screen)", "estimate", "shift", "dir"),
        [
            (
                row.walk,
                "-" if row.delta_exact is None else f"{row.delta_exact:.9g}",
                "-" if row.digits is None else row.digits,
                f"{row.delta:.6g}",
                f"{row.est:.15g}",
                row.shift,
                row.dir,
            )
            for row in rows
        ],
    )
    for row in rows:
        if row.note:
            print(f"walk {row.walk}: no exact delta: {row.note}", file=sys.stderr)
    return 0
