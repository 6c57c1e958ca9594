"""Running a sweep's shards through Dask distributed (docs/sweeps.md says why Dask).

The driver (this process) owns the results database; workers only compute. Each shard is one
Dask task returning the shard's kept walks (a few kilobytes), which the driver commits with the
shard's completion record in one transaction as soon as the task finishes, so a SIGKILL of
anything loses at most the shards in flight. On one machine the driver starts a LocalCluster:
one worker process per GPU (``--backend gpu``; worker i walks on GPU i, and holds the resource
``GPU=1``) or per CPU core (``--backend numpy``). ``--scheduler ADDRESS`` connects to a running
Dask scheduler instead (dask-jobqueue or dask-mpi start one under SLURM), unchanged otherwise.

Each shard is two tasks: :func:`run_shard` screens its walks (the GPU's float pass and
selection, kernelpack.walk.screen) and :func:`verify_shard`, which Dask runs once the screen is
done and hands its few kilobytes from worker to worker, verifies the kept walks exactly on a CPU
(kernelpack.walk.verify); the driver commits the verified shard. On one machine with
``--backend gpu`` the verifications run on CPU workers of their own (resource ``VERIFY``, the
cores the GPU workers leave), so the GPUs screen the next shards meanwhile; with ``--backend
numpy`` and on a ``--scheduler``'s cluster any worker takes them.

A task that fails (a GPU error, a lost worker) is reported and submitted again, away from the
worker where it failed when another exists, up to ``retries`` times.

The shards are generated and submitted lazily: at most a window of tasks (a few per worker
thread) is in flight, refilled as each finishes, and the shards still to do are read from the
store a block at a time, so the driver's memory does not grow with the number of shards and the
first commit comes as soon as the cluster has run one task. The store's check inside each
commit keeps every shard exactly once whatever the window holds (a retry, a concurrent run).
An unreachable ``--scheduler`` fails after ``connect_timeout`` seconds, not Dask's 30.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .._console import use_rich
from ..devices import detect
from ..devices.argument import device_name
from ..errors import KernelpackError, NoImageError, SweepError, UsageError
from ..walk import run, run_numpy
from ..walk.select import Selection
from ..walk.verify import Verified, verify_kept
from .spec import Spec
from .store import ShardResult, Store

WINDOW_PER_THREAD = 4  # tasks in flight per worker thread: a queue so that no worker waits
MIN_WINDOW = 16  # in flight at least, while a remote scheduler's workers are still joining
REFRESH_SECONDS = 2.0  # how often the worker list (and so the window) is read again
FAILURES_KEPT = 100  # failure lines kept for the summary (all are counted and printed)


class ShardError(SweepError):
    """A shard failed on every attempt (exit 1; a rerun resumes the sweep)."""


@dataclass(frozen=True)
class EngineOptions:
    backend: str = "gpu"  # "gpu" or "numpy"
    workers: int | None = None  # local workers; default: GPUs (gpu) or CPU cores (numpy)
    scheduler: str | None = None  # a running Dask scheduler's address
    retries: int = 2
    connect_timeout: float = 5.0  # seconds to reach --scheduler (Dask's own default is 30)
    verifiers: int | None = None  # local CPU workers verifying (gpu); default: the cores left
    # False: the screen alone, each kept walk stored with no exact delta and a note saying so;
    # for measuring what verification costs (bench/bench_sweep.py --verify), not a search
    verify: bool = True

    def __post_init__(self) -> None:
        if self.backend not in ("gpu", "numpy"):
            raise UsageError(f"--backend {self.backend!r}: expected gpu or numpy")
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise UsageError(
                f"--workers {self.workers}: expected a count of 1 or more (leave it out for one "
                "worker per GPU, or per CPU core with --backend numpy)"
            )
        if self.verifiers is not None and (
            isinstance(self.verifiers, bool)
            or not isinstance(self.verifiers, int)
            or self.verifiers < 1
        ):
            raise UsageError(
                f"--verifiers {self.verifiers}: expected a count of 1 or more (leave it out for "
                "the cores the GPU workers leave)"
            )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or self.retries < 0:
            raise UsageError(f"--retries {self.retries}: expected 0 or more")
        if not self.connect_timeout > 0:
            raise UsageError(f"connect_timeout {self.connect_timeout}: expected seconds > 0")


@functools.lru_cache(maxsize=4)
def _spec(spec_json: str) -> tuple[Spec, Any]:
    spec = Spec.from_json(spec_json)
    return spec, spec.program()


def _worker_gpu() -> str:
    """This worker's GPU, vendor-qualified ("cuda:1"): its position among the local workers
    (LocalCluster names them 0..n-1) in kernelpack's GPU list, modulo the GPUs there are."""
    from distributed import get_worker  # deferred: the sweep extra (Dask)

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
    from distributed import get_worker  # deferred: the sweep extra (Dask)

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
            result = run(program, shifts, dirs, device=_worker_gpu(), **arguments)
        else:
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
        return "failed", _one_line(f"{type(error).__name__}: {error}"), worker


