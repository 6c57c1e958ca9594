"""A module folder of several translation units (examples/vecops/kernel_sources/dot: two .cu files,
one calling a device function the other defines, each with a static kernel of the same name)
device-linked into one image per target: every kernel on every vendor, the two static ones named
after their units, no embedded source; a definition no unit provides fails at the link; PTX is refused
before anything compiles."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from builder_env import builder_env

from buildsys import REPO_ROOT
from buildsys.demangling import without_inline_namespaces
from buildsys.index_writer import read_index

EXAMPLE = REPO_ROOT / "examples" / "vecops"
# Written by hand from examples/vecops/kernel_sources/dot: extern "C" dot_f32 and sumsq_f32, the
# template instance scale<float> (instantiated in both units), each unit's static clear.
DOT_KERNELS = ["clear@dot.cu", "clear@norm.cu", "dot_f32", "scale<float>", "sumsq_f32"]


def _dot_project(tmp_path: Path) -> Path:
    """vecops with the dot module only."""
    project = tmp_path / "vecops"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "dist"))
    for module in ("axpy", "elementwise"):
        shutil.rmtree(project / "kernel_sources" / module)
    return project


def _build(
    project: Path, targets: str, *, cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = builder_env()
    argv = [sys.executable, "-m", "buildsys", "build", "--project", str(project)]
    argv += ["--targets", targets, "--out", str(project / "out"), "--jobs", "2"]
    argv += ["--cache-dir", str(cache)] if cache is not None else []
    return subprocess.run(argv, cwd=project, capture_output=True, text=True, env=env)


def test_a_ptx_target_of_a_linked_module_is_refused_before_compiling(tmp_path: Path) -> None:
    project = _dot_project(tmp_path)
    (project / "arch_matrix.toml").write_text(
        '[nvidia]\ntargets = ["sm_90"]\nptx = ["compute_80"]\n'
    )
    result = _build(project, "compute_80")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        "error: module dot: its 2 translation units (dot/dot.cu, dot/norm.cu) are device-linked"
    )
    assert "PTX (compute_80) cannot be linked ahead of time" in line


@pytest.mark.parametrize(
    "target",
    [
        pytest.param("gfx942", marks=pytest.mark.toolchain),
        pytest.param("sm_90", marks=[pytest.mark.toolchain, pytest.mark.nvcc]),
    ],
)
def test_a_linked_module_is_one_image_with_every_units_kernels(tmp_path: Path, target: str) -> None:
    project = _dot_project(tmp_path)
    result = _build(project, target, cache=tmp_path / "cache")  # compiled: its steps reported
    assert result.returncode == 0, result.stderr[-3000:]
    index = read_index((project / "out" / "_index.py").read_text())
    dot = index["modules"]["dot"]
    assert sorted(dot["kernels"]) == DOT_KERNELS
    (image,) = dot["images"]
    assert (image["target"], sorted(image["symbols"])) == (target, DOT_KERNELS)
    assert image["symbols"]["scale<float>"] == "_Z5scaleIfEvPT_S0_j"
    # no source for run-time compilation: no compiler links units at run time
    assert (dot["source"], dot["source_sha256"]) == ("", "")
    assert sorted(p.suffix for p in (project / "out" / "device").iterdir()) == [
        ".hsaco" if target.startswith("gfx") else ".cubin"
    ]
    # the linked job's steps, as they happen (CI mode: plain lines on stderr, in this order)
    label = f"build: dot {target}: "
    steps = [line.removeprefix(label) for line in result.stderr.splitlines() if label in line]
    assert steps[0] == "compiling its 2 units side by side (dot.cu, norm.cu)", steps
    units = [re.fullmatch(r"unit (\S+) compiled \((\d)/2, \d+ s\)", line) for line in steps[1:3]]
    assert [(m[1], m[2]) if m else line for m, line in zip(units, steps[1:3], strict=True)] in (
        [("dot.cu", "1"), ("norm.cu", "2")],
        [("norm.cu", "1"), ("dot.cu", "2")],
    )
    linker = "clang's LTO link (lld)" if target.startswith("gfx") else "nvlink"
    assert steps[3].startswith(f"linking its 2 units into one image with {linker}: "), steps
    assert len(steps) == 4, steps

    # without dot_term's definition the link fails, naming the step
    source = project / "kernel_sources" / "dot" / "dot.cu"
    text = source.read_text()
    source.write_text(
        text.replace("__device__ float dot_term(float x, float y) { return x * y; }", "")
    )
    broken = _build(project, target)
    assert broken.returncode == 1
    assert "link of the linked module dot:" in broken.stderr
    assert "dot_term" in broken.stderr


@pytest.mark.gpu
@pytest.mark.nvcc
def test_a_linked_modules_kernels_run_on_an_nvidia_gpu(tmp_path: Path) -> None:
    """The device-linked sm_90 cubin loads through the loader and its kernels, a unit's call into
    the other unit included, match float64 numpy on fresh random data."""
    import numpy as np
    import torch

    from kernelpack.loader.load import Loader

    project = _dot_project(tmp_path)
    result = _build(project, "sm_90")
    assert result.returncode == 0, result.stderr[-3000:]
    out = project / "out"
    dot = Loader(index=read_index((out / "_index.py").read_text()), root=out, fragments=list).load(
        "dot"
    )
    assert dot.image.startswith("sm_90 cubin")
    rng = np.random.default_rng()
    n = 100_003
    x_host = rng.standard_normal(n).astype(np.float32)
    y_host = rng.standard_normal(n).astype(np.float32)
    x, y = torch.from_numpy(x_host).cuda(), torch.from_numpy(y_host).cuda()
    blocks = (n + 255) // 256
    total = torch.zeros(1, device="cuda")
    dot.kernel("dot_f32").launch(blocks, 256, x, y, total, n)
    squares = torch.zeros(1, device="cuda")
    dot.kernel("sumsq_f32").launch(blocks, 256, x, squares, n)  # calls dot.cu's dot_term
    scaled = x.clone()
    dot.kernel("scale<float>").launch(blocks, 256, scaled, 0.75, n)
    torch.cuda.synchronize()
    wide_x, wide_y = x_host.astype(np.float64), y_host.astype(np.float64)
    np.testing.assert_allclose(total.item(), wide_x @ wide_y, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(squares.item(), wide_x @ wide_x, rtol=1e-4)
    np.testing.assert_allclose(scaled.cpu().numpy(), wide_x * 0.75, rtol=1e-6)


def test_cccls_versioned_inline_namespaces_are_not_part_of_a_kernels_name() -> None:
    """A thrust call in candle's moe/ brings CUB's scan kernels, whose demangled names carry the
    CUDA version and target (read off moe's sm_90 cubin): without them one name on every target."""
    assert without_inline_namespaces(
        "cub::CUB_300001_SM_900::detail::scan::DeviceScanKernel<cub::CUB_300001_SM_900::detail::"
        "scan::policy_hub<int, int, int, unsigned int, cuda::std::__4::plus<void> >::Policy1000, "
        "thrust::THRUST_300001_SM_900_NS::device_ptr<int const>, cub::CUB_300001_SM_800_900::"
        "NullType>"
    ) == (
        "cub::detail::scan::DeviceScanKernel<cub::detail::scan::policy_hub<int, int, int, "
        "unsigned int, cuda::std::plus<void> >::Policy1000, thrust::device_ptr<int const>, "
        "cub::NullType>"
    )
    assert without_inline_namespaces("ns::CUB_like<float>") == "ns::CUB_like<float>"


@pytest.mark.toolchain
@pytest.mark.nvcc
def test_shards_of_a_linked_module_merge_into_the_direct_builds_output(tmp_path: Path) -> None:
    """A linked module's index names no source, so merge takes its sources' hash from the shards
    (which must agree) and writes what one build of both targets writes."""
    project = _dot_project(tmp_path)
    (project / "arch_matrix.toml").write_text(
        '[amd]\ntargets = ["gfx942"]\n[nvidia]\ntargets = ["sm_90"]\n'
    )
    env = builder_env()

    def buildsys(*argv: str) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "buildsys", *argv, "--project", str(project)],
            cwd=project,
            capture_output=True,
            text=True,
            env=env,
        )
        assert result.returncode == 0, result.stderr[-3000:]

    for target in ("sm_90", "gfx942"):
        buildsys("build", "--targets", target, "--out", f"shards/{target}")
    buildsys("merge", "--out", "merged", "shards/sm_90", "shards/gfx942")
    buildsys("build", "--out", "direct")
    merged, direct = project / "merged", project / "direct"
    assert sorted(p.relative_to(merged) for p in merged.rglob("*")) == sorted(
        p.relative_to(direct) for p in direct.rglob("*")
    )
    for path in direct.rglob("*"):
        if path.is_file():
            assert (merged / path.relative_to(direct)).read_bytes() == path.read_bytes(), path


