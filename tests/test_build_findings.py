"""How the build reacts to hipify's findings, without a compiler: errors in the files a module
compiles stop an AMD build; a failed compile is pointed at the finding at the place it names."""

from __future__ import annotations

from pathlib import Path

import pytest
from build_project import make_project

from buildsys.errors import HipifyError
from buildsys.findings import blocking, explaining, files_of, parse_findings
from buildsys.modules import SourceTree, inline_includes

LINES = [
    "m/m.cu:3:5: error[inline-ptx]: inline PTX cannot be translated; write the HIP code",
    "m/m.cu:9:12: warning[warp-size]: a literal 32 used as the warp size",
    "include/h.cuh:2:1: warning[wmma]: WMMA has no HIP form; use rocWMMA",
    "other/other.cu:1:1: error[inline-ptx]: inline PTX",
    "not a finding line",
]


def test_findings_are_read_from_hipify_lines() -> None:
    findings = parse_findings(LINES)
    assert [(f.where, f.severity, f.code) for f in findings] == [
        ("m/m.cu:3:5", "error", "inline-ptx"),
        ("m/m.cu:9:12", "warning", "warp-size"),
        ("include/h.cuh:2:1", "warning", "wmma"),
        ("other/other.cu:1:1", "error", "inline-ptx"),
    ]


def test_only_errors_in_the_files_a_module_reads_block_it() -> None:
    tree = SourceTree(
        {"m/m.hip": '#include "h.cuh"\nint x;\n', "include/h.cuh": "int y;\n", "other/o.hip": ""}
    )
    files = files_of(inline_includes(tree, "m/m.hip"), "m/m.hip")
    assert files == {"m/m.cu", "include/h.cuh"}
    found = blocking(parse_findings(LINES), files)
    assert [f.where for f in found] == ["m/m.cu:3:5"]  # not other/other.cu's, not warnings


def test_a_compile_error_is_pointed_at_the_finding_on_its_line() -> None:
    findings = parse_findings(LINES)
    message = (
        "m.hip:9:20: error: no matching function for call to '__shfl_xor'\n"
        "../include/h.cuh:7:1: error: unknown type name 'wmma'\n"
        "1 error generated when compiling for gfx90a."
    )
    explained = explaining(message, "m", findings)
    assert [f.where for f in explained] == ["m/m.cu:9:12", "include/h.cuh:2:1"]
    assert explaining("m.hip:40:1: error: something else\n", "other", findings) == []


def test_an_amd_build_with_a_hipify_error_stops_before_compiling(tmp_path: Path) -> None:
    files = {
        "lane/lane.cu": (
            'extern "C" __global__ void lane(unsigned* y) {\n'
            "  unsigned id;\n"
            '  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));\n'
            "  y[threadIdx.x] = id;\n"
            "}\n"
        )
    }
    project = make_project(tmp_path, files=files)
    with pytest.raises(HipifyError, match=r"lane/lane\.cu:3:\d+: error\[inline-asm\]") as caught:
        project.build()
    assert "--vendor nvidia" in str(caught.value) and caught.value.exit_code == 1
    assert not (project.settings.cache_dir / "objects").exists()  # no compiler ran
    assert not project.settings.out.exists()
