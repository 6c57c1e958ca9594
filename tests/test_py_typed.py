"""kernelpack ships its type hints: py.typed is in the package and in the wheel's file list."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_py_typed_lands_in_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Asks scikit-build-core itself (the wheel's builder, with this project's settings) which
    files of wheels/kernelpack it puts into the wheel."""
    from scikit_build_core.build._pathutil import packages_to_file_mapping
    from scikit_build_core.build.wheel import get_packages
    from scikit_build_core.settings.skbuild_read_settings import SettingsReader

    assert (REPO_ROOT / "wheels" / "kernelpack" / "py.typed").is_file()
    monkeypatch.chdir(REPO_ROOT)  # scikit-build-core reads .gitignore from the project root
    settings = SettingsReader.from_file(Path("pyproject.toml")).settings
    assert settings.sdist.inclusion_mode is not None
    mapping = packages_to_file_mapping(
        packages=get_packages(packages=settings.wheel.packages, name="kernelpack"),
        platlib_dir=tmp_path,
        include=settings.sdist.include,
        src_exclude=settings.sdist.exclude,
        target_exclude=settings.wheel.exclude,
        build_dir=settings.build_dir,
        mode=settings.sdist.inclusion_mode,
    )
    shipped = {Path(target).relative_to(tmp_path).as_posix() for target in mapping.values()}
    assert "kernelpack/py.typed" in shipped
    assert "kernelpack/loader/load.py" in shipped
