"""Shared fixtures: the provisioned AMD toolchain, the GPU gate, and a checkout after the README's
Quick start.

Tests marked ``toolchain`` get the AMD compiler through the same provisioning a user gets
(buildsys.toolchain); tests marked ``gpu`` are skipped where no GPU can be used, and those marked
``nvcc`` where NVIDIA's compiler is not installed, and those marked ``amd_emulator`` where
KERNELPACK_AMD_EMULATOR is unset.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain


@functools.cache
def gpu_available() -> bool:
    """True when the CUDA driver loads and reports a device (the GPU tests run on an NVIDIA GPU),
    asked through kernelpack's own binding of libcuda."""
    from kernelpack.devices.detect import cuda_driver_devices

    return bool(cuda_driver_devices())


@functools.cache
def nvcc_available() -> bool:
    """True when the CUDA toolkit's nvcc is installed (tests marked ``nvcc`` compile with it)."""
    from buildsys.toolchain import cuda_toolchain

    return cuda_toolchain() is not None


def amd_emulator_named() -> bool:
    """True when KERNELPACK_AMD_EMULATOR names a folder; one that is no emulator checkout fails
    the tests marked ``amd_emulator`` with the emulator's message, never skips them."""
    return bool(os.environ.get("KERNELPACK_AMD_EMULATOR", "").strip())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gates = {
        "gpu": (gpu_available, "no GPU on this machine (libcuda absent or no device)"),
        "nvcc": (nvcc_available, "no nvcc on this machine (install the CUDA toolkit)"),
        "amd_emulator": (
            amd_emulator_named,
            "KERNELPACK_AMD_EMULATOR is not set (a checkout of tinygrad's repository: docs/amd.md)",
        ),
    }
    for marker, (available, reason) in gates.items():
        marked = [item for item in items if marker in item.keywords]
        if marked and not available():
            for item in marked:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def amd_toolchain() -> Toolchain:
    """The AMD HIP toolchain, provisioned on first use exactly as `buildsys toolchain --provision`."""
    from buildsys.toolchain import amd_toolchain

    return amd_toolchain(provision=True)


def readme_commands(section: str) -> list[str]:
    """The command lines of the ``sh`` blocks in one ``## section`` of the README, as written:
    the README stays the source of what the tests run."""
    from buildsys import REPO_ROOT

    readme = (REPO_ROOT / "README.md").read_text()
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## )", readme, re.M | re.S)
    assert match is not None, section
    blocks = re.findall(r"^```sh\n(.*?)^```", match.group(1), re.M | re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def newcomer_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a new user's shell: a fresh HOME, the system's PATH, the package index
    settings of this machine (PIP_* but PIP_FIND_LINKS and PIP_NO_INDEX, so the only local folder
    is the one the documents name; proxies), and the provisioned AMD toolchain named through
    KERNELPACK_TOOLCHAIN_DIR as the README says a user without root does."""
    from buildsys.toolchain import cache_root

    kept = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k.endswith("_proxy")}
    home.mkdir(parents=True, exist_ok=True)
    return {
        **{k: v for k, v in kept.items() if k not in ("PIP_FIND_LINKS", "PIP_NO_INDEX")},
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "KERNELPACK_TOOLCHAIN_DIR": str(cache_root()),
        **extra,
    }


def _copy_checkout(destination: Path) -> None:
    """This checkout as a fresh clone holds it, with the working tree's uncommitted changes (a
    clone, so the wheels' version comes from git as it does for a user)."""
    from buildsys import REPO_ROOT

    subprocess.run(["git", "clone", "--quiet", str(REPO_ROOT), str(destination)], check=True)
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--modified", "--others", "--exclude-standard", "--deleted"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    ).stdout
    for name in sorted(set(listed.decode().split("\0")) - {""}):
        source, target = REPO_ROOT / name, destination / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        else:
            target.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def quickstart_checkout(tmp_path_factory: pytest.TempPathFactory, amd_toolchain: Toolchain) -> Path:
    """A copy of this checkout after the README Quick start's first line, run as written in a
    new user's shell (:func:`newcomer_env`); ``KERNELPACK_BUILD_TARGETS=gfx942`` keeps the build
    to one target, as the README's builder settings allow. Its dist/ is what docs/your-kernels.md
    points PIP_FIND_LINKS at."""
    root = tmp_path_factory.mktemp("quickstart")
    checkout = root / "kernelpack"
    _copy_checkout(checkout)
    env = newcomer_env(root / "home", KERNELPACK_BUILD_TARGETS="gfx942")
    build = readme_commands("Quick start")[0]
    result = subprocess.run(
        ["bash", "-c", build], cwd=checkout, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    return checkout
