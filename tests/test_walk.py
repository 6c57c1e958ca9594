"""kernelpack.walk on the CPU: the numpy walker against the exact reference, the program compiler,
and the argument checks. No GPU needed (tests/test_walk_gpu.py holds the kernel's tests).

The walks compare exactly on P_final and alive. The float estimates compare where WALK.md says
(alive, |est - target| > 1e-12 |target|) and where the float walk can be accurate at all: a
program with constants near 2^63 can cancel in exact arithmetic what float64 cannot, so each
comparison carries an error bound from a magnitude walk (|M| entrywise, every operation taken as
an addition of magnitudes), the textbook bound for floating-point products.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

from kernelpack.errors import UsageError
from kernelpack.walk import Op, Program, WalkResult, compile_program, reference, run_numpy
from kernelpack.walk.cpu import walk_lowered
from kernelpack.walk.inputs import is_prime
from kernelpack.walk.lower import ADD, FLOAT_REGISTER_DEGREES, MUL, SUB, Lowered, lower
from kernelpack.walk.reference import step_matrix
from kernelpack.walk.walker import bind

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# The eight largest primes below 2^31 and the smallest odd prime: the edges of the arithmetic.
LARGEST_PRIMES = [
    2147483647,
    2147483629,
    2147483587,
    2147483579,
    2147483563,
    2147483549,
    2147483543,
    2147483497,
]
EDGE_PRIMES = [3, *LARGEST_PRIMES]
EPS = 2.0**-53


def _trial_division_prime(n: int) -> bool:
    return n > 1 and all(n % f for f in range(2, math.isqrt(n) + 1))


def largest_primes(count: int) -> list[int]:
    """The ``count`` largest primes below 2^31, by trial division (independent of is_prime)."""
    found: list[int] = []
    candidate = 2**31 - 1
    while len(found) < count:
        if _trial_division_prime(candidate):
            found.append(candidate)
        candidate -= 2
    return found


Walker = Callable[..., WalkResult]


# ---- random inputs -------------------------------------------------------------------------


def random_program(rng: np.random.Generator, m: int, dim: int, length: int) -> Program:
    """A valid program of ``length`` random instructions after loading every axis and a constant,
    over few registers (so that values get overwritten), with constants at the int64 edges."""
    pool = [
        0,
        1,
        -1,
        2,
        INT64_MAX,
        INT64_MIN,
        INT64_MAX - 1,
        INT64_MIN + 1,
        int(rng.integers(-(2**62), 2**62)),
        int(rng.integers(-50, 50)),
    ]
    consts = [pool[i] for i in rng.choice(len(pool), size=int(rng.integers(1, 6)), replace=False)]
    registers = int(rng.integers(m, 12))
    written: list[int] = []
    instrs: list[tuple[int, int, int, int]] = []
    for j in range(dim):
        instrs.append((Op.LOAD_AXIS, int(rng.integers(registers)), j, 0))
        written.append(instrs[-1][1])
    instrs.append((Op.LOAD_CONST, int(rng.integers(registers)), int(rng.integers(len(consts))), 0))
    written.append(instrs[-1][1])
    # by opcode; long programs multiply more, for degrees past the register kernels' (the other
    # two residue forms)
    weights = (
        [0.1, 0.1, 0.25, 0.2, 0.2, 0.08, 0.07]
        if length < 16
        else [0.05, 0.05, 0.15, 0.1, 0.55, 0.05, 0.05]
    )
    for _ in range(length):
        op = Op(int(rng.choice(len(Op), p=weights)))
        dst = int(rng.integers(registers))
        if op is Op.LOAD_AXIS:
            row = (op, dst, int(rng.integers(dim)), 0)
        elif op is Op.LOAD_CONST:
            row = (op, dst, int(rng.integers(len(consts))), 0)
        else:
            row = (op, dst, int(rng.choice(written)), int(rng.choice(written)))
        instrs.append(row)
        written.append(dst)
    out = [int(rng.choice(written)) for _ in range(m * m)]
    return Program(np.array(instrs, np.uint8), np.array(consts, np.int64), np.array(out), m)


def random_walks(
    rng: np.random.Generator, walks: int, dim: int, depth: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Shifts and dirs of both signs; the first walk runs right up to the int64 edge."""
    shifts = rng.integers(-1000, 1000, (walks, dim))
    dirs = rng.integers(-50, 50, (walks, dim))
    dirs[0] = rng.integers(1, 2**20, dim)
    shifts[0] = INT64_MAX - (depth - 1) * dirs[0]
    return shifts, dirs


# ---- comparisons ---------------------------------------------------------------------------


def _magnitude_matrix(program: Program, position: list[int]) -> tuple[list[list[int]], int, int]:
    """M run on magnitudes (every + and - an addition), and the largest rounding count of an
    entry: a float result of the program is off by at most count * eps times its magnitude,
    where an input counts 1, a sum 1 + the larger count of its terms and a product 1 + the sum
    of its factors' counts (a repeated squaring doubles it). Third: the largest magnitude any
    register held (an overflow there is a nan in the float walk, even times zero)."""
    registers = [0] * 64
    counts = [0] * 64
    largest = 0
    for op, dst, a, b in program.instrs.tolist():
        if op == Op.LOAD_AXIS:
            registers[dst], counts[dst] = abs(position[a]), 1
        elif op == Op.LOAD_CONST:
            registers[dst], counts[dst] = abs(int(program.consts[a])), 1
        elif op in (Op.ADD, Op.SUB):
            registers[dst], counts[dst] = registers[a] + registers[b], max(counts[a], counts[b]) + 1
        elif op == Op.MUL:
            registers[dst], counts[dst] = registers[a] * registers[b], counts[a] + counts[b] + 1
        else:
            registers[dst], counts[dst] = registers[a], counts[a]
        largest = max(largest, registers[dst])
    m = program.m
    entries = [int(r) for r in program.out_reg]
    matrix = [[registers[entries[i * m + j]] for j in range(m)] for i in range(m)]
    return matrix, max(counts[r] for r in entries), largest


