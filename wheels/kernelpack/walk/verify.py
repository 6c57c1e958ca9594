"""Exact verification of the walks a screen kept (docs/walk.md, "Search").

Each kept walk is walked again in exact integers on the CPU (kernelpack.walk.exact_walk: a
balanced product tree of FLINT matrices, the gcd divided out, the target as a certified ball)
and gets its exact delta and digits, or a note saying why none can be had. A walk whose p/q
agrees with the target past what the target resolves (a float target, say) has no exact delta
but is ``beyond`` the target: it ranks first. :func:`order` is the one ranking rule, used by
``run(..., exact=True)``, the sweep store and ``sweep top``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from ..errors import UsageError
from .exact_walk import BeyondTargetError, integer_walk, measure
from .program import Program
from .select import Selection
from .targets import parse_target


@dataclass(frozen=True, eq=False)
class Verified:
    """The exact measures of n walks: ``delta`` over the reduced q (NaN where none), ``digits``
    (-1 where none), ``beyond`` (p/q agrees past the target's resolution) and ``notes`` (why no
    exact delta, "" where there is one)."""

    delta: npt.NDArray[np.float64]
    digits: npt.NDArray[np.int64]
    beyond: npt.NDArray[np.bool_]
    notes: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.delta)

    def take(self, rows: npt.NDArray[np.int64]) -> Verified:
        return Verified(
            self.delta[rows],
            self.digits[rows],
            self.beyond[rows],
            tuple(self.notes[int(i)] for i in rows),
        )

    def reaches(self, min_delta: float) -> npt.NDArray[np.bool_]:
        """Which walks are hits: exact delta >= min_delta, or beyond the target."""
        with np.errstate(invalid="ignore"):
            reached: npt.NDArray[np.bool_] = self.beyond | (self.delta >= min_delta)
        return reached


def verify_one(
    program: Program, shift: Sequence[int], direction: Sequence[int], depth: int, target: object
) -> tuple[float, int, bool, str]:
    """(exact delta, digits, beyond, note) of one walk; NaN and -1 where no exact delta."""
    try:
        product = integer_walk(program, shift, direction, depth)
        m = program.m
        found = measure(product[0][m - 1], product[1][m - 1], target)
    except BeyondTargetError as error:
        return math.nan, -1, True, str(error)
    except UsageError as error:
        return math.nan, -1, False, str(error)
    return found.delta, found.digits, False, ""


def verify(
    program: Program,
    shifts: npt.NDArray[np.int64],
    dirs: npt.NDArray[np.int64],
    depth: int,
    target: object,
) -> Verified:
    """The exact measures of walks (n, dim) ``shifts``/``dirs`` at ``depth`` (module docstring)."""
    goal = parse_target(target)
    return _verified(
        [
            verify_one(program, shift, direction, depth, goal)
            for shift, direction in zip(shifts.tolist(), dirs.tolist(), strict=True)
        ]
    )


def _verified(rows: Sequence[tuple[float, int, bool, str]]) -> Verified:
    return Verified(
        np.array([r[0] for r in rows], dtype=np.float64),
        np.array([r[1] for r in rows], dtype=np.int64),
        np.array([r[2] for r in rows], dtype=bool),
        tuple(r[3] for r in rows),
    )


def rank_key(beyond: bool, delta_exact: float, walk: int) -> tuple[int, float, int]:
    """The ranking of verified walks: beyond the target first, then by exact delta (NaN: none),
    then those with no exact delta for another reason; ties by walk number (the sweep store's
    ORDER BY is the same)."""
    if beyond:
        return (0, 0.0, walk)
    if not math.isnan(delta_exact):
        return (1, -delta_exact, walk)
    return (2, 0.0, walk)


def order(verified: Verified, walk: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Row indices of ``verified`` best first (:func:`rank_key`)."""
    keys = [
        rank_key(bool(b), float(d), int(w))
        for b, d, w in zip(verified.beyond, verified.delta, walk, strict=True)
    ]
    return np.array(sorted(range(len(keys)), key=keys.__getitem__), dtype=np.int64)


def verify_kept(
    program: Program,
    hits: Selection | None,
    top: Selection | None,
    depth: int,
    target: object,
    min_delta: float | None,
) -> tuple[Selection | None, Selection | None]:
    """A search's kept walks verified (each walk once): ``top`` with its exact measures, best
    first by :func:`order`; ``hits`` the screen's candidates whose exact delta reaches
    ``min_delta`` (or that are beyond the target), best first."""
    goal = parse_target(target)
    known: dict[int, tuple[float, int, bool, str]] = {}
    verified: list[Selection | None] = []
    for selection in (hits, top):
        if selection is None:
            verified.append(None)
            continue
        rows = []
        for walk, shift, direction in zip(
            selection.walk.tolist(), selection.shifts.tolist(), selection.dirs.tolist(), strict=True
        ):
            if walk not in known:
                known[walk] = verify_one(program, shift, direction, depth, goal)
            rows.append(known[walk])
        measured = _verified(rows)
        with_exact = replace(selection, verified=measured)
        verified.append(with_exact.take(order(measured, selection.walk)))
    found_hits, found_top = verified
    if found_hits is not None and found_hits.verified is not None:
        threshold = -math.inf if min_delta is None else min_delta
        found_hits = found_hits.take(np.flatnonzero(found_hits.verified.reaches(threshold)))
    return found_hits, found_top
