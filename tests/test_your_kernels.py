"""docs/your-kernels.md, followed: its ``sh`` blocks run in order in one shell, in a copy of
examples/vecops, in a new user's shell (a fresh HOME), with the builder installed from the dist/ of
a kernelpack checkout after the README's Quick start (conftest's quickstart_checkout; found
through the page's own PIP_FIND_LINKS line) into a clean virtual environment, the rest from the
package index (marker ``network``); then the installed package is queried, and the README's "Your
own kernels" lines run in the same environment.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import newcomer_env, readme_commands

from buildsys import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "your-kernels.md"
EXAMPLE = REPO_ROOT / "examples" / "vecops"
MI300X = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", PAGE.read_text(), flags=re.M | re.S)


def test_the_page_shows_the_examples_own_pyproject() -> None:
    (shown,) = _blocks("toml")
    assert shown == (EXAMPLE / "pyproject.toml").read_text()


@pytest.mark.toolchain
@pytest.mark.network
def test_following_the_page_gives_installed_queryable_wheels(
    quickstart_checkout: Path, tmp_path: Path
) -> None:
    """The page's lines as written, in a fresh virtual environment of the system's python3
    (Debian 12's pip 23.0.1 where that is the system) and a new user's shell (conftest's
    newcomer_env: a fresh HOME, the provisioned toolchain through KERNELPACK_TOOLCHAIN_DIR): the
    only setting the test adds is ``KERNELPACK``, the checkout after the README's Quick start
    whose dist/ the page points PIP_FIND_LINKS at, so pip takes kernelpack's wheels from there and
    everything else from the package index. Then the README's own "Your own kernels" block, in
    the same environment, its ``<name>`` the project's."""
    builder = list((quickstart_checkout / "dist").glob("kernelpack_buildsys-*.whl"))
    assert len(builder) == 1
    project = tmp_path / "vecops"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "dist", ".venv"))
    env = newcomer_env(
        tmp_path / "home",
        KERNELPACK=str(quickstart_checkout),
        KERNELPACK_BUILD_TARGETS="gfx942,gfx1100",
    )
    script = "set -ex\n" + "".join(_blocks("sh"))
    assert "kernelpack-build wheels --project . --out dist" in script
    result = subprocess.run(
        ["bash", "-c", script], cwd=project, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "vecops_kernels" in result.stdout  # the page's `kernelpack info`
    assert 'export PIP_FIND_LINKS="$KERNELPACK/dist"' in script
    # `pip wheel .` through the isolated build, which found the builder through PIP_FIND_LINKS
    assert [p.name for p in (project / "wheelhouse").glob("vecops_kernels-*.whl")] == [
        "vecops_kernels-0.2.0-py3-none-any.whl"
    ]

    python = project / ".venv" / "bin" / "python"
    info = subprocess.run(
        [str(python), "-P", "-m", "kernelpack", "info", "--json", "--sysfs-root", str(MI300X)],
        cwd=project,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "KERNELPACK_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert info.returncode == 0, info.stderr[-2000:]
    report = json.loads(info.stdout)
    assert list(report["packages"]) == ["kernelpack", "vecops_kernels"]
    vecops = report["packages"]["vecops_kernels"]
    assert vecops["version"] == "0.2.0" and vecops["distribution"] == "vecops-kernels"
    assert sorted(vecops["modules"]) == ["axpy", "dot", "elementwise"]
    for module in vecops["modules"].values():
        chosen = [(r["image"]["package"], r["image"]["target"]) for r in module["images"]]
        assert chosen == [("vecops_kernels_device_gfx942", "gfx942")] * 8
        assert all(r["image"]["verified"] for r in module["images"])
    # the kernels the objects define, macro-made and template instances included
    assert vecops["modules"]["elementwise"]["kernels"] == ["relu_f32", "square_f32", "square_f64"]
    assert vecops["modules"]["axpy"]["kernels"] == ["axpy<double>", "axpy<float>"]
    # two translation units device-linked: their kernels, and each unit's static `clear` named
    # after its unit (docs/loader.md, "Kernel names")
    assert vecops["modules"]["dot"]["kernels"] == [
        "clear@dot.cu",
        "clear@norm.cu",
        "dot_f32",
        "scale<float>",
        "sumsq_f32",
    ]

    routed = subprocess.run(
        [
            str(python),
            "-P",
            "-c",
            "import kernelpack, vecops_kernels\n"
            "try:\n    vecops_kernels.load('nope')\nexcept kernelpack.UsageError as e:\n    print(e)",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "KERNELPACK_TARGET": "gfx942"},
    )
    assert routed.stdout.strip() == (
        "no kernel module 'nope' in vecops_kernels; modules: axpy, dot, elementwise"
    )

    # The README's "Your own kernels" lines, after the page's install of the builder (the same
    # virtual environment and PIP_FIND_LINKS), with the placeholder <name> as the project's.
    lines = readme_commands("Your own kernels")
    assert any("<name>" in line for line in lines)
    readme = (
        'set -ex\n. .venv/bin/activate\nexport PIP_FIND_LINKS="$KERNELPACK/dist"\n'
        + "\n".join(line.replace("<name>", "vecops-kernels") for line in lines)
    )
    result = subprocess.run(
        ["bash", "-c", readme], cwd=project, capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "Modules of vecops_kernels 0.2.0" in result.stdout
