"""The loader on a real NVIDIA GPU: cubin, PTX and run-time compiled paths, both launch bindings,
every way of passing a pointer, a tampered cache, 64 threads racing the first load.

The package is built here with nvcc, as the builder does (cubins per sm target, PTX for the oldest
compute target, kernels discovered from the objects by the builder's own code). Its
three modules share one source and differ in what was built, so each takes another path:
``demo`` (sm_80, sm_90, compute_80: the sm_90 cubin), ``demo_ptx`` (sm_80, compute_80: PTX compiled
by the driver) and ``demo_src`` (sm_80 only: the source compiled by NVRTC).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kernelpack.errors import KernelpackWarning, RuntimeLibraryError, UsageError
from kernelpack.formats.index import Image, Index
from kernelpack.loader.cache import DiskCache

SOURCE = r"""
__global__ void axpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

extern "C" __global__ void add(float *y, const float *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

namespace ops {
template <typename T>
__global__ void add(T *y, const T *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
template __global__ void add<float>(float *, const float *, int);
}  // namespace ops

extern "C" __global__ void nothing() {}

// Each block counts itself in on its SM, notes the most counted in at once, holds the SM for
// `spin` cycles (all its threads wait at the barrier) and counts itself out.
extern "C" __global__ void resident(unsigned *count, unsigned *most, long long spin) {
    if (threadIdx.x == 0) {
        unsigned sm;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
        atomicMax(&most[sm], atomicAdd(&count[sm], 1u) + 1u);
        long long start = clock64();
        while (clock64() - start < spin) {
        }
        atomicSub(&count[sm], 1u);
    }
    __syncthreads();
}

__global__ void scalars(long long *ints, double *reals, signed char a, unsigned char b,
                                   short c, unsigned short d, int e, unsigned int f, long long g,
                                   unsigned long long h, float i, double j, bool k) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ints[0] = a; ints[1] = b; ints[2] = c; ints[3] = d; ints[4] = e; ints[5] = f;
        ints[6] = g; ints[7] = (long long)h; ints[8] = k;
        reals[0] = i; reals[1] = j;
    }
}
"""

MODULES = {
    "demo": ("sm_80", "sm_90", "compute_80"),
    "demo_ptx": ("sm_80", "compute_80"),
    "demo_src": ("sm_80",),
}


def build_package(root: Path, *, nvcc: str = "nvcc") -> Index:
    """A package folder and its index for the modules above, compiled by nvcc; the kernels
    discovered from the objects and named by the builder's own code (buildsys.discovery)."""
    from buildsys.demangling import demangle, find_demangler
    from buildsys.discovery import ImageKernels, name_kernels, object_kernels

    device = root / "device"
    device.mkdir(parents=True, exist_ok=True)
    (device / "demo.cu").write_text(SOURCE)
    built: dict[str, Image] = {}
    found: list[ImageKernels] = []
    targets = sorted({t for targets in MODULES.values() for t in targets})
    for target in targets:
        kind = "ptx" if target.startswith("compute_") else "cubin"
        out = device / f"demo.{target}.{kind}"
        flag = "-ptx" if kind == "ptx" else "-cubin"
        subprocess.run(
            [nvcc, flag, f"-arch={target}", "-O3", str(device / "demo.cu"), "-o", str(out)],
            check=True,
        )
        data = out.read_bytes()
        found.append(ImageKernels("demo", "nvidia", target, object_kernels(kind, data, target)[1]))
        built[target] = {
            "vendor": "nvidia",
            "target": target,
            "kind": kind,  # type: ignore[typeddict-item]
            "file": f"device/{out.name}",
            "offset": 0,
            "size": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "compression": "none",
            "kernels": {},
            "symbols": {},
        }
    symbols = {k.symbol for image in found for k in image.kernels}
    named = name_kernels(found, demangle(symbols, find_demangler()), targets)["demo"]
    for target, image in built.items():
        image["symbols"] = named.symbols[target]
        image["kernels"] = named.resources[target] if image["kind"] == "cubin" else {}
    assert sorted(named.params) == [
        "add",
        "axpy",
        "nothing",
        "ops::add<float>",
        "resident",
        "scalars",
    ]
    return {
        "schema": 2,
        "version": "0.0.0",
        "build": {"toolchains": {"cuda": "nvcc"}, "flags": {}, "sources": {}},
        "modules": {
            name: {
                "kernels": named.params,
                "source": "device/demo.cu",
                "source_sha256": hashlib.sha256(SOURCE.encode()).hexdigest(),
                "images": [built[t] for t in targets],
            }
            for name, targets in MODULES.items()
        },
    }


