"""Batched walks of a matrix field in residue-number-system arithmetic (WALK.md).

A walk multiplies P_{n+1} = P_n * M(n), n < depth, where the entries of M(n) are integer
polynomials of the position shift + n * dir, and reports P_depth modulo each of K primes, whether
the walk is alive, and a float64 estimate of its limit p_d / q_d with how fast it converges
(delta). Three walkers take the same arguments and return the same :class:`WalkResult`:

- :func:`run`: the GPU kernels (kernel_sources/walk/walk.cu) through kernelpack's loader;
- :func:`run_numpy`: numpy on the CPU, all walks and primes at once;
- :func:`reference`: exact Python integers, the definition the other two are tested against.

Searches ask a walker for less: ``outputs`` names the arrays wanted (P_final only when asked
for), and ``min_delta`` / ``top_k`` select the hits and the best walks (kernelpack.walk.select's
rule, on the GPU for :func:`run`), returned as :class:`Selection` records with each walk's shift,
direction, estimate and delta. :func:`run` also takes shifts and dirs already on the GPU (torch,
CuPy) and then leaves its outputs there. Sweeps over many GPUs: kernelpack.sweep.

What a search reports is exact (docs/walk.md): :func:`exact_delta` (and :func:`exact`, with
the digits and the reduced fraction) measures one walk from exact integers against a target
given at any precision (:func:`parse_target`: a float, a decimal string, an expression of known
constants); the walkers' delta1/delta2 are a float64 screen.

The step matrix is a :class:`Program` (WALK.md's register machine), written by hand or by
:func:`compile_program` from expressions such as ``[["0", "-n**2"], ["1", "2*n + 1"]]``.
"""

from __future__ import annotations

from .cpu import run_numpy
from .exact_walk import Exact, exact, exact_delta
from .gpu import run
from .inputs import WalkResult
from .program import Op, Program, compile_program
from .reference import reference
from .select import Selection
from .targets import Target, parse_target

__all__ = [
    "Exact",
    "Op",
    "Program",
    "Selection",
    "Target",
    "WalkResult",
    "compile_program",
    "exact",
    "exact_delta",
    "parse_target",
    "reference",
    "run",
    "run_numpy",
]
