"""A kernel project is untrusted input (issue 44; docs/security.md): what its pyproject.toml and
its tree say is checked where it enters, before anything is compiled or written.

- its version is a PEP 440 version (it names the sdist, its members and every wheel).

Every check here happens before a compiler would run: no test needs one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from builder_env import builder_env
from capped import assert_one_line_refusal

from buildsys import backend
from buildsys.errors import ProjectError
from buildsys.packaging import project_metadata, sdist_bytes
from buildsys.settings import BuildSettings, add_arguments, resolve_settings
from kernelpack.errors import UsageError

DEMO = '[project]\nname = "demo-kernels"\nversion = "1.0"\n'


def write_project(root: Path, pyproject: str, files: dict[str, str] | None = None) -> Path:
    """A project folder with its pyproject.toml and ``files`` (relative name -> text)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(pyproject)
    for relative, text in (files or {}).items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def settings_of(
    root: Path, argv: tuple[str, ...] = (), command: str = "wheels", **environ: str
) -> BuildSettings:
    parser = argparse.ArgumentParser()
    add_arguments(parser, command)
    return resolve_settings(
        parser.parse_args(argv), {"KERNELPACK_BUILD_PROJECT": str(root), **environ}, command=command
    )


def every_file(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


def buildsys_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = builder_env()
    env.pop("KERNELPACK_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


# ---------------------------------------------------------------------------------------------
# Versions (issue 44, item 2)

ESCAPING = "1.0/../../escaped"


def test_build_sdist_refuses_a_version_that_leaves_the_folder_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_project(
        tmp_path / "a" / "b" / "demo", DEMO.replace('"1.0"', f'"{ESCAPING}"'), {"x.txt": "x\n"}
    )
    out = root / "sdists"
    out.mkdir()
    before = every_file(tmp_path)
    monkeypatch.chdir(root)
    monkeypatch.delenv("KERNELPACK_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exited:
        backend.build_sdist(str(out))
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"project.version = '{ESCAPING}': not a PEP 440 version" in lines[0]
    assert every_file(tmp_path) == before


def test_wheels_refuses_the_version_in_one_line(tmp_path: Path) -> None:
    """It used to end in a StopIteration traceback after the compile."""
    root = write_project(tmp_path / "demo", DEMO.replace('"1.0"', f'"{ESCAPING}"'))
    result = buildsys_cli(
        "wheels", "--project", str(root), "--out", str(tmp_path / "dist"),
        "--cache-dir", str(tmp_path / "cache"),
    )  # fmt: skip
    assert_one_line_refusal(result)
    assert "project.version" in result.stderr and "not a PEP 440 version" in result.stderr


@pytest.mark.parametrize(
    ("pyproject", "environ", "where"),
    [
        (DEMO.replace('"1.0"', '"1.0\\n2"'), {}, "project.version"),
        (DEMO.replace('"1.0"', "1.0"), {}, "project.version"),  # a TOML number
        (
            '[project]\nname = "demo"\ndynamic = ["version"]\n'
            f'[tool.setuptools_scm]\nfallback_version = "{ESCAPING}"\n',
            {},
            "tool.setuptools_scm.fallback_version",
        ),
        (DEMO + f'[tool.kernelpack]\npackage-version = "{ESCAPING}"\n', {}, "package-version"),
        (DEMO, {"KERNELPACK_BUILD_PACKAGE_VERSION": ESCAPING}, "KERNELPACK_BUILD_PACKAGE_VERSION"),
        (DEMO.replace('"1.0"', '"' + "1" * 5000 + '"'), {}, "project.version"),
    ],
    ids=["line-break", "number", "fallback", "config", "environment", "5000-digits"],
)
def test_every_source_of_the_version_is_checked(
    tmp_path: Path, pyproject: str, environ: dict[str, str], where: str
) -> None:
    root = write_project(tmp_path / "demo", pyproject)
    with pytest.raises(ProjectError, match=where):
        project_metadata(settings_of(root, **environ))


def test_a_version_is_written_in_its_normal_form(tmp_path: Path) -> None:
    """PEP 440's normal form names the files (a '-' inside a version would split a wheel name)."""
    root = write_project(tmp_path / "demo", DEMO.replace('"1.0"', '"v1.0-RC1"'))
    meta = project_metadata(settings_of(root))
    assert meta.version == "1.0rc1"
    name, _ = sdist_bytes(meta, epoch=315532800)
    assert name == "demo_kernels-1.0rc1.tar.gz"


def test_usage_errors_are_project_errors() -> None:
    assert issubclass(ProjectError, UsageError) and ProjectError("x").exit_code == 2