def verify_shard(spec_json: str, screened: tuple[str, object, str]) -> tuple[str, object, str]:
    """The kept walks of a screened shard verified exactly (kernelpack.walk.verify), on a CPU
    worker: ("ok", ShardResult with exact measures, worker), or the screen's failure as it was,
    or ("failed", message, worker)."""
    status, payload, worker = screened
    if status != "ok":
        return screened
    try:
        spec, program = _spec(spec_json)
        result: ShardResult = payload  # type: ignore[assignment]
        started = time.perf_counter()
        hits, top = verify_kept(
            program, result.hits, result.top, spec.depth, spec.target, spec.min_delta
        )
        return (
            "ok",
            replace(
                result,
                hits=hits,
                top=top if top is not None else _empty(spec),
                verify_seconds=time.perf_counter() - started,
            ),
            worker,
        )
    except (KernelpackError, ValueError, RuntimeError, OSError) as error:
        return "failed", _one_line(f"verify: {type(error).__name__}: {error}"), worker


def _unverified(screened: tuple[str, object, str]) -> tuple[str, object, str]:
    """A screened shard committed as the screen left it (EngineOptions.verify False): every
    kept walk with no exact delta and a note that says why."""
    status, payload, worker = screened
    if status != "ok":
        return screened
    result: ShardResult = payload  # type: ignore[assignment]

    def marked(selection: Selection) -> Selection:
        n = len(selection)
        note = "not verified: the sweep ran the screen alone"
        nothing = Verified(np.full(n, np.nan), np.full(n, -1), np.zeros(n, dtype=bool), (note,) * n)
        return replace(selection, verified=nothing)

    hits = None if result.hits is None else marked(result.hits)
    return "ok", replace(result, hits=hits, top=marked(result.top)), worker


def _empty(spec: Spec) -> Any:
    return Selection.empty(spec.dim)


def _one_line(text: str) -> str:
    """A message of Dask's or a worker's on one line (Dask's hold newlines and links)."""
    return " ".join(text.split())


