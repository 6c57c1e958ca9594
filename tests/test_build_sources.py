"""Kernel modules as the builder reads them: self-contained sources, compiler dependency files.
Pure Python, no compiler (the kernels come from the objects: test_build_discovery.py)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from buildsys.modules import SourceTree, inline_includes, read_tree
from buildsys.trees import read_depfile
from kernelpack.errors import UsageError


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


def test_module_folders_hold_one_or_several_translation_units(tmp_path: Path) -> None:
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "x.cuh").write_text("")
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "good.cu").write_text("")
    tree, modules = read_tree(tmp_path)
    assert [(m.name, m.sources, m.linked) for m in modules] == [("good", ("good/good.cu",), False)]
    assert list(tree) == ["good/good.cu", "include/x.cuh"]
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "b.cu").write_text("")
    (tmp_path / "two" / "a.cu").write_text("")
    (tmp_path / "two" / "parts").mkdir()
    (tmp_path / "two" / "parts" / "fragment.cu").write_text("")  # included, not compiled
    _, modules = read_tree(tmp_path)
    assert [(m.name, m.sources, m.linked) for m in modules] == [
        ("good", ("good/good.cu",), False),
        ("two", ("two/a.cu", "two/b.cu"), True),
    ]
    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "only.cuh").write_text("")
    with pytest.raises(UsageError, match=r"none: a kernel module folder needs a \.cu file"):
        read_tree(tmp_path)


def test_links_out_of_the_tree_are_refused_and_links_inside_it_are_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=hunter2\n")
    root = tmp_path / "kernel_sources"
    (root / "m").mkdir(parents=True)
    (root / "m" / "m.cu").write_text('#include "inner.cuh"\n')
    (root / "m" / "real.cuh").write_text("// inside\n")
    (root / "m" / "inner.cuh").symlink_to("real.cuh")
    tree, _ = read_tree(root)
    assert tree["m/inner.cuh"] == "// inside\n"
    (root / "m" / "leak.cuh").symlink_to(secret)
    with pytest.raises(UsageError, match=r"leak\.cuh: links to .*secret\.txt, outside"):
        read_tree(root)
    (root / "m" / "leak.cuh").unlink()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.cu").write_text("// not the project's\n")
    (root / "linked").symlink_to(outside)
    with pytest.raises(UsageError, match=r"x\.cu: links to .*elsewhere/x\.cu, outside"):
        read_tree(root)
    (root / "linked").unlink()
    include = tmp_path / "extra"
    include.mkdir()
    (include / "leak.h").symlink_to(secret)
    with pytest.raises(UsageError, match=r"leak\.h: links to .*secret\.txt, outside .*extra"):
        read_tree(root, [include])


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


def test_a_flat_folder_of_cu_files_gets_the_layout_in_one_line(tmp_path: Path) -> None:
    """A repository that keeps its kernels as src/*.cu is told how to lay them out: under the
    default sources folder, and where it points sources at the flat folder (issue 50, smaller)."""
    (tmp_path / "src").mkdir()
    for unit in ("add.cu", "scale.cu"):
        (tmp_path / "src" / unit).write_text('extern "C" __global__ void k() {}\n')
    with pytest.raises(UsageError) as missing:
        read_tree(tmp_path / "kernel_sources")
    assert str(missing.value) == (
        f"{tmp_path / 'kernel_sources'}: no such kernel sources folder; src/ holds add.cu, "
        "scale.cu directly, and a kernel module is a folder of its own: lay them out as "
        "kernel_sources/add/add.cu, kernel_sources/scale/scale.cu (several .cu files in one folder "
        "are device-linked into one module; docs/your-kernels.md, 2. Lay out the sources); "
        "[tool.kernelpack] sources names another folder"
    )
    with pytest.raises(UsageError) as flat:
        read_tree(tmp_path / "src")
    assert str(flat.value).startswith(
        f"{tmp_path / 'src'}: no kernel modules (folders with a .cu file); add.cu, scale.cu sit "
        "directly in it, and a kernel module is a folder of its own: lay them out as "
        "src/add/add.cu, src/scale/scale.cu ("
    )
    assert "\n" not in str(missing.value) + str(flat.value)


def test_a_missing_sources_folder_with_no_cuda_anywhere_gets_no_guess(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    with pytest.raises(UsageError) as missing:
        read_tree(tmp_path / "kernel_sources")
    assert str(missing.value) == f"{tmp_path / 'kernel_sources'}: no such kernel sources folder"
