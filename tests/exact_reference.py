"""An exact CPU evaluation of one walk, written apart from kernelpack.walk.exact_walk (tests).

The step matrix comes from sympy (each entry lambdified, so Python integers in, Python integers
out), the product is a plain loop of Python integers, the reduction math.gcd, and the logarithms
mpmath's at three times the digits of q: nothing is shared with the code under test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import mpmath as mp
import sympy as sp


def walk_delta(
    matrix: Sequence[Sequence[str]],
    axes: Sequence[str],
    shift: Sequence[int],
    direction: Sequence[int],
    depth: int,
    value: Callable[[], Any],
) -> tuple[float, int]:
    """(delta over the reduced fraction, digits) of the walk, against the mpmath number
    ``value()`` (evaluated at the working precision set here)."""
    symbols = sp.symbols(list(axes))
    entries = [[sp.lambdify(symbols, sp.sympify(e)) for e in row] for row in matrix]
    m = len(entries)
    product = [[int(i == j) for j in range(m)] for i in range(m)]
    for k in range(depth):
        position = [s + k * d for s, d in zip(shift, direction, strict=True)]
        step = [[int(f(*position)) for f in row] for row in entries]
        product = [
            [sum(product[i][t] * step[t][j] for t in range(m)) for j in range(m)] for i in range(m)
        ]
    p, q = product[0][m - 1], product[1][m - 1]
    if q == 0:
        return -math.inf, 0
    divisor = math.gcd(p, q) * (1 if q > 0 else -1)
    p, q = p // divisor, q // divisor
    with mp.workdps(int(q.bit_length() * 0.302 * 3) + 60):  # three times the digits of q
        error = abs(mp.mpf(p) / q - value())
        digits = max(0, int(mp.floor(-mp.log10(error))))
        if q == 1:
            return math.inf, digits
        return float(-1 - mp.log(error) / mp.log(q)), digits