@pytest.fixture(scope="session")
def package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Index, Path]:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    root = tmp_path_factory.mktemp("package")
    return build_package(root, nvcc=nvcc), root


@pytest.fixture(scope="session")
def torch() -> Any:
    return pytest.importorskip("torch")


class Counting:
    """Wraps a runtime or compiler, counting calls to one method (the rest pass through)."""

    def __init__(self, inner: Any, method: str) -> None:
        self._inner = inner
        self._method = method
        self.calls = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._inner, name)
        if name != self._method:
            return attribute

        def counted(*args: Any) -> Any:
            with self._lock:
                self.calls += 1
            return attribute(*args)

        return counted


def make_loader(
    package: tuple[Index, Path],
    cache: DiskCache,
    *,
    binding: str | None = None,
    wrap: Callable[[Any], Any] = lambda r: r,
    compilers: Any = None,
) -> Any:
    from kernelpack.backends.cuda import CudaRuntime
    from kernelpack.loader.load import Loader

    index, root = package
    return Loader(
        index=index,
        root=root,
        runtimes=lambda vendor: wrap(CudaRuntime(binding=binding)),
        compilers=compilers,
        cache=cache,
        fragments=list,
    )


def native_built() -> bool:
    try:
        from kernelpack.backends import _launcher  # noqa: F401
    except ImportError:
        return False
    return True


BINDINGS = [
    "ctypes",
    pytest.param(
        "native",
        marks=pytest.mark.skipif(
            not native_built(), reason="kernelpack.backends._launcher not built"
        ),
    ),
]


