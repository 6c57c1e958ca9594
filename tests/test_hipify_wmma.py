"""WMMA (CUDA's mma.h) through kernelpack's portable header: the translation keeps the nvcuda::wmma
spelling and says once per file that it runs without matrix cores; the CLI and the builder ship
the header; translated WMMA code compiles for a wave64 and a wave32 target without matrix
instructions (toolchain). tests/test_hipify_wmma_gpu.py compares the header with CUDA's own WMMA
on an NVIDIA GPU."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys.cli import main as buildsys_main
from buildsys.hipify import COMPAT_DIR, Severity, hipify_source
from buildsys.hipify.tables import COMPAT_HEADER, WMMA_HEADER

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

# The shape of candle's and mistral.rs's MoE kernels (moe_wmma.cu), cut down.
CANDLE_STYLE = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <mma.h>
using namespace nvcuda::wmma;
template <typename T, int WMMA_M, int WMMA_N>
__global__ void tile(const T* a, const T* b, float* c) {
  const int warpId = threadIdx.x / 32;
  fragment<accumulator, WMMA_M, WMMA_N, 16, float> c_frag;
  fill_fragment(c_frag, 0.0f);
  fragment<matrix_a, WMMA_M, WMMA_N, 16, T, row_major> a_frag;
  fragment<matrix_b, WMMA_M, WMMA_N, 16, T, col_major> b_frag;
  load_matrix_sync(a_frag, a + warpId * WMMA_M * 16, 16);
  load_matrix_sync(b_frag, b, 16);
  mma_sync(c_frag, a_frag, b_frag, c_frag);
  for (int i = 0; i < c_frag.num_elements; ++i) c_frag.x[i] *= 2.0f;
  store_matrix_sync(c + warpId * WMMA_M * WMMA_N, c_frag, WMMA_N, mem_row_major);
}
template __global__ void tile<half, 16, 16>(const half*, const half*, float*);
template __global__ void tile<nv_bfloat16, 8, 32>(const nv_bfloat16*, const nv_bfloat16*, float*);
"""


def test_mma_h_becomes_the_portable_header_with_one_warning() -> None:
    result = hipify_source(CANDLE_STYLE, "moe_wmma.cu")
    assert f"#include <{WMMA_HEADER}>\n" in result.text
    assert f"#include <{COMPAT_HEADER}>\n" in result.text  # the CLI and builder ship the folder
    assert "using namespace nvcuda::wmma;" in result.text  # CUDA's spelling is the header's
    assert "mma_sync(c_frag, a_frag, b_frag, c_frag);" in result.text
    (finding,) = result.diagnostics
    assert (finding.line, finding.code, finding.severity) == (3, "wmma-portable", Severity.WARNING)
    assert "without matrix cores" in finding.message and "rocWMMA" in finding.message
    assert not result.has_errors


def test_qualified_spelling_and_alias_have_no_other_finding() -> None:
    text = (
        '#include "mma.h"\n'
        "namespace wmma = nvcuda::wmma;\n"
        "__global__ void k(float* c) {\n"
        "  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f;\n"
        "  wmma::fill_fragment(f, 1.0f);\n"
        "  wmma::store_matrix_sync(c, f, 16, wmma::mem_col_major);\n"
        "}\n"
    )
    result = hipify_source(text, "k.cu")
    assert f'#include "{WMMA_HEADER}"\n' in result.text
    assert [(d.line, d.code) for d in result.diagnostics] == [(1, "wmma-portable")]


def test_said_once_per_file_and_not_in_the_cuda_branch() -> None:
    twice = "#include <mma.h>\n#if 1\n#include <mma.h>\n#endif\n"
    (finding,) = hipify_source(twice, "t.cu").diagnostics
    assert finding.line == 1 and "(2 in this file, lines 1, 3)" in finding.message
    guarded = "#ifndef USE_ROCM\n#include <mma.h>\n#endif\n"
    assert hipify_source(guarded, "t.cu").diagnostics == ()


def test_cli_writes_the_wmma_header_beside_its_outputs(tmp_path: Path) -> None:
    source = tmp_path / "moe_wmma.cu"
    source.write_text(CANDLE_STYLE, encoding="utf-8")
    out = tmp_path / "out"
    assert buildsys_main(["hipify", str(source), "-o", str(out)]) == 0  # a warning, not an error
    for name in (WMMA_HEADER, COMPAT_HEADER):
        assert (out / name).read_bytes() == (COMPAT_DIR / name).read_bytes()


