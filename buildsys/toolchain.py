"""Compilers: find them, provision the AMD one when none can build the matrix, and say what each builds.

AMD: a native ROCm (``ROCM_PATH``, ``/opt/rocm``, ``hipcc`` on PATH) is used when it can build the
requested targets. Otherwise the builder provisions its own: a Debian sid root file system made with
debootstrap (minbase plus the packages ``hipcc`` and ``hipify-perl``: HIP 6.4, LLVM 21) in the user's
cache folder, run through bubblewrap with the work tree bound at the same path. The header-only ROCm
libraries rocThrust, hipCUB and rocPRIM (Debian's builds for the same HIP 6.4) come with it, so
translated ``thrust`` and ``cub`` code compiles; a root file system provisioned before a package
joined the list gets it the next time provisioning runs, in a copy swapped in whole
(``provision_hip``). Debian bookworm's own
hipcc (HIP 5.2, LLVM 15) lacks device libraries for gfx11xx and gfx942, which is why "found" is not
"usable": each toolchain's buildable targets are measured by compiling a tiny kernel per target once,
and the answer is cached per compiler identity.

NVIDIA: nvcc from ``CUDA_HOME``, ``/usr/local/cuda`` or PATH; its targets come from
``nvcc --list-gpu-code`` / ``--list-gpu-arch``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kernelpack.files.atomic import atomic_write, exchange
from kernelpack.files.paths import cache_folder

from . import REPO_ROOT
from .errors import ToolchainError

ROOTFS_SUITE = "sid"
ROOTFS_MIRROR = "http://deb.debian.org/debian"
# hipcc and hipify-perl; then rocThrust (thrust/), hipCUB (hipcub/, what cub/ becomes) and rocPRIM
# (hipCUB's and rocThrust's back end): header-only, built by Debian for the same HIP 6.4.
ROOTFS_PACKAGES = ("hipcc", "hipify-perl", "librocthrust-dev", "libhipcub-dev", "librocprim-dev")
# hipBLAS and hipBLASLt: their headers only (dpkg-deb -x of the -dev packages, no dependencies).
# Kernel sources include cuBLAS headers from shared host code (llm.c's common.h) without calling
# it from a kernel; kernelpack compiles device code and never links a BLAS, and the packages'
# runtime dependency, rocBLAS, installs 4 GB of kernels.
ROOTFS_HEADER_PACKAGES = ("libhipblas-dev", "libhipblas-common-dev", "libhipblaslt-dev")
ROOTFS_NAME = "debian-sid-hip"
_COMPLETE_MARKER = ".kernelpack-rootfs.json"
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


# ---------------------------------------------------------------------------------------------
# AMD


def amd_toolchain(*, provision: bool = False, targets: Sequence[str] = ()) -> Toolchain:
    """The AMD toolchain that can build ``targets``: native first, else the provisioned one.

    With ``provision`` a missing root file system is made (over a gigabyte of downloads);
    without it, its absence is a ToolchainError that says how to provision.
    """
    native = find_native_hip()
    if native is not None and (not targets or all(native.buildable(targets).values())):
        return native
    provisioned = provisioned_hip()
    if provisioned is not None:
        if provision and missing_rootfs_packages():
            return provision_hip()  # brings the root file system up to ROOTFS_PACKAGES
        return provisioned
    if provision:
        return provision_hip()
    why = (
        f"{native.name} {native.version} cannot build {', '.join(t for t, ok in native.buildable(targets).items() if not ok)}"
        if native
        else "no AMD HIP compiler found (ROCM_PATH, /opt/rocm, hipcc on PATH)"
    )
    raise ToolchainError(
        f"{why}; run `python -m buildsys toolchain --provision` (or `nox -s toolchain`) to provision one"
    )


def find_native_hip() -> Toolchain | None:
    candidates = [os.environ.get("ROCM_PATH", ""), "/opt/rocm"]
    for root in candidates:
        if root and (Path(root) / "bin" / "hipcc").exists():
            return _native_hip(Path(root) / "bin")
    on_path = shutil.which("hipcc")
    return _native_hip(Path(on_path).parent) if on_path else None


def _native_hip(bindir: Path) -> Toolchain | None:
    probe = Toolchain("hip", "hipcc", "unknown", bindir)
    try:
        result = probe.run(["hipcc", "--version"])
    except (ToolchainError, OSError):
        return None
    return Toolchain("hip", "hipcc", _hip_version(result.stdout), bindir)


def _hip_version(text: str) -> str:
    """'HIP 6.4.43484 / clang 21.1.8' from hipcc --version."""
    hip = clang = "?"
    for line in text.splitlines():
        if line.startswith("HIP version:"):
            hip = line.split(":", 1)[1].strip()
        elif "clang version" in line:
            clang = line.split("clang version", 1)[1].split()[0]
    return f"HIP {hip} / clang {clang}"


def rootfs_dir() -> Path:
    return cache_root() / ROOTFS_NAME


def provisioned_hip() -> Toolchain | None:
    """The provisioned toolchain, if a complete root file system is there (also one that lacks
    packages added to ROOTFS_PACKAGES since: ``missing_rootfs_packages`` names them)."""
    root = rootfs_dir()
    marker = root / _COMPLETE_MARKER
    if not marker.exists():
        return None
    facts = json.loads(marker.read_text())
    return Toolchain(
        "hip", f"hipcc ({ROOTFS_NAME})", facts["version"], Path("/usr/bin"), rootfs=root
    )


def missing_rootfs_packages() -> tuple[str, ...]:
    """The packages of ROOTFS_PACKAGES and ROOTFS_HEADER_PACKAGES the provisioned root file system
    was not made with (all of them when there is none)."""
    wanted = (*ROOTFS_PACKAGES, *ROOTFS_HEADER_PACKAGES)
    marker = rootfs_dir() / _COMPLETE_MARKER
    if not marker.exists():
        return wanted
    have = set(json.loads(marker.read_text()).get("packages", ()))
    return tuple(package for package in wanted if package not in have)


# Debian installs debootstrap, and the chroot it calls, into the sbin folders, which a root shell
# reached without a login (su, env -i, some CI runners) may not have on its PATH.
SYSTEM_TOOL_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def host_tool_path() -> str:
    """The PATH provisioning looks up and runs its host tools with: the caller's, then sbin."""
    parts = [part for part in os.environ.get("PATH", "").split(os.pathsep) if part]
    return os.pathsep.join(parts + [d for d in SYSTEM_TOOL_DIRS if d not in parts])


