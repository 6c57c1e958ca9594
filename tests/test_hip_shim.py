"""kernelpack's HIP host path run for real: tests/hip_over_cuda.c, a libamdhip64 over libcuda, and
the GPU suite's checks run through it (tests/hip_shim.py says how the view is arranged).

Here (marker ``nvcc``: the shim is built against the CUDA toolkit's cuda.h): the shim builds with
warnings as errors and nothing undefined; it exports every hip* call kernelpack binds, read from
kernelpack's own sources; kernelpack finds it by HIP's soname through the dynamic linker's search
and reports its version; a hipInit failure reaches the user as RuntimeLibraryError with HIP's name.

On the lent GPU (marker ``gpu``, bench/gpu_all.sh's HIP step): the same checks as the CUDA path's
GPU tests, run in the HIP view by the tests that make them (test_mlp.py, test_mlp_hot.py,
test_mlp_torch.py, test_walk_gpu.py; hip_view_checks.py for test_runtime_gpu.py's checks, HIP
device ordinals and error names), each in its own process; each run must pass with nothing
skipped, through the view's package, with the shim counting the launches.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest
from hip_shim import (
    AMD_TARGET,
    SHIM_NAME,
    bound_hip_names,
    build_shim,
    exported_names,
    make_view_package,
    run_in_view,
    view_env,
    write_index,
)

# ---- here: the shim, its exports, and kernelpack finding it ----------------------------------


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def test_kernelpacks_sources_bind_the_hip_module_api() -> None:
    """The reader of kernelpack's sources finds the calls (were it to find none, the export check
    below would pass on nothing)."""
    bound = bound_hip_names()
    assert {"hipInit", "hipModuleLoadData", "hipModuleLaunchKernel", "hipSetDevice"} <= set(bound)
    assert "backends/hip.py" in bound["hipModuleLaunchKernel"]
    assert "backends/_native/launcher.c" in bound["hipSetDevice"]


@pytest.mark.nvcc
def test_the_shim_exports_every_hip_call_kernelpack_binds(shim: Path) -> None:
    exported = exported_names(shim)
    bound = bound_hip_names()
    missing = {name: sorted(where) for name, where in bound.items() if name not in exported}
    assert missing == {}, f"{shim} lacks calls kernelpack binds (name: where): {missing}"
    extra = {n for n in exported if n.startswith("hip") and not n.startswith("hip_over_cuda_")}
    assert extra <= set(bound), "the shim exports hip* calls nothing binds"


@pytest.mark.nvcc
def test_the_shim_builds_as_c11_without_warnings_against_cuda_h(tmp_path: Path) -> None:
    """Strict flags (and -pedantic besides), nothing undefined: build_shim asserts success."""
    built = build_shim(tmp_path, "-pedantic")
    assert built.name == SHIM_NAME and built.stat().st_size > 0


FIND_AND_FAIL = r"""
import json, sys
from pathlib import Path
from kernelpack.devices.detect import Gpu, forced_target
from kernelpack.errors import RuntimeLibraryError
from kernelpack.backends.support import library_versions
from kernelpack.devices.libraries import library_file, open_library
from kernelpack.loader.load import Loader

index = json.loads(sys.argv[1])
lib = open_library("hip")
target = forced_target("gfx1100")
gpu = Gpu(0, "amd", target, "", "", "", None, "KERNELPACK_TARGET", "", "KERNELPACK_TARGET=gfx1100")
loader = Loader(index=index, root=Path(sys.argv[2]), gpus=[gpu], fragments=list)
try:
    loader.load("m", "hip:0")
    failure = None
except RuntimeLibraryError as error:
    failure = str(error)
print(json.dumps({
    "name": lib._name, "file": library_file(lib, "hipInit"),
    "version": library_versions()["hip"], "failure": failure,
}))
"""


@pytest.mark.nvcc
def test_kernelpack_finds_the_shim_by_soname_and_a_hipinit_failure_names_hips_error(
    shim: Path, tmp_path: Path
) -> None:
    """LD_LIBRARY_PATH names the shim's folder, as for a HIP runtime installed anywhere: the
    loader opens it by libamdhip64.so.7, reports its version, and kernelpack.load's path through
    the HIP runtime ends in hipInit's failure with HIP's name (HIP_VISIBLE_DEVICES=99 lists no
    device: hipErrorNoDevice where libcuda is, hipErrorInsufficientDriver where it is not)."""
    data = b"an image that is never read"
    (tmp_path / "m.co").write_bytes(data)
    image = {
        "vendor": "amd",
        "target": AMD_TARGET,
        "kind": "code_object",
        "file": "m.co",
        "offset": 0,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "compression": "none",
        "kernels": {},
        "symbols": {},
    }
    module = {"kernels": {}, "source": "", "source_sha256": "", "images": [image]}
    index = {
        "schema": 2,
        "version": "0.0.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {"m": module},
    }
    env = view_env(shim, tmp_path, HIP_VISIBLE_DEVICES="99")
    result = subprocess.run(
        [sys.executable, "-c", FIND_AND_FAIL, json.dumps(index), str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["name"] == SHIM_NAME
    assert found["file"] == str(shim.resolve())
    assert found["version"] == f"7.0.0 ({shim.resolve()})"
    assert found["failure"] in (
        "hipInit failed: hipErrorNoDevice (100)",
        "hipInit failed: hipErrorInsufficientDriver (35)",
    )


IN_THE_VIEW = r"""
import json
import kernelpack
from kernelpack.devices.argument import device_name
from kernelpack.errors import RuntimeLibraryError
from kernelpack.loader.load import shared_loader

