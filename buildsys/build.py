"""``python -m buildsys build``: kernel_sources/ and arch_matrix.toml to device code and the index.

One compile job per module and target: hipcc per AMD target (device code only, one code object
each, from the hipified sources), nvcc per NVIDIA sm target (a cubin) and per PTX target. Jobs run
in parallel and go through the content-addressed cache (buildsys.cache), so a rebuild starts no
compiler unless a job's command, source or one of the headers it read changed. The objects are
then read with kernelpack.formats (target, kernels, resources), laid out by buildsys.index_writer
and written only when every job succeeded: an output never silently lacks a target.

A build limited by ``--targets`` or ``--vendor`` is a *shard*: its output folder also gets
``shard.json``, which ``python -m buildsys merge`` checks before recombining shards.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import posixpath
import re
import shutil
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpack._console import print_json, print_table, use_rich
from kernelpack.errors import KernelpackError, UsageError
from kernelpack.formats import read_code_object, read_cubin, read_ptx
from kernelpack.index import KernelResources

from . import REPO_ROOT
from .cache import BuildCache, key_of, sha256_hex
from .errors import BuildError, ToolchainError
from .index_writer import BuiltImage, ModuleSources, package_files, shard_manifest, write_output
from .matrix import Matrix, MatrixTarget, load_matrix
from .modules import (
    INCLUDE_DIR,
    KernelModule,
    SourceTree,
    inline_includes,
    parse_kernels,
    read_tree,
)
from .toolchain import Toolchain, amd_toolchain, cuda_toolchain

# The compile flags of each kind of image (recorded in the index); compile_argv adds the per-job
# parts: target, include folder, dependency file, output, and for hipcc -cuid.
FLAGS: dict[str, tuple[str, ...]] = {
    "code_object": ("--genco", "-O3", "--no-gpu-bundle-output"),
    "cubin": ("-cubin", "-O3"),
    "ptx": ("-ptx", "-O3"),
}
SUFFIX = {"code_object": "co", "cubin": "cubin", "ptx": "ptx"}
ENV_PREFIX = "KERNELPACK_BUILD_"


def package_version() -> str:
    """The version the wheels will carry: setuptools-scm's (as scikit-build-core computes it),
    else pyproject's fallback_version where there is no git checkout or no setuptools-scm."""
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    fallback: str = data["tool"]["setuptools_scm"]["fallback_version"]
    try:
        from setuptools_scm import get_version
    except ImportError:
        return fallback
    try:
        version: str = get_version(root=str(REPO_ROOT), fallback_version=fallback)
    except (LookupError, OSError):
        return fallback
    return version


@dataclass(frozen=True)
class BuildSettings:
    """Everything a build needs, resolved once by :func:`resolve_settings`.

    Order (later wins): the defaults here; the environment, ``KERNELPACK_BUILD_<OPTION>`` for each
    option (``KERNELPACK_BUILD_TARGETS=gfx942,sm_90``, ``KERNELPACK_BUILD_COMPRESS=0``), which is
    how CMake and CI pass settings through tools that do not forward arguments; the command line.
    """

    targets: tuple[str, ...] = ()  # empty: the whole matrix
    vendor: str | None = None  # "amd" or "nvidia": only that vendor's targets
    jobs: int = field(default_factory=lambda: os.cpu_count() or 1)
    out: Path = REPO_ROOT / "wheels" / "kernelpack"
    cache_dir: Path = REPO_ROOT / "build" / "cache"
    sources: Path = REPO_ROOT / "kernel_sources"
    matrix: Path | None = None
    compress: bool = True
    keep_going: bool = False
    provision: bool = False
    package_version: str = field(default_factory=package_version)
    flags: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: dict(FLAGS))

    @property
    def is_shard(self) -> bool:
        return bool(self.targets) or self.vendor is not None


def _targets(text: str, where: str) -> tuple[str, ...]:
    targets = tuple(t.strip() for t in text.split(",") if t.strip())
    if not targets:
        raise UsageError(f"{where}: no target given; name targets like gfx942,sm_90")
    return targets


def _vendor(text: str, where: str) -> str:
    if text not in ("amd", "nvidia"):
        raise UsageError(f"{where}: {text!r}: expected amd or nvidia")
    return text


def _jobs(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"{where}: {text!r}: expected a positive number of jobs")
    return int(text)


def _switch(text: str, where: str) -> bool:
    if text.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise UsageError(f"{where}: {text!r}: expected 1 or 0")
    return text.lower() in ("1", "true", "yes", "on")


