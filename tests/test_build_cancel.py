"""A device-linked module's units stop together: SIGINT kills the running compilers and starts no
other unit, and the first unit that fails stops its siblings (the link cannot happen without it).
Real nvcc runs on a module of eight units, one compiler at a time (``--jobs 1``)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from builder_env import builder_env, interruptible

UNITS = 8
# A unit that takes nvcc a moment: a few template instantiations of an unrolled loop.
UNIT = """
template <int N> __device__ float poly(float x) {{
  float y = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) y = y * x + (float)(i % 7);
  return y;
}}
__global__ void unit{n}(float* y, const float* x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = poly<64>(x[i]) + poly<96>(x[i] * 0.5f) + poly<128>(x[i] * 0.25f);
}}
"""


def _project(root: Path, *, broken: bool) -> Path:
    module = root / "kernel_sources" / "many"
    module.mkdir(parents=True)
    for n in range(UNITS):
        (module / f"u{n}.cu").write_text(UNIT.format(n=n))
    if broken:  # sorted first: the first unit to take the one compiler slot
        (module / "a_broken.cu").write_text("__global__ void broken(float* y) { y[0] = ; }\n")
    (root / "arch_matrix.toml").write_text('[nvidia]\ntargets = ["sm_90"]\n')
    (root / "pyproject.toml").write_text(
        '[project]\nname = "many-units"\nversion = "0.1.0"\n\n[tool.kernelpack]\n'
    )
    return root


def _argv(project: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "buildsys",
        "build",
        "--project",
        str(project),
        "--targets",
        "sm_90",
        "--jobs",
        "1",
        "--out",
        str(project / "out"),
        "--cache-dir",
        str(project / "cache"),
    ]


def _compiled(stderr: str) -> list[str]:
    return re.findall(r"unit (\S+) compiled \(", stderr)


def _compilers_left(project: Path) -> list[str]:
    """Processes still running with the project's folder in their command line (nvcc, cicc)."""
    found = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if str(project) in line and "pytest" not in line]


@pytest.mark.nvcc
def test_the_first_failed_unit_stops_its_siblings(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", broken=True)
    result = subprocess.run(
        _argv(project), cwd=project, capture_output=True, text=True, env=builder_env()
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "a_broken.cu of the linked module many:" in result.stderr
    # the broken unit is among the first to take the one slot: the others after it never start
    assert len(_compiled(result.stderr)) < UNITS // 2, result.stderr[-3000:]
    assert "other unit(s) stopped: the link cannot happen" in result.stderr


@pytest.mark.nvcc
def test_sigint_stops_a_linked_modules_units_at_once(tmp_path: Path) -> None:
    project = _project(tmp_path / "p", broken=False)
    with subprocess.Popen(
        _argv(project),
        cwd=project,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=builder_env(),
        preexec_fn=interruptible,
    ) as process:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # plain lines (not a terminal): the signal after a unit
            seen.append(line)
            if _compiled(line):
                break
        else:
            pytest.fail("".join(seen))
        process.send_signal(signal.SIGINT)
        sent = time.monotonic()
        rest = process.stderr.read()
        status = process.wait(timeout=60)
        took = time.monotonic() - sent
    assert status == 130, "".join(seen) + rest
    assert rest.strip().splitlines()[-1] == "interrupted", rest
    # at most the unit that was finishing as the signal came; never the remaining six or seven
    assert len(_compiled(rest)) <= 1, rest
    assert took < 10, (took, rest)
    assert _compilers_left(project) == []
    assert not (project / "out" / "_index.py").exists()
