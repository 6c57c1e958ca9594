"""A sweep's spec file (SPEC.toml): the field, the walks (a product of ranges) and what to keep.

Keys (all required but ``depth1``, ``min_delta``, ``top_k`` and ``shard_walks``)::

    matrix = [["2*x + y + 1", "-(x + 1)**2"], ["1", "0"]]   # rows of expressions
    axes = ["x", "y"]
    target = "1/zeta(3)"  # a float, a decimal string or an expression of known constants
    depth = 1000          # steps; estimates at depth1 and depth2 = depth
    depth1 = 500
    primes = 8            # the 8 largest primes below 2^31, or an explicit list
    shifts = [[1, 50], [1, 50]]   # per axis an inclusive [low, high] range
    dirs = [[1, 3], [1, 3]]
    min_delta = 0.0       # walks with delta >= it are kept (hits)
    top_k = 100           # the best k are kept in any case
    shard_walks = 100000  # walks per unit of work

The walks are the product of the shift ranges and the dir ranges, numbered in C order over
(shift_0, ..., shift_{dim-1}, dir_0, ..., dir_{dim-1}); shard s is walks
[s * shard_walks, (s + 1) * shard_walks). The spec's hash (sha256 of its canonical JSON, primes
resolved) ties a results folder to it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import UsageError
from ..files.regular import read_toml
from ..walk import Program, compile_program
from ..walk.inputs import MAX_PRIMES, PRIME_LIMIT, check_scalars, is_prime
from ..walk.targets import parse_target

KEYS = (
    "matrix",
    "axes",
    "target",
    "depth",
    "depth1",
    "primes",
    "shifts",
    "dirs",
    "min_delta",
    "top_k",
    "shard_walks",
)
REQUIRED = ("matrix", "axes", "target", "depth", "primes", "shifts", "dirs")
DEFAULT_SHARD_WALKS = 100_000
DEFAULT_TOP_K = 100
INT64_MAX = 2**63 - 1
SPEC_FILE_LIMIT = 1 << 20  # bytes: a spec is a few lines (256 primes and a matrix fit in 10 KB)


def largest_primes(count: int) -> list[int]:
    """The ``count`` largest primes below 2^31, largest first."""
    found: list[int] = []
    candidate = PRIME_LIMIT - 1
    while len(found) < count:
        if is_prime(candidate):
            found.append(candidate)
        candidate -= 2
    return found


@dataclass(frozen=True)
class Spec:
    matrix: list[list[str]]
    axes: list[str]
    target: float | str  # a number, or a decimal string or expression (kernelpack.walk.targets)
    depth: int
    depth1: int
    primes: list[int]
    shifts: list[list[int]]
    dirs: list[list[int]]
    min_delta: float | None
    top_k: int
    shard_walks: int

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, source: str = "spec JSON") -> Spec:
        """A spec from its canonical JSON (a results database's ``meta.spec``, a task's
        argument), checked as a spec file is: a UsageError names ``source`` and the key."""
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as error:
            raise UsageError(f"{source}: not JSON ({error})") from None
        if not isinstance(raw, dict):
            raise UsageError(f"{source}: expected a JSON object of spec keys, found {raw!r:.80}")
        return check_spec(raw, source)

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @property
    def dim(self) -> int:
        return len(self.axes)

    @property
    def sizes(self) -> list[int]:
        return [high - low + 1 for low, high in (*self.shifts, *self.dirs)]

    @property
    def walks(self) -> int:
        return math.prod(self.sizes)

    @property
    def shards(self) -> int:
        return -(-self.walks // self.shard_walks)

    def shard_range(self, shard: int) -> tuple[int, int]:
        start = shard * self.shard_walks
        return start, min(self.walks, start + self.shard_walks)

    def walk_arrays(
        self, start: int, stop: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Shifts and dirs (n, dim) of walks start .. stop - 1: digit j of the walk's number in
        the mixed radix of the range sizes (C order), plus the range's low end. Integer
        division and remainder per column (np.unravel_index takes several times longer)."""
        number = np.arange(start, stop, dtype=np.int64)
        columns = [np.empty((stop - start, self.dim), dtype=np.int64) for _ in range(2)]
        ranges = [*self.shifts, *self.dirs]
        stride = self.walks
        for column, ((low, _), size) in enumerate(zip(ranges, self.sizes, strict=True)):
            stride //= size
            digit = number // stride if stride > 1 else number.copy()
            np.remainder(digit, size, out=digit)
            columns[column // self.dim][:, column % self.dim] = digit + low
        return columns[0], columns[1]

    def program(self) -> Program:
        return compile_program(self.matrix, self.axes)


def _fail(source: str, key: str, value: object, what: str) -> UsageError:
    return UsageError(f"{source}: {key} = {value!r:.200}: {what}")


def _ranges(source: str, key: str, value: object, dim: int) -> list[list[int]]:
    ok = (
        isinstance(value, list)
        and len(value) == dim
        and all(
            isinstance(r, list)
            and len(r) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in r)
            and -INT64_MAX <= r[0] <= r[1] <= INT64_MAX
            for r in value
        )
    )
    if not ok:
        raise _fail(
            source,
            key,
            value,
            f"expected {dim} inclusive [low, high] integer ranges, one per axis, within int64",
        )
    assert isinstance(value, list)
    return [[int(low), int(high)] for low, high in value]


