"""The build cache, the index module and the build settings, without a compiler."""

from __future__ import annotations

import hashlib
import random
import threading
from pathlib import Path

import pytest

from buildsys.cache import BuildCache, stored_record
from buildsys.index_writer import (
    BuiltImage,
    ModuleSources,
    package_files,
    read_index,
    render_index,
    write_output,
)
from kernelpack.errors import FormatError, UsageError
from kernelpack.formats import read_bundle
from kernelpack.formats.index import KernelResources


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_lookup_hits_only_while_every_dependency_hashes_the_same(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    files = {"m/m.hip": "kernel", "include/a.cuh": "header v1"}
    current = {path: digest(text) for path, text in files.items()}
    assert cache.lookup("job", current.get) is None
    cache.store("job", current, b"object v1", {"seconds": 1.5})
    found = cache.lookup("job", current.get)
    assert found is not None and found.data == b"object v1" and found.info["seconds"] == 1.5

    edited = {**current, "include/a.cuh": digest("header v2")}
    assert cache.lookup("job", edited.get) is None
    cache.store("job", edited, b"object v2", {})
    # both versions stay reachable: switching back to the old header costs no compile
    assert cache.lookup("job", current.get).data == b"object v1"  # type: ignore[union-attr]
    assert cache.lookup("job", edited.get).data == b"object v2"  # type: ignore[union-attr]
    gone = {"m/m.hip": current["m/m.hip"]}
    assert cache.lookup("job", gone.get) is None  # a dependency that vanished is a miss
    assert cache.lookup("other job", current.get) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "b": [2]}', {"a": 1, "b": [2]}),
        (b'{"b": null, "a": "x"}', {"a": "x", "b": None}),  # bytes, keys in any order
        ('{"a": 1}', None),  # a key missing
        ('{"a": 1, "b": 2, "c": 3}', None),  # a key too many
        ('[["a", 1], ["b", 2]]', None),  # not an object
        ('"ab"', None),
        ('{"a": 1, "b": 2', None),  # cut short
        ("", None),
        (b'{"a": "\xff", "b": 1}', None),  # not UTF-8
    ],
)
def test_a_stored_record_is_an_object_of_exactly_its_keys(
    text: str | bytes, expected: dict[str, object] | None
) -> None:
    """The reader every cache record goes through (demangling, discovery, trees, the version):
    the cache folder is untrusted, so anything but an object of exactly the keys written reads
    as absent, never as an exception."""
    assert stored_record(text, ("a", "b")) == expected


