"""What ``sweep top`` reports: the kept walks measured exactly and ranked by their exact delta.

The store holds, per kept walk, its shift, direction and the float screen's estimate and delta;
the spec holds the field, the depth and the target. Each walk is measured here from exact
integers (kernelpack.walk.exact_walk): ``delta_exact`` over the reduced fraction and ``digits``,
the decimal places of p/q that agree with the target. Rows are ranked by delta_exact (best first,
ties by walk number). A walk whose exact delta cannot be had keeps its screen values and carries
the reason: it comes first when its p/q agrees with the target beyond what the target resolves (a
float target, say: it is at least as close as the target can tell), last for any other reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from ..walk.exact_walk import BeyondTargetError, exact
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
    beyond_target: bool = False  # p/q agrees with the target past its resolution

    def rank(self) -> tuple[int, float, int]:
        """The sort key: beyond the target first (by screen delta), then by exact delta, then the
        walks with no exact delta for another reason; ties by walk number."""
        if self.beyond_target:
            return (0, -self.delta, self.walk)
        if self.delta_exact is not None:
            return (1, -self.delta_exact, self.walk)
        return (2, 0.0, self.walk)


def rank_exact(spec: Spec, kept: list[tuple[int, float, float, list[int], list[int]]]) -> list[Row]:
    """``kept`` (walk, delta, est, shifts, dirs) rows measured exactly and ranked."""
    program = spec.program()
    target = parse_target(spec.target)
    rows = []
    for walk, delta, est, shift, direction in kept:
        try:
            found = exact(program, spec.axes, shift, direction, spec.depth, target)
        except BeyondTargetError as error:
            rows.append(Row(walk, None, None, delta, est, shift, direction, str(error), True))
            continue
        except UsageError as error:
            rows.append(Row(walk, None, None, delta, est, shift, direction, str(error)))
            continue
        rows.append(Row(walk, found.delta, found.digits, delta, est, shift, direction))
    return sorted(rows, key=Row.rank)