def _missing_host_tools() -> list[str]:
    path = host_tool_path()
    return [tool for tool in ("debootstrap", "bwrap") if shutil.which(tool, path=path) is None]


def provision_hip(*, log: bool = True) -> Toolchain:
    """Make the Debian sid root file system with hipcc, or bring an existing one up to
    ROOTFS_PACKAGES: safe to interrupt and to run twice at once.

    The root file system is built in a scratch folder beside its final place and renamed into
    place only when complete, so an interrupted run leaves nothing that looks usable; a lock keeps
    two concurrent runs from building it twice. An existing one that lacks packages is updated in
    a copy (``_upgrade_rootfs``), so builds using it meanwhile never see it half-updated.
    """
    root = rootfs_dir()
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.parent / f"{ROOTFS_NAME}.lock"):
        _remove_retired(root.parent)
        existing = provisioned_hip()
        if existing is not None:
            missing = missing_rootfs_packages()
            if not missing:
                return existing
            _upgrade_rootfs(root, missing, log=log)
        else:
            _debootstrap(root, log=log)
    result = provisioned_hip()
    assert result is not None
    return result


def _debootstrap(root: Path, *, log: bool) -> None:
    if os.geteuid() != 0:
        raise ToolchainError(
            f"provisioning the AMD toolchain needs root once (debootstrap makes its Debian root file "
            f"system, here {root}); what works: provision as root into a folder of your choice, "
            "`sudo env KERNELPACK_TOOLCHAIN_DIR=DIR kernelpack-build toolchain --provision` "
            "(or `python3 -m buildsys` in place of kernelpack-build), then `sudo chown $USER DIR` "
            "(the folder, for the probe results) and build as this user with "
            "KERNELPACK_TOOLCHAIN_DIR=DIR; or install ROCm and set ROCM_PATH"
        )
    _ensure_host_tools(log=log)
    scratch = root.parent / f"{ROOTFS_NAME}.partial"
    if scratch.exists():
        shutil.rmtree(scratch)
    if root.exists():
        shutil.rmtree(root)
    _say(
        log,
        f"provisioning the AMD toolchain: Debian {ROOTFS_SUITE} + {', '.join(ROOTFS_PACKAGES)} "
        f"into {root} (downloads over 1 GB, about a minute on a fast mirror)",
    )
    started = time.monotonic()
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(ROOTFS_PACKAGES)}",
        ROOTFS_SUITE,
        str(scratch),
        os.environ.get("KERNELPACK_DEBIAN_MIRROR", ROOTFS_MIRROR),
    ]
    _run_with_progress(argv, log=log, logfile=root.parent / f"{ROOTFS_NAME}.log")
    _install_packages(scratch, ROOTFS_HEADER_PACKAGES, logfile=root.parent / f"{ROOTFS_NAME}.log")
    version = _write_marker(scratch, (*ROOTFS_PACKAGES, *ROOTFS_HEADER_PACKAGES))
    scratch.rename(root)
    _say(log, f"provisioned {version} in {time.monotonic() - started:.0f} s")


