"""cuBLAS's Ex API translated to hipBLAS 2.x: the tables (tables.RUNTIME_BLOCKS "library_type" and
"blas") against the vendors' own headers, read here, not the translator's idea of them:

- each Ex function becomes the name hipblas.h's own ``#ifdef HIPBLAS_V2`` table defines the
  prefix-renamed name to (``#define hipblasGemmEx hipblasGemmEx_v2``);
- each data type becomes an enumerator of HIP's hipDataType with the value CUDA's
  library_types.h gives the CUDA name (where the CUDA toolkit is installed);
- each compute type becomes an enumerator of hipblas-common.h's hipblasComputeType_t;

and translated host code calling the Ex functions compiles against the provisioned hipBLAS (it
was "no matching function" with hipblasGemmStridedBatchedEx and HIP_R_16F)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys.hipify import hipify_source
from buildsys.hipify.tables import RENAMES, library_rename

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = pytest.mark.toolchain

CUDA_INCLUDE = Path("/usr/local/cuda/include")
_ENUMERATOR_RE = re.compile(r"^\s*([A-Z][A-Z0-9_]+)\s*=\s*(\d+)", re.MULTILINE)
_V2_DEFINE_RE = re.compile(r"^#define (hipblas\w+) (hipblas\w+_v2\w*)$", re.MULTILINE)


def _rows(kind: str) -> list[tuple[str, str]]:
    return sorted((r.cuda, r.hip) for r in RENAMES.values() if r.kind == kind)


def _enumerators(text: str, tag: str) -> dict[str, int]:
    """The NAME = value lines of ``typedef enum <tag> { ... }``."""
    body = re.search(rf"typedef enum {tag}\s*\{{(.*?)\}}", text, re.DOTALL)
    assert body is not None, tag
    return {name: int(value) for name, value in _ENUMERATOR_RE.findall(body.group(1))}


@pytest.fixture(scope="module")
def include(amd_toolchain: Toolchain) -> Path:
    return amd_toolchain.include_folder


@pytest.mark.parametrize(("cuda", "hip"), [r for r in _rows("blas") if "Ex" in r[0]])
def test_ex_functions_are_hipblas_v2_functions(include: Path, cuda: str, hip: str) -> None:
    defines = dict(_V2_DEFINE_RE.findall((include / "hipblas/hipblas.h").read_text()))
    assert defines[library_rename(cuda) or ""] == hip


@pytest.mark.parametrize(("cuda", "hip"), _rows("library_type"))
def test_data_types_are_hip_data_types_of_cudas_value(include: Path, cuda: str, hip: str) -> None:
    hip_values = _enumerators((include / "hip/library_types.h").read_text(), "hipDataType")
    assert hip in hip_values
    if (CUDA_INCLUDE / "library_types.h").is_file():
        cuda_text = (CUDA_INCLUDE / "library_types.h").read_text()
        cuda_values = _enumerators(cuda_text, "cudaDataType_t")
        assert cuda_values[cuda] == hip_values[hip]


@pytest.mark.parametrize(
    ("cuda", "hip"), [r for r in _rows("blas") if r[0].startswith("CUBLAS_COMPUTE_")]
)
def test_compute_types_are_hipblas_compute_types(include: Path, cuda: str, hip: str) -> None:
    text = (include / "hipblas-common/hipblas-common.h").read_text()
    assert re.search(rf"^\s*{hip}\b", text, re.MULTILINE), hip
    assert hip.removeprefix("HIPBLAS_") == cuda.removeprefix("CUBLAS_")


EX_SOURCE = """\
#include <cublas_v2.h>
#include <cuda_fp16.h>

cublasStatus_t gemms(cublasHandle_t handle, const __half* a, const __half* b, float* c) {
  const float alpha = 1.0f, beta = 0.0f;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t out_type = CUDA_R_32F;
  cublasStatus_t status = cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, 16, 16, 16, &alpha, a, CUDA_R_16F, 16, 256, b,
      CUDA_R_16F, 16, 256, &beta, c, out_type, 16, 256, 4, compute, CUBLAS_GEMM_DEFAULT_TENSOR_OP);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  status = cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &alpha, a, CUDA_R_16BF, 16,
                        b, CUDA_R_16BF, 16, &beta, c, CUDA_R_32F, 16,
                        CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const void* as[1] = {a};
  const void* bs[1] = {b};
  void* cs[1] = {c};
  return cublasGemmBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &alpha, as,
                             CUDA_R_16F, 16, bs, CUDA_R_16F, 16, &beta, cs, CUDA_R_32F, 16, 1,
                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
"""


def test_ex_calls_compile_against_hipblas(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    result = hipify_source(EX_SOURCE, "gemms.cu")
    assert not result.diagnostics
    assert "hipblasGemmStridedBatchedEx_v2(" in result.text
    assert "HIP_R_16F" in result.text and "HIPBLAS_COMPUTE_32F_FAST_TF32" in result.text
    source = tmp_path / "gemms.hip"
    source.write_text(result.text)
    run = amd_toolchain.run(
        ["hipcc", "-std=c++17", "-x", "hip", "--cuda-host-only", "-fsyntax-only", str(source)],
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
