"""A sweep's results: one SQLite database, DIR/sweep.sqlite, that users can query directly.

Tables (schema 2)::

    meta(key PRIMARY KEY, value)          -- schema, spec (canonical JSON), spec_hash, walks, shards
    shards(shard PRIMARY KEY, walks, seconds, worker, attempts, finished)
    walks(walk PRIMARY KEY, shard, hit, top, est, delta, shifts, dirs,   -- shifts/dirs as JSON
          delta_exact, digits, beyond, note)

``delta`` is the GPU screen's, ``delta_exact`` and ``digits`` the exact measures of the walk
(kernelpack.walk.verify), recorded with the shard; where no exact delta can be had they are
NULL and ``note`` says why, and ``beyond`` is 1 for a walk whose p/q agrees with the target
past its resolution (it ranks first). ``hit`` means the exact delta reached ``min_delta``.
A store of schema 1 (before exact verification: no ``meta.schema``) is refused in one line
that says what to do (:data:`SCHEMA_VERSION`).

A shard's kept walks and its row in ``shards`` are written in one transaction, so a shard is
either wholly there or not at all; the primary key on ``walk`` makes a duplicate impossible,
and a shard already recorded is never written again. SQLite's journal makes the transaction
survive a SIGKILL at any moment. Example query::

    sqlite3 DIR/sweep.sqlite "SELECT walk, delta_exact, digits, shifts, dirs FROM walks \
        ORDER BY beyond DESC, delta_exact DESC, walk LIMIT 5"

The database is the user's file and read as untrusted: ``meta.spec`` is checked as a spec file is
and against ``meta.spec_hash``, every row read is checked for its type, and every SQLite failure
becomes one error (:func:`_refusal`): a damaged file or a folder that cannot be used is bad input
(exit 2), a lock held too long, a full disk or an I/O error a failure of the work (exit 1) whose
rerun resumes. A failed transaction is rolled back only when SQLite has not already done so, so
its own error (``database or disk is full``) is the one reported.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import KernelpackError, SweepError, UsageError
from ..walk.select import Selection
from .spec import Spec

DATABASE = "sweep.sqlite"
SCHEMA_VERSION = "2"  # meta.schema; 1 (no such key) held the screen's deltas only
META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
SCHEMA = """
CREATE TABLE IF NOT EXISTS shards (
    shard INTEGER PRIMARY KEY, walks INTEGER NOT NULL, seconds REAL NOT NULL,
    worker TEXT NOT NULL, attempts INTEGER NOT NULL, finished TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS walks (
    walk INTEGER PRIMARY KEY, shard INTEGER NOT NULL, hit INTEGER NOT NULL, top INTEGER NOT NULL,
    est REAL, delta REAL, shifts TEXT NOT NULL, dirs TEXT NOT NULL,
    delta_exact REAL, digits INTEGER, beyond INTEGER NOT NULL, note TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS walks_by_exact ON walks (beyond DESC, delta_exact DESC, walk);
"""
# the ranking of kernelpack.walk.verify.rank_key (SQLite sorts NULL last when descending)
RANKED = "ORDER BY beyond DESC, delta_exact DESC, walk ASC"
# SQLite's own files for DATABASE: each must be a regular file when present (a FIFO blocks)
FILES = ("", "-wal", "-shm", "-journal")
BUSY_TIMEOUT = 10.0  # seconds a write waits for another writer (a concurrent run's commit)
PENDING_BLOCK = 4096  # shards whose records are read at once when listing those still to do
# SQLite's primary result codes, by what they mean to the user
_DAMAGED = {
    sqlite3.SQLITE_NOTADB,
    sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_ERROR,  # no such table or column: not our schema
    sqlite3.SQLITE_CONSTRAINT,  # a walk recorded without its shard
    sqlite3.SQLITE_MISMATCH,
    sqlite3.SQLITE_SCHEMA,
    sqlite3.SQLITE_FORMAT,
    sqlite3.SQLITE_RANGE,
}
_UNUSABLE = {sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM}
_LOCKED = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}


@dataclass(frozen=True)
class Kept:
    """One kept walk as the store holds it: the screen's delta and estimate, the exact delta
    and digits (None where none can be had, with the note saying why), beyond the target."""

    walk: int
    delta: float
    est: float
    shift: list[int]
    dir: list[int]
    delta_exact: float | None
    digits: int | None
    beyond: bool
    note: str


@dataclass(frozen=True)
class ShardResult:
    """What a worker returns for one shard (global walk indices); the driver commits it once
    its selections carry their exact measures (kernelpack.walk.verify)."""

    shard: int
    walks: int
    hits: Selection | None
    top: Selection
    seconds: float
    worker: str
    verify_seconds: float = 0.0  # the CPU time its verification took (the summary's sum)


def _damaged(path: Path, what: str) -> UsageError:
    return UsageError(
        f"{path}: damaged ({what}); move it away and rerun the sweep, or give another --out folder"
    )


def _refusal(path: Path, error: sqlite3.Error) -> KernelpackError:
    """What a SQLite failure means to the user, in one line with what to do."""
    code = (getattr(error, "sqlite_errorcode", None) or 0) & 0xFF
    if code in _LOCKED:
        return SweepError(
            f"{path}: {error} (held by another process for over {BUSY_TIMEOUT:g} s); let that "
            "process finish or stop it, then rerun the same command to resume"
        )
    if code == sqlite3.SQLITE_FULL:
        return SweepError(
            f"{path}: {error}; the shard being written was not recorded: free space and rerun "
            "the same command to resume"
        )
    if code in _UNUSABLE:
        return UsageError(
            f"{path}: cannot be opened or written ({error}); give a folder you can write"
        )
    if code in _DAMAGED or isinstance(error, sqlite3.IntegrityError):
        return _damaged(path, str(error))
    return SweepError(f"{path}: {error}; rerun the same command to resume once the cause is fixed")


@contextlib.contextmanager
def _guard(path: Path) -> Iterator[None]:
    """SQLite's failures, and rows that are not what this module wrote, as kernelpack errors."""
    try:
        yield
    except KernelpackError:
        raise
    except sqlite3.Error as error:
        raise _refusal(path, error) from error
    except (ValueError, TypeError, KeyError, RecursionError) as error:  # a row of other types
        raise _damaged(path, f"{type(error).__name__}: {error}") from error


@contextlib.contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE .. COMMIT; on any failure a ROLLBACK, unless SQLite has already rolled
    the transaction back itself (as it does on a full disk), so that its error is the one seen."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # the first error is the one to report
                db.execute("ROLLBACK")
        raise


def _check_files(path: Path) -> None:
    for suffix in FILES:
        name = path.with_name(path.name + suffix)
        try:
            mode = name.stat().st_mode
        except FileNotFoundError:
            continue
        except OSError as error:
            raise UsageError(f"{name}: cannot be read ({error.strerror})") from None
        if not stat.S_ISREG(mode):
            raise UsageError(f"{name}: not a regular file; move it away or give another --out")


def _check_schema(path: Path, meta: dict[object, object]) -> None:
    """A store of another schema, in one line with what to do (exit 2)."""
    found = meta.get("schema", "1")
    if found != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: a sweep store of schema {found!s:.20} (the GPU screen's deltas only); this "
            f"kernelpack records exact deltas (schema {SCHEMA_VERSION}): run the spec again into "
            "a new --out folder, or use the kernelpack that wrote it to list its walks"
        )


def _stored_spec(path: Path, meta: dict[object, object]) -> Spec:
    """The spec recorded in ``meta``, checked as a spec file is and against its hash."""
    text, digest = meta.get("spec"), meta.get("spec_hash")
    if not isinstance(text, str) or not isinstance(digest, str):
        raise _damaged(path, "meta has no spec or no spec_hash")
    try:
        spec = Spec.from_json(text, "meta.spec")
    except UsageError as error:
        raise _damaged(path, str(error)) from None
    if spec.hash != digest:
        raise _damaged(
            path, f"meta.spec hashes to {spec.hash[:12]}, meta.spec_hash is {digest[:12]!r}"
        )
    if meta.get("walks") != str(spec.walks) or meta.get("shards") != str(spec.shards):
        raise _damaged(path, "meta.walks or meta.shards disagrees with meta.spec")
    return spec


class Store:
    """The results database of one sweep folder."""

    def __init__(self, folder: Path, connection: sqlite3.Connection) -> None:
        self.folder = folder
        self.path = folder / DATABASE
        self.db = connection

    @classmethod
    def open(cls, folder: Path, spec: Spec) -> Store:
        """The folder's database, created for ``spec`` or checked against it."""
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise UsageError(
                f"--out {folder}: exists and is not a folder; give a folder (created if missing)"
            ) from None
        except OSError as error:
            raise UsageError(f"--out {folder}: cannot create it ({error.strerror})") from None
        path = folder / DATABASE
        _check_files(path)
        with _guard(path):
            db = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=FULL")
                db.executescript(META)
                with _transaction(db):
                    found = dict(db.execute("SELECT key, value FROM meta").fetchall())
                    if found:
                        _check_schema(path, found)
                    for statement in SCHEMA.split(";"):
                        db.execute(statement)
                    if not found:
                        rows = {
                            "schema": SCHEMA_VERSION,
                            "spec": spec.to_json(),
                            "spec_hash": spec.hash,
                            "walks": str(spec.walks),
                            "shards": str(spec.shards),
                        }
                        db.executemany("INSERT INTO meta VALUES (?, ?)", sorted(rows.items()))
                if found and _stored_spec(path, found).hash != spec.hash:
                    raise UsageError(
                        f"{folder}: holds a sweep of another spec (hash {found['spec_hash'][:12]}, "
                        f"this spec {spec.hash[:12]}); give another --out folder or restore that spec"
                    )
            except BaseException:
                db.close()
                raise
        return cls(folder, db)

    @classmethod
    def read(cls, folder: Path) -> tuple[Store, Spec]:
        path = folder / DATABASE
        if not path.exists():
            raise UsageError(
                f"{folder}: no sweep results here ({DATABASE} missing); run "
                "`python -m kernelpack sweep run SPEC.toml --out DIR` first"
            )
        _check_files(path)
        with _guard(path):
            uri = f"{path.resolve().as_uri()}?mode=ro"
            db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=BUSY_TIMEOUT)
            try:
                meta = dict(db.execute("SELECT key, value FROM meta"))
                spec = _stored_spec(path, meta)
                _check_schema(path, meta)
            except BaseException:
                db.close()
                raise
        return cls(folder, db), spec

    def pending(self, shards: int) -> Iterator[int]:
        """The shards below ``shards`` not recorded, in order; the records are read a block at a
        time as the iteration reaches them (memory independent of the count, and a shard that a
        concurrent run records meanwhile is skipped when its block is read)."""
        for low in range(0, shards, PENDING_BLOCK):
            high = min(shards, low + PENDING_BLOCK)
            with _guard(self.path):
                done = {
                    int(row[0])
                    for row in self.db.execute(
                        "SELECT shard FROM shards WHERE shard >= ? AND shard < ?", (low, high)
                    )
                }
            yield from (shard for shard in range(low, high) if shard not in done)

    def commit(self, result: ShardResult, attempts: int) -> bool:
        """Record a shard and its kept walks, verified, in one transaction; False if already
        recorded."""
        for selection in (result.hits, result.top):
            if selection is not None and len(selection) and selection.verified is None:
                raise ValueError(f"shard {result.shard}: kept walks not verified exactly")
        db = self.db
        with _guard(self.path), _transaction(db):
            if db.execute("SELECT 1 FROM shards WHERE shard = ?", (result.shard,)).fetchone():
                return False
            rows: dict[int, list[object]] = {}
            for kind, selection in (("hit", result.hits), ("top", result.top)):
                if selection is None or selection.verified is None:
                    continue
                exact = selection.verified
                for i, walk in enumerate(selection.walk.tolist()):
                    delta_exact = float(exact.delta[i])
                    row = rows.setdefault(
                        walk,
                        [
                            walk,
                            result.shard,
                            0,
                            0,
                            float(selection.est[i]),
                            float(selection.delta[i]),
                            json.dumps(selection.shifts[i].tolist()),
                            json.dumps(selection.dirs[i].tolist()),
                            None if math.isnan(delta_exact) else delta_exact,
                            None if exact.digits[i] < 0 else int(exact.digits[i]),
                            int(exact.beyond[i]),
                            exact.notes[i],
                        ],
                    )
                    row[2 if kind == "hit" else 3] = 1
            db.executemany(
                "INSERT INTO walks (walk, shard, hit, top, est, delta, shifts, dirs, delta_exact, "
                "digits, beyond, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows.values(),
            )
            db.execute(
                "INSERT INTO shards VALUES (?, ?, ?, ?, ?, datetime('now'))",
                (result.shard, result.walks, result.seconds, result.worker, attempts),
            )
        return True

    def top(self, k: int) -> list[Kept]:
        """The best k walks kept, by kernelpack.walk.verify's ranking (:data:`RANKED`)."""
        with _guard(self.path):
            rows = self.db.execute(
                "SELECT walk, delta, est, shifts, dirs, delta_exact, digits, beyond, note "
                f"FROM walks {RANKED} LIMIT ?",
                (k,),
            ).fetchall()
            return [
                Kept(
                    _int(w),
                    _real(d),
                    _real(e),
                    _ints(s),
                    _ints(r),
                    None if x is None else _real(x),
                    None if g is None else _int(g),
                    bool(_int(b)),
                    _text(n),
                )
                for w, d, e, s, r, x, g, b, n in rows
            ]

    def progress(self) -> tuple[int, int]:
        """(shards done, walks done)."""
        with _guard(self.path):
            shards, walks = self.db.execute(
                "SELECT count(*), coalesce(sum(walks), 0) FROM shards"
            ).fetchone()
            return _int(shards), _int(walks)

    def close(self) -> None:
        self.db.close()


def _int(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"{value!r:.40} where an integer belongs")
    return value


def _real(value: object) -> float:
    """A REAL column: SQLite stores NaN as NULL."""
    if value is None:
        return float("nan")
    if not isinstance(value, (int, float)):
        raise TypeError(f"{value!r:.40} where a number belongs")
    return float(value)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r:.40} where a text belongs")
    return value


def _ints(text: object) -> list[int]:
    """A JSON list of integers (shifts, dirs)."""
    if not isinstance(text, str):
        raise TypeError(f"{text!r:.40} where a JSON list belongs")
    value = json.loads(text)
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{text!r:.40} where a JSON list of integers belongs")
    return value