def _times(left: list[list[int]], right: list[list[int]]) -> list[list[int]]:
    m = len(left)
    return [[sum(left[i][k] * right[k][j] for k in range(m)) for j in range(m)] for i in range(m)]


FLOAT_RANGE = 2**1000  # a step matrix entry beyond this may overflow the float walk


def _ratio(numerator: int, denominator: int) -> float:
    """numerator / denominator rounded, inf past the float range."""
    try:
        return numerator / denominator
    except OverflowError:
        return math.inf


def float_error_bounds(
    program: Program,
    shift: list[int],
    direction: list[int],
    target: float,
    steps: tuple[int, int],
) -> list[tuple[float, float] | None]:
    """For each step d in ``steps``: bounds on |est_float - est| and |delta_float - delta|, or None
    where the float walk cannot be held to one (q_d = 0, |q_d| = 1, est_d too near the target,
    an entry past the float range, or an error bound as large as the quantity).

    First-order rounding analysis: each entry of M is off by at most c eps times its magnitude
    (c from _magnitude_matrix), each step's product adds m roundings, so the float product
    differs from the exact one by at most gamma * |M(0)|...|M(d-1)| entrywise, with
    gamma = 2 d (c + m + 1) eps (twice the first-order figure).

    The walk rescales its product every step so that the largest entry is near 1; an entry
    far below the largest then becomes subnormal or zero, an absolute error of 2^-1074 of the
    largest entry (at most |M(0)|...|M(n)|'s largest) that the later steps multiply on like any
    entry: the flush matrix F(n+1) = F(n) |M(n)| + largest(n) J carries it (J all ones), and
    adds 2^-1070 F(d) (a margin of 16) to the error of each entry at step d.
    """
    m = program.m
    exact = [[int(i == j) for j in range(m)] for i in range(m)]
    magnitude = [row[:] for row in exact]
    flush = [[0] * m for _ in range(m)]
    largest = 0
    roundings = 0
    bounds: dict[int, tuple[float, float] | None] = {}
    for n in range(max(steps)):
        position = [s + n * d for s, d in zip(shift, direction, strict=True)]
        step, count, held = _magnitude_matrix(program, position)
        roundings = max(roundings, count)
        largest = max(largest, held)
        exact = _times(exact, step_matrix(program, position))
        magnitude = _times(magnitude, step)
        largest_entry = max(v for row in magnitude for v in row)
        flush = [[v + largest_entry for v in row] for row in _times(flush, step)]
        d = n + 1
        if d not in steps:
            continue
        p, q = exact[0][m - 1], exact[1][m - 1]
        if q == 0 or abs(q) == 1 or largest >= FLOAT_RANGE:
            bounds[d] = None
            continue
        gamma = 2.0 * d * (roundings + m + 1) * EPS
        est = _ratio(p, q)
        flushed_p, flushed_q = (2.0**-1070 * _ratio(flush[i][m - 1], abs(q)) for i in (0, 1))
        relative_q = gamma * _ratio(magnitude[1][m - 1], abs(q)) + flushed_q
        if not relative_q < 1e-3:  # q_d itself is not known to float accuracy
            bounds[d] = None
            continue
        est_error = gamma * _ratio(magnitude[0][m - 1], abs(q)) + flushed_p + abs(est) * relative_q
        est_error = est_error / (1 - relative_q) + 4 * EPS * abs(est)
        distance = abs(est - target)
        if distance <= 1e-12 * abs(target) or not est_error < 1e-3 * distance:
            bounds[d] = None
            continue
        log_distance, log_q = math.log(distance), math.log(abs(q))
        distance_error = (est_error + 2 * EPS * (abs(est) + abs(target))) / distance
        delta = -1.0 - log_distance / log_q
        # ln|q_d| = ln|mantissa| + exponent * ln 2: two terms as large as the log of the
        # product's largest entry, each rounded once
        scale = math.log(max(2, largest_entry))
        log_q_error = relative_q + 4 * EPS * (abs(log_q) + 2 * scale)
        delta_error = 2 * (distance_error / abs(log_q) + abs(delta + 1) * log_q_error / abs(log_q))
        bounds[d] = (est_error, delta_error + 1e-14 * abs(delta))
    return [bounds[d] for d in steps]


def assert_walks_agree(
    result: WalkResult,
    expected: WalkResult,
    program: Program,
    shifts: npt.NDArray[np.int64],
    dirs: npt.NDArray[np.int64],
    steps: tuple[int, int],
    target: float,
) -> int:
    """P_final and alive exactly; est and delta within their error bounds where WALK.md compares
    them (alive) and the float walk can be held to a bound. Returns how many were compared."""
    np.testing.assert_array_equal(result.P_final, expected.P_final)
    np.testing.assert_array_equal(result.alive, expected.alive)
    compared = 0
    for walk in np.flatnonzero(expected.alive).tolist():
        bounds = float_error_bounds(
            program, shifts[walk].tolist(), dirs[walk].tolist(), target, steps
        )
        pairs = (
            (result.est1, expected.est1, result.delta1, expected.delta1),
            (result.est2, expected.est2, result.delta2, expected.delta2),
        )
        for bound, (est, est_ref, delta, delta_ref) in zip(bounds, pairs, strict=True):
            if bound is None:
                continue
            where = f"walk {walk}: est {est[walk]!r} vs {est_ref[walk]!r}, delta {delta[walk]!r} vs {delta_ref[walk]!r}, bounds {bound}"
            assert abs(est[walk] - est_ref[walk]) <= bound[0], where
            assert abs(delta[walk] - delta_ref[walk]) <= bound[1], where
            compared += 1
    return compared


