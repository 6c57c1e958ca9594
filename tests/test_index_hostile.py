"""Hostile installed indexes and registrations (issue 44 items 10 and 11), met through
``python -m kernelpack info|doctor`` in a child process under the 2 GiB address-space cap
(tests/capped.py), each finishing within 5 s.

Each case installs one package, ``hostpkg``, into a site folder on the child's PYTHONPATH, with a
``kernelpack.packages`` entry point, and damages it: an ``_index.py`` holding JSON's ``true`` (a
NameError on import), a FIFO for ``_index.py`` (an import would wait on it for ever), an image that
claims 2**50 bytes (``read()`` asked for a petabyte), a package whose import fails, or a
registration of a package that is not installed at all. The damaged package is reported alone, in
one ``error:`` line with exit status 2 for ``info`` (a ``package`` finding and exit status 1 for
``doctor``), while kernelpack itself is still listed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from capped import WHEELS, assert_one_line_refusal, run_capped

from buildsys.index_writer import render_index
from kernelpack.errors import UsageError
from kernelpack.formats.index import SCHEMA_VERSION, Image, Index
from kernelpack.loader.catalog import check_index

RX6600 = Path(__file__).parent / "fixtures" / "sysfs" / "rx6600-gfx1032"
VARIABLES = (
    "KERNELPACK_TARGET",
    "HSA_XNACK",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HSA_OVERRIDE_GFX_VERSION",
)


def _index(root: Path, *, size: int | None = None) -> Index:
    """An index of one module "ops" with a gfx1032 image (the RX 6600's), written under root;
    ``size`` replaces the image's true size in the index."""
    data = b"hostpkg gfx1032 image"
    (root / "device").mkdir(parents=True, exist_ok=True)
    (root / "device" / "ops.co").write_bytes(data)
    image: Image = {
        "vendor": "amd",
        "target": "gfx1032",
        "kind": "code_object",
        "file": "device/ops.co",
        "offset": 0,
        "size": len(data) if size is None else size,
        "sha256": hashlib.sha256(data).hexdigest(),
        "compression": "none",
        "kernels": {},
        "symbols": {},
    }
    return {
        "schema": SCHEMA_VERSION,
        "version": "1.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "distribution": "hostpkg",
        "package": "hostpkg",
        "modules": {"ops": {"kernels": {}, "source": "", "source_sha256": "", "images": [image]}},
    }


def _json_true(package: Path) -> Path:
    (package / "_index.py").write_text("true\n")
    return package / "_index.py"


def _index_json_true(package: Path) -> Path:
    (package / "_index.py").write_text("INDEX = true\n")
    return package / "_index.py"


def _fifo(package: Path) -> Path:
    os.mkfifo(package / "_index.py")
    return package / "_index.py"


def _image_of_2_to_the_50_bytes(package: Path) -> Path:
    (package / "_index.py").write_text(render_index(_index(package, size=1 << 50)))
    return package / "_index.py"


def _import_fails(package: Path) -> Path:
    (package / "__init__.py").write_text("import a_module_nobody_installed\n")
    (package / "_index.py").write_text(render_index(_index(package)))
    return package / "_index.py"


def _not_installed(package: Path) -> Path:
    for file in package.iterdir():
        file.unlink()
    package.rmdir()
    return Path("'hostpkg'")  # the registration names the package; no file is there


# Each damages the installed package and returns what the error line must name.
DAMAGES: dict[str, Callable[[Path], Path]] = {
    "index-is-json-true": _json_true,
    "index-assigns-json-true": _index_json_true,
    "index-is-a-fifo": _fifo,
    "image-of-2**50-bytes": _image_of_2_to_the_50_bytes,
    "package-import-fails": _import_fails,
    "registered-not-installed": _not_installed,
}


def _site(tmp_path: Path, damage: str) -> tuple[Path, str]:
    """A site folder with hostpkg installed and registered, then damaged; what the error names."""
    site = tmp_path / "site"
    package = site / "hostpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    info = site / "hostpkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hostpkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kernelpack.packages]\nhostpkg = hostpkg\n")
    named = DAMAGES[damage](package)
    return site, str(named)


def _environ(tmp_path: Path, site: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(VARIABLES)}
    environ["PYTHONPATH"] = os.pathsep.join([str(WHEELS), str(site)])
    environ["KERNELPACK_CACHE_DIR"] = str(tmp_path / "cache")
    environ["PYTHONDONTWRITEBYTECODE"] = "1"
    return environ


@pytest.mark.parametrize("damage", DAMAGES)
def test_info_reports_a_damaged_package_alone_in_one_line(tmp_path: Path, damage: str) -> None:
    site, named = _site(tmp_path, damage)
    environ = _environ(tmp_path, site)
    result = run_capped(["info", "--json", "--sysfs-root", str(RX6600)], env=environ)
    assert_one_line_refusal(result)
    assert named in result.stderr
    assert "reinstall" in result.stderr
    report = json.loads(result.stdout)
    assert report["packages"]["hostpkg"]["error"] == result.stderr.strip().removeprefix("error: ")
    assert report["packages"]["kernelpack"]["error"] is None  # the others are still listed
    assert [gpu["target"] for gpu in report["gpus"]] == ["gfx1032"]
    table = run_capped(["info", "--sysfs-root", str(RX6600)], env=environ)
    assert_one_line_refusal(table)
    assert "Modules of kernelpack" in table.stdout and "hostpkg: cannot be read" in table.stdout


@pytest.mark.parametrize("damage", ["index-is-json-true", "registered-not-installed"])
def test_doctor_reports_a_damaged_package_as_one_finding(tmp_path: Path, damage: str) -> None:
    site, named = _site(tmp_path, damage)
    result = run_capped(
        ["doctor", "--json", "--sysfs-root", str(RX6600)], env=_environ(tmp_path, site)
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    [finding] = [f for f in report["findings"] if f["code"] == "package"]
    assert named in finding["message"]
    assert (
        finding["advice"]
        == "pip install --force-reinstall hostpkg, or pip uninstall hostpkg if it is gone"
    )
    assert report["packages"]["hostpkg"]["error"] == finding["message"]
    assert "kernelpack" in report["packages"]
    assert [gpu["target"] for gpu in report["gpus"]] == ["gfx1032"]


@pytest.mark.parametrize(
    ("offset", "size"),
    [(0, 1 << 50), (1 << 50, 1), (-1, 10), (0, -1), ((1 << 30) - 1, 2)],
    ids=["size-2**50", "offset-2**50", "negative-offset", "negative-size", "ends-past-1-GiB"],
)
def test_an_image_range_no_file_can_hold_is_refused_with_the_index(
    tmp_path: Path, offset: int, size: int
) -> None:
    index = _index(tmp_path)
    image = index["modules"]["ops"]["images"][0]
    image["offset"], image["size"] = offset, size
    with pytest.raises(UsageError, match=r"module 'ops' image 0: bytes .* lie outside any image"):
        check_index(index, tmp_path / "_index.py", "hostpkg")
    image["offset"], image["size"] = 0, 1 << 30  # the largest range that is allowed
    check_index(index, tmp_path / "_index.py", "hostpkg")
