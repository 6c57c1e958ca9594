"""The walk module on the emulator: residues, float pass and selection against exact integers.

Each target's walk kernels run through ``Emulator.walk``, which is kernelpack.walk.run's host code
(kernelpack.walk.gpu: the lowering, the residue and float kernels, the selection kernels) over
the emulator's memory and this target's walk module. The checks are tests/test_walk.py's: P_final
and alive exactly against the reference in Python integers (kernelpack.walk.reference), the
estimates and deltas within the float walk's error bounds; P_final also against the numpy
walker, and so are the estimates and deltas of fields without cancellation (to float accuracy,
as tests/test_walk_gpu.py holds a GPU to them); a walk's residues through the exact path
(kernelpack.walk.exact_walk: the Chinese remainder theorem from the emulator's residues gives the
p and q of the exact integer walk); the selection against the rule (tests/test_walk_select.py)
over the emulated walk's own alive and delta2, and the selection kernels alone through the host's
own selector (kernelpack.walk.gpu._Selector) over the numpy walker's. The residue kernels also
run alone, through the host's own launch of them (RESIDUES: the first lines of
kernelpack.walk.gpu._walk). walk_bounds, which the host runs only for shifts and dirs already on
a GPU, is launched by name against numpy's minima and maxima. The last test asserts that every
kernel of the walk module's index ran on every target.
"""

from __future__ import annotations

import ctypes
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernelpack.emulator._code import RETURNING_ATOMIC, ROW_SHARE, PlacedImage
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
# the selection's inputs: two blocks of 256 threads, the second partial, several waves in each
SELECT_WALKS = 300
FLOAT_NUMPY_RTOL = 1e-9  # tests/test_walk_gpu.py's for fields without cancellation


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
    float_numpy: bool = False,
) -> Any:
    """The emulated walk against the reference and the numpy walker (P_final and alive exactly;
    with ``float_numpy``, for a field without cancellation, the estimates and deltas to
    FLOAT_NUMPY_RTOL too); returns its result."""
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
        numpy = run_numpy(program, **arguments)
        np.testing.assert_array_equal(result.P_final, numpy.P_final)
        np.testing.assert_array_equal(result.alive, numpy.alive)
        for name in ("est1", "est2", "delta1", "delta2") if float_numpy else ():
            np.testing.assert_allclose(
                getattr(result, name), getattr(numpy, name), rtol=FLOAT_NUMPY_RTOL, err_msg=name
            )
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
    """A field whose diagonal is x**degree, ones above it (so that q, P[1][m-1], is nonzero from
    step m - 1 on, and every walk alive with a finite estimate), with small positive shifts (so
    that the float pass takes its register form wherever FLOAT_REGISTER_DEGREES allows it, and
    no entry is negative: no cancellation)."""
    matrix = [["0"] * m for _ in range(m)]
    for i in range(m):
        matrix[i][i] = f"x**{degree} + {i}*y + 1"
        matrix[i][i + 1 :] = ["1"] * (m - 1 - i)
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


@pytest.mark.parametrize("target", RUN_TARGETS)
def test_selection_kernels(target: str) -> None:
    """The selection kernels, through the host's own selector, over the numpy walker's alive,
    est2 and delta2 (ties planted, dead and NaN walks from random programs; two blocks): the
    hits and top k are the rule's."""
    rng, seed = fresh_rng()
    emu = emulator(target)
    for index in range(2):
        program, arguments = random_case(rng, 2 + index, 2, SELECT_WALKS, max_depth=20)
        arguments["shifts"], arguments["dirs"] = planted_walks(rng, SELECT_WALKS, 2)
        full = run_numpy(program, **arguments)
        finite = full.delta2[np.isfinite(full.delta2)]
        min_delta = float(np.median(finite)) if len(finite) else 0.0
        top_k = int(rng.integers(1, SELECT_WALKS + 5))
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
        pointers = {n: memory.pointer(memory.upload(a)) for n, a in walks.items()}
        selector.piece(pointers, SELECT_WALKS, 0)
        hits, top = selector.result()
        try:
            check_selection(SimpleNamespace(hits=hits, top=top), full, arguments, min_delta, top_k)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, program {index} on {target}: {error}") from None
    # what the emulator needed for these kernels (kernelpack.emulator._code, docs/amd.md)
    notes = " ".join(emu.notes)
    arch = emu.target.arch
    assert (ROW_SHARE in notes) == (arch in ("rdna3", "rdna4")), notes
    assert (RETURNING_ATOMIC in notes) == (arch in ("cdna", "rdna4")), notes


