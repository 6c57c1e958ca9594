"""Every CUDA name in the translation tables exists in CUDA's own headers (nvcc's preprocessor,
macros kept), so a table entry cannot be a misspelling that real code never contains."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from buildsys.hipify.tables import RENAMES, WARP_INTRINSICS, cuda_version_macros

pytestmark = pytest.mark.nvcc

CUDA_HEADERS = (
    "cuda.h",
    "cuda_runtime.h",
    "cuda_fp16.h",
    "cuda_bf16.h",
    "cuda_fp8.h",
    "cuda_profiler_api.h",
    "cooperative_groups.h",
    "math_constants.h",
    "library_types.h",
)
# Removed from CUDA 13's headers, still in legacy code that users bring (CUDA 12 declares it).
REMOVED_FROM_CUDA_13 = frozenset({"cudaThreadSynchronize"})
# cuBLAS's headers come with the cuBLAS package, not with nvcc, so this test cannot see them; the
# blas table's names are checked against hipBLAS's own headers (test_hipify_blas_toolchain.py).
NOT_IN_NVCCS_HEADERS = frozenset(name for name, r in RENAMES.items() if r.kind == "blas")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


@pytest.fixture(scope="module")
def cuda_identifiers(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is not on PATH (the nvcc marker says this test needs it)")
    folder = tmp_path_factory.mktemp("cuda-headers")
    source = folder / "all.cu"
    source.write_text("".join(f"#include <{h}>\n" for h in CUDA_HEADERS))
    result = subprocess.run(
        [nvcc, "-E", "-Xcompiler", "-dD", "-arch=sm_90", str(source), "-o", str(folder / "all.i")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return set(_IDENT_RE.findall(Path(folder / "all.i").read_text(errors="replace")))


@pytest.mark.parametrize(
    "name",
    sorted(
        {*RENAMES, *(w.cuda for w in WARP_INTRINSICS)} - REMOVED_FROM_CUDA_13 - NOT_IN_NVCCS_HEADERS
    ),
    ids=str,
)
def test_cuda_name_is_declared_by_cuda(name: str, cuda_identifiers: set[str]) -> None:
    assert name in cuda_identifiers


def test_version_macro_encoding_is_nvccs() -> None:
    # tables.cuda_version_macros encodes a release the way CUDA does: nvcc's own values for its
    # release (read from `nvcc --version`) are the independent source.
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.fail("nvcc is not on PATH (the nvcc marker says this test needs it)")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    found = re.search(r"release (\d+)\.(\d+)", version.stdout)
    assert found is not None, version.stdout
    release = (int(found[1]), int(found[2]))
    expected = cuda_version_macros(release)
    names = sorted(expected)
    probe = "#include <cuda.h>\n#include <cuda_runtime.h>\n" + "".join(
        f"int probe_{n} = {name};\n" for n, name in enumerate(names)
    )
    result = subprocess.run(
        [nvcc, "-E", "-x", "cu", "-arch=sm_90", "-"],
        input=probe,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    values = dict(re.findall(r"^int probe_(\d+) = (\d+);$", result.stdout, re.MULTILINE))
    assert {name: int(values[str(n)]) for n, name in enumerate(names)} == expected
