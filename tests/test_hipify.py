"""hipify without a compiler: tokens, tables, warp intrinsics, hazards, diagnostics, CLI."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_hipify_marked import CORPUS_DIR, read_expectations
from buildsys.cli import main as buildsys_main
from buildsys.hipify import WAVE_SIZE_CODES, HipifyOptions, Severity, hipify_source
from buildsys.hipify.diagnostics import CODES
from buildsys.hipify.lexer import tokenize
from buildsys.hipify.tables import HEADERS, WARP_INTRINSICS

REPO = Path(__file__).resolve().parent.parent
CORPUS = sorted(CORPUS_DIR.glob("*.cu"))
KERNEL_SOURCES = sorted(
    p for p in (REPO / "kernel_sources").rglob("*") if p.suffix in (".cu", ".cuh") and p.is_file()
)
DIAGNOSTIC_RE = re.compile(
    r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|note)\[(?P<code>[\w-]+)\]: .+$"
)


def translate(text: str, **options: bool) -> str:
    """The translated text without its generated-file header line."""
    result = hipify_source(text, "t.cu", options=HipifyOptions(**options))
    return result.text.split("\n", 1)[1]


def codes(text: str) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in hipify_source(text, "t.cu").diagnostics]


KERNEL = "__global__ void k(float* o) {{\n{body}\n}}\n"


# ---- tokens -------------------------------------------------------------------------------


@given(st.text(alphabet=st.sampled_from(list("ab_1 \n\t\\\"'/*#<>()R.xe+-;{}")), max_size=80))
@settings(max_examples=300, deadline=None)
def test_tokens_cover_the_text_exactly(text: str) -> None:
    tokens = tokenize(text)
    assert "".join(t.text for t in tokens) == text
    for token in tokens:
        before = text[: token.offset]
        assert token.line == before.count("\n") + 1
        assert token.col == token.offset - (before.rfind("\n") + 1) + 1


def test_names_inside_comments_strings_and_longer_identifiers_stay() -> None:
    text = (
        '// cudaMalloc(&p, n)\n/* cudaFree(p) */\nconst char* s = "cudaMalloc";\n'
        'int cudaMallocHostBuffer = 0; int my_cudaFree = 1; auto r = R"(cudaFree)";\n'
        "char c = 'c'; cudaMalloc(&p, n);\n"
    )
    out = translate(text)
    assert out.count("cudaMalloc") == 3 and out.count("cudaFree") == 3
    assert "hipMalloc(&p, n);" in out and "cudaMallocHostBuffer" in out and "my_cudaFree" in out


# ---- tables -------------------------------------------------------------------------------


# Hand-written from the CUDA and HIP runtime references (not from our tables): the CUDA name and
# the HIP name a reader of both manuals expects. The toolchain test checks every HIP name of the
# tables against HIP's own headers, the nvcc test every CUDA name against CUDA's headers.
HAND_WRITTEN = [
    ("cudaMalloc", "hipMalloc"),
    ("cudaMemcpyAsync", "hipMemcpyAsync"),
    ("cudaMemcpyHostToDevice", "hipMemcpyHostToDevice"),
    ("cudaStream_t", "hipStream_t"),
    ("cudaStreamCreateWithFlags", "hipStreamCreateWithFlags"),
    ("cudaEventElapsedTime", "hipEventElapsedTime"),
    ("cudaGetErrorString", "hipGetErrorString"),
    ("cudaSuccess", "hipSuccess"),
    ("cudaErrorInvalidValue", "hipErrorInvalidValue"),
    ("cudaDeviceProp", "hipDeviceProp_t"),
    ("cudaGetDeviceProperties", "hipGetDeviceProperties"),
    ("cudaDevAttrMultiProcessorCount", "hipDeviceAttributeMultiprocessorCount"),
    ("cudaFuncAttributeMaxDynamicSharedMemorySize", "hipFuncAttributeMaxDynamicSharedMemorySize"),
    ("cudaMallocManaged", "hipMallocManaged"),
    ("cudaMemAdvise", "hipMemAdvise"),
    ("cudaTextureObject_t", "hipTextureObject_t"),
    ("cudaCreateTextureObject", "hipCreateTextureObject"),
    (
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
        "hipOccupancyMaxActiveBlocksPerMultiprocessor",
    ),
    ("CUdeviceptr", "hipDeviceptr_t"),
    ("cuModuleLoadData", "hipModuleLoadData"),
    ("cuLaunchKernel", "hipModuleLaunchKernel"),
    ("CUresult", "hipError_t"),
    ("__nv_bfloat16", "__hip_bfloat16"),
    ("__nv_bfloat162", "__hip_bfloat162"),
    ("cublasHandle_t", "hipblasHandle_t"),
    ("curandState", "hiprandState"),
]


@pytest.mark.parametrize(("cuda", "hip"), HAND_WRITTEN, ids=[c for c, _ in HAND_WRITTEN])
def test_names_translate_as_the_manuals_say(cuda: str, hip: str) -> None:
    result = hipify_source(f"auto x = {cuda};\n", "t.cu")
    assert f"auto x = {hip};" in result.text
    assert [(c.cuda, c.hip, c.count) for c in result.stats.conversions] == [(cuda, hip, 1)]


@pytest.mark.parametrize("header", sorted(HEADERS), ids=str)
def test_every_header_maps_or_is_reported(header: str) -> None:
    result = hipify_source(f'#include <{header}>\n#include "{header}" // local\n', "t.cu")
    target = HEADERS[header]
    if target is None:
        (diagnostic,) = result.diagnostics
        assert (
            diagnostic.code == "unsupported-api"
            and "(2 in this file, lines 1, 2)" in diagnostic.message
        )
        assert "USE_ROCM" in diagnostic.message
        assert f"#include <{header}>" in result.text
    else:
        assert (
            f"#include <{target}>\n" in result.text
            and f'#include "{target}" // local' in result.text
        )
        codes = [d.code for d in result.diagnostics]
        assert codes == (["wmma-portable"] if header == "mma.h" else [])


def test_bf16_and_library_prefixes() -> None:
    out = translate(
        "#include <cuda_bf16.h>\n__nv_bfloat16 h; nv_bfloat162 p; cublasHandle_t b; curandState s;\n"
    )
    assert "#include <hip/hip_bf16.h>" in out
    assert "__hip_bfloat16 h; __hip_bfloat162 p; hipblasHandle_t b; hiprandState s;" in out


# ---- warp intrinsics ----------------------------------------------------------------------


@pytest.mark.parametrize("intrinsic", WARP_INTRINSICS, ids=lambda w: w.cuda)
@pytest.mark.parametrize(
    "mask",
    [
        "0xffffffff",
        "0xFFFFFFFFu",
        "~0u",
        "FULL",
        "kFull",
        "__activemask()",
        "0xffffffffffffffffull",
    ],
)
def test_full_masks_are_dropped(intrinsic, mask: str) -> None:  # type: ignore[no-untyped-def]
    text = "#define FULL 0xffffffff\nconstexpr unsigned kFull = 0xffffffffu;\n" + KERNEL.format(
        body=f"  auto r = {intrinsic.cuda}({mask}, v, 3);"
    )
    result = hipify_source(text, "t.cu")
    assert f"auto r = {intrinsic.hip}(v, 3);" in result.text
    assert not result.diagnostics


def test_width_argument_is_kept_and_nested_calls_translate() -> None:
    out = translate(
        KERNEL.format(
            body="  v = __shfl_down_sync(0xffffffff, __shfl_xor_sync(0xffffffff, v, 1, 16), 2, 16);"
        )
    )
    assert "v = __shfl_down(__shfl_xor(v, 1, 16), 2, 16);" in out


def test_partial_and_variable_masks() -> None:
    text = KERNEL.format(body="  v = __shfl_sync(0x0000ffff, v, 0);\n  v = __shfl_sync(m, v, 0);")
    result = hipify_source(text, "t.cu")
    assert "v = __shfl(v, 0);\n  v = __shfl(v, 0);" in result.text
    assert [(d.line, d.code, d.severity) for d in result.diagnostics] == [
        (2, "warp-mask", Severity.WARNING),
        (3, "mask-dropped", Severity.NOTE),
    ]


def test_ballot_counting_widens_and_syncwarp_activemask_translate() -> None:
    out = translate(
        KERNEL.format(
            body="  int n = __popc(__ballot_sync(~0u, v > 0)) + __ffs(__activemask());\n  __syncwarp();"
        )
    )
    assert "int n = __popcll(__ballot(v > 0)) + __ffsll(__ballot(1));" in out
    assert "__builtin_amdgcn_wave_barrier()" in out and "__syncwarp" not in out


def test_kernel_pointer_arguments_are_cast_once() -> None:
    text = "void f() { cudaFuncSetAttribute(k<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 16); cudaFuncGetAttributes(&a, k); }\n"
    out = translate(text)
    assert (
        "hipFuncSetAttribute(reinterpret_cast<const void*>(k<float>), hipFuncAttributeMaxDynamicSharedMemorySize, 1 << 16)"
        in out
    )
    assert "hipFuncGetAttributes(&a, reinterpret_cast<const void*>(k))" in out
    assert translate(out) == out


def test_launch_macro() -> None:
    text = "void f(cudaStream_t s) {\n  k<<<g, b>>>(x, y);\n  t<float, 4><<<dim3(g), 64, n, s>>>();\n  ns::k<<<1, 2>>>(z);\n}\n"
    assert translate(text) == translate(text, launch_macro=False)
    assert "k<<<g, b>>>(x, y);" in translate(text)
    out = translate(text, launch_macro=True)
    assert "hipLaunchKernelGGL(k, g, b, 0, 0, x, y);" in out
    assert "hipLaunchKernelGGL(HIP_KERNEL_NAME(t<float, 4>), dim3(g), 64, n, s);" in out
    assert "hipLaunchKernelGGL(ns::k, 1, 2, 0, 0, z);" in out
    assert "<<<" not in out


def test_runtime_include_is_inserted_once_after_pragma_once() -> None:
    out = translate("#pragma once\n__device__ float f(float x) { return x; }\n")
    assert out.startswith("#pragma once\n#include <hip/hip_runtime.h>\n#line 2\n__device__")
    plain = "int plain(int x) { return x; }\n"
    assert translate(plain) == "#line 1\n" + plain  # the header line, then the source's lines
    assert (
        translate("#include <cuda_runtime.h>\n__global__ void k() {}\n").count("hip_runtime.h") == 1
    )


def test_tile_votes_enable_hips_warp_sync_builtins() -> None:
    text = "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n" + KERNEL.format(
        body="  auto t = cg::tiled_partition<8>(cg::this_thread_block());\n  if (t.any(o[0] > 0)) o[1] = 1;"
    )
    result = hipify_source(text, "t.cu")
    body = result.text.split("\n", 1)[1]
    assert body.startswith(
        "#define HIP_ENABLE_WARP_SYNC_BUILTINS\n#include <hip/hip_runtime.h>\n#line 1\n#include <hip/hip_cooperative_groups.h>"
    )
    assert [(d.line, d.code) for d in result.diagnostics] == [(5, "warp-sync-builtins")]
    assert hipify_source(result.text, "x").text == result.text
    assert "HIP_ENABLE" not in translate(text.replace("t.any(o[0] > 0)", "bits.any()"))


def test_cuda_arch_and_version_macros() -> None:
    text = "#ifdef __CUDA_ARCH__\nA\n#endif\n#if defined(__CUDA_ARCH__)\nB\n#endif\n#if __CUDA_ARCH__ >= 800\nC\n#endif\nint v = CUDART_VERSION;\n#if CUDART_VERSION >= 12000\nD\n#endif\n"
    result = hipify_source(text, "t.cu")
    assert result.text.count("__HIP_DEVICE_COMPILE__") == 2
    assert "#if KERNELPACK_CUDA_ARCH >= 800\n" in result.text
    assert "#include <kernelpack_hip_compat.h>\n#line 1\n#ifdef" in result.text
    assert "int v = KERNELPACK_CUDART_VERSION;" in result.text
    assert "#if KERNELPACK_CUDART_VERSION >= 12000\n" in result.text
    assert result.diagnostics == ()


def test_version_macros_see_cuda_11_8_everywhere() -> None:
    # threadFenceReduction (cuda-samples): the kernels are behind `#if CUDART_VERSION >= 2020`
    # and the #else calls a helper that no longer exists; every use (value, #if, #ifdef, a
    # fallback #define) must agree on the one release the compat layer stands for: CUDA 11.8.
    text = (
        "#ifndef CUDART_VERSION\n#define CUDART_VERSION 0\n#endif\n"
        "#define VERSION_MAJOR (CUDART_VERSION / 1000)\n"
        "#if CUDART_VERSION >= 2020 && defined(CUDA_VERSION)\nint kernels;\n#endif\n"
        "#if __CUDACC_VER_MAJOR__ < 12\nint old_nvcc = __CUDACC_VER_MINOR__;\n#endif\n"
    )
    out = translate(text)
    assert out.startswith(
        "#include <hip/hip_runtime.h>\n"
        "#define KERNELPACK_CUDART_VERSION 11080\n#define KERNELPACK_CUDA_VERSION 11080\n"
        "#define KERNELPACK_CUDACC_VER_MAJOR 11\n#define KERNELPACK_CUDACC_VER_MINOR 8\n#line 1\n"
    )
    assert "#ifndef KERNELPACK_CUDART_VERSION\n" in out
    assert "(KERNELPACK_CUDART_VERSION / 1000)" in out
    assert "#if KERNELPACK_CUDART_VERSION >= 2020 && defined(KERNELPACK_CUDA_VERSION)\n" in out
    assert "int old_nvcc = KERNELPACK_CUDACC_VER_MINOR;" in out
    assert not re.search(r"\b(CUDART_VERSION|CUDA_VERSION|__CUDACC_VER_\w+)", out)
    assert translate(out) == out
    assert not hipify_source(text, "v.cu").diagnostics
    assert "#define" not in translate("int f() { return 1; }\n")


def test_cuda_arch_values_use_the_compat_macro_and_header() -> None:
    text = (
        "#include <cuda_fp16.h>\n#if __CUDA_ARCH__ < 600\n__device__ double atomicAdd(double* a, double v);\n"
        "#endif\n__global__ void k(unsigned* o) { o[0] = __vsubss4(o[1], o[2]); }\n"
    )
    out = translate(text)
    assert out.startswith("#include <hip/hip_runtime.h>\n#include <kernelpack_hip_compat.h>\n")
    assert "#if KERNELPACK_CUDA_ARCH < 600\n" in out and "__CUDA_ARCH__" not in out
    assert translate(out) == out
    assert "kernelpack_hip_compat" not in translate("__global__ void k(int* o) { o[0] = 1; }\n")


def test_inline_ptx_behind_an_arch_guard_takes_the_alternative() -> None:
    """More cases in tests/test_hipify_arch_features.py."""
    text = '__device__ void f(int x) {\n#if __CUDA_ARCH__ >= 750\n  asm("mov.b32 %0, %0;" : "+r"(x));\n#else\n  x++;\n#endif\n}\n'
    assert codes(text) == [(2, "arch-feature")]
    assert codes(text.replace("#else\n  x++;\n", "")) == [(3, "inline-asm")]


def test_cuda_std_becomes_std() -> None:
    text = "#include <cuda/std/limits>\n__device__ long f() { return ::cuda::std::numeric_limits<long>::lowest(); }\nauto g = cuda::atomic_ref<int>(x);\n"
    result = hipify_source(text, "t.cu")
    assert "#include <limits>\n" in result.text
    assert "return ::std::numeric_limits<long>::lowest();" in result.text
    assert [(d.line, d.code) for d in result.diagnostics] == [(3, "unsupported-api")]
    assert hipify_source(result.text, "t.hip").text == result.text


def test_cooperative_groups_reduce_uses_the_compat_header() -> None:
    text = (
        "#include <cooperative_groups.h>\n#include <cooperative_groups/reduce.h>\n"
        "namespace cg = cooperative_groups;\n__global__ void k(float* o) {\n"
        "  auto t = cg::tiled_partition<16>(cg::this_thread_block());\n"
        "  o[0] = cg::reduce(t, o[1], cg::plus<float>());\n}\n"
    )
    result = hipify_source(text, "t.cu")
    assert "#include <kernelpack_hip_compat.h>\n" in result.text and not result.diagnostics


def test_cuda_header_guards_tested_as_features() -> None:
    """cuda-samples' helper_cuda.h defines checkCudaErrors under #ifdef __DRIVER_TYPES_H__ (the
    guard of a header nvcc always includes): the test must see HIP's header instead."""
    text = "#ifdef __DRIVER_TYPES_H__\n#define checkCudaErrors(v) (v)\n#endif\n#ifdef __CUDA_RUNTIME_H__\nint x;\n#endif\n"
    out = hipify_source(text, "helper_cuda.h").text
    assert "#ifdef HIP_INCLUDE_HIP_DRIVER_TYPES_H\n" in out
    assert "#ifdef HIP_INCLUDE_HIP_HIP_RUNTIME_H\n" in out


