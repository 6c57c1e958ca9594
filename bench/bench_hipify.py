"""Real CUDA code through our hipify and through hipify-perl: which files compile for which AMD
targets, measured in one run, with nvcc's result on the same files beside them.

    python bench/bench_hipify.py --corpus /work/corpus [--targets gfx90a,gfx942,gfx1100,gfx1201]
        [--projects candle-kernels,...] [--jobs 2] [--json OUT] [--kernels]
    python bench/bench_hipify.py --corpus /work/corpus --select-programs HeCBench

The corpus (third-party code, never in the repository) is described by docs/hipify-corpus.toml:
repository, commit and files per project; fetch each repository at its commit into
``DIR/<folder>``. Per project, every source under its root is translated by each tool into a
scratch tree (relative includes keep working); each listed file is then compiled:

- nvcc: ``nvcc -cubin -arch=sm_90`` (the NVIDIA reference: a file nvcc cannot build is not counted);
- ours and hipify-perl: ``hipcc --cuda-host-only -c`` once, and ``--cuda-device-only`` for all the
  targets in one call, per target only when that call fails. Both get ``-DUSE_ROCM``; ours also
  gets ``-I buildsys/hipify/compat`` (the layer the builder ships); hipify-perl has no such layer;
- a project's hand-written HIP port of a file, where it has one (``hand_port`` in the manifest:
  HeCBench's ``src/<name>-hip/`` beside ``src/<name>-cuda/``), compiled where it lies with the
  flags and targets hipify-perl's translation gets and the original's folder on the include path
  (the files both share stay there). For whole programs the host pass compiles
  their ``main()`` with the host code, the device pass their kernels.

A file compiles for a target when its host pass and that target's device pass both succeed. With
``--kernels``, the kernels (``.kd`` symbols) of each AMD code object are compared with the
kernels of nvcc's cubin (FUNC GLOBAL symbols). The markdown table goes to stdout, progress to
stderr; ``--json`` keeps every result.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages come first
    sys.path[:0] = [str(REPO / "wheels"), str(REPO)]

from buildsys import REPO_ROOT  # noqa: E402
from buildsys.hipify import (  # noqa: E402
    COMPAT_DIR,
    HipifyOptions,
    Severity,
    hipify_source,
    scan_tree,
)
from buildsys.hipify.tables import COMPAT_HEADER, LIBRARY_PRELUDE, WMMA_HEADER  # noqa: E402
from buildsys.matrix import load_matrix  # noqa: E402
from buildsys.toolchain import Toolchain, amd_toolchain  # noqa: E402
from kernelpack.formats.code_objects import read_code_object  # noqa: E402
from kernelpack.formats.cubins import read_cubin  # noqa: E402

MANIFEST = REPO_ROOT / "docs" / "hipify-corpus.toml"
DEFAULT_TARGETS = ("gfx90a", "gfx942", "gfx1100", "gfx1201")
SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inl", ".cuinc")
NVCC_ARCH = "sm_90"
COMMON_FLAGS = ("-std=c++17", "-w")


@dataclass(frozen=True)
class Project:
    name: str
    repository: str
    commit: str
    folder: str
    root: str
    flags: tuple[str, ...]
    files: tuple[str, ...]
    # (from, to): a file's hand-written HIP port is its path with the first ``from`` replaced by
    # ``to`` (HeCBench: ``src/x-cuda/main.cu`` -> ``src/x-hip/main.cu``); empty: no hand ports
    hand_port: tuple[str, ...] = ()

    def hand_port_of(self, path: str) -> str | None:
        """The path of ``path``'s hand port (relative to the project folder), if it has one."""
        if not self.hand_port or self.hand_port[0] not in path:
            return None
        return path.replace(self.hand_port[0], self.hand_port[1], 1)


@dataclass
class ToolOutcome:
    host_ok: bool = False
    device_ok: dict[str, bool] = field(default_factory=dict)
    first_error: str = ""
    kernels: dict[str, list[str]] = field(default_factory=dict)
    errors: int = 0  # error-severity findings (ours only)

    def compiles(self, target: str) -> bool:
        return self.host_ok and self.device_ok.get(target, False)


@dataclass
class FileResult:
    project: str
    path: str
    nvcc_ok: bool
    nvcc_error: str
    nvcc_kernels: list[str]
    ours: ToolOutcome
    peer: ToolOutcome
    hand: ToolOutcome | None = None  # the project's own HIP port, where it has one


