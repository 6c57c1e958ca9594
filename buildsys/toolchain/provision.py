"""Provisioning the AMD toolchain: the Debian sid root file system made, or brought up to date.

debootstrap makes it in a scratch folder beside its final place, renamed into place only when
complete; a root file system made before a package joined ROOTFS_PACKAGES gets it the next time
provisioning runs, in a copy swapped in whole (renameat2 RENAME_EXCHANGE), so a build using the
toolchain meanwhile never sees it half-made or half-updated.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from kernelpack.files.atomic import atomic_write, exchange

from ..errors import ToolchainError
from .compiler import Toolchain
from .found import (
    COMPLETE_MARKER,
    ROOTFS_HEADER_PACKAGES,
    ROOTFS_NAME,
    ROOTFS_PACKAGES,
    hip_version,
    missing_rootfs_packages,
    provisioned_hip,
    rootfs_dir,
)

ROOTFS_SUITE = "sid"


ROOTFS_MIRROR = "http://deb.debian.org/debian"


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
    version = hip_version(toolchain.run(["hipcc", "--version"]).stdout)
    facts = {"version": version, "suite": ROOTFS_SUITE, "packages": list(packages)}
    atomic_write(rootfs / COMPLETE_MARKER, json.dumps(facts).encode())
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
        have = json.loads((root / COMPLETE_MARKER).read_text()).get("packages", [])
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
