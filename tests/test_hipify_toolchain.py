"""hipify against the real HIP toolchain: table names exist, translations compile for wave64 and
wave32, and the comparison with hipify-perl on the corpus holds (about 40 s on 2 cores)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from bench.bench_hipify_marked import CORPUS_DIR, compile_hip, markdown, run_comparison
from buildsys.hipify import COMPAT_DIR, HipifyOptions, hipify_source
from buildsys.hipify.tables import (
    ACTIVEMASK_REPLACEMENT,
    BALLOT_WIDENING,
    CALL_REWRITES,
    HEADERS,
    KERNEL_POINTER_ARG,
    RENAMES,
    WARP_INTRINSICS,
    WARP_SYNC_MACRO,
)

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = pytest.mark.toolchain

# HIP's own headers, and hipBLAS's, whose Ex API and compute types the "blas" table names
HIP_HEADERS = sorted({h for h in HEADERS.values() if h is not None and h.startswith("hip/")})
HIP_HEADERS.append("hipblas/hipblas.h")
_IDENT_RE = re.compile(r"[A-Za-z_]\w*")


def _hip_names() -> list[str]:
    """Every HIP name our translation can emit from the HIP runtime's own headers."""
    names = {r.hip for r in RENAMES.values()}
    names |= {w.hip for w in WARP_INTRINSICS} | set(BALLOT_WIDENING.values())
    names |= set(KERNEL_POINTER_ARG)
    names |= {ACTIVEMASK_REPLACEMENT.split("(")[0]} | {
        t.split("(")[0] for t in CALL_REWRITES.values()
    }
    return sorted(names)


@pytest.fixture(scope="module")
def hip_identifiers(amd_toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """Identifiers and macros declared by HIP's headers (host pass, macros kept with -dD)."""
    folder = tmp_path_factory.mktemp("hip-headers")
    source = folder / "all.hip"
    source.write_text(
        f"#define {WARP_SYNC_MACRO}\n" + "".join(f"#include <{h}>\n" for h in HIP_HEADERS)
    )
    result = amd_toolchain.run(
        [
            "hipcc",
            "-E",
            "-dD",
            "--cuda-host-only",
            "-x",
            "hip",
            str(source),
            "-o",
            str(folder / "all.i"),
        ]
    )
    assert result.returncode == 0
    return set(_IDENT_RE.findall((folder / "all.i").read_text(encoding="utf-8", errors="replace")))


@pytest.mark.parametrize("name", _hip_names())
def test_hip_name_is_declared_by_hip(name: str, hip_identifiers: set[str]) -> None:
    assert name in hip_identifiers


# Warp code in the CUDA spellings HIP 6.4 cannot compile as is, with 32-bit literal masks.
WARP_KERNEL = """\
#include <cuda_fp16.h>
#define FULL_MASK 0xffffffff
__global__ void warp_ops(const float* in, float* out, __half* h, unsigned long long* votes) {
  float v = in[threadIdx.x];
  for (int o = warpSize / 2; o > 0; o /= 2) v += __shfl_down_sync(FULL_MASK, v, o);
  for (int o = 1; o < warpSize; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o, warpSize);
  v += __shfl_up_sync(~0u, v, 1) + __shfl_sync(__activemask(), v, 0, 16);
  h[threadIdx.x] = __shfl_xor_sync(0xffffffff, h[threadIdx.x], 1);
  const double d = __shfl_sync(0xffffffff, static_cast<double>(v), 3);
  const unsigned long long ballot = __ballot_sync(0xffffffff, v > 0.0f);
  const int count = __popc(__ballot_sync(0xffffffff, v > 1.0f)) + __ffs(__activemask());
  if (__any_sync(0xffffffff, v < 0.0f) || __all_sync(0xffffffff, v > 2.0f)) out[1] = 1.0f;
  __syncwarp();
  __syncwarp(0xffffffff);
  votes[threadIdx.x] = ballot;
  out[threadIdx.x] = v + static_cast<float>(d) + count;
}
"""


@pytest.mark.parametrize("genco", [False, True], ids=["host-and-device", "device-only"])
def test_warp_intrinsics_compile_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path, genco: bool
) -> None:
    result = hipify_source(WARP_KERNEL, "warp_ops.cu")
    assert "_sync" not in result.text and not result.diagnostics
    source = tmp_path / "warp_ops.hip"
    source.write_text(result.text)
    if not genco:
        assert compile_hip(amd_toolchain, source) == ""
        return
    argv = ["hipcc", "--genco", "--offload-arch=gfx90a", "--offload-arch=gfx1100", str(source)]
    argv += ["-I", str(COMPAT_DIR)]  # translated shuffles include the compat header
    run = amd_toolchain.run([*argv, "-o", str(tmp_path / "warp_ops.co")], check=False)
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.parametrize("name", ["templates.cu", "runtime_streams.cu", "dynamic_smem.cu"])
def test_launch_macro_output_compiles(amd_toolchain: Toolchain, tmp_path: Path, name: str) -> None:
    text = (CORPUS_DIR / name).read_text(encoding="utf-8")
    translated = hipify_source(text, name, options=HipifyOptions(launch_macro=True)).text
    assert "<<<" not in translated and "hipLaunchKernelGGL(" in translated
    source = tmp_path / name.replace(".cu", ".hip")
    source.write_text(translated)
    assert compile_hip(amd_toolchain, source) == ""