def test_warp_reductions_are_findings_only_beside_warp_size() -> None:
    """__reduce_*_sync is a 32-lane reduction: a finding in a file that also uses warpSize (even
    from a helper of its own, as cuda-samples' reduction does), none in a file of 32-lane code."""
    helper = "__device__ int sum(int v) { return __reduce_add_sync(0xffffffff, v); }\n"
    user = "__global__ void k(int* o) { if (threadIdx.x % warpSize == 0) o[0] = sum(1); }\n"
    assert [(line, code) for line, code in codes(helper + user)] == [(1, "shfl-offset16")]
    assert codes(helper + "__global__ void k(int* o) { o[threadIdx.x / 32] = sum(1); }\n") == []


def test_warp_reductions_use_the_compat_header() -> None:
    """__reduce_*_sync keep their CUDA spelling, mask included: the compat header defines them."""
    text = "__global__ void k(int* o, unsigned m) {\n  o[0] = __reduce_add_sync(0xffffffff, o[1]);\n  o[1] = __reduce_or_sync(m, 3u);\n}\n"
    result = hipify_source(text, "t.cu")
    assert "#include <kernelpack_hip_compat.h>\n" in result.text and not result.diagnostics
    assert "__reduce_add_sync(0xffffffff, o[1])" in result.text
    assert "__reduce_or_sync(m, 3u)" in result.text