# v_mov_b32_dpp as LLVM 21's assembler encodes it for gfx1100 and gfx1201, and the
# v_permlane16_b32 of the same lanes as it encodes that (llvm-mc -show-encoding)
ROW_SHARE_CASES = [
    (  # v_mov_b32_dpp v0, v0 row_share:0 row_mask:0xf bank_mask:0xf bound_ctrl:1
        "fa02007e005009ff",
        "00105bd600010102",  # v_permlane16_b32 v0, v0, 0, 0 op_sel:[0,1]
    ),
    (  # v_mov_b32_dpp v3, v9 row_share:15 row_mask:0xf bank_mask:0xf fi:1
        "fa02067e095f05ff",
        "03085bd609830503",  # v_permlane16_b32 v3, v9, -1, -1 op_sel:[1,0]
    ),
    ("fa02007e005109ff", None),  # row_share:1: its selects need a literal; left alone
    ("fa02007e005009fe", None),  # bank_mask 0xe: not every lane written; left alone
]


@pytest.mark.parametrize(("dpp", "permlane"), ROW_SHARE_CASES)
@pytest.mark.parametrize("target", ["gfx1100", "gfx1201"])
def test_row_share_becomes_the_assemblers_permlane16(
    target: str, dpp: str, permlane: str | None
) -> None:
    """The rewrite of row_share in the loaded copy gives the assembler's bytes for the
    v_permlane16_b32 of the same lanes, and leaves what it cannot express alone."""
    emu = emulator(target)
    image = object.__new__(PlacedImage)  # only its arch and read() are used here
    image.arch = emu.target.arch
    memory = (ctypes.c_ubyte * 24).from_buffer_copy(bytes.fromhex(dpp) + bytes(16))
    at = ctypes.addressof(memory)
    changed = image._share_as_permlane(at, emu.checkout.decode)
    assert changed == (permlane is not None)
    assert bytes(memory[:8]).hex() == (permlane or dpp)


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_whole_walk_with_its_selection(target: str, m: int) -> None:
    """The whole walk through Emulator.walk (kernelpack.walk.run's host code) on a random
    program (ties planted, dead and NaN walks): residues, float pass and deltas against the
    reference; then, asking for hits and the top k only, the selection is the rule's over the
    emulated walk's own alive and delta2."""
    rng, seed = fresh_rng()
    emu = emulator(target)
    program, arguments = random_case(rng, m, 2, WALKS, max_depth=20)
    arguments["shifts"], arguments["dirs"] = planted_walks(rng, WALKS, 2)
    full = agree(target, program, arguments, seed, f"random program m={m}")
    finite = full.delta2[np.isfinite(full.delta2)]
    min_delta = float(np.median(finite)) if len(finite) else 0.0
    top_k = int(rng.integers(1, WALKS + 5))
    chosen = emu.walk(program, **arguments, outputs=(), min_delta=min_delta, top_k=top_k)
    assert chosen.P_final is None and chosen.est2 is None
    try:
        check_selection(chosen, full, arguments, min_delta, top_k)
    except AssertionError as error:
        raise AssertionError(f"seed {seed}, m={m} on {target}: {error}") from None


# (m, degree, register form): every walk_float_registers<m, D> and every walk_float<m>
FLOAT_CASES = [
    *((m, d, True) for m, top in FLOAT_REGISTER_DEGREES.items() for d in range(1, top + 1)),
    *((m, 1, False) for m in (2, 3, 4)),
]


@pytest.mark.parametrize(
    ("m", "degree", "registers"),
    FLOAT_CASES,
    ids=[f"{'registers' if r else 'program'}-m{m}-d{d}" for m, d, r in FLOAT_CASES],
)
@pytest.mark.parametrize("target", RUN_TARGETS)
def test_every_float_kernel(
    target: str, m: int, degree: int, registers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """walk_float_registers<m, degree> (the host's register form) and walk_float<m> (the program
    every step: what the host takes where its bound cannot keep every value below 2^52, refused
    here by patching that bound, as tests/test_walk_gpu.py does), through Emulator.walk: est and
    delta within their bounds of the reference and as the numpy walker's (float64)."""
    rng, seed = fresh_rng()
    program, arguments = register_case(rng, m, degree)
    if not registers:
        monkeypatch.setattr(
            "kernelpack.walk.launch.float_registers_exact", lambda inputs, degree: False
        )
    before = len(emulator(target).launches)
    what = f"float pass m={m} degree={degree}"
    result = agree(target, program, arguments, seed, what, float_numpy=True)
    assert result.alive.all() and np.isfinite([result.est1, result.est2]).all(), what
    ran = {r.kernel for r in emulator(target).launches[before:]}
    float_kernel = f"walk_float_registers<{m}, {degree}>" if registers else f"walk_float<{m}>"
    assert ran == {f"walk_registers<{m}, {degree}>", float_kernel}, ran


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
    missing = sorted(names - {r.kernel for r in emu.launches})
    assert not missing, (
        f"{len(missing)} of the {len(names)} walk kernels did not run on {target} in this run "
        f"(run the whole of tests/test_emulator_walk.py): {', '.join(missing)}"
    )
    walk_launches = [r for r in emu.launches if r.kernel in names]
    print(
        f"\nwalk on {target}: {len(names)} of {len(names)} kernels ran, {len(walk_launches)} "
        f"launches, {sum(r.seconds for r in walk_launches):.1f} s"
    )
