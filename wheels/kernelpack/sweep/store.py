"""A sweep's results: one SQLite database, DIR/sweep.sqlite, that users can query directly.

Tables::

    meta(key PRIMARY KEY, value)          -- spec (canonical JSON), spec_hash, walks, shards
    shards(shard PRIMARY KEY, walks, seconds, worker, attempts, finished)
    walks(walk PRIMARY KEY, shard, hit, top, est, delta, shifts, dirs)   -- shifts/dirs as JSON

A shard's kept walks and its row in ``shards`` are written in one transaction, so a shard is
either wholly there or not at all; the primary key on ``walk`` makes a duplicate impossible,
and a shard already recorded is never written again. SQLite's journal makes the transaction
survive a SIGKILL at any moment. Example query::

    sqlite3 DIR/sweep.sqlite "SELECT walk, delta, shifts, dirs FROM walks ORDER BY delta DESC LIMIT 5"
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..walk.select import Selection
from .spec import Spec

DATABASE = "sweep.sqlite"
PENDING_BLOCK = 4096  # shards whose records are read at once when listing those still to do
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shards (
    shard INTEGER PRIMARY KEY, walks INTEGER NOT NULL, seconds REAL NOT NULL,
    worker TEXT NOT NULL, attempts INTEGER NOT NULL, finished TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS walks (
    walk INTEGER PRIMARY KEY, shard INTEGER NOT NULL, hit INTEGER NOT NULL, top INTEGER NOT NULL,
    est REAL, delta REAL, shifts TEXT NOT NULL, dirs TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS walks_by_delta ON walks (delta DESC, walk);
"""


@dataclass(frozen=True)
class ShardResult:
    """What a worker returns for one shard (global walk indices)."""

    shard: int
    walks: int
    hits: Selection | None
    top: Selection
    seconds: float
    worker: str


class Store:
    """The results database of one sweep folder."""

    def __init__(self, folder: Path, connection: sqlite3.Connection) -> None:
        self.folder = folder
        self.db = connection

    @classmethod
    def open(cls, folder: Path, spec: Spec) -> Store:
        """The folder's database, created for ``spec`` or checked against it."""
        folder.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(folder / DATABASE, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(SCHEMA)
        db.execute("BEGIN IMMEDIATE")
        found = dict(db.execute("SELECT key, value FROM meta").fetchall())
        if not found:
            rows = {
                "spec": spec.to_json(),
                "spec_hash": spec.hash,
                "walks": str(spec.walks),
                "shards": str(spec.shards),
            }
            db.executemany("INSERT INTO meta VALUES (?, ?)", sorted(rows.items()))
        db.execute("COMMIT")
        if found and found.get("spec_hash") != spec.hash:
            db.close()
            raise UsageError(
                f"{folder}: holds a sweep of another spec (hash {found.get('spec_hash', '?')[:12]}, "
                f"this spec {spec.hash[:12]}); give another --out folder or restore that spec"
            )
        return cls(folder, db)

    @classmethod
    def read(cls, folder: Path) -> tuple[Store, Spec]:
        path = folder / DATABASE
        if not path.is_file():
            raise UsageError(
                f"{folder}: no sweep results here ({DATABASE} missing); run "
                "`python -m kernelpack sweep run SPEC.toml --out DIR` first"
            )
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
        spec = Spec.from_json(db.execute("SELECT value FROM meta WHERE key = 'spec'").fetchone()[0])
        return cls(folder, db), spec

    def pending(self, shards: int) -> Iterator[int]:
        """The shards below ``shards`` not recorded, in order; the records are read a block at a
        time as the iteration reaches them (memory independent of the count, and a shard that a
        concurrent run records meanwhile is skipped when its block is read)."""
        for low in range(0, shards, PENDING_BLOCK):
            high = min(shards, low + PENDING_BLOCK)
            done = {
                int(row[0])
                for row in self.db.execute(
                    "SELECT shard FROM shards WHERE shard >= ? AND shard < ?", (low, high)
                )
            }
            yield from (shard for shard in range(low, high) if shard not in done)

    def commit(self, result: ShardResult, attempts: int) -> bool:
        """Record a shard and its kept walks in one transaction; False if already recorded."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("SELECT 1 FROM shards WHERE shard = ?", (result.shard,)).fetchone():
                db.execute("ROLLBACK")
                return False
            rows: dict[int, list[object]] = {}
            for kind, selection in (("hit", result.hits), ("top", result.top)):
                if selection is None:
                    continue
                for i, walk in enumerate(selection.walk.tolist()):
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
                        ],
                    )
                    row[2 if kind == "hit" else 3] = 1
            db.executemany("INSERT INTO walks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows.values())
            db.execute(
                "INSERT INTO shards VALUES (?, ?, ?, ?, ?, datetime('now'))",
                (result.shard, result.walks, result.seconds, result.worker, attempts),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return True

    def top(self, k: int) -> list[tuple[int, float, float, list[int], list[int]]]:
        """The best k walks kept (delta descending, then walk ascending)."""
        rows = self.db.execute(
            "SELECT walk, delta, est, shifts, dirs FROM walks WHERE delta IS NOT NULL "
            "ORDER BY delta DESC, walk ASC LIMIT ?",
            (k,),
        ).fetchall()
        return [(w, d, e, json.loads(s), json.loads(r)) for w, d, e, s, r in rows]

    def progress(self) -> tuple[int, int]:
        """(shards done, walks done)."""
        shards, walks = self.db.execute(
            "SELECT count(*), coalesce(sum(walks), 0) FROM shards"
        ).fetchone()
        return int(shards), int(walks)

    def close(self) -> None:
        self.db.close()
