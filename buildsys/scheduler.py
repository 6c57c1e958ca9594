"""Running the compile jobs: every job looked up in the cache first, the misses compiled in
parallel, stopping at the first failure unless asked to keep going.

An interrupt (SIGINT) stops every running compiler at once and starts no other; within a linked
module the first unit that fails stops its sibling units, as the link cannot happen without it.

A job's cache key covers the compiler's identity, its whole commands and its sources; the headers
they read are checked by the cache from the compiler's dependency output (buildsys.cache).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from .cache import BuildCache, key_of
from .jobs import Job, Outcome, compile_commands, finish
from .messages import with_project_paths
from .report import Reporter
from .toolchain import Toolchain
from .trees import SourceTrees, read_depfile

INTERRUPT_POLL_S = 0.1  # how often the main thread looks for a signal while compilers run


@dataclass(frozen=True)
class JobPlan:
    """What the scheduler needs to know of the build besides the jobs themselves."""

    flags: Mapping[str, Sequence[str]]  # per image kind
    extra: Callable[[Job], Sequence[str]]  # a job's defines, include folders and module flags
    toolchains: Mapping[str, Toolchain]  # per image kind
    jobs: int
    keep_going: bool
    # A tree path (``module/unit.cu``) as the user knows the file, for compiler messages.
    shown: Callable[[str], str] = str


def run_jobs(
    jobs: Sequence[Job],
    plan: JobPlan,
    cache: BuildCache,
    trees: SourceTrees,
    *,
    progress: bool,
) -> list[Outcome]:
    """Every job's outcome, in the order given (jobs already running when one fails finish, and
    their objects are cached). An interrupt kills the running compilers before it propagates."""
    outcomes: dict[Job, Outcome] = {}
    misses: list[tuple[Job, str]] = []
    for job in jobs:
        key = job_key(job, plan, trees)
        found = cache.lookup(key, functools.partial(trees.dependency_hash, job.tree_name))
        if found is None:
            misses.append((job, key))
        else:
            seconds = float(found.info.get("seconds", 0.0))
            outcomes[job] = finish(job, "cached", seconds, found.data, cache, found.info["sha256"])
    reporter = Reporter(len(jobs), len(misses), enabled=progress)
    slots = threading.BoundedSemaphore(plan.jobs)  # compiler processes at once (see _compile)
    interrupted = threading.Event()  # set on an interrupt: every compiler stops, none starts
    if misses:
        with ThreadPoolExecutor(max_workers=plan.jobs) as pool:
            pending: dict[Future[Outcome], Job] = {}
            queue = list(misses)
            failed = False
            try:
                while queue or pending:
                    while (
                        queue and len(pending) < plan.jobs and not (failed and not plan.keep_going)
                    ):
                        job, key = queue.pop(0)
                        pending[
                            pool.submit(
                                _compile,
                                job,
                                key,
                                plan,
                                cache,
                                trees,
                                slots,
                                reporter.step,
                                interrupted,
                            )
                        ] = job
                    if not pending:
                        break
                    # A timeout, so the main thread wakes to take a SIGINT that the kernel gave
                    # to a worker thread: a blocked lock wait in it would sleep on until a job
                    # ended, and the compilers of a long job would run on.
                    done, _ = wait(pending, timeout=INTERRUPT_POLL_S, return_when=FIRST_COMPLETED)
                    for future in done:
                        outcome = future.result()
                        del pending[future]
                        outcomes[outcome.job] = outcome
                        reporter.finished(outcome)
                        failed = failed or outcome.status == "failed"
            except BaseException:  # SIGINT: the pool's threads kill their compilers and return
                interrupted.set()
                reporter.close()
                raise
            for job, _ in queue:
                outcomes[job] = Outcome(job, "not run", message="stopped after a failure")
    reporter.close()
    return [outcomes[job] for job in jobs]


def _commands(
    job: Job, plan: JobPlan, output: str, depfile: str = ""
) -> list[tuple[list[str], str]]:
    return compile_commands(job, plan.flags[job.kind], plan.extra(job), output, depfile)


def job_key(job: Job, plan: JobPlan, trees: SourceTrees) -> str:
    """The cache key of a job. A one-file job's key is what it always was (its command and
    source), so linked modules leave the cached objects of other projects valid."""
    commands = [argv for argv, _ in _commands(job, plan, "OUT", "DEPS")]
    fields: dict[str, object] = {
        "compiler": plan.toolchains[job.kind].identity,
        "argv": commands[0] if len(commands) == 1 else commands,
        "source": job.source,
        "source_sha256": trees.dependency_hash(job.tree_name, job.source),
    }
    if job.module.linked:
        fields["sources"] = {p: trees.dependency_hash(job.tree_name, p) for p in job.sources}
    return key_of(fields)


LINK_HEARTBEAT_S = 300.0  # while a link runs, a line at least this often (CI logs stay alive)


@contextlib.contextmanager
def still(report: Callable[[Job, str], None], job: Job, doing: str, every: float) -> Iterator[None]:
    """While the body runs, ``report`` "still <doing> (<n> min)" every ``every`` seconds: a link of
    tens of minutes (candle's mmq_gguf for an AMD target) is never a silent stretch of a log."""
    done = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            report(job, f"still {doing} ({(time.monotonic() - started) / 60:.0f} min)")

    thread = threading.Thread(target=beat, name=f"still {job.label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _as_written(unit: str) -> str:
    """A unit as its author wrote it: the hipified copy ``dot.hip`` of an AMD job is ``dot.cu``."""
    return unit.removesuffix(".hip") + ".cu" if unit.endswith(".hip") else unit


def _compile(
    job: Job,
    key: str,
    plan: JobPlan,
    cache: BuildCache,
    trees: SourceTrees,
    slots: threading.Semaphore,
    report: Callable[[Job, str], None],
    interrupted: threading.Event,
) -> Outcome:
    """Run a job's commands; a linked module's units compile side by side, then link. Every
    compiler process holds one of the build's ``slots`` (``jobs`` of them), so a linked module
    uses idle slots without the build ever running more than ``jobs`` compilers at once.

    A linked module's job is the build's longest (candle's mmq_gguf: 11 units, then an LTO link
    of tens of minutes for one AMD target), so its steps are reported as they start and end
    (``report``): the units, each unit compiled, and the link. The first unit that fails stops
    the others (those running are killed, those waiting for a slot never start), as does
    ``interrupted``."""
    toolchain = plan.toolchains[job.kind]
    folder = trees.folder(job.tree_name) / job.module.name
    started = time.monotonic()
    units_done: list[str] = []
    lock = threading.Lock()
    unit_failed = threading.Event()

    def stopped() -> bool:
        return interrupted.is_set() or unit_failed.is_set()

    def run(command: tuple[list[str], str]) -> str | None:
        """'' when the command succeeded, None when it was stopped, else what went wrong."""
        argv = command[0]
        if toolchain.kind == "cuda":
            argv[0] = toolchain.tool(argv[0])
        with slots:
            if stopped():
                return None
            try:
                result = toolchain.run(
                    argv, cwd=folder, check=False, tmpdir=trees.temporary, stopped=stopped
                )
            except OSError as error:
                unit_failed.set()
                return f"{argv[0]}: {error.strerror}"
        if result.returncode != 0 and stopped():
            return None
        if result.returncode == 0:
            if job.module.linked and command[1]:  # a unit (a link writes no depfile)
                with lock:
                    units_done.append(argv[-3])
                    count = len(units_done)
                seconds = time.monotonic() - started
                unit = _as_written(argv[-3])
                report(job, f"unit {unit} compiled ({count}/{len(units)}, {seconds:.0f} s)")
            return ""
        unit_failed.set()
        message = (result.stderr + result.stdout).strip() or f"exit status {result.returncode}"
        if job.module.linked:
            step = argv[-3] if command[1] else "link"
            message = f"{step} of the linked module {job.module.name}: {message}"
        return with_project_paths(message, job.module.name, plan.shown, folder.parent.resolve())

    *units, last = _commands(job, plan, job.output)
    dependencies: list[str] = []
    for batch in [units, [last]] if units else [[last]]:
        if units and batch is units:
            names = ", ".join(_as_written(argv[-3]) for argv, _ in units)
            report(job, f"compiling its {len(units)} units side by side ({names})")
        elif units:
            linker = "nvlink" if job.kind == "cubin" else "clang's LTO link (lld)"
            report(
                job,
                f"linking its {len(units)} units into one image with {linker}: the step that "
                "waits for them all, and for a large module the longest",
            )
        if len(batch) == 1 and units:  # the link: minutes for a large module, said as it goes
            with still(report, job, f"linking its {len(units)} units", LINK_HEARTBEAT_S):
                problems = [run(batch[0])]
        elif len(batch) == 1:
            problems = [run(batch[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(batch)) as unit_pool:
                problems = list(unit_pool.map(run, batch))
        problem = next((p for p in problems if p), "")
        if not problem and None in problems:
            problem = "stopped: the build was interrupted"
        if problem:
            stopped_units = problems.count(None)
            if stopped_units and unit_failed.is_set():
                problem += f" ({stopped_units} other unit(s) stopped: the link cannot happen)"
            return Outcome(job, "failed", time.monotonic() - started, message=problem)
        for _, depfile in batch:
            if depfile:
                dependencies += read_depfile((folder / depfile).read_text(), job.module.name)
    seconds = time.monotonic() - started
    data = (folder / job.output).read_bytes()
    hashes = {p: h for p in dependencies if (h := trees.dependency_hash(job.tree_name, p))}
    outcome = finish(job, "compiled", seconds, data, cache)
    if outcome.status == "compiled":
        cache.store(key, hashes, data, {"seconds": round(seconds, 3)})
    return outcome
