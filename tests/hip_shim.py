"""The HIP host path on an NVIDIA GPU, for the tests (not a test module): tests/hip_over_cuda.c
built as libamdhip64.so.7, and the "HIP view" in which kernelpack runs through it.

In the view (a subprocess with :func:`view_env`), nothing of kernelpack is patched; what it reads
is arranged as an AMD machine would present it:

- the shim is found as libamdhip64.so.7 through the dynamic linker's search (LD_LIBRARY_PATH),
  where kernelpack.devices.libraries looks first;
- ``KERNELPACK_TARGET=gfx1100`` stands for an AMD GPU, hip:0 (detection lists it first, as it
  lists AMD GPUs first), the same H200 seen through HIP (gfx1100: wave32, as the NVIDIA code is);
- a copy of the kernelpack package (:func:`make_view_package`) whose index carries, per module,
  the cubin the GPU would load, relabelled as a gfx1100 code object (same file, sha256 and
  symbols): the loader selects it for hip:0, checks it and hands it to hipModuleLoadData, which
  the shim passes to cuModuleLoadData; the NVIDIA images are left out, so that nothing in the
  view can load through the CUDA runtime instead;
- tests/hip_view.py, a pytest plugin, sets ``torch.version.hip`` as a ROCm build of torch has it,
  so that kernelpack names torch's GPUs "hip:N", and reports the shim's counts of launches.
"""

from __future__ import annotations

import ast
import copy
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
SHIM_SOURCE = TESTS / "hip_over_cuda.c"
SHIM_NAME = "libamdhip64.so.7"  # the first soname kernelpack.devices.libraries tries for HIP
PACKAGE = REPO / "wheels" / "kernelpack"
AMD_TARGET = "gfx1100"
HIP_NAME = re.compile(r"hip[A-Z]\w*")


def cuda_include() -> Path:
    """The CUDA toolkit's include folder (with cuda.h), beside the nvcc buildsys finds."""
    from buildsys.toolchain import cuda_toolchain

    toolchain = cuda_toolchain()
    if toolchain is None:
        raise AssertionError("no nvcc: the shim is built against the CUDA toolkit's cuda.h")
    candidates = [toolchain.bindir.parent / "include"]
    result = subprocess.run(
        [
            str(toolchain.bindir / "nvcc"),
            "--dryrun",
            "-c",
            "-x",
            "cu",
            os.devnull,
            "-o",
            os.devnull,
        ],
        capture_output=True,
        text=True,
    )
    candidates += [Path(p) for p in re.findall(r'INCLUDES="-I([^"]+)"', result.stderr)]
    for folder in candidates:
        if (folder / "cuda.h").is_file():
            return folder.resolve()
    raise AssertionError(f"no cuda.h in {', '.join(map(str, candidates))}")


def build_shim(folder: Path, *extra: str) -> Path:
    """The shim compiled with gcc as ``folder/libamdhip64.so.7`` (warnings are errors, nothing left
    undefined but libc's; only the hip* calls and its counters exported)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / SHIM_NAME
    command = [
        shutil.which("gcc") or "cc",
        "-std=c11",
        "-O2",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        f"-I{cuda_include()}",
        str(SHIM_SOURCE),
        "-o",
        str(out),
        f"-Wl,-soname,{SHIM_NAME}",
        "-Wl,--no-undefined",
        "-ldl",
        "-lpthread",
        *extra,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stderr}"
    return out


def exported_names(library: Path) -> set[str]:
    """The functions a shared library defines, as ``nm -D`` lists them."""
    result = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    return {fields[2] for fields in map(str.split, result.stdout.splitlines()) if len(fields) == 3}


def bound_hip_names() -> dict[str, set[str]]:
    """Each hip* function kernelpack binds, with the sources that name it: every attribute
    ``lib.hipXxx`` in the package's Python modules (ctypes' lookups in libamdhip64), and every
    hipXxx the C launcher names (it calls them through the addresses hip.py hands it)."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and HIP_NAME.fullmatch(node.attr):
                found.setdefault(node.attr, set()).add(str(path.relative_to(PACKAGE)))
    launcher = PACKAGE / "backends" / "_native" / "launcher.c"
    for name in HIP_NAME.findall(launcher.read_text(encoding="utf-8")):
        found.setdefault(name, set()).add(str(launcher.relative_to(PACKAGE)))
    return found


