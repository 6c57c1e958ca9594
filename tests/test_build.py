"""``python -m buildsys build`` with the real compilers: cache, failures, determinism, inspect.

Most tests build the two-module tree of build_project for two AMD targets and start from a copy of
one warm project, so each compiles only what it is about. One test builds the real kernel_sources
for the real arch_matrix.toml.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from build_project import AMD_TARGETS, Project, compiled, make_project, snapshot

from buildsys import REPO_ROOT
from buildsys.build import build
from buildsys.errors import ToolchainError
from buildsys.index_writer import read_index
from buildsys.matrix import load_matrix
from buildsys.modules import read_tree
from buildsys.report import failure_error
from buildsys.settings import FLAGS, BuildSettings
from buildsys.toolchain import Toolchain, cuda_toolchain
from kernelpack.formats import read_bundle
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import tuning as mlp_tuning

# The device the counted expectations are for: an sm_90 GPU of 132 SMs (the H100's and H200's).
H200 = mlp_geometry.DeviceFacts("sm_90", 132)
SMS = H200.multiprocessors

ALL_JOBS = {(m, t) for m in ("other", "tiny") for t in AMD_TARGETS}
# The kernels of kernel_sources/, written out by hand from the kernel-name rule (docs/loader.md):
# what the build must discover in every object.
MLP_FORWARD = ("swiglu", "silu_and_mul", "rms_norm", "add_rms_norm")
MLP_FORWARD += ("rms_norm_short", "add_rms_norm_short")
MLP_OPS = (*MLP_FORWARD, "swiglu_backward", "silu_and_mul_backward", "rms_norm_backward")
MLP_OPS += ("rms_norm_backward_short", "rms_norm_weight_grad")
# The exact forms, each with a 16-byte _streaming form; also templated on the vector's bytes, the
# forwards on 8 and 16, the backwards on 8 alone.
MLP_EXACT_VECTORS = {
    "swiglu_exact": (8, 16),
    "silu_and_mul_exact": (8, 16),
    "swiglu_backward_exact": (8,),
    "silu_and_mul_backward_exact": (8,),
}
MLP_TYPES = ("float", "__half", "__nv_bfloat16")
MLP_FIXED = (
    "rms_norm_fixed",
    "rms_norm_fixed_full",
    "add_rms_norm_fixed",
    "add_rms_norm_fixed_full",
)  # and on the length
MLP_OPTION_WEIGHTS = (
    ("float", "float"),
    ("__half", "__half"),
    ("__half", "float"),
    ("__nv_bfloat16", "__nv_bfloat16"),
    ("__nv_bfloat16", "float"),
)
# walk.cu's register walks: residues D <= 4 (D <= 2 for m = 4), float64 D <= 4, 3, 1 for m = 2, 3, 4
RESIDUE_DEGREES = {2: 4, 3: 4, 4: 2}
FLOAT_DEGREES = {2: 4, 3: 3, 4: 1}
REAL_KERNELS = {
    "mlp": [
        *(f"mlp::{op}<{t}>" for op in MLP_OPS for t in MLP_TYPES),
        *(
            f"mlp::{op}<{t}, {b}>"
            for op, vectors in MLP_EXACT_VECTORS.items()
            for t in MLP_TYPES
            for b in vectors
        ),
        *(f"mlp::{op}_streaming<{t}>" for op in MLP_EXACT_VECTORS for t in MLP_TYPES),
        *(
            f"mlp::{op}<{t}, {c}>"
            for op in MLP_FIXED
            for t in MLP_TYPES
            for c in (4096, 5120, 8192)
        ),
        *(f"mlp::rms_norm_backward_fixed<{t}, 4096>" for t in MLP_TYPES),
        *(f"mlp::rms_norm_backward_fixed<{t}, 8192>" for t in ("__half", "__nv_bfloat16")),
        *(f"mlp::rms_norm_weight_grad_inputs<{t}>" for t in ("__half", "__nv_bfloat16")),
        # the options (issue 47): rows' type, weight's type (its own or float), casting mode
        *(
            f"mlp::{op}<{t}, {w}, {mode}>"
            for op in ("rms_norm_options", "add_rms_norm_options")
            for t, w in MLP_OPTION_WEIGHTS
            for mode in (0, 1, 2)
        ),
        *(f"mlp::rms_norm_options_backward<{t}, {w}>" for t, w in MLP_OPTION_WEIGHTS),
        *(
            f"mlp::{op}<{t}>"
            for op in ("swiglu_scaled", "swiglu_scaled_backward", "silu_and_mul_as_torch")
            for t in MLP_TYPES
        ),
    ],
    "walk": [
        *(f"walk_residues<{m}>" for m in (2, 3, 4)),
        *(f"walk_float<{m}>" for m in (2, 3, 4)),
        *(
            f"walk_registers<{m}, {d}>"
            for m, top in RESIDUE_DEGREES.items()
            for d in range(1, top + 1)
        ),
        *(
            f"walk_float_registers<{m}, {d}>"
            for m, top in FLOAT_DEGREES.items()
            for d in range(1, top + 1)
        ),
        *(
            f"walk_{name}"
            for name in ("bounds", "select_hits", "select_histogram", "select_pick", "select_top")
        ),
    ],
}


def expected_wavefront(target: str) -> int:
    """AMD's rule, written out independently of kernelpack.targets: gfx9 is wave64, RDNA wave32."""
    processor = target.split(":")[0]
    return 64 if processor.startswith("gfx9") else 32


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m`` of the tree's buildsys or kernelpack, as a user runs them."""
    path = os.pathsep.join([str(REPO_ROOT / "wheels"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory, amd_toolchain: Toolchain) -> Project:
    project = make_project(tmp_path_factory.mktemp("warm"))
    result = project.build()
    assert compiled(result) == ALL_JOBS
    return project


@pytest.fixture
def project(warm: Project, tmp_path: Path) -> Project:
    return warm.copy(tmp_path / "project")


pytestmark = pytest.mark.toolchain


def test_noop_rebuild_compiles_nothing_and_touches_nothing(project: Project) -> None:
    before = {p: p.stat().st_mtime_ns for p in project.settings.out.rglob("*") if p.is_file()}
    contents = snapshot(project.settings.out)
    result = project.build()
    assert compiled(result) == set()
    assert result.count("cached") == len(ALL_JOBS)
    assert snapshot(project.settings.out) == contents
    assert {p: p.stat().st_mtime_ns for p in before} == before


def test_editing_one_source_recompiles_only_its_module(project: Project) -> None:
    source = (project.settings.sources / "other/other.cu").read_text()
    project.write("other/other.cu", source.replace("1.0f", "3.0f"))
    result = project.build()
    assert compiled(result) == {("other", t) for t in AMD_TARGETS}
    index = read_index((project.settings.out / "_index.py").read_text())
    assert "3.0f" in (project.settings.out / index["modules"]["other"]["source"]).read_text()


def test_editing_a_header_recompiles_the_modules_that_include_it(project: Project) -> None:
    project.write("include/common.cuh", "#pragma once\n#define SCALE 4.0f\n")
    assert compiled(project.build()) == {("tiny", t) for t in AMD_TARGETS}
    project.write("include/common.cuh", "#pragma once\n#define SCALE 2.0f\n")
    assert compiled(project.build()) == set()  # the earlier objects are still in the cache


def test_changed_flags_recompile(project: Project) -> None:
    flags = {**FLAGS, "code_object": (*FLAGS["code_object"], "-DKERNELPACK_TEST=1")}
    result = project.build(flags=flags, targets=("gfx1100",))  # one target keeps it short
    assert compiled(result) == {("other", "gfx1100"), ("tiny", "gfx1100")}
    index = read_index((project.settings.out / "_index.py").read_text())
    assert "-DKERNELPACK_TEST=1" in index["build"]["flags"]["code_object"]


def test_another_toolchain_recompiles(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler of another version (here: the same compiler under another version string)
    must not reuse objects made by the first."""
    from buildsys.toolchain import amd_toolchain

    def other_version(*, targets: list[str], provision: bool) -> Toolchain:
        toolchain = amd_toolchain(targets=targets, provision=provision)
        return dataclasses.replace(toolchain, version=toolchain.version + " (patched)")

    monkeypatch.setattr("buildsys.build.amd_toolchain", other_version)
    result = project.build(targets=("gfx1100",))  # one target keeps it short
    assert compiled(result) == {("other", "gfx1100"), ("tiny", "gfx1100")}


BROKEN = 'extern "C" __global__ void broken(float* y) {\n  y[0] = undeclared_name;\n}\n'


def test_a_compile_error_names_module_target_and_message(project: Project) -> None:
    before = snapshot(project.settings.out)
    project.write("broken/broken.cu", BROKEN)
    result = project.build(jobs=1)
    failed = [o for o in result.outcomes if o.status == "failed"]
    assert failed and all(o.job.module.name == "broken" for o in failed)
    assert result.count("not run") > 0  # stopped after the first failure
    message = str(failure_error(result))
    assert f"broken {failed[0].job.target.target}:" in message
    assert "undeclared_name" in message
    assert snapshot(project.settings.out) == before  # nothing written: no silent drop

    cli = run_cli(
        "buildsys",
        "build",
        "--sources",
        str(project.settings.sources),
        "--matrix",
        str(project.settings.matrix),
        "--out",
        str(project.root / "cli-out"),
        "--cache-dir",
        str(project.settings.cache_dir),
        "--jobs",
        "1",
    )
    assert cli.returncode == 1, cli.stderr
    assert "error:" in cli.stderr and "undeclared_name" in cli.stderr
    assert "broken gfx" in cli.stderr


def test_keep_going_builds_the_rest_and_the_cache_keeps_it(project: Project) -> None:
    project.write("broken/broken.cu", BROKEN)
    project.write(
        "other/other.cu", (project.settings.sources / "other/other.cu").read_text() + "\n"
    )
    result = project.build(keep_going=True)
    assert result.count("not run") == 0
    assert {o.job.module.name for o in result.outcomes if o.status == "failed"} == {"broken"}
    assert compiled(result) == {("other", t) for t in AMD_TARGETS}
    (project.settings.sources / "broken/broken.cu").unlink()
    (project.settings.sources / "broken").rmdir()
    assert compiled(project.build()) == set()


def test_a_target_the_toolchain_cannot_build_is_an_error(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No AMD target of the table is unbuildable by LLVM 21, so one is declared unbuildable."""
    real = Toolchain.buildable

    def without_gfx1100(self: Toolchain, targets: list[str]) -> dict[str, bool]:
        return {t: ok and t != "gfx1100" for t, ok in real(self, targets).items()}

    monkeypatch.setattr(Toolchain, "buildable", without_gfx1100)
    before = snapshot(project.settings.out)
    with pytest.raises(ToolchainError, match=r"cannot build gfx1100"):
        project.build()
    assert snapshot(project.settings.out) == before


def test_two_builds_from_two_places_are_byte_identical(
    warm: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other source folder, other cache, other output, one job at a time: the same bytes."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    other = make_project(tmp_path / "elsewhere" / "deeper")
    other.build(jobs=1)
    warm.build()  # cached: rewrites nothing, but applies SOURCE_DATE_EPOCH
    assert snapshot(other.settings.out) == snapshot(warm.settings.out)
    assert {p.stat().st_mtime for p in other.settings.out.rglob("*") if p.is_file()} == {1700000000}
    index_text = (other.settings.out / "_index.py").read_text()
    assert str(tmp_path) not in index_text and os.environ.get("USER", "@@") not in index_text


def test_two_builds_at_once_on_one_cache(tmp_path: Path, amd_toolchain: Toolchain) -> None:
    project = make_project(tmp_path, matrix='[amd]\ntargets = ["gfx90a"]\n')
    argv = [
        sys.executable,
        "-m",
        "buildsys",
        "build",
        "--sources",
        str(project.settings.sources),
        "--matrix",
        str(project.settings.matrix),
        "--cache-dir",
        str(project.settings.cache_dir),
        "--jobs",
        "1",
    ]
    runs = [
        subprocess.Popen(
            [*argv, "--out", str(tmp_path / f"out{i}")],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for run in runs:
        _, stderr = run.communicate()
        assert run.returncode == 0, stderr
    assert snapshot(tmp_path / "out0") == snapshot(tmp_path / "out1")
    assert compiled(project.build(out=tmp_path / "out2")) == set()


def inspect_json(path: Path) -> dict[str, object]:
    result = run_cli("kernelpack", "inspect", "--json", str(path))
    assert result.returncode == 0, result.stderr
    report: dict[str, object] = json.loads(result.stdout)
    return report


def check_bundles(out: Path, amd_targets: list[str]) -> None:
    """Each module's bundle, as `kernelpack inspect` reads it, holds every AMD target with the
    module's kernels at the right wavefront, and the index locates each image in it."""
    index = read_index((out / "_index.py").read_text())
    for name, module in index["modules"].items():
        report = inspect_json(out / "device" / f"{name}.hsaco")
        entries = report["entries"]
        assert isinstance(entries, list)
        by_target = {e["image"]["target"]: e for e in entries if e["image"] is not None}
        assert sorted(by_target) == sorted(amd_targets), name
        plain = {
            e.target: e for e in read_bundle((out / "device" / f"{name}.hsaco").read_bytes(), name)
        }
        for target, entry in by_target.items():
            image = next(i for i in module["images"] if i["target"] == target)
            # inspect names the object's symbols; the index maps each kernel's name to them
            kernels = {k["name"]: k for k in entry["image"]["kernels"]}
            assert sorted(image["symbols"]) == sorted(module["kernels"]), (name, target)
            assert sorted(kernels) == sorted(image["symbols"].values()), (name, target)
            assert {k["wavefront"] for k in kernels.values()} == {expected_wavefront(target)}
            assert (image["offset"], image["size"]) == (entry["offset"], entry["size"])
            data = plain[target].data
            assert hashlib.sha256(data).hexdigest() == image["sha256"]


def test_inspect_lists_every_target_with_its_wavefront(warm: Project) -> None:
    check_bundles(warm.settings.out, list(AMD_TARGETS))


def test_uncompressed_bundles_read_back_by_clang_offload_bundler(
    project: Project, amd_toolchain: Toolchain
) -> None:
    out = project.root / "plain"
    assert compiled(project.build(out=out, compress=False)) == set()
    bundle = out / "device" / "tiny.hsaco"
    assert bundle.read_bytes().startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    bundler = amd_toolchain.tool("clang-offload-bundler")
    listed = amd_toolchain.run([bundler, "--list", "--type=o", f"--input={bundle}"], cwd=out)
    ids = sorted(listed.stdout.split())
    assert ids == sorted(
        ["host-x86_64-unknown-linux-gnu-"] + [f"hipv4-amdgcn-amd-amdhsa--{t}" for t in AMD_TARGETS]
    )
    index = read_index((out / "_index.py").read_text())
    for image in index["modules"]["tiny"]["images"]:
        extracted = out / f"{image['target']}.co"
        amd_toolchain.run(
            [
                bundler,
                "--unbundle",
                "--type=o",
                f"--input={bundle}",
                f"--output={extracted}",
                f"--targets=hipv4-amdgcn-amd-amdhsa--{image['target']}",
            ],
            cwd=out,
        )
        assert hashlib.sha256(extracted.read_bytes()).hexdigest() == image["sha256"]


def test_real_sources_build_for_the_default_matrix(
    tmp_path: Path, amd_toolchain: Toolchain
) -> None:
    """The project's own kernel_sources for arch_matrix.toml, from a cold cache (nvcc targets
    too where nvcc is installed)."""
    settings = BuildSettings(out=tmp_path / "out", cache_dir=tmp_path / "cache")
    if cuda_toolchain() is None:
        settings = dataclasses.replace(settings, vendor="amd")
    result = build(settings, progress=False)
    assert result.count("compiled") == len(result.outcomes), failure_error(result)
    matrix = load_matrix()
    _, modules = read_tree(settings.sources)
    index = read_index((settings.out / "_index.py").read_text())
    assert sorted(index["modules"]) == sorted(m.name for m in modules)
    for module in modules:
        kernels = index["modules"][module.name]["kernels"]
        assert sorted(kernels) == sorted(REAL_KERNELS[module.name])
        for image in index["modules"][module.name]["images"]:
            assert sorted(image["symbols"]) == sorted(kernels)  # every kernel on every target
        targets = sorted(i["target"] for i in index["modules"][module.name]["images"])
        wanted = [t.target for t in matrix.targets if settings.vendor in (None, t.vendor)]
        assert targets == sorted(wanted)
    check_bundles(settings.out, [t.target for t in matrix.amd])
    assert spilled_kernels(index) == []
    for image in index["modules"]["mlp"]["images"]:
        backward = image["kernels"]["mlp::rms_norm_backward<float>"]
        if image["vendor"] == "amd" or image["target"].startswith("sm_"):  # PTX has no bound
            bound = mlp_tuning.family(image["target"]).backward_threads_max
            assert backward["max_workgroup"] >= bound, (image["target"], backward)
        fixed = {
            name: resources
            for name, resources in image["kernels"].items()
            if name.split("<")[0].removeprefix("mlp::") in MLP_FIXED
        }
        assert len(fixed) == len(MLP_FIXED) * len(MLP_TYPES) * len(mlp_geometry.FIXED_COLUMNS)
        spilled = {name: resources for name, resources in fixed.items() if resources["spills"]}
        # HIP reads __launch_bounds__'s second argument as waves a SIMD: the fixed forms' bound
        # for NVIDIA made gfx9-generic spill (mlp.cu kBoundCountsBlocks)
        assert not spilled, (image["target"], spilled)
        if image["target"] == "sm_90":
            check_general_norms_share_an_sm(image["kernels"])
            check_fixed_norms_fill_an_sm(image["kernels"])


def spilled_kernels(index: dict[str, Any]) -> list[tuple[str, str, str, int]]:
    """(module, target, kernel, count) of every kernel of every image of the index that spills:
    on AMD its SGPR and VGPR spill counts (the code object's .sgpr_spill_count and
    .vgpr_spill_count, which the index sums); a cubin records no spill count, so on NVIDIA its
    local memory a thread (EIATTR_MIN_STACK_SIZE, the index's scratch), which is where ptxas
    spills, and which no kernel of mlp.cu or walk.cu takes otherwise (no local arrays, no calls
    through a stack). PTX images record neither."""
    found = []
    for name, module in sorted(index["modules"].items()):
        for image in module["images"]:
            field = "spills" if image["vendor"] == "amd" else "scratch"
            for kernel, resources in sorted(image["kernels"].items()):
                if resources[field]:
                    found.append((name, image["target"], kernel, resources[field]))
    return found


def test_spilled_kernels_names_each_spill_of_each_vendor() -> None:
    """By hand: an AMD kernel with SGPR spills, a cubin's with local memory, and the fields that
    mean nothing on each vendor (scratch on AMD without spills: an array indexed at run time)."""
    quiet = {"spills": 0, "scratch": 0}
    index = {
        "modules": {
            "mlp": {
                "images": [
                    {
                        "vendor": "amd",
                        "target": "gfx942",
                        "kernels": {"a": {"spills": 1, "scratch": 0}, "b": quiet},
                    },
                    {
                        "vendor": "amd",
                        "target": "gfx1100",
                        "kernels": {"a": {"spills": 0, "scratch": 64}},
                    },
                    {
                        "vendor": "nvidia",
                        "target": "sm_90",
                        "kernels": {"a": {"spills": 0, "scratch": 16}, "b": quiet},
                    },
                ]
            },
            "walk": {"images": [{"vendor": "nvidia", "target": "sm_80", "kernels": {"w": quiet}}]},
        }
    }
    assert spilled_kernels(index) == [("mlp", "gfx942", "a", 1), ("mlp", "sm_90", "a", 16)]


# An sm_90 multiprocessor's registers, the unit a warp's are allocated in (32 lanes of 8), the
# sub-partitions its registers are split among (a warp's all in one) and its resident threads:
# the CUDA C++ Programming Guide's table for compute capability 9.0, and its occupancy calculator.
SM90_REGISTERS = 65_536
SM90_WARP_REGISTER_UNIT = 256
SM90_SUB_PARTITIONS = 4
SM90_THREADS = 2048


def sm90_resident_threads(registers: int, block_threads: int) -> int:
    """Threads of blocks of ``block_threads`` an sm_90 SM holds at once, as their registers allow
    (the only limit these kernels meet: their shared memory is a few slots). Warps fit each
    sub-partition's registers whole: 40 registers a thread let 12 warps into each of the four, 48
    in all, so four blocks of 320 threads, not the five the SM's total would hold (as the
    driver's cuOccupancyMaxActiveBlocksPerMultiprocessor says on sm_90)."""
    per_warp = -(-registers * 32 // SM90_WARP_REGISTER_UNIT) * SM90_WARP_REGISTER_UNIT
    warps = SM90_REGISTERS // SM90_SUB_PARTITIONS // per_warp * SM90_SUB_PARTITIONS
    blocks = warps // (block_threads // 32)
    return min(blocks * block_threads, SM90_THREADS // block_threads * block_threads)


def check_general_norms_share_an_sm(kernels: dict[str, dict[str, int]]) -> None:
    """The general forward norms at the block of rows of 8192 columns (the fixed-length
    kernels' rows; the general kernels' for 7168 and other lengths of as many threads) keep two
    512-thread blocks' worth of threads on an sm_90 SM, by their registers (ptxas's, read from
    the cubin) and the host's block: at half that the float32 kernel is a third slower, which a
    change anywhere in mlp.cu's includes can cause, and the 16-bit ones at three blocks were
    slower too (docs/bench-mlp-notes.md, "The forward norms"). No local memory, so no spill
    (spilled_kernels checks every kernel of every image)."""
    for dtype, kernel_type in mlp_geometry.KERNEL_TYPE.items():
        threads, rows_per_block = mlp_geometry.row_geometry(4096, 8192, dtype)[1]
        resources = kernels[f"mlp::rms_norm<{kernel_type}>"]
        resident = sm90_resident_threads(resources["registers"], threads * rows_per_block)
        assert resident >= 2 * mlp_geometry.ROW_BLOCK_MAX, (dtype, resources["registers"], resident)
        assert resources["scratch"] == 0, (dtype, resources)


def check_fixed_norms_fill_an_sm(kernels: dict[str, dict[str, int]]) -> None:
    """The fixed-length rms_norm for many rows (rms_norm_fixed_full) fills an sm_90 SM where a
    thread keeps FIXED_CHUNKS vectors (16-bit rows up to 8192, float32 up to 4096): at ptxas's own
    40 registers, three blocks of 512, it was slower than at 32 (docs/bench-mlp-notes.md, "The
    forward norms"). Elsewhere two blocks' worth of
    512 threads at least, as the general kernel's. (That no fixed kernel spills, on any target,
    the caller checks.)"""
    for dtype, kernel_type in mlp_geometry.KERNEL_TYPE.items():
        for cols in mlp_geometry.FIXED_COLUMNS:
            threads = mlp_geometry.fixed_threads(cols, dtype)
            resources = kernels[f"mlp::rms_norm_fixed_full<{kernel_type}, {cols}>"]
            resident = sm90_resident_threads(resources["registers"], threads)
            vectors = cols * mlp_geometry.ITEM_SIZE[dtype] // mlp_geometry.VECTOR_BYTES
            full = SM90_THREADS // threads * threads  # 1920 of 320-thread blocks (5120 16-bit)
            wanted = (
                full
                if threads * mlp_geometry.FIXED_CHUNKS == vectors
                else 2 * mlp_geometry.ROW_BLOCK_MAX
            )
            assert resident >= wanted, (dtype, cols, resources["registers"], resident)
