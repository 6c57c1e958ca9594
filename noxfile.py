"""kernelpack's sessions: `nox -l` lists them; `nox -s wheels` is the main job.

Dependencies come from pyproject.toml's dependency groups, never repeated here. Arguments after
`--` pass through to the command each session runs (`nox -s build -- --targets gfx942`).
"""

from __future__ import annotations

import logging
import os

import nox


def _not_uv_absent(record: logging.LogRecord) -> bool:
    """False for nox's "uv binary not found." line: these sessions use venv and pip, so uv's
    absence is no news, and a newcomer read it as an error to fix."""
    return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_not_uv_absent)
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]

PYPROJECT = nox.project.load_toml("pyproject.toml")


def _install_groups(session: nox.Session, *groups: str) -> None:
    """Install the dependency groups with pip's own output (a first install of the test group
    takes minutes: silence looks like a hang)."""
    requirements = [r for g in groups for r in nox.project.dependency_groups(PYPROJECT, g)]
    session.install(*requirements, silent=False)


@nox.session
def matrix(session: nox.Session) -> None:
    """Print arch_matrix.toml as a CI strategy matrix (JSON)."""
    _install_groups(session, "build")
    session.run("python", "-m", "buildsys", "matrix", "--json", *session.posargs)


@nox.session
def toolchain(session: nox.Session) -> None:
    """Find or provision the compilers and show which matrix targets each can build."""
    _install_groups(session, "build")
    session.run("python", "-m", "buildsys", "toolchain", "--provision", *session.posargs)


@nox.session
def build(session: nox.Session) -> None:
    """Build device code and the embedded index for the matrix (`-- --targets X` for one shard)."""
    _install_groups(session, "build")
    session.run("python", "-m", "buildsys", "build", "--provision", *session.posargs)


@nox.session
def wheels(session: nox.Session) -> None:
    """Build the fat wheel and the split host + device wheels into dist/ (the main job)."""
    _install_groups(session, "wheels")
    # Settings as for `pip wheel .`: [tool.kernelpack], then KERNELPACK_BUILD_*, then these.
    session.run("python", "-m", "buildsys", "wheels", "--provision", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the tests; compiler tests provision the toolchain, GPU tests skip without a GPU."""
    _install_groups(session, "test")
    session.run("pytest", *session.posargs)


# The processors the emulated suite runs (kernelpack.emulator.EMULATED_TARGETS).
EMULATED_TARGETS = "gfx942,gfx950,gfx1100,gfx1201"


@nox.session
def amd(session: nox.Session) -> None:
    """Run the emulated AMD suite (KERNELPACK_AMD_EMULATOR: a tinygrad checkout, docs/amd.md)."""
    if not os.environ.get("KERNELPACK_AMD_EMULATOR", "").strip():
        session.error(
            "KERNELPACK_AMD_EMULATOR is not set: point it at a checkout of "
            "https://github.com/tinygrad/tinygrad at the commit docs/amd.md names (the emulator "
            "also needs clang on PATH)"
        )
    _install_groups(session, "test")
    # the images the suite runs, into the package's folder as `nox -s build` puts them
    session.run("python", "-m", "buildsys", "build", "--provision", "--targets", EMULATED_TARGETS)
    session.run("pytest", "-m", "amd_emulator", "-s", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff and mypy over buildsys and kernelpack, zizmor over the CI workflows."""
    _install_groups(session, "lint")
    session.run("ruff", "check", "buildsys", "wheels", "tests", "bench", "noxfile.py")
    session.run("ruff", "format", "--check", "buildsys", "wheels", "tests", "bench", "noxfile.py")
    session.run("mypy", *session.posargs)
    # Offline: the audits that need GitHub's API (impostor commits, known-vulnerable actions)
    # are skipped; every action is pinned by commit with its tag beside it.
    session.run("zizmor", "--offline", "--min-severity", "medium", ".github/workflows/")


@nox.session
def bench(session: nox.Session) -> None:
    """CPU-side benchmarks (build speed, bundle and wheel sizes) writing their tables into docs/."""
    _install_groups(session, "test")
    session.run("python", "bench/bench_build.py", *session.posargs)
    session.run("python", "bench/bench_wheels.py")


@nox.session(python=False)
def gpu(session: nox.Session) -> None:
    """Everything GPU-side in one call (on the GPU machine): NVIDIA build, GPU tests, GPU benchmarks."""
    session.run("bash", "bench/gpu_all.sh", *session.posargs)