def _write_marker(rootfs: Path, packages: Sequence[str]) -> str:
    """Measure the hipcc of ``rootfs`` and write the marker that makes it a complete toolchain."""
    toolchain = Toolchain("hip", f"hipcc ({ROOTFS_NAME})", "?", Path("/usr/bin"), rootfs=rootfs)
    version = _hip_version(toolchain.run(["hipcc", "--version"]).stdout)
    facts = {"version": version, "suite": ROOTFS_SUITE, "packages": list(packages)}
    atomic_write(rootfs / _COMPLETE_MARKER, json.dumps(facts).encode())
    return version


# A replaced root file system is kept this long under a ".retired-<time>" name: a compile that
# started in it before the swap still reads its headers (bubblewrap bound the folder itself).
RETIRED_KEEP_S = 3600


def _upgrade_rootfs(root: Path, missing: Sequence[str], *, log: bool) -> None:
    """Install ``missing`` into a copy of ``root`` and swap the copy in with one atomic rename.

    Builds that run meanwhile keep using the old tree: it stays complete until the swap, and after
    it the old tree lives on under a retired name (removed by a later provisioning, after
    RETIRED_KEEP_S) for compiles that were already running in it. A failure removes the copy and
    leaves ``root`` as it was.
    """
    scratch = root.parent / f"{ROOTFS_NAME}.partial"
    if scratch.exists():
        shutil.rmtree(scratch)
    _say(log, f"updating the AMD toolchain in {root}: adding {', '.join(missing)} (in a copy)")
    started = time.monotonic()
    try:
        _copy_tree(root, scratch)
        _install_packages(scratch, missing, logfile=root.parent / f"{ROOTFS_NAME}.log")
        have = json.loads((root / _COMPLETE_MARKER).read_text()).get("packages", [])
        packages = [*have, *(p for p in missing if p not in have)]
        version = _write_marker(scratch, packages)
        _exchange(scratch, root)  # root is now the updated tree, scratch the old one
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    scratch.rename(root.parent / f"{ROOTFS_NAME}.retired-{time.time():.0f}")
    _say(log, f"updated {version} in {time.monotonic() - started:.0f} s")


