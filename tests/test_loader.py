"""The loader without a GPU: selection per device from recorded topologies, the NoImageError,
verification of every image, the disk cache in the loading path, device-wheel fragments, threads
racing the first load, the missing vendor library, and run-time compilation with a real compiler.

The vendor runtime cannot run here (no GPU), so :class:`RecordingRuntime` stands in for it and
records the exact bytes the loader hands over; everything before that call is the real code. The
same paths run against the real CUDA driver in tests/test_runtime_gpu.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from kernelpack.backends import support
from kernelpack.backends.rtc import Compiled
from kernelpack.backends.runtime import SHARED_MEM_UNIT, LoadedModule, Runtime, capping_shared_mem
from kernelpack.cli import main as cli
from kernelpack.devices.detect import Gpu, NvidiaDevice, detect_gpus
from kernelpack.devices.libraries import open_library
from kernelpack.errors import (
    IntegrityError,
    KernelpackWarning,
    NoImageError,
    RuntimeLibraryError,
    UsageError,
)
from kernelpack.formats import compress_bundle, read_bundle, write_bundle
from kernelpack.formats.index import Image, Index
from kernelpack.loader import catalog
from kernelpack.loader.cache import DiskCache
from kernelpack.loader.load import Loader
from kernelpack.loader.oncemap import OnceMap

SYSFS = Path(__file__).parent / "fixtures" / "sysfs"

SOURCE = """__global__ void axpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""
KERNELS: dict[str, Any] = {
    "axpy": [
        {"type": "float*", "offset": 0, "size": 8},
        {"type": "float const*", "offset": 8, "size": 8},
        {"type": "float", "offset": 16, "size": 4},
        {"type": "int", "offset": 20, "size": 4},
    ]
}
AXPY_SYMBOL = "_Z4axpyPfPKffi"  # what nvcc and hipcc name axpy(float*, const float*, float, int)
RESOURCES = {
    "axpy": {
        "registers": 8,
        "sgpr": 0,
        "agpr": 0,
        "lds": 0,
        "scratch": 0,
        "spills": 0,
        "wavefront": 32,
        "max_workgroup": 1024,
    }
}
H100 = NvidiaDevice("NVIDIA H100 80GB HBM3", 9, 0, "0000:19:00.0", "GPU-0", "nvml")


def payload(target: str) -> bytes:
    """Distinct bytes per target, so a test can tell which image reached the runtime."""
    return f"image for {target}\n".encode() * 50


def _image(vendor: str, target: str, kind: str, file: str, data: bytes, **extra: Any) -> Image:
    image: dict[str, Any] = {
        "vendor": vendor,
        "target": target,
        "kind": kind,
        "file": file,
        "offset": 0,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "compression": "none",
        "kernels": RESOURCES,
        "symbols": {"axpy": AXPY_SYMBOL},
    }
    image.update(extra)
    return image  # type: ignore[return-value]


def make_package(
    root: Path,
    *,
    amd: tuple[str, ...] = (),
    nvidia: tuple[str, ...] = (),
    source: str = SOURCE,
    version: str = "1.0",
) -> Index:
    """A package folder like the builder's: one zstd bundle of AMD images, cubins and PTX files."""
    (root / "device").mkdir(parents=True, exist_ok=True)
    if source:
        (root / "device" / "demo.cu").write_text(source)
    images: list[Image] = []
    if amd:
        raw = write_bundle([(f"hipv4-amdgcn-amd-amdhsa--{t}", payload(t)) for t in amd])
        (root / "device" / "demo.hsaco").write_bytes(compress_bundle(raw))
        for entry in read_bundle(raw, "demo"):
            if entry.kind != "host":
                images.append(
                    _image(
                        "amd",
                        entry.target,
                        "code_object",
                        "device/demo.hsaco",
                        entry.data,
                        offset=entry.offset,
                        compression="zstd",
                    )
                )
    for target in nvidia:
        kind = "ptx" if target.startswith("compute_") else "cubin"
        file = f"device/demo.{target}.{kind}"
        (root / file).write_bytes(payload(target))
        images.append(_image("nvidia", target, kind, file, payload(target)))
    return {
        "schema": 2,
        "version": version,
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {
            "demo": {
                "kernels": KERNELS,
                "source": "device/demo.cu" if source else "",
                "source_sha256": hashlib.sha256(source.encode()).hexdigest() if source else "",
                "images": images,
            }
        },
    }


class RecordingRuntime(Runtime):
    """Stands in for the vendor runtime, which needs a GPU: records what the loader hands it."""

    def __init__(self, vendor: str, *, delay: float = 0.0) -> None:
        self.vendor = vendor
        self.library = "recording"
        self.binding = "ctypes"
        self.delay = delay
        self.loads: list[tuple[int, bytes]] = []
        self.jits = 0
        self.launches: list[bytes] = []
        self.functions: list[str] = []  # the symbols looked up

    def version(self) -> str:
        return "1.0"

    def device_count(self) -> int:
        return 8

    def pci_bus_id(self, ordinal: int) -> str:
        return ""

    def load(self, ordinal: int, image: bytes) -> LoadedModule:
        time.sleep(self.delay)
        self.loads.append((ordinal, image))
        return LoadedModule(len(self.loads), ordinal)

    def function(self, module: LoadedModule, name: str) -> int:
        self.functions.append(name)
        return 1000 + module.handle

    def launcher(self, module: LoadedModule, function: int, signature: Any, fail: Any) -> Any:
        def run(
            grid: object, block: object, *args: object, shared_mem: int = 0, stream: object = None
        ) -> None:
            self.launches.append(signature.pack(args))

        return run

    def error_name(self, code: int) -> str:
        return f"error {code}"

    def jit_ptx(self, ordinal: int, ptx: bytes) -> bytes:
        self.jits += 1
        return b"compiled " + ptx


