"""The search's selection (kernelpack.walk.select) on the CPU: hits and top k of the numpy walker
against a plain-Python statement of the rule, applied to the exact reference's walks and to the
walker's own; merging pieces; the request checks. tests/test_walk_gpu.py holds the GPU's.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from test_walk import fresh_rng, random_case

from kernelpack.errors import UsageError
from kernelpack.walk import WalkResult, compile_program, reference, run_numpy
from kernelpack.walk.select import Selection, merge_hits, merge_top, select


def rule(
    alive: npt.NDArray[np.bool_],
    delta: npt.NDArray[np.float64],
    min_delta: float | None,
    top_k: int,
) -> tuple[list[int] | None, list[int]]:
    """(hit indices, top-k indices), best first, written from the rule's words: candidates are
    alive with a delta that is not NaN; higher delta first (+0.0 above -0.0), then lower index."""
    ranked = sorted(
        (i for i in range(len(delta)) if alive[i] and not math.isnan(delta[i])),
        key=lambda i: (-float(delta[i]), math.copysign(1.0, float(delta[i])) < 0, i),
    )
    hits = None if min_delta is None else [i for i in ranked if delta[i] >= min_delta]
    return hits, ranked[:top_k]


def check_selection(
    result: WalkResult,
    full: WalkResult,
    arguments: dict[str, object],
    min_delta: float | None,
    top_k: int,
) -> None:
    """result.hits and result.top are the rule's walks over full's alive and delta2, with their
    records (est2 and delta2 from ``full``, shifts and dirs from the walker's ``arguments``)."""
    hits, top = rule(full.alive, full.delta2, min_delta, top_k)
    shifts, dirs = np.asarray(arguments["shifts"]), np.asarray(arguments["dirs"])
    for name, chosen, expected in (("hits", result.hits, hits), ("top", result.top, top)):
        if expected is None or (name == "top" and top_k == 0):
            assert chosen is None, name
            continue
        assert chosen is not None, name
        assert chosen.walk.tolist() == expected, name
        np.testing.assert_array_equal(chosen.est, full.est2[expected])
        np.testing.assert_array_equal(chosen.delta, full.delta2[expected])
        np.testing.assert_array_equal(chosen.shifts, shifts[expected])
        np.testing.assert_array_equal(chosen.dirs, dirs[expected])


def planted_walks(
    rng: np.random.Generator, walks: int, dim: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Random walks where every fifth repeats an earlier one: equal deltas, ranked by index."""
    shifts = rng.integers(-30, 30, (walks, dim))
    dirs = rng.integers(-4, 5, (walks, dim))
    for walk in range(5, walks, 5):
        source = int(rng.integers(walk))
        shifts[walk], dirs[walk] = shifts[source], dirs[source]
    return shifts, dirs


@pytest.mark.parametrize("m", [2, 3])
def test_numpy_selection_follows_the_rule_on_random_programs(m: int) -> None:
    rng, seed = fresh_rng()
    for index in range(6):
        program, arguments = random_case(rng, m, 2, 60, max_depth=25)
        arguments["shifts"], arguments["dirs"] = planted_walks(rng, 60, 2)
        full = run_numpy(program, **arguments)  # type: ignore[arg-type]
        finite = full.delta2[np.isfinite(full.delta2)]
        min_delta = float(np.median(finite)) if len(finite) else 0.0
        top_k = int(rng.integers(0, 80))  # more than the candidates at times
        chosen = run_numpy(program, **arguments, outputs=(), min_delta=min_delta, top_k=top_k)  # type: ignore[arg-type]
        assert chosen.P_final is None and chosen.delta2 is None
        try:
            check_selection(chosen, full, arguments, min_delta, top_k)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, program {index}: {error}") from None


def test_numpy_selection_matches_the_exact_reference() -> None:
    """A field whose walks converge at different speeds: the best walks by the reference's exact
    deltas are the numpy walker's best (the deltas here are far apart)."""
    program = compile_program([["2*x + y", "x**2"], ["1", "0"]], ["x", "y"])
    shifts = np.array([[1, 1], [1, 3], [2, 5], [1, 7], [3, 2], [1, 0]])
    dirs = np.array([[1, 0], [1, 0], [1, 0], [1, 0], [1, 0], [1, 0]])
    arguments: dict[str, object] = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": [2147483647, 65537],
        "depth": 40,
        "depth1": 20,
        "depth2": 40,
        "target": 1.0,
    }
    exact = reference(program, **arguments)  # type: ignore[arg-type]
    chosen = run_numpy(program, **arguments, top_k=3, min_delta=0.0)  # type: ignore[arg-type]
    hits, top = rule(exact.alive, exact.delta2, 0.0, 3)
    assert chosen.top is not None and chosen.top.walk.tolist() == top
    assert chosen.hits is not None and chosen.hits.walk.tolist() == hits
    np.testing.assert_allclose(chosen.top.delta, exact.delta2[top], rtol=1e-9)


def test_pieces_merge_to_the_whole() -> None:
    """Selecting piece by piece and merging gives the selection of the whole batch."""
    rng, seed = fresh_rng()
    walks, dim = 500, 2
    alive = rng.random(walks) < 0.8
    delta = rng.normal(size=walks).round(1)  # many ties
    delta[rng.random(walks) < 0.1] = np.nan
    delta[:3] = [0.0, -0.0, np.inf]
    est, shifts, dirs = (
        rng.normal(size=walks),
        rng.integers(-9, 9, (walks, dim)),
        rng.integers(-9, 9, (walks, dim)),
    )
    whole_hits, whole_top = select(alive, est, delta, shifts, dirs, 0.5, 40)
    hits_parts, top_parts = [], []
    for start in range(0, walks, 77):
        part = slice(start, start + 77)
        hits, top = select(alive[part], est[part], delta[part], shifts[part], dirs[part], 0.5, 40)
        assert hits is not None
        hits_parts.append(hits.offset(start))
        top_parts.append(top.offset(start))
    expected_hits, expected_top = rule(alive, delta, 0.5, 40)
    assert whole_hits is not None
    assert whole_hits.walk.tolist() == expected_hits == merge_hits(hits_parts, dim).walk.tolist()
    assert whole_top.walk.tolist() == expected_top == merge_top(top_parts, 40, dim).walk.tolist(), (
        seed
    )
    assert merge_top([], 5, dim).walk.tolist() == [] and len(Selection.empty(dim)) == 0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"outputs": ("P_final", "beta")}, "outputs: unknown beta"),
        ({"outputs": "alive"}, "outputs: expected a collection"),
        ({"min_delta": "high"}, "min_delta: expected a real number"),
        ({"min_delta": math.nan}, "min_delta: expected a number, got NaN"),
        ({"top_k": -1}, "top_k: expected 0"),
        ({"top_k": 2.5}, "top_k: expected an integer"),
    ],
)
def test_request_is_checked(change: dict[str, object], message: str) -> None:
    program = compile_program([["x", "1"], ["1", "0"]], ["x"])
    arguments: dict[str, object] = {
        "shifts": [[1]],
        "dirs": [[1]],
        "primes": [7],
        "depth": 3,
        "depth1": 1,
        "depth2": 3,
        "target": 0.0,
        **change,
    }
    with pytest.raises(UsageError, match=message):
        run_numpy(program, **arguments)  # type: ignore[arg-type]


