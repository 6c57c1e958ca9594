"""Running a sweep's shards through Dask distributed (docs/sweeps.md says why Dask).

The driver (this process) owns the results database; workers only compute. Each shard is one
Dask task returning the shard's kept walks (a few kilobytes), which the driver commits with the
shard's completion record in one transaction as soon as the task finishes, so a SIGKILL of
anything loses at most the shards in flight. On one machine the driver starts a LocalCluster:
one worker process per GPU (``--backend gpu``; worker i walks on GPU i, and holds the resource
``GPU=1``) or per CPU core (``--backend numpy``). ``--scheduler ADDRESS`` connects to a running
Dask scheduler instead (dask-jobqueue or dask-mpi start one under SLURM), unchanged otherwise.

A task that fails (a GPU error, a lost worker) is reported and submitted again, away from the
worker where it failed when another exists, up to ``retries`` times.
"""

from __future__ import annotations

import functools
import importlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import KernelpackError, NoImageError, UsageError
from .spec import Spec
from .store import ShardResult, Store


class ShardError(KernelpackError):
    """A shard failed on every attempt (exit 1; a rerun resumes the sweep)."""

    exit_code = 1


@dataclass(frozen=True)
class EngineOptions:
    backend: str = "gpu"  # "gpu" or "numpy"
    workers: int | None = None  # local workers; default: GPUs (gpu) or CPU cores (numpy)
    scheduler: str | None = None  # a running Dask scheduler's address
    retries: int = 2


@functools.lru_cache(maxsize=4)
def _spec(spec_json: str) -> tuple[Spec, Any]:
    spec = Spec.from_json(spec_json)
    return spec, spec.program()


def _worker_gpu() -> str:
    """This worker's GPU, vendor-qualified ("cuda:1"): its position among the local workers
    (LocalCluster names them 0..n-1) in kernelpack's GPU list, modulo the GPUs there are."""
    from distributed import get_worker

    from .. import detect
    from ..devices import device_name

    name = get_worker().name
    gpus = detect.detect_gpus()
    if not gpus:
        raise NoImageError(
            "no GPU found on this sweep worker; run the sweep where the workers see GPUs, or "
            "pass --backend numpy"
        )
    position = int(name) if isinstance(name, int) or str(name).isdigit() else 0
    return device_name(gpus[position % len(gpus)])


def run_shard(spec_json: str, shard: int, backend: str) -> tuple[str, object, str]:
    """One shard on this worker: ("ok", ShardResult, worker) or ("failed", message, worker)."""
    from distributed import get_worker

    worker = str(get_worker().address)
    try:
        spec, program = _spec(spec_json)
        start, stop = spec.shard_range(shard)
        shifts, dirs = spec.walk_arrays(start, stop)
        arguments: dict[str, Any] = {
            "primes": spec.primes,
            "depth": spec.depth,
            "depth1": spec.depth1,
            "depth2": spec.depth,
            "target": spec.target,
            "outputs": (),
            "min_delta": spec.min_delta,
            "top_k": spec.top_k,
        }
        started = time.perf_counter()
        if backend == "gpu":
            from ..walk import run

            result = run(program, shifts, dirs, device=_worker_gpu(), **arguments)
        else:
            from ..walk import run_numpy

            result = run_numpy(program, shifts, dirs, **arguments)
        seconds = time.perf_counter() - started
        top = result.top if result.top is not None else _empty(spec)
        hits = None if result.hits is None else result.hits.offset(start)
        return (
            "ok",
            ShardResult(shard, stop - start, hits, top.offset(start), seconds, worker),
            worker,
        )
    except (KernelpackError, ValueError, RuntimeError, OSError) as error:
        return "failed", f"{type(error).__name__}: {error}", worker


def _empty(spec: Spec) -> Any:
    from ..walk.select import Selection

    return Selection.empty(spec.dim)


def _distributed() -> Any:
    """Dask distributed, untyped (the package ships no type hints for these calls)."""
    return importlib.import_module("distributed")


def _client(options: EngineOptions) -> Any:
    try:
        distributed = _distributed()
    except ImportError:
        raise UsageError(
            "sweep: needs Dask distributed; pip install 'kernelpack[sweep]' (or dask distributed)"
        ) from None
    if options.scheduler:
        return distributed.Client(options.scheduler)
    if options.backend == "gpu":
        from .. import detect

        count = options.workers or len(detect.detect_gpus())
        if count < 1:
            raise UsageError("sweep run --backend gpu: no GPU found; use --backend numpy")
        resources = {"GPU": 1}
    else:
        import os

        count = options.workers or max(1, len(os.sched_getaffinity(0)))
        resources = {}
    cluster = distributed.LocalCluster(
        n_workers=count,
        threads_per_worker=1,
        processes=True,
        resources=resources,
        dashboard_address=None,
    )
    return distributed.Client(cluster)