def test_a_damaged_object_is_a_miss_not_a_wrong_object(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    deps = {"m/m.hip": digest("x")}
    cache.store("job", deps, b"good bytes", {})
    (stored,) = [p for p in (tmp_path / "objects").rglob("*") if p.is_file() and p.suffix == ""]
    stored.write_bytes(b"bad bytes!")
    assert cache.lookup("job", deps.get) is None


def test_concurrent_stores_leave_a_readable_cache(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    rng = random.Random(5)
    payloads = {f"job{i % 4}": rng.randbytes(50_000) for i in range(4)}
    deps = {"m/m.hip": digest("x")}

    def store(job: str) -> None:
        for _ in range(20):
            cache.store(job, deps, payloads[job], {"seconds": 0.1})

    threads = [threading.Thread(target=store, args=(f"job{i % 4}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for job, payload in payloads.items():
        found = cache.lookup(job, deps.get)
        assert found is not None and found.data == payload
    assert not [p for p in tmp_path.rglob("*.tmp")]


def resources(wavefront: int) -> KernelResources:
    return KernelResources(
        registers=8,
        sgpr=4,
        agpr=0,
        lds=0,
        scratch=0,
        spills=0,
        wavefront=wavefront,
        max_workgroup=256,
    )


def sample_package(compress: bool) -> tuple[dict[str, bytes], object]:
    module = ModuleSources(
        "tiny",
        {"k": [{"name": "x", "type": "const float *"}]},
        cuda='extern "C" __global__ void k(const float* x) {}\n',
        hip='#include <hip/hip_runtime.h>\nextern "C" __global__ void k(const float* x) {}\n',
    )
    rng = random.Random(7)
    images = [
        BuiltImage(
            "tiny", "amd", "gfx90a", "code_object", rng.randbytes(3000), {"k": resources(64)}
        ),
        BuiltImage(
            "tiny", "amd", "gfx1100", "code_object", rng.randbytes(5000), {"k": resources(32)}
        ),
        BuiltImage("tiny", "nvidia", "sm_90", "cubin", rng.randbytes(700), {"k": resources(32)}),
    ]
    return package_files(
        [module],
        reversed(images),
        compress=compress,
        version="1.2.3",
        toolchains={"hip": "hipcc X"},
        flags={"code_object": ["-O3"]},
    )


@pytest.mark.parametrize("compress", [True, False], ids=["zstd", "uncompressed"])
def test_index_locates_every_image_in_the_device_files(compress: bool) -> None:
    files, index = sample_package(compress)
    assert isinstance(index, dict)
    module = index["modules"]["tiny"]
    assert [i["target"] for i in module["images"]] == ["gfx1100", "gfx90a", "sm_90"]
    bundle = files["device/tiny.hsaco"]
    assert bundle.startswith(b"CCOB" if compress else b"__CLANG_OFFLOAD_BUNDLE__")
    entries = {e.target: e for e in read_bundle(bundle, "tiny.hsaco")}
    for image in module["images"]:
        if image["kind"] == "code_object":
            entry = entries[image["target"]]
            assert (entry.offset, entry.size) == (image["offset"], image["size"])
            data = entry.data
        else:
            data = files[image["file"]][image["offset"] : image["offset"] + image["size"]]
        assert hashlib.sha256(data).hexdigest() == image["sha256"]
        assert image["compression"] == ("zstd" if compress and image["vendor"] == "amd" else "none")
    assert module["source"] == "device/tiny.cu"
    assert hashlib.sha256(files["device/tiny.cu"]).hexdigest() == module["source_sha256"]


def test_index_module_round_trips_and_imports() -> None:
    _, index = sample_package(True)
    text = render_index(index)  # type: ignore[arg-type]
    assert read_index(text) == index
    namespace: dict[str, object] = {}
    exec(compile(text, "_index.py", "exec"), namespace)
    assert namespace["INDEX"] == index
    with pytest.raises(FormatError):
        read_index("INDEX = 1 +\n")
    with pytest.raises(FormatError):
        read_index("INDEX = {'schema': 999}\n")
    with pytest.raises(TypeError, match="cannot be written"):
        render_index({**index, "flag": True})  # type: ignore[typeddict-unknown-key]


def test_output_folder_keeps_unchanged_files_and_drops_stale_ones(tmp_path: Path) -> None:
    files, index = sample_package(True)
    write_output(tmp_path, files, index, shard={"targets": ["gfx90a"]})  # type: ignore[arg-type]
    assert (tmp_path / "shard.json").exists()
    stale = tmp_path / "device" / "gone.sm_80.cubin"
    stale.write_bytes(b"old")
    keep = tmp_path / "device" / "README.txt"  # not a file the builder owns
    keep.write_text("mine")
    before = (tmp_path / "device" / "tiny.hsaco").stat().st_mtime_ns
    write_output(tmp_path, files, index, shard=None)  # type: ignore[arg-type]
    assert (tmp_path / "device" / "tiny.hsaco").stat().st_mtime_ns == before
    assert not stale.exists() and keep.exists() and not (tmp_path / "shard.json").exists()
    mode = (tmp_path / "_index.py").stat().st_mode & 0o777
    assert mode & 0o044 == 0o044, oct(mode)  # readable by all, like any installed file


def test_a_cache_that_cannot_be_written_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = BuildCache(blocker)  # every write below it fails: a file where a folder must be
    with pytest.raises(UsageError, match=r"file \(--cache-dir / KERNELPACK_BUILD_CACHE_DIR\)"):
        cache.put_text("hipify", "ab" * 32, "text")
    with pytest.raises(UsageError, match="name a writable folder with --cache-dir DIR"):
        cache.store("job", {}, b"object", {})