def read_manifest(path: Path = MANIFEST) -> list[Project]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    projects = []
    for p in data["project"]:
        hand = p.get("hand_port", {})
        projects.append(
            Project(
                name=p["name"],
                repository=p["repository"],
                commit=p["commit"],
                folder=p["folder"],
                root=p["root"],
                flags=tuple(p.get("flags", [])),
                files=tuple(p["files"]),
                hand_port=(hand["from"], hand["to"]) if hand else (),
            )
        )
    return projects


# Headers of libraries beyond the CUDA runtime and its header libraries (CUB and Thrust, which
# hipCUB and rocThrust stand for in the toolchain): a program that includes one is not selected.
EXTERNAL_LIBRARY_HEADERS = re.compile(
    r"(cublas|cufft|curand|cusparse|cusolver|cudnn|cutensor|cutlass|cute/|nccl|nvml|nvrtc|"
    r"nvtx|nvToolsExt|npp|nvjpeg|mpi\.h|omp\.h)"
)
COMPILED_SUFFIXES = (".c", ".cc", ".cpp", ".cxx")


def select_programs(
    src: Path, count: int, cuda_suffix: str = "-cuda", hip_suffix: str = "-hip"
) -> list[str]:
    """The whole programs of a suite laid out as ``src/<name>-cuda/`` beside a hand port
    ``src/<name>-hip/`` (HeCBench), chosen by a rule anyone can rerun: the first ``count``
    folders by code-point order of name whose folder has exactly one ``.cu`` file, which defines
    ``main``, and no other compiled source (so that file is the whole program); whose twin has a
    file of the same name (the hand port); that link no library (no ``-l`` flag in the Makefile;
    nvcc's ``-lineinfo`` is none); whose quoted includes all resolve inside the folder; and that
    include no header of a library beyond the CUDA runtime, CUB and Thrust
    (EXTERNAL_LIBRARY_HEADERS). Paths relative to ``src``."""
    chosen: list[str] = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir() and p.name.endswith(cuda_suffix)):
        files = [p for p in folder.rglob("*") if p.is_file()]
        cu = [p for p in files if p.parent == folder and p.suffix == ".cu"]
        if len(cu) != 1 or any(p.suffix in COMPILED_SUFFIXES for p in files):
            continue
        twin = src / (folder.name[: -len(cuda_suffix)] + hip_suffix) / cu[0].name
        makefile = folder / "Makefile"
        if not twin.is_file() or (
            makefile.is_file()
            and re.search(
                r"(^|\s)-l(?!ineinfo\b)\w", makefile.read_text(encoding="utf-8", errors="replace")
            )
        ):
            continue
        if not re.search(r"\bmain\s*\(", cu[0].read_text(encoding="utf-8", errors="replace")):
            continue
        if _self_contained(folder, cu[0]):
            chosen.append(cu[0].relative_to(src).as_posix())
        if len(chosen) == count:
            break
    return chosen


def _self_contained(folder: Path, source: Path) -> bool:
    """Whether every file ``source`` includes in quotes (transitively) lies inside ``folder``
    and none of them includes an external library's header."""
    pending, seen = [source], set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        text = path.read_text(encoding="utf-8", errors="replace")
        for quoted, name in _QUOTED_INCLUDE_RE.findall(text):
            if EXTERNAL_LIBRARY_HEADERS.match(name):
                return False
            if quoted:
                found = Path(os.path.normpath(path.parent / name))
                if not found.is_file() or not found.is_relative_to(folder):
                    return False
                pending.append(found)
    return True


