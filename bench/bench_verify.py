"""The cost of verifying a kept walk exactly on one CPU core (kernelpack.walk.verify), and what it
means for a sweep: prints a Markdown table (paste it into docs/bench-walk.md with the command and
machine).

    python bench/bench_verify.py [--walks 200] [--depth 1000]

Per walk: the integer walk (a product tree of FLINT matrices) and the exact delta (gcd, the
target's ball, the logarithms), warm (the target's balls computed once), over random walks of
the benchmark's m = 2 field (bench_walk.py: shifts 1..99, odd dirs -5..7) and of Apery's field.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from kernelpack.walk import compile_program
from kernelpack.walk.targets import parse_target
from kernelpack.walk.verify import verify_one

FIELDS = (
    (
        "m = 2 bench field, target 1.0",
        [["2*x + y + 1", "-(x + 1)**2 * (x + y + 1)"], ["1", "0"]],
        ["x", "y"],
        1.0,
    ),
    (
        "Apery's field, target 6/zeta(3) - 5",
        [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]],
        ["n"],
        "6/zeta(3) - 5",
    ),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--walks", type=int, default=200)
    parser.add_argument("--depth", type=int, default=1000)
    options = parser.parse_args()
    rng = np.random.default_rng(46)
    print("| field | depth | walks | median ms/walk | mean ms/walk | no exact delta |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, matrix, axes, target in FIELDS:
        program = compile_program(matrix, axes)
        goal = parse_target(target)
        shifts = rng.integers(1, 100, (options.walks, len(axes)))
        dirs = rng.choice(np.arange(-5, 8, 2), (options.walks, len(axes)))
        verify_one(program, shifts[0].tolist(), dirs[0].tolist(), options.depth, goal)  # warm
        times, missing = [], 0
        for shift, direction in zip(shifts.tolist(), dirs.tolist(), strict=True):
            started = time.perf_counter()
            _, _, _, note = verify_one(program, shift, direction, options.depth, goal)
            times.append(time.perf_counter() - started)
            missing += bool(note)
        print(
            f"| {name} | {options.depth} | {options.walks} | "
            f"{1e3 * statistics.median(times):.2f} | {1e3 * statistics.fmean(times):.2f} | "
            f"{missing} |"
        )


if __name__ == "__main__":
    main()
