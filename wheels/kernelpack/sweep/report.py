"""What ``sweep top`` reports: the kept walks measured exactly and ranked by their exact delta.

The store holds, per kept walk, its shift, direction and the float screen's estimate and delta;
the spec holds the field, the depth and the target. Each walk is measured here from exact
integers (kernelpack.walk.exact_walk): ``delta_exact`` over the reduced fraction and ``digits``,
the decimal places of p/q that agree with the target. Rows are ranked by delta_exact (best first,
ties by walk number); a walk whose exact delta cannot be had (its target resolves too little,
say) keeps its screen values, carries the reason and comes last.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..walk.exact_walk import exact
from ..walk.targets import parse_target
from .spec import Spec

DEFAULT_EXACT_OVER = 1000  # kept walks measured exactly by default (about 10 ms each at depth 1000)


@dataclass(frozen=True)
class Row:
    walk: int
    delta_exact: float | None
    digits: int | None
    delta: float
    est: float
    shift: list[int]
    dir: list[int]
    note: str = ""


def rank_exact(spec: Spec, kept: list[tuple[int, float, float, list[int], list[int]]]) -> list[Row]:
    """``kept`` (walk, delta, est, shifts, dirs) rows measured exactly and ranked."""
    program = spec.program()
    target = parse_target(spec.target)
    rows = []
    for walk, delta, est, shift, direction in kept:
        try:
            found = exact(program, spec.axes, shift, direction, spec.depth, target)
        except UsageError as error:
            rows.append(Row(walk, None, None, delta, est, shift, direction, str(error)))
            continue
        rows.append(Row(walk, found.delta, found.digits, delta, est, shift, direction))
    return sorted(
        rows,
        key=lambda row: (row.delta_exact is None, -(row.delta_exact or 0.0), row.walk),
    )