_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', re.MULTILINE)
_QUOTED_INCLUDE_RE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(")?<?([^>"]+)[>"]', re.MULTILINE)


def _include_dirs(project: Project) -> list[Path]:
    return [Path(project.root)] + [
        Path(project.flags[i + 1]) for i, flag in enumerate(project.flags[:-1]) if flag == "-I"
    ]


def _closure(base: Path, starts: Sequence[Path], include_dirs: Sequence[Path]) -> list[Path]:
    """The files ``starts`` and every project file they include, transitively (relative to the
    project folder)."""
    pending = list(starts)
    found: set[Path] = set()
    while pending:
        relative = pending.pop()
        if relative in found or not (base / relative).is_file():
            continue
        found.add(relative)
        text = (base / relative).read_text(encoding="utf-8", errors="replace")
        for name in _INCLUDE_RE.findall(text):
            for folder in (relative.parent, *include_dirs):
                candidate = Path(os.path.normpath(folder / name))
                if (base / candidate).is_file() and candidate.parts[0] != "..":
                    pending.append(candidate)
                    break
    return sorted(found)


def _sources(base: Path, project: Project) -> list[Path]:
    """The listed files and every project file they include: what must be translated for them to
    compile."""
    starts = [Path(project.root) / f for f in project.files]
    return _closure(base, starts, _include_dirs(project))


# Header libraries a file may include from the toolchain (rocThrust, hipCUB, rocPRIM; cub/ in a
# tree hipify-perl left untranslated): a file that includes one is keyed by the libraries'
# version headers too, so installing or updating them recompiles exactly those files.
LIBRARY_FOLDERS = ("thrust/", "hipcub/", "rocprim/", "cub/")
LIBRARY_VERSION_HEADERS = (
    "thrust/version.h",
    "hipcub/hipcub_version.hpp",
    "rocprim/rocprim_version.hpp",
)


def library_fingerprint(include_folder: Path | None) -> str:
    """The version headers of the toolchain's header libraries (or "absent" for each missing)."""
    digest = hashlib.sha256()
    for name in LIBRARY_VERSION_HEADERS:
        path = include_folder / name if include_folder is not None else None
        data = path.read_bytes() if path is not None and path.is_file() else b"absent"
        digest.update(f"\0{name}\0".encode() + data)
    return digest.hexdigest()


def _input_digest(
    tree: Path,
    project: Project,
    relative: str,
    salt: Sequence[str],
    compat: Path,
    libraries: str = "",
    include_dirs: Sequence[Path] = (),
) -> str:
    """What a compile of ``relative`` in ``tree`` depends on: the file, the project files it
    includes (transitively), each compat header (``compat``, the run's copy) where one of them
    includes it, the toolchain's header libraries (``libraries``, a library_fingerprint) where
    one of them includes one, and ``salt`` (tool, toolchain version, flags, targets). The result
    cache is keyed by it. ``include_dirs``: folders the compile searches beyond the project's."""
    digest = hashlib.sha256("\0".join(salt).encode())
    for path in _closure(tree, [Path(relative)], [*_include_dirs(project), *include_dirs]):
        data = (tree / path).read_bytes()
        digest.update(f"\0{path}\0{len(data)}\0".encode() + data)
        for header in (COMPAT_HEADER, WMMA_HEADER, LIBRARY_PRELUDE):
            if header.encode() in data:
                digest.update((compat / header).read_bytes())
        names = _INCLUDE_RE.findall(data.decode("utf-8", errors="replace"))
        if libraries and any(name.startswith(LIBRARY_FOLDERS) for name in names):
            digest.update(f"\0libraries\0{libraries}".encode())
    return digest.hexdigest()


def translate_ours(base: Path, out: Path, sources: Sequence[Path]) -> dict[str, int]:
    """Our translation of every source into out (same layout); error findings per file."""
    errors: dict[str, int] = {}
    texts = {
        str(relative): (base / relative).read_text(encoding="utf-8", errors="replace")
        for relative in sources
    }
    # Feature macros and reduction helpers are defined in one header and used in others.
    options = HipifyOptions(tree=scan_tree(texts))
    for relative in sources:
        text = texts[str(relative)]
        result = hipify_source(text, str(relative), options=options)
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.text, encoding="utf-8")
        errors[str(relative)] = sum(1 for d in result.diagnostics if d.severity is Severity.ERROR)
    return errors


# hipify-perl runs its regular expressions line by line: 8.5 minutes for mistral.rs sort.cu on the
# loaded 2-core machine. A file it does not finish in this time is compiled untranslated.
PEER_TIMEOUT_S = 1200