def fresh_rng() -> tuple[np.random.Generator, int]:
    """A generator on fresh entropy, and the seed that replays it (printed on failure)."""
    seed = int(np.random.SeedSequence().entropy)  # type: ignore[arg-type]
    return np.random.default_rng(seed), seed


def random_case(
    rng: np.random.Generator, m: int, dim: int, walks: int, max_depth: int
) -> tuple[Program, dict[str, object]]:
    """A random program and walk arguments (primes: the edges and random ones)."""
    program = random_program(
        rng, m, dim, int(rng.choice([rng.integers(2, 14), rng.integers(16, 30)]))
    )
    depth = int(rng.integers(1, max_depth + 1))
    depth2 = int(rng.integers(1, depth + 1))
    depth1 = int(rng.integers(1, depth2 + 1))
    shifts, dirs = random_walks(rng, walks, dim, depth)
    count = int(rng.integers(1, 7))
    primes = rng.choice(np.array([*EDGE_PRIMES, 1000000007, 998244353, 65537, 5, 7]), count, False)
    arguments: dict[str, object] = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": primes.astype(np.uint32),
        "depth": depth,
        "depth1": depth1,
        "depth2": depth2,
        "target": float(rng.uniform(-2, 2)),
    }
    return program, arguments


def check_random_programs(walker: Walker, m: int, dim: int, programs: int, walks: int) -> None:
    """``walker`` against the reference on fresh random programs; fails if nothing compared."""
    rng, seed = fresh_rng()
    compared = 0
    for index in range(programs):
        program, arguments = random_case(rng, m, dim, walks, max_depth=30)
        expected = reference(program, **arguments)  # type: ignore[arg-type]
        result = walker(program, **arguments)
        try:
            compared += assert_walks_agree(
                result,
                expected,
                program,
                arguments["shifts"],
                arguments["dirs"],  # type: ignore[arg-type]
                (arguments["depth1"], arguments["depth2"]),
                arguments["target"],  # type: ignore[arg-type]
            )
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, program {index}: {error}") from None
    assert compared > 0, f"seed {seed}: no estimate was comparable"


# ---- the numpy walker against the reference ------------------------------------------------


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("m", [2, 3, 4])
def test_numpy_walker_matches_reference_on_random_programs(m: int, dim: int) -> None:
    check_random_programs(run_numpy, m, dim, programs=12, walks=6)


def test_float_error_bounds_carry_entries_flushed_to_zero() -> None:
    """A case CI drew (the seed's second program, m = 4): walk 0 starts at the int64 edge, so
    entries of M reach 10^284; at step 2 an entry of the product's second row falls 10^-454
    below the largest and the rescaled float product holds it as zero, and by step 6 what grew
    from it is most of q_6, so the float est_6 has the wrong sign. The bounds must give that
    estimate up (they once claimed 1e-12 relative accuracy for it)."""
    rng = np.random.default_rng(303197928887008455710605903588410163545)
    for _ in range(2):
        program, arguments = random_case(rng, 4, 2, 6, max_depth=30)
    shifts, dirs = arguments["shifts"], arguments["dirs"]
    steps = (arguments["depth1"], arguments["depth2"])
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    result = run_numpy(program, **arguments)  # type: ignore[arg-type]
    assert steps == (5, 6) and expected.alive[0]
    assert np.sign(result.est2[0]) != np.sign(expected.est2[0])  # the flush, as seen in CI
    target = arguments["target"]
    bounds = float_error_bounds(program, shifts[0].tolist(), dirs[0].tolist(), target, steps)  # type: ignore[index, arg-type]
    assert bounds[1] is None
    assert_walks_agree(result, expected, program, shifts, dirs, steps, target)  # type: ignore[arg-type]


# The three classic continued fractions, each as a walk whose estimate tends to the constant:
# with M(n) = [[a(n), b(n)], [1, 0]], p_d / q_d = a(0) + b(0) / (a(1) + b(1) / (a(2) + ...)).
CONTINUED_FRACTIONS = {
    "e": ([["n + 3", "-(n + 1)"], ["1", "0"]], math.e),  # e = 3 - 1/(4 - 2/(5 - 3/(6 - ...)))
    "1+sqrt(2)": ([["2", "1"], ["1", "0"]], 1 + math.sqrt(2)),  # 2 + 1/(2 + 1/(2 + ...))
    "4/pi": ([["2*n + 1", "(n + 1)**2"], ["1", "0"]], 4 / math.pi),  # 1 + 1/(3 + 4/(5 + 9/...))
}


def walk_arguments(
    shifts: object, dirs: object, depth: int, depth1: int, depth2: int, target: float
) -> dict[str, object]:
    """A walker's arguments by name, modulo EDGE_PRIMES."""
    return {
        "shifts": shifts,
        "dirs": dirs,
        "primes": EDGE_PRIMES,
        "depth": depth,
        "depth1": depth1,
        "depth2": depth2,
        "target": target,
    }


