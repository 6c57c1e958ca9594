"""The builder's one settings object: defaults, the project's [tool.kernelpack], the environment,
the command line, in that order; bad values and unknown keys are one line with exit status 2."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from buildsys import REPO_ROOT
from buildsys.settings import (
    FLAGS,
    OPTIONS,
    BuildSettings,
    ModuleFlags,
    add_arguments,
    environment_epoch,
    resolve_settings,
)
from kernelpack.errors import UsageError


def parse(argv: list[str], command: str = "build") -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser, command)
    return parser.parse_args(argv)


def project(tmp_path: Path, table: str = "") -> Path:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "demo"\nversion = "2.0"\n\n[tool.kernelpack]\n' + table
    )
    return tmp_path


def test_defaults_are_inside_the_project_and_the_cache_in_the_user_cache(tmp_path: Path) -> None:
    root = project(tmp_path)
    environ = {"KERNELPACK_BUILD_PROJECT": str(root)}
    settings = resolve_settings(parse([]), environ)
    assert settings.project == root.resolve()
    assert settings.sources == root / "kernel_sources"
    assert settings.matrix == root / "arch_matrix.toml"
    assert settings.out == root / "build" / "device"
    assert settings.flags == FLAGS and not settings.is_shard
    assert settings.version == "2.0"  # the project's static version
    assert settings.amd_defines == ("USE_ROCM",)  # the ROCm convention, on by default
    # the cache is never under a checkout
    assert REPO_ROOT not in settings.cache_dir.parents and root not in settings.cache_dir.parents


def test_config_then_environment_then_command_line(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        'targets = ["gfx90a"]\njobs = 2\ncompress = false\nsources = "src"\n'
        'defines = ["A=1"]\ninclude-dirs = ["inc"]\n'
        '[tool.kernelpack.modules.tiny]\nflags = ["-O2"]\ndefines = ["B"]\n',
    )
    environ = {"KERNELPACK_BUILD_PROJECT": str(root)}
    config = resolve_settings(parse([]), environ)
    assert config.targets == ("gfx90a",) and config.jobs == 2 and config.compress is False
    assert config.sources == root / "src"  # relative to the project, not the current folder
    assert config.defines == ("A=1",) and config.include_dirs == (root / "inc",)
    assert config.modules == {"tiny": ModuleFlags(flags=("-O2",), defines=("B",))}
    environ |= {"KERNELPACK_BUILD_TARGETS": "gfx942, sm_90", "KERNELPACK_BUILD_JOBS": "3"}
    from_env = resolve_settings(parse([]), environ)
    assert from_env.targets == ("gfx942", "sm_90") and from_env.jobs == 3
    assert from_env.compress is False  # still the config's
    both = resolve_settings(parse(["--jobs", "5", "--compress"]), environ)
    assert both.targets == ("gfx942", "sm_90") and both.jobs == 5 and both.compress is True


def test_every_option_has_a_field_an_environment_variable_and_a_flag() -> None:
    names = {f for f in BuildSettings.__dataclass_fields__}
    for option in OPTIONS:
        assert option.name in names
        assert option.environment == "KERNELPACK_BUILD_" + option.name.upper()
    # --matrix is declared once and every command that reads a matrix gets it
    for command in ("build", "merge", "matrix", "toolchain", "wheels"):
        assert parse(["--matrix", "m.toml"], command).matrix == "m.toml"


def test_merge_takes_only_its_own_options() -> None:
    args = parse(["--out", "o", "--no-compress"], "merge")
    assert args.out == "o" and args.compress is False
    with pytest.raises(SystemExit):
        parse(["--targets", "gfx90a"], "merge")


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--jobs", "0"], {}, "--jobs: '0': expected a positive number"),
        (["--vendor", "intel"], {}, "--vendor: 'intel': expected amd or nvidia"),
        (["--targets", " , "], {}, "--targets: no target given"),
        (["--defines", "1X"], {}, "--defines: '1X': expected NAME or NAME=VALUE"),
        ([], {"KERNELPACK_BUILD_KEEP_GOING": "maybe"}, "KERNELPACK_BUILD_KEEP_GOING: 'maybe'"),
    ],
)
def test_bad_settings_are_one_clear_line(
    argv: list[str], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        resolve_settings(parse(argv), environ)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "target = []\n",
            "unknown key tool.kernelpack.target; known: allow-missing-kernels, amd-defines",
        ),
        ("jobs = true\n", "tool.kernelpack.jobs: True: expected a positive number"),
        ("compress = 1\n", "tool.kernelpack.compress: 1: expected true or false"),
        ("[tool.kernelpack.modules.m]\nflag = []\n", "modules.m: unknown key flag"),
        ("project = 'x'\n", "unknown key tool.kernelpack.project"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, table: str, message: str) -> None:
    root = project(tmp_path, table)
    with pytest.raises(UsageError, match=message):
        resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(root)})


def test_unknown_config_key_exits_2_with_one_line(tmp_path: Path) -> None:
    root = project(tmp_path, "sorces = 'x'\n")
    result = subprocess.run(
        [sys.executable, "-m", "buildsys", "matrix", "--project", str(root)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "KERNELPACK_DEBUG"},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown key tool.kernelpack.sorces" in lines[0], result.stderr


@pytest.mark.parametrize(
    ("table", "nearest"),
    [
        ('include_dirs = ["inc"]\n', "include-dirs"),
        ("sorces = 'src'\n", "sources"),
        ("cache_dir = 'c'\n", "cache-dir"),
        ("[tool.kernelpack.modules.m]\ninclude_dirs = []\n", "include-dirs"),
        ("[tool.kernelpack.modules.m]\nflag = []\n", "flags"),
    ],
)
def test_an_unknown_key_names_the_nearest_known_one(
    tmp_path: Path, table: str, nearest: str
) -> None:
    """A key written with underscores or a letter off gets the key meant (issue 50, smaller)."""
    root = project(tmp_path, table)
    with pytest.raises(UsageError) as raised:
        resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(root)})
    assert str(raised.value).endswith(f"; did you mean {nearest}?")


def test_a_key_near_nothing_gets_no_guess(tmp_path: Path) -> None:
    root = project(tmp_path, "colour = 3\n")
    with pytest.raises(UsageError) as raised:
        resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(root)})
    assert "did you mean" not in str(raised.value)


def test_the_device_folder_and_the_wheels_folder_have_keys_named_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """device-dir is the build's --out (_index.py and device/), dist the wheels' --out; the old
    key out still reads as device-dir, with one notice saying so (issue 50, smaller)."""
    root = project(tmp_path, 'device-dir = "pkg"\ndist = "wheelhouse"\n')
    settings = resolve_settings(parse([], "wheels"), {"KERNELPACK_BUILD_PROJECT": str(root)})
    assert (settings.out, settings.dist) == (root / "pkg", root / "wheelhouse")
    assert capsys.readouterr().err == ""

    (tmp_path / "old").mkdir()
    old = project(tmp_path / "old", 'out = "pkg"\n')
    for _ in range(2):  # settings are resolved more than once in a command: one notice
        settings = resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(old)})
        assert settings.out == old / "pkg"
    (notice,) = capsys.readouterr().err.splitlines()
    assert notice.startswith(f"notice: {old / 'pyproject.toml'}: tool.kernelpack.out is deprecated")
    assert "write device-dir" in notice

    (tmp_path / "both").mkdir()
    both = project(tmp_path / "both", 'out = "a"\ndevice-dir = "b"\n')
    with pytest.raises(UsageError, match="sets both out and device-dir"):
        resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(both)})


def test_kernelpack_itself_is_a_project_with_its_output_in_the_package() -> None:
    settings = resolve_settings(parse([]), {})
    assert settings.project == REPO_ROOT
    assert settings.out == REPO_ROOT / "wheels" / "kernelpack"


@pytest.mark.parametrize("value", ["yesterday", "-5", "1.5"])
def test_a_bad_source_date_epoch_is_a_usage_error(value: str) -> None:
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        environment_epoch({"SOURCE_DATE_EPOCH": value})
    assert environment_epoch({"SOURCE_DATE_EPOCH": "1700000000"}) == 1700000000
    assert environment_epoch({}) is None


def test_wheels_reads_the_build_settings_from_the_environment_as_pip_wheel_does() -> None:
    """`nox -s wheels` (python -m buildsys wheels) and `pip wheel .` (CMake running
    python -m buildsys build) resolve KERNELPACK_BUILD_* through the same table."""
    environ = {"KERNELPACK_BUILD_TARGETS": "gfx90a", "KERNELPACK_BUILD_COMPRESS": "0"}
    for command in ("wheels", "build"):
        settings = resolve_settings(parse([], command), environ, command=command)
        assert settings.targets == ("gfx90a",) and settings.compress is False
    wheels = resolve_settings(parse(["--out", "d"], "wheels"), {}, command="wheels")
    assert wheels.dist == Path.cwd() / "d"  # wheels' --out is where the wheels go


def test_allow_missing_kernels_from_the_config_and_the_command_line(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        'allow-missing-kernels = {walk = ["hopper_only"], mlp = ["mlp::fp8<__nv_fp8_e4m3>"]}\n',
    )
    environ = {"KERNELPACK_BUILD_PROJECT": str(root)}
    config = resolve_settings(parse([]), environ)
    assert config.allow_missing_kernels == {
        "mlp": ("mlp::fp8<__nv_fp8_e4m3>",),
        "walk": ("hopper_only",),
    }
    given = resolve_settings(parse(["--allow-missing-kernels", "m=k<float, 2>; m=b"]), environ)
    assert given.allow_missing_kernels == {"m": ("k<float, 2>", "b")}
    with pytest.raises(UsageError, match=r"--allow-missing-kernels: 'k': expected module=kernel"):
        resolve_settings(parse(["--allow-missing-kernels", "k"]), environ)
    by_target = resolve_settings(
        parse(["--allow-missing-kernels", "*@sm_80,compute_*=*_f8"]), environ
    )
    assert by_target.allow_missing_kernels == {"*@sm_80,compute_*": ("*_f8",)}
    with pytest.raises(
        UsageError, match=r"'m@sm80': sm80: not an NVIDIA target.*did you mean sm_80"
    ):
        resolve_settings(parse(["--allow-missing-kernels", "m@sm80=k"]), environ)
    (tmp_path / "bad").mkdir()
    bad = project(tmp_path / "bad", 'allow-missing-kernels = {walk = "hopper_only"}\n')
    with pytest.raises(
        UsageError, match=r"tool.kernelpack.allow-missing-kernels: .*expected a table"
    ):
        resolve_settings(parse([]), {"KERNELPACK_BUILD_PROJECT": str(bad)})
