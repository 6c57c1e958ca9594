"""One fresh process's first load, phase by phase: run by bench/bench_launch.py (on a GPU) and
bench/ready_local.py (over a stand-in libcuda), never imported.

    python bench/ready_child.py MODULE [--launch] [--profile]

prints one JSON line of milliseconds: ``import_ms`` (``import kernelpack``), ``driver_ms`` (libcuda
opened, cuInit and the primary context: what every CUDA user pays, torch and CuPy too, so it is
taken first and kept apart), ``loader_import_ms`` (the loader's modules, which ``kernelpack.load``
imports on first use), then ``kernelpack.load`` split into ``index_ms`` (the package index read and
checked), ``detect_ms`` (GPU detection), ``select_ms`` (ranking the images), ``runtime_ms`` (the
CUDA runtime's binding and the device's ordinal), ``image_ms`` (the image read and its sha256
checked), ``module_load_ms`` (cuModuleLoadData) and ``load_other_ms`` (the rest of the call), and
``kernel_ms`` (``module.kernel``, cuModuleGetFunction in it). ``ready_ms`` is import + loader
import + load + kernel. Each phase's time is its own: a phase called inside another (the index
read inside the selection) is taken out of the outer one. The timers wrap the loader's methods
from outside, a few microseconds in all. ``--launch`` then runs the kernel once with torch
against a float64 reference; ``--profile`` prints a cProfile of the load to standard error.
"""

from __future__ import annotations

import time

start = time.perf_counter()
import kernelpack  # noqa: E402

imported = time.perf_counter()

import ctypes  # noqa: E402
import sys  # noqa: E402

TYPE_CHECKING = False  # typing is not imported here: what the loader imports is its own to pay
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

cuda = ctypes.CDLL("libcuda.so.1")
context = ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
driver = time.perf_counter()

from kernelpack.backends.cuda import CudaRuntime  # noqa: E402
from kernelpack.loader import load as loading  # noqa: E402

loader_imported = time.perf_counter()

spent: dict[str, float] = {}
inner: list[float] = []


def timed(phase: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with its own time (less that of timed calls inside it) added to ``phase``."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        inner.append(0.0)
        try:
            return function(*args, **kwargs)
        finally:
            nested = inner.pop()
            took = time.perf_counter() - began
            spent[phase] = spent.get(phase, 0.0) + took - nested
            if inner:
                inner[-1] += took

    return wrapper


PHASES = (
    (loading.Loader, "catalog", "index_ms"),
    (loading.Loader, "gpus", "detect_ms"),
    (loading.Loader, "choose", "select_ms"),
    (loading.Loader, "runtime", "runtime_ms"),
    (CudaRuntime, "ordinal_for", "runtime_ms"),
    (loading.Loader, "image_bytes", "image_ms"),
    (CudaRuntime, "load", "module_load_ms"),
)
for owner, method, phase in PHASES:
    setattr(owner, method, timed(phase, getattr(owner, method)))

name = sys.argv[1]
profiling = "--profile" in sys.argv
if profiling:
    import cProfile
    import io
    import pstats

    profile = cProfile.Profile()
    profile.enable()
began = time.perf_counter()
module = timed("load", kernelpack.load)(name)
loaded = time.perf_counter()
kernel = module.kernel("axpy")
ready = time.perf_counter()
phases = {phase: spent.get(phase, 0.0) * 1e3 for _, _, phase in PHASES}
phases["load_other_ms"] = spent["load"] * 1e3
if profiling:
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(30)
    print(text.getvalue(), file=sys.stderr)

again = time.perf_counter()
for _ in range(1000):
    kernelpack.load(name)
already = (time.perf_counter() - again) / 1000

report = {
    "import_ms": (imported - start) * 1e3,
    "driver_ms": (driver - imported) * 1e3,
    "loader_import_ms": (loader_imported - driver) * 1e3,
    **phases,
    "load_ms": (loaded - began) * 1e3,
    "kernel_ms": (ready - loaded) * 1e3,
    "ready_ms": (imported - start + ready - driver) * 1e3,
    "already_loaded_us": already * 1e6,
    "image": module.image,
    "binding": loading.shared_loader().runtime("nvidia").binding,
}
if "--launch" in sys.argv:
    import torch

    y, x = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    expected = y.double() + 2.0 * x.double()
    kernel.launch(4, 256, y, x, 2.0, 1000)
    torch.cuda.synchronize()
    report["ran_correctly"] = bool(((y.double() - expected).abs().max() < 1e-5).item())
import json  # noqa: E402

print(json.dumps(report))
