"""Any kernelpack-built package at run time: found through its entry point, its own device wheels
only (of its own version), load(package=) and info over every package, without a GPU."""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from buildsys.index_writer import render_index
from kernelpack.cli import main as cli
from kernelpack.errors import KernelpackWarning, UsageError
from kernelpack.formats.index import SCHEMA_VERSION, Index
from kernelpack.loader import catalog
from kernelpack.loader import load as loader

SYSFS = Path(__file__).parent / "fixtures" / "sysfs"


def _index(package: str, version: str, targets: list[str], root: Path) -> Index:
    """An index of one module "ops" whose gfx images are small files written under root."""
    images = []
    for target in targets:
        data = f"{package} {target} {version}".encode()
        file = f"device/ops.{target}.co"
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_bytes(data)
        images.append(
            {
                "vendor": "amd",
                "target": target,
                "kind": "code_object",
                "file": file,
                "offset": 0,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "compression": "none",
                "kernels": {},
                "symbols": {},  # kernel name -> symbol (none: the module defines no kernel)
            }
        )
    kernels = {f"{package}_kernel": [{"type": "float*", "offset": 0, "size": 8}]}
    return {  # type: ignore[return-value, typeddict-item]
        "schema": SCHEMA_VERSION,
        "version": version,
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "distribution": package.replace("_", "-"),
        "package": package,
        "modules": {
            "ops": {"kernels": kernels, "source": "", "source_sha256": "", "images": images}
        },
    }


def _install(site: Path, name: str, version: str, index: Index, entry_points: str) -> None:
    """A package folder with its index, and a dist-info that declares its entry points."""
    (site / name / "__init__.py").write_text("")
    (site / name / "_index.py").write_text(render_index(index))
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Two kernelpack-built packages, alpha (1.0) and beta (2.0), each with a gfx942 device wheel,
    and an alpha device wheel of the wrong version (gfx1100)."""
    site = tmp_path / "site"
    made = {
        "alpha": ("1.0", [], "[kernelpack.packages]\nalpha = alpha\n"),
        "beta": ("2.0", [], "[kernelpack.packages]\nbeta = beta\n"),
        "alpha_device_gfx942": (
            "1.0",
            ["gfx942"],
            "[kernelpack.device]\nalpha.gfx942 = alpha_device_gfx942\n",
        ),
        "beta_device_gfx942": (
            "2.0",
            ["gfx942"],
            "[kernelpack.device]\nbeta.gfx942 = beta_device_gfx942\n",
        ),
        "alpha_device_gfx1100": (
            "0.9",
            ["gfx1100"],
            "[kernelpack.device]\nalpha.gfx1100 = alpha_device_gfx1100\n",
        ),
    }
    for name, (version, targets, entry_points) in made.items():
        owner = name.split("_device_")[0]
        (site / name).mkdir(parents=True)
        _install(site, name, version, _index(owner, version, targets, site / name), entry_points)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(tmp_path / "cache"))
    for variable in ("KERNELPACK_TARGET", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(variable, raising=False)
    yield site
    for name in [m for m in sys.modules if m.split(".")[0] in made]:
        del sys.modules[name]


def test_packages_are_found_through_their_entry_point(site: Path) -> None:
    found = catalog.kernelpack_packages()
    assert found[0] == "kernelpack"
    assert [p for p in found if p in ("alpha", "beta")] == ["alpha", "beta"]


def test_a_package_reads_its_own_device_wheels_of_its_own_version(site: Path) -> None:
    assert [o for _, _, o in catalog.device_fragments("beta")] == ["beta_device_gfx942"]
    alpha = loader.Loader(package="alpha", gpus=[])
    with pytest.warns(
        KernelpackWarning, match=r"alpha_device_gfx1100 is version 0\.9, alpha is 1\.0"
    ):
        merged = alpha.catalog(with_device_wheels=True)
    assert merged.origins == ["alpha", "alpha_device_gfx942"]
    assert [entry.origin for entry in merged.images["ops"]] == ["alpha_device_gfx942"]
    assert merged.distribution == "alpha"


def test_load_with_package_routes_to_that_packages_loader(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loader, "_shared", {})
    monkeypatch.setenv("KERNELPACK_TARGET", "gfx942")  # a GPU to resolve; nothing is loaded
    with pytest.raises(UsageError, match="no kernel module 'nope' in beta; modules: ops"):
        loader.load("nope", package="beta")
    alpha, beta = loader.shared_loader("alpha"), loader.shared_loader("beta")
    assert alpha.package == "alpha" and beta.package == "beta"
    assert loader.shared_loader("beta") is beta
    assert alpha._runtimes is beta._runtimes  # one runtime per vendor for the whole process
    with pytest.raises(UsageError, match="package 'gamma': not installed"):
        loader.load("ops", package="gamma")


def test_info_lists_every_package_with_its_kernels_and_images(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelpackWarning)  # alpha's stale device wheel
        status = cli.main(["info", "--json", "--sysfs-root", str(SYSFS / "mi300x-8gpu")])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    for package in ("alpha", "beta"):
        found = report["packages"][package]
        assert found["indexes"] == [package, f"{package}_device_gfx942"]
        assert found["modules"]["ops"]["kernels"] == [f"{package}_kernel"]
        rows = found["modules"]["ops"]["images"]
        assert [(r["image"]["package"], r["image"]["target"]) for r in rows] == [
            (f"{package}_device_gfx942", "gfx942")
        ] * 8
        assert all(r["image"]["verified"] for r in rows)
    assert report["packages"]["beta"]["version"] == "2.0"


def test_the_hint_names_the_packages_own_extra(
    site: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU none of alpha's current device wheels serves, the advice is alpha's pip command."""
    monkeypatch.setattr(catalog, "device_fragments", lambda package: [])
    index = _index("alpha", "1.0", [], site / "alpha")
    index["device_wheels"] = {"gfx942": "gfx942"}
    (site / "alpha" / "_index.py").write_text(render_index(index))
    assert cli.main(["info", "--sysfs-root", str(SYSFS / "mi300x-8gpu")]) == 0
    out = capsys.readouterr().out
    assert 'pip install "alpha[gfx942]"' in out
    assert (
        "kernelpack-build wheels --project <alpha's source folder> --targets gfx942, then pip "
        'install --find-links <that folder>/dist "alpha"'
    ) in out
    assert "buildsys build --project" not in out  # kernelpack's checkout command, not alpha's


