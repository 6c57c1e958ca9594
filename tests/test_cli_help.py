"""Both command lines describe themselves as they are run (issue 50 item 9): the name a user typed
(``kernelpack-build``, ``kernelpack``, or ``python3 -m ...``), plain help text with no doc markup,
a ``--project`` default that is the one used, and ``--version`` (with ``kernelpack.__version__``)
read from the installed distribution's own metadata."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from buildsys import REPO_ROOT, project

REPO = Path(__file__).resolve().parents[1]
ENV = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'wheels'}"}


def _script(folder: Path, name: str, target: str) -> Path:
    """A console script as an installer writes it: its own name, calling ``target``."""
    module, function = target.split(":")
    path = folder / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    path.chmod(0o755)
    return path


def _run(*argv: str | Path, cwd: Path | None = None, env: dict[str, str] = ENV) -> str:
    result = subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, env=env, cwd=cwd, check=False
    )
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout


@pytest.mark.parametrize(
    ("script", "target"),
    [("kernelpack-build", "buildsys.cli:main"), ("kernelpack", "kernelpack.cli.main:main")],
)
def test_help_names_the_command_as_it_was_run(tmp_path: Path, script: str, target: str) -> None:
    out = _run(_script(tmp_path, script, target), "--help")
    assert out.startswith(f"usage: {script} ")
    assert "python -m" not in out and "``" not in out and ":func:" not in out
    module = "buildsys" if script == "kernelpack-build" else "kernelpack"
    assert _run(sys.executable, "-m", module, "--help").startswith(f"usage: python3 -m {module} ")


def test_the_builders_help_describes_the_builder_of_any_project(tmp_path: Path) -> None:
    out = _run(_script(tmp_path, "kernelpack-build", "buildsys.cli:main"), "--help")
    assert "Build kernelpack's device code" not in out
    assert "a kernel project's CUDA sources" in " ".join(out.split())


def test_project_default_is_the_one_used(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert project.default_project() == REPO_ROOT  # run from this checkout
    assert str(REPO_ROOT) in project.default_project_words()
    monkeypatch.setattr(project, "REPO_ROOT", tmp_path / "site-packages")  # installed
    monkeypatch.chdir(tmp_path)
    assert project.default_project() == tmp_path
    assert project.default_project_words() == "the current folder"


def _installed_copy(site: Path, version: str) -> None:
    """kernelpack as an installer leaves it: the package and its dist-info, nothing else."""
    shutil.copytree(
        REPO / "wheels" / "kernelpack",
        site / "kernelpack",
        ignore=shutil.ignore_patterns("__pycache__", "_index.py", "*.so"),
    )
    info = site / f"kernelpack-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: kernelpack\nVersion: {version}\n")
    (info / "RECORD").write_text("")


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _installed_copy(site, "3.1.4")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}
    code = "import kernelpack; print(kernelpack.__version__)"
    assert _run(sys.executable, "-c", code, env=env, cwd=tmp_path) == "3.1.4\n"
    assert _run(sys.executable, "-m", "kernelpack", "--version", env=env, cwd=tmp_path) == (
        "kernelpack 3.1.4\n"
    )
    # the checkout's package is not that install, whatever is on the path after it
    checkout = {**env, "PYTHONPATH": f"{REPO / 'wheels'}{os.pathsep}{site}"}
    assert _run(sys.executable, "-c", code, env=checkout, cwd=tmp_path) != "3.1.4\n"


def test_the_builder_has_a_version() -> None:
    out = _run(sys.executable, "-m", "buildsys", "--version")
    assert out.startswith("kernelpack-build ") and len(out.split()) == 2
