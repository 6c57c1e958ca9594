"""Architecture features (buildsys/hipify/arch_features.py): inline PTX behind __CUDA_ARCH__
guards takes the source's alternative on AMD, decided over every file of a tree; without an
alternative the inline-asm error stays. Expectations are written by hand."""

from __future__ import annotations

from buildsys.hipify import HipifyOptions, hipify_source, scan_arch_features, scan_tree
from buildsys.hipify.arch_features import DROPPED_DEFINITION

# ggml's shape: the feature is named in a header, tested in another file with a portable #else,
# and a third test (no PTX of its own) picks the data layout that goes with it.
COMMON = """#pragma once
#define CC_TURING 750
#define CC_AMPERE 800
#if __CUDA_ARCH__ >= CC_AMPERE
#define BF16_AVAILABLE
#define AMPERE_MMA_AVAILABLE
#endif
#if __CUDA_ARCH__ >= CC_TURING
#define TURING_MMA_AVAILABLE
#endif
#if defined(TURING_MMA_AVAILABLE)
#define LDMATRIX_TRANS_AVAILABLE
#endif
"""
MMA = """#include "common.cuh"
__device__ int load(const int* p) {
#ifdef TURING_MMA_AVAILABLE
    int x;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(x) : "l"(p));
    return x;
#else
    return p[0];
#endif
}
__device__ int mma(int a) {
#if defined(AMPERE_MMA_AVAILABLE) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0}, {%0}, {%0}, {%0};" : "+r"(a));
#elif defined(BF16_AVAILABLE)
    a += 1;
#else
    a += 2;
#endif
    return a;
}
#if defined(TURING_MMA_AVAILABLE) || defined(AMD_MFMA)
#define TILE 16
#else
#define TILE 8
#endif
"""


def run(texts: dict[str, str]) -> dict[str, tuple[str, list[tuple[int, str]]]]:
    """Each file's translation (header line dropped) and its (line, code) diagnostics."""
    options = HipifyOptions(tree=scan_tree(texts))
    out = {}
    for path, text in texts.items():
        result = hipify_source(text, path, options=options)
        out[path] = (
            result.text.split("\n", 1)[1],
            [(d.line, d.code) for d in result.diagnostics],
        )
    return out


def test_feature_macro_defined_in_one_file_selects_ptx_in_another() -> None:
    features = scan_arch_features({"common.cuh": COMMON, "mma.cu": MMA})
    assert sorted(features.off) == ["AMPERE_MMA_AVAILABLE", "TURING_MMA_AVAILABLE"]
    assert features.undefined == {
        "AMPERE_MMA_AVAILABLE",
        "TURING_MMA_AVAILABLE",
        "LDMATRIX_TRANS_AVAILABLE",
    }
    out = run({"common.cuh": COMMON, "mma.cu": MMA})
    common, common_codes = out["common.cuh"]
    assert f"{DROPPED_DEFINITION}TURING_MMA_AVAILABLE\n" in common
    assert f"{DROPPED_DEFINITION}AMPERE_MMA_AVAILABLE\n" in common
    assert "#define BF16_AVAILABLE\n" in common  # same branch, no PTX: stays
    assert "#define LDMATRIX_TRANS_AVAILABLE\n" in common  # undefined through TURING
    # runtime and compat includes, then #line: no line of the source lost or added
    assert common.count("\n") == COMMON.count("\n") + 3 and "\n#line 2\n" in common
    assert common_codes == [(6, "arch-feature"), (9, "arch-feature")]
    mma, mma_codes = out["mma.cu"]
    assert mma_codes == []  # the PTX branches are not compiled on AMD: no inline-asm error
    assert "#ifdef TURING_MMA_AVAILABLE\n" in mma and "#define TILE 16" in mma


def test_the_file_alone_keeps_the_error() -> None:
    """Without the header the macro is not known to be an architecture feature; the branch that
    also compares __CUDA_ARCH__ is a direct guard and still takes its alternative."""
    assert run({"mma.cu": MMA})["mma.cu"][1] == [(5, "inline-asm"), (12, "arch-feature")]


def test_no_alternative_keeps_the_feature_and_the_error() -> None:
    """One PTX branch without #else keeps the feature defined: nothing is dropped silently."""
    bare = (
        MMA
        + '__device__ void f(int* p) {\n#ifdef TURING_MMA_AVAILABLE\n  asm("bar.sync 0;");\n#endif\n}\n'
    )
    features = scan_arch_features({"common.cuh": COMMON, "mma.cu": bare})
    assert sorted(features.off) == ["AMPERE_MMA_AVAILABLE"]
    out = run({"common.cuh": COMMON, "mma.cu": bare})
    assert "#define TURING_MMA_AVAILABLE\n" in out["common.cuh"][0]
    assert [code for _, code in out["mma.cu"][1]] == ["inline-asm"]


