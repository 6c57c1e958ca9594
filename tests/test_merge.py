"""``python -m buildsys merge``: shards into one output, and the shards it must refuse.

The refusals are checked on shards written by the builder's own writer from stand-in images (no
compiler needed: merge never looks inside an image beyond its bundle entry and sha256); one test
merges real per-target shards and compares the result with a build of all targets at once.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from build_project import AMD_TARGETS, Project, compiled, make_project, snapshot

from buildsys.index_writer import (
    BuiltImage,
    ModuleSources,
    package_files,
    shard_manifest,
    write_output,
)
from buildsys.merge import merge
from buildsys.toolchain import Toolchain
from kernelpack.errors import IntegrityError, UsageError
from kernelpack.formats.index import KernelResources

MATRIX = '[amd]\ntargets = ["gfx90a", "gfx1100"]\n[nvidia]\ntargets = ["sm_90"]\n'
KIND = {"gfx90a": "code_object", "gfx1100": "code_object", "sm_90": "cubin"}


def write_shard(
    folder: Path,
    targets: list[str],
    *,
    source: str = 'extern "C" __global__ void k(float* y) {}\n',
    toolchain: str = "hipcc 1",
) -> Path:
    resources = KernelResources(
        registers=4, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=64
    )
    images = [
        BuiltImage(
            "m",
            "amd" if t.startswith("gfx") else "nvidia",
            t,
            KIND[t],
            random.Random(t).randbytes(900),
            {"k": resources},
        )
        for t in targets
    ]
    toolchains = {}
    if any(t.startswith("gfx") for t in targets):
        toolchains["hip"] = toolchain
    if "sm_90" in targets:
        toolchains["cuda"] = "nvcc 13"
    files, index = package_files(
        [ModuleSources("m", {"k": [{"name": "y", "type": "float *"}]}, source, "hip " + source)],
        images,
        compress=True,
        version="2.0.0",
        toolchains=toolchains,
        flags={KIND[t]: ["-O3"] for t in targets},
    )
    write_output(folder, files, index, shard=shard_manifest(index, targets))
    return folder


@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(MATRIX)
    return path


@pytest.fixture
def shards(tmp_path: Path) -> dict[str, Path]:
    return {t: write_shard(tmp_path / t, [t]) for t in ("gfx90a", "gfx1100", "sm_90")}


def test_merged_output_equals_one_writer_run_over_all_images(
    tmp_path: Path, matrix: Path, shards: dict[str, Path]
) -> None:
    out = tmp_path / "merged"
    merge(list(shards.values()), out, matrix=matrix)
    whole = write_shard(tmp_path / "whole", ["gfx90a", "gfx1100", "sm_90"])
    (whole / "shard.json").unlink()
    assert snapshot(out) == snapshot(whole)


def test_missing_shards_are_named(tmp_path: Path, matrix: Path, shards: dict[str, Path]) -> None:
    with pytest.raises(UsageError, match=r"missing shards for gfx1100 \(the matrix asks"):
        merge([shards["gfx90a"], shards["sm_90"]], tmp_path / "out", matrix=matrix)
    assert not (tmp_path / "out").exists()


def test_duplicated_shards_are_named(tmp_path: Path, matrix: Path, shards: dict[str, Path]) -> None:
    again = tmp_path / "again"
    shutil.copytree(shards["gfx90a"], again)
    with pytest.raises(
        UsageError, match=rf"duplicated target gfx90a: in shards .*gfx90a and {again}"
    ):
        merge([*shards.values(), again], tmp_path / "out", matrix=matrix)
    with pytest.raises(UsageError, match="duplicated shard"):
        merge([*shards.values(), shards["sm_90"]], tmp_path / "out", matrix=matrix)


def test_shards_from_other_sources_are_refused(
    tmp_path: Path, matrix: Path, shards: dict[str, Path]
) -> None:
    edited = write_shard(
        tmp_path / "edited",
        ["gfx1100"],
        source='extern "C" __global__ void k(float* y) {y[0]=1;}\n',
    )
    with pytest.raises(
        UsageError,
        match=rf"inconsistent shards .*gfx90a and {edited}: built from other sources \(modules m\)",
    ):
        merge([shards["gfx90a"], edited, shards["sm_90"]], tmp_path / "out", matrix=matrix)


def test_shards_from_another_toolchain_are_refused(
    tmp_path: Path, matrix: Path, shards: dict[str, Path]
) -> None:
    other = write_shard(tmp_path / "other", ["gfx1100"], toolchain="hipcc 2")
    with pytest.raises(UsageError, match=r"hip toolchain 'hipcc 1' and 'hipcc 2'"):
        merge([shards["gfx90a"], other, shards["sm_90"]], tmp_path / "out", matrix=matrix)


def test_a_folder_that_is_not_a_shard_is_refused(tmp_path: Path, matrix: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match=r"empty: not a build shard \(no shard.json\)"):
        merge([tmp_path / "empty"], tmp_path / "out", matrix=matrix)


def test_a_damaged_image_is_refused(tmp_path: Path, matrix: Path, shards: dict[str, Path]) -> None:
    cubin = shards["sm_90"] / "device" / "m.sm_90.cubin"
    data = bytearray(cubin.read_bytes())
    data[100] ^= 1
    cubin.write_bytes(bytes(data))
    with pytest.raises(IntegrityError, match=r"m\.sm_90\.cubin: the sm_90 cubin .* has sha256"):
        merge(list(shards.values()), tmp_path / "out", matrix=matrix)


def test_the_manifest_names_sources_and_toolchain(shards: dict[str, Path]) -> None:
    manifest = json.loads((shards["gfx90a"] / "shard.json").read_text())
    assert manifest["targets"] == ["gfx90a"]
    assert manifest["toolchains"] == {"hip": "hipcc 1"}
    assert set(manifest["sources"]) == {"m"} and manifest["version"] == "2.0.0"


@pytest.mark.toolchain
def test_real_shards_merge_into_the_full_build(tmp_path: Path, amd_toolchain: Toolchain) -> None:
    project: Project = make_project(tmp_path)
    full = project.build()
    assert compiled(full) == {(m, t) for m in ("other", "tiny") for t in AMD_TARGETS}
    shard_dirs = []
    for target in AMD_TARGETS:
        shard_dirs.append(tmp_path / f"shard-{target}")
        assert compiled(project.build(targets=(target,), out=shard_dirs[-1])) == set()
    merge(shard_dirs, tmp_path / "merged", matrix=project.settings.matrix)
    assert snapshot(tmp_path / "merged") == snapshot(project.settings.out)