def _path(text: str, where: str) -> Path:
    return Path(text)


def _text(text: str, where: str) -> str:
    return text


@dataclass(frozen=True)
class _Option:
    """One build option: its flag, the BuildSettings field it sets, how its text is read (None for
    an on/off switch, which also gets a --no- form) and its help."""

    flag: str
    metavar: str | None
    convert: Callable[[str, str], object]
    help: str

    @property
    def name(self) -> str:
        return self.flag[2:].replace("-", "_")

    @property
    def environment(self) -> str:
        return ENV_PREFIX + self.name.upper()


_OPTIONS: tuple[_Option, ...] = (
    _Option(
        "--targets", "T,...", _targets, "targets or families, comma-separated (default: the matrix)"
    ),
    _Option("--vendor", "VENDOR", _vendor, "only this vendor's targets: amd or nvidia"),
    _Option("--jobs", "N", _jobs, "parallel compile jobs (default: the number of cores)"),
    _Option(
        "--out", "DIR", _path, "output folder of _index.py and device/ (default: wheels/kernelpack)"
    ),
    _Option("--cache-dir", "DIR", _path, "compile cache (default: build/cache)"),
    _Option("--sources", "DIR", _path, "kernel sources (default: kernel_sources)"),
    _Option("--matrix", "FILE", _path, "target matrix (default: arch_matrix.toml)"),
    _Option("--compress", None, _switch, "zstd-compress the AMD bundles (CCOB; the default)"),
    _Option("--keep-going", None, _switch, "after a failed job, build the others anyway"),
    _Option(
        "--provision",
        None,
        _switch,
        "provision the AMD toolchain if none can build the targets (downloads over 1 GB)",
    ),
    _Option("--package-version", "VERSION", _text, "the version the index records"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The build options (each also read from KERNELPACK_BUILD_<OPTION>) and --json."""
    for option in _OPTIONS:
        if option.metavar is None:
            parser.add_argument(
                option.flag, dest=option.name, action=argparse.BooleanOptionalAction,
                help=f"{option.help} [{option.environment}]",
            )  # fmt: skip
        else:
            parser.add_argument(
                option.flag, dest=option.name, metavar=option.metavar,
                help=f"{option.help} [{option.environment}]",
            )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def resolve_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> BuildSettings:
    """BuildSettings from the defaults, the environment and parsed arguments (see its docstring)."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for option in _OPTIONS:
        given = getattr(args, option.name, None)
        if isinstance(given, bool):
            values[option.name] = given
        elif given is not None:
            values[option.name] = option.convert(given, option.flag)
        elif option.environment in environ:
            values[option.name] = option.convert(environ[option.environment], option.environment)
    return BuildSettings(**values)


# ---------------------------------------------------------------------------------------------
# Jobs


@dataclass(frozen=True)
class Job:
    module: KernelModule
    target: MatrixTarget

    @property
    def kind(self) -> str:
        return self.target.kind

    @property
    def tree_name(self) -> str:
        """Which source tree the job compiles: the hipified one for AMD, CUDA for NVIDIA."""
        return "hip" if self.kind == "code_object" else "cuda"

    @property
    def label(self) -> str:
        return f"{self.module.name} {self.target.target}"


@dataclass(frozen=True)
class Outcome:
    job: Job
    status: str  # "compiled", "cached", "failed" or "not run"
    seconds: float = 0.0
    image: BuiltImage | None = None
    message: str = ""


def hip_main(main: str) -> str:
    """The hipified file's tree path: the module's .cu becomes .hip (headers keep their names)."""
    return main[: -len(".cu")] + ".hip"


def compile_argv(
    job: Job, flags: Sequence[str], source: str, output: str, depfile: str
) -> list[str]:
    """The compiler command of one job, run in the module's folder of its source tree.

    Paths are relative to that folder, so neither the command nor the object names the machine's
    folders: compiled anywhere, the same source gives the same bytes.
    """
    include = ["-I", f"../{INCLUDE_DIR}"]
    if job.kind == "code_object":
        # -cuid: clang otherwise derives the translation unit's id from the output path, which
        # would make the object depend on where it was built.
        return [
            "hipcc", *flags, f"-cuid={job.module.name}", f"--offload-arch={job.target.target}",
            *include, "-Xclang", "-dependency-file", "-Xclang", depfile, "-Xclang", "-MT",
            "-Xclang", output, source, "-o", output,
        ]  # fmt: skip
    return [
        "nvcc", *flags, f"-arch={job.target.target}", *include, "-MMD", "-MF", depfile, source,
        "-o", output,
    ]  # fmt: skip


def read_depfile(text: str, folder: str) -> list[str]:
    """Tree paths from a Make-style dependency file written in the tree's ``folder``.

    Absolute paths are the toolchain's own headers (covered by the compiler's identity in the job
    key) and are left out.
    """
    _, _, prerequisites = text.replace("\\\n", " ").partition(":")
    paths = []
    for token in re.findall(r"(?:\\.|[^\s\\])+", prerequisites):
        path = re.sub(r"\\(.)", r"\1", token).replace("$$", "$")
        if not path.startswith("/"):
            paths.append(posixpath.normpath(posixpath.join(folder, path)))
    return sorted(set(paths))


class _Trees:
    """The CUDA and hipified source trees of one build, and their files on disk once needed.

    Lookups use the texts in memory; a folder is written only when a job must compile, once per
    build, into a fresh temporary folder (so concurrent builds never share one).
    """

    def __init__(self, trees: Mapping[str, SourceTree]) -> None:
        self.trees = trees
        self._hashes: dict[tuple[str, str], str | None] = {}
        self._folder: Path | None = None
        self._written: set[str] = set()
        self._lock = threading.Lock()

    def dependency_hash(self, tree: str, path: str) -> str | None:
        key = (tree, path)
        if key not in self._hashes:
            files = self.trees[tree]
            self._hashes[key] = sha256_hex(files[path].encode()) if path in files else None
        return self._hashes[key]

    def folder(self, tree: str) -> Path:
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="kernelpack-build-"))
            root = self._folder / tree
            if tree not in self._written:
                for path in self.trees[tree]:
                    target = root / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(self.trees[tree][path], encoding="utf-8")
                self._written.add(tree)
            return root

    def remove(self) -> None:
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The build


