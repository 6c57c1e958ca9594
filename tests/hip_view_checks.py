"""kernelpack's HIP runtime on the lent GPU through the shim: run only in the HIP view, by
tests/test_hip_shim.py (which sets HIP_VISIBLE_DEVICES=0,0: two HIP devices, both the one GPU).

test_runtime_gpu.py's package (nvcc's cubins of its demo module, relabelled by the view as gfx1100
code objects) is loaded through kernelpack.backends.hip.HipRuntime, opened as a user's would be (libamdhip64
by its soname), and checked with test_runtime_gpu.py's own checks, in both launch bindings: the
C launcher's HIP branch (hipGetDevice / hipSetDevice around hipModuleLaunchKernel) and ctypes.
Then what only HIP has: a module on HIP device 1 launched from a thread on device 0 (the device is
given back), and the runtime's failures reaching the user as RuntimeLibraryError with HIP's names.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from hip_shim import AMD_TARGET, SHIM_NAME, view_index
from test_runtime_gpu import (
    BINDINGS,
    ArrayInterface,
    DLPackOnly,
    build_package,
    check_axpy,
    check_bad_launches,
    check_scalars,
)

from kernelpack.backends.hip import HipRuntime
from kernelpack.devices.detect import Gpu, forced_target
from kernelpack.devices.libraries import library_file
from kernelpack.errors import RuntimeLibraryError
from kernelpack.formats.index import Index
from kernelpack.loader.cache import DiskCache
from kernelpack.loader.load import Loader

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch() -> Any:
    import torch

    return torch


@pytest.fixture(scope="module")
def nvidia_target() -> str:
    from kernelpack.devices.cuda_driver import CudaDriver

    driver = CudaDriver()
    driver.check(driver.init(), "cuInit")
    return "sm_{}{}".format(*driver.compute_capability(0))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, nvidia_target: str) -> tuple[Index, Path]:
    """test_runtime_gpu.py's package, its images the view's gfx1100 code objects."""
    root = tmp_path_factory.mktemp("demo")
    index = build_package(root, nvcc=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    return view_index(index, nvidia_target, modules={"demo"}), root


@pytest.fixture(scope="module")
def shim() -> Any:
    """The shim as loaded in this process (the instance kernelpack opened by its soname)."""
    lib = ctypes.CDLL(SHIM_NAME)
    for name in ("hip_over_cuda_launches", "hip_over_cuda_loads"):
        getattr(lib, name).restype = ctypes.c_longlong
    return lib


def amd_gpus(count: int) -> list[Gpu]:
    """``count`` AMD GPUs of the view's target, hip:0 to hip:count-1, each as KERNELPACK_TARGET's
    stand-in for device 0 is (found by no PCI address: the runtime's ordinal is the index)."""
    override = f"KERNELPACK_TARGET={AMD_TARGET}"
    stand_in = Gpu(0, "amd", forced_target(AMD_TARGET), "", "", "", None, "", "", override)
    return [stand_in._replace(index=index) for index in range(count)]


def hip_loader(
    package: tuple[Index, Path], tmp_path: Path, *, binding: str | None = None, gpus: int = 1
) -> Loader:
    index, root = package
    return Loader(
        index=index,
        root=root,
        gpus=amd_gpus(gpus),
        runtimes=lambda vendor: HipRuntime(binding=binding),
        cache=DiskCache(tmp_path),
        fragments=list,
    )


def current_device(shim: Any) -> int:
    device = ctypes.c_int(-1)
    assert shim.hipGetDevice(ctypes.byref(device)) == 0
    return device.value


def test_the_hip_runtime_is_the_shim_seeing_the_gpu_twice(shim: Any) -> None:
    from kernelpack.devices.cuda_driver import CudaDriver

    runtime = HipRuntime()
    assert runtime.library == SHIM_NAME
    assert library_file(shim, "hipInit") == os.path.realpath(os.environ["KERNELPACK_HIP_SHIM"])
    assert runtime.version() == "7.0.0"
    assert os.environ["HIP_VISIBLE_DEVICES"] == "0,0"
    assert runtime.device_count() == 2
    cuda = CudaDriver()
    cuda.check(cuda.init(), "cuInit")
    assert runtime.pci_bus_id(0).lower() == runtime.pci_bus_id(1).lower()
    assert runtime.pci_bus_id(0).lower() == cuda.pci_bus_id(0).lower()


@pytest.mark.parametrize("binding", BINDINGS)
def test_cubin_through_hip(
    demo: tuple[Index, Path], tmp_path: Path, torch: Any, shim: Any, binding: str
) -> None:
    loader = hip_loader(demo, tmp_path, binding=binding)
    module = loader.load("demo", "hip:0")
    assert module.image.startswith(f"{AMD_TARGET} code_object")
    assert module.device == "hip:0"
    assert loader.runtime("amd").binding == binding
    kernel = module.kernel("axpy")
    before = shim.hip_over_cuda_launches(0)
    check_axpy(torch, kernel, 100_003, stream=torch.cuda.Stream())
    check_axpy(torch, kernel, 1)
    assert shim.hip_over_cuda_launches(0) == before + 2


@pytest.mark.parametrize("binding", BINDINGS)
def test_arguments_through_hip(
    demo: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str
) -> None:
    """Every scalar type packed exactly, every kind of pointer, a C-linkage and a namespaced
    template kernel by name."""
    module = hip_loader(demo, tmp_path, binding=binding).load("demo", "hip:0")
    check_scalars(torch, module.kernel("scalars"))
    for convert in (lambda t: t, lambda t: t.data_ptr(), ArrayInterface, DLPackOnly):
        check_axpy(torch, module.kernel("axpy"), 4099, convert=convert)
    n = 3000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    expected = y.double() + x.double()
    module.kernel("ops::add<float>").launch((n + 255) // 256, 256, y, x, n)
    module.kernel("nothing").launch(1, 1)
    torch.cuda.synchronize()
    assert torch.equal(y.double(), expected.float().double())


@pytest.mark.parametrize("binding", BINDINGS)
def test_a_module_on_hip_device_1_gives_each_thread_its_device_back(
    demo: tuple[Index, Path], tmp_path: Path, torch: Any, shim: Any, binding: str
) -> None:
    """HIP device 1 (the GPU again, HIP_VISIBLE_DEVICES=0,0): the module loads there, each launch
    runs with device 1 current, and the calling thread's device (0, or 1 where it set it) is its
    own again after; a fresh thread (device 0, HIP's default) too."""
    loader = hip_loader(demo, tmp_path, binding=binding, gpus=2)
    loads = shim.hip_over_cuda_loads(1)
    module = loader.load("demo", "hip:1")
    assert module.device == "hip:1"
    assert shim.hip_over_cuda_loads(1) == loads + 1
    kernel = module.kernel("axpy")
    on_0, on_1 = shim.hip_over_cuda_launches(0), shim.hip_over_cuda_launches(1)
    assert current_device(shim) == 0
    check_axpy(torch, kernel, 5000)
    assert current_device(shim) == 0
    assert (shim.hip_over_cuda_launches(0), shim.hip_over_cuda_launches(1)) == (on_0, on_1 + 1)
    seen: list[int] = []

    def worker() -> None:
        seen.append(current_device(shim))
        check_axpy(torch, kernel, 777)
        seen.append(current_device(shim))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [0, 0]
    on_device_0 = hip_loader(demo, tmp_path, binding=binding, gpus=2).load("demo", "hip:0")
    assert shim.hipSetDevice(1) == 0
    try:
        check_axpy(torch, on_device_0.kernel("axpy"), 5000)
        assert current_device(shim) == 1
    finally:
        assert shim.hipSetDevice(0) == 0
    assert (shim.hip_over_cuda_launches(0), shim.hip_over_cuda_launches(1)) == (
        on_0 + 1,
        on_1 + 2,
    )


def test_bad_launches_say_why_with_hips_error_names(
    demo: tuple[Index, Path], tmp_path: Path, torch: Any
) -> None:
    kernel = hip_loader(demo, tmp_path).load("demo", "hip:0").kernel("axpy")
    check_bad_launches(torch, kernel)
    y = torch.zeros(4, device="cuda")
    with pytest.raises(RuntimeLibraryError, match=r"^launch of axpy failed: hipError\w+ \(\d+\)"):
        kernel.launch(1, 2048, y, y, 1.0, 4)


def test_runtime_failures_reach_the_user_with_hips_error_names(
    demo: tuple[Index, Path], tmp_path: Path
) -> None:
    """A kernel the image lacks, a device HIP does not number, an image the runtime refuses
    (through kernelpack.load's own path: selection, the sha256 check, then hipModuleLoadData)."""
    index, root = demo
    image = index["modules"]["demo"]["images"][0]
    runtime = HipRuntime()
    loaded = runtime.load(0, (root / image["file"]).read_bytes())
    with pytest.raises(
        RuntimeLibraryError,
        match=r"^hipModuleGetFunction\(no_such_kernel\) failed: hipErrorNotFound \(500\)$",
    ):
        runtime.function(loaded, "no_such_kernel")
    with pytest.raises(
        RuntimeLibraryError, match=r"^hipSetDevice\(2\) failed: hipErrorInvalidDevice \(101\)$"
    ):
        runtime.load(2, (root / image["file"]).read_bytes())
    garbage = b"\x7fELF" + bytes(range(256)) * 4
    (tmp_path / "broken.co").write_bytes(garbage)
    broken: Index = {
        **index,
        "modules": {
            "broken": {
                **index["modules"]["demo"],
                "images": [
                    {
                        **image,
                        "file": "broken.co",
                        "size": len(garbage),
                        "sha256": hashlib.sha256(garbage).hexdigest(),
                    }
                ],
            }
        },
    }
    with pytest.raises(
        RuntimeLibraryError, match=r"^hipModuleLoadData failed: hipError\w+ \(\d+\)$"
    ):
        hip_loader((broken, tmp_path), tmp_path).load("broken", "hip:0")