def _copy_tree(source: Path, destination: Path) -> None:
    """A full copy keeping owners, modes and links (``cp -a``, sharing blocks where it can)."""
    result = subprocess.run(
        ["cp", "-a", "--reflink=auto", str(source), str(destination)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ToolchainError(f"copying {source} failed: {result.stderr.strip()[-300:]}")


def _install_packages(rootfs: Path, packages: Sequence[str], *, logfile: Path) -> None:
    """apt-get install ``packages`` inside ``rootfs`` (run as root through bubblewrap, which
    keeps root's capabilities for dpkg), appending apt's output to ``logfile``; those of
    ROOTFS_HEADER_PACKAGES are downloaded and unpacked without their dependencies."""
    if os.geteuid() != 0:
        raise ToolchainError(
            f"adding {', '.join(packages)} to the provisioned toolchain needs root (apt-get in "
            f"its root file system): run `python -m buildsys toolchain --provision` as root"
        )
    wrapper = ["bwrap", "--bind", str(rootfs), "/", "--proc", "/proc", "--dev", "/dev"]
    if Path("/etc/resolv.conf").exists():
        wrapper += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    wrapper += ["--setenv", "DEBIAN_FRONTEND", "noninteractive", "--die-with-parent"]
    wrapper += ["--chdir", "/tmp"]  # where `apt-get download` leaves the header packages
    # Valid-Until is not checked, as debootstrap does not check it: a mirror (or the machine's
    # clock) a few days off must not stop an update that debootstrap itself would have made.
    quiet = ["-qq", "-o", "Dpkg::Use-Pty=0", "-o", "Acquire::Check-Valid-Until=false"]
    installed = [p for p in packages if p not in ROOTFS_HEADER_PACKAGES]
    headers = [p for p in packages if p in ROOTFS_HEADER_PACKAGES]
    steps: list[tuple[str, list[str]]] = [("apt-get update", ["apt-get", *quiet, "update"])]
    if installed:
        install = ["apt-get", *quiet, "install", "-y", "--no-install-recommends", *installed]
        steps.append((f"apt-get install {' '.join(installed)}", install))
    if headers:
        unpack = 'for deb in ./*.deb; do dpkg-deb -x "$deb" / && rm "$deb" || exit 1; done'
        steps.append(
            (f"apt-get download {' '.join(headers)}", ["apt-get", *quiet, "download", *headers])
        )
        steps.append(("dpkg-deb -x (the header packages)", ["sh", "-c", unpack]))
    steps.append(("apt-get clean", ["apt-get", *quiet, "clean"]))
    with logfile.open("a") as sink:
        for label, argv in steps:
            try:
                result = subprocess.run(
                    [*wrapper, *argv],
                    capture_output=True,
                    text=True,
                    env=dict(os.environ, PATH=host_tool_path()),
                )
            except OSError as error:
                raise ToolchainError(f"cannot run bwrap: {error.strerror}") from None
            sink.write(f"$ {' '.join(argv)}\n{result.stdout}{result.stderr}")
            if result.returncode != 0:
                tail = (result.stderr or result.stdout).strip()[-300:]
                raise ToolchainError(
                    f"{label} in the provisioned toolchain failed (exit {result.returncode}): "
                    f"{tail}; its log is {logfile}; re-run to try again (the toolchain was left "
                    "as it was)"
                )


def _exchange(first: Path, second: Path) -> None:
    """Swap two folders in one step: no moment where either name is missing, so a build looking
    the toolchain up meanwhile finds the old or the new one. No fallback: where the file system
    cannot swap, the update is refused rather than made visible half-way."""
    try:
        swapped = exchange(first, second)
    except OSError as error:
        swapped, reason = False, error.strerror
    else:
        reason = "not supported here"
    if not swapped:
        raise ToolchainError(
            f"cannot swap {first} and {second}: {reason} (the file system must "
            "support renameat2 RENAME_EXCHANGE); the toolchain was left as it was"
        )


def _remove_retired(folder: Path) -> None:
    """Remove root file systems replaced by an update more than RETIRED_KEEP_S ago."""
    for retired in folder.glob(f"{ROOTFS_NAME}.retired-*"):
        stamp = retired.name.rsplit("-", 1)[1]
        if stamp.isdigit() and time.time() - int(stamp) > RETIRED_KEEP_S:
            shutil.rmtree(retired, ignore_errors=True)


def _ensure_host_tools(*, log: bool) -> None:
    missing = _missing_host_tools()
    if not missing:
        return
    packages = ["bubblewrap" if tool == "bwrap" else tool for tool in missing]
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ToolchainError(
            f"provisioning needs {' and '.join(packages)}, and root for debootstrap: "
            f"as root run `apt-get install {' '.join(packages)}`, or install ROCm and set ROCM_PATH"
        )
    _say(log, f"installing {' '.join(packages)} with apt-get")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
        )
        if result.returncode != 0:
            raise ToolchainError(f"{' '.join(argv)} failed: {result.stderr.strip()[-300:]}")


def _run_with_progress(argv: list[str], *, log: bool, logfile: Path) -> None:
    """Run debootstrap, keeping its full output in a log and showing a package count."""
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PATH=host_tool_path()),
        )
    except OSError as error:
        raise ToolchainError(
            f"cannot run {argv[0]}: {error.strerror}; as root run `apt-get install {argv[0]}`, "
            "or install ROCm and set ROCM_PATH"
        ) from None
    with logfile.open("w") as sink, process:
        assert process.stdout is not None
        counts = {"Retrieving": 0, "Extracting": 0, "Unpacking": 0, "Configuring": 0}
        last_report = 0.0
        for line in process.stdout:
            sink.write(line)
            for word in counts:
                if line.startswith(f"I: {word}"):
                    counts[word] += 1
            if log and time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                done = ", ".join(f"{k.lower()} {v}" for k, v in counts.items() if v)
                print(f"  debootstrap: {done or line.strip()}", file=sys.stderr, flush=True)
        if process.wait() != 0:
            raise ToolchainError(
                f"debootstrap failed (exit {process.returncode}); its log is {logfile}; "
                "re-run to try again (nothing half-made is kept)"
            )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _say(log: bool, message: str) -> None:
    if log:
        print(message, file=sys.stderr, flush=True)


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


# ---------------------------------------------------------------------------------------------
# NVIDIA


def cuda_toolchain() -> Toolchain | None:
    """nvcc, if installed."""
    candidates = [
        os.environ.get("CUDA_HOME", ""),
        os.environ.get("CUDA_PATH", ""),
        "/usr/local/cuda",
    ]
    nvcc: str | None = None
    for root in candidates:
        if root and (Path(root) / "bin" / "nvcc").exists():
            nvcc = str(Path(root) / "bin" / "nvcc")
            break
    nvcc = nvcc or shutil.which("nvcc")
    if nvcc is None:
        return None
    version, _ = _nvcc_facts(nvcc)
    return Toolchain("cuda", "nvcc", f"CUDA {version}", Path(nvcc).parent)


def _nvcc_facts(nvcc: str) -> tuple[str, list[str]]:
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


def _nvcc_buildable(toolchain: Toolchain, targets: Iterable[str]) -> dict[str, bool]:
    codes = set(_nvcc_facts(str(toolchain.bindir / "nvcc"))[1])
    return {t: t in codes for t in sorted(set(targets))}
