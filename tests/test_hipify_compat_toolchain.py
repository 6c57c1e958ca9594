"""Translated CUDA that uses CUDA's header libraries and cuda_pipeline.h compiles with the
provisioned toolchain: CUB becomes hipCUB, Thrust stays (rocThrust), the pipeline primitives come
from the compat header. The libraries are what buildsys.toolchain.ROOTFS_PACKAGES installs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys import toolchain
from buildsys.hipify import COMPAT_DIR, Severity, hipify_source
from buildsys.hipify.tables import header_target
from kernelpack.code_objects import read_code_object

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = pytest.mark.toolchain

# What real code includes (mistral.rs's moe_utils.h, dequant.cu and moe_align.cu, vLLM's
# kernels), written as CUDA spells it.
LIBRARY_SOURCE = """\
#include <cub/block/block_load.cuh>
#include <cub/block/block_store.cuh>
#include <cub/cub.cuh>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/scan.h>

template <int Threads>
__global__ void block_prefix(const int* in, int* out) {
  using Load = cub::BlockLoad<int, Threads, 4, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<int, Threads>;
  using Store = cub::BlockStore<int, Threads, 4, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
  } temp;
  int items[4];
  Load(temp.load).Load(in + blockIdx.x * Threads * 4, items);
  __syncthreads();
  Scan(temp.scan).InclusiveSum(items, items);
  __syncthreads();
  Store(temp.store).Store(out + blockIdx.x * Threads * 4, items);
}
template __global__ void block_prefix<128>(const int*, int*);

__global__ void staged(const float4* in, float4* out) {
  __shared__ float4 stage[64];
  __pipeline_memcpy_async(&stage[threadIdx.x], &in[blockIdx.x * 64 + threadIdx.x], sizeof(float4));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = stage[63 - threadIdx.x];
}

void offsets(const int* counts, int* result, int n, cudaStream_t stream) {
  thrust::device_ptr<const int> from(counts);
  thrust::device_ptr<int> to(result);
  thrust::inclusive_scan(thrust::cuda::par.on(stream), from, from + n, to);
}
"""

# CUB headers real code includes, and the hipCUB header each must become.
CUB_HEADERS = {
    "cub/cub.cuh": "hipcub/hipcub.hpp",
    "cub/block/block_load.cuh": "hipcub/block/block_load.hpp",
    "cub/block/block_store.cuh": "hipcub/block/block_store.hpp",
    "cub/block/block_scan.cuh": "hipcub/block/block_scan.hpp",
    "cub/block/block_reduce.cuh": "hipcub/block/block_reduce.hpp",
    "cub/block/block_radix_sort.cuh": "hipcub/block/block_radix_sort.hpp",
    "cub/warp/warp_reduce.cuh": "hipcub/warp/warp_reduce.hpp",
    "cub/device/device_scan.cuh": "hipcub/device/device_scan.hpp",
    "cub/device/device_radix_sort.cuh": "hipcub/device/device_radix_sort.hpp",
    "cub/util_type.cuh": "hipcub/util_type.hpp",
}


def test_the_provisioned_toolchain_has_the_rocm_header_libraries(amd_toolchain: Toolchain) -> None:
    if amd_toolchain.rootfs is None:
        pytest.skip("a native ROCm: its libraries are the installation's, not provisioned")
    marker = json.loads((amd_toolchain.rootfs / toolchain._COMPLETE_MARKER).read_text())
    assert set(toolchain.ROOTFS_PACKAGES) <= set(marker["packages"])
    assert toolchain.missing_rootfs_packages() == ()
    include = amd_toolchain.include_folder
    headers = ("thrust/scan.h", "hipcub/hipcub.hpp", "rocprim/rocprim.hpp")
    headers += ("hipblas/hipblas.h", "hipblaslt/hipblaslt.h")  # header-only packages
    for header in headers:
        assert (include / header).is_file(), header


@pytest.mark.parametrize("cuda", sorted(CUB_HEADERS))
def test_cub_headers_become_existing_hipcub_headers(amd_toolchain: Toolchain, cuda: str) -> None:
    assert header_target(cuda) == CUB_HEADERS[cuda]
    assert (amd_toolchain.include_folder / CUB_HEADERS[cuda]).is_file()


def test_cub_thrust_and_pipeline_code_compiles(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    """gfx90a (wave64, where hipCUB's warp code differs most from CUB's 32 lanes): host and
    device passes, and both kernels are in the code object."""
    result = hipify_source(LIBRARY_SOURCE, "libs.cu")
    assert [d.format() for d in result.diagnostics if d.severity is Severity.ERROR] == []
    assert "#include <hipcub/block/block_load.hpp>" in result.text
    assert "hipcub::BlockScan<int, Threads>" in result.text
    assert "thrust::hip::par.on(stream)" in result.text
    assert "#include <kernelpack_hip_compat.h>" in result.text
    source = tmp_path / "libs.hip"
    source.write_text(result.text)
    flags = ["-std=c++17", "-w", "-I", str(COMPAT_DIR), "-x", "hip", "--offload-arch=gfx90a"]
    host = ["hipcc", *flags, "--cuda-host-only", "-c", str(source), "-o", str(tmp_path / "host.o")]
    amd_toolchain.run(host)
    amd_toolchain.run(
        ["hipcc", *flags, "--cuda-device-only", "--no-gpu-bundle-output", "-c", str(source)],
        cwd=tmp_path,
    )
    (device_object,) = tmp_path.glob("*gfx90a*")
    kernels = {k.name for k in read_code_object(device_object.read_bytes(), "libs").kernels}
    assert "_Z6stagedPK15HIP_vector_typeIfLj4EEPS0_" in kernels
    assert "_Z12block_prefixILi128EEvPKiPi" in kernels
