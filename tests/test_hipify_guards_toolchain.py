"""Architecture features and texture targets against the real HIP toolchain: a feature macro that
selects inline PTX compiles its alternative on every AMD target of the matrix, with every kernel
present; texture fetches the compat layer carries are software exactly where the compiler says there are
no image instructions, the others fail there, and the failure is matched to hipify's finding on
its line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from buildsys.findings import explaining, parse_findings
from buildsys.hipify import COMPAT_DIR, HipifyOptions, hipify_source, scan_tree
from buildsys.hipify.tables import NO_IMAGE_TARGETS, TEXTURE_FUNCTIONS

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

pytestmark = pytest.mark.toolchain

COMMON = """#pragma once
#define CC_TURING 750
#define CC_AMPERE 800
#if __CUDA_ARCH__ >= CC_AMPERE
#define BF16_AVAILABLE
#endif
#if __CUDA_ARCH__ >= CC_TURING
#define TURING_MMA_AVAILABLE
#endif
"""
# The PTX branch and the layout test must agree: the portable load asserts the portable layout.
KERNELS = """#include "common.cuh"
#if defined(TURING_MMA_AVAILABLE)
#define TILE 16
#else
#define TILE 8
#endif
__device__ int load(const int* p) {
#ifdef TURING_MMA_AVAILABLE
    int x;
    asm volatile("ld.global.b32 %0, [%1];" : "=r"(x) : "l"(p));
    return x;
#else
    static_assert(TILE == 8, "the portable load goes with the portable layout");
    return p[0];
#endif
}
extern "C" __global__ void load_kernel(const int* p, int* o) { o[0] = load(p) + TILE; }
#ifdef BF16_AVAILABLE
extern "C" __global__ void bf16_kernel(float* o) { o[0] = 1.0f; }
#endif
extern "C" __global__ void direct_kernel(int* o) {
    int x = o[0];
#if __CUDA_ARCH__ >= 800
    asm("mov.b32 %0, %0;" : "+r"(x));
#else
    x += 1;
#endif
    o[0] = x;
}
"""
KERNEL_NAMES = {"load_kernel", "bf16_kernel", "direct_kernel"}


def _amd_targets() -> list[str]:
    from buildsys.matrix import load_matrix

    return [t.target for t in load_matrix().targets if t.vendor == "amd"]


def test_feature_macro_alternatives_compile_for_every_target(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    from kernelpack.formats import read_code_object

    texts = {"common.cuh": COMMON, "kernels.cu": KERNELS}
    options = HipifyOptions(tree=scan_tree(texts))
    for name, text in texts.items():
        result = hipify_source(text, name, options=options)
        assert not result.has_errors, [d.format() for d in result.diagnostics]
        (tmp_path / (name[:-3] + ".hip" if name.endswith(".cu") else name)).write_text(result.text)
    targets = _amd_targets()
    flags = [
        "-I",
        str(COMPAT_DIR),
        "-c",
        "-x",
        "hip",
        "--cuda-device-only",
        "--no-gpu-bundle-output",
    ]
    device = amd_toolchain.run(
        ["hipcc", *flags, *(f"--offload-arch={t}" for t in targets), "kernels.hip"],
        cwd=tmp_path,
        check=False,
    )
    assert device.returncode == 0, device.stderr[-2000:]
    for target in targets:
        (path,) = tmp_path.glob(f"kernels-hip-amdgcn-amd-amdhsa-{target.split(':')[0]}.out")
        code_object = read_code_object(path.read_bytes(), str(path))
        assert {k.name for k in code_object.kernels} == KERNEL_NAMES, target


def test_texture_functions_are_the_ones_hip_marks(amd_toolchain: Toolchain) -> None:
    """Every function HIP's headers declare with __hip_img_chk__ (unavailable without images)."""
    from buildsys.toolchain import rootfs_dir

    marked: set[str] = set()
    for header in (rootfs_dir() / "usr/include/hip/amd_detail").glob("*.h"):
        text = header.read_text(encoding="utf-8", errors="replace")
        marked |= set(re.findall(r"__hip_img_chk__[^;{]*?\b((?:tex|surf)\w*)\s*\(", text))
    assert marked == TEXTURE_FUNCTIONS


