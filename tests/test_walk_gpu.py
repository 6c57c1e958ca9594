"""kernelpack.walk.run on a GPU: the kernels of kernel_sources/walk/walk.cu against the exact
reference (P_final and alive exactly, est and delta within the float walk's error bound) and the
numpy walker (at sizes the reference is too slow for). Skipped where no GPU is present.

The comparisons and random inputs are test_walk.py's.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_walk import (
    CONTINUED_FRACTIONS,
    EDGE_PRIMES,
    FORMS,
    assert_walks_agree,
    check_random_programs,
    fresh_rng,
    largest_primes,
    random_case,
    random_walks,
    walk_arguments,
)

from kernelpack.devices import pinned
from kernelpack.devices.arrays import gpu_framework
from kernelpack.errors import UsageError
from kernelpack.walk import WalkResult, compile_program, gpu, launch, reference, run, run_numpy
from kernelpack.walk.lower import FLOAT_REGISTER_DEGREES, REGISTER_DEGREES, lower
from kernelpack.walk.walker import bind

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("m", [2, 3, 4])
def test_gpu_matches_reference_on_random_programs(m: int, dim: int) -> None:
    # 37 walks: a partial block; random primes include 3 and the largest below 2^31
    check_random_programs(run, m, dim, programs=10, walks=37)


@pytest.mark.parametrize("name", sorted(CONTINUED_FRACTIONS))
def test_gpu_continued_fractions_converge(name: str) -> None:
    matrix, constant = CONTINUED_FRACTIONS[name]
    program = compile_program(matrix, ["n"])
    shifts, dirs = np.zeros((5, 1), dtype=np.int64), np.ones((5, 1), dtype=np.int64)
    arguments = walk_arguments(shifts, dirs, 60, 6, 50, constant)
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    assert assert_walks_agree(result, expected, program, shifts, dirs, (6, 50), constant) > 0
    assert np.all(np.abs(result.est2 - constant) <= 1e-12 * constant)
    assert np.all(np.abs(result.est1 - constant) > np.abs(result.est2 - constant))


@pytest.mark.parametrize(("matrix", "depth", "form"), FORMS)
def test_gpu_residue_forms(matrix: list[list[str]], depth: int, form: str) -> None:
    rng, seed = fresh_rng()
    program = compile_program(matrix, ["x", "y"])
    assert lower(program, 2, depth, registers=True).residue.form == form
    shifts, dirs = random_walks(rng, 300, 2, depth)
    arguments = walk_arguments(shifts, dirs, depth, 1, depth, 0.0)
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)


@pytest.mark.parametrize(
    ("m", "degree"), [(m, d) for m, top in REGISTER_DEGREES.items() for d in range(1, top + 1)]
)
def test_gpu_every_register_kernel(m: int, degree: int) -> None:
    """One field per register kernel walk_registers<m, degree>: the diagonal x**degree,
    the rest of the first row 1, the rest 0."""
    rng, seed = fresh_rng()
    matrix = [["0"] * m for _ in range(m)]
    for i in range(m):
        matrix[i][i] = f"x**{degree} + {i}*y"
    matrix[0][1:] = ["1"] * (m - 1)
    program = compile_program(matrix, ["x", "y"])
    low = lower(program, 2, 20, registers=True)
    assert (low.residue.form, low.residue.degree) == ("registers", degree)
    shifts, dirs = random_walks(rng, 100, 2, 20)
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": EDGE_PRIMES,
        "depth": 20,
        "depth1": 5,
        "depth2": 17,
        "target": 0.0,
    }
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)


@pytest.mark.parametrize(
    ("m", "degree"),
    [(m, d) for m, top in FLOAT_REGISTER_DEGREES.items() for d in range(1, top + 1)],
)
def test_gpu_float_register_kernels_match_evaluation(
    m: int, degree: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each walk_float_registers<m, degree> gives bit for bit the estimates of walk_float<m>
    (both multiply exact integer entries in the same order), and both agree with the reference."""
    rng, seed = fresh_rng()
    matrix = [
        [f"{int(rng.integers(1, 9))} + {int(rng.integers(0, 3))}*y" for _ in range(m)]
        for _ in range(m)
    ]
    matrix[1][m - 1] = f"x**{degree} + y" if degree > 1 else "2*x + y"
    program = compile_program(matrix, ["x", "y"])
    shifts, dirs = rng.integers(1, 60, (150, 2)), rng.integers(1, 5, (150, 2))
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": EDGE_PRIMES,
        "depth": 40,
        "depth1": 13,
        "depth2": 40,
        "target": 0.25,
    }
    inputs = bind(program, **arguments).host_inputs()
    low = lower(program, 2, 40, registers=True)
    assert (low.residue.form, low.residue.degree) == ("registers", degree)
    assert launch.Launch.build(low, inputs).float_registers
    result = run(program, **arguments)  # type: ignore[arg-type]
    monkeypatch.setattr(launch, "float_registers_exact", lambda inputs, degree: False)
    assert not launch.Launch.build(low, inputs).float_registers
    evaluated = run(program, **arguments)  # type: ignore[arg-type]
    for name in ("est1", "est2", "delta1", "delta2"):
        np.testing.assert_array_equal(
            getattr(result, name), getattr(evaluated, name), err_msg=f"{name}, seed {seed}"
        )
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    try:
        assert_walks_agree(result, expected, program, shifts, dirs, (13, 40), 0.25)
    except AssertionError as error:
        raise AssertionError(f"seed {seed}: {error}") from None