@pytest.fixture(autouse=True)
def no_hip_runtime_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own vendor libraries out of the selection: these tests bring their runtimes
    and GPUs, and a HIP runtime older than ROCm 6.2 on the machine (the GPU machine has one) would
    reject the generic images they expect chosen."""
    versions = dict.fromkeys(("cuda", "hip", "nvrtc", "hiprtc"), "not found")
    monkeypatch.setattr(support, "runtime_versions", lambda: versions)


@pytest.fixture
def cache(tmp_path: Path) -> DiskCache:
    return DiskCache(tmp_path / "cache")


def mixed_machine(environ: dict[str, str] | None = None) -> list[Gpu]:
    """A laptop's gfx1100 and gfx1151 (recorded topology) with an H100 beside them."""
    return detect_gpus(
        sysfs_root=SYSFS / "laptop-gfx1100-gfx1151",
        environ=environ or {},
        nvidia_probe=lambda env: [H100],
    )


def make_loader(
    index: Index, root: Path, gpus: list[Gpu], cache: DiskCache, **kwargs: Any
) -> tuple[Loader, dict[str, RecordingRuntime]]:
    runtimes: dict[str, RecordingRuntime] = {}
    delay = kwargs.pop("delay", 0.0)

    def runtime(vendor: str) -> RecordingRuntime:
        return runtimes.setdefault(vendor, RecordingRuntime(vendor, delay=delay))

    kwargs.setdefault("fragments", list)
    made = Loader(index=index, root=root, gpus=gpus, runtimes=runtime, cache=cache, **kwargs)
    return made, runtimes


ALL_AMD = ("gfx1100", "gfx11-generic", "gfx90a", "gfx1030")
ALL_NVIDIA = ("sm_80", "sm_90", "compute_80")


def test_each_device_gets_its_best_image(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=ALL_AMD, nvidia=ALL_NVIDIA)
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine(), cache)
    expected = {
        "hip:0": ("gfx1100", "amd", 0),
        "hip:1": ("gfx11-generic", "amd", 1),
        "cuda:0": ("sm_90", "nvidia", 0),
    }
    for device, (target, vendor, ordinal) in expected.items():
        module = made.load("demo", device)
        assert module.device == device
        assert module.image.startswith(f"{target} ")
        assert runtimes[vendor].loads[-1] == (ordinal, payload(target))
        assert module.kernel("axpy").info["max_workgroup"] == 1024
    assert "generic" in made.load("demo", "hip:1").why