def test_a_one_file_jobs_cache_key_is_its_one_command_and_source() -> None:
    """Linked modules left one-file jobs' cache keys as they were (compiler, the one command with
    placeholder paths, the source), so objects cached before them stay valid."""
    from buildsys.cache import key_of
    from buildsys.jobs import Job, compile_argv
    from buildsys.matrix import load_matrix
    from buildsys.modules import KernelModule
    from buildsys.scheduler import JobPlan, job_key
    from kernelpack.loader.images import IMAGE_KINDS

    class Trees:
        def dependency_hash(self, tree: str, path: str) -> str:
            return f"hash of {path}"

    class Toolchain:
        identity = "cuda:nvcc:13.0:native"

    flags = {kind.name: kind.compile_flags for kind in IMAGE_KINDS}
    targets = load_matrix(REPO_ROOT / "arch_matrix.toml").targets
    amd = next(t for t in targets if t.kind == "code_object")
    cubin = next(t for t in targets if t.kind == "cubin")
    for target in (amd, cubin):
        job = Job(KernelModule("m", "m/m.cu"), target)
        plan = JobPlan(flags, lambda j: ["-DX"], {target.kind: Toolchain()}, 1, False)  # type: ignore[dict-item]
        argv = compile_argv(job, flags[target.kind], ["-DX"], "OUT", "DEPS")
        expected = {
            "compiler": Toolchain.identity,
            "argv": argv,
            "source": job.source,
            "source_sha256": f"hash of {job.source}",
        }
        assert job_key(job, plan, Trees()) == key_of(expected)  # type: ignore[arg-type]


def test_a_long_link_is_said_to_be_running_until_it_ends() -> None:
    """The heartbeat of a link (LINK_HEARTBEAT_S: 5 minutes in a build), here every 10 ms: lines
    while the body runs, none once it has ended."""
    from buildsys.jobs import Job
    from buildsys.matrix import MatrixTarget
    from buildsys.modules import KernelModule
    from buildsys.scheduler import still

    said: list[tuple[str, str]] = []
    target = MatrixTarget("amd", "gfx942", "code_object", "gfx942")
    job = Job(KernelModule("dot", "dot/dot.cu", ("dot/norm.cu",)), target)
    beat = threading.Event()

    def report(reported: Job, text: str) -> None:
        said.append((reported.label, text))
        beat.set()

    with still(report, job, "linking its 2 units", 0.01):
        assert beat.wait(60)  # the first line comes while the body runs
    after = len(said)
    time.sleep(0.05)
    assert len(said) == after >= 1
    assert set(said) == {("dot gfx942", "still linking its 2 units (0 min)")}