@dataclass(frozen=True)
class BuildResult:
    outcomes: list[Outcome]
    out: Path

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)


def build(settings: BuildSettings, *, progress: bool = True) -> BuildResult:
    """Build what the settings ask. The result lists every job's outcome; outputs are written only
    when every job succeeded (main_build turns a failure into BuildError after the summary)."""
    targets = _select_targets(settings)
    tree, modules = read_tree(settings.sources)
    cache = BuildCache(settings.cache_dir)
    hip_tree, hipify_diagnostics = hipify_tree(tree, modules, cache)
    for line in hipify_diagnostics:
        print(f"hipify: {line}", file=sys.stderr)
    sources = []
    for module in modules:
        cuda = inline_includes(tree, module.main)
        sources.append(
            ModuleSources(
                name=module.name,
                kernels=parse_kernels(cuda, module.main),
                cuda=cuda,
                hip=inline_includes(hip_tree, hip_main(module.main)),
            )
        )
    toolchains = _toolchains(targets, provision=settings.provision)
    jobs = [Job(m, t) for m in modules for t in targets]
    trees = _Trees({"cuda": tree, "hip": hip_tree})
    kernels = {s.name: s.kernels for s in sources}
    try:
        outcomes = _run_jobs(jobs, settings, cache, trees, toolchains, kernels, progress=progress)
    finally:
        trees.remove()
    result = BuildResult(outcomes, settings.out)
    if result.count("failed") or result.count("not run"):
        return result
    used_kinds = sorted({t.kind for t in targets})
    files, index = package_files(
        sources,
        [o.image for o in outcomes if o.image is not None],
        compress=settings.compress,
        version=settings.package_version,
        toolchains={tc.kind: f"{tc.name} {tc.version}" for tc in toolchains.values()},
        flags={kind: settings.flags[kind] for kind in used_kinds},
    )
    shard = shard_manifest(index, [t.target for t in targets]) if settings.is_shard else None
    write_output(settings.out, files, index, shard=shard)
    return result


def _select_targets(settings: BuildSettings) -> list[MatrixTarget]:
    matrix: Matrix = load_matrix(settings.matrix)
    if settings.targets:
        matrix = matrix.select(settings.targets)
    targets = [t for t in matrix.targets if settings.vendor in (None, t.vendor)]
    if not targets:
        raise UsageError(
            f"--vendor {settings.vendor}: the selected targets have none of that vendor"
        )
    return targets


