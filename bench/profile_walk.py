"""A small fixed launch of the walk's residue kernels, for a profiler: one call each of the m = 2
and the m = 3 field of bench_walk.py (walk_registers<2, 3> and walk_registers<3, 3>), 32768
walks x 32 primes (1,048,576 threads, four waves of 132 sm_90 SMs x 2048), depth 1000, no
array asked back. bench/gpu_all.sh runs it under Nsight Compute:

    ncu --clock-control none --kernel-name regex:walk_registers --launch-count 2 \\
        --section ... python3 bench/profile_walk.py

(the clocks as the benchmarks run them, not locked to base), so that docs/bench-walk.md's share
of the IMAD limit can be read against the pipes' utilisation, the issue slots and the warps'
stall reasons. Prints each call's wall time, which under the profiler means nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "wheels"))

from bench_walk import AXES, MATRICES, largest_primes  # noqa: E402

from kernelpack.walk import compile_program, run  # noqa: E402

WALKS, PRIMES, DEPTH = 32768, 32, 1000


def main() -> None:
    rng = np.random.default_rng(46)
    for m in (2, 3):
        program = compile_program(MATRICES[m], AXES)
        started = time.perf_counter()
        result = run(
            program,
            rng.integers(1, 100, (WALKS, len(AXES))),
            rng.integers(-3, 4, (WALKS, len(AXES))) * 2 + 1,
            primes=largest_primes(PRIMES),
            depth=DEPTH,
            depth1=DEPTH // 2,
            depth2=DEPTH,
            target=1.0,
            outputs=("alive",),
        )
        assert result.alive is not None and result.alive.shape == (WALKS,)
        print(
            f"m = {m}: {WALKS} walks x {PRIMES} primes, depth {DEPTH}: "
            f"{time.perf_counter() - started:.3f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