def translate_peer(
    toolchain: Toolchain,
    base: Path,
    out: Path,
    sources: Sequence[Path],
    jobs: int,
    cache: Path | None,
) -> list[str]:
    """hipify-perl's translation of every source into out (same layout), ``jobs`` at a time; a
    file it fails on or takes over PEER_TIMEOUT_S for is copied untranslated (and listed).
    ``cache`` keeps its outputs, and its failures (not its timeouts), by source content."""

    def one(relative: Path) -> str | None:
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256((base / relative).read_bytes()).hexdigest()
        cached = cache / digest if cache is not None else None
        failed_mark = cache / f"{digest}.failed" if cache is not None else None
        if cached is not None and cached.exists():
            shutil.copyfile(cached, target)
            return None
        if failed_mark is not None and failed_mark.exists():
            shutil.copyfile(base / relative, target)
            return str(relative)
        argv = toolchain.command(["hipify-perl", str(base / relative), f"-o={target}"], cwd=base)
        try:
            result = subprocess.run(
                argv, cwd=base, capture_output=True, text=True, timeout=PEER_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            shutil.copyfile(base / relative, target)
            return str(relative)
        if result.returncode != 0 or not target.exists():
            shutil.copyfile(base / relative, target)
            if failed_mark is not None:
                failed_mark.parent.mkdir(parents=True, exist_ok=True)
                failed_mark.write_text(result.stderr[-2000:] or "failed\n", encoding="utf-8")
            return str(relative)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, cached)
        return None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return [r for r in pool.map(one, sources) if r is not None]


def _first_error(result: subprocess.CompletedProcess[str]) -> str:
    lines = (result.stderr + result.stdout).splitlines()
    line = next((x for x in lines if "error" in x), lines[-1] if lines else "failed")
    return re.sub(r"^\S*/", "", line.strip())[:200]


def _nvcc_version() -> str:
    result = subprocess.run(["nvcc", "--version"], capture_output=True, text=True, check=False)
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "nvcc"


