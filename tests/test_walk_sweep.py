"""The sweep contract on the CPU: `python -m kernelpack sweep run|top` with the numpy backend and
Dask's local cluster. A sweep killed with SIGKILL part-way and resumed holds every shard once and
the same walks, exact deltas included, as an uninterrupted sweep; the top k are the rule's
(test_walk_select.rule) over an independent numpy walk of every walk, the hits the screen's
candidates whose exact delta (an independent exact walk of each) reaches min_delta; the store's
exact deltas are those, and `top` ranks by them; spec errors and a changed spec are refused with
exit 2.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import mpmath as mp
import numpy as np
import pytest
from exact_reference import walk_delta
from test_walk_select import rule

from kernelpack.sweep.spec import load_spec
from kernelpack.walk import run_numpy

REPO = Path(__file__).resolve().parent.parent
# The sweeps here run on the CPU, two Dask workers
ON_CPU = ("--backend", "numpy", "--workers", "2")
SPEC = """\
matrix = [["2*x + y + 1", "-(x + 1)**2 * y"], ["1", "0"]]
axes = ["x", "y"]
target = 0.6
depth = 150
depth1 = 60
primes = [2147483647, 2147483629, 65537]
shifts = [[1, 12], [1, 10]]
dirs = [[1, 3], [1, 4]]
min_delta = -0.998
top_k = 15
shard_walks = 96
"""


def sweep(*args: str, **options: object) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{REPO / 'wheels'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    return subprocess.run(
        [sys.executable, "-m", "kernelpack", "sweep", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        **options,
    )  # type: ignore[call-overload]


def rows(folder: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(folder / "sweep.sqlite") as db:
        return db.execute(
            "SELECT walk, shard, hit, top, est, delta, shifts, dirs, delta_exact, digits, beyond, "
            "note FROM walks ORDER BY walk"
        ).fetchall()


def shards(folder: Path) -> list[int]:
    with sqlite3.connect(folder / "sweep.sqlite") as db:
        return [r[0] for r in db.execute("SELECT shard FROM shards ORDER BY shard")]


def test_sweep_killed_and_resumed_equals_an_uninterrupted_one(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    assert spec.walks == 12 * 10 * 3 * 4 and spec.shards == 15
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = sweep("run", str(spec_path), "--out", str(whole), *ON_CPU)
    assert done.returncode == 0, done.stderr
    assert shards(whole) == list(range(spec.shards))
    assert "walks" in done.stderr and "triples/s" in done.stderr  # plain progress lines

    env = {**os.environ, "PYTHONPATH": str(REPO / "wheels")}
    kernelpack = [sys.executable, "-m", "kernelpack"]
    command = [*kernelpack, "sweep", "run", str(spec_path), "--out", str(killed), *ON_CPU]
    process = subprocess.Popen(
        command,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    database = killed / "sweep.sqlite"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                if database.exists() and len(shards(killed)) >= 2:
                    break
            except sqlite3.OperationalError:  # the schema is not written yet
                pass
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver, its scheduler and workers
        process.wait()
    partial = shards(killed)
    assert 2 <= len(partial) < spec.shards, f"killed after {len(partial)} shards"
    resumed = sweep(
        "run",
        str(spec_path),
        "--out",
        str(killed),
        *ON_CPU,
        "--json",
    )
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert summary["walks_done"] == spec.walks
    assert summary["walks_this_run"] == spec.walks - sum(
        min(spec.walks, (s + 1) * 96) - s * 96 for s in partial
    )
    assert shards(killed) == list(range(spec.shards))
    # the same rows except the wall-clock columns; every walk once (walk is the primary key)
    assert rows(killed) == rows(whole)

    # what was kept: the top k are the screen rule's over every walk (walked independently in
    # one numpy call); the hits the screen's candidates whose exact delta reaches min_delta
    shifts, dirs = spec.walk_arrays(0, spec.walks)
    full = run_numpy(
        spec.program(), shifts, dirs, spec.primes, spec.depth, spec.depth1, spec.depth, spec.target
    )
    kept = rows(whole)
    spec_value = lambda: mp.mpf(spec.target)  # noqa: E731 (the float's exact binary value)

    def exact(walk: int) -> tuple[float, int]:
        return walk_delta(
            spec.matrix,
            spec.axes,
            shifts[walk].tolist(),
            dirs[walk].tolist(),
            spec.depth,
            spec_value,
        )

    candidates, _ = rule(full.alive, full.delta2, spec.min_delta, 0)
    measured = {
        int(w): exact(int(w)) for w in {*(candidates or []), *(int(str(r[0])) for r in kept)}
    }
    hits = [int(str(r[0])) for r in kept if r[2]]
    assert spec.min_delta is not None
    threshold = spec.min_delta
    expected_hits = [int(w) for w in candidates or [] if measured[int(w)][0] >= threshold]
    assert sorted(hits) == sorted(expected_hits) and hits  # some hits, chosen by exact delta
    for shard in range(spec.shards):
        start, stop = spec.shard_range(shard)
        _, top = rule(full.alive[start:stop], full.delta2[start:stop], None, spec.top_k)
        assert sorted(r[0] for r in kept if r[3] and r[1] == shard) == [
            start + i for i in sorted(top)
        ]
    assert all(json.loads(str(r[6])) == shifts[int(str(r[0]))].tolist() for r in kept)
    # the store's exact deltas and digits are the independent exact walk's
    for row in kept:
        delta, digits = measured[int(str(row[0]))]
        assert abs(float(str(row[8])) - delta) <= 1e-9 and row[9] == digits, row
        assert row[10] == 0 and row[11] == ""

    # top ranks every kept walk by its stored exact delta
    best = sweep("top", str(whole), "--json", "-k", "5")
    assert best.returncode == 0, best.stderr
    report = json.loads(best.stdout)
    assert report["ranked_by"] == "delta_exact"
    listed = report["top"]
    overall = sorted((int(str(r[0])) for r in kept), key=lambda w: (-measured[w][0], w))[:5]
    assert [w["walk"] for w in listed] == overall
    assert [w["dir"] for w in listed] == [dirs[i].tolist() for i in overall]
    for row in listed:
        assert abs(row["delta_exact"] - measured[row["walk"]][0]) <= 1e-9
        assert row["digits"] == measured[row["walk"]][1]
    np.testing.assert_array_equal([w["delta"] for w in listed], full.delta2[overall])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("colour = 3\n", "unknown key 'colour'"),
        ("", "missing key 'axes'"),
        ("shifts = [[5, 1], [1, 2]]\n", "shifts = [[5, 1], [1, 2]]: expected 2 inclusive"),
        ("primes = [4]\n", "primes"),
        ("depth = 0\n", "depth = 0: expected an integer >= 1"),
        ('matrix = [["x +", "1"], ["1", "0"]]\n', "matrix"),
        ('target = "6/zeta(3"\n', "target = '6/zeta(3': expected ')', got the end at column 9"),
        ('target = "zeta(x)"\n', "target = 'zeta(x)': unknown name 'x' at column 6; known: "),
        ("target = true\n", "target = True: expected a number, a decimal string or an expression"),
    ],
)
def test_spec_errors_are_one_line_with_exit_2(tmp_path: Path, edit: str, message: str) -> None:
    lines = [
        line
        for line in SPEC.splitlines(keepends=True)
        if not (edit and line.split("=")[0] == edit.split("=")[0])
    ]
    if not edit:
        lines = [line for line in lines if not line.startswith("axes")]
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text("".join(lines) + edit)
    done = sweep("run", str(spec_path), "--out", str(tmp_path / "out"), "--backend", "numpy")
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and str(spec_path) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_changed_spec_is_refused_for_an_existing_folder(tmp_path: Path) -> None:
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC.replace("shifts = [[1, 12], [1, 10]]", "shifts = [[1, 2], [1, 2]]"))
    out = tmp_path / "out"
    assert (
        sweep(
            "run", str(spec_path), "--out", str(out), "--backend", "numpy", "--workers", "1"
        ).returncode
        == 0
    )
    spec_path.write_text(SPEC.replace("shifts = [[1, 12], [1, 10]]", "shifts = [[1, 3], [1, 2]]"))
    done = sweep("run", str(spec_path), "--out", str(out), "--backend", "numpy")
    assert done.returncode == 2
    assert "holds a sweep of another spec" in done.stderr
    missing = sweep("top", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no sweep results here" in missing.stderr


def test_a_failed_shard_is_retried_on_another_worker_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shard whose first attempt fails (as a GPU error would) is reported, submitted again
    away from the worker where it failed, and recorded once with its two attempts."""
    distributed = pytest.importorskip("distributed")
    from kernelpack.sweep import engine
    from kernelpack.sweep.store import Store

    real = engine.run_shard
    attempts_file = tmp_path / "shard-1-workers"  # a file: Dask may copy the task's closure

    def flaky(spec_json: str, shard: int, backend: str) -> tuple[str, object, str]:
        status, payload, worker = real(spec_json, shard, backend)
        if shard == 1:
            first = not attempts_file.exists()
            with attempts_file.open("a") as record:
                record.write(worker + "\n")
            if first:
                return "failed", "CUDA_ERROR_ILLEGAL_ADDRESS (injected)", worker
        return status, payload, worker

    monkeypatch.setattr(engine, "run_shard", flaky)
    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC.replace("shard_walks = 96", "shard_walks = 300"))
    spec = load_spec(spec_path)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        store = Store.open(tmp_path / "out", spec)
        options = engine.EngineOptions("numpy", scheduler=cluster.scheduler_address)
        summary = engine.run_sweep(spec, store, options)
        attempts = dict(store.db.execute("SELECT shard, attempts FROM shards").fetchall())
        store.close()
    ran_on = attempts_file.read_text().split()
    assert summary["shards_done"] == spec.shards == 5
    assert summary["failures"] == [
        f"shard 1 failed on {ran_on[0]}: CUDA_ERROR_ILLEGAL_ADDRESS (injected)"
    ]
    assert len(ran_on) == 2 and ran_on[1] != ran_on[0]
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 1, 4: 1}