def test_no_image_targets_are_the_compilers(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    """The matrix targets for which clang defines __HIP_NO_IMAGE_SUPPORT are the table's."""
    (tmp_path / "t.hip").write_text("int x;\n")
    without: set[str] = set()
    targets = _amd_targets()
    for target in targets:
        flags = ["-x", "hip", "--cuda-device-only", "-nogpulib", "-E", "-dM"]
        result = amd_toolchain.run(
            ["clang", *flags, f"--offload-arch={target}", "t.hip"],
            cwd=tmp_path,
        )
        if re.search(r"^#define __HIP_NO_IMAGE_SUPPORT 1$", result.stdout, re.MULTILINE):
            without.add(target)
    assert without == {t for t in targets if t.split(":")[0] in NO_IMAGE_TARGETS}
    assert "gfx942" in without and "gfx90a" not in without


TEXTURE = """#include <cuda_runtime.h>
__global__ void fetch(cudaTextureObject_t t, float* o) {
    o[threadIdx.x] = tex2D<float>(t, threadIdx.x + 0.5f, 0.5f);
}
"""
CUBEMAP = """#include <cuda_runtime.h>
__global__ void fetch(cudaTextureObject_t t, float* o) {
    o[threadIdx.x] = tex2D<float>(t, threadIdx.x + 0.5f, 0.5f);
    o[threadIdx.x] += texCubemap<float>(t, 1.0f, 0.5f, 0.5f);
}
"""


def _device_compile(
    toolchain: Toolchain, folder: Path, name: str, target: str, *flags: str
) -> tuple[int, str, str]:
    """hipcc's device pass for one target: (status, assembly, messages)."""
    argv = ["hipcc", "-S", "-x", "hip", "--cuda-device-only", f"--offload-arch={target}", "-O2"]
    output = f"{name}.{target}{''.join(flags)}.s"
    argv += ["-I", str(COMPAT_DIR), *flags, name, "-o", output]
    done = toolchain.run(argv, cwd=folder, check=False)
    assembly = folder / output
    return done.returncode, assembly.read_text() if assembly.exists() else "", done.stderr


def test_texture_fetches_are_software_exactly_where_there_are_no_images(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    """tex2D compiles for every target: the texture unit (image_sample) where the target has
    image instructions, loads where it has none, and loads on gfx1100 with the tests' switch."""
    result = hipify_source(TEXTURE, "m/fetch.cu")
    assert not result.diagnostics
    (tmp_path / "fetch.hip").write_text(result.text)
    for target in ("gfx1100", "gfx90a", "gfx942", "gfx950"):
        code, assembly, message = _device_compile(amd_toolchain, tmp_path, "fetch.hip", target)
        assert code == 0, f"{target}: {message}"
        assert ("image_sample" in assembly) is (target not in NO_IMAGE_TARGETS), target
    code, assembly, message = _device_compile(
        amd_toolchain, tmp_path, "fetch.hip", "gfx1100", "-DKERNELPACK_SOFTWARE_TEXTURES"
    )
    assert code == 0 and "image_sample" not in assembly and "_Z5fetch" in assembly, message


def test_texture_failure_points_at_the_finding(amd_toolchain: Toolchain, tmp_path: Path) -> None:
    """A fetch the compat layer lacks (texCubemap) fails on gfx942 at the finding's line."""
    result = hipify_source(CUBEMAP, "m/fetch.cu")
    lines = [d.format() for d in result.diagnostics]
    assert [(d.line, d.code) for d in result.diagnostics] == [(4, "texture-targets")]
    assert "gfx942" in lines[0] and "__ldg" in lines[0]
    (tmp_path / "fetch.hip").write_text(result.text)
    assert _device_compile(amd_toolchain, tmp_path, "fetch.hip", "gfx1100")[0] == 0
    code, _, message = _device_compile(amd_toolchain, tmp_path, "fetch.hip", "gfx942")
    assert code != 0 and "image/texture API not supported" in message
    assert "fetch.hip:4:" in message  # the CUDA source's line, through hipify's #line
    assert [f.text for f in explaining(message, "m", parse_findings(lines))] == lines


# cuda-samples threadFenceReduction's shape: the kernels exist only for CUDA >= 2.2, the #else
# calls a helper that is long gone. Translated code sees CUDA 11.8 (tables.CUDA_RELEASE_SEEN) in
# every pass, so the kernels of releases up to 11.8 are there and those for 12.0 on are not.
VERSIONED = """#include <cuda_runtime.h>
#define VERSION_MAJOR (CUDART_VERSION / 1000)
#if CUDART_VERSION >= 2020
extern "C" __global__ void since_2_2(int* o) { o[0] = VERSION_MAJOR; }
#endif
#if CUDA_VERSION >= 11080 && __CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 8
extern "C" __global__ void since_11_8(int* o) { o[0] = CUDART_VERSION; }
#endif
#if CUDART_VERSION >= 12000
extern "C" __global__ void since_12_0(int* o) { o[0] = 12; }
#endif
int run() {
#if CUDART_VERSION >= 2020
    static_assert(VERSION_MAJOR == 11, "CUDA 11.8 in the host pass too");
    return 0;
#else
    print_NVCC_min_spec("sample", "2.2", "Version 185");
#endif
}
"""


def test_version_guards_take_the_branch_of_cuda_11_8(
    amd_toolchain: Toolchain, tmp_path: Path
) -> None:
    from kernelpack.formats import read_code_object

    result = hipify_source(VERSIONED, "versioned.cu")
    assert not result.diagnostics, [d.format() for d in result.diagnostics]
    (tmp_path / "versioned.hip").write_text(result.text)
    host = amd_toolchain.run(
        ["hipcc", "-c", "-x", "hip", "--cuda-host-only", "versioned.hip", "-o", "host.o"],
        cwd=tmp_path,
        check=False,
    )
    assert host.returncode == 0, host.stderr[-2000:]
    argv = ["hipcc", "-c", "-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output"]
    device = amd_toolchain.run(
        [*argv, "--offload-arch=gfx1100", "versioned.hip"], cwd=tmp_path, check=False
    )
    assert device.returncode == 0, device.stderr[-2000:]
    (path,) = tmp_path.glob("versioned-hip-amdgcn-amd-amdhsa-gfx1100.out")
    code_object = read_code_object(path.read_bytes(), str(path))
    assert {k.name for k in code_object.kernels} == {"since_2_2", "since_11_8"}
