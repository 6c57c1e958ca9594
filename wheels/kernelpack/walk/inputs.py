"""The walk arguments every walker takes, checked once (WALK.md's host checks) and the result type.

Each check raises a UsageError (a ValueError, exit 2 in the CLI) whose message starts with the argument it is about, so that a
caller can tell at once which of eight arguments to fix.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import UsageError
from .program import INT64_MAX, INT64_MIN, MAX_AXES, Program, integer_array
from .select import Selection
from .targets import parse_target

MAX_PRIMES = 256
PRIME_LIMIT = 2**31
MAX_DEPTH = 2**31 - 1  # the kernels count steps in int
# Bases that decide primality of every n < 3,215,031,751 (Miller-Rabin, Jaeschke 1993).
_WITNESSES = (2, 3, 5, 7)


# What a walker can return, in WalkResult's order; callers name the ones they want.
OUTPUTS = ("P_final", "alive", "est1", "est2", "delta1", "delta2")


@dataclass(frozen=True, eq=False)
class WalkResult:
    """What a walker returns for B walks and K primes (WALK.md), plus the search's selection.

    Arrays are numpy arrays, or for inputs that live on the GPU arrays of the same framework
    on the same device; an output the caller did not ask for is None. ``hits`` and ``top``
    (kernelpack.walk.select) are None unless a threshold or a k was given.
    """

    P_final: Any  # (B, K, m, m) uint32: P_depth mod each prime
    alive: Any  # (B,) bool: P_depth2[1][m-1] != 0 mod at least one prime
    est1: Any  # (B,) float64: p_d / q_d at d = depth1
    est2: Any
    delta1: Any  # (B,) float64: -1 - ln|est_d - target| / ln|q_d|
    delta2: Any
    hits: Selection | None = None
    top: Selection | None = None


@dataclass(frozen=True)
class Request:
    """What the caller asked a walker for: outputs by name, the hit threshold, the top k, and
    whether the kept walks are verified exactly (kernelpack.walk.verify)."""

    outputs: frozenset[str]
    min_delta: float | None
    top_k: int
    exact: bool = False

    @property
    def selects(self) -> bool:
        return self.min_delta is not None or self.top_k > 0


def check_request(
    outputs: object, min_delta: object, top_k: object, exact: object = False
) -> Request:
    """outputs (names from OUTPUTS), min_delta (a float or None), top_k (>= 0) and exact (a
    bool), checked."""
    if isinstance(outputs, str) or not isinstance(outputs, Iterable):
        raise UsageError(f"outputs: expected a collection of names from {OUTPUTS}, got {outputs!r}")
    names = frozenset(outputs)
    unknown = sorted(str(n) for n in names - set(OUTPUTS))
    if unknown:
        raise UsageError(f"outputs: unknown {', '.join(unknown)}; known: {', '.join(OUTPUTS)}")
    threshold: float | None = None
    if min_delta is not None:
        try:
            threshold = float(min_delta)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise UsageError(
                f"min_delta: expected a real number or None, got {min_delta!r}"
            ) from None
        if math.isnan(threshold):
            raise UsageError("min_delta: expected a number, got NaN")
    k = _count(top_k, "top_k")
    if not 0 <= k < 2**31:
        raise UsageError(f"top_k: expected 0 .. 2^31 - 1, got {k}")
    if not isinstance(exact, (bool, np.bool_)):
        raise UsageError(f"exact: expected True or False, got {exact!r}")
    return Request(names, threshold, k, bool(exact))


def axis_bounds(
    shifts: npt.NDArray[np.int64], dirs: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Rows: min shift, max shift, min dir, max dir, per axis (walk.cu's walk_bounds on the
    host). One column at a time: numpy reduces a (B, 2) array over B several times slower."""
    rows = [
        [getattr(a[:, j], f)() for j in range(a.shape[1])]
        for a in (shifts, dirs)
        for f in ("min", "max")
    ]
    return np.array(rows, dtype=np.int64).reshape(4, shifts.shape[1])


