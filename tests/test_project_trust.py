"""A kernel project is untrusted input (issue 44; docs/security.md): what its pyproject.toml and
its tree say is checked where it enters, before anything is compiled or written.

- its version is a PEP 440 version (it names the sdist, its members and every wheel);
- no field can add a line to PKG-INFO or METADATA (a line break of any kind is refused).

Every check here happens before a compiler would run: no test needs one.
"""

from __future__ import annotations

import argparse
import email
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from builder_env import builder_env
from capped import assert_one_line_refusal
from packaging.metadata import Metadata

from buildsys import backend
from buildsys.errors import ProjectError
from buildsys.metadata import core_metadata
from buildsys.packaging import (
    metadata_text,
    project_metadata,
    pure_wheel_dist_info,
    runtime_requirement,
    sdist_bytes,
)
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


# ---------------------------------------------------------------------------------------------
# Metadata fields (item 5)

INJECTED = "Requires-Dist: evil"


@pytest.mark.parametrize("brk", ["\n", "\r", "\r\n", "\u2028", "\x85", "\x0b"], ids=repr)
@pytest.mark.parametrize(
    ("table", "where"),
    [
        ('description = "Demo{brk}{injected}"\n', "project.description"),
        ('dependencies = ["numpy>=1.24{brk}{injected}"]\n', r"project.dependencies\[0\]"),
        ('dependencies = ["numpy", "x @ https://e.org/x{brk}{injected}"]\n', "dependencies\\[1\\]"),
        ('requires-python = ">=3.11{brk}{injected}"\n', "project.requires-python"),
    ],
    ids=["description", "dependency", "url-dependency", "requires-python"],
)
def test_a_line_break_in_a_field_is_refused(
    tmp_path: Path, table: str, where: str, brk: str
) -> None:
    escaped = "".join(f"\\u{ord(c):04x}" for c in brk)  # as TOML spells it
    root = write_project(tmp_path / "demo", DEMO + table.format(brk=escaped, injected=INJECTED))
    with pytest.raises(ProjectError, match=where):
        project_metadata(settings_of(root))


@pytest.mark.parametrize("brk", ["\n", "\u2028"], ids=repr)
def test_the_metadata_writers_refuse_a_line_break_themselves(brk: str) -> None:
    with pytest.raises(ProjectError, match="Summary"):
        core_metadata([("Name", "demo"), ("Summary", f"Demo{brk}{INJECTED}")])
    with pytest.raises(ProjectError, match="Summary"):
        pure_wheel_dist_info(
            "demo", "1.0", f"Demo{brk}{INJECTED}", file_name="demo", entry_points={}
        )


def test_pkg_info_and_metadata_hold_the_fields_given_and_no_other(tmp_path: Path) -> None:
    """Read back by packaging's own core-metadata parser, which validates every field."""
    root = write_project(
        tmp_path / "demo",
        DEMO + 'description = "Demo kernels: ünïcode is fine"\n'
        'dependencies = ["numpy >= 1.24"]\nrequires-python = ">=3.11"\n'
        'license = {text = "Line one\\nRequires-Dist: not a field\\n\\nLine four"}\n'
        'readme = "README.md"\n',
        {"README.md": "# Demo\n\nRequires-Dist: in the body\n"},
    )
    meta = project_metadata(settings_of(root))
    _, data = sdist_bytes(meta, epoch=315532800)
    (tmp_path / "demo.tar.gz").write_bytes(data)
    with tarfile.open(tmp_path / "demo.tar.gz") as archive:
        member = archive.extractfile("demo_kernels-1.0/PKG-INFO")
        assert member is not None
        pkg_info = member.read().decode()
    assert pkg_info == metadata_text(meta, runtime_requirement(meta))
    parsed = Metadata.from_email(pkg_info, validate=True)
    assert parsed.requires_dist is not None
    assert [str(r) for r in parsed.requires_dist] == [runtime_requirement(meta), "numpy>=1.24"]
    assert parsed.summary == "Demo kernels: ünïcode is fine"
    assert parsed.description == "# Demo\n\nRequires-Dist: in the body\n"
    message = email.message_from_string(pkg_info)
    assert message.get_all("Requires-Dist") == [runtime_requirement(meta), "numpy>=1.24"]
    assert len(message.get_all("License") or []) == 1
