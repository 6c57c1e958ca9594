"""The definition of a walk in exact Python integers (WALK.md), for tests.

Nothing here shares code with the walkers beyond the argument checks and the selection
(kernelpack.walk.walker): the program runs as the register machine it is, on unbounded integers
(Program.evaluate, the one evaluator, which the exact verifier uses too and tests check against
sympy's), and the estimates come from the exact p_d and q_d. It is slow (every step a product of
big integers) and meant for small batches.
"""

from __future__ import annotations

import math

import numpy as np

from .inputs import WalkInputs, WalkResult
from .program import Program
from .screen import screen_delta
from .walker import host_walker

Matrix = list[list[int]]


def step_matrix(program: Program, position: list[int]) -> Matrix:
    """M at a position: the register machine run on Python integers."""
    m = program.m
    entries = program.evaluate(position)
    return [entries[i * m : (i + 1) * m] for i in range(m)]


def _product(left: Matrix, right: Matrix) -> Matrix:
    size = len(left)
    return [
        [sum(left[i][k] * right[k][j] for k in range(size)) for j in range(size)]
        for i in range(size)
    ]


def estimate(p: int, q: int, target: float, steps: int) -> tuple[float, float]:
    """(est, delta) from the exact p_d and q_d: est = p/q correctly rounded, and the screen's
    delta (kernelpack.walk.screen) in float64 at ``steps`` (IEEE results where q is 0 or +-1)."""
    if q == 0:
        return (math.nan if p == 0 else math.inf if p > 0 else -math.inf), math.nan
    try:
        est = p / q  # Python rounds the exact quotient of two integers correctly
    except OverflowError:
        est = math.inf if (p > 0) == (q > 0) else -math.inf
    ln_q = np.array([math.log(abs(q))])
    return est, float(screen_delta(np.array([est]), ln_q, target, steps)[0])


@host_walker
def reference(inputs: WalkInputs) -> WalkResult:
    """The walks of WALK.md computed exactly; the same arguments and result as run(), and the
    same selection when min_delta or top_k is given."""
    program = inputs.program
    m = program.m
    moduli = [int(p) for p in inputs.primes]
    walks = inputs.walks
    p_final = np.zeros((walks, len(moduli), m, m), dtype=np.uint32)
    alive = np.zeros(walks, dtype=bool)
    est = np.zeros((2, walks))
    delta = np.zeros((2, walks))
    for walk in range(walks):
        shift = [int(v) for v in inputs.shifts[walk]]
        direction = [int(v) for v in inputs.dirs[walk]]
        product: Matrix = [[int(i == j) for j in range(m)] for i in range(m)]
        for n in range(inputs.depth):
            position = [s + n * d for s, d in zip(shift, direction, strict=True)]
            product = _product(product, step_matrix(program, position))
            for which, at in enumerate((inputs.depth1, inputs.depth2)):
                if n + 1 == at:
                    est[which, walk], delta[which, walk] = estimate(
                        product[0][m - 1], product[1][m - 1], inputs.target, at
                    )
            if n + 1 == inputs.depth2:
                alive[walk] = any(product[1][m - 1] % p != 0 for p in moduli)
        for k, p in enumerate(moduli):
            p_final[walk, k] = [[value % p for value in row] for row in product]
    return WalkResult(p_final, alive, est[0], est[1], delta[0], delta[1])
