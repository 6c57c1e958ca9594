"""What ``sweep top`` reports: the kept walks as the store recorded them, ranked by exact delta.

Each kept walk was verified exactly when its shard committed (kernelpack.walk.verify): the store
holds its ``delta_exact`` over the reduced fraction and ``digits``, the decimal places of p/q
that agree with the target, next to the GPU screen's estimate and delta. Rows rank by
kernelpack.walk.verify.rank_key: a walk whose p/q agrees with the target beyond what the target
resolves (a float target, say: it is at least as close as the target can tell) first, then by
exact delta (best first), then the walks with no exact delta for another reason; ties by walk
number. Nothing is measured again here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..walk.verify import rank_key
from .store import Kept


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
        """The sort key (kernelpack.walk.verify.rank_key)."""
        exact = float("nan") if self.delta_exact is None else self.delta_exact
        return rank_key(self.beyond_target, exact, self.walk)


def rows(kept: list[Kept]) -> list[Row]:
    """The store's kept walks as report rows, ranked."""
    found = [
        Row(k.walk, k.delta_exact, k.digits, k.delta, k.est, k.shift, k.dir, k.note, k.beyond)
        for k in kept
    ]
    return sorted(found, key=Row.rank)
