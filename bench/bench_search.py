"""A search on one GPU end to end (issue 46): a sweep's rate with exact verification against the
screen alone, and the first call at a new size with page-locked memory pooled; JSON, and a
Markdown section with command, machine and date that goes into docs/bench-walk.md.

    python bench/bench_search.py [--json FILE] [--output FILE] [--doc docs/bench-walk.md]
                                 [--shards 24] [--verifiers N]
    python bench/bench_search.py --from-json FILE --doc docs/bench-walk.md   # render only

Sweep: bench_walk.py's m = 2 field, 32 primes, depth 1000, 10^6 walks a shard, top 100 kept,
target 1.0 (the figures of docs/bench-walk.md's "Exact verification" section), run twice in this
process through kernelpack.sweep.run_sweep on one GPU worker and the CPU verifiers of the local
cluster, each into a fresh folder: once the screen alone (EngineOptions(verify=False)), once with
every kept walk verified exactly. The rate is the summary's steady triples/s (commits after the
first over the time from the first commit to the last); verification overlaps the GPU where the
verified sweep keeps its rate while the verifiers' summed CPU seconds exceed the difference in
wall time many times over.

First call: a fresh process per way of allocating (so that no cache of an earlier call helps),
the walk module loaded and warmed at B = 10^4, then run(...) with all outputs, numpy in, at
B = 10^6 (larger than any earlier call: page-locked memory must be allocated), at B = 4 x 10^5 (a
new size, served by the pool from the first call's buffers once its results are dropped), and at
B = 10^6 again (best of 3). "Before the pool" replaces DeviceMemory.pinned by the allocation it
made before (torch's pinned tensors, whose cache reuses a buffer only at the same power of two).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "wheels"))

from bench_walk import AXES, MATRICES, largest_primes  # noqa: E402

from kernelpack.devices import pinned  # noqa: E402
from kernelpack.devices.arrays import gpu_framework  # noqa: E402
from kernelpack.devices.memory import DeviceMemory  # noqa: E402
from kernelpack.files.atomic import atomic_write  # noqa: E402
from kernelpack.sweep import EngineOptions, Store, load_spec, run_sweep  # noqa: E402
from kernelpack.walk import compile_program, run  # noqa: E402

PRIMES, DEPTH, SHARD_WALKS = 32, 1000, 1_000_000
SPEC = f"""\
matrix = {json.dumps(MATRICES[2])}
axes = {json.dumps(AXES)}
target = 1.0
depth = {DEPTH}
depth1 = {DEPTH // 2}
primes = {PRIMES}
shifts = [[1, 250], [1, {{high}}]]
dirs = [[1, 20], [1, 20]]
top_k = 100
shard_walks = {SHARD_WALKS}
"""
FIRST_CALLS = (
    ("first call, larger than any before (after B = 10^4)", 1_000_000),
    ("first call at a new size, smaller than the last", 400_000),
    ("the same size again (best of 3)", 1_000_000),
)
BEGIN, END = "<!-- bench_search.py: begin -->", "<!-- bench_search.py: end -->"


def sweep_rates(shards: int, verifiers: int | None) -> dict[str, Any]:
    """Both sweeps' summaries, screen alone first."""
    found: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        spec_path = Path(scratch) / "spec.toml"
        spec_path.write_text(SPEC.format(high=shards * SHARD_WALKS // (250 * 400)))
        spec = load_spec(spec_path)
        for name, verify in (("screen", False), ("verified", True)):
            store = Store.open(Path(scratch) / name, spec)
            options = EngineOptions("gpu", workers=1, verifiers=verifiers, verify=verify)
            started = time.perf_counter()
            try:
                summary = run_sweep(spec, store, options)
            finally:
                store.close()
            summary["wall"] = time.perf_counter() - started
            summary["verifiers"] = verifiers or max(1, len(os.sched_getaffinity(0)) - 1)
            summary.pop("failures", None)
            found[name] = summary
            print(json.dumps({name: summary}), file=sys.stderr, flush=True)
    return found


def _direct_pinned(memory: DeviceMemory, nbytes: int) -> tuple[Any, np.ndarray[Any, Any]]:
    """DeviceMemory.pinned as it was before the pool, timed into DIRECT_SECONDS."""
    started = time.perf_counter()
    xp = memory._xp
    if memory.framework == "torch":
        owner = xp.empty(max(nbytes, 1), dtype=xp.uint8, pin_memory=True)
        view = owner.numpy()[:nbytes]
    else:
        owner = xp.cuda.alloc_pinned_memory(max(nbytes, 1))
        view = np.frombuffer(owner, np.uint8, nbytes)
    DIRECT_SECONDS[0] += time.perf_counter() - started
    return owner, view


DIRECT_SECONDS = [0.0]


def first_calls(way: str) -> list[dict[str, Any]]:
    """This process's calls (module docstring), ``way`` "pool" or "direct"."""
    if way == "direct":
        DeviceMemory.pinned = _direct_pinned  # type: ignore[method-assign,assignment]
    program = compile_program(MATRICES[2], AXES)
    rng = np.random.default_rng(46)

    def arguments(walks: int) -> dict[str, Any]:
        return {
            "shifts": rng.integers(1, 100, (walks, len(AXES))),
            "dirs": rng.integers(-3, 4, (walks, len(AXES))) * 2 + 1,
            "primes": largest_primes(PRIMES),
            "depth": DEPTH,
            "depth1": DEPTH // 2,
            "depth2": DEPTH,
            "target": 1.0,
        }

    run(program, **arguments(10_000))
    rows = []
    for label, walks in FIRST_CALLS:
        given = arguments(walks)
        times = []
        for _ in range(3 if label.startswith("the same") else 1):
            gc.collect()
            stats = pinned.pool(gpu_framework()).stats
            before = (stats.allocations, stats.allocate_seconds, DIRECT_SECONDS[0])
            started = time.perf_counter()
            result = run(program, **given)
            seconds = time.perf_counter() - started
            assert result.P_final is not None and result.P_final.shape[0] == walks
            del result
            allocating = (
                DIRECT_SECONDS[0] - before[2]
                if way == "direct"
                else stats.allocate_seconds - before[1]
            )
            times.append((seconds, allocating, stats.allocations - before[0]))
        seconds, allocating, allocations = min(times)
        rows.append(
            {
                "call": label,
                "walks": walks,
                "seconds": seconds,
                "triples_per_second": walks * PRIMES * DEPTH / seconds,
                "allocating_seconds": allocating,
                "pool_allocations": allocations if way == "pool" else None,
            }
        )
    return rows


def first_call_rows() -> dict[str, list[dict[str, Any]]]:
    found = {}
    for way in ("pool", "direct"):
        done = subprocess.run(
            [sys.executable, __file__, "--first-call", way],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if done.returncode != 0:
            sys.exit(f"bench_search: the first calls ({way}) failed: {done.stderr[-2000:]}")
        found[way] = json.loads(done.stdout.splitlines()[-1])
    return found


def machine() -> dict[str, str]:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm", "--format=csv,noheader"]
    try:
        gpu = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        gpu = "no nvidia-smi"
    import torch

    return {
        "gpu": gpu.splitlines()[0].strip() if gpu else "?",
        "cpus": str(len(os.sched_getaffinity(0))),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "date": datetime.date.today().isoformat(),
    }


def render(results: dict[str, Any]) -> str:
    facts, sweep, calls = results["machine"], results["sweep"], results["first_calls"]
    screen, verified = sweep["screen"], sweep["verified"]
    ratio = verified["steady_triples_per_second"] / screen["steady_triples_per_second"]
    lines = [
        BEGIN,
        "## A search on one GPU: verification overlapped, first calls (issue 46 items 3, 6)",
        "",
        f"Measured {facts['date']} with `{results['command']}` on one machine: GPU "
        f"{facts['gpu']} (name, driver, max SM clock); {facts['cpus']} CPU cores; Python "
        f"{facts['python']}, torch {facts['torch']}, numpy {facts['numpy']}. The method is "
        "bench/bench_search.py's docstring.",
        "",
        f"Sweep: the m = 2 field, {PRIMES} primes, depth {DEPTH}, 10^6 walks a shard, top 100 "
        "kept, target 1.0, one GPU worker and the verifiers shown (Dask local cluster).",
        "",
        "| sweep | shards | verifiers | wall (s) | steady triples/s | of screen alone | GPU "
        "screen (s, summed) | verification (CPU s, summed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, label in (("screen", "screen alone"), ("verified", "screen + exact verification")):
        row = sweep[name]
        lines.append(
            f"| {label} | {row['shards_done']} | {row['verifiers']} | {row['wall']:.1f} | "
            f"{row['steady_triples_per_second']:.3g} | "
            f"{row['steady_triples_per_second'] / screen['steady_triples_per_second']:.2f} | "
            f"{row['screen_seconds']:.1f} | {row['verify_seconds']:.1f} |"
        )
    lines += [
        "",
        f"With verification the sweep keeps {ratio:.0%} of its screen-alone rate (issue 46 asks "
        f"for 80% or more) while its verifiers spend {verified['verify_seconds']:.1f} CPU "
        f"seconds, {verified['wall'] - screen['wall']:+.1f} s of wall time against the screen "
        "alone: the verifications run beside the GPU's screen, not after it.",
        "",
        f"First calls: `run(...)`, m = 2, K = {PRIMES}, depth {DEPTH}, all outputs, numpy in; a "
        "fresh process each way, the module warmed at B = 10^4.",
        "",
        "| call | B | pooled: s (triples/s) | allocating page-locked (s) | buffers allocated | "
        "before the pool: s (triples/s) | allocating (s) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pooled, direct in zip(calls["pool"], calls["direct"], strict=True):
        lines.append(
            f"| {pooled['call']} | {pooled['walks']:,} | {pooled['seconds']:.3f} "
            f"({pooled['triples_per_second']:.3g}) | {pooled['allocating_seconds']:.3f} | "
            f"{pooled['pool_allocations']} | {direct['seconds']:.3f} "
            f"({direct['triples_per_second']:.3g}) | {direct['allocating_seconds']:.3f} |"
        )
    lines += [END, ""]
    return "\n".join(lines)


def splice(doc: Path, section: str) -> None:
    """The section between the markers of ``doc`` replaced (appended where it has none)."""
    text = doc.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    atomic_write(doc, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--output", type=Path, help="write the Markdown section here")
    parser.add_argument("--doc", type=Path, help="replace the section in this file")
    parser.add_argument("--shards", type=int, default=24)
    parser.add_argument("--verifiers", type=int)
    parser.add_argument("--from-json", type=Path, help="render saved results, measure nothing")
    parser.add_argument("--first-call", choices=("pool", "direct"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.first_call:
        print(json.dumps(first_calls(options.first_call)))
        return
    if options.from_json:
        results = json.loads(options.from_json.read_text())
    else:
        results = {
            "command": " ".join(["python bench/bench_search.py", *sys.argv[1:]]),
            "machine": machine(),
            "first_calls": first_call_rows(),
            "sweep": sweep_rates(options.shards, options.verifiers),
        }
        if options.json:
            atomic_write(options.json, json.dumps(results, indent=1) + "\n")
    section = render(results)
    if options.output:
        atomic_write(options.output, section)
    if options.doc:
        splice(options.doc, section)
    print(section)


if __name__ == "__main__":
    main()