def test_doctor_covers_every_package(site: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelpackWarning)  # alpha's stale device wheel
        cli.main(["doctor", "--json", "--sysfs-root", str(SYSFS / "mi300x-8gpu")])
    report = json.loads(capsys.readouterr().out)
    assert {"alpha", "beta"} <= set(report["packages"])
    assert report["packages"]["beta"]["version"] == "2.0"
    for gpu in report["gpus"]:
        for package in ("alpha", "beta"):
            assert gpu["images"][package] == {
                "ops": {"target": "gfx942", "package": f"{package}_device_gfx942"}
            }
            assert package not in gpu["install"]
    assert not [
        f for f in report["findings"] if f["code"] == "no-image" and "alpha" in f["message"]
    ]


def test_doctor_names_the_package_a_gpu_has_no_image_of(
    site: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "device_fragments", lambda package: [])
    index = _index("alpha", "1.0", [], site / "alpha")
    index["device_wheels"] = {"gfx942": "gfx942"}
    (site / "alpha" / "_index.py").write_text(render_index(index))
    assert cli.main(["doctor", "--json", "--sysfs-root", str(SYSFS / "mi300x-8gpu")]) == 1
    report = json.loads(capsys.readouterr().out)
    alpha = [f for f in report["findings"] if f["code"] == "no-image" and "alpha" in f["message"]]
    assert [f["device"] for f in alpha] == list(range(8))
    assert alpha[0]["message"] == "no installed image of alpha fits gfx942:sramecc+:xnack- for ops"
    assert alpha[0]["advice"].startswith('pip install "alpha[gfx942]"')
    assert report["gpus"][0]["install"]["alpha"] == 'pip install "alpha[gfx942]"'
    assert report["gpus"][0]["images"]["alpha"] == {"ops": None}


def test_a_stale_registration_is_reported_alone_and_the_others_listed(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 44 item 11: an entry point naming a package that is gone emptied info for every
    package (exit 2); now that package alone is an error line, and alpha, beta and kernelpack
    are listed."""
    info = site / "gamma-3.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gamma\nVersion: 3.0\n")
    (info / "entry_points.txt").write_text("[kernelpack.packages]\ngamma = gamma\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelpackWarning)  # alpha's stale device wheel
        status = cli.main(["info", "--json", "--sysfs-root", str(SYSFS / "mi300x-8gpu")])
    assert status == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert {"kernelpack", "alpha", "beta", "gamma"} <= set(report["packages"])
    assert report["packages"]["beta"]["modules"]["ops"]["kernels"] == ["beta_kernel"]
    assert report["packages"]["beta"]["error"] is None
    gamma = report["packages"]["gamma"]
    assert gamma["modules"] == {} and gamma["distribution"] == "gamma"
    assert gamma["error"] == (
        "package 'gamma' is registered (entry point group kernelpack.packages, distribution "
        "gamma) but no importable package has that name: reinstall gamma, or uninstall it if it "
        "is gone"
    )
    assert captured.err.splitlines() == [f"error: {gamma['error']}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelpackWarning)
        assert cli.main(["doctor", "--json", "--sysfs-root", str(SYSFS / "mi300x-8gpu")]) == 1
    doctor = json.loads(capsys.readouterr().out)
    assert [f["message"] for f in doctor["findings"] if f["code"] == "package"] == [gamma["error"]]
    assert all(gpu["images"]["beta"] for gpu in doctor["gpus"])