def test_a_feature_defined_under_it_without_alternative_blocks_it() -> None:
    under = (
        MMA
        + '__device__ void g() {\n#ifdef LDMATRIX_TRANS_AVAILABLE\n  asm("bar.sync 0;");\n#endif\n}\n'
    )
    assert "TURING_MMA_AVAILABLE" not in scan_arch_features({"c.cuh": COMMON, "m.cu": under}).off


def test_a_macro_used_in_code_or_set_outside_guards_is_no_feature() -> None:
    in_code = MMA + "__device__ bool h() { return TURING_MMA_AVAILABLE; }\n"
    assert "TURING_MMA_AVAILABLE" not in scan_arch_features({"c": COMMON, "m": in_code}).off
    also_plain = COMMON + "#define TURING_MMA_AVAILABLE\n"
    assert "TURING_MMA_AVAILABLE" not in scan_arch_features({"c": also_plain, "m": MMA}).off
    user_switch = MMA.replace("TURING_MMA_AVAILABLE", "USE_FAST_PATH")
    assert [c for _, c in run({"c": COMMON, "m": user_switch})["m"][1]] == ["inline-asm"]


def test_direct_guard_with_alternative_is_switched_off_where_it_stands() -> None:
    text = (
        "__device__ int f(int x) {\n#if __CUDA_ARCH__ >= 800 // Ampere\n"
        '  asm("mov.b32 %0, %0;" : "+r"(x));\n#else\n  x += 1;\n#endif\n'
        "#if __CUDA_ARCH__ >= 800\n  x = __float_as_int(1.0f);\n#endif\n  return x;\n}\n"
    )
    result = hipify_source(text, "t.cu")
    assert (
        "#if 0 /* hipify: inline PTX, not on AMD */ && (KERNELPACK_CUDA_ARCH >= 800) // Ampere\n"
        in result.text
    )
    assert "\n#if KERNELPACK_CUDA_ARCH >= 800\n" in result.text  # no PTX: the feature stays
    assert [(d.line, d.code) for d in result.diagnostics] == [(2, "arch-feature")]
    again = hipify_source(result.text, "t.hip")
    assert again.text == result.text and not again.diagnostics


def test_disjunction_or_no_alternative_keeps_the_error() -> None:
    body = '  asm("mov.b32 %0, %0;" : "+r"(x));\n'
    either = f"__device__ void f(int x) {{\n#if __CUDA_ARCH__ >= 800 || defined(X)\n{body}#else\n  x++;\n#endif\n}}\n"
    alone = f"__device__ void f(int x) {{\n#if __CUDA_ARCH__ >= 800\n{body}#endif\n}}\n"
    for text in (either, alone):
        result = hipify_source(text, "t.cu")
        assert [(d.line, d.code) for d in result.diagnostics] == [(3, "inline-asm")]
        assert "hipify: inline PTX" not in result.text


def test_translating_the_output_again_changes_nothing() -> None:
    texts = {"common.cuh": COMMON, "mma.cu": MMA}
    first = {p: t for p, (t, _) in run(texts).items()}
    again = run(first)
    assert {p: t for p, (t, _) in again.items()} == first
    assert all(codes == [] for _, codes in again.values())


# HeCBench atomicAggregate: sm_70's __match_any_sync behind a guard, a ballot loop in its #else.
MATCH_ANY = """__device__ unsigned peers(int* ptr) {
  unsigned mask = 0;
#if __CUDA_ARCH__ >= 700
  mask = __match_any_sync(0xFFFFFFFF, (unsigned long long)ptr);
#else
  for (int i = 0; i < warpSize; i++) {
    unsigned long long other = __shfl_sync(0xFFFFFFFF, (unsigned long long)ptr, i);
    if (i == threadIdx.x % warpSize) mask = __ballot_sync(0xFFFFFFFF, other == (unsigned long long)ptr);
  }
#endif
  return mask;
}
"""


def test_a_guarded_intrinsic_hip_lacks_takes_the_alternative_as_ptx_does() -> None:
    result = hipify_source(MATCH_ANY, "agg.cu")
    assert (
        "#if 0 /* hipify: __match_any_sync, not on AMD */ && (KERNELPACK_CUDA_ARCH >= 700)\n"
        in result.text
    )
    assert [(d.line, d.code) for d in result.diagnostics if d.severity.name == "ERROR"] == []
    assert any("selects __match_any_sync" in d.message for d in result.diagnostics)
    # without an alternative the call stays, with the finding that says what to write instead
    alone = MATCH_ANY.split("#else")[0] + "#endif\n  return mask;\n}\n"
    kept = hipify_source(alone, "agg.cu")
    assert "hipify: __match_any_sync" not in kept.text and kept.has_errors