def nvcc_file(
    base: Path, project: Project, relative: str, scratch: Path
) -> tuple[bool, str, list[str]]:
    cubin = scratch / "nvcc.cubin"
    argv = ["nvcc", *COMMON_FLAGS, "-cubin", f"-arch={NVCC_ARCH}", *project.flags, relative]
    result = subprocess.run(
        [*argv, "-o", str(cubin)], cwd=base, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        return False, _first_error(result), []
    image = read_cubin(cubin.read_bytes(), str(cubin))
    return True, "", sorted(k.name for k in image.kernels)


def hip_file(
    toolchain: Toolchain,
    tree: Path,
    project: Project,
    relative: str,
    targets: Sequence[str],
    scratch: Path,
    extra: Sequence[str],
    kernels: bool,
) -> ToolOutcome:
    """Host pass once, device pass for all targets in one call (per target on failure)."""
    outcome = ToolOutcome()
    scratch.mkdir(parents=True, exist_ok=True)
    source = str(Path(relative))
    # the device passes run in their scratch folder: a project's -I folders are named absolutely
    project_flags = [
        str(tree / flag) if i > 0 and project.flags[i - 1] == "-I" else flag
        for i, flag in enumerate(project.flags)
    ]
    flags = [*COMMON_FLAGS, "-x", "hip", "-DUSE_ROCM", *extra, *project_flags]
    host = toolchain.run(
        ["hipcc", *flags, "--cuda-host-only", "-c", source, "-o", str(scratch / "host.o")],
        cwd=tree,
        check=False,
    )
    outcome.host_ok = host.returncode == 0
    if not outcome.host_ok:
        outcome.first_error = "host: " + _first_error(host)
        return outcome  # compiles for no target: the device passes are not needed

    def device(group: Sequence[str], folder: Path) -> subprocess.CompletedProcess[str]:
        folder.mkdir(parents=True, exist_ok=True)
        argv = ["hipcc", *flags, "--cuda-device-only", "--no-gpu-bundle-output", "-c"]
        argv += [f"--offload-arch={t}" for t in group]
        if len(group) == 1:
            argv += ["-o", str(folder / f"{group[0]}.out")]
        return toolchain.run([*argv, str(tree / source)], cwd=folder, check=False)

    together = device(targets, scratch / "all")
    if together.returncode == 0:
        outcome.device_ok = dict.fromkeys(targets, True)
        objects = {t: next((scratch / "all").glob(f"*-{t}.out"), None) for t in targets}
    else:
        objects = {}
        for target in targets:
            single = device([target], scratch / target)
            outcome.device_ok[target] = single.returncode == 0
            objects[target] = scratch / target / f"{target}.out" if single.returncode == 0 else None
            if single.returncode != 0 and not outcome.first_error:
                outcome.first_error = f"{target}: " + _first_error(single)
    if kernels:
        for target, path in objects.items():
            if path is not None and path.exists():
                code_object = read_code_object(path.read_bytes(), str(path))
                outcome.kernels[target] = sorted(k.name for k in code_object.kernels)
    return outcome


def run_bench(
    corpus: Path,
    projects: Sequence[Project],
    targets: Sequence[str],
    *,
    jobs: int,
    kernels: bool,
    log: Callable[[str], None],
    peer_cache: Path | None = None,
    result_cache: Path | None = None,
    results_file: Path | None = None,
    nvcc_only: bool = False,
) -> list[FileResult]:
    toolchain = amd_toolchain(provision=True)
    libraries = library_fingerprint(toolchain.include_folder)
    results: list[FileResult] = []
    with tempfile.TemporaryDirectory(prefix="bench-hipify-") as work_name:
        work = Path(work_name)
        compat = (
            work / "compat"
        )  # one copy for the whole run: editing the header mid-run is harmless
        shutil.copytree(COMPAT_DIR, compat)
        tasks: list[tuple[Project, str, Path, Path, Path, dict[str, int]]] = []
        for project in projects:
            base = corpus / project.folder
            sources = _sources(base, project)
            ours_tree, peer_tree = work / "ours" / project.folder, work / "peer" / project.folder
            started = time.monotonic()
            if nvcc_only:  # nothing of the AMD side is needed
                sources = []
            errors = translate_ours(base, ours_tree, sources)
            untranslated = translate_peer(toolchain, base, peer_tree, sources, jobs, peer_cache)
            log(
                f"{project.name}: {len(sources)} sources translated by both tools in "
                f"{time.monotonic() - started:.0f} s; hipify-perl failed or timed out on "
                f"{len(untranslated)}: {', '.join(untranslated) or '-'}"
            )
            for relative in project.files:
                path = str(Path(project.root) / relative)
                tasks.append((project, path, base, ours_tree, peer_tree, errors))

        nvcc_version = _nvcc_version()

        def cached(key: str, compute: Callable[[], dict[str, object]]) -> dict[str, object]:
            """``compute()``, or what it returned before for the same inputs (``result_cache``)."""
            if result_cache is None:
                return compute()
            entry = result_cache / f"{key}.json"
            if entry.exists():
                data: dict[str, object] = json.loads(entry.read_text(encoding="utf-8"))
                return data
            data = compute()
            result_cache.mkdir(parents=True, exist_ok=True)
            partial = entry.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            partial.write_text(json.dumps(data), encoding="utf-8")
            partial.replace(entry)  # atomic: a reader sees a whole entry or none
            return data

        def one(task: tuple[Project, str, Path, Path, Path, dict[str, int]]) -> FileResult:
            project, path, base, ours_tree, peer_tree, errors = task
            scratch = work / "scratch" / project.folder / path
            scratch.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            salt = [path, *project.flags, *targets, str(kernels)]
            if project.flags:  # results from before -I folders reached the device passes
                salt.append("include-folders-absolute")

            def compute_nvcc() -> dict[str, object]:
                ok, error, names = nvcc_file(base, project, path, scratch)
                return {"ok": ok, "error": error, "kernels": names}

            # nvcc's kernels include those of internal linkage (static, anonymous namespace):
            # results from before they were read are not reused. CPATH: where nvcc finds
            # headers the CUDA install lacks (llm.c's cuBLAS headers)
            nvcc_salt = [
                "nvcc",
                nvcc_version,
                os.environ.get("CPATH", ""),
                *salt,
                "internal-kernels",
            ]
            nvcc = cached(_input_digest(base, project, path, nvcc_salt, compat), compute_nvcc)
            nvcc_ok, nvcc_error = bool(nvcc["ok"]), str(nvcc["error"])
            nvcc_kernels = [str(k) for k in nvcc["kernels"]]  # type: ignore[attr-defined]
            if not nvcc_ok or nvcc_only:  # not counted: the NVIDIA reference does not build
                return FileResult(
                    project.name, path, nvcc_ok, nvcc_error, [], ToolOutcome(), ToolOutcome()
                )

            def compute_hip(
                tree: Path,
                tool: str,
                extra: Sequence[str],
                source: str = path,
                folders: Sequence[Path] = (),
            ) -> ToolOutcome:
                # the run's copy of the compat folder is named by the repository's in the key,
                # whose content the key covers, and a folder of the tree by its relative path
                named = [
                    COMPAT_DIR.as_posix()
                    if a == str(compat)
                    else Path(a).relative_to(tree).as_posix()
                    if Path(a).is_relative_to(tree)
                    else a
                    for a in extra
                ]
                key = _input_digest(
                    tree,
                    project,
                    source,
                    [tool, toolchain.version, *salt, *named],
                    compat,
                    libraries,
                    folders,
                )
                data = cached(
                    key,
                    lambda: asdict(
                        hip_file(
                            toolchain,
                            tree,
                            project,
                            source,
                            targets,
                            scratch / tool,
                            extra,
                            kernels,
                        )
                    ),
                )
                return ToolOutcome(**data)  # type: ignore[arg-type]

            ours = compute_hip(ours_tree, "ours", ["-I", str(compat)])
            ours.errors = errors.get(path, 0)
            peer = compute_hip(peer_tree, "hipify-perl", [])
            # the hand port is compiled where it lies, as its authors wrote it, with the flags
            # and targets hipify-perl's translation gets, and the CUDA program's folder on the
            # include path: the files both share stay there (HeCBench's -hip Makefiles pass
            # -I../<name>-cuda for them)
            hand_path = project.hand_port_of(path)
            shared = Path(path).parent
            hand = (
                None
                if hand_path is None
                else compute_hip(base, "hand", ["-I", str(base / shared)], hand_path, [shared])
            )
            log(
                f"{project.name}/{path}: nvcc {'ok' if nvcc_ok else 'FAIL'}, ours "
                f"{sum(map(ours.compiles, targets))}/{len(targets)}, hipify-perl "
                f"{sum(map(peer.compiles, targets))}/{len(targets)}"
                + (
                    ""
                    if hand is None
                    else f", hand port {sum(map(hand.compiles, targets))}/{len(targets)}"
                )
                + f" ({time.monotonic() - started:.0f} s)"
            )
            result = FileResult(
                project.name, path, nvcc_ok, nvcc_error, nvcc_kernels, ours, peer, hand
            )
            if results_file is not None:  # one JSON line per file, as it completes
                with results_file.open("a", encoding="utf-8") as stream:
                    stream.write(json.dumps(asdict(result)) + "\n")
            return result

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(one, tasks))
    return results


