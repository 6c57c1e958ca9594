"""Kernels discovered from the compiled objects: names by the kernel-name rule, symbols per image,
parameter layouts; and the build failing on a kernel that some targets lack.

The fixture project defines kernels the way real libraries do: through macros, templates with
explicit instantiation, namespaces, C linkage, HIP-translated types. Each test compares with a
hand-written expectation, and the layouts with the compiler's own metadata where it has one.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest
from build_project import make_project

from buildsys import REPO_ROOT
from buildsys.demangling import Demangled, cuda_spelling, demangle, find_demangler, split_demangled
from buildsys.errors import BuildError
from buildsys.index_writer import read_index
from buildsys.missing_kernels import check_missing
from buildsys.report import failure_error, kernel_rows
from buildsys.settings import add_arguments, resolve_settings
from kernelpack.formats import read_bundle, read_code_object, read_cubin, read_ptx

FIXTURE = """\
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fx {
struct Pair { float a; int b; double c; };
}

// Kernels written through a macro: invisible to any source parser.
#define FILL(name, T) \\
  __global__ void name(T* out, T value, unsigned long long n) { if (n) out[0] = value; }
FILL(fill_f32, float)
FILL(fill_i64, long long)

template <typename T, int N>
__global__ void scale(const T* __restrict__ x, T* y, long long n, float s) {
  if (n > N) y[0] = x[0];
}
template __global__ void scale<float, 2>(const float*, float*, long long, float);
template __global__ void scale<__nv_bfloat16, 3>(const __nv_bfloat16*, __nv_bfloat16*, long long,
                                                  float);
template __global__ void scale<__half, 4>(const __half*, __half*, long long, float);

namespace fx {
__global__ void mixed(int a, unsigned long long b, Pair p, bool f, char c, double* d) {
  if (f) d[0] = p.c + a + b + c;
}
}  // namespace fx

template <bool B>
__global__ void flag(int* x) { x[0] = B; }
template __global__ void flag<true>(int*);

extern "C" __global__ void plain_c(float* x, int n, double v) { x[0] = v + n; }