def test_bounds_decide_positions_only_when_safe() -> None:
    """positions_fit (the GPU's check of inputs that stay on the device, and the host's fast
    path) never passes a batch that the walk-by-walk check refuses; axis_bounds and
    ranges_from_bounds agree with plain minima and maxima."""
    from kernelpack.walk.inputs import (
        axis_bounds,
        check_positions,
        positions_fit,
        ranges_from_bounds,
    )

    rng, seed = fresh_rng()
    checked = fits = 0
    for _ in range(300):
        scale = 2 ** int(rng.integers(1, 63))
        shifts = rng.integers(-scale, scale, (int(rng.integers(1, 6)), 2))
        reach = 2 ** int(rng.integers(1, 50))
        dirs = rng.integers(-reach, reach, shifts.shape)
        depth = int(rng.integers(1, 2**22))
        bounds = axis_bounds(shifts, dirs)
        assert bounds.tolist() == [
            shifts.min(0).tolist(),
            shifts.max(0).tolist(),
            dirs.min(0).tolist(),
            dirs.max(0).tolist(),
        ]
        if positions_fit(bounds, depth):
            fits += 1
            check_positions(shifts, dirs, depth)  # must not raise
            # the ranges matter below 2^52 (float_registers_exact), where float64 is exact
            far = shifts + (depth - 1) * dirs
            if np.abs(np.concatenate([shifts, far])).max() < 2**52:
                low, high = ranges_from_bounds(bounds, depth - 1)
                assert np.all(low <= np.minimum(shifts, far).min(0))
                assert np.all(high >= np.maximum(shifts, far).max(0))
        checked += 1
    assert 0 < fits < checked, f"seed {seed}: {fits} of {checked} fit"