def read_results(path: Path) -> list[FileResult]:
    """The results a run appended to ``--results`` (also a run that did not finish)."""
    results = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        data["ours"] = ToolOutcome(**data["ours"])
        data["peer"] = ToolOutcome(**data["peer"])
        hand = data.get("hand")  # absent in results from before hand ports were measured
        data["hand"] = ToolOutcome(**hand) if hand is not None else None
        results.append(FileResult(**data))
    return sorted(results, key=lambda r: (r.project, r.path))


# Kernels CUDA's own header libraries put into every object that includes them (CUB's
# EmptyKernel): the library's, not the file's, and not expected from hipCUB or rocThrust.
NVIDIA_LIBRARY_NAMESPACES = ("cub::", "thrust::")


def file_kernels(result: FileResult) -> list[str]:
    """nvcc's kernels of the file itself: those of CUDA's header libraries left out."""
    return [
        k for k in result.nvcc_kernels if not _base_name(k).startswith(NVIDIA_LIBRARY_NAMESPACES)
    ]


def missing_kernels(result: FileResult, target: str) -> list[str]:
    """nvcc's kernels of the file (file_kernels) that our object for ``target`` lacks. Mangled
    names differ where a parameter or template argument is a vendor type (``__nv_bfloat16``), so
    kernels are matched by qualified name, counting instantiations: a name nvcc has three times
    must be in the AMD object three times."""
    amd = Counter(_base_name(k) for k in result.ours.kernels.get(target, []))
    missing = []
    for kernel in file_kernels(result):
        name = _base_name(kernel)
        if amd[name] > 0:
            amd[name] -= 1
        else:
            missing.append(kernel)
    return missing


def _base_name(symbol: str) -> str:
    """A kernel's qualified name without template arguments or parameters (``_ZN2ns1kIfEEvPT_``
    -> ``ns::k``): the part both vendors spell alike (a HIP type name in the arguments differs).
    Internal linkage is spelt differently by each compiler: an anonymous namespace is
    ``_GLOBAL__N_1`` in clang's symbols and ``_GLOBAL__N__<hash>_<file>`` in nvcc's, both become
    ``(anonymous namespace)``; a ``static`` function's ``L`` (``_ZL4name``) is dropped."""
    if not symbol.startswith("_Z"):
        return symbol
    at = 2
    if symbol[at : at + 1] == "L":
        at += 1
    nested = symbol[at : at + 1] == "N"
    at += 1 if nested else 0
    parts = []
    while (match := re.match(r"L?(\d+)", symbol[at:])) is not None:
        length = int(match.group(1))
        at += match.end()
        part = symbol[at : at + length]
        parts.append("(anonymous namespace)" if part.startswith("_GLOBAL__N") else part)
        at += length
        if not nested:
            break
        if symbol[at : at + 1] == "I":  # template arguments of this component: stop at the name
            break
    return "::".join(parts) if parts else symbol


