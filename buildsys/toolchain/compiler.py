"""A toolchain: one compiler installation, how its programs run, and which targets it builds.

A provisioned toolchain's programs run inside its root file system through bubblewrap, with the
work tree and the caller's folders bound at the same paths; a native one's run as they are. Which
targets a toolchain builds is measured, not assumed (Debian bookworm's hipcc, HIP 5.2, lacks device
libraries for gfx11xx and gfx942, so "found" is not "usable"): a tiny kernel is compiled per target
once, and the answer is cached per compiler identity. nvcc's targets come from
``nvcc --list-gpu-code`` / ``--list-gpu-arch``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kernelpack.files.atomic import atomic_write
from kernelpack.files.paths import cache_folder

from .. import REPO_ROOT
from ..errors import ToolchainError

_PROBE_SOURCE = (
    "#include <hip/hip_runtime.h>\n"
    'extern "C" __global__ void kernelpack_probe(float* x) { x[threadIdx.x] += 1.0f; }\n'
)


# Tools the builder and tests call by their plain LLVM names; a Debian root file system suffixes
# them with the LLVM major version (clang-offload-bundler-21), ROCm keeps them in llvm/bin.
LLVM_TOOLS = ("clang", "clang-offload-bundler", "llvm-readelf", "llvm-objdump")


def cache_root() -> Path:
    """The folder for toolchains and probe results: KERNELPACK_TOOLCHAIN_DIR, else ``toolchains``
    in the user cache folder (kernelpack.files.paths)."""
    return cache_folder("KERNELPACK_TOOLCHAIN_DIR", "toolchains")


@dataclass(frozen=True)
class Toolchain:
    """One compiler installation and how to run its programs.

    ``rootfs`` is set for a provisioned toolchain: its programs run inside that root file system
    through bubblewrap, with the paths in ``binds`` visible at the same place.
    """

    kind: str  # "hip" or "cuda"
    name: str
    version: str
    bindir: Path  # inside the rootfs when rootfs is set
    rootfs: Path | None = None
    binds: tuple[Path, ...] = field(default=())

    @property
    def runs(self) -> str:
        return "rootfs" if self.rootfs else "native"

    @property
    def identity(self) -> str:
        """What a build cache key must cover: a different compiler gives a different identity."""
        return f"{self.kind}:{self.name}:{self.version}:{self.runs}"

    @property
    def include_folder(self) -> Path:
        """Where the toolchain's system headers are, as this machine sees them (the root file
        system's /usr/include for a provisioned one, ROCm's include folder for a native one)."""
        if self.rootfs is not None:
            return self.rootfs / "usr" / "include"
        return self.bindir.parent / "include"

    def tool(self, name: str) -> str:
        """The path (inside the rootfs, for a provisioned toolchain) of one of its programs."""
        real_bindir = self.rootfs / self.bindir.relative_to("/") if self.rootfs else self.bindir
        candidates = [real_bindir / name]
        if name in LLVM_TOOLS:
            # Debian's own LLVM folder first: clang-offload-bundler run through the suffixed
            # /usr/bin symlink looks for llvm-objcopy beside that path and does not find it.
            candidates += sorted(
                real_bindir.parent.glob(f"lib/llvm-[0-9]*/bin/{name}"), reverse=True
            )
            candidates += sorted(real_bindir.glob(f"{name}-[0-9]*"), reverse=True)
            candidates.append(real_bindir.parent / "llvm" / "bin" / name)
        for candidate in candidates:
            if candidate.exists():
                if self.rootfs:
                    return "/" + str(candidate.relative_to(self.rootfs))
                return str(candidate)
        raise ToolchainError(f"{self.name}: no program {name!r} in {real_bindir}")

    def command(self, argv: Sequence[str], *, cwd: Path | None = None) -> list[str]:
        """argv ready for subprocess: wrapped in bubblewrap for a provisioned toolchain."""
        argv = list(argv)
        if self.kind == "hip" and argv and "/" not in argv[0]:
            argv[0] = self.tool(argv[0])
        if self.rootfs is None:
            return argv
        binds = {REPO_ROOT, Path(tempfile.gettempdir()), Path.cwd(), *self.binds}
        if cwd is not None:
            binds.add(cwd)
        wrapper = ["bwrap", "--bind", str(self.rootfs), "/", "--proc", "/proc", "--dev", "/dev"]
        for path in sorted(_outermost(binds)):
            wrapper += ["--bind", str(path), str(path)]
        wrapper += ["--setenv", "HIP_PLATFORM", "amd", "--unshare-pid", "--die-with-parent"]
        wrapper += ["--chdir", str(cwd or Path.cwd())]
        return wrapper + argv

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | None = None,
        check: bool = True,
        tmpdir: Path | None = None,
        stopped: Callable[[], bool] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one of the toolchain's programs; with check, a failure is a ToolchainError.

        ``tmpdir`` becomes the program's TMPDIR (an absolute path: nvcc pastes it into its shell
        commands, so the caller hands one that is safe there, buildsys.names.check_shell_path).
        With ``stopped``, the program runs in a process group of its own, which is killed (the
        compiler and every process it started) within STOP_POLL_S of ``stopped()`` turning true:
        the build's interrupt, or a sibling unit's failure (buildsys.scheduler).
        """
        env: dict[str, str] | None = None
        if self.kind == "hip" or tmpdir is not None:
            env = dict(os.environ)
            if self.kind == "hip":
                env["HIP_PLATFORM"] = "amd"
            if tmpdir is not None:
                env["TMPDIR"] = str(tmpdir)
        command = self.command(argv, cwd=cwd)
        if stopped is None:
            result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
        else:
            result = _run_stoppable(command, stopped, cwd=cwd, env=env)
        if check and result.returncode != 0:
            message = (result.stderr or result.stdout).strip().splitlines()[-5:]
            raise ToolchainError(f"{' '.join(argv[:2])} failed: " + " | ".join(message))
        return result

    def buildable(self, targets: Iterable[str]) -> dict[str, bool]:
        """Which of these targets this toolchain can build, measured once and cached on disk."""
        if self.kind == "cuda":
            return _nvcc_buildable(self, targets)
        return _hip_buildable(self, targets)


