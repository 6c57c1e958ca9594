"""The exact delta of a walk (kernelpack.walk.exact_walk), against the field's reference library
and an independent exact walk; targets at any precision; sweep top over Apery's field.

ramanujantools' ``Limit.delta`` (the definition docs/walk.md adopts) is the independent reference:
its walks run through its own matrices (FLINT's rationals), its delta through sympy's reduction
and mpmath's logarithms, with the target evaluated by mpmath, not by kernelpack's parser. The
walks are polynomial continued fractions and 2- and 3-dimensional conservative matrix fields of
ramanujantools' known CMFs (each field's step matrix along a trajectory comes from the CMF
itself), at depths up to 1000, each target the walk's true limit (found once by PSLQ).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mpmath as mp
import pytest
import sympy as sp
from exact_reference import walk_delta
from ramanujantools import Matrix
from ramanujantools.cmf import known_cmfs
from test_walk_sweep import ON_CPU, sweep

import kernelpack.walk.exact_walk as exact_module
from kernelpack.errors import UsageError
from kernelpack.sweep.spec import largest_primes, load_spec
from kernelpack.walk import compile_program, exact, exact_delta, parse_target, run_numpy
from kernelpack.walk.exact_walk import fraction_from_residues, integer_walk

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


APERY = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]


@pytest.mark.parametrize(
    ("depth", "raw"), [(10, -0.114), (30, -0.356), (1000, -0.668)], ids=["10", "30", "1000"]
)
def test_raw_q_delta_is_issue_46s_measurement(depth: int, raw: float) -> None:
    """Apery's walk for 6/zeta(3) - 5 against raw q, as measured in issue 46 (exact integers and
    mpmath at 5,000 digits, to three places), and the reduced q's delta above it."""
    found = exact(APERY, ["n"], [1], [1], depth, "6/zeta(3) - 5")
    assert round(found.delta_raw, 3) == raw
    assert found.delta_raw == exact_delta(APERY, ["n"], 1, 1, depth, "6/zeta(3) - 5", raw_q=True)
    assert found.delta > found.delta_raw and found.q_raw % found.q == 0


def test_residues_give_p_and_q_through_crt_when_the_primes_carry_the_bits() -> None:
    """At depth 30 Apery's p and q need about 480 bits: 32 primes of 31 bits carry them, and
    the CRT path gives what the integer walk gives; 8 primes do not, and the integer walk
    answers; a bound that lies is caught (the value comes back too large)."""
    program = compile_program(APERY, ["n"])
    primes = largest_primes(32)
    walked = run_numpy(program, [[1]], [[1]], primes, 30, 15, 30, 0.0)
    truth = integer_walk(program, [1], [1], 30)
    size = max(abs(truth[0][1]), abs(truth[1][1])).bit_length()
    by_walk = exact(APERY, ["n"], [1], [1], 30, "6/zeta(3) - 5")
    by_crt = exact(
        APERY,
        ["n"],
        [1],
        [1],
        30,
        "6/zeta(3) - 5",
        residues=walked.P_final[0],
        primes=primes,
        log2_size=size,
    )
    assert by_crt.source == "crt" and by_walk.source == "integer walk"
    assert (by_crt.p, by_crt.q, by_crt.q_raw, by_crt.delta) == (
        by_walk.p,
        by_walk.q,
        by_walk.q_raw,
        by_walk.delta,
    )
    p_res, q_res = walked.P_final[0, :, 0, 1].tolist(), walked.P_final[0, :, 1, 1].tolist()
    assert fraction_from_residues(p_res, q_res, primes, size) == (truth[0][1], truth[1][1])
    few = exact(
        APERY,
        ["n"],
        [1],
        [1],
        30,
        "6/zeta(3) - 5",
        residues=walked.P_final[0, :8],
        primes=primes[:8],
        log2_size=size,
    )
    assert few.source == "integer walk" and few.delta == by_walk.delta
    assert fraction_from_residues(p_res[:8], q_res[:8], primes[:8], 100) is None  # it lied


