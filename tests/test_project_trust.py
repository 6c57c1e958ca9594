"""A kernel project is untrusted input (issue 44; docs/security.md): what its pyproject.toml and
its tree say is checked where it enters, before anything is compiled or written.

- its version is a PEP 440 version (it names the sdist, its members and every wheel);
- no field can add a line to PKG-INFO or METADATA (a line break of any kind is refused);
- the paths it names (output, dist, cache, sources, includes; the defaults, links followed) stay
  inside it, and a frontend's build takes the compile cache from the user, never from the project;
- its readme is a regular file inside the project (it is published in PKG-INFO and METADATA), and
  the sdist carries no file a link reaches outside it;
- it cannot take one of kernelpack's own names, which only kernelpack's own tree may use.

Every check here happens before a compiler would run: no test needs one.
"""

from __future__ import annotations

import argparse
import email
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from builder_env import builder_env
from capped import assert_one_line_refusal
from packaging.metadata import Metadata

import kernelpack
from buildsys import REPO_ROOT, backend
from buildsys.errors import ProjectError
from buildsys.metadata import core_metadata
from buildsys.packaging import (
    is_own_tree,
    metadata_text,
    own_name_claimed,
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


# ---------------------------------------------------------------------------------------------
# Paths (item 6)


@pytest.fixture
def other_package(tmp_path: Path) -> Path:
    """Another installed package's folder, which no project build may touch."""
    folder = tmp_path / "site-packages" / "other"
    (folder / "device").mkdir(parents=True)
    (folder / "_index.py").write_text("INDEX = {}\n")
    (folder / "device" / "image.hsaco").write_bytes(b"\x7fELF")
    return folder


@pytest.mark.parametrize(
    ("table", "command", "key"),
    [
        ('device-dir = "{other}"', "build", "tool.kernelpack.device-dir"),
        ('device-dir = "../site-packages/other"', "build", "tool.kernelpack.device-dir"),
        ('device-dir = "~"', "build", "tool.kernelpack.device-dir"),
        ('device-dir = "{other}"', "merge", "tool.kernelpack.device-dir"),
        ('dist = "{other}"', "wheels", "tool.kernelpack.dist"),
        ('cache-dir = "{other}"', "build", "tool.kernelpack.cache-dir"),
        ('sources = "{other}"', "build", "tool.kernelpack.sources"),
        ('matrix = "../m.toml"', "build", "tool.kernelpack.matrix"),
        ('include-dirs = ["inc", "{other}"]', "wheels", "tool.kernelpack.include-dirs"),
        ('modules.m.include-dirs = ["{other}"]', "build", "modules.m.include-dirs"),
    ],
)
def test_a_path_of_the_config_outside_the_project_is_refused(
    tmp_path: Path, other_package: Path, table: str, command: str, key: str
) -> None:
    text = table.format(other=other_package)
    root = write_project(tmp_path / "demo", f"{DEMO}[tool.kernelpack]\n{text}\n")
    with pytest.raises(ProjectError, match=f"{key}: .* leads outside the project"):
        settings_of(root, command=command)


def test_a_default_path_through_a_link_to_outside_is_refused(
    tmp_path: Path, other_package: Path
) -> None:
    """The default output build/device, where the project made build/device a link."""
    root = write_project(tmp_path / "demo", DEMO)
    (root / "build").mkdir()
    (root / "build" / "device").symlink_to(other_package)
    with pytest.raises(
        ProjectError, match=r"tool.kernelpack.device-dir: .* leads outside the project"
    ):
        settings_of(root, command="build")


def test_build_with_an_out_elsewhere_exits_2_and_touches_nothing(
    tmp_path: Path, other_package: Path
) -> None:
    root = write_project(
        tmp_path / "demo", f'{DEMO}[tool.kernelpack]\ndevice-dir = "{other_package}"\n'
    )
    before = {p: p.read_bytes() for p in other_package.rglob("*") if p.is_file()}
    result = buildsys_cli(
        "build", "--project", str(root), "--cache-dir", str(tmp_path / "cache"), "--targets",
        "gfx942",
    )  # fmt: skip
    assert_one_line_refusal(result)
    assert "tool.kernelpack.device-dir" in result.stderr
    assert {p: p.read_bytes() for p in other_package.rglob("*") if p.is_file()} == before


def test_paths_the_user_gives_are_taken_as_given(tmp_path: Path, other_package: Path) -> None:
    root = write_project(tmp_path / "demo", DEMO)
    settings = settings_of(root, ("--out", str(other_package)), command="build")
    assert settings.out == other_package
    assert settings_of(root, KERNELPACK_BUILD_OUT=str(other_package), command="build").out == (
        other_package
    )
    inside = write_project(
        tmp_path / "inside", f'{DEMO}[tool.kernelpack]\ndevice-dir = "pkg/out"\n'
    )
    assert settings_of(inside, command="build").out == inside / "pkg" / "out"


def test_the_pep517_backend_takes_the_cache_from_the_user_not_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_project(tmp_path / "demo", f'{DEMO}[tool.kernelpack]\ncache-dir = "cache"\n')
    monkeypatch.chdir(root)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    monkeypatch.delenv("KERNELPACK_BUILD_CACHE_DIR", raising=False)
    settings = backend._settings(None)
    assert settings.cache_dir == tmp_path / "user-cache" / "kernelpack" / "build"
    notice = capsys.readouterr().err.strip().splitlines()
    assert len(notice) == 1 and "tool.kernelpack.cache-dir is not used" in notice[0]
    chosen = backend._settings({"cache-dir": str(tmp_path / "mine")})
    assert chosen.cache_dir == tmp_path / "mine"
    monkeypatch.setenv("KERNELPACK_BUILD_CACHE_DIR", str(tmp_path / "env"))
    assert backend._settings(None).cache_dir == tmp_path / "env"


def test_a_package_folder_linked_to_another_package_is_refused(
    tmp_path: Path, other_package: Path
) -> None:
    """An editable install builds into the package folder; wheels and the sdist read it."""
    (other_package / "__init__.py").write_text("")
    root = write_project(tmp_path / "demo", DEMO)
    (root / "demo_kernels").symlink_to(other_package)
    meta = project_metadata(settings_of(root))
    with pytest.raises(ProjectError, match=r"package folder demo_kernels: .* leads outside"):
        meta.python_folder()


# ---------------------------------------------------------------------------------------------
# The readme (item 3)


@pytest.mark.parametrize(
    "link",
    [None, "../secret.md", "/proc/self/environ"],
    ids=["absolute-path", "link-to-outside", "link-to-environ"],
)
def test_a_readme_outside_the_project_is_refused(tmp_path: Path, link: str | None) -> None:
    (tmp_path / "secret.md").write_text("TOKEN=hunter2\n")
    readme = "/proc/self/environ" if link is None else "README.md"
    root = write_project(tmp_path / "demo", DEMO + f'readme = "{readme}"\n')
    if link is not None:
        (root / "README.md").symlink_to(link)
    with pytest.raises(ProjectError, match=r"project.readme = .*leads outside the project"):
        project_metadata(settings_of(root))


def test_a_readme_inside_the_project_is_read(tmp_path: Path) -> None:
    root = write_project(
        tmp_path / "demo", DEMO + 'readme = "README.md"\n', {"docs/intro.md": "# Demo\n"}
    )
    (root / "README.md").symlink_to("docs/intro.md")  # a link that stays inside is fine
    meta = project_metadata(settings_of(root))
    assert (meta.readme, meta.readme_type) == ("# Demo\n", "text/markdown")


def test_a_fifo_readme_is_refused_in_one_line_not_waited_on(tmp_path: Path) -> None:
    root = write_project(tmp_path / "demo", DEMO + 'readme = "README.md"\n')
    os.mkfifo(root / "README.md")
    result = buildsys_cli(
        "wheels", "--project", str(root), "--out", str(tmp_path / "dist"), timeout=30
    )
    assert_one_line_refusal(result)
    assert "README.md: is a FIFO" in result.stderr


def test_a_link_to_a_file_outside_is_not_carried_by_the_sdist(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("TOKEN=hunter2\n")
    root = write_project(tmp_path / "demo", DEMO, {"notes/inside.txt": "fine\n"})
    (root / "notes" / "alias.txt").symlink_to("inside.txt")
    meta = project_metadata(settings_of(root))
    name, data = sdist_bytes(meta, epoch=315532800)
    (tmp_path / name).write_bytes(data)
    with tarfile.open(tmp_path / name) as archive:
        alias = archive.extractfile("demo_kernels-1.0/notes/alias.txt")
        assert alias is not None and alias.read() == b"fine\n"
    (root / "notes" / "leak.txt").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ProjectError, match=r"project: .*leak.txt leads outside the project"):
        sdist_bytes(meta, epoch=315532800)


# ---------------------------------------------------------------------------------------------
# kernelpack's own names (item 7)

# Written out by hand from the wheels kernelpack's own `wheels` run makes (test_wheels's
# expected_files) and the names they install: the runtime, a device wheel, the builder, the
# variant provider.
OWN_NAMES = [
    ("kernelpack", None),
    ("KernelPack", None),
    ("kernelpack-device-sm90", None),
    ("kernelpack.device.gfx11-generic", None),
    ("kernelpack-device", None),  # its device wheels would be kernelpack-device-device-*
    ("kernelpack-buildsys", None),
    ("kernelpack_variant_provider", None),
    ("demo", "kernelpack"),
    ("demo", "Kernelpack"),
    ("demo", "buildsys"),
    ("demo", "kernelpack_device_sm90"),
    ("demo", "kernelpack_variant_provider"),
]


@pytest.mark.parametrize(("name", "package"), OWN_NAMES)
def test_a_project_cannot_take_kernelpacks_own_names(
    tmp_path: Path, name: str, package: str | None
) -> None:
    table = "" if package is None else f'[tool.kernelpack]\npackage = "{package}"\n'
    root = write_project(tmp_path / "demo", DEMO.replace("demo-kernels", name) + table)
    with pytest.raises(ProjectError, match="is kernelpack's own"):
        project_metadata(settings_of(root))


@pytest.mark.parametrize(
    "name", ["demo-kernels", "kernelpack-extras", "my-kernelpack", "kernelpackage"]
)
def test_other_names_are_the_projects_own(tmp_path: Path, name: str) -> None:
    root = write_project(tmp_path / "demo", DEMO.replace("demo-kernels", name))
    assert not project_metadata(settings_of(root)).is_runtime


def test_a_copy_of_kernelpacks_pyproject_is_not_kernelpack(tmp_path: Path) -> None:
    root = tmp_path / "kernelpack"
    root.mkdir()
    (root / "pyproject.toml").write_text((REPO_ROOT / "pyproject.toml").read_text())
    (root / "buildsys").mkdir()
    (root / "buildsys" / "__init__.py").write_text("")
    with pytest.raises(ProjectError, match=r"project.name 'kernelpack' is kernelpack's own"):
        project_metadata(settings_of(root))


def test_kernelpacks_own_tree_is_the_runtime() -> None:
    meta = project_metadata(resolve_settings(argparse.Namespace(), {}, command="wheels"))
    assert meta.root == REPO_ROOT and meta.name == "kernelpack" and meta.is_runtime


def test_the_tree_is_kernelpacks_only_with_the_runtime_it_packages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builder installed as a wheel (its REPO_ROOT is site-packages) has no tree of its own."""
    assert is_own_tree(REPO_ROOT)
    monkeypatch.setattr(kernelpack, "__file__", str(tmp_path / "kernelpack" / "__init__.py"))
    assert not is_own_tree(REPO_ROOT)


@pytest.mark.parametrize(
    ("wheel", "package"),
    [
        ("kernelpack-1.0-cp311-abi3-manylinux_2_28_x86_64.whl", "kernelpack"),
        ("kernelpack_device_gfx942-1.0-py3-none-any.whl", "kernelpack_device_gfx942"),
        ("kernelpack_device_gfx11_generic-1.0-py3-none-any.whl", "kernelpack_device_gfx11_generic"),
        ("kernelpack_device_ptx-1.0-py3-none-any.whl", "kernelpack_device_ptx"),
        ("kernelpack_variant_provider-1.0-py3-none-any.whl", "kernelpack_variant_provider"),
        ("kernelpack_buildsys-1.0-py3-none-any.whl", "buildsys"),
    ],
)
def test_every_wheel_kernelpack_makes_is_under_a_name_of_its_own(wheel: str, package: str) -> None:
    """Each distribution and the import package it installs (written out by hand)."""
    assert own_name_claimed(wheel.split("-")[0], "demo")
    assert own_name_claimed("demo", package)