# ---- hazards and diagnostics --------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  int lane = threadIdx.x % 32;", "warp-size"),
        ("  int w = threadIdx.x >> 5;", "warp-size"),
        ("  if ((tid & 0x1f) == 0) o[0] = 1;", "warp-size"),
        ("  if (laneId == 31) o[0] = 1;", "warp-size"),
        ("  int nwarps = blockDim.x / 32;", "warp-size"),
        ("  v += __shfl_down(v, 16);", "shfl-offset16"),
        (
            "  for (int d = 16; d >= 1; d >>= 1) v += __shfl_xor_sync(0xffffffff, v, d);",
            "shfl-offset16",
        ),
        ("  uint32_t b = __ballot_sync(0xffffffff, v > 0);", "ballot-32bit"),
        ("  unsigned m; m = __ballot(v > 0);", "ballot-32bit"),
        ("  auto t = cg::tiled_partition<32>(cg::this_thread_block());", "tile32"),
        ("  if (__ballot_sync(~0u, v > 0) != 0xffffffff) o[0] = 1;", "warp-mask"),
        ('  asm("mov.u32 %0, %%smid;" : "=r"(l));', "inline-asm"),
        ("  cudaFooBar(1);", "untranslated"),
        ("  __nanosleep(100);", "unsupported-api"),
    ],
)
def test_each_hazard_class(body: str, expected: str) -> None:
    """Each class fires in a kernel that also uses the hardware wavefront (warpSize)."""
    mixed = "  o[9] = warpSize;\n" + body
    assert [code for _, code in codes(KERNEL.format(body=mixed))] == [expected]


