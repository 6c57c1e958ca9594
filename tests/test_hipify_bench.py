"""bench/bench_hipify.py's own logic: kernel names matched across vendors, CUDA's library kernels
left out, the result cache's key covering the toolchain's header libraries, the rule choosing
whole programs with hand ports, and the hand ports' count beside both tools'."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from bench.bench_hipify import (
    FileResult,
    Project,
    ToolOutcome,
    _base_name,
    _input_digest,
    file_kernels,
    library_fingerprint,
    markdown,
    missing_kernels,
    print_selection,
    read_manifest,
    read_results,
    select_programs,
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


def _program(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


MAIN = "#include <cuda.h>\n__global__ void k() {}\nint main() { return 0; }\n"


def test_whole_programs_are_chosen_by_the_stated_rule(tmp_path: Path) -> None:
    """Each folder breaks one clause of the rule, but for the chosen ones; the order is by code
    point (upper case first) and the count stops the list."""
    src = tmp_path / "src"
    twin = {"main.cu": "int main() {}\n"}
    cases: dict[str, tuple[dict[str, str], dict[str, str] | None]] = {
        "Zeta": ({"main.cu": MAIN}, twin),  # chosen: 'Z' sorts before 'a'
        "alpha": (
            {"main.cu": '#include "ref.h"\n' + MAIN, "ref.h": "#include <cub/cub.cuh>\n"},
            twin,
        ),
        "beta": ({"main.cu": MAIN, "more.cu": "\n"}, twin),  # two .cu files
        "gamma": ({"main.cu": MAIN}, None),  # no hand port
        "delta": ({"main.cu": MAIN}, {"other.cu": "\n"}),  # the port has another name
        "eps": ({"main.cu": MAIN, "Makefile": "LDFLAGS = -lcublas\n"}, twin),
        "eta": (
            {"main.cu": '#include "k.h"\n' + MAIN, "k.h": "#include <curand_kernel.h>\n"},
            twin,
        ),
        "iota": ({"main.cu": '#include "../common/util.h"\n' + MAIN}, twin),  # outside the folder
        "kappa": ({"main.cu": MAIN, "ref.cpp": "\n"}, twin),  # another compiled source
        "lambda": ({"kernels.cu": "__global__ void k() {}\n"}, {"kernels.cu": "\n"}),  # no main
        "mu": ({"ao.cu": MAIN, "Makefile": "CFLAGS = -lineinfo\n"}, {"ao.cu": "\n"}),
        "nu": ({"main.cu": MAIN}, twin),  # beyond the count
    }
    _program(src / "common", {"util.h": "\n"})
    for name, (cuda, hip) in cases.items():
        _program(src / f"{name}-cuda", cuda)
        if hip is not None:
            _program(src / f"{name}-hip", hip)
    assert select_programs(src, 3) == ["Zeta-cuda/main.cu", "alpha-cuda/main.cu", "mu-cuda/ao.cu"]
    assert select_programs(src, 99)[-1] == "nu-cuda/main.cu"


def test_the_manifest_names_each_hand_port_and_the_rule_reproduces_its_list(
    tmp_path: Path,
) -> None:
    (hec,) = [p for p in read_manifest() if p.hand_port]
    assert hec.hand_port_of("src/adam-cuda/main.cu") == "src/adam-hip/main.cu"
    assert Project("p", "r", "c", "f", ".", (), ()).hand_port_of("src/adam-cuda/main.cu") is None
    assert len(hec.files) == 33 and list(hec.files) == sorted(hec.files)
    # --select-programs on a corpus holding only the manifest's programs gives them back
    src = tmp_path / hec.folder / hec.root
    for relative in hec.files:
        folder, name = relative.split("/")
        _program(src / folder, {name: MAIN})
        _program(src / folder.replace("-cuda", "-hip"), {name: MAIN})
    assert print_selection(tmp_path, [hec], hec.name) == 0
    (src / hec.files[0]).write_text("__global__ void k() {}\n")  # no main: one program fewer
    assert print_selection(tmp_path, [hec], hec.name) == 1
    assert print_selection(tmp_path, [hec], "candle-kernels") == 2


def _outcome(*targets: str, host: bool = True, error: str = "") -> ToolOutcome:
    return ToolOutcome(host_ok=host, device_ok=dict.fromkeys(targets, True), first_error=error)


def test_hand_ports_are_counted_beside_both_tools_over_the_files_that_have_one(
    tmp_path: Path,
) -> None:
    targets = ("gfx90a", "gfx1100")
    both = _outcome(*targets)
    results = [
        # ours fails on gfx1100 where the hand port compiles
        FileResult("H", "a-cuda/main.cu", True, "", [], _outcome("gfx90a"), both, both),
        FileResult(
            "H",
            "b-cuda/main.cu",
            True,
            "",
            [],
            both,
            _outcome(),
            _outcome(host=False, error="host: x"),
        ),
        FileResult(
            "H", "c-cuda/main.cu", False, "nvcc fails", [], ToolOutcome(), ToolOutcome(), both
        ),
        FileResult("L", "lib.cu", True, "", [], both, both, None),  # a project without ports
    ]
    table = markdown(results, targets, ["t"], kernels=False).splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table if line.startswith("| ")}
    assert (
        rows["buildsys hipify + compat"] == "| buildsys hipify + compat | 2/3 (67%) | 3/3 | 2/3 |"
    )
    assert rows["hipify-perl"] == "| hipify-perl | 2/3 (67%) | 2/3 | 2/3 |"
    assert rows["hand ports (the project's own HIP)"] == (
        "| hand ports (the project's own HIP) | 1/2 (50%) | 1/2 | 1/2 |"
    )
    by_file = {line.split(" | ")[1]: line for line in table if line.count(" | ") >= 8}
    assert by_file["a-cuda/main.cu"].endswith("| 1/2 |  | 2/2 |  | 2/2 |  |")
    assert by_file["b-cuda/main.cu"].endswith("| 0/2 |  | 0/2 | `host: x` |")
    assert by_file["lib.cu"].endswith("| - |  |")
    # saved results keep the hand port, and results saved before it existed still read
    saved = tmp_path / "results.jsonl"
    old = asdict(results[3])
    del old["hand"]
    saved.write_text("\n".join(json.dumps(x) for x in (asdict(results[0]), old)) + "\n")
    again = read_results(saved)
    assert again[0].hand == both and again[1].hand is None
    assert markdown(results[3:], targets, ["t"], kernels=False).count("hand port") == 0
