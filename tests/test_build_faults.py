"""Builds under faults and hostile conditions: reproducible cold builds, unusable paths, a killed
build, an output folder read while it is replaced, a closed pipe."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from build_project import TINY_SOURCES, make_project, matrix_text, snapshot
from test_build_cache import sample_package

from buildsys import REPO_ROOT
from buildsys.index_writer import INDEX_FILE, SHARD_FILE, read_index, write_output
from buildsys.trees import scratch_folder, scratch_root
from kernelpack.formats import read_bundle

# An anonymous-namespace kernel: nvcc names it after a hash of the source's absolute path.
INTERNAL_SOURCES = {
    **TINY_SOURCES,
    "other/other.cu": (
        "namespace { __global__ void hidden(float* y) { y[0] = 1.0f; } }\n"
        'extern "C" __global__ void add_one(float* y, long long n) {\n'
        "  long long i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) y[i] += 1.0f;\n"
        "}\n"
        "void* keep_hidden() { return (void*)hidden; }\n"
    ),
}


def buildsys(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "KERNELPACK_DEBUG"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=environ,
    )


@pytest.mark.nvcc
def test_two_cold_nvidia_builds_in_two_fresh_caches_are_byte_identical(tmp_path: Path) -> None:
    outputs = []
    for name in ("first", "second-place"):
        project = make_project(
            tmp_path / name, files=INTERNAL_SOURCES, matrix=matrix_text(amd=(), nvidia=True)
        )
        result = project.build(vendor="nvidia")
        assert result.count("compiled") == len(result.outcomes) == 4
        outputs.append(snapshot(project.settings.out))
    assert outputs[0] == outputs[1]
    ptx = outputs[0]["device/other.compute_80.ptx"].decode()
    assert "_GLOBAL__N__" in ptx  # the internal name is there, and the same in both


@pytest.mark.toolchain
def test_two_cold_amd_builds_in_two_fresh_caches_are_byte_identical(
    tmp_path: Path, amd_toolchain: object
) -> None:
    outputs = []
    for name in ("first", "second-place"):
        project = make_project(
            tmp_path / name, files=INTERNAL_SOURCES, matrix=matrix_text(("gfx90a",))
        )
        assert project.build().count("compiled") == 2
        outputs.append(snapshot(project.settings.out))
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--out", "/etc/passwd"], "/etc/passwd (--out"),
        (["--cache-dir", "/etc/passwd"], "/etc/passwd (--cache-dir"),
        (["--cache-dir", "/proc/kernelpack-cache"], "/proc/kernelpack-cache (--cache-dir"),
        (["--out", "/proc/kernelpack/out"], "/proc/kernelpack (--out"),
    ],
)
def test_an_unusable_path_is_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], named: str
) -> None:
    project = make_project(tmp_path)
    defaults = [
        "--sources",
        str(project.settings.sources),
        "--matrix",
        str(project.settings.matrix),
    ]
    defaults += ["--out", str(tmp_path / "out"), "--cache-dir", str(tmp_path / "cache")]
    result = buildsys("build", *defaults, *argv)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "DIR" in lines[0], result.stderr


@pytest.mark.parametrize("out", ["/etc/passwd", "/proc/kernelpack-hipify"])
def test_hipify_into_an_unusable_folder_is_one_line_and_exit_2(tmp_path: Path, out: str) -> None:
    source = tmp_path / "kernel.cu"
    source.write_text("__global__ void kernel() {}\n")
    result = buildsys("hipify", str(source), "-o", out)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{out} (-o)" in lines[0] and "-o DIR" in lines[0], result.stderr


def test_a_build_killed_with_sigkill_leaves_no_scratch_folder_behind(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from buildsys.trees import scratch_folder\n"
            "with scratch_folder(Path(sys.argv[1])) as f:\n"
            "    (f / 'x').write_text('y'); print(f, flush=True); time.sleep(60)\n",
            str(cache),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=f"{REPO_ROOT / 'wheels'}:{REPO_ROOT}"),
    )
    assert child.stdout is not None
    left = Path(child.stdout.readline().strip())
    assert left.is_dir() and left.parent == scratch_root(cache)
    with scratch_folder(cache) as mine:  # a live build's folder is never taken
        assert left.is_dir() and mine != left
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert left.is_dir()  # SIGKILL runs no clean-up ...
    with scratch_folder(cache):  # ... the next build removes it
        assert not left.exists()
    assert list(scratch_root(cache).iterdir()) == []


def test_readers_never_see_an_index_that_disagrees_with_its_images(tmp_path: Path) -> None:
    out = tmp_path / "out"
    files_a, index_a = sample_package(True)
    files_b, index_b = sample_package(False)  # other bundle bytes, the same file names
    write_output(out, files_a, index_a, shard={"targets": ["gfx90a"]})  # type: ignore[arg-type]
    stop = threading.Event()
    problems: list[str] = []
    samples: list[int] = []

    def read(folder: int, relative: str) -> bytes:
        handle = os.open(relative, os.O_RDONLY, dir_fd=folder)
        with os.fdopen(handle, "rb") as file:
            return file.read()

    def read_consistently() -> None:
        """Read the folder as one snapshot (every file through one handle of the folder), as a
        reader that opened it at one moment would."""
        while not stop.is_set():
            try:
                folder = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue  # a moment with no folder is allowed; a mixed one is not
            try:
                index = read_index(read(folder, INDEX_FILE).decode())
                bundle = read(folder, "device/tiny.hsaco")
                shard = SHARD_FILE in os.listdir(folder)
                # a folder replaced while it was read is being removed: files vanish from it,
                # and that reader would see them missing, not mixed; judge the current ones
                current = os.stat(out).st_ino == os.fstat(folder).st_ino
            except OSError:
                continue
            finally:
                os.close(folder)
            if not current:
                continue
            samples.append(1)
            compressed = index["modules"]["tiny"]["images"][0]["compression"] == "zstd"
            if compressed != bundle.startswith(b"CCOB"):
                problems.append("index and bundle from different builds")
            if shard != compressed:
                problems.append("a stale or missing shard.json")
            read_bundle(bundle, "tiny.hsaco")

    reader = threading.Thread(target=read_consistently)
    reader.start()
    deadline = time.monotonic() + 2.0
    flip = False
    while time.monotonic() < deadline:
        files, index, shard = (
            (files_b, index_b, None) if flip else (files_a, index_a, {"targets": ["gfx90a"]})
        )
        write_output(out, files, index, shard=shard)  # type: ignore[arg-type]
        flip = not flip
    stop.set()
    reader.join()
    assert problems == [] and len(samples) > 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder left


def test_json_into_a_closed_pipe_is_no_traceback() -> None:
    result = subprocess.run(
        f"{sys.executable} -m buildsys matrix --json | head -c 1",
        shell=True,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr


def test_both_command_lines_end_a_closed_pipe_alike() -> None:
    """141 (128 + SIGPIPE) from either command line when the reader has left (``true`` reads
    nothing and exits before the interpreter starts): a pipeline under ``set -o pipefail`` tells it
    from a failure of the work (1)."""
    for tool in ("buildsys matrix --json", "kernelpack targets --targets gfx942 --json"):
        result = subprocess.run(
            ["bash", "-o", "pipefail", "-c", f"{sys.executable} -m {tool} | true"],
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": f"{REPO_ROOT / 'wheels'}:{REPO_ROOT}"},
            capture_output=True,
            text=True,
        )
        assert (result.returncode, result.stderr) == (141, ""), (tool, result.stderr)


def test_provisioning_progress_goes_to_stderr_never_into_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`toolchain --provision --json` prints only JSON on stdout: debootstrap's progress is
    reported on stderr (here a stand-in command that prints as debootstrap does)."""
    from buildsys.toolchain.provision import _run_with_progress

    fake = [sys.executable, "-c", "print('I: Retrieving libc6'); print('I: Extracting libc6')"]
    _run_with_progress(fake, log=True, logfile=tmp_path / "debootstrap.log")
    captured = capsys.readouterr()
    assert captured.out == "" and "debootstrap: retrieving 1" in captured.err
    assert "I: Extracting libc6" in (tmp_path / "debootstrap.log").read_text()