def _lost(client: Any, options: EngineOptions, error: BaseException) -> SweepError:
    where = f"at {options.scheduler}" if options.scheduler else "of the local cluster"
    return SweepError(
        f"sweep: lost the Dask scheduler {where} (client {client.status}; "
        f"{_one_line(f'{type(error).__name__}: {error}')}); the shards in flight are not "
        "recorded: rerun the same command to resume"
    )


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
        try:
            return distributed.Client(options.scheduler, timeout=options.connect_timeout)
        except ValueError as error:  # not an address
            raise UsageError(
                f"--scheduler {options.scheduler!r}: {error}; expected an address such as "
                "tcp://HOST:8786"
            ) from None
        except OSError as error:  # nothing answered (TimeoutError is an OSError)
            raise SweepError(
                f"--scheduler {options.scheduler}: no Dask scheduler answered within "
                f"{options.connect_timeout:g} s ({error}); start one (`dask scheduler`) or check "
                "the address"
            ) from None
    if options.backend == "gpu":
        count = options.workers or len(detect.detect_gpus())
        if count < 1:
            raise UsageError("sweep run --backend gpu: no GPU found; use --backend numpy")
        verifiers = options.verifiers or max(1, _cores() - count)
        try:
            cluster = _gpu_cluster(distributed, count, verifiers)
        except OSError as error:
            raise SweepError(
                f"sweep: could not start {count} + {verifiers} local Dask workers ({error}); "
                "pass fewer --workers or --verifiers"
            ) from None
        return distributed.Client(cluster)
    count = options.workers or _cores()
    try:
        cluster = distributed.LocalCluster(
            n_workers=count, threads_per_worker=1, processes=True, dashboard_address=None
        )
    except OSError as error:  # no processes, ports or files left for the workers
        raise SweepError(
            f"sweep: could not start {count} local Dask workers ({error}); pass fewer --workers"
        ) from None
    return distributed.Client(cluster)


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def _gpu_cluster(distributed: Any, gpus: int, verifiers: int) -> Any:
    """A local cluster of ``gpus`` GPU workers (named 0..gpus-1, resource GPU=1: worker i walks
    on GPU i) and ``verifiers`` CPU workers (resource VERIFY=1), one thread and process each."""

    def worker(resources: dict[str, int]) -> dict[str, Any]:
        options = {"nthreads": 1, "resources": resources, "memory_limit": "auto"}
        return {"cls": distributed.Nanny, "options": options}

    workers: dict[Any, dict[str, Any]] = {i: worker({"GPU": 1}) for i in range(gpus)}
    workers.update({f"verify-{j}": worker({"VERIFY": 1}) for j in range(verifiers)})
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": None}}
    return distributed.SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARN)


class Progress:
    """Walks done, triples per second and ETA: rich on a terminal, plain lines elsewhere."""

    def __init__(self, spec: Spec, done_walks: int) -> None:
        self.spec, self.done, self.started, self.new = spec, done_walks, time.monotonic(), 0
        self.last_line = 0.0
        self._bar: Any = None
        if use_rich():
            # deferred: rich is optional terminal output
            from rich.progress import BarColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as Bar  # deferred: optional terminal output

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


@dataclass
class _Tally:
    """What this run did, in constant memory: walks computed, the first and last commit time
    and the walks after the first (for the steady throughput), failures counted and the first
    FAILURES_KEPT of them."""

    walks: int = 0
    first: float | None = None
    last: float = 0.0
    walks_after_first: int = 0
    screen_seconds: float = 0.0
    verify_seconds: float = 0.0
    failed: int = 0
    failures: list[str] = field(default_factory=list)

    def committed(self, result: ShardResult) -> None:
        now, walks = time.perf_counter(), result.walks
        self.walks += walks
        self.screen_seconds += result.seconds
        self.verify_seconds += result.verify_seconds
        if self.first is None:
            self.first = now
        else:
            self.walks_after_first += walks
        self.last = now

    def failure(self, line: str) -> None:
        self.failed += 1
        if len(self.failures) < FAILURES_KEPT:
            self.failures.append(line)


