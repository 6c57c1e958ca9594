"""Batched walks of a matrix field in residue-number-system arithmetic (WALK.md).

A walk multiplies P_{n+1} = P_n * M(n), n < depth, where the entries of M(n) are integer
polynomials of the position shift + n * dir, and reports P_depth modulo each of K primes, whether
the walk is alive, and a float64 estimate of its limit p_d / q_d with how fast it converges
(delta). Three walkers take the same arguments and return the same :class:`WalkResult`:

- :func:`run`: the GPU kernels (kernel_sources/walk/walk.cu) through kernelpack's loader;
- :func:`run_numpy`: numpy on the CPU, all walks and primes at once;
- :func:`reference`: exact Python integers, the definition the other two are tested against.

The step matrix is a :class:`Program` (WALK.md's register machine), written by hand or by
:func:`compile_program` from expressions such as ``[["0", "-n**2"], ["1", "2*n + 1"]]``.
"""

from __future__ import annotations

from .cpu import run_numpy
from .gpu import run
from .inputs import WalkResult
from .program import Op, Program, compile_program
from .reference import reference

__all__ = ["Op", "Program", "WalkResult", "compile_program", "reference", "run", "run_numpy"]
