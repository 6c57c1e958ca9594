"""The toolchains installed here: a native ROCm, nvcc, and the root file system provisioning made.

AMD: a native ROCm (``ROCM_PATH``, ``/opt/rocm``, ``hipcc`` on PATH), or the builder's own Debian sid
root file system (minbase plus ROOTFS_PACKAGES: HIP 6.4, LLVM 21, and the header-only rocThrust,
hipCUB and rocPRIM, so translated ``thrust`` and ``cub`` code compiles) in the user's cache folder,
complete once its marker is written (:mod:`.provision` makes it). NVIDIA: nvcc from ``CUDA_HOME``,
``CUDA_PATH``, ``/usr/local/cuda`` or PATH.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..errors import ToolchainError
from .compiler import Toolchain, cache_root, nvcc_facts

# hipcc and hipify-perl; then rocThrust (thrust/), hipCUB (hipcub/, what cub/ becomes) and rocPRIM
# (hipCUB's and rocThrust's back end): header-only, built by Debian for the same HIP 6.4.
ROOTFS_PACKAGES = ("hipcc", "hipify-perl", "librocthrust-dev", "libhipcub-dev", "librocprim-dev")


# hipBLAS and hipBLASLt: their headers only (dpkg-deb -x of the -dev packages, no dependencies).
# Kernel sources include cuBLAS headers from shared host code (llm.c's common.h) without calling
# it from a kernel; kernelpack compiles device code and never links a BLAS, and the packages'
# runtime dependency, rocBLAS, installs 4 GB of kernels.
ROOTFS_HEADER_PACKAGES = ("libhipblas-dev", "libhipblas-common-dev", "libhipblaslt-dev")


ROOTFS_NAME = "debian-sid-hip"


COMPLETE_MARKER = ".kernelpack-rootfs.json"


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
    return Toolchain("hip", "hipcc", hip_version(result.stdout), bindir)


def hip_version(text: str) -> str:
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
    marker = root / COMPLETE_MARKER
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
    marker = rootfs_dir() / COMPLETE_MARKER
    if not marker.exists():
        return wanted
    have = set(json.loads(marker.read_text()).get("packages", ()))
    return tuple(package for package in wanted if package not in have)


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
    version, _ = nvcc_facts(nvcc)
    return Toolchain("cuda", "nvcc", f"CUDA {version}", Path(nvcc).parent)
