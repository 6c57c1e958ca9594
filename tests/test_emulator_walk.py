"""The walk module on the emulator: residues, float pass and selection against exact integers.

Each target's walk kernels run through ``Emulator.walk``, which is kernelpack.walk.run's host code
(kernelpack.walk.gpu: the lowering, the residue and float kernels, the selection kernels) over
the emulator's memory and this target's walk module. The checks are tests/test_walk.py's: P_final
and alive exactly against the reference in Python integers (kernelpack.walk.reference), the
estimates and deltas within the float walk's error bounds; P_final also against the numpy
walker, and a walk's residues through the exact path (kernelpack.walk.exact_walk: the Chinese
remainder theorem from the emulator's residues gives the p and q of the exact integer walk); the
selection against the rule (tests/test_walk_select.py). walk_bounds, which the host runs only for
shifts and dirs already on a GPU, is launched by name against numpy's minima and maxima. The last
test asserts that every kernel of the walk module's index ran on every target, but those of
CANNOT_RUN (each with its reason).

The float pass cannot run on the emulator at its pinned commit: walk_float<m> and
walk_float_registers<m, D> call walk::write_estimate (s_swappc_b64, and s_setpc_b64 to return),
and the emulator's scalar ALU code has no PC. The tests through Emulator.walk are marked xfail
(strict: they fail the day the emulator runs calls, to be unmarked then) with that reason; until
then the residue kernels run through the host's own launch of them (RESIDUES: the first lines of
kernelpack.walk.gpu._walk) against the reference, and the selection kernels through the host's
own selector (kernelpack.walk.gpu._Selector) over the numpy walker's estimates.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernelpack.errors import RuntimeLibraryError
from kernelpack.walk import compile_program, exact, gpu, reference, run_numpy
from kernelpack.walk.exact_walk import integer_walk
from kernelpack.walk.launch import Launch
from kernelpack.walk.lower import FLOAT_REGISTER_DEGREES, REGISTER_DEGREES, lower
from kernelpack.walk.walker import bind
from tests.test_emulator import RUN_TARGETS, emulator
from tests.test_walk import (
    CONTINUED_FRACTIONS,
    EDGE_PRIMES,
    FORMS,
    assert_walks_agree,
    fresh_rng,
    random_case,
    random_walks,
    walk_arguments,
)
from tests.test_walk_select import check_selection, planted_walks

pytestmark = pytest.mark.amd_emulator
WALKS = 37  # a partial block of every block size the host takes
CALLS = (
    "walk_float<m> and walk_float_registers<m, D> call walk::write_estimate (s_swappc_b64); the "
    "emulator at its pinned commit cannot execute calls (its scalar ALU code has no PC)"
)
float_pass = pytest.mark.xfail(raises=RuntimeLibraryError, reason=CALLS, strict=True)
SELECTION = (
    "the selection kernels crash the emulator's process (SIGSEGV in walk_select_top on gfx942, "
    "cause not found yet) and stop on gfx1100 (walk_select_hits: DPP16 row_newbcast, which the "
    "emulator does not implement)"
)
# kernel -> why no test here runs it on the emulator
CANNOT_RUN = {
    **{f"walk_float<{m}>": CALLS for m in (2, 3, 4)},
    **{
        f"walk_float_registers<{m}, {d}>": CALLS
        for m, top in FLOAT_REGISTER_DEGREES.items()
        for d in range(1, top + 1)
    },
    **{f"walk_select_{name}": SELECTION for name in ("hits", "histogram", "pick", "top")},
}


def residues(target: str, program: Any, arguments: dict[str, Any]) -> tuple[Any, Any]:
    """(P_final, alive) from the residue kernel alone, launched as kernelpack.walk.gpu._walk
    launches it (its lowering, Launch.build's arrays and geometry, _residue_launch's kernel and
    arguments), into poisoned P_final on the emulator's memory."""
    emu = emulator(target)
    inputs = bind(program, **arguments).host_inputs()
    lowered = lower(inputs.program, inputs.dim, inputs.depth, registers=True)
    launch = Launch.build(lowered, inputs)
    memory = emu.memory()
    ptr = {n: memory.pointer(memory.upload(a)) for n, a in launch.device_arrays().items()}
    kernel, kernel_arguments = gpu._residue_launch(emu.load("walk"), lowered, launch, ptr)
    walks, primes, m = inputs.walks, len(inputs.primes), inputs.program.m
    p_final = memory.filled(walks * primes * m * m * 4, gpu.POISON)
    alive = memory.filled(walks * 4, 0)
    shifts, dirs = memory.upload(inputs.shifts), memory.upload(inputs.dirs)
    kernel.launch(
        (-(-walks // launch.residue_block), primes),
        launch.residue_block,
        *kernel_arguments(
            memory.pointer(shifts),
            memory.pointer(dirs),
            walks,
            memory.pointer(p_final),
            memory.pointer(alive),
        ),
        shared_mem=lowered.residue.n_slots * 4 * launch.residue_block,
    )
    got = memory.download(p_final, np.uint32, (walks, primes, m, m))
    return got, memory.download(alive, np.uint32, (walks,)) != 0


def residues_agree(
    target: str, program: Any, arguments: dict[str, Any], seed: int, what: str
) -> None:
    """The residue kernel's P_final and alive exactly as the reference's and the numpy
    walker's."""
    p_final, alive = residues(target, program, arguments)
    expected = reference(program, **arguments)
    numpy = run_numpy(program, **arguments)
    message = f"{what} on {target} (seed {seed})"
    np.testing.assert_array_equal(p_final, expected.P_final, err_msg=message)
    np.testing.assert_array_equal(alive, expected.alive, err_msg=message)
    np.testing.assert_array_equal(p_final, numpy.P_final, err_msg=message)


def agree(
    target: str,
    program: Any,
    arguments: dict[str, Any],
    seed: int,
    what: str,
    *,
    numpy_too: bool = True,
) -> Any:
    """The emulated walk against the reference (and the numpy walker), returns its result."""
    result = emulator(target).walk(program, **arguments)
    expected = reference(program, **arguments)
    steps = (arguments["depth1"], arguments["depth2"])
    try:
        assert_walks_agree(
            result,
            expected,
            program,
            np.asarray(arguments["shifts"]),
            np.asarray(arguments["dirs"]),
            steps,
            arguments["target"],
        )
        if numpy_too:
            numpy = run_numpy(program, **arguments)
            np.testing.assert_array_equal(result.P_final, numpy.P_final)
            np.testing.assert_array_equal(result.alive, numpy.alive)
    except AssertionError as error:
        raise AssertionError(f"{what} on {target} (seed {seed}): {error}") from None
    return result


# tests/test_walk.py's forms, and m = 3 and 4 past REGISTER_DEGREES (degree 6: the program every
# step, cheaper here than tables): every walk_residues<m> on every run
RESIDUE_FORMS = [
    *FORMS,
    ([["x**6", "0", "y"], ["1", "x*y", "0"], ["0", "1", "2*x + 1"]], 30, "evaluate"),
    (
        [["x**6", "1", "0", "0"], ["0", "x", "1", "0"], ["0", "0", "y", "1"], ["1", "0", "0", "3"]],
        30,
        "evaluate",
    ),
]


@pytest.mark.parametrize(
    ("matrix", "depth", "form"),
    RESIDUE_FORMS,
    ids=[f"{f[2]}-m{len(f[0])}-d{f[1]}" for f in RESIDUE_FORMS],
)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_residue_forms(target: str, matrix: list[list[str]], depth: int, form: str) -> None:
    """The residue kernel's three forms (registers, tables, the program every step) on random
    walks, against the reference and the numpy walker."""
    rng, seed = fresh_rng()
    program = compile_program(matrix, ["x", "y"])
    assert lower(program, 2, depth, registers=True).residue.form == form
    shifts, dirs = random_walks(rng, WALKS, 2, depth)
    arguments = walk_arguments(shifts, dirs, depth, 1, depth, 0.0)
    residues_agree(target, program, arguments, seed, f"{form} m={len(matrix)}")


REGISTER_CASES = [(m, d) for m, top in REGISTER_DEGREES.items() for d in range(1, top + 1)]


def register_case(rng: np.random.Generator, m: int, degree: int) -> tuple[Any, dict[str, Any]]:
    """A field whose diagonal is x**degree, with small positive shifts (so that the float pass
    would take its register form wherever FLOAT_REGISTER_DEGREES allows it)."""
    matrix = [["0"] * m for _ in range(m)]
    for i in range(m):
        matrix[i][i] = f"x**{degree} + {i}*y + 1"
    matrix[0][1:] = ["1"] * (m - 1)
    program = compile_program(matrix, ["x", "y"])
    low = lower(program, 2, 20, registers=True)
    assert (low.residue.form, low.residue.degree) == ("registers", degree)
    arguments = {
        "shifts": rng.integers(1, 40, (WALKS, 2)),
        "dirs": rng.integers(1, 4, (WALKS, 2)),
        "primes": EDGE_PRIMES,
        "depth": 20,
        "depth1": 5,
        "depth2": 17,
        "target": 0.0,
    }
    return program, arguments


@pytest.mark.parametrize(("m", "degree"), REGISTER_CASES)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_register_kernel(target: str, m: int, degree: int) -> None:
    """walk_registers<m, degree> for every m and degree the host takes."""
    rng, seed = fresh_rng()
    program, arguments = register_case(rng, m, degree)
    before = len(emulator(target).launches)
    residues_agree(target, program, arguments, seed, f"walk_registers<{m}, {degree}>")
    ran = {r.kernel for r in emulator(target).launches[before:]}
    assert ran == {f"walk_registers<{m}, {degree}>"}, ran


@pytest.mark.parametrize("m", [2, 3, 4])
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_random_programs(target: str, m: int) -> None:
    """Random programs of one and two axes (tests/test_walk.py's: the edges of int64, the primes
    among them), against the reference and the numpy walker."""
    rng, seed = fresh_rng()
    for index in range(2):
        program, arguments = random_case(rng, m, 1 + index, WALKS, max_depth=20)
        residues_agree(target, program, arguments, seed, f"random program {index} m={m}")


@pytest.mark.parametrize("name", sorted(CONTINUED_FRACTIONS))
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_continued_fractions_through_the_exact_path(target: str, name: str) -> None:
    """The classic continued fractions: each walk's residues, through the Chinese remainder
    theorem (kernelpack.walk.exact), give the reduced p/q and the delta of the exact integer
    walk."""
    matrix, constant = CONTINUED_FRACTIONS[name]
    program = compile_program(matrix, ["n"])
    depth = 30
    shifts, dirs = np.arange(4, dtype=np.int64).reshape(4, 1), np.ones((4, 1), dtype=np.int64)
    arguments = walk_arguments(shifts, dirs, depth, 6, depth, constant)
    p_final, _ = residues(target, program, arguments)
    primes = [int(p) for p in EDGE_PRIMES]
    for walk in range(len(shifts)):
        shift, step = shifts[walk].tolist(), dirs[walk].tolist()
        product = integer_walk(program, shift, step, depth)
        size = math.log2(max(abs(product[0][-1]), abs(product[1][-1]), 1))
        from_residues = exact(
            program,
            ["n"],
            shift,
            step,
            depth,
            name,  # the constant as an expression: float64's digits are too few for p/q
            residues=p_final[walk],
            primes=primes,
            log2_size=size,
        )
        integers = exact(program, ["n"], shift, step, depth, name)
        assert from_residues.source == "crt", f"{name} walk {walk}: the primes were too few"
        assert (from_residues.p, from_residues.q, from_residues.delta) == (
            integers.p,
            integers.q,
            integers.delta,
        ), f"{name} walk {walk} on {target}"


@pytest.mark.xfail(run=False, reason=SELECTION)  # run=False: a crash would end the whole run
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_selection_kernels(target: str) -> None:
    """The selection kernels, through the host's own selector, over the numpy walker's alive,
    est2 and delta2 (ties planted, dead and NaN walks from random programs): the hits and top k
    are the rule's."""
    rng, seed = fresh_rng()
    emu = emulator(target)
    for index in range(2):
        program, arguments = random_case(rng, 2 + index, 2, WALKS, max_depth=20)
        arguments["shifts"], arguments["dirs"] = planted_walks(rng, WALKS, 2)
        full = run_numpy(program, **arguments)
        finite = full.delta2[np.isfinite(full.delta2)]
        min_delta = float(np.median(finite)) if len(finite) else 0.0
        top_k = int(rng.integers(1, WALKS + 5))
        call = bind(program, **arguments, outputs=(), min_delta=min_delta, top_k=top_k)
        memory = emu.memory()
        selector = gpu._Selector(emu.load("walk"), memory, call.request, 2, 0)
        walks = {
            "est2": full.est2,
            "delta2": full.delta2,
            "alive": full.alive.astype(np.uint32),
            "shifts": np.asarray(arguments["shifts"], dtype=np.int64),
            "dirs": np.asarray(arguments["dirs"], dtype=np.int64),
        }
        selector.piece({n: memory.pointer(memory.upload(a)) for n, a in walks.items()}, WALKS, 0)
        hits, top = selector.result()
        try:
            check_selection(SimpleNamespace(hits=hits, top=top), full, arguments, min_delta, top_k)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, program {index} on {target}: {error}") from None


@float_pass
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_walk_with_its_float_pass(target: str) -> None:
    """The whole walk through Emulator.walk (kernelpack.walk.run's host code): residues, the
    float pass in its register form, estimates and deltas within their bounds."""
    rng, seed = fresh_rng()
    program, arguments = register_case(rng, 2, 2)
    agree(target, program, arguments, seed, "walk_registers<2, 2> and its float pass")


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_walk_bounds(target: str) -> None:
    """walk_bounds (the host's check of shifts and dirs that stay on a GPU), launched by name on
    the host's grid: each axis's smallest and largest shift and direction, as numpy's."""
    rng, seed = fresh_rng()
    emu = emulator(target)
    walks, dim = 300, 3
    shifts = rng.integers(-(2**62), 2**62, (walks, dim), dtype=np.int64)
    dirs = rng.integers(-1000, 1000, (walks, dim), dtype=np.int64)
    start = np.array([[2**63 - 1] * dim, [-(2**63)] * dim] * 2, dtype=np.int64)
    bounds = emu.array(start)
    kernel = emu.load("walk").kernel("walk_bounds")
    kernel.launch(2, 256, emu.array(shifts), emu.array(dirs), walks, dim, bounds)
    expected = np.stack([shifts.min(0), shifts.max(0), dirs.min(0), dirs.max(0)])
    np.testing.assert_array_equal(emu.numpy(bounds), expected, err_msg=f"seed {seed}")


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_walk_kernel_ran(target: str) -> None:
    """Every kernel of the walk module's index was launched on ``target`` by the tests above (this
    test comes last in the module and needs them in the same run)."""
    emu = emulator(target)
    names = set(emu.load("walk").kernel_names)
    assert CANNOT_RUN.keys() <= names
    missing = sorted(names - CANNOT_RUN.keys() - {r.kernel for r in emu.launches})
    assert not missing, (
        f"{len(missing)} of the {len(names)} walk kernels did not run on {target} in this run "
        f"(run the whole of tests/test_emulator_walk.py): {', '.join(missing)}"
    )
    walk_launches = [r for r in emu.launches if r.kernel in names]
    print(
        f"\nwalk on {target}: {len(names) - len(CANNOT_RUN)} of {len(names)} kernels ran, "
        f"{len(walk_launches)} launches, {sum(r.seconds for r in walk_launches):.1f} s; "
        f"not {len(CANNOT_RUN)}: {CALLS}; {SELECTION}"
    )
