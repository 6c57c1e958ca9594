"""The provisioned AMD toolchain builds every default target; nvcc is found; errors are clear."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildsys import REPO_ROOT, toolchain
from buildsys.errors import ToolchainError
from buildsys.matrix import load_matrix
from buildsys.toolchain import Toolchain, amd_toolchain, cuda_toolchain, found, provision


@pytest.mark.toolchain
def test_provisioned_toolchain_builds_every_default_amd_target(amd_toolchain: Toolchain) -> None:
    targets = [t.target for t in load_matrix().amd]
    buildable = amd_toolchain.buildable([*targets, "gfx11-generic"])
    assert buildable == dict.fromkeys(sorted([*targets, "gfx11-generic"]), True)
    for tool in ("clang-offload-bundler", "llvm-readelf", "llvm-objdump", "hipify-perl"):
        assert amd_toolchain.tool(tool)


@pytest.mark.toolchain
def test_probe_rejects_a_target_the_compiler_lacks(amd_toolchain: Toolchain) -> None:
    assert amd_toolchain.buildable(["gfx9999"]) == {"gfx9999": False}


@pytest.mark.toolchain
def test_toolchain_json_lists_targets(amd_toolchain: Toolchain) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "buildsys", "toolchain", "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    report = json.loads(result.stdout)
    hip = next(t for t in report["toolchains"] if t["kind"] == "hip")
    assert {t.target for t in load_matrix().amd} <= set(hip["buildable"])
    assert hip["version"].startswith("HIP ")


@pytest.mark.toolchain
def test_compiled_code_object_is_amdgpu_elf(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    source = tmp_path / "k.hip"
    source.write_text(
        '#include <hip/hip_runtime.h>\nextern "C" __global__ void k(int* x) { x[0] = 1; }\n'
    )
    out = tmp_path / "k.co"
    amd_toolchain.run(
        [
            "hipcc",
            "--genco",
            "--offload-arch=gfx1100",
            "--no-offload-compress",
            str(source),
            "-o",
            str(out),
        ],
        cwd=tmp_path,
    )
    assert out.read_bytes().startswith(b"__CLANG_OFFLOAD_BUNDLE__")


def test_missing_toolchain_says_how_to_provision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    with pytest.raises(ToolchainError, match="--provision"):
        amd_toolchain(provision=False)


@pytest.mark.nvcc
def test_nvcc_targets() -> None:
    cuda = cuda_toolchain()
    assert cuda is not None
    assert cuda.buildable(["sm_90", "compute_80", "sm_1"]) == {
        "compute_80": True,
        "sm_1": False,
        "sm_90": True,
    }


def test_a_folder_that_would_hide_the_rootfs_is_refused(tmp_path: Path) -> None:
    rootfs = Toolchain("hip", "hipcc", "HIP test", Path("/usr/bin"), rootfs=tmp_path)
    with pytest.raises(ToolchainError, match="/usr/share: the provisioned toolchain cannot see it"):
        rootfs.command(["/usr/bin/hipcc", "--version"], cwd=Path("/usr/share"))
    assert rootfs.command(["/usr/bin/hipcc"], cwd=tmp_path)[:2] == ["bwrap", "--bind"]


def test_host_tools_in_sbin_are_found_without_sbin_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root shell without a login may lack the sbin folders, where Debian puts debootstrap."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    for tool in ("debootstrap", "bwrap"):
        (sbin / tool).write_text("#!/bin/sh\n")
        (sbin / tool).chmod(0o755)
    monkeypatch.setattr(provision, "SYSTEM_TOOL_DIRS", (str(sbin),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert provision.host_tool_path() == f"{tmp_path / 'empty'}:{sbin}"
    assert provision._missing_host_tools() == []


def test_a_first_run_without_root_says_what_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """debootstrap runs as root only: a user's first provisioning is one error naming the two
    ways that work (provision once as root into KERNELPACK_TOOLCHAIN_DIR, or ROCm), before
    anything is downloaded, not debootstrap's own line and "re-run to try again"."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    for tool in ("debootstrap", "bwrap"):  # the host tools are there; root is what is missing
        (sbin / tool).write_text(
            "#!/bin/sh\necho 'E: debootstrap can only run as root' >&2\nexit 1\n"
        )
        (sbin / tool).chmod(0o755)
    monkeypatch.setattr(provision, "SYSTEM_TOOL_DIRS", (str(sbin),))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path / "toolchains"))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ToolchainError) as raised:
        toolchain.provision_hip(log=False)
    message = str(raised.value)
    assert "\n" not in message
    assert "needs root once" in message
    assert "sudo env KERNELPACK_TOOLCHAIN_DIR=DIR kernelpack-build toolchain --provision" in message
    assert "build as this user with KERNELPACK_TOOLCHAIN_DIR=DIR" in message
    assert "ROCM_PATH" in message and "re-run" not in message
    assert not (tmp_path / "toolchains" / f"{toolchain.ROOTFS_NAME}.partial").exists()


def test_a_host_tool_that_cannot_run_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match=r"cannot run .*apt-get install"):
        provision._run_with_progress(
            [str(tmp_path / "debootstrap")], log=False, logfile=tmp_path / "log"
        )


def _old_rootfs(folder: Path, packages: list[str]) -> Path:
    """A stand-in provisioned root file system: a marker listing ``packages`` and one header."""
    root = folder / toolchain.ROOTFS_NAME
    (root / "usr" / "include" / "hip").mkdir(parents=True)
    (root / "usr" / "include" / "hip" / "hip_runtime.h").write_text("// old\n")
    marker = {"version": "HIP old", "suite": "sid", "packages": packages}
    (root / found.COMPLETE_MARKER).write_text(json.dumps(marker))
    return root