def markdown(
    results: Sequence[FileResult], targets: Sequence[str], header: Sequence[str], kernels: bool
) -> str:
    """The totals table (a row per tool; the hand ports' over the files that have one) and a row
    per file; the hand-port columns only where a project of the run has hand ports."""
    counted = [r for r in results if r.nvcc_ok]
    with_hand = [r for r in counted if r.hand is not None]
    lines = [*header, ""]
    lines += [
        "| tool | files compiling for all targets (of those nvcc compiles) | "
        + " | ".join(targets)
        + " |",
        "| --- | --- | " + " | ".join("---" for _ in targets) + " |",
    ]
    rows: list[tuple[str, Callable[[FileResult], ToolOutcome | None], Sequence[FileResult]]] = [
        ("buildsys hipify + compat", lambda r: r.ours, counted),
        ("hipify-perl", lambda r: r.peer, counted),
    ]
    if with_hand:
        rows.append(("hand ports (the project's own HIP)", lambda r: r.hand, with_hand))
    for name, pick, over in rows:
        outcomes = [o for o in map(pick, over) if o is not None]
        total = sum(all(o.compiles(t) for t in targets) for o in outcomes)
        per = [sum(o.compiles(t) for o in outcomes) for t in targets]
        share = f"{100 * total / len(over):.0f}%" if over else "-"
        lines.append(
            f"| {name} | {total}/{len(over)} ({share}) | "
            + " | ".join(f"{n}/{len(over)}" for n in per)
            + " |"
        )
    lines.append(f"| nvcc {NVCC_ARCH} | {len(counted)}/{len(results)} |" + " |" * len(targets))
    hand_columns = any(r.hand is not None for r in results)
    lines += [
        "",
        "| project | file | nvcc | ours: targets | ours: first error | hipify-perl: targets | "
        "hipify-perl: first error |"
        + (" hand port: targets | hand port: first error |" if hand_columns else "")
        + (" kernels missing in ours |" if kernels else ""),
        "| --- | --- | --- | --- | --- | --- | --- |"
        + (" --- | --- |" if hand_columns else "")
        + (" --- |" if kernels else ""),
    ]
    for r in results:
        ours_n = sum(r.ours.compiles(t) for t in targets)
        peer_n = sum(r.peer.compiles(t) for t in targets)
        row = (
            f"| {r.project} | {r.path} | {'yes' if r.nvcc_ok else 'no: ' + _cell(r.nvcc_error)} | "
            f"{ours_n}/{len(targets)} | {_cell(r.ours.first_error)} | {peer_n}/{len(targets)} | "
            f"{_cell(r.peer.first_error)} |"
        )
        if hand_columns:
            if r.hand is None:
                row += " - |  |"
            else:
                hand_n = sum(r.hand.compiles(t) for t in targets)
                row += f" {hand_n}/{len(targets)} | {_cell(r.hand.first_error)} |"
        if kernels:
            missing = {t: missing_kernels(r, t) for t in targets if r.ours.compiles(t)}
            worst = max((len(m) for m in missing.values()), default=0)
            compiled = bool(missing)  # no AMD object to compare where no target compiled
            row += f" {worst} of {len(file_kernels(r))} |" if r.nvcc_ok and compiled else " - |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").strip()
    return f"`{text[:100]}`" if text else ""