def test_a_screen_only_sweep_stores_no_exact_delta_and_says_so(tmp_path: Path) -> None:
    """EngineOptions(verify=False), the benchmark's screen-only sweep: the same shards and kept
    walks as a verified sweep, each with no exact delta and the note; the verified sweep's
    summary counts the seconds its verifications took, the screen-only one's none."""
    distributed = pytest.importorskip("distributed")
    from kernelpack.sweep import Store, engine

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(SPEC.replace("shard_walks = 96", "shard_walks = 300"))
    spec = load_spec(spec_path)
    found: dict[bool, tuple[dict[str, object], list[tuple[object, ...]]]] = {}
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        for verify in (True, False):
            store = Store.open(tmp_path / f"out-{verify}", spec)
            options = engine.EngineOptions(
                "numpy", scheduler=cluster.scheduler_address, verify=verify
            )
            summary = engine.run_sweep(spec, store, options)
            kept = store.db.execute(
                "SELECT walk, hit, top, delta_exact, digits, note FROM walks ORDER BY walk"
            ).fetchall()
            store.close()
            found[verify] = summary, kept
    (verified, verified_rows), (screened, screened_rows) = found[True], found[False]
    assert verified["shards_done"] == screened["shards_done"] == spec.shards == 5
    assert float(verified["verify_seconds"]) > 0 and screened["verify_seconds"] == 0  # type: ignore[arg-type]
    assert float(screened["screen_seconds"]) > 0  # type: ignore[arg-type]
    assert [r[:3] for r in screened_rows if r[2]] == [r[:3] for r in verified_rows if r[2]]
    assert all(r[3] is not None for r in verified_rows if r[2])
    assert screened_rows and all(
        r[3] is None and r[4] is None and r[5].startswith("not verified") for r in screened_rows
    )