def test_integer_walk_agrees_with_the_numpy_walker_modulo_its_primes() -> None:
    """m = 3, two axes, negative directions: P_depth exactly, reduced, is the numpy walker's."""
    rows = [["0", "0", "x**3 + 2*y"], ["1", "0", "-(x*y + 2)"], ["0", "1", "3*x + 2*y + 1"]]
    program = compile_program(rows, ["x", "y"])
    primes = largest_primes(4)
    shifts, dirs = [[3, -5], [0, 7]], [[2, 1], [-1, -3]]
    walked = run_numpy(program, shifts, dirs, primes, 40, 20, 40, 0.5)
    for walk in range(2):
        product = integer_walk(program, shifts[walk], dirs[walk], 40)
        for k, p in enumerate(primes):
            assert [[v % p for v in row] for row in product] == walked.P_final[walk, k].tolist()


def test_degenerate_quotients_follow_ramanujantools() -> None:
    """q = 0 gives -inf, as Limit.delta's own branch for it says (through sympy, 1/0 becomes zoo,
    whose denominator is 1, and ramanujantools 0.0.8 returns +inf there: a walk that never
    defines p/q must not rank first); a reduced q of 1 gives +inf (log q = 0), as Limit.delta."""
    assert exact_delta([["0", "1"], ["1", "0"]], ["n"], [1], [1], 1, "pi") == -math.inf
    walk = exact([["0", "0"], ["1", "n"]], ["n"], [1], [1], 5, "pi")  # p = 0, q = 24
    assert (walk.p, walk.q, walk.delta, walk.digits) == (0, 1, math.inf, 0)
    assert Matrix([[0, 0], [1, n]]).limit({n: 1}, 5, {n: 1}).delta(mp.pi) == mp.inf


def test_a_target_that_cannot_resolve_the_error_is_said_so() -> None:
    """A float stands for its constant only to half an ulp, a decimal string to its last
    digit: closer than that, no exact delta can be had from it, and the call says what to
    give; a long enough decimal string gives the expression's delta."""
    with pytest.raises(UsageError, match=r"^target '-0.008555764515755\d*' resolves numbers"):
        exact_delta(APERY, ["n"], [1], [1], 100, 6 / 1.2020569031595942 - 5)
    with pytest.raises(UsageError, match=r"as a decimal string of more than \d+ digits"):
        exact_delta(APERY, ["n"], [1], [1], 100, "-0.00855576451575501")
    with mp.workdps(400):
        digits = mp.nstr(6 / mp.zeta(3) - 5, 390, strip_zeros=False)
    assert (
        abs(
            exact_delta(APERY, ["n"], [1], [1], 100, digits)
            - exact_delta(APERY, ["n"], [1], [1], 100, "6/zeta(3) - 5")
        )
        < 1e-9
    )
    assert exact_delta(APERY, ["n"], [1], [1], 5, -0.0085557645) < 0.5  # far: a float serves


