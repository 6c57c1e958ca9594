"""Real third-party CUDA kernels, fetched from PyPI at test time, translate and compile for AMD.

The corpus is exllamav2 0.0.4's sdist (MIT, https://github.com/turboderp/exllamav2), pinned by
version and sha256 and cached under the user cache folder (``test-corpus/``). Three of its kernel
files that need nothing beyond the CUDA runtime (the others include ATen or cuRAND) are translated
with every project header, compiled for gfx1100 (one target keeps CI time small: about a minute on
2 cores), and each object must hold every kernel the CUDA source declares. rms_norm.cu also carries
a real wave64 bug, read by hand: its reductions shuffle across ``warpSize`` lanes while lane and
warp ids count in 32s (``#define WARP_SIZE 32``), so on a 64-lane wavefront two 32-lane warps are
summed twice. The translation must report it.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys.hipify import COMPAT_DIR, hipify_source
from kernelpack.files.paths import user_cache_folder
from kernelpack.formats.code_objects import read_code_object

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = [pytest.mark.network, pytest.mark.toolchain]

SDIST_URL = (
    "https://files.pythonhosted.org/packages/2a/95/ca716fd734582f9abc06bdf51860de9e393ce106d814"
    "31d650a60557e45d/exllamav2-0.0.4.tar.gz"
)
SDIST_SHA256 = "c9eeba99d817c79a6271c3efb0e54f1c5f046a4cab874210fd3745d46b465f56"
EXTENSION = "exllamav2-0.0.4/exllamav2/exllamav2_ext/"
FILES = ("cuda/rms_norm.cu", "cuda/rope.cu", "cuda/pack_tensor.cu")
TARGET = "gfx1100"
_GLOBAL_RE = re.compile(r"__global__\s+void\s+(\w+)")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def extension(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist's extension folder, unpacked; the sdist is downloaded once and kept by hash."""
    cached = user_cache_folder() / "test-corpus" / f"{SDIST_SHA256}.tar.gz"
    if not cached.is_file() or _sha256(cached) != SDIST_SHA256:
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_suffix(f".{id(cached)}.part")
        # a test marked network fails offline rather than skipping: deselect it with -m "not network"
        urllib.request.urlretrieve(SDIST_URL, partial)
        assert _sha256(partial) == SDIST_SHA256, f"{SDIST_URL}: sha256 differs from the pin"
        partial.replace(cached)
    folder = tmp_path_factory.mktemp("exllamav2")
    # the extension's regular files, written by hand: extractall's filter= came with Python
    # 3.11.4, and Debian 12's Python is 3.11.2
    with tarfile.open(cached) as archive:
        for member in archive.getmembers():
            if not (member.name.startswith(EXTENSION) and member.isfile()):
                continue
            target = (folder / member.name).resolve()
            assert target.is_relative_to(folder.resolve()), member.name
            source = archive.extractfile(member)
            assert source is not None, member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read())
    return folder / EXTENSION


@dataclass(frozen=True)
class HipTree:
    folder: Path
    diagnostics: dict[str, str]  # by CUDA path: the file's diagnostics, formatted, one per line


@pytest.fixture(scope="module")
def hip_tree(extension: Path, tmp_path_factory: pytest.TempPathFactory) -> HipTree:
    """Every CUDA source and header of the extension translated into a tree of the same layout."""
    tree = tmp_path_factory.mktemp("exllamav2-hip")
    diagnostics: dict[str, str] = {}
    for path in sorted(extension.rglob("*")):
        if path.suffix not in (".cu", ".cuh", ".h") or not path.is_file():
            continue
        relative = path.relative_to(extension).as_posix()
        result = hipify_source(path.read_text(encoding="utf-8"), relative)
        target = tree / (relative[: -len(".cu")] + ".hip" if relative.endswith(".cu") else relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(result.text, encoding="utf-8")
        diagnostics[relative] = "\n".join(d.format() for d in result.diagnostics)
    return HipTree(tree, diagnostics)


@pytest.mark.parametrize("relative", FILES)
def test_real_kernels_compile_with_every_kernel(
    relative: str,
    extension: Path,
    hip_tree: HipTree,
    amd_toolchain: Toolchain,
    tmp_path: Path,
) -> None:
    tree = hip_tree.folder
    assert " error[" not in hip_tree.diagnostics[relative], hip_tree.diagnostics[relative]
    source = tree / (relative[: -len(".cu")] + ".hip")
    code_object = tmp_path / f"{TARGET}.co"
    flags = ["-std=c++17", "-x", "hip", "-DUSE_ROCM", "-I", str(COMPAT_DIR), "-c"]
    device = ["--cuda-device-only", "--no-gpu-bundle-output", f"--offload-arch={TARGET}"]
    result = amd_toolchain.run(
        ["hipcc", *flags, *device, str(source), "-o", str(code_object)],
        cwd=tree,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    kernels = {k.name for k in read_code_object(code_object.read_bytes(), str(code_object)).kernels}
    declared = set(_GLOBAL_RE.findall((extension / relative).read_text(encoding="utf-8")))
    assert declared, f"{relative}: no __global__ function found in the CUDA source"
    # a C++ kernel's symbol carries its name with its length in front (_Z15rms_norm_kernelILi1EE...)
    missing = {
        name
        for name in declared
        if not any(k == name or f"{len(name)}{name}" in k for k in kernels)
    }
    assert not missing, f"{relative}: kernels missing from the {TARGET} object: {sorted(missing)}"


def test_real_wave64_bug_is_reported(hip_tree: HipTree) -> None:
    """rms_norm.cu's 32-lane ids beside warpSize-wide reductions: found, at the two defines."""
    findings = hip_tree.diagnostics["cuda/rms_norm.cu"].splitlines()
    wave = [line for line in findings if "warning[warp-size]" in line]
    assert [line.split(":")[1] for line in wave] == ["10", "11"], findings