@pytest.mark.parametrize(
    "body",
    [
        "  int lane = threadIdx.x % 32; int warp = threadIdx.x / 32;",
        "  if ((threadIdx.x & 31) == 0) o[threadIdx.x >> 5] = 1;",
        "  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);",
        "  v += __shfl_xor_sync(0xffffffff, v, 16, 32); o[threadIdx.x % 32] = v;",
        "  o[0] = warpSize; for (int d = 16; d > 0; d /= 2) v += __shfl_xor(v, d, 32);",
    ],
)
def test_virtual_32_lane_warps_are_not_findings(body: str) -> None:
    """32-lane groups stay inside one half of a wave64 (reductions end in lane 0 of each group,
    width-32 shuffles never cross): correct on every wave size, so no finding."""
    assert codes(KERNEL.format(body=body)) == []


BALLOT_KERNEL = (
    "#define VOTERS 16\nconstexpr unsigned kFew = 8;\ntemplate <unsigned int blockSize>\n"
    "__global__ void k(float* o, unsigned n) {{\n  unsigned tid = threadIdx.x;\n{body}\n"
    "  o[0] = b;\n}}\n"
)


@pytest.mark.parametrize(
    ("body", "reported"),
    [
        # at most 32 lanes (0..31) can vote true: bits 32..63 are zero, 32 bits lose nothing
        (  # cuda-samples reduction_kernel.cu's reduce7
            "  const unsigned int e = (blockSize / warpSize) > 0 ? (blockSize / warpSize) : 1;\n"
            "  const unsigned int b = __ballot_sync(0xffffffff, tid < e);",
            False,
        ),
        ("  unsigned b = __ballot_sync(0xffffffff, threadIdx.x < 32);", False),
        ("  unsigned b = __ballot(tid <= 31);", False),
        ("  unsigned b = __ballot_sync(~0u, VOTERS > tid);", False),
        ("  unsigned b = __ballot_sync(~0u, tid < kFew && o[tid] > 0);", False),
        ("  unsigned lane = threadIdx.x % warpSize;\n  unsigned b = __ballot(lane < 16);", False),
        ("  unsigned b = __ballot_sync(~0u, __lane_id() < blockDim.x / warpSize);", False),
        ("  unsigned b = __ballot(tid < min(n, 32u));", False),
        (
            "  unsigned b = (unsigned)__ballot(cg::this_thread_block().thread_rank() < 4);",
            False,
        ),
        ("#define WARP_SIZE 32\n  unsigned b = __ballot(tid < blockSize / WARP_SIZE);", False),
        # lanes above 31 may vote: the finding stays
        ("  unsigned b = __ballot_sync(0xffffffff, tid < 48);", True),
        ("  unsigned b = __ballot_sync(0xffffffff, tid < blockDim.x);", True),
        ("  unsigned b = __ballot_sync(0xffffffff, tid < n);", True),
        ("  unsigned b = __ballot(tid <= 32);", True),
        ("  unsigned b = __ballot(tid < blockSize / 16);", True),
        ("  unsigned b = __ballot(tid < blockSize / WARP_SIZE);", True),  # WARP_SIZE unknown
        ("  unsigned e = 8;\n  e += n;\n  unsigned b = __ballot(tid < e);", True),
        ("  unsigned b = __ballot(threadIdx.x % 32 < 16);", True),  # lane 32 is 0 again
        ("  o[threadIdx.y] = 0;\n  unsigned b = __ballot(threadIdx.x < 16);", True),  # 2-D
        (
            "  auto t = cg::tiled_partition<16>(cg::this_thread_block());\n"
            "  unsigned b = __ballot(t.thread_rank() < 4);",  # every tile's ranks 0..3
            True,
        ),
        ("  unsigned b = __ballot(tid > 16);", True),
    ],
)
def test_ballot_in_32_bits_is_reported_unless_only_lanes_below_32_vote(
    body: str, reported: bool
) -> None:
    found = [code for _, code in codes(BALLOT_KERNEL.format(body=body))]
    assert ("ballot-32bit" in found) is reported, found


def test_ballot_voters_in_a_helper_of_a_two_dimensional_kernel_are_not_bounded() -> None:
    """threadIdx.x < 16 in a helper: the file's kernel reads threadIdx.y, so its blocks may put
    rows 0..3 of 16 threads in one wave64, and lanes 48..63 vote too."""
    helper = "__device__ unsigned votes() { unsigned b = __ballot(threadIdx.x < 16); return b; }\n"
    kernel = "__global__ void k(unsigned* o) { o[threadIdx.y] = votes(); }\n"
    assert codes(helper + kernel) == [(1, "ballot-32bit")]
    assert codes(helper + kernel.replace("threadIdx.y", "blockIdx.x")) == []


def test_virtual_warps_mixed_with_the_hardware_wave_are_findings() -> None:
    body = "  int lane = threadIdx.x % 32;\n  unsigned long long b = __ballot_sync(~0u, lane == 0);"
    assert codes(KERNEL.format(body=body)) == [(2, "warp-size")]


@pytest.mark.parametrize(
    "body",
    [
        "  for (int d = warpSize / 2; d > 0; d /= 2) v += __shfl_down_sync(0xffffffff, v, d);",
        "  int lane = threadIdx.x % warpSize; int w = threadIdx.x / warpSize;",
        "  unsigned hi = static_cast<unsigned>(t >> 32); unsigned long long low = x & 0xffffffffULL;",
        "  unsigned long long b = __ballot_sync(0xffffffff, v > 0); int n = __popc(__ballot_sync(~0u, v > 0));",
        "  int row = blockIdx.x * 32 + i; float s[32];",
        "  auto t = cg::tiled_partition<16>(cg::this_thread_block());",
    ],
)
def test_wave_generic_code_has_no_findings(body: str) -> None:
    assert codes(KERNEL.format(body=body)) == []