def test_a_walk_too_large_for_exact_integers_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact_module, "MAX_WALK_BITS", 1000)
    with pytest.raises(UsageError, match=r"^exact walk: .* no exact value can be had at depth"):
        exact_delta(APERY, ["n"], [1], [1], 200, "6/zeta(3) - 5")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("6/zeta(3) - 5", lambda: 6 / mp.zeta(3) - 5),
        ("4/pi - 1", lambda: 4 / mp.pi - 1),
        ("1/(e - 1)", lambda: 1 / (mp.e - 1)),
        ("catalan", lambda: mp.catalan),
        ("log(2)", lambda: mp.log(2)),
        ("sqrt(2)", lambda: mp.sqrt(2)),
        ("euler + phi", lambda: mp.euler + mp.phi),
        ("gamma(1/3) ^ 2", lambda: mp.gamma(mp.mpf(1) / 3) ** 2),
        ("exp(1) - e + atan(1)*4 - pi", lambda: mp.mpf(0)),
        ("2**3**2", lambda: mp.mpf(512)),
        ("-2**2 + 2^-1", lambda: mp.mpf(-3.5)),
        ("2 ** 0.5 * sin(1) / cos(1)", lambda: mp.sqrt(2) * mp.tan(1)),
        ("1.25e-3", lambda: mp.mpf(1) / 800),
        ("3", lambda: mp.mpf(3)),
    ],
)
def test_targets_evaluate_to_any_precision(text: str, value: Callable[[], Any]) -> None:
    target = parse_target(text)
    with mp.workdps(1300):
        expected = value()
        for prec in (200, 4000):
            ball = target.ball(prec)
            assert abs(mp.mpf(ball.mid().str(1250, radius=False)) - expected) <= mp.mpf(2) ** (
                -min(prec, 4000) + 8
            ) * max(1, abs(expected)) or mp.mpf(2) ** -3990 > abs(expected)
        assert target.screen == float(expected)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("__import__(os)", "unknown name '__import__' at column 1"),
        ("open('f')", 'unexpected character "\'" at column 6'),
        ("6/zeta(3", "expected ')', got the end at column 9"),
        ("zeta(3))", "expected an operator or the end, got ')' at column 8"),
        ("2 $ 3", "unexpected character '$' at column 3"),
        ("pi pi", "expected an operator or the end, got 'pi' at column 4"),
        ("log(-1)", "is not a finite real number"),
        ("1/0", "division by zero"),
        ("zeta", "expected '(', got the end"),
        ("", "an empty string"),
        (True, "expected a number or an expression, got True"),
        ([1], "expected a number, a decimal string or an expression of known constants"),
        (math.inf, "expected a finite number"),
    ],
)
def test_target_errors_are_one_line_naming_the_token(given: object, message: str) -> None:
    with pytest.raises(UsageError, match=r"^target: ") as error:
        parse_target(given)
    assert message in str(error.value) and "\n" not in str(error.value)
    if isinstance(given, str) and given and "finite" not in message and "zero" not in message:
        assert "known: constants: catalan, e, euler, phi, pi; functions: " in str(error.value)


APERY_SWEEP = """\
matrix = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]
axes = ["n"]
target = "6/zeta(3) - 5"
depth = 1000
primes = 8
shifts = [[1, 6]]
dirs = [[1, 4]]
min_delta = 0.0
top_k = 24
shard_walks = 8
"""