def run_sweep(
    spec: Spec, store: Store, options: EngineOptions, on_commit: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Every shard not yet in the store, through Dask; returns a summary."""
    pending = store.pending(spec.shards)
    first = next(pending, None)
    progress = Progress(spec, store.progress()[1])
    tally = _Tally()
    started = time.perf_counter()
    try:
        if first is not None:
            shards = itertools.chain([first], pending)
            _run_shards(spec, store, options, shards, progress, tally, on_commit)
    finally:
        progress.close()
    seconds = time.perf_counter() - started
    shards_done, walks_done = store.progress()
    triples_per_walk = len(spec.primes) * spec.depth
    steady = None
    if tally.first is not None and tally.last > tally.first:
        steady = tally.walks_after_first * triples_per_walk / (tally.last - tally.first)
    return {
        "shards": spec.shards,
        "shards_done": shards_done,
        "walks": spec.walks,
        "walks_done": walks_done,
        "walks_this_run": tally.walks,
        "seconds": seconds,
        "triples_per_second": tally.walks * triples_per_walk / seconds if seconds else 0.0,
        "steady_triples_per_second": steady,
        "screen_seconds": tally.screen_seconds,
        "verify_seconds": tally.verify_seconds,
        "failures": tally.failures,
        "failures_total": tally.failed,
    }


def _run_shards(
    spec: Spec,
    store: Store,
    options: EngineOptions,
    shards: Iterator[int],
    progress: Progress,
    tally: _Tally,
    on_commit: Callable[[int], None] | None,
) -> None:
    """The shards through a bounded window of Dask tasks, each result committed as it comes."""
    client = _client(options)
    try:
        spec_json = spec.to_json()
        local_gpu = options.backend == "gpu" and not options.scheduler
        resources = {"GPU": 1} if local_gpu else None
        verifying = {"VERIFY": 1} if local_gpu else None
        in_flight: dict[str, tuple[int, int]] = {}  # task key -> (shard, attempt)
        queue = _distributed().as_completed()
        workers: list[str] = []
        window, refreshed = MIN_WINDOW, -math.inf

        def submit(shard: int, attempt: int, elsewhere: list[str] | None = None) -> None:
            screened = client.submit(
                run_shard,
                spec_json,
                shard,
                options.backend,
                key=f"shard-{shard}-{attempt}",
                resources=resources,
                pure=False,
                workers=elsewhere,
                allow_other_workers=elsewhere is not None,
            )
            key = f"verify-{shard}-{attempt}"
            in_flight[key] = (shard, attempt)
            if not options.verify:
                queue.add(client.submit(_unverified, screened, key=key, pure=False))
                return
            queue.add(
                client.submit(
                    verify_shard, spec_json, screened, key=key, resources=verifying, pure=False
                )
            )

        def refill() -> None:
            nonlocal workers, window, refreshed
            if time.monotonic() - refreshed >= REFRESH_SECONDS:
                try:
                    info = client.scheduler_info()["workers"]
                except (OSError, KeyError) as error:  # KeyError: an empty cache, disconnected
                    raise _lost(client, options, error) from None
                workers = list(info)
                threads = sum(int(w.get("nthreads", 1)) for w in info.values())
                window, refreshed = max(MIN_WINDOW, WINDOW_PER_THREAD * threads), time.monotonic()
            while len(in_flight) < window:
                shard = next(shards, None)
                if shard is None:
                    return
                submit(shard, 1)

        refill()
        if options.scheduler and not workers:
            progress.note(f"no Dask workers yet on {options.scheduler}; waiting for them to join")
        for future in queue:
            shard, attempt = in_flight.pop(future.key)
            try:
                status, payload, worker = future.result()
            except Exception as error:  # the worker died (Dask's KilledWorker) or was lost
                if client.status != "running":  # the scheduler is gone: no retry can run
                    raise _lost(client, options, error) from None
                status, payload, worker = (
                    "failed",
                    _one_line(f"{type(error).__name__}: {error}"),
                    "?",
                )
            if status == "ok":
                result: ShardResult = payload
                if store.commit(result, attempt):
                    tally.committed(result)
                    progress.add(result.walks)
                    if on_commit is not None:
                        on_commit(result.shard)
            else:
                tally.failure(f"shard {shard} failed on {worker}: {payload}")
                progress.note(f"shard {shard} failed on {worker}: {payload}")
                if attempt > options.retries:
                    raise ShardError(
                        f"sweep: shard {shard} failed {attempt} times, last: {payload}; "
                        "rerun the same command to resume once the cause is fixed"
                    )
                submit(shard, attempt + 1, [w for w in workers if w != worker] or None)
            refill()
    finally:
        _close(client, options)


def _close(client: Any, options: EngineOptions) -> None:
    """The client closed (and the local cluster with it). A client that lost its scheduler is
    closed quietly: Dask logs the traceback of the reconnection that closing cancels, on stderr,
    where the sweep's one line of error follows."""
    logger = logging.getLogger("distributed.client")
    level = logger.level
    if client.status != "running":
        logger.setLevel(logging.CRITICAL)
    try:
        client.close()
        if not options.scheduler and client.cluster is not None:
            client.cluster.close()
    finally:
        logger.setLevel(level)
