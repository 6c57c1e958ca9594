"""Cold builds are byte-identical: in two fresh caches, and from another checkout path.

Each build is ``python -m buildsys build`` as a user runs it, from a cold cache, for one target of
each vendor (gfx942, sm_90): nvcc's and hipcc's outputs are compared file for file, the index
with them. The compilers' temporary files stay inside the build (TMPDIR of the builder run names
a folder that must stay empty).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from build_project import snapshot
from builder_env import builder_env

from buildsys import REPO_ROOT

pytestmark = [pytest.mark.toolchain, pytest.mark.nvcc]

TARGETS = "gfx942,sm_90"
# What a checkout needs to build its own kernels: the builder, the runtime it imports the formats
# from, the project's table, matrix and sources.
CHECKOUT = ("buildsys", "wheels/kernelpack", "kernel_sources", "pyproject.toml", "arch_matrix.toml")


def cold_build(checkout: Path, work: Path) -> dict[str, bytes]:
    """A build of ``checkout``'s kernels into ``work``'s fresh cache and output folders."""
    tmp = work / "tmp"
    tmp.mkdir(parents=True)
    argv = [sys.executable, "-m", "buildsys", "build", "--targets", TARGETS, "--jobs", "2"]
    argv += ["--cache-dir", str(work / "cache"), "--out", str(work / "out")]
    argv += ["--package-version", "1.2.3"]
    env = builder_env(TMPDIR=str(tmp))
    env["PYTHONPATH"] = f"{checkout}:{checkout / 'wheels'}"
    run = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(p.name for p in tmp.iterdir()) == []  # nothing left in the system's TMPDIR
    return snapshot(work / "out")


def copy_checkout(to: Path) -> Path:
    for part in CHECKOUT:
        source = REPO_ROOT / part
        if source.is_dir():
            shutil.copytree(source, to / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (to / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / part)
    return to


def test_cold_builds_are_identical_in_fresh_caches_and_other_checkouts(tmp_path: Path) -> None:
    first = cold_build(REPO_ROOT, tmp_path / "one")
    second = cold_build(REPO_ROOT, tmp_path / "two")
    elsewhere = copy_checkout(tmp_path / "another" / "checkout path")
    third = cold_build(elsewhere, tmp_path / "three")
    images = {
        f"device/{m}.{suffix}" for m in ("mlp", "walk") for suffix in ("hsaco", "sm_90.cubin")
    }
    assert {"_index.py", *images} <= set(first)
    for other in (second, third):
        assert sorted(other) == sorted(first)
        differ = [name for name in first if other[name] != first[name]]
        assert differ == []
