"""The exact delta of a walk (kernelpack.walk.exact) against the field's reference library.

ramanujantools' ``Limit.delta`` (the definition docs/walk.md adopts) is the independent reference:
its walks run through its own matrices (FLINT's rationals), its delta through sympy's reduction
and mpmath's logarithms, with the target evaluated by mpmath, not by kernelpack's parser. The
walks are polynomial continued fractions and 2- and 3-dimensional conservative matrix fields of
ramanujantools' known CMFs (each field's step matrix along a trajectory comes from the CMF
itself), at depths up to 1000, each target the walk's true limit (found once by PSLQ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import mpmath as mp
import pytest
import sympy as sp
from ramanujantools import Matrix
from ramanujantools.cmf import known_cmfs

from kernelpack.walk import exact, exact_delta

n, x, y, a, b, c = sp.symbols("n x y a b c")


@dataclass(frozen=True)
class Case:
    """One walk: ``field()`` gives (kernelpack matrix, axes, reference Limit at ``depth``)."""

    name: str
    field: Callable[[int], tuple[list[list[str]], list[str], list[int], list[int], Any]]
    depth: int
    target: str
    value: Callable[[], Any]  # the target in mpmath, written independently of the string


def pcf(b_n: Any, a_n: Any) -> Callable[[int], Any]:
    """The PCF matrix [[0, b(n)], [1, a(n)]] walked from n = 1 in steps of 1."""

    def field(depth: int) -> Any:
        step = Matrix([[0, b_n], [1, a_n]])
        rows = [[str(sp.expand(step[i, j])) for j in range(2)] for i in range(2)]
        return rows, ["n"], [1], [1], step.limit({n: 1}, depth, {n: 1})

    return field


def cmf(make: Callable[[], Any], trajectory: dict[Any, int], start: dict[Any, int]) -> Any:
    """A walk of a known CMF: kernelpack walks the CMF's own trajectory matrix (at trajectory
    step 0, so a function of the axes) from ``start`` in direction ``trajectory``."""

    def field(depth: int) -> Any:
        field_ = make()
        axes = sorted(field_.axes(), key=str)
        step = field_.trajectory_matrix(trajectory, {}).subs({n: 0})
        size = step.rows
        rows = [[str(sp.expand(step[i, j])) for j in range(size)] for i in range(size)]
        names = [str(axis) for axis in axes]
        shift = [start[axis] for axis in axes]
        direction = [trajectory[axis] for axis in axes]
        return rows, names, shift, direction, field_.limit(trajectory, depth, start)

    return field


CASES = [
    Case(
        "apery-zeta3",
        pcf(-(n**6), 34 * n**3 + 51 * n**2 + 27 * n + 5),
        1000,
        "6/zeta(3) - 5",
        lambda: 6 / mp.zeta(3) - 5,
    ),
    Case(
        "apery-zeta2",
        pcf(n**4, 11 * n**2 + 11 * n + 3),
        1000,
        "5/zeta(2) - 3",
        lambda: 30 / mp.pi**2 - 3,
    ),
    Case("pi", pcf(n**2, 2 * n + 1), 400, "4/pi - 1", lambda: 4 / mp.pi - 1),
    Case("sqrt2", pcf(1, 2), 200, "sqrt(2) - 1", lambda: mp.sqrt(2) - 1),
    Case("e", pcf(n, n), 300, "1/(e - 1)", lambda: 1 / (mp.e - 1)),
    Case("log2", pcf(-(n**2), 6 * n + 3), 1000, "2/log(2) - 3", lambda: 2 / mp.log(2) - 3),
    Case(
        "cmf-pi-11",
        cmf(known_cmfs.pi, {x: 1, y: 1}, {x: 1, y: 1}),
        1000,
        "(6 - 2*pi)/(4 - pi)",
        lambda: (6 - 2 * mp.pi) / (4 - mp.pi),
    ),
    Case(
        "cmf-e-21",
        cmf(known_cmfs.e, {x: 2, y: 1}, {x: 1, y: 2}),
        500,
        "(11*e - 30)/(3*e - 8)",
        lambda: (11 * mp.e - 30) / (3 * mp.e - 8),
    ),
    Case(
        "cmf-e-10",
        cmf(known_cmfs.e, {x: 1, y: 0}, {x: 2, y: 1}),
        300,
        "(14*e - 38)/(4*e - 11)",
        lambda: (14 * mp.e - 38) / (4 * mp.e - 11),
    ),
    Case(
        "cmf-symmetric-pi-21",
        cmf(known_cmfs.symmetric_pi, {x: 2, y: 1}, {x: 1, y: 2}),
        300,
        "(9*pi - 28)/(10 - 3*pi)",
        lambda: (9 * mp.pi - 28) / (10 - 3 * mp.pi),
    ),
    Case(
        "cmf-zeta3-11",
        cmf(known_cmfs.zeta3, {x: 1, y: 1}, {x: 1, y: 1}),
        1000,
        "1/zeta(3) - 1",
        lambda: 1 / mp.zeta(3) - 1,
    ),
    Case(
        "cmf-zeta3-21",
        cmf(known_cmfs.zeta3, {x: 2, y: 1}, {x: 1, y: 2}),
        500,
        "(5*zeta(3) - 6)/(1 - zeta(3))",
        lambda: (5 * mp.zeta(3) - 6) / (1 - mp.zeta(3)),
    ),
    Case(
        "cmf3d-2f1-111",
        cmf(known_cmfs.hypergeometric_derived_2F1, {a: 1, b: 1, c: 1}, {a: 1, b: 1, c: 1}),
        1000,
        "(51*pi - 160)/(16 - 5*pi)",
        lambda: (51 * mp.pi - 160) / (16 - 5 * mp.pi),
    ),
    Case(
        "cmf3d-2f1-123",
        cmf(known_cmfs.hypergeometric_derived_2F1, {a: 1, b: 2, c: 3}, {a: 1, b: 1, c: 1}),
        300,
        "(51*pi - 160)/(16 - 5*pi)",
        lambda: (51 * mp.pi - 160) / (16 - 5 * mp.pi),
    ),
]


def reference_delta(limit: Any, value: Callable[[], Any]) -> float:
    """ramanujantools' delta, with L and the arithmetic at enough digits: twice q's digits and
    more (Limit.delta computes in the context of L, so L must carry them)."""
    digits = 3 * len(str(limit.as_rational().q)) + 60
    with mp.workdps(digits):
        return float(limit.delta(value()))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_exact_delta_agrees_with_ramanujantools(case: Case) -> None:
    rows, axes, shift, direction, limit = case.field(case.depth)
    expected = reference_delta(limit, case.value)
    found = exact(rows, axes, shift, direction, case.depth, case.target)
    assert abs(found.delta - expected) <= 1e-9, (found.delta, expected)
    assert found.delta == exact_delta(rows, axes, shift, direction, case.depth, case.target)
    # the limit is the target: the walk has converged to many digits, and delta is meaningful
    assert found.digits >= 10 and found.delta > -0.5, found
    p, q = limit.as_rational().as_numer_denom()
    assert (found.p, found.q) == (int(p), int(q))