class Progress:
    """Walks done, triples per second and ETA: rich on a terminal, plain lines elsewhere."""

    def __init__(self, spec: Spec, done_walks: int) -> None:
        from .._console import use_rich

        self.spec, self.done, self.started, self.new = spec, done_walks, time.monotonic(), 0
        self.last_line = 0.0
        self._bar: Any = None
        if use_rich():
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("sweep"),
                BarColumn(),
                TextColumn("{task.fields[text]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._bar.add_task(
                "sweep", total=spec.walks, completed=done_walks, text=""
            )
            self._bar.start()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.new * len(self.spec.primes) * self.spec.depth / elapsed
        left = self.spec.walks - self.done
        eta = left / (self.new / elapsed) if self.new else math.inf
        return f"{self.done:,}/{self.spec.walks:,} walks, {rate:.3g} triples/s, ETA {eta:.0f} s"

    def add(self, walks: int) -> None:
        self.done += walks
        self.new += walks
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, text=self.line())
        elif time.monotonic() - self.last_line >= 1.0 or self.done == self.spec.walks:
            self.last_line = time.monotonic()
            print(f"sweep: {self.line()}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        if self._bar is not None:
            self._bar.console.print(text)
        else:
            print(f"sweep: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def run_sweep(
    spec: Spec, store: Store, options: EngineOptions, on_commit: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Every shard not yet in the store, through Dask; returns a summary."""
    done = store.done()
    todo = [s for s in range(spec.shards) if s not in done]
    progress = Progress(spec, store.progress()[1])
    failures: list[str] = []
    started = time.perf_counter()
    computed = 0
    commits: list[tuple[float, int]] = []  # (time, walks) of each shard committed by this run
    if todo:
        client = _client(options)
        try:
            workers = list(client.scheduler_info()["workers"])
            spec_json = spec.to_json()
            resources = {"GPU": 1} if options.backend == "gpu" and not options.scheduler else None
            attempts = dict.fromkeys(todo, 1)
            futures = _distributed().as_completed(
                [
                    client.submit(
                        run_shard,
                        spec_json,
                        shard,
                        options.backend,
                        key=f"shard-{shard}-1",
                        resources=resources,
                        pure=False,
                    )
                    for shard in todo
                ]
            )
            tasks = {}
            for future in futures:
                try:
                    status, payload, worker = future.result()
                except Exception as error:  # the worker died (Dask's KilledWorker) or was lost
                    status, payload, worker = "failed", f"{type(error).__name__}: {error}", "?"
                if status == "ok":
                    result: ShardResult = payload
                    if store.commit(result, attempts[result.shard]):
                        computed += result.walks
                        commits.append((time.perf_counter(), result.walks))
                        progress.add(result.walks)
                        if on_commit is not None:
                            on_commit(result.shard)
                    continue
                shard = int(future.key.split("-")[1])
                failures.append(f"shard {shard} failed on {worker}: {payload}")
                progress.note(failures[-1])
                if attempts[shard] > options.retries:
                    raise ShardError(
                        f"sweep: shard {shard} failed {attempts[shard]} times, last: {payload}; "
                        "rerun the same command to resume once the cause is fixed"
                    )
                attempts[shard] += 1
                elsewhere = [w for w in workers if w != worker] or None
                tasks[shard] = client.submit(
                    run_shard,
                    spec_json,
                    shard,
                    options.backend,
                    key=f"shard-{shard}-{attempts[shard]}",
                    resources=resources,
                    pure=False,
                    workers=elsewhere,
                    allow_other_workers=True,
                )
                futures.add(tasks[shard])
        finally:
            client.close()
            if not options.scheduler and client.cluster is not None:
                client.cluster.close()
    progress.close()
    seconds = time.perf_counter() - started
    shards_done, walks_done = store.progress()
    rate = computed * len(spec.primes) * spec.depth / seconds if seconds else 0.0
    return {
        "shards": spec.shards,
        "shards_done": shards_done,
        "walks": spec.walks,
        "walks_done": walks_done,
        "walks_this_run": computed,
        "seconds": seconds,
        "triples_per_second": rate,
        "steady_triples_per_second": _steady(commits, len(spec.primes) * spec.depth),
        "failures": failures,
    }


def _steady(commits: list[tuple[float, int]], triples_per_walk: int) -> float | None:
    """Triples per second from the first commit to the last (the walks after the first): the
    throughput without the cluster's start and the workers' first module load."""
    if len(commits) < 2 or commits[-1][0] <= commits[0][0]:
        return None
    walks = sum(w for _, w in commits[1:])
    return walks * triples_per_walk / (commits[-1][0] - commits[0][0])