def test_builder_tree_carries_the_wmma_header(tmp_path: Path) -> None:
    from buildsys.cache import BuildCache
    from buildsys.modules import INCLUDE_DIR, KernelModule, SourceTree
    from buildsys.trees import hipify_tree

    tree = SourceTree({"m/m.cu": CANDLE_STYLE})
    hip_tree, _ = hipify_tree(tree, [KernelModule("m", "m/m.cu")], BuildCache(tmp_path))
    assert f"#include <{WMMA_HEADER}>" in hip_tree["m/m.hip"]
    header = (COMPAT_DIR / WMMA_HEADER).read_text(encoding="utf-8")
    assert hip_tree[f"{INCLUDE_DIR}/{WMMA_HEADER}"] == header


# Every supported combination, as a CUDA author writes it: shape, input and accumulator types,
# A and B layouts; each kernel loads, scales element-wise, multiplies and stores in both layouts.
SHAPES = ((16, 16, 16), (32, 8, 16), (8, 32, 16))
TYPES = (("half", "float"), ("half", "half"), ("nv_bfloat16", "float"))
LAYOUTS = ("row_major", "col_major")


def _combination_kernel(
    shape: tuple[int, int, int], types: tuple[str, str], la: str, lb: str
) -> tuple[str, str]:
    (m, n, k), (tin, tacc) = shape, types
    name = f"wmma_m{m}n{n}k{k}_{tin}_{tacc}_{la[:3]}_{lb[:3]}"
    dims = f"{m}, {n}, {k}"
    body = f"""\
extern "C" __global__ void {name}(const {tin}* a, const {tin}* b, const {tacc}* c, {tacc}* d) {{
  const int warp = threadIdx.x / warpSize;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, {dims}, {tin}, nvcuda::wmma::{la}> fa;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, {dims}, {tin}, nvcuda::wmma::{lb}> fb;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, {dims}, {tacc}> fc;
  nvcuda::wmma::load_matrix_sync(fa, a + warp * 512, 32);
  nvcuda::wmma::load_matrix_sync(fb, b, 32);
  nvcuda::wmma::load_matrix_sync(fc, c, 32, nvcuda::wmma::mem_col_major);
  for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = -fa.x[i];
  nvcuda::wmma::mma_sync(fc, fa, fb, fc);
  nvcuda::wmma::store_matrix_sync(d + warp * 1024, fc, 32, nvcuda::wmma::mem_row_major);
  nvcuda::wmma::fill_fragment(fc, 0.0f);
  nvcuda::wmma::store_matrix_sync(d, fc, 32, nvcuda::wmma::mem_col_major);
}}
"""
    return name, body


@pytest.mark.toolchain
def test_every_combination_compiles_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """gfx90a (wave64, MFMA) and gfx1030 (wave32, no matrix instructions at all): the device
    pass (one code object a target, as --genco builds) has every kernel of every supported
    combination."""
    from kernelpack.formats import read_code_object

    kernels = [
        _combination_kernel(shape, types, la, lb)
        for shape, types, (la, lb) in itertools.product(
            SHAPES, TYPES, itertools.product(LAYOUTS, LAYOUTS)
        )
    ]
    text = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <mma.h>\n"
    text += "".join(body for _, body in kernels)
    result = hipify_source(text, "wmma_all.cu")
    assert [d.code for d in result.diagnostics] == ["wmma-portable"]
    source = tmp_path / "wmma_all.hip"
    source.write_text(result.text, encoding="utf-8")
    targets = ("gfx90a", "gfx1030")
    unbundled = amd_toolchain.run(
        [
            "hipcc",
            "--cuda-device-only",
            "--no-gpu-bundle-output",
            "-O3",
            "-c",
            "-I",
            str(COMPAT_DIR),
            *(f"--offload-arch={t}" for t in targets),
            str(source),
        ],
        cwd=tmp_path,
        check=False,
    )
    assert unbundled.returncode == 0, unbundled.stderr[-3000:]
    for target in targets:
        (path,) = tmp_path.glob(f"wmma_all-hip-amdgcn-amd-amdhsa-{target}.out")
        code_object = read_code_object(path.read_bytes(), str(path))
        assert {k.name for k in code_object.kernels} == {name for name, _ in kernels}, target