def check_axpy(
    torch: Any,
    kernel: Any,
    n: int,
    *,
    stream: Any = None,
    convert: Callable[[Any], Any] = lambda t: t,
) -> None:
    """y += a*x on fresh random data, against float64, with y's tail poisoned past n."""
    x = torch.randn(n + 64, device="cuda")
    y = torch.randn(n + 64, device="cuda")
    y[n:] = float("nan")
    a = float(torch.randn(()).item())
    expected = y[:n].double() + a * x[:n].double()
    kernel.launch((n + 255) // 256, 256, convert(y), convert(x), a, n, stream=stream)
    torch.cuda.synchronize()
    error = (y[:n].double() - expected).norm() / expected.norm()
    assert error < 1e-6
    assert torch.isnan(y[n:]).all()  # nothing written past n


@pytest.mark.gpu
@pytest.mark.parametrize("binding", BINDINGS)
def test_cubin_path(package: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str) -> None:
    loader = make_loader(package, DiskCache(tmp_path), binding=binding)
    module = loader.load("demo")
    assert module.image.startswith("sm_90 cubin")
    assert loader.runtime("nvidia").binding == binding
    kernel = module.kernel("axpy")
    assert kernel.info["registers"] > 0 and kernel.info["max_workgroup"] == 1024
    stream = torch.cuda.Stream()
    check_axpy(torch, kernel, 100_003, stream=stream)
    check_axpy(torch, kernel, 1)


class ArrayInterface:
    """An object offering only __cuda_array_interface__ (Numba, JAX and others hand these over)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class DLPackOnly:
    """An object offering only DLPack."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self.tensor.__dlpack_device__()


@pytest.mark.gpu
@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize("kind", ["tensor", "int", "cai", "dlpack", "cupy"])
def test_every_kind_of_pointer(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str, kind: str
) -> None:
    kernel = make_loader(package, DiskCache(tmp_path), binding=binding).load("demo").kernel("axpy")
    if kind == "cupy":
        cupy = pytest.importorskip("cupy")
        convert: Callable[[Any], Any] = cupy.asarray
    else:
        convert = {
            "tensor": lambda t: t,
            "int": lambda t: t.data_ptr(),
            "cai": ArrayInterface,
            "dlpack": DLPackOnly,
        }[kind]
    check_axpy(torch, kernel, 4099, convert=convert)
    offset = torch.zeros(10, device="cuda")[3:]  # a view: the pointer must include its offset
    kernel.launch(1, 32, convert(offset), convert(torch.ones(7, device="cuda")), 2.0, 7)
    torch.cuda.synchronize()
    assert offset.tolist() == [2.0] * 7


@pytest.mark.gpu
@pytest.mark.parametrize("module_name", ["demo", "demo_ptx", "demo_src"])
def test_template_and_c_linkage_kernels_by_name(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, module_name: str
) -> None:
    """A namespaced template instance by its demangled name (the image's mangled symbol under
    it) and a C-linkage kernel by its plain name, on the cubin, PTX and run-time paths."""
    with pytest.warns() if module_name == "demo_src" else contextlib.nullcontext():
        module = make_loader(package, DiskCache(tmp_path)).load(module_name)
    n = 3000
    x = torch.randn(n, device="cuda")
    y = torch.randn(n + 32, device="cuda")
    y[n:] = float("nan")
    expected = y[:n].double() + x.double()
    module.kernel("ops::add<float>").launch((n + 255) // 256, 256, y, x, n)
    module.kernel("nothing").launch(1, 1)
    torch.cuda.synchronize()
    assert torch.equal(y[:n].double(), expected.float().double())
    assert torch.isnan(y[n:]).all()


def check_scalars(torch: Any, kernel: Any) -> None:
    """Random values of every scalar C type the launcher packs reach ``scalars`` exactly."""
    import random

    ints = torch.full((9,), -7, dtype=torch.int64, device="cuda")
    reals = torch.full((2,), float("nan"), dtype=torch.float64, device="cuda")
    rng = random.Random()
    values = [
        rng.randint(-128, 127),
        rng.randint(0, 255),
        rng.randint(-(2**15), 2**15 - 1),
        rng.randint(0, 2**16 - 1),
        rng.randint(-(2**31), 2**31 - 1),
        rng.randint(0, 2**32 - 1),
        rng.randint(-(2**63), 2**63 - 1),
        rng.randint(0, 2**64 - 1),
        rng.uniform(-1e6, 1e6),
        rng.uniform(-1e300, 1e300),
        rng.random() < 0.5,
    ]
    kernel.launch(1, 1, ints, reals, *values)
    torch.cuda.synchronize()
    expected_ints = [
        *values[:7],
        values[7] - 2**64 if values[7] >= 2**63 else values[7],
        int(values[10]),
    ]
    assert ints.tolist() == expected_ints
    assert reals[0].item() == ctypes.c_float(values[8]).value
    assert reals[1].item() == values[9]


@pytest.mark.gpu
@pytest.mark.parametrize("binding", BINDINGS)
def test_scalars_reach_the_kernel_exactly(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str
) -> None:
    kernel = (
        make_loader(package, DiskCache(tmp_path), binding=binding).load("demo").kernel("scalars")
    )
    check_scalars(torch, kernel)


@pytest.mark.gpu
def test_ptx_path_compiles_once_per_machine(
    package: tuple[Index, Path], tmp_path: Path, torch: Any
) -> None:
    first = make_loader(package, DiskCache(tmp_path), wrap=lambda r: Counting(r, "jit_ptx"))
    module = first.load("demo_ptx")
    assert module.image.startswith("compute_80 ptx")
    assert first.runtime("nvidia").calls == 1
    check_axpy(torch, module.kernel("axpy"), 5000)
    second = make_loader(package, DiskCache(tmp_path), wrap=lambda r: Counting(r, "jit_ptx"))
    check_axpy(torch, second.load("demo_ptx").kernel("axpy"), 5000)
    assert second.runtime("nvidia").calls == 0


def nvrtc_or_skip() -> Any:
    from kernelpack.backends.rtc import open_compiler

    try:
        return open_compiler("nvidia")
    except RuntimeLibraryError as error:
        pytest.skip(str(error))


@pytest.mark.gpu
def test_source_compiled_when_no_image_fits_and_a_tampered_cache_remade(
    package: tuple[Index, Path], tmp_path: Path, torch: Any
) -> None:
    compiler = Counting(nvrtc_or_skip(), "compile")
    loader = make_loader(package, DiskCache(tmp_path), compilers=lambda vendor: compiler)
    with pytest.warns(KernelpackWarning, match="compiled its source with nvrtc"):
        module = loader.load("demo_src")
    assert "compiled by nvrtc" in module.image
    check_axpy(torch, module.kernel("axpy"), 3000)
    assert compiler.calls == 1

    again = make_loader(package, DiskCache(tmp_path), compilers=lambda vendor: compiler)
    with pytest.warns(KernelpackWarning):
        check_axpy(torch, again.load("demo_src").kernel("axpy"), 3000)
    assert compiler.calls == 1

    cache = DiskCache(tmp_path)
    (entry,) = cache.entries()
    data = bytearray(entry.path.read_bytes())
    data[len(data) // 2] ^= 0x40
    entry.path.write_bytes(bytes(data))
    remade = make_loader(package, cache, compilers=lambda vendor: compiler)
    with pytest.warns(KernelpackWarning):
        check_axpy(torch, remade.load("demo_src").kernel("axpy"), 3000)
    assert cache.removed_bad == 1 and compiler.calls == 2


@pytest.mark.gpu
def test_64_threads_race_the_first_load(
    package: tuple[Index, Path], tmp_path: Path, torch: Any
) -> None:
    loader = make_loader(package, DiskCache(tmp_path), wrap=lambda r: Counting(r, "load"))
    start = threading.Barrier(64)
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait()
            check_axpy(torch, loader.load("demo").kernel("axpy"), 1000)
        except BaseException as error:  # reported below, with the thread's own traceback lost
            failures.append(error)

    threads = [threading.Thread(target=worker) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert loader.runtime("nvidia").calls == 1


def current_context() -> int:
    cuda = ctypes.CDLL("libcuda.so.1")
    context = ctypes.c_void_p()
    assert cuda.cuCtxGetCurrent(ctypes.byref(context)) == 0
    return context.value or 0


@pytest.mark.gpu
@pytest.mark.parametrize("binding", BINDINGS)
def test_launch_from_a_fresh_thread_leaves_its_context_alone(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str
) -> None:
    kernel = make_loader(package, DiskCache(tmp_path), binding=binding).load("demo").kernel("axpy")
    y, x = torch.zeros(777, device="cuda"), torch.ones(777, device="cuda")
    torch.cuda.synchronize()
    pointers = (y.data_ptr(), x.data_ptr())
    seen: list[int] = []

    def worker() -> None:  # a new thread has no current context: the launch must not leave one
        seen.append(current_context())
        kernel.launch(4, 256, *pointers, 0.5, 777)
        seen.append(current_context())

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    torch.cuda.synchronize()
    assert seen == [0, 0]
    assert y.tolist() == [0.5] * 777


@pytest.mark.gpu
def test_bad_launches_say_why(package: tuple[Index, Path], tmp_path: Path, torch: Any) -> None:
    check_bad_launches(torch, make_loader(package, DiskCache(tmp_path)).load("demo").kernel("axpy"))


def check_bad_launches(torch: Any, kernel: Any) -> None:
    """A block too large for ``axpy``, a host tensor and a float for an int each say what is
    wrong, and the device is still good after them."""
    y = torch.zeros(4, device="cuda")
    with pytest.raises(RuntimeLibraryError, match="at most 1024 threads a block"):
        kernel.launch(1, 2048, y, y, 1.0, 4)
    with pytest.raises(UsageError, match=r"move it with \.cuda\(\)"):
        kernel.launch(1, 4, y, torch.zeros(4), 1.0, 4)
    with pytest.raises(UsageError, match=r"argument 3 \(int\): expected an integer, got float"):
        kernel.launch(1, 4, y, y, 1.0, 4.0)
    check_axpy(torch, kernel, 100)  # the context is still good


def most_resident(torch: Any, kernel: Any, threads: int, shared_mem: int) -> int:
    """The most blocks of ``resident`` seen on one SM at once, over a grid of 16 blocks an SM
    (each holding its SM for about 50 µs), launched with ``shared_mem``."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    count = torch.zeros(1024, dtype=torch.int32, device="cuda")
    most = torch.zeros(1024, dtype=torch.int32, device="cuda")
    kernel.launch(sms * 16, threads, count, most, 100_000, shared_mem=shared_mem)
    torch.cuda.synchronize()
    assert int(count.abs().sum()) == 0  # every block counted itself out
    return int(most.max())


@pytest.mark.gpu
@pytest.mark.parametrize("binding", BINDINGS)
def test_shared_mem_for_blocks_holds_an_sm_to_the_count(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, binding: str
) -> None:
    """Launched with the shared memory Kernel.shared_mem_for_blocks gives, the blocks seen on an
    SM at once are the count asked for (one needs past 48 KB, which the kernel must be allowed);
    uncapped, as many as an SM's threads allow; at that count no shared memory is asked."""
    kernel = (
        make_loader(package, DiskCache(tmp_path), binding=binding).load("demo").kernel("resident")
    )
    threads = 256
    natural = torch.cuda.get_device_properties(0).max_threads_per_multi_processor // threads
    assert most_resident(torch, kernel, threads, 0) == natural
    for blocks in (1, 3, natural - 1):
        shared = kernel.shared_mem_for_blocks(threads, blocks)
        assert shared > (48 * 1024 if blocks == 1 else 0)
        assert most_resident(torch, kernel, threads, shared) == blocks
    assert kernel.shared_mem_for_blocks(threads, natural) == 0


@pytest.mark.gpu
def test_detection_and_runtime_agree(package: tuple[Index, Path], tmp_path: Path) -> None:
    loader = make_loader(package, DiskCache(tmp_path))
    gpus = loader.gpus()
    runtime = loader.runtime("nvidia")
    assert len(gpus) == runtime.device_count()
    for gpu in gpus:
        ordinal = runtime.ordinal_for(gpu.location, gpu.index)
        assert ordinal == gpu.index
        assert f"sm_{''.join(map(str, runtime.compute_capability(ordinal)))}" == str(gpu.target)


@pytest.fixture
def two_gpus(torch: Any) -> Iterator[None]:
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU here")
    yield


@pytest.mark.gpu
def test_each_gpu_gets_its_own_module(
    package: tuple[Index, Path], tmp_path: Path, torch: Any, two_gpus: None
) -> None:
    loader = make_loader(package, DiskCache(tmp_path))
    modules = [loader.load("demo", device) for device in range(2)]
    assert modules[0] is not modules[1]
    for device, module in enumerate(modules):
        with torch.cuda.device(device):
            y = torch.zeros(8, device=f"cuda:{device}")
            module.kernel("axpy").launch(1, 8, y, torch.ones(8, device=f"cuda:{device}"), 3.0, 8)
            torch.cuda.synchronize(device)
            assert y.tolist() == [3.0] * 8