STOP_POLL_S = 0.1  # how often a running compiler looks whether it is to stop


def _run_stoppable(
    argv: list[str], stopped: Callable[[], bool], *, cwd: Path | None, env: dict[str, str] | None
) -> subprocess.CompletedProcess[str]:
    """subprocess.run, with the program (and its children: nvcc's cicc and ptxas, bubblewrap's
    compiler) in a process group that is killed once ``stopped()`` is true."""
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0,
    )
    with process:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=STOP_POLL_S)
                break
            except subprocess.TimeoutExpired:
                if stopped():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    stdout, stderr = process.communicate()
                    break
            except BaseException:  # an interrupt of this thread: the compiler goes with it
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


# Folders of the root file system itself: binding a host folder over one of them would hide the
# toolchain's own files (a work tree under /usr/src, or a build run from /).
_ROOTFS_SYSTEM = tuple(Path(p) for p in ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"))


def _outermost(paths: Iterable[Path]) -> set[Path]:
    """Drop paths inside other paths: bubblewrap binds the outer one once."""
    resolved = {p.resolve() for p in paths if p.exists()}
    for path in resolved:
        top = Path(*path.parts[:2])
        if path == Path("/") or top in _ROOTFS_SYSTEM:
            raise ToolchainError(
                f"{path}: the provisioned toolchain cannot see it without hiding its own {top}; "
                "run the build from a folder outside /usr, /lib, /lib64, /bin, /sbin and /etc"
            )
    return {p for p in resolved if not any(q != p and q in p.parents for q in resolved)}


def _probe_cache(toolchain: Toolchain) -> Path:
    key = hashlib.sha256(toolchain.identity.encode()).hexdigest()[:16]
    return cache_root() / f"probe-{key}.json"


def _hip_buildable(toolchain: Toolchain, targets: Iterable[str]) -> dict[str, bool]:
    cache_file = _probe_cache(toolchain)
    known: dict[str, bool] = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    wanted = sorted(set(targets))
    missing = [t for t in wanted if t not in known]
    if missing:
        with tempfile.TemporaryDirectory(prefix="kernelpack-probe-") as tmp:
            source = Path(tmp) / "probe.hip"
            source.write_text(_PROBE_SOURCE)

            def probe(target: str) -> tuple[str, bool]:
                out = Path(tmp) / f"{target.replace(':', '_')}.co"
                argv = ["hipcc", "--genco", f"--offload-arch={target}", str(source), "-o", str(out)]
                done = toolchain.run(argv, check=False, tmpdir=Path(tmp).resolve())
                return target, done.returncode == 0

            with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
                known.update(pool.map(probe, missing))
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(cache_file, json.dumps(known, sort_keys=True).encode())
    return {t: known[t] for t in wanted}


def _nvcc_buildable(toolchain: Toolchain, targets: Iterable[str]) -> dict[str, bool]:
    codes = set(nvcc_facts(str(toolchain.bindir / "nvcc"))[1])
    return {t: t in codes for t in sorted(set(targets))}


def nvcc_facts(nvcc: str) -> tuple[str, list[str]]:
    """nvcc's release and the GPU codes and architectures it lists, kept in the toolchain cache
    folder by nvcc's path and its file's (inode, size, mtime): a toolkit installed over it is
    another file. Three nvcc runs were a twentieth of a no-op build."""
    try:
        found = os.stat(nvcc)
    except OSError:
        found = None
    stamp = [nvcc, found.st_ino, found.st_size, found.st_mtime_ns] if found else [nvcc]
    key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:16]
    cache_file = cache_root() / f"nvcc-{key}.json"
    try:
        record = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        record = None
    if isinstance(record, dict) and record.get("stamp") == stamp:
        version, codes = record.get("version"), record.get("codes")
        if isinstance(version, str) and isinstance(codes, list):
            strings = [code for code in codes if isinstance(code, str)]
            if len(strings) == len(codes):
                return version, strings
    result = subprocess.run([nvcc, "--version"], capture_output=True, text=True)
    version = next(
        (
            line.split("release", 1)[1].strip()
            for line in result.stdout.splitlines()
            if "release" in line
        ),
        "?",
    )
    listed: set[str] = set()
    for flag in ("--list-gpu-code", "--list-gpu-arch"):
        listed.update(subprocess.run([nvcc, flag], capture_output=True, text=True).stdout.split())
    codes = sorted(listed)
    if found is not None and version != "?":  # a failed run is asked again next time
        with contextlib.suppress(OSError):
            record = {"stamp": stamp, "version": version, "codes": codes}
            atomic_write(cache_file, json.dumps(record, sort_keys=True).encode())
    return version, codes
