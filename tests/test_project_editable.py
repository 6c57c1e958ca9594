"""Editable installs (PEP 660) through the builder's backend: ``pip install -e`` of a copy of
examples/vecops builds its kernels into the project's own package folder, the installed package is
that folder (an edited Python file counts at once), kernelpack reads its index there, and the
project's wheels and sdist never take what the editable build left in the folder."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
from pathlib import Path

import pytest
from builder_env import builder_env

from buildsys import REPO_ROOT
from buildsys.wheelfile import read_wheel

EXAMPLE = REPO_ROOT / "examples" / "vecops"


@pytest.mark.toolchain
def test_pip_install_editable_builds_into_the_project(tmp_path: Path) -> None:
    project = tmp_path / "vecops"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("build", "dist", ".venv"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # this interpreter's packages (zstandard) for the backend that pip runs in the new environment
    env = builder_env(sysconfig.get_paths()["purelib"], KERNELPACK_BUILD_TARGETS="gfx942")
    pip = [str(python), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
    installed = subprocess.run(
        [*pip, "--no-index", "-e", str(project)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    package = project / "vecops_kernels"
    assert (package / "_index.py").is_file()
    assert sorted(p.name for p in (package / "device").iterdir()) == [
        "axpy.cu",
        "axpy.hip",
        "axpy.hsaco",
        "dot.hsaco",
        "elementwise.cu",
        "elementwise.hip",
        "elementwise.hsaco",
    ]
    # the package is the project's folder: an edit counts without reinstalling
    (package / "__init__.py").write_text(
        (package / "__init__.py").read_text() + "\nEDITED = True\n"
    )
    probe = (
        "import json, vecops_kernels\n"
        "from kernelpack.loader import catalog\n"
        "index = catalog.package_index('vecops_kernels')\n"
        "print(json.dumps({'file': vecops_kernels.__file__, 'edited': vecops_kernels.EDITED,"
        " 'packages': catalog.kernelpack_packages(), 'package': index['package'],"
        " 'targets': sorted({i['target'] for m in index['modules'].values()"
        " for i in m['images']})}))\n"
    )
    result = subprocess.run(
        [str(python), "-P", "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT / "wheels")},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout)
    assert Path(seen["file"]) == package / "__init__.py"
    assert seen["edited"] is True
    assert "vecops_kernels" in seen["packages"]
    assert (seen["package"], seen["targets"]) == ("vecops_kernels", ["gfx942"])

    # a wheel and an sdist built afterwards for another target carry that build's files only
    out = tmp_path / "out"
    frontend = [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check"]
    built = subprocess.run(
        [*frontend, "-C", "targets=gfx1100", "-o", str(out), str(project)],
        capture_output=True,
        text=True,
        env=builder_env(sysconfig.get_paths()["purelib"]),
        cwd=tmp_path,
    )
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    wheel = read_wheel(next(out.glob("*.whl")))
    assert sorted(n for n in wheel if n.endswith(".hsaco")) == [
        f"vecops_kernels/device/{m}.hsaco" for m in ("axpy", "dot", "elementwise")
    ]
    assert b'"gfx942"' not in wheel["vecops_kernels/_index.py"]
    with tarfile.open(next(out.glob("*.tar.gz"))) as sdist:
        names = sdist.getnames()
    assert not [n for n in names if "/vecops_kernels/device/" in n or n.endswith("_index.py")]
