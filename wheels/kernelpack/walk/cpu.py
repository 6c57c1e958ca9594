"""The numpy walker: every walk and prime at once, the CPU path and the benchmark's baseline.

It runs the lowered code (lower.py) as the GPU kernels do, one numpy operation per code row over
a block of (walk, prime) pairs, so that a row costs one pass over a block that stays in cache.
Residues are uint64 in [0, p): a product of two is below 2^62 and a row-times-column sum of up to
four products below 2^64, reduced by one ``%``. Sums and differences reduce with the unsigned
minimum that walk.cu uses: min(x, x - p) wraps below zero when x < p. The float walk mirrors the
float kernel step for step: the product rescaled by a power of two after each step, the exponent
kept apart.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from .inputs import WalkInputs, WalkResult
from .lower import ADD, MUL, Lowered, lower
from .screen import screen_delta
from .walker import host_walker

# (walk, prime) pairs per block: 16384 uint64 = 128 KiB per slot, so that a block's slots stay in
# a core's L2 cache for programs of a dozen slots.
BLOCK_PAIRS = 16384
FLOAT_BLOCK = 16384  # walks per block of the float walk
LN2 = math.log(2.0)  # the double nearest ln 2, as walk.cu writes it
SMALLEST_NORMAL = 2.0**-1022
RESCALE_LIMIT = 2.0**1023  # the float kernel leaves a largest entry at or above this unscaled


class _Residues:
    """Slot arithmetic modulo each prime over a (walks, K) block."""

    def __init__(self, slots: npt.NDArray[np.uint64], primes: npt.NDArray[np.uint64]) -> None:
        self.slots = slots
        self.p = primes[None, :]
        self.scratch = np.empty(slots.shape[1:], dtype=np.uint64)

    def reduce_small(self, x: npt.NDArray[np.uint64]) -> None:
        """x in [0, 2p) -> x mod p, in place."""
        np.subtract(x, self.p, out=self.scratch)
        np.minimum(x, self.scratch, out=x)

    def run(self, rows: npt.NDArray[np.int64]) -> None:
        slots = self.slots
        for op, dst, a, b in rows.tolist():
            if op == MUL:
                np.multiply(slots[a], slots[b], out=slots[dst])
                np.remainder(slots[dst], self.p, out=slots[dst])
                continue
            if op == ADD:
                np.add(slots[a], slots[b], out=slots[dst])
            else:
                np.subtract(self.p, slots[b], out=self.scratch)
                np.add(slots[a], self.scratch, out=slots[dst])
            self.reduce_small(slots[dst])

    def advance(self, tables: npt.NDArray[np.int64]) -> None:
        for base, degree in tables.tolist():
            for at in range(base, base + degree):
                np.add(self.slots[at], self.slots[at + 1], out=self.slots[at])
                self.reduce_small(self.slots[at])


def _residue_block(
    lowered: Lowered,
    inputs: WalkInputs,
    walks: slice,
    p_final: npt.NDArray[np.uint32],
    alive: npt.NDArray[np.bool_],
) -> None:
    """P_final and alive of ``walks``, in the lowered residue code."""
    code, m, dim = lowered.residue, lowered.m, lowered.dim
    shifts, dirs = inputs.shifts[walks], inputs.dirs[walks]
    count = len(shifts)
    primes = inputs.primes.astype(np.uint64)
    signed = inputs.primes.astype(np.int64)[None, :]
    slots = np.empty((code.n_slots, count, len(primes)), dtype=np.uint64)
    for j in range(dim):
        slots[2 * j] = shifts[:, j, None] % signed  # floor modulo: in [0, p) for negatives too
        slots[2 * j + 1] = dirs[:, j, None] % signed
    for c, value in enumerate(lowered.consts):
        slots[2 * dim + c] = np.int64(value) % signed
    arithmetic = _Residues(slots, primes)
    arithmetic.run(code.setup)

    product = np.zeros((m, m, count, len(primes)), dtype=np.uint64)
    for i in range(m):
        product[i, i] = 1
    row = np.empty((m, count, len(primes)), dtype=np.uint64)
    term = np.empty((count, len(primes)), dtype=np.uint64)
    p = primes[None, :]
    out = code.out.tolist()
    for n in range(inputs.depth):
        arithmetic.run(code.step)
        entries = [slots[slot] for slot in out]
        for i in range(m):
            for j in range(m):
                np.multiply(product[i, 0], entries[j], out=row[j])
                for k in range(1, m):
                    np.multiply(product[i, k], entries[k * m + j], out=term)
                    row[j] += term
                np.remainder(row[j], p, out=row[j])
            product[i] = row
        arithmetic.advance(code.tables)
        if n + 1 == inputs.depth2:
            alive[walks] = (product[1, m - 1] != 0).any(axis=1)
    p_final[walks] = product.transpose(2, 3, 0, 1)


def _float_block(
    lowered: Lowered, inputs: WalkInputs, walks: slice, estimates: npt.NDArray[np.float64]
) -> None:
    """The estimates of ``walks`` (rows est1, est2, delta1, delta2), in the lowered float code;
    overflow to inf and NaN are results here, as on the GPU (the caller silences numpy)."""
    code, m, dim = lowered.float, lowered.m, lowered.dim
    positions = inputs.shifts[walks].T.copy()
    slots = np.empty((code.n_slots, positions.shape[1]))
    for c, value in enumerate(lowered.consts):
        slots[3 * dim + c] = float(value)
    dirs = inputs.dirs[walks].T
    count = positions.shape[1]
    product = np.zeros((m, m, count))
    for i in range(m):
        product[i, i] = 1.0
    exponent = np.zeros(count, dtype=np.int64)
    row = np.empty((m, count))
    out = code.out.tolist()
    snapshots: dict[
        int, tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]
    ] = {}
    for n in range(inputs.depth):
        slots[:dim] = positions
        for op, dst, a, b in code.step.tolist():
            ufunc = np.multiply if op == MUL else np.add if op == ADD else np.subtract
            ufunc(slots[a], slots[b], out=slots[dst])
        entries = [slots[slot] for slot in out]
        for i in range(m):
            for j in range(m):
                np.multiply(product[i, 0], entries[j], out=row[j])
                for k in range(1, m):
                    row[j] += product[i, k] * entries[k * m + j]
            product[i] = row
        largest = np.abs(product).max(axis=(0, 1))
        scalable = (largest >= SMALLEST_NORMAL) & (largest < RESCALE_LIMIT)
        shift = np.where(scalable, np.frexp(largest)[1] - 1, 0)
        np.ldexp(product, -shift, out=product)
        exponent += shift
        positions += dirs  # wraps only past the last position read
        for which, at in enumerate((inputs.depth1, inputs.depth2)):
            if n + 1 == at:
                snapshots[which] = (
                    product[0, m - 1].copy(),
                    product[1, m - 1].copy(),
                    exponent.copy(),
                )
    for which in (0, 1):
        p, q, e = snapshots[which]
        est = p / q
        ln_q = np.log(np.abs(q)) + e.astype(np.float64) * LN2
        estimates[which, walks] = est
        steps = (inputs.depth1, inputs.depth2)[which]
        estimates[2 + which, walks] = screen_delta(est, ln_q, inputs.target, steps)


@host_walker
def run_numpy(inputs: WalkInputs) -> WalkResult:
    """The walks on the CPU with numpy; the same arguments and result as run(), and the same
    selection (kernelpack.walk.select) when min_delta or top_k is given."""
    return walk_lowered(lower(inputs.program, inputs.dim, inputs.depth, registers=False), inputs)


def walk_lowered(lowered: Lowered, inputs: WalkInputs) -> WalkResult:
    """The walks of checked inputs in any lowered form (run_numpy takes the one numpy runs
    fastest; the tests run the GPU's register form here too)."""
    walks, m, primes_count = inputs.walks, lowered.m, len(inputs.primes)
    p_final = np.empty((walks, primes_count, m, m), dtype=np.uint32)
    alive = np.empty(walks, dtype=bool)
    block = max(1, BLOCK_PAIRS // primes_count)
    for start in range(0, walks, block):
        _residue_block(lowered, inputs, slice(start, start + block), p_final, alive)
    estimates = np.empty((4, walks))
    with np.errstate(all="ignore"):  # overflow to inf and nan are results, as on the GPU
        for start in range(0, walks, FLOAT_BLOCK):
            _float_block(lowered, inputs, slice(start, start + FLOAT_BLOCK), estimates)
    return WalkResult(p_final, alive, estimates[0], estimates[1], estimates[2], estimates[3])
