"""bench/bench_hipify.py's own logic: kernel names matched across vendors, CUDA's library kernels
left out, and the result cache's key covering the toolchain's header libraries."""

from __future__ import annotations

from pathlib import Path

from bench.bench_hipify import (
    FileResult,
    Project,
    ToolOutcome,
    _base_name,
    _input_digest,
    file_kernels,
    library_fingerprint,
    missing_kernels,
)

# (nvcc's symbol, clang's symbol for the same kernel), from nvcc 13.0 cubins and hipcc 6.4 code
# objects of the corpus (mistral.rs dflash_selector.cu, moe_align.cu) and a static kernel.
SAME_KERNEL = [
    (
        "_ZN51_GLOBAL__N__3eac3638_18_dflash_selector_cu_ad1a731827dflash_greedy_select_kernel"
        "EPKfPKvS3_S3_PKjPjiiiiiiii",
        "_ZN12_GLOBAL__N_127dflash_greedy_select_kernelEPKfPKvS3_S3_PKjPjiiiiiiii",
        "(anonymous namespace)::dflash_greedy_select_kernel",
    ),
    ("_ZL11file_staticPi", "_ZL11file_staticPi", "file_static"),
    (
        "_Z20kDequantizeBlockwiseI13__nv_bfloat16Li512ELi64ELi8ELi0EEvPfPhS1_PT_ii",
        "_Z20kDequantizeBlockwiseI14__hip_bfloat16Li512ELi64ELi8ELi0EEvPfPhS1_PT_ii",
        "kDequantizeBlockwise",
    ),
    ("plain_c", "plain_c", "plain_c"),
]


def test_one_kernel_has_one_name_on_both_vendors() -> None:
    for nvidia, amd, name in SAME_KERNEL:
        assert _base_name(nvidia) == _base_name(amd) == name


def _result(nvcc: list[str], amd: list[str]) -> FileResult:
    ours = ToolOutcome(host_ok=True, device_ok={"gfx90a": True}, kernels={"gfx90a": amd})
    return FileResult("p", "f.cu", True, "", nvcc, ours, ToolOutcome())


def test_cub_kernels_are_not_the_files_and_internal_ones_are_matched() -> None:
    empty = "_ZN3cub17CUB_300001_SM_9006detail11EmptyKernelIvEEvv"
    result = _result([empty, SAME_KERNEL[0][0]], [SAME_KERNEL[0][1]])
    assert file_kernels(result) == [SAME_KERNEL[0][0]]
    assert missing_kernels(result, "gfx90a") == []
    assert missing_kernels(_result([SAME_KERNEL[0][0]], []), "gfx90a") == [SAME_KERNEL[0][0]]


def test_cache_key_covers_header_libraries_only_where_included(tmp_path: Path) -> None:
    """Installing rocThrust changes the key of a file that includes thrust (a cached 'file not
    found' is not reused) and of no other file."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "uses.cu").write_text('#include "moe_utils.h"\n')
    (tree / "moe_utils.h").write_text("#include <thrust/scan.h>\n")
    (tree / "plain.cu").write_text("#include <hip/hip_runtime.h>\n")
    project = Project("p", "r", "c", "tree", ".", (), ("uses.cu", "plain.cu"))
    include = tmp_path / "include"
    before = library_fingerprint(include)
    (include / "thrust").mkdir(parents=True)
    (include / "thrust" / "version.h").write_text("#define THRUST_VERSION 200600\n")
    after = library_fingerprint(include)
    assert before != after and library_fingerprint(None) == before

    def key(name: str, libraries: str) -> str:
        return _input_digest(tree, project, name, ["ours"], tmp_path, libraries)

    assert key("uses.cu", before) != key("uses.cu", after)
    assert key("plain.cu", before) == key("plain.cu", after)
