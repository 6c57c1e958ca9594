"""Launch overhead and first-load latency of kernelpack's loader (docs/loader.md has the results).

    python bench/bench_launch.py --out DIR [--site DIR]    # everything this machine can run

Sections, each skipped where its requirements are missing:

- python: the Python-side cost of one launch, argument checks included, through each binding (the
  C extension and ctypes) into a no-op C function with cuLaunchKernel's signature: no GPU needed.
- gpu: the host cost of one launch of a tiny kernel (y += x, 4096 floats) on the GPU through
  kernelpack (both bindings; torch tensors and raw addresses), raw ctypes with arguments packed
  beforehand, cuda-bindings (packed beforehand and per call), CuPy's RawKernel, torch's ``add_``,
  and a C loop calling cuLaunchKernel (the driver's own floor). Launches are timed in batches of
  500 without synchronising inside a batch, so the figure is the CPU cost of a launch, not the
  GPU's run time; the median batch is reported.
- first load: fresh processes importing an installed kernelpack (``--site DIR``) and loading a
  module: cubin, PTX and NVRTC paths, each with an empty and with a warm disk cache, 15 processes a
  row, interleaved; each split by bench/ready_child.py into ``import kernelpack``, the driver's
  start (libcuda, cuInit and the primary context, which every CUDA user pays and is kept apart),
  the loader's imports, the index read, detection, selection, the runtime's binding, the image
  read with its sha256 check, cuModuleLoadData and the kernel lookup; the median, least and most
  of each go to the JSON and the ready table (ready.md), and a profile of each warm load says
  where its time goes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
BATCH = 500
BATCHES = 40
N = 4096
BLOCK = 256

NOOP_SOURCE = r"""
int noop_launch(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    return params == 0;
}
int noop_current(void **context) { *context = (void *)0xC0FFEE; return 0; }
int noop_push(void *context) { return 0; }
"""

FLOOR_SOURCE = r"""
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(double *)a, y = *(double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUdeviceptr y, x;
    int n = atoi(argv[2]);
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
    if (cuModuleLoad(&mod, argv[1]) || cuModuleGetFunction(&fn, mod, "add")) return 2;
    if (cuMemAlloc(&y, n * 4) || cuMemAlloc(&x, n * 4)) return 3;
    void *params[] = {&y, &x, &n};
    double batches[40];
    for (int b = -5; b < 40; b++) {
        double t0 = now();
        for (int i = 0; i < 500; i++) cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, params, 0);
        double t1 = now();
        cuCtxSynchronize();
        if (b >= 0) batches[b] = (t1 - t0) / 500;
    }
    qsort(batches, 40, sizeof(double), cmp);
    printf("%.4f\n", batches[20] * 1e6);
    return 0;
}
"""


def per_launch(launch: Callable[[], object], synchronize: Callable[[], object]) -> float:
    """Median over batches of the host time of one launch, in microseconds."""
    for _ in range(5):
        for _ in range(BATCH):
            launch()
        synchronize()
    times = []
    for _ in range(BATCHES):
        start = time.perf_counter()
        for _ in range(BATCH):
            launch()
        times.append((time.perf_counter() - start) / BATCH)
        synchronize()
    return statistics.median(times) * 1e6


def compile_shared(source: str, folder: Path, name: str, *, python: bool = False) -> Path:
    out = folder / name
    src = folder / (name + ".c")
    src.write_text(source)
    include = [f"-I{sysconfig.get_paths()['include']}"] if python else []
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", *include, str(src), "-o", str(out)], check=True
    )
    return out


def native_module() -> Any:
    try:
        from kernelpack.backends import _launcher
    except ImportError:
        return None
    return _launcher


# ---- the Python side alone ----------------------------------------------------------------------


class ArrayInterface:
    """A GPU array as libraries other than torch and CuPy hand it over."""

    def __init__(self, pointer: int) -> None:
        self._pointer = pointer

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"data": (self._pointer, False), "shape": (N,), "typestr": "<f4", "version": 3}


def python_side(folder: Path) -> dict[str, float]:
    """Per-launch cost into a no-op C launch function through each binding, checks included."""
    from kernelpack.backends import launch as launching
    from kernelpack.backends import signature as kargs

    lib = ctypes.CDLL(str(compile_shared(NOOP_SOURCE, folder, "noop.so")))
    lib.noop_launch.argtypes = launching.LAUNCH_ARGTYPES
    signature = kargs.Signature.from_index(
        "add",
        [
            {"type": "float*", "offset": 0, "size": 8},
            {"type": "float const*", "offset": 8, "size": 8},
            {"type": "int", "offset": 16, "size": 4},
        ],
    )

    def fail(*args: object) -> None:
        raise AssertionError(f"launch failed: {args}")

    def current() -> int:
        value = ctypes.c_void_p()
        lib.noop_current(ctypes.byref(value))
        return value.value or 0

    launchers = {
        "ctypes": launching.ctypes_launcher(
            signature, lib.noop_launch, 1, fail, current, 0xC0FFEE, lambda: 0, lambda: 0
        )
    }
    native = native_module()
    if native is not None:
        binding = launching.DeviceBinding(
            1, lib.noop_current, lib.noop_push, lib.noop_current, 0xC0FFEE
        )
        launchers["native"] = launching.native_launch(
            native.Launcher, lib.noop_launch, 1, signature, fail, binding
        )
    results: dict[str, float] = {}
    y, x = ArrayInterface(0x7F00_0000_0000), ArrayInterface(0x7F00_0001_0000)
    for binding, launch in launchers.items():
        results[f"{binding}, int pointers"] = per_launch(
            lambda f=launch: f(16, BLOCK, 0x7F00_0000_0000, 0x7F00_0001_0000, N), lambda: None
        )
        results[f"{binding}, __cuda_array_interface__ objects"] = per_launch(
            lambda f=launch: f(16, BLOCK, y, x, N), lambda: None
        )
    return results


# ---- on the GPU ---------------------------------------------------------------------------------


def gpu_launch(index: Any, root: Path, folder: Path) -> dict[str, Any]:
    import torch

    from kernelpack.backends.cuda import CudaRuntime
    from kernelpack.loader.cache import DiskCache
    from kernelpack.loader.load import Loader

    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    y = torch.randn(N, device="cuda")
    x = torch.randn(N, device="cuda")
    grid = (N + BLOCK - 1) // BLOCK
    sync = torch.cuda.synchronize
    results["torch add_"] = per_launch(lambda: y.add_(x), sync)

    bindings = ["native", "ctypes"] if native_module() is not None else ["ctypes"]
    for binding in bindings:
        loader = Loader(
            index=index,
            root=root,
            runtimes=lambda v, b=binding: CudaRuntime(binding=b),
            cache=DiskCache(folder / "cache"),
            fragments=list,
        )
        kernel = loader.load("demo").kernel("add")
        yp, xp = y.data_ptr(), x.data_ptr()
        results[f"kernelpack {binding}, torch tensors"] = per_launch(
            lambda k=kernel: k.launch(grid, BLOCK, y, x, N), sync
        )
        results[f"kernelpack {binding}, int pointers"] = per_launch(
            lambda k=kernel, yp=yp, xp=xp: k.launch(grid, BLOCK, yp, xp, N), sync
        )
        results[f"kernelpack {binding}, tensors on a torch stream"] = _on_stream(
            torch, kernel, grid, y, x
        )
        function = kernel.module._runtime.function(kernel.module._loaded, "add")
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuLaunchKernel.argtypes = [
        ctypes.c_void_p,
        *[ctypes.c_uint] * 7,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_void_p,
    ]
    values = (ctypes.c_void_p(y.data_ptr()), ctypes.c_void_p(x.data_ptr()), ctypes.c_int(N))
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(v) for v in values])
    handle = ctypes.c_void_p(function)
    results["ctypes cuLaunchKernel, packed beforehand (no checks)"] = per_launch(
        lambda: cuda.cuLaunchKernel(handle, grid, 1, 1, BLOCK, 1, 1, 0, None, params, None), sync
    )
    try:
        results.update(_cuda_bindings(function, grid, y, x, values, params, sync))
    except Exception as error:  # reported, not fatal: the other rows still count
        errors["cuda-bindings"] = f"{type(error).__name__}: {error}"
    try:
        import cupy

        from tests.test_runtime_gpu import SOURCE

        raw = cupy.RawKernel(SOURCE, "add")
        yc, xc, n32 = cupy.asarray(y), cupy.asarray(x), cupy.int32(N)
        results["CuPy RawKernel"] = per_launch(lambda: raw((grid,), (BLOCK,), (yc, xc, n32)), sync)
    except Exception as error:
        errors["cupy"] = f"{type(error).__name__}: {error}"
    try:
        results["C loop, cuLaunchKernel (driver floor)"] = _c_floor(index, root, folder)
    except Exception as error:
        errors["c floor"] = f"{type(error).__name__}: {error}"
    results["errors"] = errors
    return results


def _on_stream(torch: Any, kernel: Any, grid: int, y: Any, x: Any) -> float:
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        return per_launch(
            lambda: kernel.launch(grid, BLOCK, y, x, N, stream=stream), stream.synchronize
        )


def _cuda_bindings(
    function: int, grid: int, y: Any, x: Any, values: Any, params: Any, sync: Callable[[], object]
) -> dict[str, float]:
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver  # cuda-python before 12.6
    kernel = driver.CUfunction(function)
    address = ctypes.addressof(params)
    stream = driver.CUstream(0)
    out = {
        "cuda-bindings cuLaunchKernel, packed beforehand": per_launch(
            lambda: driver.cuLaunchKernel(kernel, grid, 1, 1, BLOCK, 1, 1, 0, stream, address, 0),
            sync,
        )
    }
    types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
    out["cuda-bindings cuLaunchKernel, packed per call"] = per_launch(
        lambda: driver.cuLaunchKernel(
            kernel, grid, 1, 1, BLOCK, 1, 1, 0, stream, ((y.data_ptr(), x.data_ptr(), N), types), 0
        ),
        sync,
    )
    return out


def _c_floor(index: Any, root: Path, folder: Path) -> float:
    image = next(i for i in index["modules"]["demo"]["images"] if i["target"] == "sm_90")
    src = folder / "floor.c"
    src.write_text(FLOOR_SOURCE)
    exe = folder / "floor"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    subprocess.run([nvcc, "-O2", "-x", "cu", str(src), "-o", str(exe), "-lcuda"], check=True)
    done = subprocess.run(
        [str(exe), str(root / image["file"]), str(N)], capture_output=True, text=True, check=True
    )
    return float(done.stdout.strip())


# ---- first load in a fresh process --------------------------------------------------------------

CHILD = REPO / "bench" / "ready_child.py"  # one fresh process's load, phase by phase
REPEATS = 15  # fresh processes per row: a median and its spread, not one lucky or unlucky run
PATHS = (("demo", "cubin"), ("demo_ptx", "PTX"), ("demo_src", "NVRTC"))
# the table's phases in the order a load meets them (bench/ready_child.py says what each holds)
PHASE_COLUMNS = (
    ("import_ms", "import"),
    ("loader_import_ms", "loader import"),
    ("index_ms", "index"),
    ("detect_ms", "detect"),
    ("select_ms", "select"),
    ("runtime_ms", "runtime"),
    ("image_ms", "read + sha256"),
    ("module_load_ms", "module load"),
    ("load_other_ms", "load, rest"),
    ("kernel_ms", "kernel"),
)


def child_run(
    site: Path, module: str, cache: Path, *flags: str, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One fresh process over the installed package (the driver's own PTX cache turned off);
    ``flags`` go to bench/ready_child.py, ``environ`` adds to its environment."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        KERNELPACK_CACHE_DIR=str(cache),
        CUDA_CACHE_DISABLE="1",
        PYTHONWARNINGS="ignore",
        **(environ or {}),
    )
    return subprocess.run(
        [sys.executable, str(CHILD), module, *flags],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )


def child_report(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The child's JSON line, or its error."""
    if done.returncode != 0:
        return {"error": done.stderr.strip()[-1500:]}
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def first_load(
    site: Path,
    folder: Path,
    *,
    paths: tuple[tuple[str, str], ...] = PATHS,
    repeats: int = REPEATS,
    launch: bool = True,
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Fresh processes over the installed package: each path with an empty and a warm disk cache.

    The rows are interleaved (attempt by attempt, each path cold then warm), so that a slow spell
    of the machine falls on every row alike; one process per path first, not counted, reads the
    installed files into the page cache. With ``launch``, the first attempt's processes also run
    the kernel against a float64 reference (after the timing; torch's import makes each such
    process seconds long, so the others do not).
    """
    results: dict[str, Any] = {
        f"{label} {state}": [] for _, label in paths for state in ("cold", "warm")
    }
    for module, _ in paths:
        child_run(site, module, folder / f"cache-{module}-warmup", environ=environ)
    for attempt in range(repeats):
        flags = ("--launch",) if launch and attempt == 0 else ()
        for module, label in paths:
            cache = folder / f"cache-{module}-{attempt}"
            shutil.rmtree(cache, ignore_errors=True)
            for state in ("cold", "warm"):  # the warm run reuses what the cold run left
                results[f"{label} {state}"].append(
                    child_report(child_run(site, module, cache, *flags, environ=environ))
                )
    for module, label in paths:
        profile = child_run(
            site, module, folder / f"cache-{module}-0", "--profile", environ=environ
        )
        results[f"{label} warm profile"] = profile.stderr[-6000:]
    return results


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure its median, least and most over the runs that worked."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0] if runs else {}
    keys = [k for k, v in good[0].items() if isinstance(v, float)]
    summary: dict[str, Any] = {"runs": len(good), "failed": len(runs) - len(good)}
    for key in keys:
        values = [r[key] for r in good]
        summary[key] = round(statistics.median(values), 3)
        summary[f"{key}_min"] = round(min(values), 3)
        summary[f"{key}_max"] = round(max(values), 3)
    summary["image"] = good[0]["image"]
    summary["binding"] = good[0]["binding"]
    checked = [r["ran_correctly"] for r in good if "ran_correctly" in r]
    if checked:
        summary["ran_correctly"] = all(checked)
        summary["launches_checked"] = len(checked)
    return summary


def ready_table(summaries: dict[str, dict[str, Any]]) -> str:
    """The ready time of each row (median, least to most) and each phase's median, as Markdown."""
    head = ["path", "runs", "ready", "driver (apart)", *(title for _, title in PHASE_COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: |" + " ---: |" * (len(head) - 2)]
    for name, summary in summaries.items():
        if "ready_ms" not in summary:
            lines.append(f"| {name} | 0 | failed: {summary.get('error', '?')[:80]!r} |")
            continue
        low, high = summary["ready_ms_min"], summary["ready_ms_max"]
        cells = [
            name,
            str(summary["runs"]),
            f"{summary['ready_ms']:.1f} ({low:.1f}-{high:.1f})",
            f"{summary['driver_ms']:.0f}",
            *(f"{summary[key]:.2f}" for key, _ in PHASE_COLUMNS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="write bench_launch.json here")
    parser.add_argument(
        "--site",
        type=Path,
        help="an installed kernelpack (pip install --target) for first-load runs",
    )
    args = parser.parse_args()
    sys.path[:0] = [str(REPO / "wheels"), str(REPO)]
    report: dict[str, Any] = {"python": sys.version.split()[0]}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        if shutil.which("cc"):
            report["python_side_us"] = python_side(folder)
        try:
            import torch

            has_gpu = torch.cuda.is_available()
        except ImportError:
            has_gpu = False
        if has_gpu:
            from tests.test_runtime_gpu import build_package

            index = build_package(folder / "package")
            report["gpu"] = torch.cuda.get_device_name(0)
            report["launch_us"] = gpu_launch(index, folder / "package", folder)
            if args.site:
                raw = first_load(args.site, folder)
                report["first_load_runs"] = raw
                report["first_load"] = {
                    name: summarise(runs) for name, runs in raw.items() if isinstance(runs, list)
                }
                report["ready_table"] = ready_table(report["first_load"])
    text = json.dumps(report, indent=2, sort_keys=True)
    print(text)
    if "ready_table" in report:
        print(report["ready_table"])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_launch.json").write_text(text + "\n")
        if "ready_table" in report:
            (args.out / "ready.md").write_text(report["ready_table"] + "\n")


if __name__ == "__main__":
    main()
