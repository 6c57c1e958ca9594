"""Which walks a search keeps: the hits (alive, delta >= a threshold) and the top k by delta.

Both walkers select with the same rule; the GPU walker does it on the device (walk.cu's
selection kernels) and only the records it keeps come back, the numpy walker does it here. The
rule, written once:

- a walk is a *candidate* when it is alive and its delta (at depth2) is not NaN;
- candidates rank by delta, highest first, and among equal deltas by index, lowest first; the
  order of deltas is that of their bits as walk.cu reads them (:func:`order_keys`), which is
  IEEE order except that -0.0 ranks below +0.0;
- hits are the candidates with delta >= min_delta; the top k the first k candidates.

A :class:`Selection` holds its walks sorted by that rank. Selections of several batches or
pieces merge (:func:`merge_top`, :func:`merge_hits`) once each walk's index is made global
(:meth:`Selection.offset`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .verify import Verified

SIGN_BIT = np.uint64(1 << 63)


@dataclass(frozen=True, eq=False)
class Selection:
    """Walks kept by a search, best first: index, the estimate and the screen's delta at
    depth2, and the walk's shift and direction (n, dim); ``verified`` their exact measures
    (kernelpack.walk.verify) when the search verified them, None otherwise."""

    walk: npt.NDArray[np.int64]
    est: npt.NDArray[np.float64]
    delta: npt.NDArray[np.float64]
    shifts: npt.NDArray[np.int64]
    dirs: npt.NDArray[np.int64]
    verified: Verified | None = None

    def __len__(self) -> int:
        return len(self.walk)

    @classmethod
    def empty(cls, dim: int) -> Selection:
        none = np.zeros(0, dtype=np.int64)
        return cls(
            none,
            np.zeros(0),
            np.zeros(0),
            np.zeros((0, dim), np.int64),
            np.zeros((0, dim), np.int64),
        )

    def offset(self, first: int) -> Selection:
        """The same walks with indices counted from ``first`` (a batch's place in a sweep)."""
        return replace(self, walk=self.walk + first)

    def take(self, rows: npt.NDArray[np.int64]) -> Selection:
        return Selection(
            self.walk[rows],
            self.est[rows],
            self.delta[rows],
            self.shifts[rows],
            self.dirs[rows],
            None if self.verified is None else self.verified.take(rows),
        )

    def sorted(self) -> Selection:
        """Best first: delta's key descending, then index ascending."""
        return self.take(np.lexsort((self.walk, ~order_keys(self.delta))))


def order_keys(delta: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """Unsigned integers in the order of the deltas (walk.cu's key_of): the sign bit set for a
    positive number, every bit flipped for a negative one."""
    bits = np.ascontiguousarray(delta, dtype=np.float64).view(np.uint64)
    return np.where(bits & SIGN_BIT, ~bits, bits | SIGN_BIT)


def candidates(
    alive: npt.NDArray[np.bool_], delta: npt.NDArray[np.float64]
) -> npt.NDArray[np.bool_]:
    mask: npt.NDArray[np.bool_] = np.asarray(alive, dtype=bool) & ~np.isnan(delta)
    return mask


def select(
    alive: npt.NDArray[np.bool_],
    est: npt.NDArray[np.float64],
    delta: npt.NDArray[np.float64],
    shifts: npt.NDArray[np.int64],
    dirs: npt.NDArray[np.int64],
    min_delta: float | None,
    top_k: int,
) -> tuple[Selection | None, Selection]:
    """(hits, top k) of one batch on the host; hits is None when min_delta is None."""
    mask = candidates(alive, delta)
    index = np.flatnonzero(mask).astype(np.int64)
    chosen = Selection(index, est[index], delta[index], shifts[index], dirs[index]).sorted()
    top = chosen.take(np.arange(min(top_k, len(chosen)), dtype=np.int64))
    if min_delta is None:
        return None, top
    with np.errstate(invalid="ignore"):
        keep = chosen.delta >= min_delta
    return chosen.take(np.flatnonzero(keep).astype(np.int64)), top


def _concatenate(parts: Sequence[Selection], dim: int) -> Selection:
    if not parts:
        return Selection.empty(dim)
    return Selection(
        np.concatenate([p.walk for p in parts]),
        np.concatenate([p.est for p in parts]),
        np.concatenate([p.delta for p in parts]),
        np.concatenate([p.shifts for p in parts]).reshape(-1, dim),
        np.concatenate([p.dirs for p in parts]).reshape(-1, dim),
    )


def merge_hits(parts: Sequence[Selection], dim: int) -> Selection:
    """The hits of several pieces (global indices), best first."""
    return _concatenate(parts, dim).sorted()


def merge_top(parts: Sequence[Selection], top_k: int, dim: int) -> Selection:
    """The top k of several pieces' top k (global indices), best first."""
    merged = _concatenate(parts, dim).sorted()
    return merged.take(np.arange(min(top_k, len(merged)), dtype=np.int64))