loader = shared_loader()
gpu = loader.gpu(None)
found = {
    "package": kernelpack.__file__,
    "first": device_name(gpu),
    "image": loader.choose("m", gpu).located.label,
}
for device in (None, "hip:0"):
    try:
        kernelpack.load("m", device)
    except RuntimeLibraryError as error:
        found[str(device)] = str(error)
print(json.dumps(found))
"""


@pytest.mark.nvcc
def test_in_the_view_kernelpack_load_takes_the_relabelled_cubin_to_the_hip_runtime(
    shim: Path, tmp_path: Path
) -> None:
    """The view up to the GPU: a built package (one module, its cubins a few bytes) made into the
    view's package; in the view, kernelpack.load's own path (detection with KERNELPACK_TARGET, the
    package's index, selection) takes hip:0 first, selects the relabelled sm_90 cubin and opens
    the HIP runtime, the shim, whose hipInit then fails with HIP's name (no GPU here;
    HIP_VISIBLE_DEVICES=99 where there is one)."""
    from hip_shim import PACKAGE

    built = tmp_path / "built"
    shutil.copytree(PACKAGE, built, ignore=shutil.ignore_patterns("__pycache__", "_index.py"))
    (built / "device").mkdir(exist_ok=True)
    source = b"__global__ void k() {}\n"
    (built / "device" / "m.cu").write_bytes(source)
    images = []
    for target, kind in (("sm_80", "cubin"), ("sm_90", "cubin"), ("compute_80", "ptx")):
        data = f"not a real {target} {kind}".encode()
        (built / "device" / f"m.{target}.{kind}").write_bytes(data)
        images.append(
            {
                "vendor": "nvidia",
                "target": target,
                "kind": kind,
                "file": f"device/m.{target}.{kind}",
                "offset": 0,
                "size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "compression": "none",
                "kernels": {},
                "symbols": {"k": "_Z1kv"},
            }
        )
    module = {
        "kernels": {"k": []},
        "source": "device/m.cu",
        "source_sha256": hashlib.sha256(source).hexdigest(),
        "images": images,
    }
    index = {
        "schema": 2,
        "version": "0.0.0",
        "build": {"toolchains": {}, "flags": {}, "sources": {}},
        "modules": {"m": module},
    }
    site = tmp_path / "site"
    make_view_package(site, "sm_90", package=built, index=index)
    env = view_env(shim, site, HIP_VISIBLE_DEVICES="99")
    result = subprocess.run(
        [sys.executable, "-c", IN_THE_VIEW], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert Path(found["package"]) == site / "kernelpack" / "__init__.py"
    assert found["first"] == "hip:0"
    assert found["image"] == "gfx1100 code_object (kernelpack/device/m.sm_90.cubin)"
    assert found["None"] == found["hip:0"]
    assert found["hip:0"] in (
        "hipInit failed: hipErrorNoDevice (100)",
        "hipInit failed: hipErrorInsufficientDriver (35)",
    )


def test_a_view_index_relabels_the_cubin_the_gpu_would_load(tmp_path: Path) -> None:
    """view_index keeps, per module, the cubin select_image picks for the GPU (sm_90: the sm_90
    cubin over sm_80's and the PTX), relabelled as a gfx1100 code object, bytes unchanged."""
    from hip_shim import view_index

    from kernelpack.targets import select_image

    def image(target: str, kind: str) -> dict[str, Any]:
        return {
            "vendor": "nvidia",
            "target": target,
            "kind": kind,
            "file": f"device/m.{target}.{kind}",
            "offset": 0,
            "size": 4,
            "sha256": target,
            "compression": "none",
            "kernels": {},
            "symbols": {"k": "_Z1kv"},
        }

    images = [image("sm_80", "cubin"), image("sm_90", "cubin"), image("compute_80", "ptx")]
    index = {"schema": 2, "modules": {"m": {"images": images}}}
    (only,) = view_index(index, "sm_90")["modules"]["m"]["images"]
    assert only == {**images[1], "vendor": "amd", "target": AMD_TARGET, "kind": "code_object"}
    from kernelpack.devices.detect import forced_target

    assert select_image([only], forced_target(AMD_TARGET))[0] == only
    write_index({"schema": 2}, tmp_path)
    assert (tmp_path / "_index.py").read_text() == "INDEX = {'schema': 2}\n"


# ---- on the GPU: the suite's checks through the shim -----------------------------------------

VIEW_RUNS = {
    # test_runtime_gpu.py's checks, HIP device 1 (the GPU twice over), HIP's error names
    "runtime": (["tests/hip_view_checks.py"], {"HIP_VISIBLE_DEVICES": "0,0"}, 9),
    # the ops forward through kernelpack.mlp (full checks and the C hot path), on the caller's
    # stream, from numpy; the cases that launch kernels by name on "cuda:0", CuPy's arrays (CUDA's
    # by their own account) and the 2**31-element ones stay with the CUDA path
    "mlp": (
        [
            "tests/test_mlp.py",
            "-m",
            "gpu",
            "-k",
            "test_swiglu or test_silu_and_mul or test_rms_norm or test_fused_add_rms_norm or "
            "test_runs_on_the_callers_current_stream or test_gpu_argument_checks or "
            "test_hot_path_keeps_every_check or test_numpy_arrays or test_misaligned_views",
        ],
        {},
        300,
    ),
    "mlp_hot": (["tests/test_mlp_hot.py", "-m", "gpu"], {}, 5),
    # the backward kernels through torch.ops.kernelpack's autograd, and a CUDA graph's capture
    "mlp_torch": (
        [
            "tests/test_mlp_torch.py",
            "-k",
            "test_autograd_against_float64 or test_add_rms_norm_gradients or "
            "test_mlp_api_takes_the_autograd_path or test_in_place_op_matches or "
            "test_with_scale_ops or test_cuda_graph_capture",
        ],
        {},
        30,
    ),
    # every walk check but the scale, sweep and CuPy ones (as the sanitizer's walk run)
    "walk": (["tests/test_walk_gpu.py", "-k", "not scale and not sweep and not cupy"], {}, 30),
}


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the shim, the site folder holding the view's kernelpack package)."""
    from kernelpack.devices.cuda_driver import CudaDriver

    driver = CudaDriver()
    driver.check(driver.init(), "cuInit")
    nvidia_target = "sm_{}{}".format(*driver.compute_capability(0))
    root = tmp_path_factory.mktemp("hip_view")
    shim = build_shim(root / "lib")
    site = root / "site"
    make_view_package(site, nvidia_target)
    return shim, site


def junit_counts(path: Path) -> dict[str, int]:
    suite = ElementTree.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    return {key: int(suite.get(key, "0")) for key in ("tests", "failures", "errors", "skipped")}


@pytest.mark.gpu
@pytest.mark.parametrize("run", sorted(VIEW_RUNS))
def test_the_gpu_checks_pass_through_the_hip_shim(
    view: tuple[Path, Path], tmp_path: Path, run: str
) -> None:
    shim, site = view
    arguments, variables, least = VIEW_RUNS[run]
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    env = view_env(shim, site, KERNELPACK_HIP_VIEW_REPORT=str(report), **variables)
    result = run_in_view(env, [*arguments, "-q", f"--junitxml={junit}"], timeout=400)
    tail = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, f"{run} through the HIP shim failed:\n{tail}"
    counts = junit_counts(junit)
    assert counts["skipped"] == 0 and counts["tests"] >= least, (counts, tail)
    found = json.loads(report.read_text())
    assert Path(found["package"]).resolve() == (site / "kernelpack" / "__init__.py").resolve()
    assert found["loads"][0] >= 1 and found["launches"][0] > 0, found


@pytest.mark.gpu
def test_with_no_visible_hip_device_kernelpack_load_names_hips_error(
    view: tuple[Path, Path],
) -> None:
    """HIP_VISIBLE_DEVICES=7 on this machine: kernelpack.load("mlp", "hip:0"), the user's call,
    raises RuntimeLibraryError naming hipInit's hipErrorNoDevice."""
    shim, site = view
    code = (
        "import kernelpack\n"
        "from kernelpack.errors import RuntimeLibraryError\n"
        "try:\n"
        "    kernelpack.load('mlp', 'hip:0')\n"
        "except RuntimeLibraryError as error:\n"
        "    print(error)\n"
    )
    env = view_env(shim, site, HIP_VISIBLE_DEVICES="7")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "hipInit failed: hipErrorNoDevice (100)"