def test_walks_are_the_product_of_the_ranges_in_order(tmp_path: Path) -> None:
    """walk_arrays numbers the walks as itertools.product of the ranges does, shard by shard."""
    import itertools

    spec_path = tmp_path / "spec.toml"
    spec_path.write_text(
        SPEC.replace("shifts = [[1, 12], [1, 10]]", "shifts = [[-2, 1], [3, 5]]").replace(
            "dirs = [[1, 3], [1, 4]]", "dirs = [[1, 2], [-3, -1]]"
        )
    )
    spec = load_spec(spec_path)
    rows = list(itertools.product(range(-2, 2), range(3, 6), range(1, 3), range(-3, 0)))
    assert spec.walks == len(rows) == 72 and spec.shards == 1
    for start, stop in ((0, 72), (7, 19), (71, 72)):
        shifts, dirs = spec.walk_arrays(start, stop)
        assert shifts.flags.c_contiguous and dirs.flags.c_contiguous
        assert np.hstack([shifts, dirs]).tolist() == [list(r) for r in rows[start:stop]]


def test_a_local_gpu_cluster_verifies_on_cpu_workers_of_its_own() -> None:
    """--backend gpu's local cluster: workers 0..n-1 hold GPU=1 (worker i walks on GPU i), the
    verifiers VERIFY=1; a task asking for VERIFY runs on a verifier, never on a GPU worker."""
    distributed = pytest.importorskip("distributed")
    from kernelpack.sweep import engine

    cluster = engine._gpu_cluster(distributed, 1, 2)
    try:
        with distributed.Client(cluster) as client:
            client.wait_for_workers(3, timeout=60)
            info = client.scheduler_info()["workers"]
            names = {address: w["name"] for address, w in info.items()}
            assert sorted(str(n) for n in names.values()) == ["0", "verify-0", "verify-1"]
            assert {str(w["name"]): w["resources"] for w in info.values()} == {
                "0": {"GPU": 1},
                "verify-0": {"VERIFY": 1},
                "verify-1": {"VERIFY": 1},
            }
            pids = client.run(os.getpid)
            ran = client.gather(
                [client.submit(os.getpid, pure=False, resources={"VERIFY": 1}) for _ in range(6)]
            )
            verifiers = {pids[a] for a, n in names.items() if str(n).startswith("verify-")}
            assert set(ran) <= verifiers
    finally:
        cluster.close()
