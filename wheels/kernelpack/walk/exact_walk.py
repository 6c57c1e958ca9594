"""The exact delta of a walk: the field's definition, from exact integers (docs/walk.md).

delta = -1 - log|p/q - L| / log q, with p/q = P_depth[0][m-1] / P_depth[1][m-1] reduced to lowest
terms (q > 0), as ramanujantools' ``Limit.delta`` defines it; ``delta_raw`` uses the raw |q| of the
walk instead (what the float screen's delta2 estimates). ``digits`` = floor(-log10|p/q - L|),
the decimal places to which p/q and the target agree. L is a :class:`~.targets.Target`,
evaluated to as many bits as the error needs.

Where p and q come from:

- the residues of a walk modulo its primes, through the Chinese remainder theorem, when the
  primes carry enough bits: their product must exceed 2 max(|p|, |q|) by :data:`GUARD_BITS`,
  judged from the float pass's size of the product (:func:`fraction_from_residues`);
- else an exact integer walk of that one walk on the CPU (:func:`integer_walk`).

Both use python-flint, chosen over gmpy2 because one library gives both halves of the job: FLINT's
integers (``fmpz_mat`` products in C, a product tree that multiplies balanced halves with GMP's
subquadratic multiplication, a subquadratic gcd for the reduction) and Arb's real balls, whose
radius bounds every rounding error of the target's constants, the quotient p/q and the logarithms.
The precision is raised until the ball of p/q - L excludes zero with 64 correct bits, so the digits
of L that the error needs are certified rather than guessed; gmpy2's MPFR rounds each operation
correctly but tracks no error through an expression, and would leave zeta(3) or Catalan's constant
to mpmath, which tracks none either. python-flint ships abi3 wheels for Linux, macOS and Windows,
and ramanujantools (the field's reference library) depends on it too.

Nothing here returns a float64 value as exact: where neither source can give p and q, or the
target cannot resolve the error, the call raises :class:`~kernelpack.errors.UsageError` saying so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError
from .program import Program, compile_program
from .targets import Target, import_flint, parse_target

GUARD_BITS = 64  # the primes' product must exceed 2 max(|p|, |q|) by this many bits
ACCURACY_BITS = 64  # correct bits of p/q - L before its logarithm is taken
START_BITS = 256
MAX_BITS = 1 << 26  # 20 million decimal digits: past this a target and p/q "agree" (say so)
MAX_WALK_BITS = 1 << 31  # bits of the largest entry an integer walk may reach (256 MiB)
RESOLUTION_MARGIN = 1000  # |p/q - L| must exceed the target's resolution this many times
LOG2_10 = math.log2(10)


@dataclass(frozen=True)
class Exact:
    """The exact measures of one walk: ``p``/``q`` reduced (q > 0), ``q_raw`` the walk's own
    denominator, ``delta`` over the reduced q, ``delta_raw`` over |q_raw|, ``digits`` the decimal
    places of p/q that agree with the target, ``source`` "crt" or "integer walk"."""

    p: int
    q: int
    q_raw: int
    delta: float
    delta_raw: float
    digits: int
    source: str


def _axis_values(
    program: Program, shift: Sequence[int], direction: Sequence[int], depth: int
) -> list[Any]:
    """The step matrices M(0) .. M(depth-1) entry by entry: (m*m) object arrays of length depth,
    the register machine (Program.evaluate) run once over every step's position (Python
    integers, unbounded)."""
    steps = np.arange(depth, dtype=object)
    axes = [int(s) + steps * int(d) for s, d in zip(shift, direction, strict=True)]
    return [np.broadcast_to(np.asarray(v, dtype=object), (depth,)) for v in program.evaluate(axes)]


def integer_walk(
    program: Program, shift: Sequence[int], direction: Sequence[int], depth: int
) -> list[list[int]]:
    """P_depth = M(0) M(1) ... M(depth-1) in exact integers, M(n) at shift + n * direction.

    The product runs as a balanced tree of fmpz_mat products, so that its last levels multiply
    numbers of equal size (GMP's fast multiplication); a walk whose entries would pass
    :data:`MAX_WALK_BITS` is refused before it starts, from a bound on the entries' growth.
    """
    flint = import_flint("an exact integer walk")
    m = program.m
    entries = _axis_values(program, shift, direction, depth)
    bound = 0.0
    largest = np.zeros(depth, dtype=object)
    for values in entries:
        largest = np.maximum(largest, np.abs(values))
    for value in largest.tolist():
        bound += max(1, int(value) * m).bit_length()
    if bound > MAX_WALK_BITS:
        raise UsageError(
            f"exact walk: its entries may reach 2^{bound:.3g} (bound from the step matrices), past "
            f"the 2^{MAX_WALK_BITS} this walker takes; no exact value can be had at depth {depth}"
        )
    columns = [values.tolist() for values in entries]
    level = [flint.fmpz_mat(m, m, [columns[k][n] for k in range(m * m)]) for n in range(depth)]
    while len(level) > 1:
        paired = [level[i] * level[i + 1] for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    product = level[0]
    return [[int(product[i, j]) for j in range(m)] for i in range(m)]


def fraction_from_residues(
    p_residues: Sequence[int], q_residues: Sequence[int], primes: Sequence[int], log2_size: float
) -> tuple[int, int] | None:
    """(p, q) from their residues modulo ``primes`` through CRT, or None where the primes do not
    carry enough bits: ``log2_size`` bounds log2 max(|p|, |q|) (the float pass's size of the
    product), and the primes' product must exceed 2^(log2_size + 1 + GUARD_BITS). A value that
    comes back larger than the bound allows means the bound was wrong, and is None too."""
    modulus = math.prod(int(p) for p in primes)
    if not math.isfinite(log2_size) or modulus.bit_length() - 1 < log2_size + 1 + GUARD_BITS:
        return None
    values = []
    for residues in (p_residues, q_residues):
        value = 0
        for r, prime in zip(residues, primes, strict=True):
            rest = modulus // int(prime)
            value += int(r) * rest * pow(rest, -1, int(prime))
        value %= modulus
        if value > modulus // 2:
            value -= modulus
        if value.bit_length() > log2_size + GUARD_BITS // 2:
            return None
        values.append(value)
    return values[0], values[1]


class BeyondTargetError(UsageError):
    """p/q agrees with the target beyond what the target resolves (a float or a short decimal
    string, or p/q equal to a rational target): no exact delta exists, and the walk is at least as
    close as the target can tell. A ranking puts such a walk first, not last."""


def _logs(p: int, q: int, target: Target) -> tuple[Any, Any]:
    """(ln|p/q - L|, log10|p/q - L|) as arb balls with ACCURACY_BITS correct bits of the
    difference, or a UsageError where the target cannot give them."""
    flint = import_flint("an exact delta")
    if target.rational is not None and target.rational == flint.fmpq(p, q):
        raise BeyondTargetError(
            f"exact delta: p/q equals the target {target.text!r} exactly; delta is infinite"
        )
    prec = max(START_BITS, 2 * max(abs(p).bit_length(), q.bit_length()) + 128)
    while True:
        with flint.ctx.workprec(prec):
            error = flint.arb(flint.fmpq(p, q)) - target.ball(prec)
            found = (
                error.is_finite()
                and not error.contains(0)
                and error.rel_accuracy_bits() >= ACCURACY_BITS
            )
        if found:
            # the logarithms need only the difference's correct bits: taken at a few times
            # ACCURACY_BITS, not at the bits that the cancellation needed (milliseconds each)
            with flint.ctx.workprec(4 * ACCURACY_BITS):
                size = +abs(error)
                ln_size = size.log()
                log10_size = ln_size / flint.arb(10).log()
                resolution = target.resolution
                if resolution and size < RESOLUTION_MARGIN * flint.arb(
                    flint.fmpq(resolution.numerator, resolution.denominator)
                ):
                    raise BeyondTargetError(
                        f"target {target.text!r} resolves numbers only to about "
                        f"{float(resolution):.3g}, and this walk's p/q is closer to it than "
                        f"{RESOLUTION_MARGIN} times that: give the target as an expression of "
                        "known constants (such as '6/zeta(3) - 5') or as a decimal string of "
                        f"more than {math.floor(-float(log10_size.mid())) + 4} digits"
                    )
                return ln_size, log10_size
        if prec >= MAX_BITS:
            raise UsageError(
                f"exact delta: p/q and the target {target.text!r} agree to more than "
                f"{int(MAX_BITS / LOG2_10):,} digits or the target cannot be evaluated; no "
                "exact delta can be had"
            )
        prec = min(2 * prec, MAX_BITS)


def measure(p: int, q_raw: int, target: object, source: str = "integer walk") -> Exact:
    """The exact measures of a walk whose P_depth gives ``p`` and ``q_raw`` (module docstring).

    Conventions of ramanujantools' Limit.delta where the quotient is degenerate: q = 0 gives
    delta -inf, and a reduced q of 1 gives +inf (log q = 0); delta_raw likewise with |q_raw|.
    """
    flint = import_flint("an exact delta")
    goal = parse_target(target)
    if q_raw == 0:
        return Exact(p, 0, 0, -math.inf, -math.inf, 0, source)
    divisor = int(flint.fmpz(p).gcd(flint.fmpz(q_raw)))
    sign = -1 if q_raw < 0 else 1
    p_reduced, q_reduced = sign * p // divisor, sign * q_raw // divisor
    ln_error, log10_error = _logs(p_reduced, q_reduced, goal)
    digits = max(0, math.floor(-float(log10_error.mid())))
    deltas = []
    for q in (q_reduced, abs(q_raw)):
        if q == 1:
            deltas.append(math.inf)
            continue
        with flint.ctx.workprec(2 * ACCURACY_BITS):
            deltas.append(float((-1 - ln_error / flint.arb(flint.fmpz(q)).log()).mid()))
    return Exact(p_reduced, q_reduced, q_raw, deltas[0], deltas[1], digits, source)


def _program(matrix: object, axes: Sequence[str]) -> Program:
    if isinstance(matrix, Program):
        return matrix
    return compile_program(matrix, axes)  # type: ignore[arg-type]


def _vector(value: object, name: str, dim: int) -> list[int]:
    items = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
    found = [
        int(v)
        for v in items
        if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))
    ]
    if len(found) != len(items) or len(found) != dim:
        raise UsageError(f"{name}: expected {dim} integers (one per axis), got {value!r}")
    return found


def exact(
    matrix: object,
    axes: Sequence[str],
    shift: object,
    direction: object,
    depth: int,
    target: object,
    *,
    residues: object = None,
    primes: Sequence[int] | None = None,
    log2_size: float | None = None,
) -> Exact:
    """The exact measures of one walk (module docstring). ``matrix`` is as for compile_program
    (or a Program), ``shift`` and ``direction`` one integer per axis, ``target`` anything
    :func:`~.targets.parse_target` reads. With ``residues`` (K, m, m) of P_depth modulo
    ``primes`` (a walker's P_final row) and ``log2_size`` (the float pass's log2 of the largest
    of |p|, |q|), p and q come through CRT when the primes carry enough bits."""
    program = _program(matrix, axes)
    dim = len(axes)
    program.check_axes(dim)
    start = _vector(shift, "shift", dim)
    step = _vector(direction, "direction", dim)
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise UsageError(f"depth: expected an integer >= 1, got {depth!r}")
    goal = parse_target(target)
    m = program.m
    if residues is not None and primes is not None and log2_size is not None:
        table = np.asarray(residues, dtype=np.int64).reshape(len(primes), m, m)
        found = fraction_from_residues(
            table[:, 0, m - 1].tolist(), table[:, 1, m - 1].tolist(), primes, log2_size
        )
        if found is not None:
            return measure(found[0], found[1], goal, "crt")
    product = integer_walk(program, start, step, int(depth))
    return measure(product[0][m - 1], product[1][m - 1], goal)


def exact_delta(
    matrix: object,
    axes: Sequence[str],
    shift: object,
    direction: object,
    depth: int,
    target: object,
    *,
    raw_q: bool = False,
) -> float:
    """The exact delta of one walk: -1 - log|p/q - L| / log q over the reduced fraction (the
    field's definition, ramanujantools' Limit.delta), or over the walk's raw |q| with
    ``raw_q=True``. A UsageError says so where no exact value can be had."""
    found = exact(matrix, axes, shift, direction, depth, target)
    return found.delta_raw if raw_q else found.delta