def test_comparison_with_hipify_perl(amd_toolchain: Toolchain) -> None:
    comparison = run_comparison(amd_toolchain, CORPUS_DIR, jobs=2)
    print(markdown(comparison))
    assert len(comparison.files) >= 10
    for file in comparison.files:
        if not file.has_inline_asm:
            assert file.ours.compiled, f"{file.name}: {file.ours.first_error}"
        assert file.ours.hazards_reported == file.hazards_expected, file.name
        assert file.ours.false_alarms == 0, file.name
    assert sum(f.hazards_expected for f in comparison.files) > 0


# Feature guards the way real projects write them (candle-kernels, llama.cpp): which kernels exist
# in each AMD target's code object is the compiler's answer, compared with the table in
# docs/hipify.md (every matrix target stands for sm_89: half, bf16, fp8, double and 16-bit
# atomics present; no Hopper-only code).
ARCH_GUARDS = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#if __CUDA_ARCH__ < 600
__device__ double atomicAdd(double* address, double val) { return val; }
#endif
#if __CUDA_ARCH__ < 800
__device__ __nv_bfloat16 __hmax_nan(__nv_bfloat16 a, __nv_bfloat16 b) { return a; }
#endif
extern "C" __global__ void unguarded(double* o) { atomicAdd(o, 1.0); }
#if __CUDA_ARCH__ >= 530
extern "C" __global__ void half_kernel(__half* o) { o[0] = __hadd(o[1], o[2]); }
#endif
#if __CUDA_ARCH__ >= 700
extern "C" __global__ void cas16_kernel(unsigned short* o) { atomicCAS(o, (unsigned short)1, (unsigned short)2); }
#endif
#if __CUDA_ARCH__ >= 800
extern "C" __global__ void bf16_kernel(__nv_bfloat16* o) { o[0] = __hmax_nan(o[1], o[2]); }
#endif
#if __CUDA_ARCH__ >= 890
extern "C" __global__ void fp8_kernel(__nv_fp8_e4m3* o, float* f) { o[0] = __nv_fp8_e4m3(f[0]); }
#endif
#if __CUDA_ARCH__ >= 900
extern "C" __global__ void hopper_kernel(float* o) { o[0] = 1.0f; }
#endif
#if __CUDA_ARCH__ < 530
extern "C" __global__ void old_gpu_fallback(float* o) { o[0] = 1.0f; }
#endif
"""
ARCH_GUARD_KERNELS = {"unguarded", "half_kernel", "cas16_kernel", "bf16_kernel", "fp8_kernel"}


def test_arch_guards_per_target(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    """Every AMD target of the matrix: fallbacks for older GPUs are not compiled (no
    redefinition of HIP's atomicAdd), feature-guarded kernels are, Hopper-only ones are not."""
    from buildsys.hipify import COMPAT_DIR
    from buildsys.matrix import load_matrix
    from kernelpack.formats import read_code_object

    targets = [t.target for t in load_matrix().targets if t.vendor == "amd"]
    assert len(targets) >= 8
    result = hipify_source(ARCH_GUARDS, "arch_guards.cu")
    assert not result.has_errors, [d.format() for d in result.diagnostics]
    source = tmp_path / "arch_guards.hip"
    source.write_text(result.text)
    flags = ["hipcc", "-I", str(COMPAT_DIR), "-c", "-x", "hip"]
    host = amd_toolchain.run(
        [*flags, "--cuda-host-only", str(source), "-o", str(tmp_path / "h.o")], check=False
    )
    assert host.returncode == 0, host.stderr[-2000:]
    device = amd_toolchain.run(
        [
            *flags,
            "--cuda-device-only",
            "--no-gpu-bundle-output",
            *(f"--offload-arch={t}" for t in targets),
            str(source),
        ],
        cwd=tmp_path,
        check=False,
    )
    assert device.returncode == 0, device.stderr[-2000:]
    for target in targets:
        (path,) = tmp_path.glob(f"arch_guards-hip-amdgcn-amd-amdhsa-{target.split(':')[0]}.out")
        code_object = read_code_object(path.read_bytes(), str(path))
        assert {k.name for k in code_object.kernels} == ARCH_GUARD_KERNELS, target


LLMC_PATTERNS = """\
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

struct SumMax { float sum; float max; };
__device__ SumMax sum_max(SumMax a, SumMax b) { return {a.sum + b.sum, fmaxf(a.max, b.max)}; }

__global__ void struct_reduce(SumMax* out, const float* in) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  out[threadIdx.x] = cg::reduce(warp, SumMax{in[threadIdx.x], in[threadIdx.x]}, sum_max);
}

template <class T>
int count_finite(const T* values, int n) {  // llm.c's common.h: a host helper
  int finite = 0;
  for (int i = 0; i < n; i++) finite += isfinite(values[i]) && !isnan(values[i]);
  return finite;
}

__global__ void mixed_index(float* out, const float* in, int C) {
  const unsigned long long wide = blockIdx.x;
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    out[i] = in[min(C - 1, i + 4 * blockDim.x)] + in[max(0, threadIdx.x - 1u)];
    out[i] += in[min(static_cast<long long>(C) - 1, wide)];
  }
}

__global__ void packed_atomics(__nv_bfloat162* b, __half2* h, __nv_bfloat162 bv, __half2 hv) {
  atomicAdd(b + threadIdx.x, bv);
  atomicAdd(h + threadIdx.x, hv);
}

int main() {
  float values[2] = {1.0f, 2.0f};
  return count_finite(values, 2) == 2 ? 0 : 1;
}
"""


def test_llmc_patterns_compile_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """Mixed-signedness min/max indexing an array, host isfinite/isnan, packed 16-bit float
    atomics and cg::reduce over a struct (llm.c's dev/cuda kernels) compile through the compat header, host and device."""
    result = hipify_source(LLMC_PATTERNS, "llmc_patterns.cu")
    assert "kernelpack_hip_compat.h" in result.text and not result.has_errors
    source = tmp_path / "llmc_patterns.hip"
    source.write_text(result.text)
    assert compile_hip(amd_toolchain, source) == ""


def test_register_storage_class_compiles_once_removed(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """clang refuses ``register`` under -std=c++17 (nvcc accepts it); the translation compiles."""
    from tests.test_hipify import REGISTER_SOURCE

    source = tmp_path / "reg.hip"
    source.write_text(hipify_source(REGISTER_SOURCE, "reg.cu").text)
    argv = ["hipcc", "-std=c++17", "-x", "hip", "--offload-arch=gfx1100", "-fsyntax-only"]
    run = amd_toolchain.run([*argv, str(source)], check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    source.write_text(REGISTER_SOURCE)  # the CUDA text as is: clang's error, which the fix avoids
    run = amd_toolchain.run([*argv, "-include", "hip/hip_runtime.h", str(source)], check=False)
    assert "does not allow 'register' storage class specifier" in run.stderr


def test_16_bit_ptx_idioms_compile_for_wave64_and_wave32(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """Without the translation clang stops at the "h" constraint; with it, host and device
    passes compile for gfx942 and gfx1100."""
    from tests.test_hipify import PTX16_SOURCE

    source = tmp_path / "moe_half.hip"
    idioms = PTX16_SOURCE.split("__device__ unsigned short rz", 1)[0]
    source.write_text(hipify_source(idioms, "moe_half.cu").text)
    argv = ["hipcc", "-std=c++17", "-w", "-I", str(COMPAT_DIR), "-x", "hip", "-fsyntax-only"]
    argv += ["--offload-arch=gfx942", "--offload-arch=gfx1100"]
    run = amd_toolchain.run([*argv, str(source)], check=False)
    assert run.returncode == 0, run.stderr[-2000:]


# HeCBench's bf16 and fp8 whole programs (addBiasResidualLayerNorm's kernels.h, addBiasQKV): a
# float broadcast to both bf16 halves, and CUDA's packed fp8 types built from bf16 pairs; and
# attentionMultiHeadKVCache's (flashinfer's) bf16 pairs, half tanh and __grid_constant__.
HECBENCH_BF16_FP8 = """\
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

__device__ __nv_bfloat162 broadcast(float v) { return __float2bfloat162_rn(v); }

struct Params { const half2* in; half2* out; __nv_bfloat162* pairs; };
__global__ void decode(const __grid_constant__ Params params) {
  params.out[threadIdx.x] = h2tanh_approx(params.in[threadIdx.x]);
  params.out[0].x = htanh_approx(params.in[0].y);
  params.pairs[threadIdx.x] = make_bfloat162(params.pairs[0].y, params.pairs[0].x);
}

__global__ void pack(__nv_fp8x4_e4m3* out, const __nv_bfloat162* in, __nv_fp8x2_e5m2* pairs) {
  out[threadIdx.x] = __nv_fp8x4_e4m3(in[2 * threadIdx.x], broadcast(1.5f));
  pairs[threadIdx.x] = __nv_fp8x2_e5m2(float2{1.0f, 2.0f});
}

int main() {
  const __nv_bfloat16 host_rounded = __float2bfloat16_rn(0.1f);
  return __bfloat162float(host_rounded) > 0.0f ? 0 : 1;
}
"""


def test_hecbench_bf16_broadcast_and_fp8_vectors_compile(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """HIP 6.4 lacks __float2bfloat16_rn, __float2bfloat162_rn, make_bfloat162, the half tanh
    and __grid_constant__ (the compat header has them) and names CUDA's packed fp8 types
    __hip_fp8x{2,4}_*: host and device passes compile on gfx1201, whose fp8 is OCP as CUDA's. (gfx942's fp8 is FNUZ, and HIP 6.4 declares
    the OCP types' conversions for the host only there: docs/hipify.md, "HeCBench".)"""
    result = hipify_source(HECBENCH_BF16_FP8, "hecbench_bf16.cu")
    assert "kernelpack_hip_compat.h" in result.text and "__nv_fp8" not in result.text
    source = tmp_path / "hecbench_bf16.hip"
    source.write_text(result.text)
    argv = ["hipcc", "-std=c++17", "-w", "-I", str(COMPAT_DIR), "-x", "hip", "-fsyntax-only"]
    for mode in ("--cuda-host-only", "--cuda-device-only"):
        run = amd_toolchain.run([*argv, mode, "--offload-arch=gfx1201", str(source)], check=False)
        assert run.returncode == 0, run.stderr[-2000:]