def test_host_code_literals_are_not_hazards() -> None:
    assert (
        codes('void f() { dim3 block(32, 8); int lanes = n % 32; asm volatile("pause"); }\n') == []
    )


def test_diagnostic_format_and_position() -> None:
    text = KERNEL.format(body="  int lane = threadIdx.x % 32 + warpSize;")
    (diagnostic,) = hipify_source(text, "dir/x.cu").diagnostics
    line = diagnostic.format()
    match = DIAGNOSTIC_RE.match(line)
    assert match is not None, line
    assert (
        match["file"] == "dir/x.cu" and match["sev"] == "warning" and match["code"] == "warp-size"
    )
    assert (int(match["line"]), int(match["col"])) == (2, text.splitlines()[1].index("32") + 1)


def test_allow_comments() -> None:
    body = '  int lane = threadIdx.x % 32 + warpSize; asm("mov.u32 %0, %%smid;" : "=r"(l)); // hipify: allow({})'
    assert [c for _, c in codes(KERNEL.format(body=body.format("wave32")))] == ["inline-asm"]
    assert codes(KERNEL.format(body=body.format("warp-size, inline-asm"))) == []
    assert sorted(c for _, c in codes(KERNEL.format(body=body.format("wave-32")))) == [
        "bad-allow",
        "inline-asm",
        "warp-size",
    ]


def test_use_rocm_branches() -> None:
    """The CUDA branch of a USE_ROCM test is not flagged; asm in the ROCm branch is AMD's."""
    cuda_only = 'asm("mov.u32 %0, %%smid;" : "=r"(l));'
    amd_asm = 'asm volatile("s_nop 0");'
    for cuda_branch, rocm_branch in (
        ("#ifndef USE_ROCM", "#else"),
        ("#if !defined(USE_ROCM)", "#else"),
        ("#if !defined(__HIP_PLATFORM_AMD__)", "#else"),
    ):
        text = KERNEL.format(
            body=f"{cuda_branch}\n  {cuda_only}\n  cudaFooBar(1);\n{rocm_branch}\n  {amd_asm}\n#endif"
        )
        assert codes(text) == [], cuda_branch
    rocm_first = KERNEL.format(body=f"#ifdef USE_ROCM\n  {amd_asm}\n#else\n  {cuda_only}\n#endif")
    assert codes(rocm_first) == []
    unguarded = KERNEL.format(body=f"#if FOO\n  {cuda_only}\n#endif")
    assert [c for _, c in codes(unguarded)] == ["inline-asm"]


def test_repeated_findings_are_reported_once_per_file() -> None:
    """A user macro that looks like CUDA (cudaCheck from a header) used 40 times: one finding."""
    uses = "".join(f"  cudaCheck(cudaMalloc(&p, {n}));\n" for n in range(40))
    asm = '  asm("mov.u32 %0, %%smid;" : "=r"(l));\n'
    text = "void f(void* p) {\n" + uses + "}\n" + KERNEL.format(body=asm * 3)
    result = hipify_source(text, "t.cu")
    assert [(d.line, d.code) for d in result.diagnostics] == [
        (2, "untranslated"),
        (44, "inline-asm"),
    ]
    untranslated, asm_finding = result.diagnostics
    assert (
        "cudaCheck" in untranslated.message
        and "(40 in this file, lines 2, 3, 4" in untranslated.message
    )
    assert "(3 in this file, lines 44, 45, 46)" in asm_finding.message
    assert "#ifndef USE_ROCM" in asm_finding.message


def test_wmma_header_maps_to_the_portable_one_and_says_so_once() -> None:
    """mma.h becomes kernelpack's portable WMMA header; one warning names rocWMMA for speed
    (tests/test_hipify_wmma.py has the rest)."""
    text = "#include <mma.h>\nusing namespace nvcuda;\nnvcuda::wmma::fragment<int> f;\n"
    result = hipify_source(text, "t.cu")
    (diagnostic,) = result.diagnostics
    assert diagnostic.code == "wmma-portable" and diagnostic.severity is Severity.WARNING
    assert diagnostic.line == 1 and "rocWMMA" in diagnostic.message
    assert "#include <kernelpack_hip_wmma.h>\n" in result.text


def test_texture_fetches_go_to_the_compat_layer_and_the_rest_name_the_targets() -> None:
    """tex2D & co become kernelpack_compat's (software where the target has no image
    instructions); a fetch the layer lacks (texCubemap) keeps the finding, once per construct."""
    body = "__global__ void k(cudaTextureObject_t t, float* o) {\n  o[0] = tex2D<float>(t, 0, 0);\n"
    text = body + (
        "  o[1] = texCubemap<float>(t, 1, 0, 0) + tex1Dfetch<float>(t, 2);\n"
        "  o[2] = texCubemap<float>(t, 0, 1, 0);\n}\n"
    )
    result = hipify_source(text, "t.cu")
    assert [(d.line, d.code) for d in result.diagnostics] == [(3, "texture-targets")]
    first = result.diagnostics[0].message
    assert "gfx942, gfx950" in first and "__ldg" in first and "(2 in this file" in first
    assert "o[0] = kernelpack_compat::tex2D<float>(t, 0, 0);" in result.text
    assert "kernelpack_compat::tex1Dfetch<float>(t, 2)" in result.text
    assert " texCubemap<float>(t, 1, 0, 0)" in result.text
    assert "#include <kernelpack_hip_texture.h>\n" in result.text
    assert not hipify_source(
        "int tex2D(int);\nint v = my::tex2D(1) + tex2D(2);\n", "t.cu"
    ).diagnostics
    assert "kernelpack_compat" not in translate("int tex2D(int);\nint v = tex2D(2);\n")


