"""Compilers: find them, provision the AMD one when none can build the matrix, and say what each builds.

One concept a module: :mod:`.compiler` is what a toolchain is (how its programs run, natively or
in a root file system through bubblewrap, and which targets it builds, measured by a probe
compile); :mod:`.found` finds the installed ones (a native ROCm, nvcc, the provisioned root file
system); :mod:`.provision` makes or updates that root file system. This module chooses among them:
the toolchain a build uses (:func:`amd_toolchain`) and those ``python -m buildsys toolchain``
reports (:func:`reported_toolchains`), provisioning by one rule (:func:`_provisioned`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ToolchainError
from .compiler import LLVM_TOOLS, STOP_POLL_S, Toolchain, cache_root
from .found import (
    ROOTFS_HEADER_PACKAGES,
    ROOTFS_NAME,
    ROOTFS_PACKAGES,
    cuda_toolchain,
    find_native_hip,
    missing_rootfs_packages,
    provisioned_hip,
    rootfs_dir,
)
from .provision import provision_hip

__all__ = [
    "LLVM_TOOLS",
    "ROOTFS_HEADER_PACKAGES",
    "ROOTFS_NAME",
    "ROOTFS_PACKAGES",
    "STOP_POLL_S",
    "Toolchain",
    "amd_toolchain",
    "cache_root",
    "cuda_toolchain",
    "find_native_hip",
    "missing_rootfs_packages",
    "provision_hip",
    "provisioned_hip",
    "reported_toolchains",
    "rootfs_dir",
]


def amd_toolchain(*, provision: bool = False, targets: Sequence[str] = ()) -> Toolchain:
    """The AMD toolchain that can build ``targets``: native first, else the provisioned one.

    With ``provision`` a missing root file system is made (over a gigabyte of downloads);
    without it, its absence is a ToolchainError that says how to provision.
    """
    native = find_native_hip()
    if native is not None and (not targets or all(native.buildable(targets).values())):
        return native
    provisioned = _provisioned(provision=provision, needed=True)
    if provisioned is not None:
        return provisioned
    why = (
        f"{native.name} {native.version} cannot build {', '.join(t for t, ok in native.buildable(targets).items() if not ok)}"
        if native
        else "no AMD HIP compiler found (ROCM_PATH, /opt/rocm, hipcc on PATH)"
    )
    raise ToolchainError(
        f"{why}; run `python -m buildsys toolchain --provision` (or `nox -s toolchain`) to provision one"
    )


def reported_toolchains(amd_targets: Sequence[str], *, provision: bool) -> list[Toolchain]:
    """What ``python -m buildsys toolchain`` reports: the native HIP compiler, the provisioned one
    (with ``provision``, made where the native one cannot build every one of ``amd_targets``, or
    brought up to ROOTFS_PACKAGES), and nvcc; each that is there."""
    native = find_native_hip()
    needed = native is None or not all(native.buildable(amd_targets).values())
    found = [native, _provisioned(provision=provision, needed=needed), cuda_toolchain()]
    return [chain for chain in found if chain is not None]


def _provisioned(*, provision: bool, needed: bool) -> Toolchain | None:
    """The provisioned toolchain, if there is one; with ``provision``, one that lacks packages of
    ROOTFS_PACKAGES is updated, and a missing one is made where it is ``needed``."""
    existing = provisioned_hip()
    if not provision:
        return existing
    if existing is None:
        return provision_hip() if needed else None
    return provision_hip() if missing_rootfs_packages() else existing