# ---- the view -----------------------------------------------------------------------------------


def view_index(index: Any, nvidia_target: str, modules: Collection[str] | None = None) -> Any:
    """``index`` with each module's images replaced by one: the cubin a GPU of ``nvidia_target``
    ("sm_90") would load, relabelled as an AMD_TARGET code object (same bytes, file, sha256,
    symbols and resources). ``modules`` keeps only those (a module the GPU serves from PTX alone
    has no cubin to relabel); every module kept must have a cubin for the target."""
    from kernelpack.targets import NvidiaTarget, select_image

    view = copy.deepcopy(index)
    if modules is not None:
        view["modules"] = {n: m for n, m in view["modules"].items() if n in modules}
    for name, module in view["modules"].items():
        cubins = [i for i in module["images"] if i["vendor"] == "nvidia" and i["kind"] == "cubin"]
        best, reasons = select_image(cubins, NvidiaTarget.parse(nvidia_target))
        if best is None:
            raise AssertionError(f"module {name}: no cubin for {nvidia_target}: {reasons}")
        module["images"] = [{**best, "vendor": "amd", "target": AMD_TARGET, "kind": "code_object"}]
    return view


def write_index(index: Any, folder: Path) -> None:
    (folder / "_index.py").write_text(f"INDEX = {index!r}\n", encoding="utf-8")


def make_view_package(
    site: Path, nvidia_target: str, *, package: Path = PACKAGE, index: Any = None
) -> Path:
    """A copy of the built kernelpack ``package`` in ``site`` (the Python modules, the C launcher,
    the modules' sources and the cubins the view's index names) with the view's index, made from
    ``index`` (else the one kernelpack imports, which is the checkout's)."""
    from kernelpack.loader.catalog import package_index

    index = index if index is not None else package_index("kernelpack")
    if index is None or not index["modules"]:
        raise AssertionError(
            f"no built index in {package}: run `python -m buildsys build --vendor nvidia` first "
            "(bench/gpu_all.sh does)"
        )
    view = view_index(index, nvidia_target)
    target = site / "kernelpack"
    shutil.copytree(
        package, target, ignore=shutil.ignore_patterns("__pycache__", "_index.py", "device")
    )
    wanted = {image["file"] for module in view["modules"].values() for image in module["images"]}
    wanted |= {module["source"] for module in view["modules"].values() if module["source"]}
    for name in sorted(wanted):
        source = package / name
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)
        hipified = source.with_suffix(".hip")  # the loader's AMD source, beside the CUDA one
        if hipified.is_file():
            shutil.copy2(hipified, (target / name).with_suffix(".hip"))
    write_index(view, target)
    return target


def view_env(shim: Path, site: Path, **extra: str) -> dict[str, str]:
    """The environment of a process in the HIP view: the shim first in the dynamic linker's search,
    the view's package first on PYTHONPATH (then the checkout's, which it shadows, buildsys and the
    tests' helpers, and whatever the caller had: the GPU machine's carried wheels), an AMD GPU
    standing for the NVIDIA one."""
    env = dict(os.environ)
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    path = [str(site), str(REPO / "wheels"), str(REPO), str(TESTS), *inherited]
    env["PYTHONPATH"] = os.pathsep.join(path)
    library_path = [str(shim.parent), *filter(None, env.get("LD_LIBRARY_PATH", "").split(":"))]
    env["LD_LIBRARY_PATH"] = ":".join(library_path)
    env["KERNELPACK_TARGET"] = AMD_TARGET
    env["KERNELPACK_HIP_SHIM"] = str(shim)
    env["PYTHONUNBUFFERED"] = "1"
    return env | extra


def run_in_view(
    env: dict[str, str], arguments: list[str], *, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGUMENTS`` in the view, with tests/hip_view.py loaded, from the checkout
    (pyproject's pythonpath left out: the view's package must come first)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "hip_view",
        "-p",
        "no:cacheprovider",
        "-o",
        "pythonpath=",
        *arguments,
    ]
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