def test_texture_host_calls_go_to_the_compat_layer() -> None:
    """On a device without image support they make software arrays and texture objects."""
    text = (
        "void f(cudaTextureObject_t* t, cudaResourceDesc* r, cudaTextureDesc* d, cudaArray_t a,\n"
        "       cudaChannelFormatDesc* c, const float* h) {\n"
        "  cudaMallocArray(&a, c, 4, 4);\n"
        "  cudaMemcpy2DToArray(a, 0, 0, h, 16, 16, 4, cudaMemcpyHostToDevice);\n"
        "  cudaCreateTextureObject(t, r, d, NULL);\n"
        "  cudaDestroyTextureObject(*t);\n  cudaFreeArray(a);\n}\n"
    )
    out = translate(text)
    for call in (
        "hipMallocArray(&a, c, 4, 4)",
        "hipMemcpy2DToArray(a, 0, 0, h, 16, 16, 4, hipMemcpyHostToDevice)",
        "hipCreateTextureObject(t, r, d, NULL)",
        "hipDestroyTextureObject(*t)",
        "hipFreeArray(a)",
    ):
        assert f"  kernelpack_compat::{call};" in out, call
    assert "#include <kernelpack_hip_texture.h>\n" in out
    assert "kernelpack_compat" not in translate("auto p = &cudaFreeArray;\n")


def test_exact_ptx_idioms_become_hip() -> None:
    """mov %laneid is __lane_id(); a 32-bit lane mask is not exact on wave64 and stays an error."""
    body = '__device__ unsigned f() {\n  unsigned l;\n  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l.x[0]));\n  return l;\n}\n'
    result = hipify_source(body, "t.cu")
    assert "  (l.x[0]) = __lane_id();\n" in result.text and not result.diagnostics
    assert hipify_source(result.text, "t.hip").text == result.text
    for other in (
        '"mov.u32 %0, %%lanemask_lt;" : "=r"(l)',
        '"mov.u32 %0, %%laneid;" : "=r"(l) : "r"(l)',
    ):
        text = body.replace('"mov.u32 %0, %%laneid;" : "=r"(l.x[0])', other)
        assert codes(text) == [(3, "inline-asm")]


ASYNC_COPY = """__device__ void load(float4* dst, const float4* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"(0), "l"(src));
#else
  *dst = *src;
#endif
}
__device__ void commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\\n" ::);
  asm volatile("cp.async.wait_group 0;\\n" : :);
#endif
}
"""


def test_async_copy_waits_are_no_ops_where_the_copies_are_synchronous() -> None:
    """gdn.cu's pattern: the guarded cp.async takes its plain-copy #else on AMD; the commit and
    wait beside it (no #else) become no-ops, as no asynchronous copy is left to wait for. A wait
    whose count is not a literal, or a cp.async with no alternative, stays an error."""
    result = hipify_source(ASYNC_COPY, "t.cu")
    assert result.text.count("((void)0);") == 2 and not result.has_errors
    assert hipify_source(result.text, "t.hip").text == result.text
    wait = '"cp.async.wait_group 0;\\n" : :'
    assert wait in ASYNC_COPY
    variable = ASYNC_COPY.replace(wait, '"cp.async.wait_group %0;" :: "n"(0)')
    assert "inline-asm" in [d.code for d in hipify_source(variable, "t.cu").diagnostics]
    alone = ASYNC_COPY.replace("#else\n  *dst = *src;\n", "")
    assert alone != ASYNC_COPY
    assert "inline-asm" in [d.code for d in hipify_source(alone, "t.cu").diagnostics]


LAUNCHES = """__global__ void cols(float* o, int n) {
  const int c = blockIdx.x * warpSize + threadIdx.x % warpSize;
  if (c < n) o[c] = 1.0f;
}
__global__ void groups(float* o) { o[threadIdx.x / 32] = 1.0f; }
void launch_cols(float* o, int n, int bs) {
  const int warp_size = 32;
  const int grid = n / 32;
  cols<<<grid, bs, (bs / 32) * sizeof(float)>>>(o, n);
}
void launch_groups(float* o) {
  const int warp_size = 32;
  groups<<<4 * 32 / warp_size, 32>>>(o);
}
"""


def test_launch_shapes_meet_the_hardware_wavefront() -> None:
    """A host function's 32 is a finding only where it launches a kernel that uses warpSize:
    the grid (line 8) and its warp size (line 7); not the shared-memory size (an upper bound), not
    the launcher of 32-lane groups (lines 12-13)."""
    assert codes(LAUNCHES) == [(7, "warp-size"), (8, "warp-size")]
    message = hipify_source(LAUNCHES, "t.cu").diagnostics[1].message
    assert "launch shape of cols" in message and "hipDeviceAttributeWarpSize" in message


def test_a_32_lane_reduction_helper_from_another_file_meets_warp_size() -> None:
    """llm.c's shape: common.h's warpReduceSum shuffles from offset 16 (right for 32-lane code);
    a kernel in another file that strides by warpSize and calls it sums each half of a wave64
    on its own. One finding per helper per function; none in a kernel of 32-lane groups."""
    from buildsys.hipify import scan_tree

    helper = "__device__ float warpReduceSum(float v) {\n  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffff, v, o);\n  return v;\n}\n"
    kernels = (
        '#include "common.h"\n__global__ void mixed(const float* x, float* o) {\n'
        "  float s = 0.0f;\n  for (int i = threadIdx.x % warpSize; i < 256; i += warpSize) s += x[i];\n"
        "  s = warpReduceSum(s);\n  o[0] = warpReduceSum(s);\n}\n"
        "__global__ void groups(const float* x, float* o) { o[threadIdx.x / 32] = warpReduceSum(x[threadIdx.x]); }\n"
    )
    tree = scan_tree({"common.h": helper, "k.cu": kernels})
    assert dict(tree.lane_reductions) == {"warpReduceSum": "common.h:1"}
    result = hipify_source(kernels, "k.cu", options=HipifyOptions(tree=tree))
    assert [(d.line, d.code) for d in result.diagnostics] == [(5, "shfl-offset16")]
    assert "warpReduceSum (common.h:1)" in result.diagnostics[0].message
    assert not hipify_source(kernels, "k.cu").diagnostics  # the file alone does not see the helper


def test_every_code_has_a_test_above() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    untested = [c.name for c in CODES if f'"{c.name}"' not in source]
    assert not untested