@pytest.mark.parametrize("name", sorted(CONTINUED_FRACTIONS))
def test_continued_fractions_converge_to_their_constants(name: str) -> None:
    matrix, constant = CONTINUED_FRACTIONS[name]
    program = compile_program(matrix, ["n"])
    # the same walk three times over: from n = 0, and shifted starts along a second axis that
    # the matrix ignores (negative shifts and directions there)
    program2 = compile_program(matrix, ["n", "unused"])
    shifts = np.array([[0, 5], [0, -7], [0, 2**40]])
    dirs = np.array([[1, -3], [1, 11], [1, -(2**20)]])
    arguments = walk_arguments(shifts, dirs, 60, 6, 50, constant)
    result = run_numpy(program2, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **{**arguments, "shifts": shifts[:, :1], "dirs": dirs[:, :1]})  # type: ignore[arg-type]
    assert_walks_agree(result, expected, program2, shifts, dirs, (6, 50), constant)
    assert np.all(np.abs(result.est2 - constant) <= 1e-12 * constant)
    assert np.all(np.abs(result.est1 - constant) > np.abs(result.est2 - constant))
    assert result.alive.all()


def test_edge_primes_and_big_constants() -> None:
    rng, seed = fresh_rng()
    big = [INT64_MAX, INT64_MIN, INT64_MAX - 1, -(2**62) - 12345]
    matrix = [[f"{big[0]}*x + {big[1]}", f"x*y - {big[2]}"], [f"({big[3]}) - y", "x*x*y + 1"]]
    program = compile_program(matrix, ["x", "y"])
    shifts, dirs = random_walks(rng, 40, 2, 25)
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": EDGE_PRIMES,
        "depth": 25,
        "depth1": 10,
        "depth2": 25,
        "target": 0.5,
    }
    result = run_numpy(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)


def test_alive_needs_q_nonzero_modulo_some_prime() -> None:
    # q_d = P_d[1][1] = 3^d: zero modulo 3 only; q of the second matrix is exactly 0
    powers = compile_program([["1", "0"], ["0", "3"]], ["n"])
    zero = compile_program([["1", "1"], ["0", "0"]], ["n"])
    walks = {"shifts": [[0]], "dirs": [[1]], "depth": 5, "depth1": 2, "depth2": 4, "target": 1.0}
    for walker in (run_numpy, reference):
        assert walker(powers, primes=[3], **walks).alive.tolist() == [False]
        assert walker(powers, primes=[3, 5], **walks).alive.tolist() == [True]
        assert walker(zero, primes=EDGE_PRIMES, **walks).alive.tolist() == [False]


def test_numpy_walker_splits_batches_into_blocks() -> None:
    rng, seed = fresh_rng()
    program = compile_program([["x*x - 3*y", "y + 7"], ["x - y", "-2"]], ["x", "y"])
    primes = largest_primes(32)  # 512 walks a block, so 1100 walks make three blocks
    shifts, dirs = random_walks(rng, 1100, 2, 8)
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": primes,
        "depth": 8,
        "depth1": 3,
        "depth2": 8,
        "target": 0.25,
    }
    result = run_numpy(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)


# ---- the two ways a residue walk advances --------------------------------------------------


FORMS = [
    # every entry of degree <= 3: the register form (walk_registers<2, 3>)
    ([["x**2 - 3*x*y + 5", "y**3"], ["x - y", "-(x*y)"]], 40, "registers"),
    # degree 6 > REGISTER_DEGREES[2]: tables in shared memory, cheaper than evaluating
    ([["x**6 - y", "y**3"], ["x*y", "7"]], 40, "tables"),
    # degree 40 > MAX_TABLE_DEGREE: the program every step
    ([["x**40", "y"], ["1", "x*y"]], 40, "evaluate"),
    # one step: evaluating once is cheaper than tables of degree 6
    ([["x**6 - y", "y**3"], ["x*y", "7"]], 1, "evaluate"),
    # m = 3 and m = 4 register forms, the largest degrees they take
    ([["x**4", "0", "y"], ["1", "x*y", "0"], ["0", "1", "2*x + 1"]], 30, "registers"),
    (
        [
            ["x*y", "1", "0", "0"],
            ["0", "x", "1", "0"],
            ["0", "0", "y", "1"],
            ["x**2", "0", "0", "3"],
        ],
        30,
        "registers",
    ),
]


@pytest.mark.parametrize(("matrix", "depth", "form"), FORMS)
def test_residue_forms_agree_with_reference(matrix: list[list[str]], depth: int, form: str) -> None:
    """Each form of lower.py run by the numpy walker: the GPU's choice (which may be the
    register form) and the numpy walker's own."""
    rng, seed = fresh_rng()
    program = compile_program(matrix, ["x", "y"])
    lowered = lower(program, 2, depth, registers=True)
    assert lowered.residue.form == form
    shifts, dirs = random_walks(rng, 12, 2, depth)
    arguments = walk_arguments(shifts, dirs, depth, 1, depth, 0.0)
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    inputs = bind(program, **arguments).host_inputs()
    for result in (walk_lowered(lowered, inputs), run_numpy(program, **arguments)):  # type: ignore[arg-type]
        np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
        np.testing.assert_array_equal(result.alive, expected.alive)
    assert lower(program, 2, depth, registers=False).residue.form != "registers"


# ---- the float walk's register form ---------------------------------------------------------


