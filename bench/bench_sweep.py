"""Sweep throughput on 1 and on N GPUs of one machine: one spec, `python -m kernelpack sweep run`
with --workers 1 and --workers N (the Dask local cluster, one worker a GPU), each into a fresh
folder. Prints a Markdown table (paste it into docs/bench-walk.md with the command and machine).

    python bench/bench_sweep.py [--gpus 2] [--shards 60]

Throughput is (walk, prime, step) triples per second of the sweep's steady state: the walks
committed after the first shard over the time from the first commit to the last (the cluster's
start and each worker's first module load left out), and the whole command's wall time beside.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The benchmark's m = 2 field (bench_walk.py), 32 primes, depth 2000, 10^6 walks a shard.
SPEC = """\
matrix = [["2*x + y + 1", "-(x + 1)**2 * (x + y + 1)"], ["1", "0"]]
axes = ["x", "y"]
target = 1.0
depth = 2000
depth1 = 1000
primes = 32
shifts = [[1, 250], [1, {high}]]
dirs = [[1, 20], [1, 20]]
top_k = 100
shard_walks = 1000000
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--shards", type=int, default=60)
    options = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "wheels"), *sys.path])}
    lines = [
        "| GPUs | walks | wall (s) | steady triples/s | scaling |",
        "| --- | --- | --- | --- | --- |",
    ]
    base = None
    with tempfile.TemporaryDirectory() as scratch:
        spec = Path(scratch) / "spec.toml"
        spec.write_text(SPEC.format(high=options.shards * 1_000_000 // (250 * 400)))
        for gpus in sorted({1, options.gpus}):
            started = time.perf_counter()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "kernelpack",
                    "sweep",
                    "run",
                    str(spec),
                    "--out",
                    f"{scratch}/out{gpus}",
                    "--workers",
                    str(gpus),
                    "--json",
                ],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            wall = time.perf_counter() - started
            if done.returncode != 0:
                sys.exit(f"sweep on {gpus} GPU(s) failed: {done.stderr[-2000:]}")
            summary = json.loads(done.stdout)
            print(json.dumps(summary), file=sys.stderr, flush=True)
            rate = summary["steady_triples_per_second"]
            base = base or rate
            lines.append(
                f"| {gpus} | {summary['walks']:,} | {wall:.1f} | {rate:.3g} | {rate / base:.2f}x |"
            )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