def _toolchains(targets: Sequence[MatrixTarget], *, provision: bool) -> dict[str, Toolchain]:
    """The toolchain of each image kind the targets need; an unbuildable target is an error.

    An NVIDIA-only build never looks for the AMD toolchain, and an AMD-only build not for nvcc.
    """
    chosen: dict[str, Toolchain] = {}
    amd = [t.target for t in targets if t.vendor == "amd"]
    nvidia = [t.target for t in targets if t.vendor == "nvidia"]
    if amd:
        hip = amd_toolchain(targets=amd, provision=provision)
        _check_buildable(hip, amd)
        chosen["code_object"] = hip
    if nvidia:
        cuda = cuda_toolchain()
        if cuda is None:
            raise ToolchainError(
                f"no nvcc found (CUDA_HOME, /usr/local/cuda, PATH) to build {', '.join(nvidia)}; "
                "install the CUDA toolkit or build with --vendor amd"
            )
        _check_buildable(cuda, nvidia)
        chosen["cubin"] = chosen["ptx"] = cuda
    return chosen


def _check_buildable(toolchain: Toolchain, targets: Sequence[str]) -> None:
    missing = [t for t, ok in toolchain.buildable(targets).items() if not ok]
    if missing:
        raise ToolchainError(
            f"{toolchain.name} {toolchain.version} cannot build {', '.join(missing)}; "
            "leave them out with --targets, or use a newer toolchain (`python -m buildsys toolchain`)"
        )


def hipify_tree(
    tree: SourceTree, modules: Sequence[KernelModule], cache: BuildCache
) -> tuple[SourceTree, list[str]]:
    """Every source hipified, the modules' .cu files renamed to .hip, and hipify's diagnostics
    (``file:line:col: severity[code]: message``). Results are cached by content and by the
    translator's own sources, so an unchanged file costs a hash and a small read."""
    mains = {m.main for m in modules}
    hipified: dict[str, str] = {}
    diagnostics: list[str] = []
    for path in tree:
        key = key_of(
            {"hipify": HIPIFY_FINGERPRINT, "path": path, "source": sha256_hex(tree[path].encode())}
        )
        stored = cache.get_text("hipify", key)
        if stored is None:
            from .hipify import hipify_source  # only for a changed file

            result = hipify_source(tree[path], path)
            record: dict[str, Any] = {
                "text": result.text,
                "diagnostics": [d.format() for d in result.diagnostics],
            }
            cache.put_text("hipify", key, json.dumps(record, sort_keys=True))
        else:
            record = json.loads(stored)
        hipified[hip_main(path) if path in mains else path] = record["text"]
        diagnostics += record["diagnostics"]
    from .hipify import compat_headers  # the HIP compatibility layer, in the include folder

    hipified.update(compat_headers(INCLUDE_DIR))
    return SourceTree(hipified), diagnostics