def _float_register_entries(
    lowered: Lowered, shift: list[int], direction: list[int], depth: int
) -> list[list[float]]:
    """M(n), n = 0..depth-1, as walk_float_registers computes it for one walk: the residue
    setup code run on Python floats over the residue slot layout, then each entry's table of
    differences advanced by float additions."""
    residue = lowered.residue
    slots = [0.0] * residue.n_slots
    for j, (x, d) in enumerate(zip(shift, direction, strict=True)):
        slots[2 * j], slots[2 * j + 1] = float(x), float(d)
    for c, value in enumerate(lowered.consts):
        slots[2 * lowered.dim + c] = float(value)
    operate = {ADD: lambda a, b: a + b, SUB: lambda a, b: a - b, MUL: lambda a, b: a * b}
    for op, dst, a, b in residue.setup.tolist():
        slots[dst] = operate[op](slots[a], slots[b])
    degree = residue.degree
    tables = [slots[base : base + degree + 1] for base in residue.out.tolist()]
    entries: list[list[float]] = []
    for _ in range(depth):
        entries.append([table[0] for table in tables])
        for table in tables:
            for k in range(degree):
                table[k] += table[k + 1]
    return entries


@pytest.mark.parametrize(
    ("m", "degree"),
    [(m, d) for m, top in FLOAT_REGISTER_DEGREES.items() for d in range(1, top + 1)],
)
def test_float_register_form_steps_exact_entries(m: int, degree: int) -> None:
    """Where float_registers_exact accepts the walks, the float register kernel's algorithm
    gives every step exactly the integer entries of M: each float equals the exact value."""
    from kernelpack.walk.launch import float_registers_exact

    rng, seed = fresh_rng()
    matrix = [[f"{int(rng.integers(-9, 10))}*y" for _ in range(m)] for _ in range(m)]
    matrix[0][m - 1] = f"x**{degree} - 3*x*y" if degree > 1 else "x - 3*y"
    program = compile_program(matrix, ["x", "y"])
    depth = 25
    lowered = lower(program, 2, depth, registers=True)
    assert (lowered.residue.form, lowered.residue.degree) == ("registers", degree)
    shifts = rng.integers(-(10**3), 10**3, (6, 2))
    dirs = rng.integers(-40, 40, (6, 2))
    inputs = bind(program, shifts, dirs, EDGE_PRIMES, depth, 1, depth, 0.0).host_inputs()
    assert float_registers_exact(inputs, degree)
    for shift, direction in zip(shifts.tolist(), dirs.tolist(), strict=True):
        walked = _float_register_entries(lowered, shift, direction, depth)
        for n, entries in enumerate(walked):
            position = [x + n * d for x, d in zip(shift, direction, strict=True)]
            exact = [v for row in step_matrix(program, position) for v in row]
            assert entries == [float(v) for v in exact], f"seed {seed}, step {n}"
            assert all(float(v) == v for v in exact)


def test_float_registers_exact_bounds_the_tables() -> None:
    """The bound covers every value the program computes from step 0 to depth + D and the
    entries times 2^D (their differences), against 2^52: x**2 (D = 2) passes while |x| < 2^25 up
    to depth + 2, and fails when the tables reach 2^25 though the steps read stay below it; a
    large intermediate value fails even where the entry is small."""
    from kernelpack.walk.launch import float_registers_exact

    def exact(matrix: list[list[str]], shift: int, depth: int) -> bool:
        program = compile_program(matrix, ["x"])
        inputs = bind(program, [[shift]], [[1]], EDGE_PRIMES, depth, 1, depth, 0.0).host_inputs()
        return float_registers_exact(inputs, 2)

    square = [["x**2", "1"], ["1", "0"]]
    assert exact(square, 2**25 - 10, 5)  # positions up to 2^25 - 3
    assert not exact(square, 2**25 - 10, 10)  # steps read up to 2^25 - 1, tables to 2^25 + 2
    assert exact(square, -(2**25) + 1, 5)
    assert not exact(square, -(2**25), 5)
    # x**4 - x**4 + x**2 (compile_program would fold it), with x**4 above 2^52 on the way
    instrs = [
        (Op.LOAD_AXIS, 0, 0, 0),
        (Op.MUL, 1, 0, 0),
        (Op.MUL, 2, 1, 1),
        (Op.SUB, 3, 2, 2),
        (Op.ADD, 4, 3, 1),
        (Op.LOAD_CONST, 5, 0, 0),
        (Op.LOAD_CONST, 6, 1, 0),
    ]
    cancelling = Program(
        np.array(instrs, dtype=np.uint8), np.array([1, 0]), np.array([4, 5, 5, 6]), 2
    )
    for shift, expected in ((2**12, True), (2**14, False)):
        inputs = bind(cancelling, [[shift]], [[1]], EDGE_PRIMES, 5, 1, 5, 0.0).host_inputs()
        assert float_registers_exact(inputs, 2) is expected


# ---- compile_program -----------------------------------------------------------------------

MATRICES = [
    [["0", "-(n + 1)**2"], ["1", "2*n + 1"]],
    [["x*y - 3", "(x - y)**3", "7"], ["-x", "x**2*y**2 + x*y", "1"], ["0", "y", "-(-(x))"]],
    [
        ["x**0", "+x", "2**63 - 1", "-2**63"],
        ["x*x*x", "x**5 - x**4", "(x+1)*(x-1)", "x - x"],
        ["3*x*7", "x*(2*3)", "-4", "x**2**2"],
        ["1", "0", "x", "(x + 2)**2 - x*x"],
    ],
]


@pytest.mark.parametrize("matrix", MATRICES, ids=["m2", "m3", "m4"])
def test_compiled_programs_compute_their_expressions(matrix: list[list[str]]) -> None:
    rng, seed = fresh_rng()
    names = sorted(
        {
            n.id
            for row in matrix
            for e in row
            for n in ast.walk(ast.parse(e))
            if isinstance(n, ast.Name)
        }
    )
    program = compile_program(matrix, names)
    for _ in range(20):
        values = {name: int(rng.integers(-(10**6), 10**6)) for name in names}
        expected = [[eval(e, {}, dict(values)) for e in row] for row in matrix]
        position = [values[name] for name in names]
        assert step_matrix(program, position) == expected, f"seed {seed}, at {values}"