def _integer(source: str, key: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT64_MAX:
        raise _fail(source, key, value, f"expected an integer >= {low} (and within int64)")
    return value


def load_spec(path: Path) -> Spec:
    """SPEC.toml read and checked; every problem is a UsageError naming the file and key."""
    try:
        raw = read_toml(path, limit=SPEC_FILE_LIMIT, what="a sweep spec (TOML)")
    except OSError as error:  # missing
        raise UsageError(f"{path}: cannot read it ({error.strerror})") from None
    return check_spec(raw, str(path))


def check_spec(raw: dict[str, Any], source: str) -> Spec:
    """The keys of a spec (a spec file's or a stored spec's) checked; every problem is a
    UsageError naming ``source`` and the key."""
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise UsageError(f"{source}: unknown key {unknown[0]!r}; known: {', '.join(KEYS)}")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise UsageError(f"{source}: missing key {missing[0]!r} (required: {', '.join(REQUIRED)})")
    axes = raw["axes"]
    if not isinstance(axes, list) or not axes or not all(isinstance(a, str) for a in axes):
        raise _fail(source, "axes", axes, "expected a list of axis names")
    matrix = raw["matrix"]
    if not isinstance(matrix, list) or not all(isinstance(row, list) for row in matrix):
        raise _fail(source, "matrix", matrix, "expected rows of expressions")
    matrix = [[str(e) for e in row] for row in matrix]
    try:
        program = compile_program(matrix, axes)
    except ValueError as error:
        raise _fail(source, "matrix", raw["matrix"], str(error)) from None
    except RecursionError:  # Python's parser, on an expression nested or chained too deeply
        raise _fail(source, "matrix", raw["matrix"], "an expression too deep to parse") from None
    depth = _integer(source, "depth", raw["depth"], 1)
    depth1 = _integer(source, "depth1", raw.get("depth1", max(1, depth // 2)), 1)
    primes = raw["primes"]
    if isinstance(primes, int) and not isinstance(primes, bool):
        count = _integer(source, "primes", primes, 1)
        if count > MAX_PRIMES:
            raise _fail(source, "primes", primes, f"expected a count of 1..{MAX_PRIMES}")
        prime_list = largest_primes(count)
    elif isinstance(primes, list):
        prime_list = list(primes)
    else:
        raise _fail(source, "primes", primes, "expected a count or a list of primes")
    target = raw["target"]
    if isinstance(target, bool) or not isinstance(target, (int, float, str)):
        raise _fail(
            source, "target", target, "expected a number, a decimal string or an expression"
        )
    try:
        parse_target(target)
    except ValueError as error:  # "target: 'TEXT': what" or "target: what"
        what = str(error).removeprefix("target: ")
        if isinstance(target, str):
            what = what.removeprefix(f"{target.strip()!r}: ")
        raise _fail(source, "target", target, what) from None
    try:
        scalars = check_scalars(program, prime_list, depth, depth1, depth, target)
    except ValueError as error:
        key = str(error).split(":")[0].split("[")[0].split(",")[0]
        raise _fail(source, key, raw.get(key), str(error)) from None
    min_delta = raw.get("min_delta")
    if min_delta is not None and (
        isinstance(min_delta, bool) or not isinstance(min_delta, (int, float))
    ):
        raise _fail(source, "min_delta", min_delta, "expected a number")
    spec = Spec(
        matrix=matrix,
        axes=list(axes),
        target=target.strip() if isinstance(target, str) else scalars.target,
        depth=depth,
        depth1=depth1,
        primes=[int(p) for p in scalars.primes],
        shifts=_ranges(source, "shifts", raw["shifts"], len(axes)),
        dirs=_ranges(source, "dirs", raw["dirs"], len(axes)),
        min_delta=None if min_delta is None else float(min_delta),
        top_k=_integer(source, "top_k", raw.get("top_k", DEFAULT_TOP_K), 0),
        shard_walks=_integer(source, "shard_walks", raw.get("shard_walks", DEFAULT_SHARD_WALKS), 1),
    )
    if spec.walks > INT64_MAX:  # walks are numbered in int64
        raise _fail(
            source, "shifts", raw["shifts"], f"with dirs, {spec.walks} walks: over 2^63 - 1"
        )
    return spec