def _hipify_fingerprint() -> str:
    """The hipify implementation's own sources: a change to the translator re-hipifies."""
    folder = Path(__file__).with_name("hipify")
    return sha256_hex(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.py"))))


HIPIFY_FINGERPRINT = _hipify_fingerprint()


def _run_jobs(
    jobs: Sequence[Job],
    settings: BuildSettings,
    cache: BuildCache,
    trees: _Trees,
    toolchains: Mapping[str, Toolchain],
    kernels: Mapping[str, Mapping[str, object]],
    *,
    progress: bool,
) -> list[Outcome]:
    """Look every job up in the cache; compile the misses in parallel, stopping at the first
    failure unless keep_going (jobs already running finish, and their objects are cached)."""
    outcomes: dict[Job, Outcome] = {}
    misses: list[tuple[Job, str]] = []
    for job in jobs:
        key = _job_key(job, settings, toolchains[job.kind], trees)
        found = cache.lookup(key, functools.partial(trees.dependency_hash, job.tree_name))
        if found is None:
            misses.append((job, key))
        else:
            outcomes[job] = _finish(
                job, "cached", float(found.info.get("seconds", 0.0)), found.data, kernels
            )
    reporter = _Reporter(len(jobs), len(misses), enabled=progress)
    if misses:
        with ThreadPoolExecutor(max_workers=settings.jobs) as pool:
            pending: dict[Future[Outcome], Job] = {}
            queue = list(misses)
            failed = False
            while queue or pending:
                while (
                    queue
                    and len(pending) < settings.jobs
                    and not (failed and not settings.keep_going)
                ):
                    job, key = queue.pop(0)
                    task = _compile_task(
                        job, key, settings, cache, trees, toolchains[job.kind], kernels
                    )
                    pending[pool.submit(task)] = job
                if not pending:
                    break
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    outcome = future.result()
                    del pending[future]
                    outcomes[outcome.job] = outcome
                    reporter.finished(outcome)
                    failed = failed or outcome.status == "failed"
            for job, _ in queue:
                outcomes[job] = Outcome(job, "not run", message="stopped after a failure")
    reporter.close()
    return [outcomes[job] for job in jobs]


def _job_key(job: Job, settings: BuildSettings, toolchain: Toolchain, trees: _Trees) -> str:
    source = job.module.main if job.tree_name == "cuda" else hip_main(job.module.main)
    argv = compile_argv(job, settings.flags[job.kind], posixpath.basename(source), "OUT", "DEPS")
    return key_of(
        {
            "compiler": toolchain.identity,
            "argv": argv,
            "source": source,
            "source_sha256": trees.dependency_hash(job.tree_name, source),
        }
    )


def _compile_task(
    job: Job,
    key: str,
    settings: BuildSettings,
    cache: BuildCache,
    trees: _Trees,
    toolchain: Toolchain,
    kernels: Mapping[str, Mapping[str, object]],
) -> Callable[[], Outcome]:
    def run() -> Outcome:
        source = job.module.main if job.tree_name == "cuda" else hip_main(job.module.main)
        folder = trees.folder(job.tree_name) / job.module.name
        output = f"{job.module.name}.{job.target.shard}.{SUFFIX[job.kind]}"
        argv = compile_argv(
            job, settings.flags[job.kind], posixpath.basename(source), output, f"{output}.d"
        )
        if toolchain.kind == "cuda":
            argv[0] = toolchain.tool("nvcc")
        started = time.monotonic()
        try:
            result = toolchain.run(argv, cwd=folder, check=False)
        except OSError as error:
            return Outcome(job, "failed", message=f"{argv[0]}: {error.strerror}")
        seconds = time.monotonic() - started
        if result.returncode != 0:
            message = (result.stderr + result.stdout).strip() or f"exit status {result.returncode}"
            return Outcome(job, "failed", seconds, message=message)
        data = (folder / output).read_bytes()
        dependencies = read_depfile((folder / f"{output}.d").read_text(), job.module.name)
        hashes = {p: h for p in dependencies if (h := trees.dependency_hash(job.tree_name, p))}
        outcome = _finish(job, "compiled", seconds, data, kernels)
        if outcome.status == "compiled":
            cache.store(key, hashes, data, {"seconds": round(seconds, 3)})
        return outcome

    return run


def read_kernels(kind: str, data: bytes, name: str) -> tuple[str, dict[str, KernelResources]]:
    """An object's target, as the matrix names it, and its kernels' resources (kernelpack.formats).

    PTX carries no resource figures before the driver compiles it: its kernels get zeros, and the
    warp size every NVIDIA GPU has.
    """
    if kind == "code_object":
        code_object = read_code_object(data, name)
        return str(code_object.target), code_object.resources()
    if kind == "cubin":
        cubin = read_cubin(data, name)
        return cubin.target, cubin.resources()
    ptx = read_ptx(data, name)
    unknown = KernelResources(
        registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=0
    )
    return ptx.compute_target, {entry: unknown.copy() for entry in ptx.entries}


def _finish(
    job: Job,
    status: str,
    seconds: float,
    data: bytes,
    kernels: Mapping[str, Mapping[str, object]],
) -> Outcome:
    """Read the object's kernels and check them against the module's source."""
    name = f"{job.module.name}.{job.target.shard}.{SUFFIX[job.kind]}"
    try:
        target, resources = read_kernels(job.kind, data, name)
    except KernelpackError as error:
        return Outcome(
            job, "failed", seconds, message=f"the compiler's output is unreadable: {error}"
        )
    if target != job.target.target:
        return Outcome(
            job, "failed", seconds, message=f"the object is for {target}, not {job.target.target}"
        )
    missing = sorted(set(kernels[job.module.name]) - set(resources))
    if missing:
        return Outcome(
            job,
            "failed",
            seconds,
            message=f"kernels {', '.join(missing)} of the source are not in the {job.target.target} "
            "object (left out by a preprocessor condition?)",
        )
    image = BuiltImage(
        job.module.name, job.target.vendor, job.target.target, job.kind, data, resources
    )
    return Outcome(job, status, seconds, image)


# ---------------------------------------------------------------------------------------------
# Progress and summary


class _Reporter:
    """A rich progress bar on a terminal, plain lines elsewhere (on stderr: stdout is the summary)."""

    def __init__(self, total: int, to_compile: int, *, enabled: bool) -> None:
        self.total = total
        self.to_compile = to_compile
        self.done = 0
        self.enabled = enabled and to_compile > 0
        self._bar: Any = None
        if not self.enabled:
            return
        if use_rich():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("compiling", total=to_compile)
        else:
            cached = total - to_compile
            print(f"build: {total} jobs, {cached} cached, {to_compile} to compile", file=sys.stderr)

    def finished(self, outcome: Outcome) -> None:
        if not self.enabled:
            return
        self.done += 1
        line = f"{outcome.job.label}: {outcome.status} in {outcome.seconds:.1f} s"
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=line)
            if outcome.status == "failed":
                self._bar.console.print(f"[red]{outcome.job.label} failed[/red]\n{outcome.message}")
        else:
            print(f"[{self.done}/{self.to_compile}] {line}", file=sys.stderr, flush=True)
            if outcome.status == "failed":
                print(outcome.message, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def _flags(resources: Mapping[str, KernelResources]) -> str:
    spills = sorted(k for k, r in resources.items() if r["spills"])
    scratch = sorted(k for k, r in resources.items() if r["scratch"])
    notes = []
    if spills:
        notes.append("SPILLS: " + ", ".join(spills))
    if scratch:
        notes.append("SCRATCH: " + ", ".join(scratch))
    return "; ".join(notes)


def summary_rows(result: BuildResult) -> list[dict[str, Any]]:
    rows = []
    for outcome in result.outcomes:
        row: dict[str, Any] = {
            "module": outcome.job.module.name,
            "target": outcome.job.target.target,
            "kind": outcome.job.kind,
            "status": outcome.status,
            "seconds": round(outcome.seconds, 3),
        }
        if outcome.image is not None:
            resources = outcome.image.kernels
            row.update(
                size=len(outcome.image.data),
                registers=max((r["registers"] for r in resources.values()), default=0),
                lds=max((r["lds"] for r in resources.values()), default=0),
                scratch=max((r["scratch"] for r in resources.values()), default=0),
                spills=sum(r["spills"] for r in resources.values()),
                flagged=_flags(resources),
                kernels={k: dict(r) for k, r in sorted(resources.items())},
            )
        if outcome.message:
            row["message"] = outcome.message
        rows.append(row)
    return rows


def print_summary(result: BuildResult, *, as_json: bool) -> None:
    rows = summary_rows(result)
    counts = {s: result.count(s) for s in ("compiled", "cached", "failed", "not run")}
    if as_json:
        print_json({"out": str(result.out), "jobs": rows, **counts})
        return
    table = []
    for row in rows:
        when = "cached" if row["status"] == "cached" else f"{row['seconds']:.1f} s"
        if row["status"] in ("failed", "not run"):
            when = row["status"].upper()
        table.append(
            (
                row["module"],
                row["target"],
                when,
                f"{row['size'] / 1024:.1f} KiB" if "size" in row else "",
                row.get("registers", ""),
                row.get("lds", ""),
                row.get("scratch", ""),
                row.get("spills", ""),
                row.get("flagged", ""),
            )
        )
    title = ", ".join(f"{n} {s}" for s, n in counts.items() if n) + f" -> {result.out}"
    print_table(
        f"build: {title}",
        ("module", "target", "compile", "size", "regs", "LDS", "scratch", "spills", "flagged"),
        table,
    )


def failure_error(result: BuildResult) -> BuildError:
    """One error naming each failed job with the first line of the compiler's message."""
    failed = [o for o in result.outcomes if o.status == "failed"]
    parts = []
    for outcome in failed:
        lines = outcome.message.splitlines() or [""]
        first = next((line for line in lines if "error" in line), lines[0])
        parts.append(f"{outcome.job.label}: {first}")
    not_run = result.count("not run")
    tail = f"; {not_run} jobs not run (--keep-going builds them)" if not_run else ""
    return BuildError(
        f"{len(failed)} of {len(result.outcomes)} compile jobs failed, nothing written to "
        f"{result.out}: " + " | ".join(parts) + tail
    )


def main_build(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    result = build(settings)
    print_summary(result, as_json=bool(getattr(args, "json", False)))
    if result.count("failed") or result.count("not run"):
        raise failure_error(result)
    return 0