def test_ptx_compiled_by_the_driver_once_per_machine(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_80", "compute_80"))
    gpus = [g for g in mixed_machine() if g.vendor == "nvidia"]
    first, runtimes = make_loader(index, tmp_path / "pkg", gpus, cache)
    assert first.load("demo").image.startswith("compute_80 ptx")
    assert runtimes["nvidia"].loads == [(0, b"compiled " + payload("compute_80"))]
    assert runtimes["nvidia"].jits == 1
    second, again = make_loader(index, tmp_path / "pkg", gpus, DiskCache(cache.folder))
    second.load("demo")
    assert again["nvidia"].jits == 0
    assert again["nvidia"].loads == [(0, b"compiled " + payload("compute_80"))]


def test_override_makes_a_gfx1031_run_gfx1030_code(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx1030", "gfx1100"))
    fixture = SYSFS / "rx6700-gfx1031"
    plain = detect_gpus(sysfs_root=fixture, environ={})
    made, _ = make_loader(index, tmp_path / "pkg", plain, cache)
    with pytest.raises(NoImageError) as raised:
        made.load("demo")
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in str(raised.value)
    overridden = detect_gpus(sysfs_root=fixture, environ={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"})
    made, runtimes = make_loader(index, tmp_path / "pkg", overridden, cache)
    made.load("demo")
    assert runtimes["amd"].loads == [(0, payload("gfx1030"))]


def test_no_image_error_says_what_to_do(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx90a", "gfx1100"), source="")
    index["device_wheels"] = {"gfx942": "gfx942", "gfx90a": "gfx90a"}
    gpus = detect_gpus(sysfs_root=SYSFS / "mi300x-8gpu", environ={})
    made, _ = make_loader(index, tmp_path / "pkg", gpus, cache)
    with pytest.raises(NoImageError) as raised:
        made.load("demo", 3)
    message = str(raised.value)
    assert "target gfx942" in message
    assert "built for: gfx1100, gfx90a" in message
    assert 'pip install "kernelpack[gfx942]"' in message
    assert "python -m buildsys build --targets gfx942" in message
    assert "KERNELPACK_TARGET" in message
    assert "rejected: built for gfx90a, the GPU is gfx942" in message
    assert "carries no source" in message
    assert raised.value.exit_code == 1


def test_no_image_on_nvidia_suggests_ptx_not_another_cubin(
    tmp_path: Path, cache: DiskCache
) -> None:
    """An sm_80 cubin cannot run on the H100 (9.0), whatever is set; PTX for 9.0 can."""
    index = make_package(tmp_path / "pkg", nvidia=("sm_80",), source="")
    made, _ = make_loader(index, tmp_path / "pkg", mixed_machine(), cache)
    with pytest.raises(NoImageError) as raised:
        made.load("demo", "cuda:0")
    message = str(raised.value)
    assert "fits GPU cuda:0 (nvidia NVIDIA H100 80GB HBM3, target sm_90)" in message
    assert "python -m buildsys build --targets sm_90" in message
    assert (
        "instead: build PTX the driver compiles for it and newer GPUs: python -m buildsys build --targets compute_90"
        in message
    )
    assert "KERNELPACK_TARGET" not in message


def test_debug_logs_every_decision(
    tmp_path: Path,
    cache: DiskCache,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("KERNELPACK_DEBUG", "1")
    index = make_package(tmp_path / "pkg", amd=ALL_AMD, nvidia=ALL_NVIDIA)
    made, _ = make_loader(index, tmp_path / "pkg", mixed_machine(), cache)
    made.load("demo", "hip:1")
    err = capsys.readouterr().err
    for target in (*ALL_AMD, *ALL_NVIDIA):
        assert f"demo on gfx1151: {target} " in err
    assert "selected: generic code for gfx1151" in err
    assert "sha256 verified" in err
    assert "loaded gfx11-generic" in err


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_damaged_package_image_is_refused(tmp_path: Path, cache: DiskCache, damage: str) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    file = tmp_path / "pkg" / "device" / "demo.sm_90.cubin"
    data = bytearray(file.read_bytes())
    if damage == "flip":
        data[7] ^= 0x01
    else:
        del data[-10:]
    file.write_bytes(bytes(data))
    made, runtimes = make_loader(
        index, tmp_path / "pkg", [g for g in mixed_machine() if g.vendor == "nvidia"], cache
    )
    with pytest.raises(IntegrityError, match="reinstall kernelpack") as raised:
        made.load("demo")
    message = str(raised.value)
    if damage == "flip":  # both digests whole: the one of the bytes found and the index's
        recorded = index["modules"]["demo"]["images"][0]["sha256"]
        assert (
            f"sha256 {hashlib.sha256(bytes(data)).hexdigest()}, the index says {recorded}"
            in message
        )
    else:
        assert f"{len(data)} bytes, too short for the {len(data) + 10} bytes at offset 0" in message
    assert raised.value.exit_code == 1
    assert "nvidia" not in runtimes or runtimes["nvidia"].loads == []


def test_compressed_image_comes_from_the_disk_cache(
    tmp_path: Path, cache: DiskCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = make_package(tmp_path / "pkg", amd=ALL_AMD)
    gpus = [g for g in mixed_machine() if g.vendor == "amd"]
    made, _ = make_loader(index, tmp_path / "pkg", gpus, cache)
    made.load("demo", 0)
    key = hashlib.sha256(payload("gfx1100")).hexdigest()
    assert cache.get(key) == payload("gfx1100")

    import kernelpack.formats

    def no_bundles(*args: object) -> None:
        raise AssertionError("the bundle was read again despite the disk cache")

    monkeypatch.setattr(kernelpack.formats, "read_bundle", no_bundles)
    warm, runtimes = make_loader(index, tmp_path / "pkg", gpus, DiskCache(cache.folder))
    warm.load("demo", 0)
    assert runtimes["amd"].loads == [(0, payload("gfx1100"))]


def test_the_default_disk_cache_is_made_when_first_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loader given no cache makes the default one when an image needs it (a compressed
    bundle's here), in KERNELPACK_CACHE_DIR as it is then; a cubin's load makes none, so that it
    imports no cache module (docs/loader.md, "Ready time")."""
    index = make_package(tmp_path / "pkg", amd=ALL_AMD, nvidia=ALL_NVIDIA)
    gpus = mixed_machine()
    runtimes: dict[str, RecordingRuntime] = {}
    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=gpus,
        runtimes=lambda vendor: runtimes.setdefault(vendor, RecordingRuntime(vendor)),
        fragments=list,
    )
    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(tmp_path / "chosen"))
    assert made.load("demo", "cuda:0").image.startswith("sm_90 cubin")
    assert made._cache is None
    made.load("demo", "hip:0")
    assert made.cache is made.cache
    assert made.cache.folder == tmp_path / "chosen"
    key = hashlib.sha256(payload("gfx1100")).hexdigest()
    assert DiskCache(tmp_path / "chosen").get(key) == payload("gfx1100")


def test_tampered_cache_entry_is_removed_and_remade(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=ALL_AMD)
    gpus = [g for g in mixed_machine() if g.vendor == "amd"]
    make_loader(index, tmp_path / "pkg", gpus, cache)[0].load("demo", 0)
    (entry,) = cache.entries()
    data = bytearray(entry.path.read_bytes())
    data[-1] ^= 0xFF
    entry.path.write_bytes(bytes(data))
    again = DiskCache(cache.folder)
    made, runtimes = make_loader(index, tmp_path / "pkg", gpus, again)
    made.load("demo", 0)
    assert again.removed_bad == 1
    assert runtimes["amd"].loads == [(0, payload("gfx1100"))]
    assert again.get(entry.key) == payload("gfx1100")


def test_64_threads_cause_one_load(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    gpus = [g for g in mixed_machine() if g.vendor == "nvidia"]
    made, runtimes = make_loader(index, tmp_path / "pkg", gpus, cache, delay=0.05)
    start = threading.Barrier(64)
    results: list[Any] = []

    def worker() -> None:
        start.wait()
        results.append(made.load("demo"))

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 64
    assert len({id(module) for module in results}) == 1
    assert len(runtimes["nvidia"].loads) == 1


def test_once_map_makes_each_value_once_and_retries_failures() -> None:
    made: OnceMap[str, object] = OnceMap()
    calls: list[str] = []
    start = threading.Barrier(64)

    def maker() -> object:
        calls.append("made")
        time.sleep(0.02)
        return object()

    def worker() -> None:
        start.wait()
        made.get_or_make("key", maker)

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == ["made"]

    def failing() -> object:
        raise RuntimeError("first try fails")

    with pytest.raises(RuntimeError):
        made.get_or_make("other", failing)
    value = made.get_or_make("other", maker)
    assert made.get("other") is value


def test_device_wheel_fragment_is_merged(tmp_path: Path, cache: DiskCache) -> None:
    full = make_package(tmp_path / "device_sm90", nvidia=("sm_90",))
    host = make_package(tmp_path / "host")
    host["device_wheels"] = {"sm_90": "sm90"}
    fragment = json.loads(json.dumps(full))
    fragment["modules"]["demo"]["source"] = ""  # as the wheels builder writes device fragments
    gpus = [g for g in mixed_machine() if g.vendor == "nvidia"]

    def fragments() -> list[tuple[Index, Path, str]]:
        return [(fragment, tmp_path / "device_sm90", "kernelpack_device_sm90")]

    made, runtimes = make_loader(
        index=host, root=tmp_path / "host", gpus=gpus, cache=cache, fragments=fragments
    )
    module = made.load("demo")
    assert "kernelpack_device_sm90" in module.image
    assert runtimes["nvidia"].loads == [(0, payload("sm_90"))]


def test_device_wheel_of_another_version_is_skipped(tmp_path: Path, cache: DiskCache) -> None:
    device = make_package(tmp_path / "device_sm90", nvidia=("sm_90",), version="0.9")
    host = make_package(tmp_path / "host", source="")
    host["device_wheels"] = {"sm_90": "sm90"}
    gpus = [g for g in mixed_machine() if g.vendor == "nvidia"]
    made, _ = make_loader(
        index=host,
        root=tmp_path / "host",
        gpus=gpus,
        cache=cache,
        fragments=lambda: [(device, tmp_path / "device_sm90", "kernelpack_device_sm90")],
    )
    with (
        pytest.warns(KernelpackWarning, match="version 0.9"),
        pytest.raises(NoImageError) as raised,
    ):
        made.load("demo")
    assert 'pip install "kernelpack[sm_90]"' in str(raised.value)


@pytest.fixture
def installed_device_wheel(tmp_path: Path) -> Iterator[Path]:
    """A device wheel as pip installs it: its package and a dist-info with the entry point."""
    site = tmp_path / "site"
    package = site / "kernelpack_device_demo"
    index = make_package(package, nvidia=("sm_90",))
    (package / "__init__.py").write_text("")
    (package / "_index.py").write_text(f"INDEX = {index!r}\n")
    info = site / "kernelpack_device_demo-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kernelpack-device-demo\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[kernelpack.device]\nkernelpack.demo = kernelpack_device_demo\n"
    )
    sys.path.insert(0, str(site))
    yield package
    sys.path.remove(str(site))
    for name in [m for m in sys.modules if m.startswith("kernelpack_device_demo")]:
        del sys.modules[name]


def test_device_wheels_found_through_entry_points(installed_device_wheel: Path) -> None:
    found = catalog.device_fragments()
    mine = [(f, root, origin) for f, root, origin in found if origin == "kernelpack_device_demo"]
    assert len(mine) == 1
    fragment, root, _ = mine[0]
    assert root == installed_device_wheel.resolve()
    assert fragment["modules"]["demo"]["images"][0]["target"] == "sm_90"


def test_missing_vendor_library_is_a_clear_error(tmp_path: Path, cache: DiskCache) -> None:
    with pytest.raises(RuntimeLibraryError, match=r"tried libcuda-absent\.so\.1.*NVIDIA driver"):
        open_library("cuda", ["libcuda-absent.so.1"])
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))

    def runtime(vendor: str) -> Runtime:
        open_library("cuda", ["libcuda-absent.so.1"])
        raise AssertionError("unreachable")

    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=mixed_machine()[2:],
        runtimes=runtime,
        cache=cache,
        fragments=list,
    )
    with pytest.raises(RuntimeLibraryError) as raised:
        made.load("demo")
    assert raised.value.exit_code == 1


def test_unknown_module_kernel_and_device(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    made, _ = make_loader(index, tmp_path / "pkg", mixed_machine(), cache)
    with pytest.raises(UsageError, match="no kernel module 'dmeo' in kernelpack; modules: demo"):
        made.load("dmeo", "cuda:0")
    with pytest.raises(UsageError, match=r"1 cuda device\(s\) visible, cuda:0 to cuda:0"):
        made.load("demo", "cuda:5")
    with pytest.raises(UsageError, match="pass device='cuda:0' or 'hip:0'"):
        made.load("demo", 0)  # AMD and NVIDIA GPUs here: a bare number could mean either
    with pytest.raises(UsageError, match="no kernel 'axpb'; kernels: axpy"):
        made.load("demo", "cuda:0").kernel("axpb")


def test_a_kernel_the_loaded_image_lacks_is_named(tmp_path: Path, cache: DiskCache) -> None:
    """A kernel the build allowed to be missing from some targets (allow-missing-kernels)."""
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    index["modules"]["demo"]["kernels"] = {**KERNELS, "hopper_only": []}
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine()[2:], cache)
    module = made.load("demo")
    with pytest.raises(UsageError, match="'hopper_only' of module demo is not in the image loaded"):
        module.kernel("hopper_only")
    assert runtimes["nvidia"].functions == []


def test_a_name_several_units_define_lists_their_kernels(tmp_path: Path, cache: DiskCache) -> None:
    """Internal kernels of one name in several units are named after their units (docs/loader.md):
    the bare name says which to ask for, and nothing is looked up."""
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    index["modules"]["demo"]["kernels"] = {**KERNELS, "clear@a.cu": [], "clear@b.cu": []}
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine()[2:], cache)
    with pytest.raises(UsageError, match=r"ask for one by its unit: clear@a.cu, clear@b.cu$"):
        made.load("demo").kernel("clear")
    assert runtimes["nvidia"].functions == []


def test_launch_checks_arguments(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_90",))
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine()[2:], cache)
    axpy = made.load("demo").kernel("axpy")
    axpy.launch(4, 256, 0x7000_0000, 0x7100_0000, 2.0, 1000)
    assert len(runtimes["nvidia"].launches) == 1
    assert runtimes["nvidia"].functions == [AXPY_SYMBOL]  # looked up by the image's symbol
    assert axpy.params == KERNELS["axpy"]
    with pytest.raises(UsageError, match="takes 4 arguments, got 3"):
        axpy.signature.pack([1, 2, 3.0])
    with pytest.raises(UsageError, match=r"argument 3 \(int\): 4294967296 is out of range"):
        axpy.signature.pack([1, 2, 3.0, 2**32])


# ---- run-time compilation, with nvcc standing in for NVRTC (same compiler front end) ------------


class NvccCompiler:
    """NVRTC is not installed here; nvcc compiles the same source to the same kind of cubin."""

    def __init__(self, folder: Path) -> None:
        from buildsys.toolchain import cuda_toolchain

        toolchain = cuda_toolchain()  # the nvcc the ``nvcc`` marker found
        assert toolchain is not None
        self.nvcc = str(toolchain.bindir / "nvcc")
        self.folder = folder
        self.compiles = 0

    def version(self) -> str:
        done = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True)
        return f"nvcc {done.stdout.splitlines()[-1]}"

    def compile(self, source: str, name: str, target: str, kernels: Sequence[str] = ()) -> Compiled:
        """Names no kernel: the index's symbols stand, as where NVRTC rejects the names."""
        self.compiles += 1
        src = self.folder / f"{name}.cu"
        src.write_text(source)
        out = self.folder / f"{name}.cubin"
        subprocess.run(
            [self.nvcc, "-cubin", f"-arch={target}", str(src), "-o", str(out)], check=True
        )
        return Compiled(out.read_bytes(), {})


class NamingCompiler:
    """NVRTC stand-in: names the kernels it is asked for as NVRTC's lowered names would (here
    ``lowered_<n>``, so the test can tell them from the index's symbols)."""

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.asked: list[list[str]] = []

    def version(self) -> str:
        return "nvrtc 13.0 (naming)"

    def compile(self, source: str, name: str, target: str, kernels: Sequence[str] = ()) -> Compiled:
        self.asked.append(list(kernels))
        symbols = {k: v for k, v in self.names.items() if k in kernels}
        return Compiled(payload(target), symbols, "" if symbols else "rejected (test)")


class MissingRuntime(RecordingRuntime):
    """A runtime whose images hold no kernel (cuModuleGetFunction: CUDA_ERROR_NOT_FOUND)."""

    def function(self, module: LoadedModule, name: str) -> int:
        raise RuntimeLibraryError(f"cuModuleGetFunction({name}) failed: CUDA_ERROR_NOT_FOUND")


def test_run_time_compiled_kernels_are_looked_up_by_their_compilers_names(
    tmp_path: Path, cache: DiskCache
) -> None:
    """The compiler's symbol for a name wins over the index's (an unnamed namespace's symbol
    carries a hash of the unit that nvcc and NVRTC compute differently); the names come back
    from the disk cache with the object; where the compiler named none, the index's stands."""
    index = make_package(tmp_path / "pkg", nvidia=("sm_80",))  # nothing fits the H100
    gpus = mixed_machine()[2:]
    compiler = NamingCompiler({"axpy": "lowered_axpy"})
    made, runtimes = make_loader(
        index, tmp_path / "pkg", gpus, cache, compilers=lambda vendor: compiler
    )
    with pytest.warns(KernelpackWarning, match="compiled its source with nvrtc"):
        made.load("demo").kernel("axpy")
    assert compiler.asked == [["axpy"]]  # every kernel of the index, by its name
    assert runtimes["nvidia"].functions == ["lowered_axpy"]

    again, runtimes = make_loader(
        index, tmp_path / "pkg", gpus, DiskCache(cache.folder), compilers=lambda vendor: compiler
    )
    with pytest.warns(KernelpackWarning):
        again.load("demo").kernel("axpy")
    assert len(compiler.asked) == 1  # from the cache, names included
    assert runtimes["nvidia"].functions == ["lowered_axpy"]

    silent = NamingCompiler({})
    fresh, runtimes = make_loader(
        index, tmp_path / "pkg", gpus, DiskCache(tmp_path / "c2"), compilers=lambda v: silent
    )
    with pytest.warns(KernelpackWarning):
        fresh.load("demo").kernel("axpy")
    assert runtimes["nvidia"].functions == [AXPY_SYMBOL]


def test_hiprtc_is_asked_for_names_only_where_the_index_has_no_amd_symbols(
    tmp_path: Path, cache: DiskCache
) -> None:
    """clang gives internal kernels the same symbols in every one-file compile, so the index's
    code objects' symbols stand; a package built for NVIDIA only has none for AMD, and hipRTC
    names them (docs/loader.md, "Run-time compilation")."""
    laptop = mixed_machine()[:1]  # gfx1100
    for amd, nvidia, asked, looked_up in [
        (("gfx90a",), (), [], AXPY_SYMBOL),  # the index's gfx90a symbols stand
        ((), ("sm_80",), ["axpy"], "lowered_axpy"),
    ]:
        root = tmp_path / "_".join(amd + nvidia)
        index = make_package(root, amd=amd, nvidia=nvidia)
        compiler = NamingCompiler({"axpy": "lowered_axpy"})
        made, runtimes = make_loader(
            index, root, laptop, DiskCache(root / "cache"), compilers=lambda v, c=compiler: c
        )
        with pytest.warns(KernelpackWarning, match="no prebuilt image of module demo fits gfx1100"):
            made.load("demo").kernel("axpy")
        assert compiler.asked == [asked]
        assert runtimes["amd"].functions == [looked_up]


def test_a_kernel_missing_from_a_run_time_compiled_image_says_how_it_was_looked_up(
    tmp_path: Path, cache: DiskCache
) -> None:
    index = make_package(tmp_path / "pkg", nvidia=("sm_80",))
    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=mixed_machine()[2:],
        runtimes=MissingRuntime,
        compilers=lambda vendor: NamingCompiler({}),  # type: ignore[arg-type,return-value]
        cache=cache,
        fragments=list,
    )
    with pytest.warns(KernelpackWarning):
        module = made.load("demo")
    with pytest.raises(RuntimeLibraryError) as raised:
        module.kernel("axpy")
    message = str(raised.value)
    assert message.startswith(
        f"kernel 'axpy' of module demo: cuModuleGetFunction({AXPY_SYMBOL}) failed: "
        "CUDA_ERROR_NOT_FOUND: the module was compiled at run time (sm_90 compiled by nvrtc 13.0 "
        f"(naming)) and the kernel looked up as '{AXPY_SYMBOL}', the symbol of the prebuilt images"
    )
    assert "rejected (test)" in message and "install the device wheel" in message


@pytest.mark.nvcc
def test_no_prebuilt_image_compiles_the_source_once(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx1100",), nvidia=("sm_80",))
    gpus = mixed_machine()[2:]  # the H100: sm_80 cubins do not run on 9.0, and no PTX was built
    compiler = NvccCompiler(tmp_path)
    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=gpus,
        runtimes=RecordingRuntime,
        compilers=lambda vendor: compiler,  # type: ignore[arg-type,return-value]
        cache=cache,
        fragments=list,
    )
    with pytest.warns(KernelpackWarning, match="compiled its source"):
        module = made.load("demo")
    assert module.image == f"sm_90 compiled by {compiler.version()}"
    assert module.kernel("axpy").info["registers"] > 0
    again = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=gpus,
        runtimes=RecordingRuntime,
        compilers=lambda vendor: compiler,  # type: ignore[arg-type,return-value]
        cache=DiskCache(cache.folder),
        fragments=list,
    )
    with pytest.warns(KernelpackWarning):
        again.load("demo")
    assert compiler.compiles == 1


# ---- the command line ---------------------------------------------------------------------------


@pytest.fixture
def packaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """kernelpack's own index replaced by a test package; the cache in a temporary folder."""
    root = tmp_path / "pkg"
    index = make_package(root, amd=ALL_AMD, nvidia=ALL_NVIDIA)
    monkeypatch.setattr(catalog, "package_index", lambda package: index)
    monkeypatch.setattr(catalog, "package_folder", lambda package: root)
    monkeypatch.setattr(catalog, "device_fragments", lambda package: [])
    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(tmp_path / "cache"))
    for variable in (
        "KERNELPACK_TARGET",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    ):
        monkeypatch.delenv(variable, raising=False)
    return root


def test_info_json_names_the_image_per_gpu(
    packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["info", "--json", "--sysfs-root", str(SYSFS / "laptop-gfx1100-gfx1151")])
    assert status == 0
    report = json.loads(capsys.readouterr().out)
    assert [g["target"] for g in report["gpus"]] == ["gfx1100", "gfx1151"]
    demo = report["packages"]["kernelpack"]["modules"]["demo"]
    assert demo["kernels"] == sorted(KERNELS)
    chosen = [(row["device"], row["image"]["target"]) for row in demo["images"]]
    assert chosen == [("hip:0", "gfx1100"), ("hip:1", "gfx11-generic")]
    assert all(row["image"]["verified"] for row in demo["images"])
    assert report["problems"] == []
    assert set(report["runtimes"]) == {"cuda", "hip", "nvrtc", "hiprtc"}
    assert report["cache"]["folder"] == os.environ["KERNELPACK_CACHE_DIR"]


def test_info_table_says_why_none_fits_and_what_to_do(
    packaged: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["info", "--sysfs-root", str(SYSFS / "mi300x-8gpu")]) == 0
    out = capsys.readouterr().out
    assert out.count("gfx942") >= 8
    assert "none" in out
    # The advice the NoImageError gives, once for the eight identical GPUs (issue 15 item 14).
    devices = ", ".join(f"hip:{n}" for n in range(8))
    assert f"demo (kernelpack) on gfx942:sramecc+:xnack- ({devices}): no prebuilt image fits" in out
    assert out.count("what to do:") == 1
    assert 'pip install "kernelpack[gfx942]"' in out
    assert "python -m buildsys build --targets gfx942" in out
    assert "HSA_OVERRIDE_GFX_VERSION=9.0.10 (runs gfx90a code" in out


def test_info_verifies_each_chosen_image(
    packaged: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A damaged installed image is reported with both digests whole, and info exits 1."""
    monkeypatch.setenv("KERNELPACK_TARGET", "sm_90")  # stands for an NVIDIA GPU: cuda:0
    file = packaged / "device" / "demo.sm_90.cubin"
    data = bytearray(file.read_bytes())
    data[3] ^= 0x20
    file.write_bytes(bytes(data))
    recorded = hashlib.sha256(payload("sm_90")).hexdigest()
    found = hashlib.sha256(bytes(data)).hexdigest()
    laptop = str(SYSFS / "laptop-gfx1100-gfx1151")
    assert cli.main(["info", "--sysfs-root", laptop]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("demo") and "cuda:0" in line)
    assert "DAMAGED" in row
    assert f"has sha256 {found}, the index says {recorded}" in out
    assert out.count("sha256 ok") == 2  # the two AMD GPUs' images were read and are whole
    assert cli.main(["info", "--json", "--sysfs-root", laptop]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    rows = report["packages"]["kernelpack"]["modules"]["demo"]["images"]
    verdicts = {row["device"]: row["image"]["verified"] for row in rows}
    assert verdicts == {"hip:0": True, "hip:1": True, "cuda:0": False}
    assert rows[2]["image"]["sha256"] == recorded
    assert found in captured.err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("INDEX = {'schema': 2, 'version': '1.0', 'modu", "SyntaxError"),
        (
            "INDEX = {'schema': 2, 'version': '1.0', 'build': {}, 'modules': {'demo': 7}}",
            "module 'demo': expected a dict, found int",
        ),
        (
            "INDEX = {'schema': 2, 'version': 1, 'build': {}, 'modules': {}}",
            "'version' is a int, not str",
        ),
        (
            "INDEX = {'schema': 2, 'version': '1.0', 'build': {}, 'modules': {'demo': {'kernels': {},"
            " 'source': '', 'source_sha256': '', 'images': [{'vendor': 'amd'}]}}}",
            "module 'demo' image 0: no key 'target'",
        ),
        ("OTHER = 1", "it defines no INDEX"),
        # issue 44 item 10: what no literal holds, and an import that fails inside the file
        ("true", "NameError: name 'true' is not defined"),
        ("INDEX = true", "NameError: name 'true' is not defined"),
        ("import a_module_nobody_installed", "ModuleNotFoundError"),
        ("INDEX = {}['schema']", "KeyError"),
        (
            "INDEX = {'schema': 2, 'version': '1.0', 'build': {}, 'modules': {'demo': {'kernels':"
            " {}, 'source': '', 'source_sha256': '', 'images': [{'vendor': 'amd', 'target': "
            "'gfx90a', 'kind': 'code_object', 'file': 'device/demo.hsaco', 'offset': 0, 'size': "
            f"{1 << 50}, 'sha256': '{'0' * 64}', 'compression': 'none', 'kernels': {{}}, "
            "'symbols': {}}]}}}",
            "module 'demo' image 0: bytes 0 to 1125899906842624 lie outside any image file",
        ),
    ],
)
def test_a_damaged_installed_index_is_one_line_and_exit_2(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    text: str,
    says: str,
) -> None:
    """A truncated or wrong-typed _index.py (issue 15 item 10), in a real package on sys.path."""
    package = tmp_path / "site" / "damagedpkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_index.py").write_text(text)
    for name in ("damagedpkg", "damagedpkg._index"):  # each case imports its own file
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(catalog, "kernelpack_packages", lambda: ["damagedpkg"])
    monkeypatch.setattr(catalog, "device_fragments", lambda package: [])
    monkeypatch.setenv("KERNELPACK_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["info", "--sysfs-root", str(SYSFS / "two-mi210")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: {package / '_index.py'}: ")
    assert says in err and "reinstall damagedpkg" in err


def test_an_installed_index_file_over_the_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sparse _index.py past INDEX_FILE_LIMIT: refused by its size, before the import reads it."""
    package = tmp_path / "site" / "hugepkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    with open(package / "_index.py", "wb") as file:
        file.truncate(catalog.INDEX_FILE_LIMIT + 1)
    monkeypatch.delitem(sys.modules, "hugepkg", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    with pytest.raises(UsageError, match=r"_index\.py: cannot be read \(OSError: \d+ bytes, over"):
        catalog.package_index("hugepkg")


def test_cache_commands(packaged: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = DiskCache(tmp_path / "cache")
    store.put("a" * 64, b"good")
    store.put("b" * 64, b"will be damaged")
    damaged = store.folder / ("b" * 64 + ".bin")
    damaged.write_bytes(damaged.read_bytes()[:-3])
    assert cli.main(["cache", "path"]) == 0
    assert capsys.readouterr().out.startswith(f"image cache: {tmp_path / 'cache'} (2 entries, ")
    assert cli.main(["cache", "verify", "--json"]) == 0
    verified = json.loads(capsys.readouterr().out)
    assert verified["good"] == 1 and verified["removed"] == [str(damaged)]
    assert cli.main(["cache", "clear", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] == 1
    assert store.entries() == []


class RecordingCompiler:
    """hipRTC stand-in (it runs in tests/test_loader_rocm.py): records what it is asked to build
    and answers with a real code object compiled for that target."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def version(self) -> str:
        return "hiprtc 6.4 (recording)"

    def compile(self, source: str, name: str, target: str, kernels: Sequence[str] = ()) -> Compiled:
        self.asked.append((source, target))
        data = (Path(__file__).parent / "fixtures" / "objects" / f"{target}.co").read_bytes()
        return Compiled(data, {})


def test_amd_compiles_the_hipified_source(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx90a",))
    (tmp_path / "pkg" / "device" / "demo.hip").write_text("// hipified\n" + SOURCE)
    compiler = RecordingCompiler()
    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=mixed_machine()[:1],
        runtimes=RecordingRuntime,
        compilers=lambda vendor: compiler,  # type: ignore[arg-type,return-value]
        cache=cache,
        fragments=list,
    )
    with pytest.warns(KernelpackWarning, match="no prebuilt image of module demo fits gfx1100"):
        module = made.load("demo")
    assert compiler.asked == [("// hipified\n" + SOURCE, "gfx1100")]
    assert module.image == "gfx1100 compiled by hiprtc 6.4 (recording)"
    assert module.kernel_names == ["axpy"]


def test_damaged_source_is_refused(tmp_path: Path, cache: DiskCache) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx90a",))
    (tmp_path / "pkg" / "device" / "demo.cu").write_text(SOURCE + "// changed\n")
    made = Loader(
        index=index,
        root=tmp_path / "pkg",
        gpus=mixed_machine()[:1],
        runtimes=RecordingRuntime,
        compilers=lambda vendor: RecordingCompiler(),  # type: ignore[arg-type,return-value]
        cache=cache,
        fragments=list,
    )
    with pytest.raises(IntegrityError) as raised:
        made.load("demo")
    changed = hashlib.sha256((SOURCE + "// changed\n").encode()).hexdigest()
    recorded = index["modules"]["demo"]["source_sha256"]
    assert f"the source's sha256 is {changed}, the index says {recorded}" in str(raised.value)


def test_device_numbers_follow_the_visible_devices_variables(
    tmp_path: Path, cache: DiskCache
) -> None:
    index = make_package(tmp_path / "pkg", amd=("gfx90a",))
    fixture = SYSFS / "two-mi210"
    both = detect_gpus(sysfs_root=fixture, environ={})
    second = detect_gpus(sysfs_root=fixture, environ={"HIP_VISIBLE_DEVICES": "1"})
    assert [g.location for g in second] == [both[1].location]
    made, runtimes = make_loader(index, tmp_path / "pkg", second, cache)
    module = made.load("demo", 0)
    assert module.gpu.location == both[1].location
    assert runtimes["amd"].loads == [(0, payload("gfx90a"))]  # HIP numbers it 0 after the filter
    with pytest.raises(UsageError, match=r"1 hip device\(s\) visible, hip:0 to hip:0"):
        made.load("demo", 1)


# An sm_90 multiprocessor's shared memory, the driver's reservation a block and the most a block
# may opt in to (cuDeviceGetAttribute on the H200: 233472, 1024, 232448).
SM90_SHARED = 233_472
SM90_RESERVED = 1024
SM90_OPT_IN = 232_448


def occupancy(natural: int, static: int, reserved: int, dynamic: int) -> int:
    """Blocks a multiprocessor holds, as CUDA's occupancy calculator counts them: the fewer of
    what threads and registers allow (``natural``) and what its shared memory holds, a block
    taking its static and dynamic shared memory and the driver's reservation in whole 128-byte
    units."""
    per_block = -(-(static + dynamic + reserved) // 128) * 128
    return min(natural, SM90_SHARED // per_block) if per_block else natural


@pytest.mark.parametrize("static", [0, 256, 4100])
def test_capping_shared_mem_holds_the_blocks_with_the_least(static: int) -> None:
    """The shared memory found holds a multiprocessor to exactly the blocks asked for, and a unit
    less would let one more in; none where registers and threads already allow no more."""
    natural = 6

    def resident(dynamic: int) -> int:
        return occupancy(natural, static, SM90_RESERVED, dynamic)

    most = SM90_OPT_IN - static
    for blocks in range(1, natural):
        shared = capping_shared_mem(resident, blocks, SM90_SHARED, SM90_RESERVED, static, most)
        assert resident(shared) == blocks and 0 < shared <= most
        assert resident(shared - SHARED_MEM_UNIT) > blocks
    for blocks in (natural, natural + 1):
        assert capping_shared_mem(resident, blocks, SM90_SHARED, SM90_RESERVED, static, most) == 0


def test_capping_shared_mem_climbs_where_the_reported_figures_fall_short() -> None:
    """A driver that reserves less a block than it reports holds one block more at the amount the
    reported figures give: the search climbs from there a unit at a time to the count."""

    def resident(dynamic: int) -> int:
        return occupancy(6, 0, 0, dynamic)

    shared = capping_shared_mem(resident, 2, SM90_SHARED, SM90_RESERVED, 0, SM90_OPT_IN)
    assert resident(SM90_SHARED // 3 - SM90_RESERVED + 1) == 3  # where the search starts
    assert resident(shared) == 2 and resident(shared - SHARED_MEM_UNIT) == 3


def test_capping_shared_mem_says_when_no_amount_caps() -> None:
    """Where shared memory does not limit the blocks (a calculator that ignores it), the search
    ends at the most a block may ask for and says so."""
    with pytest.raises(RuntimeLibraryError, match="keeps a multiprocessor to 2 blocks"):
        capping_shared_mem(lambda dynamic: 4, 2, SM90_SHARED, SM90_RESERVED, 0, SM90_OPT_IN)


def test_kernel_caches_its_caps_and_checks_the_counts(tmp_path: Path, cache: DiskCache) -> None:
    """Kernel.shared_mem_for_blocks asks the runtime once per (threads, blocks), and refuses
    counts that are not positive ints; the recording runtime, as HIP's, caps nothing (0)."""
    index = make_package(tmp_path / "pkg", amd=(), nvidia=("sm_90",))
    made, runtimes = make_loader(index, tmp_path / "pkg", mixed_machine(), cache)
    kernel = made.load("demo", "cuda:0").kernel("axpy")
    runtime = runtimes["nvidia"]
    asked: list[tuple[int, int]] = []

    def shared_mem_for_blocks(
        module: LoadedModule, function: int, threads: int, blocks: int
    ) -> int:
        asked.append((threads, blocks))
        return 1000 * blocks

    runtime.shared_mem_for_blocks = shared_mem_for_blocks  # type: ignore[method-assign]
    assert kernel.shared_mem_for_blocks(512, 2) == 2000
    assert kernel.shared_mem_for_blocks(512, 2) == 2000
    assert kernel.shared_mem_for_blocks(256, 3) == 3000
    assert asked == [(512, 2), (256, 3)]
    for bad in (0, -1, 2.0, True):
        with pytest.raises(UsageError, match="must be a positive int"):
            kernel.shared_mem_for_blocks(512, bad)  # type: ignore[arg-type]
    assert Runtime.shared_mem_for_blocks(runtime, LoadedModule(1, 0), 1, 512, 2) == 0