def ranges_from_bounds(
    bounds: npt.NDArray[np.int64], steps: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per axis the lowest and highest position any walk can reach from step 0 to ``steps``
    (wider than the exact range when the extreme shift and the extreme dir are different
    walks' ), in float64."""
    low_shift, high_shift, low_dir, high_dir = bounds.astype(np.float64)
    reach = float(steps)
    return low_shift + np.minimum(0.0, reach * low_dir), high_shift + np.maximum(
        0.0, reach * high_dir
    )


def is_prime(n: int) -> bool:
    """Deterministic for n < 2^31 (and well beyond): trial by the witnesses, then Miller-Rabin."""
    if n < 2:
        return False
    for small in _WITNESSES:
        if n % small == 0:
            return n == small
    odd, twos = n - 1, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    for witness in _WITNESSES:
        x = pow(witness, odd, n)
        if x in (1, n - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _count(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise UsageError(f"{name}: expected an integer, got {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise UsageError(f"{name}: expected an integer, got {value!r}") from None


def check_positions(shifts: npt.NDArray[np.int64], dirs: npt.NDArray[np.int64], depth: int) -> None:
    """Every position shift + n*dir, n < depth, must be an int64: x(n) is linear in n, so the
    two ends decide. The arithmetic below never overflows itself."""
    last = depth - 1
    if last == 0:
        return
    bound = INT64_MAX // last
    bad = (dirs > bound) | (dirs < -bound)
    travel = np.where(bad, 0, dirs) * last
    bad |= shifts > INT64_MAX - np.maximum(travel, 0)
    bad |= shifts < INT64_MIN - np.minimum(travel, 0)
    if bad.any():
        walk, axis = (int(i) for i in np.argwhere(bad)[0])
        raise UsageError(
            f"shifts, dirs: walk {walk}, axis {axis}: the position {int(shifts[walk, axis])} + "
            f"n * {int(dirs[walk, axis])} leaves the int64 range before n = {last}"
        )


def _check_primes(value: object) -> npt.NDArray[np.uint32]:
    primes = integer_array(value, "primes", 1)
    if not 1 <= len(primes) <= MAX_PRIMES:
        raise UsageError(f"primes: expected 1..{MAX_PRIMES} primes, got {len(primes)}")
    seen: set[int] = set()
    for index, p in enumerate(int(v) for v in primes):
        if not 3 <= p < PRIME_LIMIT or p % 2 == 0 or not is_prime(p):
            raise UsageError(f"primes[{index}] = {p}: expected an odd prime below 2^31")
        if p in seen:
            raise UsageError(f"primes[{index}] = {p}: repeats an earlier prime")
        seen.add(p)
    return primes.astype(np.uint32)


@dataclass(frozen=True, eq=False, kw_only=True)
class Scalars:
    """The checked arguments besides the program, shifts and dirs."""

    primes: npt.NDArray[np.uint32]
    depth: int
    depth1: int
    depth2: int
    target: float


@dataclass(frozen=True, eq=False, kw_only=True)
class CheckedWalks(Scalars):
    """A batch of walks whose arguments are checked, wherever its shifts and dirs live: the
    program, the (B, dim) shape and ``bounds`` (4, dim), per axis the smallest and largest shift
    and dir (what bounds the positions and the values the program computes)."""

    program: Program
    shape: tuple[int, int]
    bounds: npt.NDArray[np.int64]

    @property
    def walks(self) -> int:
        return self.shape[0]

    @property
    def dim(self) -> int:
        return self.shape[1]

    def axis_ranges(self, steps: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per axis bounds on the positions from step 0 to ``steps``, in float64."""
        return ranges_from_bounds(self.bounds, steps)


@dataclass(frozen=True, eq=False, kw_only=True)
class WalkInputs(CheckedWalks):
    """Checked walks in host memory: int64 (B, dim) shifts and dirs."""

    shifts: npt.NDArray[np.int64]
    dirs: npt.NDArray[np.int64]


def check_program(program: object) -> Program:
    """program: a Program, else the UsageError that names it."""
    if not isinstance(program, Program):
        raise UsageError(
            f"program: expected a Program (see compile_program), got {type(program).__name__}"
        )
    return program


def check_scalars(
    program: Program, primes: object, depth: object, depth1: object, depth2: object, target: object
) -> Scalars:
    """program, primes, depths and target, checked (WALK.md)."""
    check_program(program)
    prime_array = _check_primes(primes)
    depth_n, depth1_n, depth2_n = (
        _count(depth, "depth"),
        _count(depth1, "depth1"),
        _count(depth2, "depth2"),
    )
    if not 1 <= depth_n <= MAX_DEPTH:
        raise UsageError(f"depth: expected 1..{MAX_DEPTH}, got {depth_n}")
    if not 1 <= depth1_n <= depth2_n <= depth_n:
        raise UsageError(
            f"depth1, depth2: expected 1 <= depth1 <= depth2 <= depth ({depth_n}), "
            f"got {depth1_n} and {depth2_n}"
        )
    target_value = parse_target(target).screen  # the screen's float64 of any target
    return Scalars(
        primes=prime_array, depth=depth_n, depth1=depth1_n, depth2=depth2_n, target=target_value
    )


def check_shape(program: Program, shape: tuple[int, ...], dir_shape: tuple[int, ...]) -> None:
    """shifts and dirs: the same (B, dim) shape, B >= 1, dim axes the program can read."""
    if len(shape) != 2 or len(dir_shape) != 2:
        raise UsageError(f"shifts, dirs: expected shape (B, dim), got {shape} and {dir_shape}")
    if shape != dir_shape:
        raise UsageError(f"shifts, dirs: shapes differ ({shape} and {dir_shape})")
    walks, dim = shape
    if walks < 1:
        raise UsageError("shifts: no walks (expected shape (B, dim) with B >= 1)")
    if not 1 <= dim <= MAX_AXES:
        raise UsageError(f"shifts: expected 1..{MAX_AXES} axes (columns), got {dim}")
    program.check_axes(dim)


def positions_fit(bounds: npt.NDArray[np.int64], depth: int) -> bool:
    """Whether every position of every walk stays in int64, judged from per-axis bounds alone
    (rows: min shift, max shift, min dir, max dir): sufficient, not necessary."""
    last = depth - 1
    for low_shift, high_shift, low_dir, high_dir in bounds.T.tolist():
        if high_shift + max(0, high_dir) * last > INT64_MAX:
            return False
        if low_shift + min(0, low_dir) * last < INT64_MIN:
            return False
    return True


def check_inputs(program: Program, shifts: object, dirs: object, scalars: Scalars) -> WalkInputs:
    """Host shifts and dirs checked and converted for ``program`` and checked ``scalars``
    (WALK.md): int64 arrays of one (B, dim) shape whose positions stay in int64."""
    shift_array = integer_array(shifts, "shifts", 2)
    dir_array = integer_array(dirs, "dirs", 2)
    check_shape(program, shift_array.shape, dir_array.shape)
    bounds = axis_bounds(shift_array, dir_array)
    if not positions_fit(bounds, scalars.depth):  # else no walk can leave int64
        check_positions(shift_array, dir_array, scalars.depth)
    return WalkInputs(
        **scalar_fields(scalars),
        program=program,
        shape=(shift_array.shape[0], shift_array.shape[1]),
        bounds=bounds,
        shifts=shift_array,
        dirs=dir_array,
    )


def scalar_fields(scalars: Scalars) -> dict[str, Any]:
    """The fields of Scalars, as keywords for the CheckedWalks built on them."""
    return {field.name: getattr(scalars, field.name) for field in fields(Scalars)}
