"""Kernel modules as the builder reads them: kernels and their C parameter lists, self-contained
sources, compiler dependency files. Pure Python, no compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from buildsys.modules import SourceTree, inline_includes, parse_kernels, read_tree
from buildsys.trees import read_depfile
from kernelpack.errors import UsageError


def params(kernels: dict[str, list[dict[str, str]]] | object, name: str) -> list[tuple[str, str]]:
    assert isinstance(kernels, dict)
    return [(p["type"], p["name"]) for p in kernels[name]]


def test_kernels_are_the_extern_c_global_definitions() -> None:
    source = """
    #include "common.cuh"
    // extern "C" __global__ void in_a_comment(int x) {}
    /* extern "C" __global__ void in_a_block_comment(int x) {} */
    #define MAKE extern "C" __global__ void in_a_macro(int a) {}
    const char* text = "extern \\"C\\" __global__ void in_a_string(int a) {}";
    extern "C" __global__ void __launch_bounds__(256, 2)
        swiglu(const float* __restrict__ gate, float *out,
               unsigned long long n, float2 **pp) {
      if (n) { out[0] = gate[0]; }
    }
    extern "C" __global__ void no_params(void) {}
    extern "C" __global__ void declared_only(int a);
    extern "C" {
    __global__ void in_block(int, float* const q) { }
    __device__ int helper(int a) { return a; }
    __global__ void templated_arg(kp::vec<float, 4> v) { }
    }
    __global__ void cxx_linkage(int a) {}
    extern "C" __device__ int device_function(int a) { return a; }
    """
    kernels = parse_kernels(source, "m/m.cu")
    assert list(kernels) == ["in_block", "no_params", "swiglu", "templated_arg"]
    assert params(kernels, "swiglu") == [
        ("const float *", "gate"),
        ("float *", "out"),
        ("unsigned long long", "n"),
        ("float2 **", "pp"),
    ]
    assert params(kernels, "no_params") == []
    assert params(kernels, "in_block") == [("int", "arg0"), ("float * const", "q")]
    assert params(kernels, "templated_arg") == [("kp::vec<float, 4>", "v")]


def test_a_kernel_defined_twice_differently_is_refused() -> None:
    source = 'extern "C" __global__ void k(int a) {}\nextern "C" __global__ void k(float a) {}\n'
    with pytest.raises(UsageError, match=r"m\.cu:2: kernel k defined twice"):
        parse_kernels(source, "m.cu")


def tree_of(files: dict[str, str]) -> SourceTree:
    return SourceTree(files)


def test_inlined_source_is_self_contained_and_names_original_lines() -> None:
    tree = tree_of(
        {
            "mod/mod.cu": '#include "local.cuh"\n#include "shared.cuh"\n#include <cuda_fp16.h>\nint main_line;\n',
            "mod/local.cuh": '#pragma once\n#include "shared.cuh"\nint local_line;\n',
            "include/shared.cuh": "#pragma once\nint shared_line;\n",
        }
    )
    text = inline_includes(tree, "mod/mod.cu")
    assert text.count("int shared_line;") == 1  # #pragma once: pasted at its first include only
    assert "#pragma once" not in text
    assert "#include <cuda_fp16.h>" in text  # a toolkit header stays an include
    assert '#include "' not in text
    lines = text.splitlines()
    # after each pasted header, #line resumes the includer at the line after the #include
    assert lines[lines.index("int local_line;") + 1] == '#line 2 "mod/mod.cu"'
    assert lines[-3:] == ['#line 3 "mod/mod.cu"', "#include <cuda_fp16.h>", "int main_line;"]


def test_inlined_line_directives_point_at_the_original_files(tmp_path: Path) -> None:
    """The C preprocessor maps each line of the inlined text back to its file and line."""
    tree = tree_of(
        {
            "mod/mod.cu": '#include "a.cuh"\nint from_main_2;\n#include "b.cuh"\nint from_main_4;\n',
            "mod/a.cuh": "#pragma once\nint from_a_2;\n",
            "include/b.cuh": "\nint from_b_2;\n",
        }
    )
    (tmp_path / "all.c").write_text(inline_includes(tree, "mod/mod.cu"))
    if shutil.which("cpp") is None:
        pytest.skip("no C preprocessor (cpp) on this machine")
    marked = subprocess.run(
        ["cpp", str(tmp_path / "all.c")], capture_output=True, text=True, check=True
    ).stdout
    where = {}
    current = ("?", 0)
    for line in marked.splitlines():
        if line.startswith("# "):
            number, name = line[2:].split(" ", 2)[:2]
            current = (name.strip('"'), int(number))
            continue
        if line.startswith("int "):
            where[line[4:-1]] = current
        current = (current[0], current[1] + 1)
    assert where == {
        "from_a_2": ("mod/a.cuh", 2),
        "from_main_2": ("mod/mod.cu", 2),
        "from_b_2": ("include/b.cuh", 2),
        "from_main_4": ("mod/mod.cu", 4),
    }


def test_an_include_cycle_is_refused() -> None:
    tree = tree_of({"m/m.cu": '#include "a.cuh"\n', "m/a.cuh": '#include "a.cuh"\n'})
    with pytest.raises(UsageError, match="includes itself"):
        inline_includes(tree, "m/m.cu")


def test_module_folders_need_exactly_one_cu(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "x.cuh").write_text("")
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "good.cu").write_text("")
    tree, modules = read_tree(tmp_path)
    assert [(m.name, m.main) for m in modules] == [("good", "good/good.cu")]
    assert list(tree) == ["good/good.cu", "include/x.cuh"]
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "a.cu").write_text("")
    (tmp_path / "two" / "b.cu").write_text("")
    with pytest.raises(UsageError, match=r"two: a kernel module folder needs exactly one \.cu"):
        read_tree(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # clang -dependency-file: relative to the compile folder, system headers left out
        (
            "m.gfx90a.co: m.hip ../include/kp.cuh \\\n  ../include/with\\ space.cuh\n",
            ["include/kp.cuh", "include/with space.cuh", "m/m.hip"],
        ),
        # nvcc -MMD: the toolkit's own headers come as absolute paths
        (
            "m.sm_90.cubin : m.cu \\\n    /usr/local/cuda/include/cuda_runtime.h \\\n    ../include/kp.cuh\n",
            ["include/kp.cuh", "m/m.cu"],
        ),
    ],
)
def test_dependency_files_give_tree_paths(text: str, expected: list[str]) -> None:
    assert read_depfile(text, "m") == expected
