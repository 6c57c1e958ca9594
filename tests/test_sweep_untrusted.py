"""Sweeps met as an attacker or an unlucky user meets them (issue 44, items 8, 10 and 11): a spec
of ten million shards, a damaged or locked results database, a full disk, an --out that is a
file, a --scheduler where nothing listens, --workers -1. Each ends within seconds, in one line
with exit status 2 (bad input) or 1 (a failure of the work that a rerun resumes), or, for the
large spec, starts committing at once in a driver whose memory does not grow with the shards.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from capped import ADDRESS_SPACE_CAP, WHEELS, assert_one_line_refusal, run_capped

from kernelpack.cli import main as cli
from kernelpack.errors import SweepError, UsageError
from kernelpack.sweep import engine, store
from kernelpack.sweep.spec import load_spec
from kernelpack.sweep.store import ShardResult, Store
from kernelpack.walk.select import Selection
from kernelpack.walk.verify import Verified

SPEC = """\
matrix = [["2*x + y + 1", "-(x + 1)**2 * y"], ["1", "0"]]
axes = ["x", "y"]
target = 0.6
depth = 4
depth1 = 2
primes = [65537]
shifts = [[1, 4], [1, 4]]
dirs = [[1, 2], [1, 2]]
top_k = 2
shard_walks = 16
"""
# ten million shards of one walk each
LARGE = (
    SPEC.replace("shifts = [[1, 4], [1, 4]]", "shifts = [[1, 1000], [1, 1000]]")
    .replace("dirs = [[1, 2], [1, 2]]", "dirs = [[1, 10], [1, 1]]")
    .replace("shard_walks = 16", "shard_walks = 1")
    .replace("top_k = 2", "top_k = 1")
)


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "spec.toml"
    path.write_text(SPEC)
    return path


def _cap_and_detach() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_CAP, ADDRESS_SPACE_CAP))
    os.setsid()


def _peak_rss_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, in MiB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def _committed(out: Path) -> int:
    try:
        with sqlite3.connect(out / "sweep.sqlite", timeout=0.1) as db:
            return int(db.execute("SELECT count(*) FROM shards").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return 0


def test_ten_million_shards_commit_at_once_in_bounded_memory(tmp_path: Path) -> None:
    """The shards are generated and submitted lazily, a bounded window at a time: the first
    commit comes within seconds (the local cluster's start) and the driver's memory stays flat
    while shards commit, under the 2 GiB address-space cap. Before, the driver built every
    shard's task first: nothing committed in 45 s, 1.2 GB and growing."""
    path = tmp_path / "large.toml"
    path.write_text(LARGE)
    assert load_spec(path).shards == 10**7
    out = tmp_path / "out"
    command = [sys.executable, "-m", "kernelpack", "sweep", "run", str(path), "--out", str(out)]
    with (tmp_path / "stderr").open("w") as stderr:
        process = subprocess.Popen(
            [*command, "--backend", "numpy", "--workers", "1"],
            env={**os.environ, "PYTHONPATH": str(WHEELS)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_cap_and_detach,
        )
    started = time.monotonic()
    first = at_first = None
    try:
        while time.monotonic() - started < 30 and process.poll() is None:
            if first is None and _committed(out):
                first, at_first = time.monotonic() - started, _peak_rss_mib(process.pid)[0]
            if first is not None and time.monotonic() - started > first + 3:
                break
            time.sleep(0.05)
        assert process.poll() is None, (tmp_path / "stderr").read_text()[-2000:]
        rss, peak = _peak_rss_mib(process.pid)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its Dask workers
        process.wait()
    assert first is not None and first < 20, f"no commit in {time.monotonic() - started:.0f} s"
    assert at_first is not None and rss - at_first < 32 and peak < 400, (at_first, rss, peak)
    # what was committed is whole and once: shard s holds walk s, nothing outside a shard row
    with sqlite3.connect(out / "sweep.sqlite") as db:
        shards = db.execute("SELECT count(*), min(shard), sum(walks) FROM shards").fetchone()
        assert shards[0] >= 2 and shards[1] == 0 and shards[2] == shards[0]
        assert db.execute(
            "SELECT count(*) FROM walks WHERE walk != shard OR shard NOT IN (SELECT shard FROM shards)"
        ).fetchone() == (0,)


def _selection(walks: range) -> Selection:
    n = len(walks)
    return Selection(
        np.array(walks, dtype=np.int64),
        np.full(n, 0.5),
        np.linspace(1.0, 0.0, n),
        np.ones((n, 2), np.int64),
        np.full((n, 2), 2, np.int64),
        Verified(np.linspace(0.5, 0.0, n), np.full(n, 3), np.zeros(n, bool), ("",) * n),
    )


def _result(spec_path: Path, shard: int) -> ShardResult:
    start, stop = load_spec(spec_path).shard_range(shard)
    return ShardResult(shard, stop - start, None, _selection(range(start, stop)), 0.1, "w")


def _store(spec_path: Path, out: Path, shards: tuple[int, ...] = (0, 2)) -> Store:
    opened = Store.open(out, load_spec(spec_path))
    for shard in shards:
        assert opened.commit(_result(spec_path, shard), 1)
    return opened


def test_pending_reads_the_store_a_block_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shards still to do, in order, across blocks; a shard another run records while the
    iteration is under way is skipped when its block is reached."""
    monkeypatch.setattr(store, "PENDING_BLOCK", 4)
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("shard_walks = 16", "shard_walks = 1"))  # 64 shards
    opened = _store(path, tmp_path / "out", (0, 3, 4, 7, 8, 9, 10, 11, 63))
    pending = opened.pending(64)
    assert [next(pending) for _ in range(3)] == [1, 2, 5]
    assert opened.commit(_result(path, 13), 1)  # a concurrent run, two blocks ahead
    expected = [6, *range(12, 63)]
    expected.remove(13)
    assert list(pending) == expected
    opened.close()


def test_a_bounded_window_keeps_every_shard_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a window of two tasks, no more than two are in flight beyond those finished, a
    failed shard is retried inside the window, the shards a previous run recorded are not
    submitted, and every shard is recorded once."""
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(engine, "MIN_WINDOW", 2)
    monkeypatch.setattr(engine, "WINDOW_PER_THREAD", 1)
    real_run, real_client = engine.run_shard, engine._client
    failed = tmp_path / "failed"

    def flaky(spec_json: str, shard: int, backend: str) -> tuple[str, object, str]:
        status, payload, worker = real_run(spec_json, shard, backend)
        if shard == 3 and not failed.exists():
            failed.write_text(worker)
            return "failed", "injected", worker
        return status, payload, worker

    submitted: list[str] = []

    def client(options: engine.EngineOptions) -> object:
        made = real_client(options)
        submit = made.submit

        def recorded(*args: object, **kwargs: object) -> object:
            if str(kwargs["key"]).startswith("shard-"):  # the screens (each has its verify-)
                submitted.append(str(kwargs["key"]))
            return submit(*args, **kwargs)

        made.submit = recorded
        return made

    monkeypatch.setattr(engine, "run_shard", flaky)
    monkeypatch.setattr(engine, "_client", client)
    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("shard_walks = 16", "shard_walks = 5"))  # 13 shards
    spec = load_spec(path)
    commits: list[int] = []
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        opened = _store(path, tmp_path / "out", (0, 6, 12))  # a previous run's

        def on_commit(shard: int) -> None:
            commits.append(shard)
            # tasks finished before this one: len(commits) - 1 commits and at most one failure
            assert len(submitted) <= len(commits) - 1 + 1 + 2, (commits, submitted)

        options = engine.EngineOptions("numpy", scheduler=cluster.scheduler_address)
        summary = engine.run_sweep(spec, opened, options, on_commit)
        attempts = dict(opened.db.execute("SELECT shard, attempts FROM shards").fetchall())
        opened.close()
    resumed = [s for s in range(spec.shards) if s not in (0, 6, 12)]
    assert sorted(commits) == resumed and sorted(attempts) == list(range(spec.shards))
    assert attempts[3] == 2 and sum(attempts.values()) == spec.shards + 1
    assert sorted(submitted) == sorted([f"shard-{s}-1" for s in resumed] + ["shard-3-2"])
    assert summary["walks_this_run"] == sum(
        spec.shard_range(s)[1] - spec.shard_range(s)[0] for s in resumed
    )
    assert summary["walks_done"] == spec.walks and summary["failures_total"] == 1


@pytest.mark.parametrize(
    ("damage", "commands", "message"),
    [
        (b"\x8f\x13 not sqlite " * 300, ("run", "top"), "damaged (file is not a database)"),
        (b"", ("top",), "damaged (no such table: meta)"),
        (
            "UPDATE meta SET value = replace(value, '\"top_k\":2', '\"top_k\":3') WHERE key = 'spec'",
            ("run", "top"),
            "meta.spec hashes to",
        ),
        ("UPDATE meta SET value = '{\"matrix\": 1' WHERE key = 'spec'", ("run", "top"), "not JSON"),
        ("UPDATE meta SET value = '[1, 2]' WHERE key = 'spec'", ("top",), "a JSON object"),
        (
            "UPDATE meta SET value = replace(value, '\"shard_walks\":16', '\"shard_walks\":0') "
            "WHERE key = 'spec'",
            ("top",),
            "shard_walks = 0",
        ),
        ("DELETE FROM meta WHERE key = 'spec_hash'", ("run", "top"), "no spec_hash"),
        ("UPDATE meta SET value = '7' WHERE key = 'walks'", ("top",), "meta.walks"),
        ("DROP TABLE walks", ("top",), "no such table: walks"),
        ("UPDATE walks SET shifts = '[1, ' WHERE walk = 3", ("top",), "JSONDecodeError"),
        ("UPDATE walks SET est = 'x' WHERE walk = 3", ("top",), "where a number belongs"),
        ("UPDATE walks SET dirs = '[true]' WHERE walk = 3", ("top",), "list of integers"),
    ],
    ids=[
        "random-bytes",
        "empty",
        "spec-edited",
        "spec-not-json",
        "spec-a-list",
        "spec-bad-value",
        "no-hash",
        "walks-count",
        "no-walks-table",
        "shifts-not-json",
        "est-text",
        "dirs-not-ints",
    ],
)
def test_a_damaged_store_is_one_line_exit_2(
    tmp_path: Path, spec_path: Path, damage: str | bytes, commands: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "out"
    _store(spec_path, out).close()
    database = out / "sweep.sqlite"
    if isinstance(damage, bytes):
        for suffix in ("-wal", "-shm"):
            database.with_name(database.name + suffix).unlink(missing_ok=True)
        database.write_bytes(damage)
    else:
        with sqlite3.connect(database) as db:
            db.execute(damage)
    for command in commands:
        args = ["sweep", "top", str(out)] if command == "top" else ["sweep", "run"]
        if command == "run":
            args += [str(spec_path), "--out", str(out), "--backend", "numpy", "--workers", "1"]
        result = run_capped(args, timeout=20)
        assert_one_line_refusal(result)
        assert str(database) in result.stderr and message in result.stderr, result.stderr


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_a_store_that_is_not_a_file_is_refused(tmp_path: Path, spec_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    database = out / "sweep.sqlite"
    database.mkdir() if kind == "directory" else os.mkfifo(database)
    for args in (
        ["sweep", "run", str(spec_path), "--out", str(out), "--backend", "numpy"],
        ["sweep", "top", str(out)],
    ):
        result = run_capped(args, timeout=20)
        assert_one_line_refusal(result)
        assert f"{database}: not a regular file" in result.stderr, result.stderr


def test_a_walk_recorded_without_its_shard_is_damage(tmp_path: Path, spec_path: Path) -> None:
    """A shard row removed by hand while its walks stay: the rerun's commit meets the walks'
    primary key, which is damage (exit 2), not a traceback; nothing of the shard is written."""
    opened = _store(spec_path, tmp_path / "out")
    opened.db.execute("DELETE FROM shards WHERE shard = 2")
    with pytest.raises(UsageError, match=r"damaged \(UNIQUE constraint failed: walks.walk\)"):
        opened.commit(_result(spec_path, 2), 1)
    assert not opened.db.in_transaction
    assert opened.db.execute("SELECT count(*) FROM shards").fetchone() == (1,)
    opened.close()


def test_a_full_disk_is_reported_as_such_and_loses_nothing(tmp_path: Path, spec_path: Path) -> None:
    """SQLite rolls a transaction back itself on SQLITE_FULL; the ROLLBACK that followed
    unconditionally failed and its "no transaction is active" hid the cause. The error now
    names the full disk (exit 1), the shard is not recorded, and once there is room again the
    same shard commits once."""
    path = tmp_path / "spec.toml"
    path.write_text(
        SPEC.replace("shard_walks = 16", "shard_walks = 4000").replace(
            "shifts = [[1, 4], [1, 4]]", "shifts = [[1, 40], [1, 50]]"
        )
    )
    opened = _store(path, tmp_path / "out", ())
    pages = opened.db.execute("PRAGMA page_count").fetchone()[0]
    opened.db.execute(f"PRAGMA max_page_count = {pages + 2}")  # the disk as good as full
    with pytest.raises(SweepError, match=r"database or disk is full.*rerun the same command"):
        opened.commit(_result(path, 0), 1)
    assert not opened.db.in_transaction
    assert opened.progress() == (0, 0)
    assert opened.db.execute("SELECT count(*) FROM walks").fetchone() == (0,)
    opened.db.execute("PRAGMA max_page_count = 1073741823")  # room again
    assert opened.commit(_result(path, 0), 1)
    assert not opened.commit(_result(path, 0), 2)
    assert opened.progress() == (1, 4000)
    opened.close()


def test_a_locked_store_is_one_line_exit_1(
    tmp_path: Path,
    spec_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another process holding the write lock past the busy timeout: exit 1 (a rerun resumes),
    one line naming the database, from `run` and from a commit under way."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT", 0.2)
    out = tmp_path / "out"
    opened = _store(spec_path, out)
    holder = sqlite3.connect(out / "sweep.sqlite", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        status = cli.main(["sweep", "run", str(spec_path), "--out", str(out), "--backend", "numpy"])
        with pytest.raises(SweepError, match="database is locked"):
            opened.commit(_result(spec_path, 1), 1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert status == 1, err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{out / 'sweep.sqlite'}: database is locked" in err and "rerun" in err
    assert opened.commit(_result(spec_path, 1), 1)  # and once the lock is gone, it goes on
    opened.close()


def test_out_naming_a_file_is_one_line_exit_2(tmp_path: Path, spec_path: Path) -> None:
    for out in (tmp_path / "a-file", tmp_path / "a-file" / "below"):
        (tmp_path / "a-file").write_text("not a folder")
        result = run_capped(
            ["sweep", "run", str(spec_path), "--out", str(out), "--backend", "numpy"]
        )
        assert_one_line_refusal(result)
        assert f"--out {out}" in result.stderr


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--workers", "-1"), "--workers -1: expected a count of 1 or more"),
        (("--workers", "0"), "--workers 0: expected a count of 1 or more"),
        (("--retries", "-1"), "--retries -1: expected 0 or more"),
        (("--scheduler", "nothing"), "--scheduler 'nothing': missing port number"),
    ],
)
def test_bad_engine_options_are_one_line_exit_2(
    tmp_path: Path, spec_path: Path, option: tuple[str, str], message: str
) -> None:
    """--workers -1 used to start a LocalCluster of -1 workers and wait for it forever."""
    out = tmp_path / "out"
    result = run_capped(
        ["sweep", "run", str(spec_path), "--out", str(out), "--backend", "numpy", *option]
    )
    assert_one_line_refusal(result)
    assert message in result.stderr, result.stderr


def test_an_unreachable_scheduler_fails_within_seconds(tmp_path: Path, spec_path: Path) -> None:
    """Dask's own connect timeout is 30 s and ends in an OSError's traceback."""
    with socket.socket() as probe:  # a port where nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    started = time.monotonic()
    args = ["sweep", "run", str(spec_path), "--out", str(tmp_path / "out"), "--backend", "numpy"]
    result = run_capped([*args, "--scheduler", address], timeout=20)
    assert time.monotonic() - started < 15
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: --scheduler {address}: no Dask scheduler answered within 5 s (Timed out trying "
        f"to connect to {address} after 5 s); start one (`dask scheduler`) or check the address"
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("shifts = [[1, 9223372036854775807], [1, 4]]", "walks: over 2^63 - 1"),
        ("shifts = [[1, 9223372036854775808], [1, 4]]", "within int64"),
        ("primes = 100000000", "primes = 100000000: expected a count of 1..256"),
        ("shard_walks = 9223372036854775808", "shard_walks = 9223372036854775808: expected"),
    ],
)
def test_a_spec_beyond_int64_is_one_line_exit_2(tmp_path: Path, edit: str, message: str) -> None:
    """Walks are numbered in int64 and the prime count is the walker's: a spec past them used
    to fill memory (every shard's task) or search for primes for ever."""
    key = edit.split(" =")[0]
    path = tmp_path / "spec.toml"
    path.write_text(
        "".join(line for line in SPEC.splitlines(keepends=True) if not line.startswith(key))
        + edit
        + "\n"
    )
    result = run_capped(
        ["sweep", "run", str(path), "--out", str(tmp_path / "out"), "--backend", "numpy"],
        timeout=20,
    )
    assert_one_line_refusal(result)
    assert message in result.stderr and str(path) in result.stderr, result.stderr


def test_top_reads_the_folder_it_is_given_whatever_its_name(
    tmp_path: Path, spec_path: Path
) -> None:
    """`top` opened f"file:{path}?mode=ro": in a folder named a?b#c SQLite read (and created,
    writable) the file "a" beside it and reported no such table."""
    folder = tmp_path / "a?b#c"
    _store(spec_path, folder).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = run_capped(["sweep", "top", str(folder), "--json", "-k", "1"], timeout=20)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["top"][0]["walk"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("fifo", "is a FIFO, not a regular file"),
        ("/dev/zero", "is a device, not a regular file"),
        (b"target = 1\n# \xe9\n", "not UTF-8 text (at byte 13)"),
        ("x = " + "[" * 50000 + "]" * 50000 + "\n", "nested too deeply"),
        (SPEC.replace('"2*x + y + 1"', '"' + "+".join(["x"] * 30000) + '"'), "too deep to parse"),
        ("#" * (2 << 20), "over the 1048576-byte limit"),
    ],
    ids=["fifo", "device", "latin-1", "nested-arrays", "long-expression", "huge"],
)
def test_a_spec_file_that_is_no_spec_is_one_line_exit_2(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    """SPEC.toml was read with Path.read_text: a FIFO hung, /dev/zero filled memory; deep
    nesting ended in RecursionError's traceback from tomllib or Python's parser."""
    path = tmp_path / "spec.toml"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "/dev/zero":
        path = Path(content)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    args = ["sweep", "run", str(path), "--out", str(tmp_path / "out"), "--backend", "numpy"]
    result = run_capped(args, timeout=20)
    assert_one_line_refusal(result)
    assert f"{path}: " in result.stderr and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_lost_scheduler_is_one_line_and_loses_nothing(
    tmp_path: Path, spec_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler gone mid-sweep: every future in flight is cancelled and the client's
    worker list is empty (scheduler_info()["workers"] was a KeyError's traceback); now one
    SweepError (exit 1) on one line, the shards committed before it whole."""
    distributed = pytest.importorskip("distributed")
    import dask
    from distributed.utils import sync

    path = tmp_path / "spec.toml"
    path.write_text(SPEC.replace("shard_walks = 16", "shard_walks = 1"))  # 64 shards
    spec = load_spec(path)
    monkeypatch.setattr(engine, "MIN_WINDOW", 2)
    monkeypatch.setattr(engine, "WINDOW_PER_THREAD", 1)
    # the worker left behind retries its scheduler for the connect timeout: 1 s, not 30
    with (
        dask.config.set({"distributed.comm.timeouts.connect": "1s"}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
    ):
        opened = Store.open(tmp_path / "out", spec)

        def on_commit(shard: int) -> None:
            if shard == 2:
                sync(cluster.loop, cluster.scheduler.close)

        options = engine.EngineOptions("numpy", scheduler=cluster.scheduler_address)
        with pytest.raises(SweepError) as raised:
            engine.run_sweep(spec, opened, options, on_commit)
        done = opened.progress()
        opened.close()
    message = str(raised.value)
    assert message.startswith(f"sweep: lost the Dask scheduler at {cluster.scheduler_address}")
    assert "\n" not in message and "rerun the same command to resume" in message
    assert 3 <= done[0] < spec.shards and done[0] == done[1]


def test_a_store_of_schema_1_is_refused_in_one_line_saying_what_to_do(
    tmp_path: Path, spec_path: Path
) -> None:
    """A folder written before exact verification (no meta.schema, no exact columns): `run`
    (resuming) and `top` say which schema it holds and what to do, exit 2."""
    out = tmp_path / "out"
    _store(spec_path, out).close()
    database = out / "sweep.sqlite"
    with sqlite3.connect(database) as db:
        db.execute("DELETE FROM meta WHERE key = 'schema'")
        db.execute("DROP INDEX walks_by_exact")
        for column in ("delta_exact", "digits", "beyond", "note"):
            db.execute(f"ALTER TABLE walks DROP COLUMN {column}")
    for args in (
        ["sweep", "run", str(spec_path), "--out", str(out), "--backend", "numpy", "--workers", "1"],
        ["sweep", "top", str(out)],
    ):
        result = run_capped(args, timeout=20)
        assert_one_line_refusal(result)
        assert f"{database}: a sweep store of schema 1" in result.stderr, result.stderr
        assert "run the spec again into a new --out folder" in result.stderr
