"""The README's Quick start and command lines, as a newcomer on a stock Debian meets them.

Stock Debian's Python is externally managed (PEP 668) and has no ``python`` command, so the Quick
start makes a virtual environment itself and every documented command starts ``python3 -m``. A
Python without zstandard is told so in one line before any work, not after compiling.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import readme_commands
from packaging.requirements import Requirement
from test_project_trust import settings_of

from buildsys.packaging import metadata_text, project_metadata, runtime_requirement

REPO = Path(__file__).parents[1]
README = (REPO / "README.md").read_text()
OBJECTS = REPO / "tests" / "fixtures" / "objects"
# Run a module in a Python that cannot import zstandard, whatever is installed.
WITHOUT_ZSTANDARD = (
    "import runpy, sys; sys.modules['zstandard'] = None; module = sys.argv.pop(1); "
    "sys.argv[0] = module; runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert match is not None, title
    return match.group(1)


def _code_lines(text: str) -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_quick_start_is_two_command_lines_that_make_their_own_environment() -> None:
    lines = _code_lines(_section("Quick start"))
    assert len(lines) == 2
    first, second = lines
    assert first.startswith("python3 -m venv ") and "nox -s wheels" in first
    assert "nox -s tests" in second
    assert not re.search(r"(^|\s)(pip|python) ", " ".join(lines))  # no system-wide pip, no python


def test_documented_command_lines_start_with_python3() -> None:
    commands = [line for line in _code_lines(README) if re.match(r"python\d?(\.\d+)? ", line)]
    assert commands
    assert all(line.startswith("python3 -m ") for line in commands), commands


@pytest.mark.parametrize(
    "argv",
    [["build", "--out", "{out}"], ["merge", "{out}-shard", "--out", "{out}"]],
    ids=["build", "merge"],
)
def test_builder_without_zstandard_stops_before_any_work(tmp_path: Path, argv: list[str]) -> None:
    out = tmp_path / "out"
    command = [a.format(out=out) for a in argv]
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_ZSTANDARD, "buildsys", *command],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, ""), result.stderr[-3000:]
    assert result.stderr.count("\n") == 1
    assert (
        "the zstandard package is not installed" in result.stderr
        and "pip install zstandard" in result.stderr
    )
    assert not out.exists()


def test_inspect_without_zstandard_is_one_line() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            WITHOUT_ZSTANDARD,
            "kernelpack",
            "inspect",
            str(OBJECTS / "compressed.hipfb"),
        ],
        env={"PYTHONPATH": str(REPO / "wheels"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: the zstandard package is not installed")
    assert result.stderr.count("\n") == 1


def test_kernelpack_runs_from_a_checkout_as_documented(tmp_path: Path) -> None:
    """`PYTHONPATH=wheels python3 -m kernelpack ...` from the root, with a fresh HOME."""
    assert "PYTHONPATH=wheels python3 -m kernelpack" in README
    result = subprocess.run(
        f"PYTHONPATH=wheels {sys.executable} -m kernelpack inspect {OBJECTS / 'gfx90a.co'}",
        shell=True,
        cwd=REPO,
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "gfx90a, code object v6" in result.stdout


# Run a module in a Python that cannot import numpy (nor torch or CuPy), whatever is installed.
WITHOUT_NUMPY = WITHOUT_ZSTANDARD.replace(
    "sys.modules['zstandard'] = None",
    "sys.modules.update(dict.fromkeys(('numpy', 'torch', 'cupy')))",
)


@pytest.mark.parametrize(
    "argv",
    [
        ["detect"],
        ["detect", "--json"],
        ["info"],
        ["doctor"],
        ["targets", "--targets", "gfx1100,sm_90"],
        ["cache", "path"],
        ["inspect", str(OBJECTS / "gfx90a.co")],
        ["--help"],
        ["sweep", "run", "--help"],
    ],
    ids=lambda argv: " ".join(a for a in argv if "/" not in a),
)
def test_the_checkout_command_needs_only_rich_and_zstandard(
    tmp_path: Path, argv: list[str]
) -> None:
    """The README's `PYTHONPATH=wheels python3 -m kernelpack detect` on a Python with rich and
    zstandard only: every subcommand but a sweep's run imports no numpy (issue 50 item 8)."""
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_NUMPY, "kernelpack", *argv],
        env={
            "PYTHONPATH": str(REPO / "wheels"),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            "KERNELPACK_CACHE_DIR": str(tmp_path / "cache"),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode in (0, 1), result.stderr
    assert result.stdout


def test_wheel_time_without_git_is_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree without git (a tarball, a minimal Debian) gets the fixed time, not a traceback."""
    from buildsys.wheels import source_date_epoch

    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    assert source_date_epoch(tmp_path) == 315532800  # 1980-01-01, the earliest time a zip holds


def test_the_runtime_wheels_require_rich_for_the_command_lines_tables() -> None:
    """`pip install kernelpack` gives a terminal the rich tables (issue 50 item 9): the host
    wheel's METADATA, as the builder writes it from pyproject.toml, requires rich."""
    meta = project_metadata(settings_of(REPO))
    message = email.parser.Parser().parsestr(metadata_text(meta, runtime_requirement(meta)))
    required = [Requirement(r).name for r in message.get_all("Requires-Dist", [])]
    assert "rich" in required


# Quick start lines the test suite does not run, and why (each one the README has, by its text).
QUICK_START_NOT_RUN = {
    ".venv/bin/nox -s tests": "runs the whole test suite, this test among it (a recursion), and "
    "installs torch: CI runs that line as its own job; the first line's venv, nox and dist/ are "
    "checked here",
}


@pytest.mark.toolchain
@pytest.mark.network
def test_the_quick_starts_first_line_as_written_gives_the_wheels(quickstart_checkout: Path) -> None:
    """The README's first line, run by the quickstart_checkout fixture exactly as written in a
    fresh clone with a fresh HOME (one target through KERNELPACK_BUILD_TARGETS): dist/ holds the
    wheels the README and docs/wheels.md name, the local index links every one of them, and
    what the line made (.venv, .nox, dist) is git-ignored."""
    dist = quickstart_checkout / "dist"
    (builder,) = dist.glob("kernelpack_buildsys-*-py3-none-any.whl")
    version = builder.name.split("-")[1]
    platform = r"cp3\d+-abi3-manylinux[\w.]+"
    expected = [
        rf"kernelpack-{re.escape(version)}-0host-{platform}\.whl",  # the host wheel
        rf"kernelpack-{re.escape(version)}-{platform}-gfx942\.whl",  # the gfx942 variant
        rf"kernelpack-{re.escape(version)}-{platform}-null\.whl",  # the fat wheel
        rf"kernelpack-{re.escape(version)}-variants\.json",
        rf"kernelpack_buildsys-{re.escape(version)}-py3-none-any\.whl",
        rf"kernelpack_device_gfx942-{re.escape(version)}-py3-none-any\.whl",
        rf"kernelpack_variant_provider-{re.escape(version)}-py3-none-any\.whl",
        "simple",
    ]
    names = sorted(p.name for p in dist.iterdir() if p.name != ".kernelpack-dist.json")
    unmatched = [n for n in names if not any(re.fullmatch(e, n) for e in expected)]
    assert not unmatched and len(names) == len(expected), names
    linked = set()
    for page in (dist / "simple").glob("*/index.html"):
        linked |= set(re.findall(r'href="(?:\.\./)*([^"#/]+\.whl)', page.read_text()))
    wheels = {n for n in names if n.endswith(".whl")}
    assert linked and linked <= wheels, sorted(linked - wheels)
    ignored = subprocess.run(
        ["git", "check-ignore", ".venv", ".nox", "dist"],
        cwd=quickstart_checkout,
        capture_output=True,
        text=True,
    )
    assert ignored.stdout.split() == [".venv", ".nox", "dist"]


@pytest.mark.parametrize("line", readme_commands("Quick start")[1:])
def test_the_quick_starts_other_lines_are_named_with_why_they_are_not_run(line: str) -> None:
    """Every other line of the Quick start is one the suite knows it does not run, with the
    reason; a new or changed line fails here until it is run or named."""
    assert line in QUICK_START_NOT_RUN, f"the README's Quick start has a new line: {line}"
    pytest.skip(f"README Quick start `{line}`: {QUICK_START_NOT_RUN[line]}")