def _field(m: int) -> list[list[str]]:
    return {
        2: [["2*x + y + 1", "-(x + 1)**2 * (x + y + 1)"], ["1", "0"]],
        3: [["0", "0", "x**3 + 2*y"], ["1", "0", "-(x*y + 2)"], ["0", "1", "3*x + 2*y + 1"]],
        4: [
            ["x", "1", "0", "y"],
            ["0", "x*y", "1", "0"],
            ["1", "0", "y**2", "-x"],
            ["0", "1", "0", "x + y"],
        ],
    }[m]


@pytest.mark.parametrize("m", [2, 3, 4])
def test_gpu_matches_numpy_walker_at_scale(m: int) -> None:
    """Thousands of walks, 32 primes: the numpy walker is the exact check here (it equals the
    reference in test_walk.py); the estimates of these fields (all entries positive along the
    walk, no cancellation) agree to float accuracy."""
    rng, seed = fresh_rng()
    program = compile_program(_field(m), ["x", "y"])
    walks = 3000
    arguments = {
        "shifts": rng.integers(1, 50, (walks, 2)),
        "dirs": rng.integers(1, 4, (walks, 2)),
        "primes": [*largest_primes(31), 3],
        "depth": 120,
        "depth1": 60,
        "depth2": 120,
        "target": 0.0,
    }
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = run_numpy(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)
    for ours, theirs in (
        (result.est1, expected.est1),
        (result.est2, expected.est2),
        (result.delta1, expected.delta1),
        (result.delta2, expected.delta2),
    ):
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, err_msg=f"seed {seed}")


def test_gpu_batch_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch larger than one piece (here: 1000 walks) runs piece by piece, each into its own
    part of the result."""
    rng, seed = fresh_rng()
    monkeypatch.setattr(gpu, "piece_walks", lambda inputs, free, p_final=True: 1000)
    program = compile_program(_field(2), ["x", "y"])
    shifts, dirs = rng.integers(-40, 50, (2500, 2)), rng.integers(-3, 4, (2500, 2))
    arguments = walk_arguments(shifts, dirs, 50, 20, 50, 1.0)
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = run_numpy(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)
    finite = np.isfinite(expected.est2)
    np.testing.assert_array_equal(np.isfinite(result.est2), finite)


def test_gpu_many_constants_take_small_blocks() -> None:
    """200 distinct constants: each thread's float slots take 1.7 KiB, so the float kernel runs
    in blocks of 16 threads; the residue kernel in blocks of 32."""
    rng, seed = fresh_rng()
    constants = [int(c) for c in rng.choice(np.arange(-(10**6), 10**6), 200, replace=False)]
    terms = " + ".join(f"({c})*x" for c in constants[:100])
    others = " - ".join(f"({c})" for c in constants[100:])
    program = compile_program([[terms, "1"], [others + " + y", "x*y"]], ["x", "y"])
    low = lower(program, 2, 30, registers=True)
    assert launch.block_size(low.float.n_slots, 8) <= 32
    shifts, dirs = random_walks(rng, 70, 2, 30)
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": EDGE_PRIMES,
        "depth": 30,
        "depth1": 10,
        "depth2": 30,
        "target": 0.5,
    }
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = reference(program, **arguments)  # type: ignore[arg-type]
    try:
        assert_walks_agree(result, expected, program, shifts, dirs, (10, 30), 0.5)
    except AssertionError as error:
        raise AssertionError(f"seed {seed}: {error}") from None


# ---- selection on the GPU and device-resident I/O ------------------------------------------


@pytest.mark.parametrize("m", [2, 3, 4])
def test_gpu_selection_follows_the_rule_on_random_programs(
    m: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The selection kernels' hits and top k are the rule's over the GPU's own alive and delta2
    (ties planted, dead and NaN walks from random programs), in pieces of 23 walks too."""
    from test_walk_select import check_selection, planted_walks

    rng, seed = fresh_rng()
    for index in range(6):
        program, arguments = random_case(rng, m, 2, 70, max_depth=25)
        arguments["shifts"], arguments["dirs"] = planted_walks(rng, 70, 2)
        full = run(program, **arguments)  # type: ignore[arg-type]
        finite = full.delta2[np.isfinite(full.delta2)]
        min_delta = float(np.median(finite)) if len(finite) else 0.0
        top_k = int(rng.integers(0, 90))
        if index % 2:
            monkeypatch.setattr(gpu, "piece_walks", lambda inputs, free, p_final=True: 23)
        chosen = run(program, **arguments, outputs=(), min_delta=min_delta, top_k=top_k)  # type: ignore[arg-type]
        monkeypatch.undo()
        assert chosen.P_final is None and chosen.est2 is None
        try:
            check_selection(chosen, full, arguments, min_delta, top_k)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, program {index}: {error}") from None