def test_apery_sweep_ranks_shift_1_dir_1_best_by_its_exact_delta(tmp_path: Path) -> None:
    """A numpy-backend sweep of Apery's field (depth 1000, 24 walks in 3 shards): the store
    records each walk's exact delta and digits as its shard commits, equal to an independent
    exact CPU evaluation of every walk; the hits are the walks whose exact delta reaches
    min_delta among the screen's candidates; sweep top ranks by the stored exact delta, and the
    best is shift 1 dir 1, Apery's own walk, which the screen saw as closer than float64
    resolves."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(APERY_SWEEP)
    spec = load_spec(spec_path)
    done = sweep("run", str(spec_path), "--out", str(tmp_path / "out"), *ON_CPU)
    assert done.returncode == 0, done.stderr
    shown = sweep("top", str(tmp_path / "out"), "--json", "-k", "24")
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["target"] == "6/zeta(3) - 5" and report["ranked_by"] == "delta_exact"
    shifts, dirs = spec.walk_arrays(0, spec.walks)
    expected = {
        walk: walk_delta(
            spec.matrix,
            spec.axes,
            shifts[walk].tolist(),
            dirs[walk].tolist(),
            spec.depth,
            lambda: 6 / mp.zeta(3) - 5,
        )
        for walk in range(spec.walks)
    }
    order = sorted(expected, key=lambda w: (-expected[w][0], w))
    rows = report["top"]
    assert [row["walk"] for row in rows][:20] == order[:20]
    assert len(rows) == spec.walks
    for row in rows:
        delta, digits = expected[row["walk"]]
        assert abs(row["delta_exact"] - delta) <= 1e-9 and row["digits"] == digits
    best = rows[0]
    assert (best["shift"], best["dir"]) == ([1], [1])
    assert abs(best["delta_exact"] - 0.0861006157164428) < 1e-12 and best["digits"] == 3064
    assert best["delta"] == math.inf  # the screen: closer than float64 resolves
    # the store itself holds them, recorded at commit; hits by exact delta
    with sqlite3.connect(tmp_path / "out" / "sweep.sqlite") as db:
        stored = db.execute("SELECT walk, delta_exact, digits, hit, delta FROM walks").fetchall()
    assert sorted(w for w, *_ in stored) == list(range(spec.walks))
    for walk, delta_exact, digits, _, _ in stored:
        assert abs(delta_exact - expected[walk][0]) <= 1e-9 and digits == expected[walk][1]
    screened = [w for w, _, _, _, screen in stored if screen >= 0.0]  # the screen's candidates
    assert 0 in screened
    assert sorted(w for w, _, _, hit, _ in stored if hit) == sorted(
        w for w in screened if expected[w][0] >= 0.0
    )


def test_a_walk_closer_than_a_float_target_resolves_ranks_first(tmp_path: Path) -> None:
    """With the target given as a float, Apery's own walk (shift 1, dir 1) agrees with it past the
    float's resolution at depth 30: it has no exact delta, says why, and still ranks first (it is
    at least as close as the target can tell), ahead of walks whose exact delta is known."""
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        'matrix = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]\naxes = ["n"]\n'
        f"target = {6 / 1.2020569031595942 - 5!r}\ndepth = 30\ndepth1 = 15\nprimes = 8\n"
        "shifts = [[1, 4]]\ndirs = [[1, 4]]\ntop_k = 4\nshard_walks = 8\n"
    )
    done = sweep("run", str(spec_path), "--out", str(tmp_path / "out"), *ON_CPU)
    assert done.returncode == 0, done.stderr
    shown = sweep("top", str(tmp_path / "out"), "--json", "-k", "2")
    assert shown.returncode == 0, shown.stderr
    best, second = json.loads(shown.stdout)["top"]
    assert (best["shift"], best["dir"]) == ([1], [1])
    assert best["delta_exact"] is None and "resolves numbers only to about" in best["note"]
    assert second["delta_exact"] is not None


def test_run_with_exact_carries_the_exact_delta_of_kept_walks() -> None:
    """run_numpy(..., exact=True) (the walkers share it): the top k and hits carry each walk's
    exact delta and digits (an independent exact walk of each), ranked by it; the hits are the
    screen's candidates whose exact delta reaches min_delta; without exact, none is measured."""
    matrix = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]
    program = compile_program(matrix, ["n"])
    shifts = [[s] for s in range(1, 5) for _ in range(3)]
    dirs = [[d] for _ in range(1, 5) for d in range(1, 4)]
    arguments = {
        "primes": largest_primes(8),
        "depth": 200,
        "depth1": 100,
        "depth2": 200,
        "target": "6/zeta(3) - 5",
        "min_delta": 0.0,
        "top_k": 6,
    }
    screen = run_numpy(program, shifts, dirs, **arguments)  # type: ignore[arg-type]
    assert screen.top is not None and screen.top.verified is None
    found = run_numpy(program, shifts, dirs, **arguments, exact=True)  # type: ignore[arg-type]
    assert found.top is not None and found.top.verified is not None
    assert found.hits is not None and found.hits.verified is not None
    assert sorted(found.top.walk.tolist()) == sorted(screen.top.walk.tolist())
    expected = {
        walk: walk_delta(matrix, ["n"], shifts[walk], dirs[walk], 200, lambda: 6 / mp.zeta(3) - 5)
        for walk in range(len(shifts))
    }
    for selection in (found.top, found.hits):
        assert selection.verified is not None
        walks = selection.walk.tolist()
        assert walks == sorted(walks, key=lambda w: (-expected[w][0], w))
        for i, walk in enumerate(walks):
            assert abs(selection.verified.delta[i] - expected[walk][0]) <= 1e-9
            assert selection.verified.digits[i] == expected[walk][1]
    assert screen.hits is not None
    assert sorted(found.hits.walk.tolist()) == sorted(
        w for w in screen.hits.walk.tolist() if expected[w][0] >= 0.0
    )
    assert found.top.walk[0] == 0  # shift 1 dir 1
    with pytest.raises(UsageError, match=r"^exact: expected True or False"):
        run_numpy(program, shifts, dirs, **arguments, exact="yes")  # type: ignore[arg-type]
