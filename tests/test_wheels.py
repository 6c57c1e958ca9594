"""Wheels: grouping, deterministic writing, and the real `buildsys wheels` run (twice, identical)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from buildsys import REPO_ROOT
from buildsys.index_writer import read_index
from buildsys.matrix import load_matrix
from buildsys.wheels import GPU_RUNTIME_LIBRARIES, device_groups, read_wheel, write_wheel
from kernelpack.formats import read_bundle
from kernelpack.index import Index


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
        }
        for t in targets
    ]
    return {
        "schema": 1,
        "version": "1.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {"m": {"kernels": {}, "source": "", "source_sha256": "", "images": images}},  # type: ignore[typeddict-item]
    }


def test_device_groups_follow_families() -> None:
    targets = [t.target for t in load_matrix().targets]
    groups = {g.name: g.targets for g in device_groups(_index_with(targets))}
    assert groups == {
        "gfx1030": ("gfx1030",),
        "gfx110x": ("gfx1100", "gfx1101"),
        "gfx120x": ("gfx1200", "gfx1201"),
        "gfx90a": ("gfx90a",),
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


@pytest.fixture(scope="module")
def built_wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """`python -m buildsys wheels` run twice into two folders (the main job, as nox runs it)."""
    outs = []
    for name in ("first", "second"):
        out = tmp_path_factory.mktemp(name)
        result = subprocess.run(
            [sys.executable, "-m", "buildsys", "wheels", "--provision", "--out", str(out)],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        outs.append(out)
    return outs[0], outs[1]


@pytest.mark.toolchain
def test_two_builds_are_byte_identical(built_wheels: tuple[Path, Path]) -> None:
    first, second = built_wheels
    names = sorted(p.relative_to(first) for p in first.rglob("*.whl"))
    assert names == sorted(p.relative_to(second) for p in second.rglob("*.whl"))
    assert len(names) == 1 + 1 + 10  # fat, host, one device wheel per group of the matrix
    for name in names:
        assert _sha(first / name) == _sha(second / name), name


@pytest.mark.toolchain
def test_wheel_contents(built_wheels: tuple[Path, Path]) -> None:
    dist = built_wheels[0]
    (fat,) = (dist / "fat").glob("kernelpack-*.whl")
    (host,) = (dist / "split").glob("kernelpack-*.whl")
    fat_files, host_files = read_wheel(fat), read_wheel(host)
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
    assert not [n for n in host_files if n.endswith((".hsaco", ".cubin", ".ptx"))]
    metadata = next(v for k, v in host_files.items() if k.endswith("METADATA")).decode()
    version = host_index["version"]
    assert f'Requires-Dist: kernelpack-device-gfx942=={version}; extra == "gfx942"' in metadata

    (device,) = (dist / "split").glob("kernelpack_device_gfx110x-*.whl")
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
    assert b"[kernelpack.device]\ngfx110x = kernelpack_device_gfx110x" in entry_points
    device_metadata = next(v for k, v in device_files.items() if k.endswith("METADATA")).decode()
    assert f"Requires-Dist: kernelpack=={version}" in device_metadata


MI300X = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kernelpack's own dependencies as wheels, so the installs below need no index."""
    folder = tmp_path_factory.mktemp("wheelhouse")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "-d", str(folder), "numpy", "zstandard"],
        capture_output=True,
        text=True,
    )
    # a test marked network fails offline rather than skipping: deselect it with -m "not network"
    assert result.returncode == 0, f"cannot download numpy, zstandard: {result.stderr[-300:]}"
    return folder


def _fresh_install(venv: Path, *requirements: str, find_links: list[Path]) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    links = [arg for folder in find_links for arg in ("--find-links", str(folder))]
    result = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", *links, *requirements],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return python


def _info(python: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "kernelpack", "info", "--json", "--sysfs-root", str(MI300X)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the source tree: the installed package must be what runs
        env={"PATH": "/usr/bin:/bin", "KERNELPACK_CACHE_DIR": str(tmp_path / "cache")},
    )


def _chosen(report: dict[str, object], module: str) -> list[tuple[str, str]]:
    rows = report["modules"][module]  # type: ignore[index]
    return [(r["image"]["package"], r["image"]["target"]) for r in rows]  # type: ignore[index]


@pytest.mark.toolchain
@pytest.mark.network
def test_fat_wheel_installs_and_selects_the_gfx942_image(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    dist = built_wheels[0]
    python = _fresh_install(tmp_path / "venv", "kernelpack", find_links=[dist / "fat", wheelhouse])
    result = _info(python, tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert len(report["gpus"]) == 8
    for module in ("mlp", "walk"):
        assert _chosen(report, module) == [("kernelpack", "gfx942")] * 8


@pytest.mark.toolchain
@pytest.mark.network
def test_split_wheels_install_through_the_extra(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    dist = built_wheels[0]
    python = _fresh_install(
        tmp_path / "venv", "kernelpack[gfx942]", find_links=[dist / "split", wheelhouse]
    )
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True
    )
    names = {p["name"] for p in json.loads(listed.stdout)}
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
def test_host_wheel_alone_names_the_pip_command(
    built_wheels: tuple[Path, Path], wheelhouse: Path, tmp_path: Path
) -> None:
    dist = built_wheels[0]
    python = _fresh_install(
        tmp_path / "venv", "kernelpack", find_links=[dist / "split", wheelhouse]
    )
    result = _info(python, tmp_path)
    report = json.loads(result.stdout)
    for row in report["modules"]["mlp"]:
        assert row["image"] is None
        assert 'pip install "kernelpack[gfx942]"' in row["instead"]
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
    result = subprocess.run(
        [sys.executable, "-m", "buildsys", "wheels", "--out", str(out), "--merge", *shards],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    direct = built_wheels[0]
    names = sorted(p.relative_to(direct) for p in direct.rglob("*.whl"))
    assert names == sorted(p.relative_to(out) for p in out.rglob("*.whl"))
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