def test_gpu_selection_at_scale_equals_the_host_rule() -> None:
    """10^5 walks, 1000 kept: every digit pass of the radix selection has work to do."""
    from kernelpack.walk.select import select

    rng, seed = fresh_rng()
    program = compile_program(_field(2), ["x", "y"])
    walks = 100_000
    shifts, dirs = rng.integers(1, 60, (walks, 2)), rng.integers(1, 4, (walks, 2))
    arguments = {
        "shifts": shifts,
        "dirs": dirs,
        "primes": largest_primes(4),
        "depth": 80,
        "depth1": 40,
        "depth2": 80,
        "target": 0.3,
    }
    chosen = run(program, **arguments, min_delta=0.05, top_k=1000)  # type: ignore[arg-type]
    hits, top = select(chosen.alive, chosen.est2, chosen.delta2, shifts, dirs, 0.05, 1000)
    assert chosen.top is not None and chosen.hits is not None and hits is not None
    np.testing.assert_array_equal(chosen.top.walk, top.walk, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(chosen.hits.walk, hits.walk, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(chosen.top.dirs, top.dirs)


def test_gpu_device_resident_inputs_and_outputs() -> None:
    """torch tensors in: the outputs are torch tensors on that GPU, equal to the numpy call's;
    P_final only when asked; the selection the same."""
    torch = pytest.importorskip("torch")
    rng, seed = fresh_rng()
    program = compile_program(_field(3), ["x", "y"])
    shifts, dirs = rng.integers(-20, 50, (3000, 2)), rng.integers(-3, 4, (3000, 2))
    arguments = {"primes": EDGE_PRIMES, "depth": 60, "depth1": 30, "depth2": 60, "target": 0.5}
    expected = run(program, shifts, dirs, **arguments, min_delta=0.0, top_k=50)  # type: ignore[arg-type]
    on_gpu = run(
        program,
        torch.from_numpy(shifts).cuda(),
        torch.from_numpy(dirs).cuda(),
        **arguments,
        min_delta=0.0,
        top_k=50,
    )  # type: ignore[arg-type]
    assert on_gpu.P_final.is_cuda and on_gpu.alive.dtype == torch.bool
    np.testing.assert_array_equal(
        on_gpu.P_final.cpu().numpy(), expected.P_final, err_msg=f"seed {seed}"
    )
    np.testing.assert_array_equal(on_gpu.alive.cpu().numpy(), expected.alive)
    np.testing.assert_array_equal(on_gpu.delta2.cpu().numpy(), expected.delta2)
    assert on_gpu.top is not None and expected.top is not None
    np.testing.assert_array_equal(on_gpu.top.walk, expected.top.walk)
    lean = run(
        program,
        torch.from_numpy(shifts).cuda(),
        torch.from_numpy(dirs).cuda(),
        **arguments,
        outputs=("delta2",),
    )  # type: ignore[arg-type]
    assert lean.P_final is None and lean.alive is None
    np.testing.assert_array_equal(lean.delta2.cpu().numpy(), expected.delta2)
    with pytest.raises(UsageError, match=r"^shifts: expected a C-contiguous int64 .*got int32;"):
        run(
            program,
            torch.from_numpy(shifts).cuda().int(),
            torch.from_numpy(dirs).cuda(),
            **arguments,
        )  # type: ignore[arg-type]
    transposed = torch.from_numpy(dirs.T.copy()).cuda().t()  # (3000, 2), column-major
    with pytest.raises(UsageError, match=r"^dirs: .*got int64, not C-contiguous;"):
        run(program, torch.from_numpy(shifts).cuda(), transposed, **arguments)  # type: ignore[arg-type]


def test_gpu_sweep_finds_aperys_walk(tmp_path: Path) -> None:
    """A sweep over Apery's field (shifts 1..12, dirs 1..4) aimed at 6/zeta(3) - 5: the best walk
    is the one that starts at shift 1 with direction 1, Apery's continued fraction itself. The
    sweep runs its shards through Dask distributed (an optional dependency, kernelpack[sweep])."""
    pytest.importorskip(
        "distributed", reason="Dask distributed is not installed (kernelpack[sweep])"
    )
    spec = tmp_path / "apery.toml"
    spec.write_text(
        'matrix = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]\naxes = ["n"]\n'
        f"target = {6 / 1.2020569031595942 - 5!r}\ndepth = 30\ndepth1 = 15\nprimes = 8\n"
        "shifts = [[1, 12]]\ndirs = [[1, 4]]\ntop_k = 5\nshard_walks = 16\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "wheels"), *sys.path])}
    base = [sys.executable, "-m", "kernelpack", "sweep"]
    done = subprocess.run(
        [*base, "run", str(spec), "--out", str(tmp_path / "out"), "--workers", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    best = subprocess.run(
        [*base, "top", str(tmp_path / "out"), "--json", "-k", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    top = json.loads(best.stdout)["top"]
    assert (top[0]["shift"], top[0]["dir"]) == ([1], [1]), top
    assert abs(top[0]["est"] - (6 / 1.2020569031595942 - 5)) < 1e-14


def test_gpu_run_with_exact_equals_the_numpy_walkers() -> None:
    """run(..., exact=True) on the GPU: the same kept walks as run_numpy's, with the same exact
    deltas and digits (verification runs on the host for both)."""
    matrix = [["0", "-n**6"], ["1", "34*n**3 + 51*n**2 + 27*n + 5"]]
    program = compile_program(matrix, ["n"])
    shifts = np.array([[s] for s in range(1, 13) for _ in range(4)])
    dirs = np.array([[d] for _ in range(1, 13) for d in range(1, 5)])
    arguments = {
        "primes": largest_primes(8),
        "depth": 300,
        "depth1": 150,
        "depth2": 300,
        "target": "6/zeta(3) - 5",
        "min_delta": 0.0,
        "top_k": 8,
        "exact": True,
    }
    found = run(program, shifts, dirs, **arguments)  # type: ignore[arg-type]
    expected = run_numpy(program, shifts, dirs, **arguments)  # type: ignore[arg-type]
    for name in ("top", "hits"):
        ours, theirs = getattr(found, name), getattr(expected, name)
        assert ours.verified is not None and theirs.verified is not None, name
        np.testing.assert_array_equal(ours.walk, theirs.walk, err_msg=name)
        np.testing.assert_array_equal(ours.verified.delta, theirs.verified.delta, err_msg=name)
        np.testing.assert_array_equal(ours.verified.digits, theirs.verified.digits, err_msg=name)
    assert found.top.walk[0] == 0  # shift 1 dir 1, Apery's walk


def test_gpu_pipelined_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """With pipelining from 500 walks, 3000 walks run in 4 pieces whose copies to the host
    overlap the next piece: P_final and alive equal the numpy walker's, and the estimates are
    bit for bit those of one piece (outputs are poisoned on the device, so a missed copy shows)."""
    rng, seed = fresh_rng()
    program = compile_program(_field(3), ["x", "y"])
    shifts, dirs = rng.integers(-40, 50, (3000, 2)), rng.integers(-3, 4, (3000, 2))
    arguments = walk_arguments(shifts, dirs, 40, 20, 40, 1.0)
    whole = run(program, **arguments)  # type: ignore[arg-type]
    monkeypatch.setattr(gpu, "PIPELINE_MIN_WALKS", 500)
    result = run(program, **arguments)  # type: ignore[arg-type]
    expected = run_numpy(program, **arguments)  # type: ignore[arg-type]
    np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(result.alive, expected.alive)
    for name in ("est1", "est2", "delta1", "delta2"):
        ours, theirs = getattr(result, name), getattr(whole, name)
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{name}, seed {seed}")


def test_gpu_results_in_pooled_page_locked_memory() -> None:
    """Numpy results live in the page-locked pool (kernelpack.devices.pinned): a second call
    while the first call's results live gets memory of its own (the first results stay as they
    were), and once they are dropped a call at a smaller, new size reuses their buffers without
    allocating; every result equals the numpy walker's, so stale bytes of a reused buffer show."""
    rng, seed = fresh_rng()
    program = compile_program(_field(2), ["x", "y"])

    def call(walks: int) -> tuple[WalkResult, WalkResult]:
        # positive along the walk, as at scale above: the estimates agree to float accuracy
        shifts, dirs = rng.integers(1, 50, (walks, 2)), rng.integers(1, 4, (walks, 2))
        arguments = walk_arguments(shifts, dirs, 40, 20, 40, 1.0)
        return run(program, **arguments), run_numpy(program, **arguments)  # type: ignore[arg-type]

    def agree(result: WalkResult, expected: WalkResult) -> None:
        np.testing.assert_array_equal(result.P_final, expected.P_final, err_msg=f"seed {seed}")
        np.testing.assert_array_equal(result.alive, expected.alive, err_msg=f"seed {seed}")
        for name in ("est1", "est2"):
            ours, theirs = getattr(result, name), getattr(expected, name)
            np.testing.assert_allclose(ours, theirs, rtol=1e-9, err_msg=f"{name}, seed {seed}")

    first, _ = call(3000)
    kept = first.P_final.copy()
    gc.collect()
    pool = pinned.pool(gpu_framework())
    pool.clear()  # what earlier tests left idle
    allocations = pool.stats.allocations
    second, second_expected = call(2900)
    assert pool.stats.allocations > allocations  # the first results' buffers were not taken
    np.testing.assert_array_equal(first.P_final, kept)
    agree(second, second_expected)
    del first, second
    gc.collect()
    allocations, reuses = pool.stats.allocations, pool.stats.reuses
    third, third_expected = call(2000)
    assert pool.stats.allocations == allocations and pool.stats.reuses >= reuses + 3
    agree(third, third_expected)


def test_gpu_device_resident_cupy_inputs_and_outputs() -> None:
    """CuPy arrays in: the outputs are CuPy arrays on that GPU, equal to the numpy call's, and the
    selection the same (the torch test's counterpart, for users without torch)."""
    cupy = pytest.importorskip("cupy")
    rng, seed = fresh_rng()
    program = compile_program(_field(3), ["x", "y"])
    shifts, dirs = rng.integers(-20, 50, (3000, 2)), rng.integers(-3, 4, (3000, 2))
    arguments = {"primes": EDGE_PRIMES, "depth": 60, "depth1": 30, "depth2": 60, "target": 0.5}
    expected = run(program, shifts, dirs, **arguments, min_delta=0.0, top_k=50)  # type: ignore[arg-type]
    on_gpu = run(
        program,
        cupy.asarray(shifts),
        cupy.asarray(dirs),
        **arguments,  # type: ignore[arg-type]
        min_delta=0.0,
        top_k=50,
    )
    for name in ("P_final", "alive", "delta2"):
        assert isinstance(getattr(on_gpu, name), cupy.ndarray), name
    np.testing.assert_array_equal(
        cupy.asnumpy(on_gpu.P_final), expected.P_final, err_msg=f"seed {seed}"
    )
    np.testing.assert_array_equal(cupy.asnumpy(on_gpu.alive), expected.alive)
    np.testing.assert_array_equal(cupy.asnumpy(on_gpu.delta2), expected.delta2)
    assert on_gpu.top is not None and expected.top is not None
    np.testing.assert_array_equal(on_gpu.top.walk, expected.top.walk)