def test_compile_program_shares_subexpressions_and_folds_constants() -> None:
    program = compile_program(
        [["(x + y)*(x + y)", "(y + x)**2 + 2*3"], ["x*y", "y*x + 1"]], ["x", "y"]
    )
    ops = [Op(int(row[0])) for row in program.instrs]
    assert ops.count(Op.ADD) == 3  # x + y once, then + 6 and + 1
    assert ops.count(Op.MUL) == 2  # (x + y)^2 once, x*y once
    assert sorted(program.consts.tolist()) == [1, 6]
    parsed = compile_program(
        [[ast.parse("x + 1", mode="eval"), ast.parse("2*x", mode="eval").body], [1, "x"]], ["x"]
    )
    assert step_matrix(parsed, [5]) == [[6, 10], [1, 5]]


@pytest.mark.parametrize(
    ("matrix", "axes", "message"),
    [
        ([["x / 2", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: 'x / 2' is not allowed"),
        (
            [["0", "x ** y"], ["0", "0"]],
            ["x", "y"],
            r"matrix\[0\]\[1\]: an exponent must be an integer constant",
        ),
        (
            [["0", "0"], ["x ** -1", "0"]],
            ["x"],
            r"matrix\[1\]\[0\]: exponent -1 is outside 0\.\.64",
        ),
        (
            [["0", "0"], ["0", "x ** 65"]],
            ["x"],
            r"matrix\[1\]\[1\]: exponent 65 is outside 0\.\.64",
        ),
        ([["1.5", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: '1.5' is not allowed"),
        ([["z", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: unknown name 'z'"),
        ([["9223372036854775808", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: literal .* int64"),
        ([["x +", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: 'x \+' is not an expression"),
        ([["True", "0"], ["0", "0"]], ["x"], r"matrix\[0\]\[0\]: 'True' is not allowed"),
        ([["0", "0"], ["0", None]], ["x"], r"matrix\[1\]\[1\]: expected a string"),
        ([["0", "0"]], ["x"], r"matrix: expected 2\.\.4 rows, got 1"),
        ([["0", "0"], ["0"]], ["x"], r"matrix\[1\]: expected 2 entries, got 1"),
        ([["0", "0"], ["0", "0"]], [], r"axes: expected 1\.\.8 names, got 0"),
        ([["0", "0"], ["0", "0"]], ["x", "x"], r"axes: names repeat"),
        ([["0", "0"], ["0", "0"]], ["2x"], r"axes: '2x' is not an identifier"),
    ],
)
def test_compile_program_rejects(matrix: list[list[object]], axes: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=f"^{message}"):
        compile_program(matrix, axes)


# ---- argument checks -----------------------------------------------------------------------


def _program(
    instrs: list[tuple[int, int, int, int]], consts: list[int], out: list[int], m: int = 2
) -> Program:
    return Program(
        np.array(instrs, dtype=np.int64).reshape(-1, 4),
        np.array(consts, dtype=np.int64),
        np.array(out),
        m,
    )


GOOD = [(Op.LOAD_AXIS, 0, 0, 0), (Op.LOAD_CONST, 1, 0, 0), (Op.MUL, 2, 0, 1)]


@pytest.mark.parametrize(
    ("instrs", "consts", "out", "m", "message"),
    [
        ([*GOOD, (7, 3, 0, 0)], [2], [0, 1, 2, 2], 2, r"instrs\[3\] \(op 7\): unknown op 7"),
        (
            [*GOOD, (Op.ADD, 3, 2, 9)],
            [2],
            [0, 1, 2, 3],
            2,
            r"instrs\[3\] \(ADD r3 = r2 \+ r9\): register r9 is read before any write",
        ),
        (
            [(Op.NEG, 0, 5, 0)],
            [],
            [0, 0, 0, 0],
            2,
            r"instrs\[0\] \(NEG r0 = -r5\): register r5 is read",
        ),
        (
            [(Op.COPY, 0, 0, 0)],
            [],
            [0, 0, 0, 0],
            2,
            r"instrs\[0\] \(COPY r0 = r0\): register r0 is read",
        ),
        (
            [*GOOD, (Op.LOAD_CONST, 3, 1, 0)],
            [2],
            [0, 1, 2, 3],
            2,
            r"instrs\[3\] \(LOAD_CONST r3 = consts\[1\]\): constant index 1 is out of range \(1 constants\)",
        ),
        (
            [*GOOD, (Op.LOAD_AXIS, 64, 0, 0)],
            [2],
            [0, 1, 2, 2],
            2,
            r"instrs\[3\] \(LOAD_AXIS r64 = x\[0\]\): register r64 does not exist",
        ),
        (
            GOOD,
            [2],
            [0, 1, 2, 5],
            2,
            r"out_reg\[3\] \(entry \(1, 1\)\): register r5 is never written",
        ),
        (GOOD, [2], [0, 1, 2], 2, r"out_reg: expected 4 registers for m = 2"),
        (GOOD, [2], [0] * 25, 5, r"m: expected one of \(2, 3, 4\), got 5"),
        (GOOD, [2] * 257, [0, 1, 2, 2], 2, r"consts: at most 256 constants, got 257"),
        ([(0, 0, 0)], [2], [0, 0, 0, 0], 2, r"instrs: expected shape \(n, 4\)"),
        ([(Op.LOAD_AXIS, 0, 0, 256)], [2], [0, 0, 0, 0], 2, r"instrs: entries must be uint8"),
    ],
)
def test_program_rejects(
    instrs: list[tuple[int, ...]], consts: list[int], out: list[int], m: int, message: str
) -> None:
    with pytest.raises(UsageError, match=f"^{message}"):
        Program(
            np.array(instrs, dtype=np.int64).reshape(len(instrs), -1),
            np.array(consts, dtype=np.int64),
            np.array(out),
            m,
        )


def test_program_rejects_constants_outside_int64() -> None:
    with pytest.raises(UsageError, match=r"^consts: integers must lie in the int64 range"):
        Program(np.array(GOOD), [2**63], [0, 1, 2, 2], 2)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match=r"^consts: integers must lie in the int64 range"):
        Program(np.array(GOOD), np.array([2**64 - 1], dtype=np.uint64), [0, 1, 2, 2], 2)  # type: ignore[arg-type]


def _walkers() -> list[Walker]:
    from kernelpack.walk import run

    return [run, run_numpy, reference]


VALID = {
    "shifts": [[1, -2], [3, 4]],
    "dirs": [[1, 1], [-1, 2]],
    "primes": [3, 2147483647],
    "depth": 10,
    "depth1": 5,
    "depth2": 10,
    "target": 0.5,
}
PROGRAM = compile_program([["x", "y"], ["x*y", "1"]], ["x", "y"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shifts": [[1, 2, 3], [4, 5, 6]]}, r"shifts, dirs: shapes differ"),
        ({"shifts": [1, 2]}, r"shifts: expected a 2-dimensional array"),
        (
            {"shifts": np.zeros((0, 2), dtype=np.int64), "dirs": np.zeros((0, 2), dtype=np.int64)},
            r"shifts: no walks",
        ),
        (
            {"shifts": np.zeros((2, 9), dtype=np.int64), "dirs": np.zeros((2, 9), dtype=np.int64)},
            r"shifts: expected 1\.\.8 axes",
        ),
        ({"shifts": [[1.5, 2], [3, 4]]}, r"shifts: expected integers"),
        ({"dirs": [[2**63, 0], [0, 0]]}, r"dirs: integers must lie in the int64 range"),
        (
            {"shifts": [[1], [2]], "dirs": [[1], [1]]},
            r"instrs\[1\] \(LOAD_AXIS r1 = x\[1\]\): axis 1 >= dim 1",
        ),
        ({"primes": [3, 4]}, r"primes\[1\] = 4: expected an odd prime below 2\^31"),
        ({"primes": [2]}, r"primes\[0\] = 2: expected an odd prime"),
        ({"primes": [1]}, r"primes\[0\] = 1: expected an odd prime"),
        ({"primes": [2147483649]}, r"primes\[0\] = 2147483649: expected an odd prime"),
        ({"primes": [2**31 + 11]}, r"primes\[0\] = 2147483659: expected an odd prime below 2\^31"),
        ({"primes": [-7]}, r"primes\[0\] = -7: expected"),
        ({"primes": [3, 3]}, r"primes\[1\] = 3: repeats an earlier prime"),
        ({"primes": []}, r"primes: expected 1\.\.256 primes, got 0"),
        ({"primes": largest_primes(1) * 257}, r"primes: expected 1\.\.256 primes, got 257"),
        ({"depth": 0, "depth1": 0, "depth2": 0}, r"depth: expected 1\.\."),
        ({"depth": True}, r"depth: expected an integer, got True"),
        ({"depth1": 6, "depth2": 5}, r"depth1, depth2: expected 1 <= depth1 <= depth2 <= depth"),
        ({"depth2": 11}, r"depth1, depth2: expected"),
        ({"depth1": 2.0}, r"depth1: expected an integer"),
        ({"target": math.nan}, r"target: expected a finite number"),
        (
            {"target": "pie"},
            r"target: 'pie': unknown name 'pie' at column 1; known: constants: catalan, e",
        ),
        ({"target": [0.5]}, r"target: expected a number, a decimal string or an expression"),
        (
            {"shifts": [[INT64_MAX - 8, 0], [0, 0]]},
            r"shifts, dirs: walk 0, axis 0: the position 9223372036854775799 \+ n \* 1 leaves the int64 range before n = 9",
        ),
        ({"dirs": [[1, 1], [-1, INT64_MIN]]}, r"shifts, dirs: walk 1, axis 1"),
        ({"shifts": [[1, -2], [INT64_MIN + 8, 4]]}, r"shifts, dirs: walk 1, axis 0"),
    ],
)
def test_walk_arguments_are_checked(change: dict[str, object], message: str) -> None:
    arguments = {**VALID, **change}
    for walker in _walkers():
        with pytest.raises(UsageError, match=f"^{message}"):
            walker(PROGRAM, **arguments)


def test_positions_may_reach_the_int64_edges() -> None:
    program = compile_program([["x", "1"], ["1", "y"]], ["x", "y"])
    arguments = {
        **VALID,
        "shifts": [[INT64_MAX - 9, INT64_MIN + 9], [INT64_MIN, INT64_MAX]],
        "dirs": [[1, -1], [0, 0]],
    }
    np.testing.assert_array_equal(
        run_numpy(program, **arguments).P_final,
        reference(program, **arguments).P_final,  # type: ignore[arg-type]
    )


def test_program_argument_is_checked() -> None:
    for walker in _walkers():
        with pytest.raises(UsageError, match=r"^program: expected a Program"):
            walker("x", **VALID)


def test_walkers_share_one_signature() -> None:
    """run, run_numpy and reference take the arguments of WALK.md by the same names, in the same
    order (written out here by hand), and a wrong name is a TypeError naming the walker."""
    import inspect

    expected = [
        "program",
        "shifts",
        "dirs",
        "primes",
        "depth",
        "depth1",
        "depth2",
        "target",
        "device",
        "outputs",
        "min_delta",
        "top_k",
        "exact",
    ]
    for walker in _walkers():
        assert list(inspect.signature(walker).parameters) == expected, walker.__name__
        assert walker.__doc__, walker.__name__
        with pytest.raises(TypeError, match=f"^{walker.__name__}\\(\\): .*'depht'"):
            walker(PROGRAM, **VALID, depht=3)


def test_cpu_walkers_take_no_device() -> None:
    for walker in (run_numpy, reference):
        with pytest.raises(UsageError, match=r"^device: .* walks on the CPU"):
            walker(PROGRAM, **VALID, device="cuda:0")


def test_torch_devices_name_their_vendor() -> None:
    """A torch device becomes a vendor-qualified device string before any walker uses it (so it
    cannot pick the other vendor's GPU); a CPU device is refused by name."""
    torch = pytest.importorskip("torch")
    from kernelpack.walk import run

    with pytest.raises(UsageError, match=r"^device: .* got 'cuda:1'"):
        run_numpy(PROGRAM, **VALID, device=torch.device("cuda", 1))
    with pytest.raises(UsageError, match=r"^device: torch device cpu is not a GPU"):
        run(PROGRAM, **VALID, device=torch.device("cpu"))


def test_reference_selects_like_the_numpy_walker() -> None:
    """The exact walker keeps the walks its own deltas rank first, and only the outputs named."""
    rng, seed = fresh_rng()
    program = compile_program([["0", "-x**2"], ["1", "2*x + y"]], ["x", "y"])
    arguments = {
        **VALID,
        "shifts": rng.integers(1, 9, (40, 2)),
        "dirs": rng.integers(1, 3, (40, 2)),
    }
    full = reference(program, **arguments)  # type: ignore[arg-type]
    chosen = reference(program, **arguments, outputs=("alive",), top_k=5)  # type: ignore[arg-type]
    assert chosen.P_final is None and chosen.delta2 is None
    np.testing.assert_array_equal(chosen.alive, full.alive)
    candidates = [w for w in range(40) if full.alive[w] and not math.isnan(full.delta2[w])]
    best = sorted(candidates, key=lambda w: (-full.delta2[w], w))[:5]
    assert chosen.top is not None and chosen.top.walk.tolist() == best, f"seed {seed}"
    assert chosen.hits is None


def test_gpu_arrays_are_told_from_host_arrays() -> None:
    """run reads shifts and dirs in place when kernelpack.devices.arrays calls them GPU arrays: objects
    with __cuda_array_interface__, or DLPack producers on CUDA, ROCm or managed memory; numpy
    arrays, CPU torch tensors and page-locked host memory (DLPack 3 and 11) are host arrays."""
    from kernelpack.devices.arrays import is_gpu_array

    class Interface:
        @property
        def __cuda_array_interface__(self) -> dict[str, object]:
            return {"shape": (1,), "typestr": "<i8", "data": (0, False)}

    class Producer:
        def __init__(self, device_type: int) -> None:
            self.device_type = device_type

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.device_type, 0

    assert is_gpu_array(Interface())
    assert [t for t in range(1, 16) if is_gpu_array(Producer(t))] == [2, 10, 13]
    assert not is_gpu_array(np.zeros((2, 2), dtype=np.int64))
    assert not is_gpu_array([[1, 2]])
    torch = pytest.importorskip("torch")
    assert not is_gpu_array(torch.zeros(2, 2, dtype=torch.int64))


def test_is_prime_matches_trial_division() -> None:
    assert [n for n in range(-3, 5000) if is_prime(n)] == [
        n for n in range(-3, 5000) if _trial_division_prime(n)
    ]
    near = range(2**31 - 400, 2**31 + 400)
    assert [n for n in near if is_prime(n)] == [n for n in near if _trial_division_prime(n)]
    # strong pseudoprimes to the first one, two and three witnesses
    assert not any(is_prime(n) for n in (2047, 1373653, 25326001))


# ---- the GPU path's host side (no GPU needed) ----------------------------------------------


def test_montgomery_constants() -> None:
    from kernelpack.walk.launch import constants_in_montgomery_form, montgomery_moduli

    primes = np.array(EDGE_PRIMES, dtype=np.uint32)
    table = montgomery_moduli(primes)
    for (p, pinv, r2, r3), prime in zip(table.tolist(), EDGE_PRIMES, strict=True):
        assert p == prime and p * pinv % 2**32 == 2**32 - 1
        assert r2 == 2**64 % p and r3 == 2**96 % p
    consts = (0, 1, -1, INT64_MAX, INT64_MIN)
    for row, prime in zip(
        constants_in_montgomery_form(consts, primes).tolist(), EDGE_PRIMES, strict=True
    ):
        assert [v * pow(2**32, -1, prime) % prime for v in row] == [c % prime for c in consts]


def test_batches_split_to_fit_device_memory() -> None:
    from kernelpack.walk.gpu import MEMORY_FRACTION, piece_walks
    from kernelpack.walk.walker import bind

    inputs = bind(PROGRAM, **VALID).host_inputs()
    # shifts and dirs, P_final (2 primes, m = 2), alive, 4 estimates, a hit record with 2 axes
    per_walk = 16 * 2 + 4 * 2 * 4 + 4 + 32 + (4 + 8 + 8 + 32)
    assert piece_walks(inputs, 10**6) == int(10**6 * MEMORY_FRACTION) // per_walk
    lean = per_walk - 4 * 2 * 4
    assert piece_walks(inputs, 10**6, p_final=False) == int(10**6 * MEMORY_FRACTION) // lean
    assert piece_walks(inputs, 0) == 1
