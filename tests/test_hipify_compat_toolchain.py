"""Translated CUDA that uses CUDA's header libraries and cuda_pipeline.h compiles with the
provisioned toolchain: CUB becomes hipCUB, Thrust stays (rocThrust), the pipeline primitives come
from the compat header. The libraries are what buildsys.toolchain.ROOTFS_PACKAGES installs."""

from __future__ import annotations

import json
import random
import re
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys import toolchain
from buildsys.hipify import COMPAT_DIR, Severity, hipify_source
from buildsys.hipify.tables import header_target
from kernelpack.formats.code_objects import read_code_object

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
    marker = json.loads((amd_toolchain.rootfs / toolchain.found.COMPLETE_MARKER).read_text())
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


# A device-wide scan of 8-byte values: rocPRIM's look-back keeps each block's flag and value in
# one 16-byte word, read and written with its 128-bit atomics. Beside it, the compiler's own
# agent-scope relaxed 64-bit atomics, the independent reference for the cache bits of a target.
RELAXED_AGENT_SOURCE = """\
__global__ void relaxed_agent(unsigned long long* from, unsigned long long* to) {
  unsigned long long value = __hip_atomic_load(from, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
  __hip_atomic_store(to, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
"""
GFX950_SCAN_SOURCE = (
    """\
#include <cuda_runtime.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/scan.h>
"""
    + RELAXED_AGENT_SOURCE
    + """
void offsets(const long long* counts, long long* result, int n, cudaStream_t stream) {
  thrust::device_ptr<const long long> from(counts);
  thrust::device_ptr<long long> to(result);
  thrust::exclusive_scan(thrust::cuda::par.on(stream), from, from + n, to);
}
"""
)
_GLOBAL_ACCESS_RE = re.compile(r"(global_(?:load|store)_dwordx[24])\s+(.*)")
CACHE_BITS = frozenset({"sc0", "sc1", "nt", "glc", "slc", "dlc"})  # gfx9 and gfx10 spellings


def _rocprim_version(include: Path) -> tuple[int, int]:
    text = (include / "rocprim" / "rocprim_version.hpp").read_text(encoding="utf-8")
    major = re.search(r"#define ROCPRIM_VERSION_MAJOR (\d+)", text)
    minor = re.search(r"#define ROCPRIM_VERSION_MINOR (\d+)", text)
    assert major is not None and minor is not None
    return int(major[1]), int(minor[1])


def _disassembly(toolchain: Toolchain, code_object: Path, target: str) -> dict[str, list[str]]:
    """Per function of the code object: its instructions as llvm-objdump writes them, without the
    encoding comment ("v_dot4c_i32_i8_e32 v3, v1, v2")."""
    listing = toolchain.run(["llvm-objdump", "-d", f"--mcpu={target}", str(code_object)]).stdout
    functions: dict[str, list[str]] = {}
    instructions: list[str] | None = None
    for line in listing.splitlines():
        header = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if header:
            instructions = functions.setdefault(header[1], [])
        elif instructions is not None and line.startswith("\t"):
            instructions.append(line.split("//")[0].strip())
    return functions


def _global_accesses(toolchain: Toolchain, code_object: Path, target: str) -> dict[str, set[str]]:
    """Per function of the code object: each 64- and 128-bit global load and store, as the
    instruction and its cache bits ("global_load_dwordx4 sc1")."""
    accesses: dict[str, set[str]] = {}
    for function, instructions in _disassembly(toolchain, code_object, target).items():
        for instruction in instructions:
            access = _GLOBAL_ACCESS_RE.match(instruction)
            if access:
                bits = sorted(CACHE_BITS.intersection(access[2].split()))
                accesses.setdefault(function, set()).add(" ".join([access[1], *bits]))
    return accesses