def print_selection(corpus: Path, projects: Sequence[Project], name: str) -> int:
    """``--select-programs``: the rule's files for project ``name`` in the manifest's TOML form;
    1 where they differ from the manifest's, 2 for a project without hand ports or not fetched."""
    project = next((p for p in projects if p.name == name), None)
    if project is None or not project.hand_port:
        known = ", ".join(p.name for p in projects if p.hand_port) or "none"
        print(
            f"--select-programs {name}: no project with hand ports of that name; known: {known}",
            file=sys.stderr,
        )
        return 2
    src = corpus / project.folder / project.root
    if not src.is_dir():
        print(
            f"--corpus {corpus}: no folder {project.folder}/{project.root}; fetch "
            f"{project.repository} at {project.commit} there",
            file=sys.stderr,
        )
        return 2
    cuda, hip = (suffix.rstrip("/") for suffix in project.hand_port)
    chosen = select_programs(src, len(project.files), cuda, hip)
    print("files = [\n" + "".join(f'  "{f}",\n' for f in chosen) + "]")
    same = tuple(chosen) == project.files
    print(
        f"{name}: {len(chosen)} programs, {'the' if same else 'NOT the'} manifest's list",
        file=sys.stderr,
    )
    return 0 if same else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated AMD targets, or `matrix`: every AMD target of arch_matrix.toml",
    )
    parser.add_argument(
        "--nvcc-only",
        action="store_true",
        help="only nvcc's builds, into --cache (fills it ahead of a full run; prints no table)",
    )
    parser.add_argument("--projects", default="", help="comma-separated project names (all)")
    parser.add_argument("--only", default="", help="only files whose path contains this")
    parser.add_argument(
        "--exclude", action="append", default=[], help="leave out files containing this"
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--kernels", action="store_true", help="compare kernel lists")
    parser.add_argument("--json", type=Path, metavar="OUT")
    parser.add_argument("--peer-cache", type=Path, metavar="DIR", help="keep hipify-perl outputs")
    parser.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="keep each compile's result by its inputs (a rerun compiles only what changed)",
    )
    parser.add_argument("--results", type=Path, metavar="JSONL", help="append each file's result")
    parser.add_argument(
        "--report-from", type=Path, metavar="JSONL", help="only print the table of saved results"
    )
    parser.add_argument(
        "--select-programs",
        metavar="PROJECT",
        help="print the files the selection rule of a project with hand ports picks "
        "(select_programs), as many as its manifest lists, and whether they are the manifest's",
    )
    args = parser.parse_args(argv)
    projects = read_manifest()
    if args.select_programs is not None:
        return print_selection(args.corpus, projects, args.select_programs)
    if args.projects:
        wanted = set(args.projects.split(","))
        projects = [p for p in projects if p.name in wanted]
    if args.only:
        projects = [
            Project(**{**asdict(p), "files": tuple(f for f in p.files if args.only in f)})
            for p in projects
        ]
    if args.exclude:
        projects = [
            Project(
                **{
                    **asdict(p),
                    "files": tuple(f for f in p.files if not any(x in f for x in args.exclude)),
                }
            )
            for p in projects
        ]
    missing = [p.folder for p in projects if not (args.corpus / p.folder).is_dir()]
    if missing:
        print(
            f"--corpus {args.corpus}: no folder {', '.join(missing)}; fetch the repositories "
            f"of {MANIFEST.relative_to(REPO_ROOT)} at their commits there",
            file=sys.stderr,
        )
        return 2
    targets = (
        tuple(t.target for t in load_matrix().amd)
        if args.targets == "matrix"
        else tuple(args.targets.split(","))
    )
    if args.report_from is not None:
        saved = read_results(args.report_from)
        note = f"Saved results of {len(saved)} files ({args.report_from.name})."
        sys.stdout.write(markdown(saved, targets, [note], args.kernels))
        return 0
    started = time.monotonic()
    results = run_bench(
        args.corpus,
        projects,
        targets,
        jobs=args.jobs,
        kernels=args.kernels,
        log=lambda line: print(line, file=sys.stderr, flush=True),
        peer_cache=args.peer_cache,
        result_cache=args.cache,
        results_file=args.results,
        nvcc_only=args.nvcc_only,
    )
    if args.nvcc_only:
        built = sum(r.nvcc_ok for r in results)
        print(f"nvcc built {built} of {len(results)} files", file=sys.stderr)
        return 0
    toolchain = amd_toolchain()
    header = [
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({platform.machine()}, {len(results)} files, {args.jobs} jobs, "
        f"{time.monotonic() - started:.0f} s): {toolchain.version}; "
        f"{_nvcc_version()}.",
        "Command: `python bench/bench_hipify.py "
        + " ".join("DIR" if a.startswith("/") else a for a in (argv or sys.argv[1:]))
        + "`",
    ]
    sys.stdout.write(markdown(results, targets, header, args.kernels))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