# ---- the corpus and our own sources -------------------------------------------------------


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus_findings_match_the_marked_expectations(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    result = hipify_source(text, path.name)
    found = Counter((d.line, d.code) for d in result.diagnostics if d.severity is not Severity.NOTE)
    assert found == read_expectations(text)


@pytest.mark.parametrize("path", CORPUS + KERNEL_SOURCES, ids=lambda p: p.name)
def test_deterministic_and_idempotent(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    first = hipify_source(text, str(path))
    assert hipify_source(text, str(path)) == first
    assert hipify_source(first.text, "elsewhere.hip").text == first.text
    launched = hipify_source(text, str(path), options=HipifyOptions(launch_macro=True)).text
    assert hipify_source(launched, "x", options=HipifyOptions(launch_macro=True)).text == launched
    header = first.text.split("\n", 1)[0]
    assert (
        header
        == f"// hipify: generated from {path} sha256 {hashlib.sha256(text.encode()).hexdigest()}"
    )


@pytest.mark.parametrize("path", KERNEL_SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_kernel_sources_have_no_wave_size_finding(path: Path) -> None:
    result = hipify_source(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    assert [
        d.format()
        for d in result.diagnostics
        if d.code in WAVE_SIZE_CODES or d.severity is Severity.ERROR
    ] == []


# ---- command line ------------------------------------------------------------------------


def test_cli_writes_layout_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src"
    (src / "include").mkdir(parents=True)
    (src / "mod").mkdir()
    (src / "include" / "r.cuh").write_text(
        "#pragma once\n__device__ int lane() { return threadIdx.x % 32 + warpSize * 0; }\n"
    )
    (src / "mod" / "m.cu").write_text(
        '#include "../include/r.cuh"\nint main() { cudaDeviceSynchronize(); }\n'
    )
    out = tmp_path / "out"
    assert buildsys_main(["hipify", str(src), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert sorted(f["output"] for f in report["files"]) == [
        str(out / "include" / "r.cuh"),
        str(out / "mod" / "m.hip"),
    ]
    assert report["totals"]["warnings"] == 1 and report["totals"]["by_kind"] == {"device": 1}
    assert DIAGNOSTIC_RE.match(captured.err.strip())
    assert '#include "../include/r.cuh"' in (out / "mod" / "m.hip").read_text()
    mtime = (out / "mod" / "m.hip").stat().st_mtime_ns
    assert (
        buildsys_main(
            ["hipify", str(src / "mod" / "m.cu"), str(src / "include" / "r.cuh"), "-o", str(out)]
        )
        == 0
    )
    assert (out / "mod" / "m.hip").stat().st_mtime_ns == mtime
    assert "references converted" in capsys.readouterr().out


def test_cli_places_the_compat_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Outputs that include the compat header get it beside them, and one line names the -I."""
    from buildsys.hipify import COMPAT_DIR

    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "dot.cu").write_text(
        "__global__ void k(int* o) { o[0] = __dp4a(o[1], o[2], 0); }\n"
    )
    (src / "plain.cu").write_text("__global__ void k(int* o) { o[0] = 1; }\n")
    out = tmp_path / "out"
    assert buildsys_main(["hipify", str(src), "-o", str(out)]) == 0
    header = (COMPAT_DIR / "kernelpack_hip_compat.h").read_text(encoding="utf-8")
    assert (out / "kernelpack_hip_compat.h").read_text(encoding="utf-8") == header
    lines = [x for x in capsys.readouterr().err.splitlines() if "kernelpack_hip_compat.h" in x]
    assert lines == [
        f"hipify: 1 of 2 outputs include <kernelpack_hip_compat.h>, written to "
        f"{out / 'kernelpack_hip_compat.h'}: compile them with -I {out}"
    ]
    alone = tmp_path / "alone"
    assert buildsys_main(["hipify", str(src / "plain.cu"), "-o", str(alone)]) == 0
    assert not (alone / "kernelpack_hip_compat.h").exists()
    assert "kernelpack_hip_compat" not in capsys.readouterr().err


def test_cli_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "asm.cu"
    bad.write_text('__global__ void k() { asm("bar.sync 0;"); }\n')
    assert buildsys_main(["hipify", str(bad), "-o", str(tmp_path / "o")]) == 1
    assert buildsys_main(["hipify", str(tmp_path / "missing.cu"), "-o", str(tmp_path / "o")]) == 2
    (tmp_path / "latin1.cu").write_bytes(b"// caf\xe9\n")
    assert buildsys_main(["hipify", str(tmp_path / "latin1.cu"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "missing.cu does not exist" in err and "not UTF-8" in err


def test_cli_reads_feature_macros_across_files(tmp_path: Path) -> None:
    """The header names the feature, the kernel file selects PTX with it: one run over both
    takes the alternative (exit 0), and so does the kernel file alone, whose include brings the
    header in; the kernel text translated without the header keeps the inline-asm error."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "arch.cuh").write_text("#if __CUDA_ARCH__ >= 750\n#define MMA_OK\n#endif\n")
    (src / "k.cu").write_text(
        '#include "arch.cuh"\n__device__ void f(int x) {\n#ifdef MMA_OK\n'
        '  asm("mov.b32 %0, %0;" : "+r"(x));\n#else\n  x++;\n#endif\n}\n'
    )
    assert buildsys_main(["hipify", str(src), "-o", str(tmp_path / "both")]) == 0
    assert "left undefined on AMD" in (tmp_path / "both" / "arch.cuh").read_text()
    assert buildsys_main(["hipify", str(src / "k.cu"), "-o", str(tmp_path / "alone")]) == 0
    assert "left undefined on AMD" in (tmp_path / "alone" / "arch.cuh").read_text()
    assert hipify_source((src / "k.cu").read_text(), "k.cu").has_errors


def test_builder_tree_carries_the_compat_header(tmp_path: Path) -> None:
    """The builder's hipified tree has the compat header in its include folder, where the
    translated include finds it with the tree's own -I."""
    from buildsys.cache import BuildCache
    from buildsys.hipify import COMPAT_DIR
    from buildsys.modules import INCLUDE_DIR, KernelModule, SourceTree
    from buildsys.trees import hipify_tree

    source = "__global__ void k(unsigned* o) { o[0] = __vadd4(o[1], o[2]); }\n"
    tree = SourceTree({"m/m.cu": source})
    hip_tree, _ = hipify_tree(tree, [KernelModule("m", "m/m.cu")], BuildCache(tmp_path))
    assert "#include <kernelpack_hip_compat.h>" in hip_tree["m/m.hip"]
    header = (COMPAT_DIR / "kernelpack_hip_compat.h").read_text(encoding="utf-8")
    assert hip_tree[f"{INCLUDE_DIR}/kernelpack_hip_compat.h"] == header


def test_builder_tree_reads_feature_macros_across_files(tmp_path: Path) -> None:
    """hipify_tree scans the whole tree first (cached by every file's content): the feature in
    include/arch.cuh turns the PTX branch of m/m.cu into its alternative, with no error finding;
    a changed header changes the verdict."""
    from buildsys.cache import BuildCache
    from buildsys.modules import KernelModule, SourceTree
    from buildsys.trees import hipify_tree

    header = "#if __CUDA_ARCH__ >= 750\n#define MMA_OK\n#endif\n"
    kernel = (
        '#include "arch.cuh"\n__global__ void k(int* o) {\n  int x = o[0];\n#ifdef MMA_OK\n'
        '  asm("mov.b32 %0, %0;" : "+r"(x));\n#else\n  x++;\n#endif\n  o[0] = x;\n}\n'
    )
    modules = [KernelModule("m", "m/m.cu")]
    cache = BuildCache(tmp_path)
    for _ in range(2):  # cold, then from the cache
        hip_tree, lines = hipify_tree(
            SourceTree({"m/m.cu": kernel, "include/arch.cuh": header}), modules, cache
        )
        assert not [line for line in lines if "error[" in line], lines
        assert "left undefined on AMD" in hip_tree["include/arch.cuh"]
    plain = header.replace("#if __CUDA_ARCH__ >= 750\n", "#if 1\n")
    _, lines = hipify_tree(
        SourceTree({"m/m.cu": kernel, "include/arch.cuh": plain}), modules, cache
    )
    assert any("error[inline-asm]" in line for line in lines)


# ---- the register storage class ------------------------------------------------------------

REGISTER_SOURCE = """\
// a register in a comment stays
#define register_count 3
#ifdef register
#endif
__global__ void k(float* o, const char* s) {
  register float acc = 0.0f; register int i;
  for (i = 0; i < register_count; ++i) acc += o[i];
  o[0] = acc + (s[0] == 'r') + sizeof("register");
}
__device__ static inline int twice(register int x) { return 2 * x; }
"""


def test_register_storage_class_is_removed_with_one_note() -> None:
    result = hipify_source(REGISTER_SOURCE, "reg.cu")
    body = result.text.split("#line 1\n", 1)[1]
    expected = (
        REGISTER_SOURCE.replace("  register float", "  float")
        .replace("; register int i", "; int i")
        .replace("(register int x)", "(int x)")
    )
    assert body == expected  # the comment, the macro names and the string keep theirs
    assert [(d.line, d.code, d.severity) for d in result.diagnostics] == [
        (6, "register-removed", Severity.NOTE)
    ]
    assert "3 in this file, lines 6, 10" in result.diagnostics[0].message
    assert hipify_source(result.text, "reg.cu").text == result.text


# ---- includes followed inside the input tree -------------------------------------------------


def test_cli_follows_quoted_includes_inside_the_tree_whatever_their_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .cu includes a .c (and a .inc that includes the .c again and a link out of the tree):
    the .c and the .inc are translated under their own names; a file outside the tree is named
    in one line and neither read nor written."""
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.h").write_text("int secret() { return cudaDeviceReset(); }\n")
    (src / "main.cu").write_text(
        '#include "media.c"\n#include "sub/helper.inc"\n#include "../outside/secret.h"\n'
        '#include "cuda_runtime.h"\n// #include "commented.c"\n'
        "int main() { float* p; cudaMalloc(&p, 4); return media(p); }\n"
    )
    (src / "media.c").write_text("int media(float* p) { return cudaFree(p) == cudaSuccess; }\n")
    (src / "sub" / "helper.inc").write_text('#include "../media.c"\n#include "link.h"\n')
    (src / "sub" / "link.h").symlink_to(outside / "secret.h")
    out = tmp_path / "out"
    assert buildsys_main(["hipify", str(src / "main.cu"), "-o", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    outputs = sorted(f["output"] for f in json.loads(captured.out)["files"])
    assert outputs == [str(out / "main.hip"), str(out / "media.c"), str(out / "sub" / "helper.inc")]
    assert "hipFree(p) == hipSuccess" in (out / "media.c").read_text()
    assert not (out / "secret.h").exists() and not (out / "sub" / "link.h").exists()
    lines = [line for line in captured.err.splitlines() if "outside the sources' folders" in line]
    assert len(lines) == 1  # one line for the file, reached twice (by path and through the link)
    assert str((outside / "secret.h").resolve()) in lines[0]
    assert lines[0].startswith("hipify: ") and "name it or a folder holding it as SRC" in lines[0]


# ---- 16-bit inline PTX idioms ----------------------------------------------------------------

PTX16_SOURCE = """\
#include <cuda_fp16.h>
__device__ unsigned short to_half(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ float from_half(unsigned short h) {
  float f;
  asm volatile("cvt.f32.f16 %0, %1;\\n" : "=f"(f) : "h"(h));
  return f;
}
__device__ unsigned to_bf16x2(float a, float b) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(a), "f"(b));
  return r;
}
__device__ void split(unsigned r, unsigned short& lo, unsigned short& hi) {
  asm volatile("mov.b32 {%0,%1}, %2;" : "=h"(lo), "=h"(hi) : "r"(r));
}
__device__ unsigned join(unsigned short lo, unsigned short hi) {
  unsigned r;
  asm("mov.b32 %0, { %1, %2 };" : "=r"(r) : "h"(lo), "h"(hi));
  return r;
}
__device__ __half copy(__half x) {
  __half y;
  asm("mov.b16 %0, %1;" : "=h"(*reinterpret_cast<unsigned short*>(&y))
      : "h"(*reinterpret_cast<unsigned short*>(&x)));
  return y;
}
__device__ unsigned short rz(float f) {
  unsigned short h;
  asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
"""


def test_16_bit_ptx_idioms_become_compat_calls() -> None:
    result = hipify_source(PTX16_SOURCE, "moe_half.cu")
    text = result.text
    assert "#include <kernelpack_hip_compat.h>" in text
    for call in (
        "kernelpack_compat::ptx::cvt_rn_f16_f32(h, f);",
        "kernelpack_compat::ptx::cvt_f32_f16(f, h);",
        "kernelpack_compat::ptx::cvt_rn_bf16x2_f32(r, a, b);",
        "kernelpack_compat::ptx::mov_b32_unpack(lo, hi, r);",
        "kernelpack_compat::ptx::mov_b32_pack(r, lo, hi);",
        "kernelpack_compat::ptx::mov_b16(*reinterpret_cast<unsigned short*>(&y), "
        "*reinterpret_cast<unsigned short*>(&x));",
    ):
        assert call in text
    # another rounding mode is not an idiom: it stays, an error that stops the build
    assert [(d.line, d.code) for d in result.diagnostics] == [(33, "inline-asm")]
    assert 'asm("cvt.rz.f16.f32' in text
    assert hipify_source(text, "moe_half.cu").text == text