def test_rocprim_libraries_compile_for_gfx950_with_gfx942s_atomics(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """rocPRIM 3.4 does not know gfx950 and stops at its 128-bit atomics; with the prelude header
    the translation compiles, the look-back's 128-bit loads and stores carry the cache bits the
    compiler itself gives an agent-scope relaxed atomic on gfx950 (and on gfx942: the same
    memory model), and on gfx942 and gfx1100 the preprocessed code is what it is without it."""
    text = hipify_source(GFX950_SCAN_SOURCE, "scan.cu").text
    assert text.count("#include <kernelpack_hip_libraries.h>") == 3
    source = tmp_path / "scan.hip"
    source.write_text(text)
    bare = tmp_path / "bare.hip"  # the translation without the prelude
    bare.write_text(text.replace("#include <kernelpack_hip_libraries.h>\n", ""))
    flags = ["-std=c++17", "-I", str(COMPAT_DIR), "-x", "hip", "--cuda-device-only"]

    def preprocessed(path: Path, target: str) -> subprocess.CompletedProcess[str]:
        argv = ["hipcc", *flags, "-E", "-P", f"--offload-arch={target}", str(path)]
        return amd_toolchain.run(argv, cwd=tmp_path, check=False)

    for target in ("gfx942", "gfx1100"):
        with_prelude, without = preprocessed(source, target), preprocessed(bare, target)
        assert with_prelude.returncode == 0 and without.returncode == 0
        assert with_prelude.stdout == without.stdout, target
    if _rocprim_version(amd_toolchain.include_folder) < (4, 0):
        failed = preprocessed(bare, "gfx950")
        assert failed.returncode != 0
        assert "support for 128-bit atomics not implemented" in failed.stderr

    probe = tmp_path / "probe.hip"  # the compiler's own atomics alone, for gfx942
    probe.write_text("#include <hip/hip_runtime.h>\n" + RELAXED_AGENT_SOURCE)
    objects: dict[str, dict[str, set[str]]] = {}
    for target, path in (("gfx942", probe), ("gfx950", source)):
        folder = tmp_path / target
        folder.mkdir()
        argv = ["hipcc", *flags, "-w", "-c", "--no-gpu-bundle-output", f"--offload-arch={target}"]
        amd_toolchain.run([*argv, str(path)], cwd=folder)
        (code_object,) = folder.glob(f"*{target}*")
        objects[target] = _global_accesses(amd_toolchain, code_object, target)
    reference = objects["gfx950"]["_Z13relaxed_agentPyS_"]
    assert reference == objects["gfx942"]["_Z13relaxed_agentPyS_"]
    assert reference == {"global_load_dwordx2 sc1", "global_store_dwordx2 sc1"}
    # rocPRIM's look-back state: its 128-bit atomic loads and stores (the accesses with cache
    # bits; the plain ones initialise the state before any block runs)
    lookback = set().union(
        *(accesses for name, accesses in objects["gfx950"].items() if "lookback_scan" in name)
    )
    atomic = {access for access in lookback if "dwordx4" in access and " " in access}
    assert atomic == {access.replace("dwordx2", "dwordx4") for access in reference}


# cuda-samples' multi_warp_cg_reduce, reduced: tiles of 64 to 512 threads over block_tile_memory.
MULTI_WARP_SOURCE = """\
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

template <unsigned Size>
__global__ void tile_sums(const float* in, float* out, unsigned* shape) {
  __shared__ cg::block_tile_memory<1024> scratch;
  auto block = cg::this_thread_block(scratch);
  auto tile = cg::tiled_partition<Size>(block);
  const float sum = cg::reduce(tile, in[threadIdx.x], cg::plus<float>());
  tile.sync();
  if (tile.thread_rank() == 0) out[tile.meta_group_rank()] = sum;
  shape[threadIdx.x] = tile.meta_group_size() + tile.size();
}
template __global__ void tile_sums<64>(const float*, float*, unsigned*);
template __global__ void tile_sums<128>(const float*, float*, unsigned*);
template __global__ void tile_sums<512>(const float*, float*, unsigned*);
"""


def test_multi_warp_tiles_compile_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """HIP's tiles stop at the wavefront (a static assertion); the compat header's tiles of 64 to
    512 threads compile in the host pass and for gfx90a (wave64: 64 is HIP's own tile) and
    gfx1100 (wave32: 64 is the compat tile), with every kernel in each code object."""
    result = hipify_source(MULTI_WARP_SOURCE, "tiles.cu")
    assert [d.format() for d in result.diagnostics if d.severity is Severity.ERROR] == []
    source = tmp_path / "tiles.hip"
    source.write_text(result.text)
    flags = ["-std=c++17", "-w", "-I", str(COMPAT_DIR), "-x", "hip"]
    host = ["hipcc", *flags, "--cuda-host-only", "-c", str(source), "-o", str(tmp_path / "host.o")]
    amd_toolchain.run(host)
    targets = ["--offload-arch=gfx90a", "--offload-arch=gfx1100"]
    device = ["hipcc", *flags, *targets, "--cuda-device-only", "--no-gpu-bundle-output", "-c"]
    amd_toolchain.run([*device, str(source)], cwd=tmp_path)
    for target in ("gfx90a", "gfx1100"):
        (code_object,) = tmp_path.glob(f"*{target}*")
        kernels = {k.name for k in read_code_object(code_object.read_bytes(), target).kernels}
        assert kernels == {f"_Z9tile_sumsILj{n}EEvPKfPfPj" for n in (64, 128, 512)}, target


# Every overload of __dp4a, through the translator as real code reaches it.
DOT4_SOURCE = """\
__global__ void signed_dot(const int* a, const int* b, int* c) {
  c[threadIdx.x] = __dp4a(a[threadIdx.x], b[threadIdx.x], c[threadIdx.x]);
}
__global__ void unsigned_dot(const unsigned* a, const unsigned* b, unsigned* c) {
  c[threadIdx.x] = __dp4a(a[threadIdx.x], b[threadIdx.x], c[threadIdx.x]);
}
__global__ void char4_dot(const char4* a, const char4* b, int* c) {
  c[threadIdx.x] = __dp4a(a[threadIdx.x], b[threadIdx.x], c[threadIdx.x]);
}
__global__ void uchar4_dot(const uchar4* a, const uchar4* b, unsigned* c) {
  c[threadIdx.x] = __dp4a(a[threadIdx.x], b[threadIdx.x], c[threadIdx.x]);
}
"""
# The 8-bit dot-product instruction each overload must become, per target, from AMD's ISA
# manuals (Vega 7nm: V_DOT4_I32_I8 / V_DOT4_U32_U8; CDNA1-3 and RDNA2 add the accumulating
# V_DOT4C_I32_I8, which the compiler prefers; RDNA3 / RDNA4 replace the signed one by
# V_DOT4_I32_IU8, whose NEG_LO bits make operand 0 and 1 signed). gfx900 and gfx1010 have none:
# they keep the lane loop that nvcc checks against CUDA's __dp4a on the GPU.
SIGNED_IU8 = "v_dot4_i32_iu8 neg_lo:[1,1,0]"
DOT4_INSTRUCTIONS: dict[str, tuple[str, str] | None] = {
    "gfx900": None,
    "gfx906": ("v_dot4_i32_i8", "v_dot4_u32_u8"),
    "gfx90a": ("v_dot4c_i32_i8_e32", "v_dot4_u32_u8"),
    "gfx942": ("v_dot4c_i32_i8_e32", "v_dot4_u32_u8"),
    "gfx1010": None,
    "gfx1030": ("v_dot4c_i32_i8", "v_dot4_u32_u8"),
    "gfx1100": (SIGNED_IU8, "v_dot4_u32_u8"),
    "gfx1201": (SIGNED_IU8, "v_dot4_u32_u8"),
}
_KERNEL_RE = re.compile(r"_Z\d+(\w+?)_dot")


def _dot_instructions(toolchain: Toolchain, code_object: Path, target: str) -> dict[str, list[str]]:
    """Per kernel ("signed", ...): its v_dot instructions, each with its operand-modifier fields
    ("v_dot4_i32_iu8 neg_lo:[1,1,0]")."""
    found: dict[str, list[str]] = {}
    for function, instructions in _disassembly(toolchain, code_object, target).items():
        kernel = _KERNEL_RE.match(function)
        if kernel:
            found[kernel[1]] = [
                " ".join([words[0], *(word for word in words[1:] if ":" in word)])
                for words in (instruction.split() for instruction in instructions)
                if words[0].startswith("v_dot")
            ]
    return found


def test_dp4a_is_one_dot_instruction_where_the_target_has_one(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """__dp4a's four overloads compile to the target's 8-bit dot instruction (signed ones to the
    signed form), and to no dot instruction on the targets without one."""
    result = hipify_source(DOT4_SOURCE, "dot.cu")
    assert "#include <kernelpack_hip_compat.h>" in result.text
    source = tmp_path / "dot.hip"
    source.write_text(result.text)
    flags = ["-std=c++17", "-w", "-O3", "-I", str(COMPAT_DIR), "-x", "hip"]
    targets = [f"--offload-arch={target}" for target in DOT4_INSTRUCTIONS]
    device = ["hipcc", *flags, *targets, "--cuda-device-only", "--no-gpu-bundle-output", "-c"]
    amd_toolchain.run([*device, str(source)], cwd=tmp_path)
    for target, instructions in DOT4_INSTRUCTIONS.items():
        (code_object,) = tmp_path.glob(f"*-{target}*")
        found = _dot_instructions(amd_toolchain, code_object, target)
        if instructions is None:
            assert found == {"signed": [], "unsigned": [], "char4": [], "uchar4": []}, target
        else:
            signed, unsigned = instructions
            expected = {"signed": [signed], "char4": [signed]}
            expected |= {"unsigned": [unsigned], "uchar4": [unsigned]}
            assert found == expected, target


# The lane loop of __dp4a (the targets without a dot instruction, and the host pass) on the host:
# each overload of random operands, printed as unsigned 32-bit words.
DOT4_HOST_PROGRAM = """\
#include <cstdio>
#include <hip/hip_runtime.h>
#include <kernelpack_hip_compat.h>
int main() {
  unsigned a, b, c;
  while (std::scanf("%u %u %u", &a, &b, &c) == 3) {
    const char4 sa = __builtin_bit_cast(char4, a), sb = __builtin_bit_cast(char4, b);
    const uchar4 ua = __builtin_bit_cast(uchar4, a), ub = __builtin_bit_cast(uchar4, b);
    std::printf("%u %u %u %u\\n", static_cast<unsigned>(__dp4a(int(a), int(b), int(c))),
                __dp4a(a, b, c), static_cast<unsigned>(__dp4a(sa, sb, int(c))), __dp4a(ua, ub, c));
  }
}
"""


def _dot4_exact(a: int, b: int, c: int, signed: bool) -> int:
    """dp4a by its definition: c plus the four 8-bit lane products, modulo 2**32."""
    lanes = [((a >> (8 * k)) & 0xFF, (b >> (8 * k)) & 0xFF) for k in range(4)]
    if signed:
        lanes = [(x - 256 * (x > 127), y - 256 * (y > 127)) for x, y in lanes]
    return (c + sum(x * y for x, y in lanes)) % 2**32


def test_dp4a_lane_loop_is_exact_on_the_host(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    """The lane loop that gfx900 and gfx1010 keep, run in the host pass, against dp4a's
    definition in Python integers: the lanes' extremes and fresh random words."""
    rng = random.Random()
    seed = rng.randrange(2**32)
    rng.seed(seed)
    edges = [0, 1, 0x7F7F7F7F, 0x80808080, 0xFFFFFFFF, 0x01FF7F80, 0x7FFFFFFF, 0x80000000]
    words = [(a, b, c) for a in edges for b in edges for c in (0, 0xFFFFFFFF, 0x80000000)]
    words += [tuple(rng.randrange(2**32) for _ in range(3)) for _ in range(2000)]
    (tmp_path / "dot4.hip").write_text(DOT4_HOST_PROGRAM)
    argv = ["hipcc", "-x", "hip", "-std=c++17", "-O2", "--cuda-host-only", "--offload-arch=gfx900"]
    amd_toolchain.run([*argv, "-I", str(COMPAT_DIR), "dot4.hip", "-o", "dot4"], cwd=tmp_path)
    stdin = "".join(f"{a} {b} {c}\n" for a, b, c in words)
    run = subprocess.run(
        amd_toolchain.command(["./dot4"], cwd=tmp_path),
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    got = [tuple(map(int, line.split())) for line in run.stdout.splitlines()]
    want = [(_dot4_exact(a, b, c, True), _dot4_exact(a, b, c, False)) * 2 for a, b, c in words]
    wrong = [(w, g, e) for w, g, e in zip(words, got, want, strict=True) if g != e]
    assert len(got) == len(words) and wrong == [], f"seed {seed}: {wrong[:3]}"


# Helpers in an anonymous namespace calling the cache-hinted accesses on types HIP declares none
# for, as a kernel's load and store helpers do (mlp.cu's did, in a form since withdrawn).
HINTED_SOURCE = """\
namespace {
template <typename Raw>
struct Streaming {
  static __device__ Raw load(const Raw* base, int i) { return __ldcs(base + i); }
  static __device__ void store(Raw* base, int i, Raw value) { __stcs(base + i, value); }
};
}  // namespace

__global__ void hinted_copy(const unsigned* words, unsigned* words_out, const unsigned short* halves,
                            unsigned short* halves_out, const uint4* vectors, uint4* vectors_out) {
  const int i = threadIdx.x;
  Streaming<unsigned>::store(words_out, i, Streaming<unsigned>::load(words, i));
  Streaming<unsigned short>::store(halves_out, i, Streaming<unsigned short>::load(halves, i));
  Streaming<uint4>::store(vectors_out, i, Streaming<uint4>::load(vectors, i));
}
"""


def test_cache_hints_compile_from_an_anonymous_namespace(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """amd_hip_fp16.h declares its __half __ldcs in an anonymous namespace, where a call from
    another anonymous namespace stops looking: the compat header's templates for every other type
    must be found there too (they failed to compile for unsigned int before they were)."""
    result = hipify_source(HINTED_SOURCE, "hinted.cu")
    assert "#include <kernelpack_hip_compat.h>" in result.text
    source = tmp_path / "hinted.hip"
    source.write_text(result.text)
    flags = ["-std=c++17", "-w", "-I", str(COMPAT_DIR), "-x", "hip", "--offload-arch=gfx942"]
    amd_toolchain.run(
        ["hipcc", *flags, "--cuda-device-only", "--no-gpu-bundle-output", "-c", str(source)],
        cwd=tmp_path,
    )
    (device_object,) = tmp_path.glob("*gfx942*")
    kernels = {k.name for k in read_code_object(device_object.read_bytes(), "hinted").kernels}
    assert kernels == {"_Z11hinted_copyPKjPjPKtPtPK15HIP_vector_typeIjLj4EEPS6_"}


CUB_ONLY_SOURCE = """\
#include <cub/block/block_reduce.cuh>

__global__ void block_sum(const int* in, int* out) {
  using Reduce = cub::BlockReduce<int, 128>;
  __shared__ typename Reduce::TempStorage temp;
  const int total = Reduce(temp).Sum(in[blockIdx.x * 128 + threadIdx.x]);
  if (threadIdx.x == 0) out[blockIdx.x] = total;
}
"""


def test_cli_output_using_cub_compiles_as_the_cli_says(
    amd_toolchain: Toolchain, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An output that includes only the library prelude (hipCUB), no compat name: the CLI writes
    kernelpack_hip_libraries.h beside it and names the -I, and the output compiles with it."""
    from buildsys.cli import main as buildsys_main

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "sum.cu").write_text(CUB_ONLY_SOURCE)
    out = tmp_path / "out"
    assert buildsys_main(["hipify", str(tmp_path / "src"), "-o", str(out)]) == 0
    text = (out / "sum.hip").read_text()
    assert "#include <kernelpack_hip_libraries.h>" in text
    assert "#include <kernelpack_hip_compat.h>" not in text
    said = [line for line in capsys.readouterr().err.splitlines() if "compile them with" in line]
    assert said == [
        "hipify: 1 of 1 outputs include <kernelpack_hip_libraries.h>, written to "
        f"{out / 'kernelpack_hip_libraries.h'}: compile them with -I {out}"
    ]
    include = said[0].rsplit("-I ", 1)[1]
    argv = ["hipcc", "-std=c++17", "-w", "-I", include, "-x", "hip", "--offload-arch=gfx1100"]
    argv += ["--cuda-device-only", "--no-gpu-bundle-output", "-c", str(out / "sum.hip")]
    amd_toolchain.run(argv, cwd=tmp_path)
    (device_object,) = tmp_path.glob("*gfx1100*")
    kernels = {k.name for k in read_code_object(device_object.read_bytes(), "sum").kernels}
    assert "_Z9block_sumPKiPi" in kernels