namespace {
__global__ void hidden(float* x) { x[0] = 1; }
}
static __global__ void also_hidden(float* x) { x[0] = 2; }
"""

# name -> (type, offset, size) per parameter: written by hand from the C++ rules (natural
# alignment, 8-byte pointers, a 16-byte struct aligned to 8).
# One kernel per line reads as a table (ruff would put each tuple on lines of its own: fmt: skip).
EXPECTED = {
    "fill_f32": [("float*", 0, 8), ("float", 8, 4), ("unsigned long long", 16, 8)],
    "fill_i64": [("long long*", 0, 8), ("long long", 8, 8), ("unsigned long long", 16, 8)],
    "scale<float, 2>": [
        ("float const*", 0, 8), ("float*", 8, 8), ("long long", 16, 8), ("float", 24, 4)
    ],
    "scale<__nv_bfloat16, 3>": [
        ("__nv_bfloat16 const*", 0, 8), ("__nv_bfloat16*", 8, 8), ("long long", 16, 8),
        ("float", 24, 4),
    ],
    "scale<__half, 4>": [
        ("__half const*", 0, 8), ("__half*", 8, 8), ("long long", 16, 8), ("float", 24, 4)
    ],
    "fx::mixed": [
        ("int", 0, 4), ("unsigned long long", 8, 8), ("fx::Pair", 16, 16), ("bool", 32, 1),
        ("char", 33, 1), ("double*", 40, 8),
    ],
    "flag<true>": [("int*", 0, 8)],
    "plain_c": [("", 0, 8), ("", 8, 4), ("", 16, 8)],
    # internal linkage: kernels like the others, the unnamed namespace not part of the name
    "hidden": [("float*", 0, 8)],
    "also_hidden": [("float*", 0, 8)],
}  # fmt: skip


def _layout(
    index_kernels: dict[str, list[dict[str, object]]],
) -> dict[str, list[tuple[object, ...]]]:
    return {
        name: [(p["type"], p["offset"], p["size"]) for p in params]
        for name, params in index_kernels.items()
    }


def test_split_demangled_names_by_hand() -> None:
    assert split_demangled("_Z1kPf", "k(float*)", "k") == Demangled("k", ("float*",))
    assert split_demangled(
        "_Z1kIfLi2EEvPKT_", "void k<float, 2>(float const*)", "k<float, 2>"
    ) == Demangled("k<float, 2>", ("float const*",))
    assert split_demangled("_Z1kv", "k()", "k") == Demangled("k", ())
    assert split_demangled("_Z1fPFviiE", "f(void (*)(int, int))", "f") == Demangled(
        "f", ("void (*)(int, int)",)
    )
    with pytest.raises(BuildError, match="not 'k' followed by a parameter list"):
        split_demangled("_Z1k", "k", "k")


def test_hip_type_names_map_back_to_cuda() -> None:
    assert cuda_spelling("scale<__hip_bfloat16, 3>") == "scale<__nv_bfloat16, 3>"
    assert cuda_spelling("k<HIP_vector_type<unsigned char, 4u> >") == "k<uchar4 >"
    assert cuda_spelling("HIP_vector_type<float, 2u>*") == "float2*"
    assert cuda_spelling("my__hip_bfloat16x") == "my__hip_bfloat16x"  # whole names only


def test_demangler_against_hand_written_names() -> None:
    """c++filt, the one the builder uses, on symbols written by hand (Itanium ABI)."""
    found = demangle(
        ["_ZN2ns5plainEiyNS_1PEbcPd", "_Z2tkI6__halfLi4EEvPKT_PS1_xf", "cfun", "_Z2ukILj5EEvPi"],
        find_demangler(),
    )
    assert found["_ZN2ns5plainEiyNS_1PEbcPd"] == Demangled(
        "ns::plain", ("int", "unsigned long long", "ns::P", "bool", "char", "double*")
    )
    assert found["_Z2tkI6__halfLi4EEvPKT_PS1_xf"] == Demangled(
        "tk<__half, 4>", ("__half const*", "__half*", "long long", "float")
    )
    assert found["cfun"] == Demangled("cfun", None)
    assert found["_Z2ukILj5EEvPi"] == Demangled("uk<5u>", ("int*",))


@pytest.mark.nvcc
def test_nvidia_kernels_from_macros_and_templates(tmp_path: Path) -> None:
    project = make_project(
        tmp_path,
        files={"fx/fx.cu": FIXTURE},
        matrix='[nvidia]\ntargets = ["sm_90"]\nptx = ["compute_80"]\n',
    )
    result = project.build()
    assert not result.failed, failure_error(result)
    index = read_index((project.settings.out / "_index.py").read_text())
    module = index["modules"]["fx"]
    assert _layout(module["kernels"]) == {k: [tuple(p) for p in v] for k, v in EXPECTED.items()}
    by_target = {image["target"]: image for image in module["images"]}
    cubin_image = by_target["sm_90"]
    cubin = read_cubin((project.settings.out / cubin_image["file"]).read_bytes(), "fx.cubin")
    ptx = read_ptx((project.settings.out / by_target["compute_80"]["file"]).read_bytes(), "fx")
    assert cubin_image["symbols"]["scale<__nv_bfloat16, 3>"] == (
        "_Z5scaleI13__nv_bfloat16Li3EEvPKT_PS1_xf"
    )
    assert cubin_image["symbols"]["plain_c"] == "plain_c"
    assert cubin_image["symbols"] == by_target["compute_80"]["symbols"]
    # the compiler's own records: the cubin's EIATTR_KPARAM_INFO for each symbol
    for name, symbol in cubin_image["symbols"].items():
        (kernel,) = [k for k in cubin.kernels if k.name == symbol]
        assert [(p.offset, p.size) for p in kernel.params] == [
            (p["offset"], p["size"]) for p in module["kernels"][name]
        ]
    assert sorted(k.name for k in ptx.kernels) == sorted(cubin_image["symbols"].values())
    rows = kernel_rows(result)
    assert {r["kernel"] for r in rows} == set(EXPECTED)
    assert all(r["missing"] == [] for r in rows)


@pytest.mark.toolchain
def test_amd_names_match_nvidia_names(tmp_path: Path, amd_toolchain: object) -> None:
    """The same kernels, the same names and layouts on AMD: __hip_bfloat16 maps back."""
    project = make_project(
        tmp_path, files={"fx/fx.cu": FIXTURE}, matrix='[amd]\ntargets = ["gfx942"]\n'
    )
    result = project.build()
    assert not result.failed, failure_error(result)
    index = read_index((project.settings.out / "_index.py").read_text())
    module = index["modules"]["fx"]
    assert _layout(module["kernels"]) == {k: [tuple(p) for p in v] for k, v in EXPECTED.items()}
    (image,) = module["images"]
    assert image["symbols"]["scale<__nv_bfloat16, 3>"] == (
        "_Z5scaleI14__hip_bfloat16Li3EEvPKT_PS1_xf"
    )
    raw = (project.settings.out / image["file"]).read_bytes()
    (entry,) = [e for e in read_bundle(raw, "fx") if e.target == image["target"]]
    code_object = read_code_object(entry.view, "fx")
    # the compiler's metadata: each kernel's declared arguments, pointers where the type says so
    for name, symbol in image["symbols"].items():
        (kernel,) = [k for k in code_object.kernels if k.name == symbol]
        params = module["kernels"][name]
        assert [(p.offset, p.size) for p in kernel.params] == [
            (p["offset"], p["size"]) for p in params
        ]
        for declared, param in zip(kernel.params, params, strict=True):
            if param["type"]:
                assert declared.pointer == param["type"].endswith("*"), (name, param)


GUARDED = """\
__global__ void everywhere(float* x) { x[0] = 1; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__global__ void hopper_only(float* x) { x[0] = 2; }
#endif
"""


@pytest.mark.nvcc
def test_a_kernel_missing_from_a_target_fails_unless_allowed(tmp_path: Path) -> None:
    project = make_project(
        tmp_path, files={"g/g.cu": GUARDED}, matrix='[nvidia]\ntargets = ["sm_80", "sm_90"]\n'
    )
    result = project.build()
    assert result.failed
    assert not (project.settings.out / "_index.py").exists()
    message = str(failure_error(result))
    assert "g hopper_only (not on sm_80)" in message
    assert "allow-missing-kernels" in message
    assert [r for r in kernel_rows(result) if r["missing"]] == [
        {"module": "g", "kernel": "hopper_only", "targets": ["sm_90"], "missing": ["sm_80"]}
    ]
    settings = project.settings
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildsys",
            "build",
            "--sources",
            str(settings.sources),
            "--matrix",
            str(settings.matrix),
            "--cache-dir",
            str(settings.cache_dir),
            "--out",
            str(settings.out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 1  # a build failure, like a failed compile (BuildError)
    # one line, then the block that allows exactly this, ready to paste
    first, *block = cli.stderr.strip().splitlines()
    assert first.startswith("error: ") and "g hopper_only (not on sm_80)" in first
    assert block == ["[tool.kernelpack.allow-missing-kernels]", '"g@sm_80" = ["hopper_only"]']
    assert re.search(r"^g\s+hopper_only\s+MISSING on sm_80 \(1 of 2\)", cli.stdout, re.M)
    allowed = project.build(allow_missing_kernels={"g": ("hopper_only",)})
    assert not allowed.failed, failure_error(allowed)
    index = read_index((project.settings.out / "_index.py").read_text())
    images = {i["target"]: i for i in index["modules"]["g"]["images"]}
    assert sorted(images["sm_90"]["symbols"]) == ["everywhere", "hopper_only"]
    assert sorted(images["sm_80"]["symbols"]) == ["everywhere"]


@pytest.mark.nvcc
def test_merge_checks_kernels_across_shards(tmp_path: Path) -> None:
    """Each shard alone is consistent (sm_80's lacks hopper_only on all its targets); merged,
    the difference shows and needs allow-missing-kernels like a build."""
    from buildsys.merge import merge

    project = make_project(
        tmp_path, files={"g/g.cu": GUARDED}, matrix='[nvidia]\ntargets = ["sm_80", "sm_90"]\n'
    )
    shards = []
    for target in ("sm_80", "sm_90"):
        out = tmp_path / f"shard-{target}"
        result = project.build(targets=(target,), out=out)
        assert not result.failed, failure_error(result)
        shards.append(out)
    matrix = project.settings.matrix
    with pytest.raises(BuildError, match=r"g hopper_only \(not on sm_80\)"):
        merge(shards, tmp_path / "merged", matrix=matrix)
    assert not (tmp_path / "merged").exists()
    merge(shards, tmp_path / "merged", matrix=matrix, allow_missing_kernels={"g": ["hopper_only"]})
    index = read_index((tmp_path / "merged" / "_index.py").read_text())
    assert sorted(index["modules"]["g"]["kernels"]) == ["everywhere", "hopper_only"]


# A candle-like case: fp8 kernels exist only where __CUDA_ARCH__ >= 890.
MISSING = {
    "cast": {"cast_f8_e4m3_f32": ["sm_80", "compute_80"], "cast_bf16_f8_e4m3": ["sm_80"]},
    "unary": {"relu_f8_e4m3": ["sm_80"], "relu_f32": ["sm_80"]},
}


def test_allowances_take_patterns_and_targets() -> None:
    """allow-missing-kernels: kernel patterns, module patterns, and keys naming the targets on
    which the kernels may be missing (a kernel missing elsewhere is still an error)."""
    everywhere = {"cast": ("*_f8_e4m3*", "*_f8_e4m3"), "unary": ("*_f8_e4m3", "relu_f32")}
    check_missing(MISSING, everywhere, "here")
    check_missing(MISSING, {"*": ("*f8_e4m3*", "relu_f32")}, "here")
    on_sm80 = {"*@sm_80": ("*_f8_e4m3*",), "unary@sm_80,sm_86": ("relu_f32",)}
    with pytest.raises(BuildError) as raised:
        check_missing(MISSING, on_sm80, "pyproject.toml [tool.kernelpack]")
    first, *block = str(raised.value).splitlines()
    assert first.startswith("1 kernel(s) are missing from some targets")
    assert "cast cast_f8_e4m3_f32 (not on compute_80)" in first
    assert block == [
        "[tool.kernelpack.allow-missing-kernels]",
        '"cast@compute_80" = ["cast_f8_e4m3_f32"]',
    ]
    check_missing(MISSING, {**on_sm80, "cast@compute_*": ("cast_f8_*",)}, "here")


def test_the_printed_block_pasted_into_pyproject_allows_exactly_what_was_refused(
    tmp_path: Path,
) -> None:
    """The error's block is TOML that the settings read and that allows every refused kernel;
    many kernels are one key per module and set of targets, one kernel a line."""
    many = {"cast": {f"cast_f8_e4m3_{t}": ["sm_80", "compute_80"] for t in "abcdefghij"}}
    with pytest.raises(BuildError) as raised:
        check_missing({**MISSING, **many}, {}, "here")
    block = "\n".join(str(raised.value).splitlines()[1:])
    assert block.count("\n") > 10  # one kernel a line past one short line
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "1.0"\n\n[tool.kernelpack]\n\n' + block + "\n"
    )
    parser = argparse.ArgumentParser()
    add_arguments(parser, "build")
    settings = resolve_settings(parser.parse_args([]), {"KERNELPACK_BUILD_PROJECT": str(tmp_path)})
    check_missing({**MISSING, **many}, settings.allow_missing_kernels, "here")
    assert sorted(settings.allow_missing_kernels) == ["cast@sm_80,compute_80", "unary@sm_80"]
