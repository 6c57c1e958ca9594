"""Translation rules that route CUDA code to HIP's libraries and to the compat header: CUB to
hipCUB, thrust::cuda to rocThrust's thrust::hip, cuda_pipeline.h and tile shuffles to the compat
header, and user operators on vector types that HIP's vector types define (helper_math.h)."""

from __future__ import annotations

from buildsys.hipify import Severity, hipify_source
from buildsys.hipify.tables import header_target


def translate(text: str) -> str:
    result = hipify_source(text, "t.cu")
    assert [d.format() for d in result.diagnostics if d.severity is Severity.ERROR] == []
    return result.text.split("\n", 1)[1]


def test_cub_becomes_hipcub_and_only_the_namespace_name() -> None:
    out = translate(
        "#include <cub/block/block_reduce.cuh>\n"
        "int cube = 2;\n"
        "__global__ void k(int* x) { using R = cub::BlockReduce<int, 128>; x[0] = cube; }\n"
    )
    assert "#include <hipcub/block/block_reduce.hpp>" in out
    assert "hipcub::BlockReduce<int, 128>" in out and "int cube = 2;" in out
    assert header_target("cub/cub.cuh") == "hipcub/hipcub.hpp"
    assert header_target("cuda_pipeline.h") == "kernelpack_hip_compat.h"
    assert header_target("thrust/scan.h") is None  # rocThrust keeps Thrust's names


def test_thrust_cuda_policy_is_rocthrust_hip_policy_and_other_cuda_names_are_reported() -> None:
    out = translate("void f(hipStream_t s) { thrust::sort(thrust::cuda::par.on(s), p, p + 4); }\n")
    assert "thrust::hip::par.on(s)" in out
    codes = [d.code for d in hipify_source("cuda::atomic_ref<int> r(x);\n", "t.cu").diagnostics]
    assert "unsupported-api" in codes


def test_pipeline_and_tile_shuffles_include_the_compat_header() -> None:
    pipeline = translate(
        "#include <cuda_pipeline.h>\n"
        "__global__ void k(const float4* g) { __shared__ float4 s[32];\n"
        "  __pipeline_memcpy_async(&s[threadIdx.x], &g[threadIdx.x], 16);\n"
        "  __pipeline_commit(); __pipeline_wait_prior(0); }\n"
    )
    assert "#include <kernelpack_hip_compat.h>" in pipeline
    assert "cuda_pipeline.h" not in pipeline
    tile = translate(
        "#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
        "__global__ void k(uint4* v) {\n"
        "  cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());\n"
        "  v[0] = tile.shfl_xor(v[0], 1); }\n"
    )
    assert "#include <kernelpack_hip_compat.h>" in tile


HELPER_MATH = """\
inline __host__ __device__ float2 operator/(float2 a, float2 b)
{
    return make_float2(a.x / b.x, a.y / b.y);
}
inline __host__ __device__ void operator+=(float2 &a, const float2 &b)
{
    a.x += b.x;
}
inline __host__ __device__ float2 operator*(float2 a, float b) { return make_float2(a.x * b, a.y * b); }
inline __host__ __device__ float2 operator-(float2 &a) { return make_float2(-a.x, -a.y); }
inline __host__ __device__ int2 operator+(int2 a, float2 b) { return a; }
inline __host__ __device__ float2 operator+(float2* a, float2 b) { return b; }
struct Mine { __host__ __device__ float2 operator+(float2 b) { return b; } };
float2 after = make_float2(1, 2);
"""


def test_helper_math_operators_hip_defines_are_dropped_keeping_lines() -> None:
    """Only the two-operand forms on one vector type go (HIP's friend and member operators);
    vector-scalar forms (templates in HIP, which lose to the user's), unary minus, mixed types,
    pointers and class members stay."""
    out = translate(HELPER_MATH)
    assert "/* hipify: operator/(float2, float2) is HIP's own */\n\n\n\n" in out
    assert "/* hipify: operator+=(float2, float2) is HIP's own */" in out
    assert "make_float2(a.x / b.x" not in out and "a.x += b.x" not in out
    for kept in (
        "float2 operator*(float2 a, float b)",
        "float2 operator-(float2 &a)",
        "int2 operator+(int2 a, float2 b)",
        "float2 operator+(float2* a, float2 b)",
        "struct Mine { __host__ __device__ float2 operator+(float2 b)",
    ):
        assert kept in out, kept
    lines = out.splitlines()
    first = next(n for n, line in enumerate(lines) if "hipify: operator/" in line)
    assert lines[first + HELPER_MATH.count("\n") - 1] == "float2 after = make_float2(1, 2);"


def test_library_includes_get_the_prelude_header_keeping_the_source_lines() -> None:
    """Each include of a rocPRIM-based library (thrust/, cub/ as hipcub/, rocprim/) is preceded by
    the prelude include and a #line naming the include's own source line; other includes are
    not; a translation translated again gains nothing."""
    source = (
        "#include <cuda_runtime.h>\n"
        "#include <thrust/scan.h>\n"
        "#ifdef USE_CUB\n"
        "  #include <cub/block/block_load.cuh>\n"
        "#endif\n"
        "#include <rocprim/rocprim.hpp>\n"
        "#include <vector>\n"
        "__global__ void k(int* x) { x[0] = 1; }\n"
    )
    out = translate(source)
    lines = out.split("\n")
    includes = [i for i, line in enumerate(lines) if line.endswith("<kernelpack_hip_libraries.h>")]
    assert len(includes) == 3
    for index, (source_line, header) in zip(
        includes,
        [(2, "thrust/scan.h"), (4, "hipcub/block/block_load.hpp"), (6, "rocprim/rocprim.hpp")],
        strict=True,
    ):
        assert lines[index + 1] == f"#line {source_line}"
        assert lines[index + 2].strip() == f"#include <{header}>"
    # every line after a #line is the source line it names (the kernel is line 8)
    last = max(i for i, line in enumerate(lines) if line.startswith("#line"))
    named = int(lines[last].split()[1])
    assert lines[last + 1 + 8 - named].startswith("__global__ void k")
    again = hipify_source(hipify_source(source, "t.cu").text, "t.hip").text
    assert again == hipify_source(source, "t.cu").text
    assert "kernelpack_hip_libraries" not in translate("#include <vector>\nint x;\n")