def test_an_old_rootfs_gets_the_new_packages_in_a_copy_swapped_in_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A root file system provisioned before the ROCm libraries joined ROOTFS_PACKAGES is
    updated: the packages go into a copy while the live tree stays untouched, and the copy
    replaces it in one step; the old tree is kept (retired) for compiles still running in it."""
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    root = _old_rootfs(tmp_path, ["hipcc", "hipify-perl"])
    assert toolchain.missing_rootfs_packages() == (
        "librocthrust-dev",
        "libhipcub-dev",
        "librocprim-dev",
        "libhipblas-dev",
        "libhipblas-common-dev",
        "libhipblaslt-dev",
    )
    installs: list[tuple[Path, tuple[str, ...]]] = []

    def install(rootfs: Path, packages: tuple[str, ...], *, logfile: Path) -> None:
        assert rootfs != root and (rootfs / "usr/include/hip/hip_runtime.h").exists()
        assert not (root / "usr/include/thrust").exists()  # the live tree is not touched
        (rootfs / "usr/include/thrust").mkdir()
        (rootfs / "usr/include/thrust/scan.h").write_text("// new\n")
        installs.append((rootfs, tuple(packages)))

    def marker(rootfs: Path, packages: list[str]) -> str:
        (rootfs / found.COMPLETE_MARKER).write_text(
            json.dumps({"version": "HIP new", "suite": "sid", "packages": packages})
        )
        return "HIP new"

    monkeypatch.setattr(provision, "_install_packages", install)
    monkeypatch.setattr(provision, "_write_marker", marker)
    updated = amd_toolchain(provision=True)
    assert installs == [(tmp_path / f"{toolchain.ROOTFS_NAME}.partial", installs[0][1])]
    assert set(installs[0][1]) == {"librocthrust-dev", "libhipcub-dev", "librocprim-dev"} | set(
        toolchain.ROOTFS_HEADER_PACKAGES
    )
    assert updated.rootfs == root and updated.version == "HIP new"
    assert (root / "usr/include/thrust/scan.h").read_text() == "// new\n"
    assert toolchain.missing_rootfs_packages() == ()
    retired = list(tmp_path.glob(f"{toolchain.ROOTFS_NAME}.retired-*"))
    assert len(retired) == 1 and not (retired[0] / "usr/include/thrust").exists()
    assert not (tmp_path / f"{toolchain.ROOTFS_NAME}.partial").exists()
    # up to date: nothing is copied or installed again; an hour later the retired tree goes
    amd_toolchain(provision=True)
    assert len(installs) == 1
    monkeypatch.setattr(provision, "RETIRED_KEEP_S", -1)
    toolchain.provision_hip(log=False)
    assert not list(tmp_path.glob(f"{toolchain.ROOTFS_NAME}.retired-*"))
    assert (root / "usr/include/thrust/scan.h").exists()


def test_a_failed_update_leaves_the_rootfs_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path))
    root = _old_rootfs(tmp_path, ["hipcc", "hipify-perl"])
    before = sorted(p.relative_to(root) for p in root.rglob("*"))

    def install(rootfs: Path, packages: tuple[str, ...], *, logfile: Path) -> None:
        (rootfs / "usr/include/half-installed.h").write_text("")
        raise ToolchainError("apt-get install in the provisioned toolchain failed (exit 100)")

    monkeypatch.setattr(provision, "_install_packages", install)
    with pytest.raises(ToolchainError, match="exit 100"):
        toolchain.provision_hip(log=False)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before
    assert json.loads((root / found.COMPLETE_MARKER).read_text())["version"] == "HIP old"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        toolchain.ROOTFS_NAME,
        f"{toolchain.ROOTFS_NAME}.lock",
    ]


def test_exchange_swaps_two_folders(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_text("a")
    (tmp_path / "b").mkdir()
    provision._exchange(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "b" / "one").read_text() == "a" and not list((tmp_path / "a").iterdir())
    with pytest.raises(ToolchainError, match="cannot swap"):
        provision._exchange(tmp_path / "a", tmp_path / "missing")


def test_the_toolchain_command_provisions_by_the_builds_rule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toolchain` reports what is there without --provision; with it, an old root file system is
    brought up to ROOTFS_PACKAGES, as a build's amd_toolchain(provision=True) does."""
    monkeypatch.setenv("KERNELPACK_TOOLCHAIN_DIR", str(tmp_path))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))

    def hip(provision: bool) -> list[str]:
        chains = toolchain.reported_toolchains(["gfx1100"], provision=provision)
        return [chain.version for chain in chains if chain.kind == "hip"]

    assert hip(False) == []
    _old_rootfs(tmp_path, ["hipcc", "hipify-perl"])
    calls: list[tuple[str, ...]] = []

    def install(rootfs: Path, packages: tuple[str, ...], *, logfile: Path) -> None:
        calls.append(tuple(packages))

    def marker(rootfs: Path, packages: list[str]) -> str:
        (rootfs / found.COMPLETE_MARKER).write_text(
            json.dumps({"version": "HIP new", "suite": "sid", "packages": packages})
        )
        return "HIP new"

    monkeypatch.setattr(provision, "_install_packages", install)
    monkeypatch.setattr(provision, "_write_marker", marker)
    assert hip(False) == ["HIP old"] and calls == []
    assert hip(True) == ["HIP new"] and len(calls) == 1
