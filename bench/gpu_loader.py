"""The loader's whole GPU session in one command (the GPU machine is lent by the minute):

    python bench/gpu_loader.py --out $OUT

1. a scratch copy of the tree, with the C launcher built into it (cc, the CPython limited API);
2. a wheel of kernelpack holding the test package's index and images (built with nvcc), installed
   with pip into a folder, and a split pair (host wheel + device wheel with its entry point);
3. the loader's tests, GPU ones included (cubin, PTX, NVRTC, tampered cache, 64 threads);
4. bench/bench_launch.py: launch overhead against CuPy, torch, cuda-bindings and a C loop, and
   first-load latency in fresh processes over the installed wheel;
5. facts that explain the numbers (versions, where the libraries are, how long detection and the
   entry point scan take).

Everything goes to --out: gpu_loader.log, pytest.log, bench_launch.json, ready.md (the first-load
table, also in the log), facts.json.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
WORK = Path("/tmp/kp-loader-work")
NATIVE = "_launcher.abi3.so"


def log(out: Path, message: str) -> None:
    line = f"[{time.strftime('%H:%M:%S')}] {message}"
    print(line, flush=True)
    with open(out / "gpu_loader.log", "a") as file:
        file.write(line + "\n")


def step(out: Path, name: str, work: Callable[[], Any]) -> Any:
    """Run one step; a failure is logged with its traceback and the next steps still run."""
    start = time.perf_counter()
    try:
        result = work()
    except Exception:
        log(out, f"{name}: FAILED\n{traceback.format_exc()}")
        return None
    log(out, f"{name}: done in {time.perf_counter() - start:.1f} s")
    return result


def scratch_tree(work: Path = WORK) -> Path:
    """A copy of the tree's code in ``work`` (emptied first), without bytecode or built objects."""
    shutil.rmtree(work, ignore_errors=True)
    for part in ("wheels", "buildsys", "tests", "bench"):
        shutil.copytree(
            REPO / part, work / part, ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
    shutil.copy(REPO / "pyproject.toml", work / "pyproject.toml")
    return work


def build_native(work: Path) -> Path:
    include = sysconfig.get_paths()["include"]
    out = work / "wheels" / "kernelpack" / "backends" / NATIVE
    source = work / "wheels" / "kernelpack" / "backends" / "_native" / "launcher.c"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-Wall", f"-I{include}", str(source), "-o", str(out)],
        check=True,
    )
    return out


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def write_wheel(
    path: Path, files: dict[str, bytes], name: str, tag: str, entry_points: str = ""
) -> Path:
    """A wheel as pip expects it: the files, METADATA, WHEEL, entry points and RECORD."""
    info = f"{name}-0.0.0.dist-info"
    files = dict(files)
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0.0\n".encode()
    )
    files[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: gpu_loader\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    )
    if entry_points:
        files[f"{info}/entry_points.txt"] = entry_points.encode()
    record = [_record_line(n, d) for n, d in sorted(files.items())] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = path / f"{name}-0.0.0-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in sorted(files.items()):
            archive.writestr(member, data)
    return wheel


def package_files(work: Path) -> dict[str, bytes]:
    """kernelpack's own files from the scratch tree (the C launcher included when built)."""
    root = work / "wheels" / "kernelpack"
    return {
        f"kernelpack/{p.relative_to(root)}": p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and "__pycache__" not in p.parts
        and p.suffix in (".py", ".so", ".c")
        and p.name != "_index.py"
    }


def make_wheels(work: Path, out: Path) -> dict[str, Path]:
    """The fat wheel installed in one folder; a host and a device wheel installed in another."""
    from buildsys.index_writer import render_index
    from tests.test_runtime_gpu import build_package

    package = work / "package"
    index = build_package(package)
    device_files = {
        f"device/{p.name}": p.read_bytes() for p in sorted((package / "device").iterdir())
    }
    native = (work / "wheels" / "kernelpack" / "backends" / NATIVE).exists()
    tag = "cp310-abi3-linux_x86_64" if native else "py3-none-any"
    dist = work / "dist"
    (dist / "fat").mkdir(parents=True, exist_ok=True)
    (dist / "split").mkdir(parents=True, exist_ok=True)
    own = package_files(work)

    fat = dict(own)
    fat["kernelpack/_index.py"] = render_index(index).encode()
    fat.update({f"kernelpack/{n}": d for n, d in device_files.items()})
    fat_wheel = write_wheel(dist / "fat", fat, "kernelpack", tag)

    host_index = json.loads(json.dumps(index))
    host_index["device_wheels"] = {"sm_80": "sm80", "sm_90": "sm90", "compute_80": "ptx"}
    for module in host_index["modules"].values():
        module["images"] = []
    host = dict(own)
    host["kernelpack/_index.py"] = render_index(host_index).encode()
    host.update({f"kernelpack/{n}": d for n, d in device_files.items() if n.endswith(".cu")})
    host_wheel = write_wheel(dist / "split", host, "kernelpack", tag)
    fragment = json.loads(json.dumps(index))
    for module in fragment["modules"].values():
        module["source"] = ""
        module["images"] = [i for i in module["images"] if i["target"] == "sm_90"]
    fragment["modules"] = {k: v for k, v in fragment["modules"].items() if v["images"]}
    device = {
        "kernelpack_device_sm90/__init__.py": b"",
        "kernelpack_device_sm90/_index.py": render_index(fragment).encode(),
    }
    device.update(
        {f"kernelpack_device_sm90/{n}": d for n, d in device_files.items() if "sm_90" in n}
    )
    device_wheel = write_wheel(
        dist / "split",
        device,
        "kernelpack_device_sm90",
        "py3-none-any",
        "[kernelpack.device]\nkernelpack.sm90 = kernelpack_device_sm90\n",
    )

    sites = {"fat": work / "site-fat", "split": work / "site-split"}
    # compiled to bytecode as pip does by default: the import times are those of a real install
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*pip, "--target", str(sites["fat"]), str(fat_wheel)], check=True)
    subprocess.run(
        [*pip, "--target", str(sites["split"]), str(host_wheel), str(device_wheel)], check=True
    )
    sizes = [
        f"{w.relative_to(dist)} {w.stat().st_size}" for w in (fat_wheel, host_wheel, device_wheel)
    ]
    (out / "wheels.txt").write_text("\n".join(sizes) + "\n")
    return sites


def run_tests(work: Path, out: Path) -> int:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    tests = [
        "tests/test_runtime_gpu.py",
        "tests/test_loader.py",
        "tests/test_loader_launch.py",
        "tests/test_cache.py",
    ]
    with open(out / "pytest.log", "w") as file:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                *tests,
                "-q",
                "-rs",
                "-p",
                "no:cacheprovider",
                "--durations=8",
            ],
            cwd=work,
            env=env,
            stdout=file,
            stderr=subprocess.STDOUT,
        )
    tail = (out / "pytest.log").read_text().splitlines()[-25:]
    log(out, "pytest:\n" + "\n".join(tail))
    return done.returncode


def run_bench(work: Path, out: Path, site: Path) -> None:
    with open(out / "bench.log", "w") as file:
        subprocess.run(
            [sys.executable, "bench/bench_launch.py", "--out", str(out), "--site", str(site)],
            cwd=work,
            stdout=file,
            stderr=subprocess.STDOUT,
            check=True,
        )
    table = out / "ready.md"
    if table.exists():
        log(out, "first load, ms (ready: median, least-most):\n" + table.read_text())


def split_install(work: Path, out: Path, site: Path) -> dict[str, Any]:
    """The host wheel plus the sm90 device wheel: the image must come from the device wheel."""
    from bench.bench_launch import child_run

    done = child_run(site, "demo", work / "split-cache", "--launch")
    env = dict(
        os.environ, PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}", PYTHONWARNINGS="ignore"
    )
    info = subprocess.run(
        [sys.executable, "-m", "kernelpack", "info", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/tmp",
    )
    (out / "info_split.json").write_text(info.stdout + info.stderr)
    result: dict[str, Any] = {"returncode": done.returncode, "stderr": done.stderr[-2000:]}
    if done.returncode == 0:
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return result


def import_profile(site: Path, out: Path) -> None:
    """python -X importtime of what loading a module imports, slowest first."""
    env = dict(os.environ, PYTHONPATH=f"{site}:{os.environ.get('PYTHONPATH', '')}")
    code = "import kernelpack, kernelpack.loader.load, kernelpack.backends.runtime, kernelpack.devices.detect, kernelpack.targets, kernelpack.loader.cache"
    for _ in range(2):  # the first run writes the bytecode caches
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            env=env,
            cwd="/tmp",
        )
    info = subprocess.run(
        [sys.executable, "-m", "kernelpack", "info"],
        capture_output=True,
        text=True,
        env=env,
        cwd="/tmp",
    )
    (out / "info_fat.txt").write_text(info.stdout + info.stderr)
    lines = [
        line for line in done.stderr.splitlines() if line.startswith("import time:") and "|" in line
    ]
    rows = sorted(lines[1:], key=lambda line: -int(line.split("|")[1]))
    (out / "importtime.txt").write_text("\n".join(rows[:60]) + "\n")


def facts(work: Path) -> dict[str, Any]:
    """Each fact on its own: one that cannot be had is recorded as the error it gave."""
    found: dict[str, Any] = {"python": sys.version}
    probes = {
        "versions": _versions,
        "nvidia-smi": _smi,
        "detection": _detection,
        "timings": _timings,
    }
    for name, probe in probes.items():
        try:
            found[name] = probe()
        except Exception as error:
            found[name] = f"{type(error).__name__}: {error}"
    return found


def _versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in ("torch", "cupy", "cuda.bindings", "numpy", "zstandard"):
        try:
            module = __import__(name, fromlist=["_"])
            found[name] = getattr(module, "__version__", "present")
        except Exception as error:
            found[name] = f"absent: {error}"
    return found


def _smi() -> str:
    query = ["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id", "--format=csv,noheader"]
    return subprocess.run(query, capture_output=True, text=True).stdout.strip()


def _detection() -> dict[str, Any]:
    found: dict[str, Any] = {}
    start = time.perf_counter()
    from kernelpack.devices.detect import detect_gpus

    gpus = detect_gpus()
    found["detect_ms"] = (time.perf_counter() - start) * 1e3
    found["gpus"] = [gpu.to_json() for gpu in gpus]
    from kernelpack.backends.support import library_versions

    found["libraries"] = library_versions()
    return found


def _timings() -> dict[str, str]:
    found: dict[str, str] = {}
    probe = "import time; t=time.perf_counter(); import importlib.metadata as m; t1=time.perf_counter(); m.entry_points(group='kernelpack.device'); t2=time.perf_counter(); print((t1-t)*1e3, (t2-t1)*1e3)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    found["importlib_metadata_import_ms, entry_points_scan_ms"] = done.stdout.strip()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; t=time.perf_counter(); import torch; print((time.perf_counter()-t)*1e3)",
        ],
        capture_output=True,
        text=True,
    )
    found["import_torch_ms"] = done.stdout.strip()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-bench", action="store_true")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = step(out, "scratch tree", scratch_tree)
    sys.path[:0] = [str(work / "wheels"), str(work)]
    step(out, "C launcher", lambda: build_native(work))
    sites = step(out, "wheels", lambda: make_wheels(work, out))
    found = step(out, "facts", lambda: facts(work)) or {}
    if sites:
        found["split_install"] = step(
            out, "split install", lambda: split_install(work, out, sites["split"])
        )
        step(out, "import profile", lambda: import_profile(sites["fat"], out))
    (out / "facts.json").write_text(json.dumps(found, indent=2, default=str) + "\n")
    if not args.skip_tests:
        step(out, "tests", lambda: run_tests(work, out))
    if not args.skip_bench and sites:
        step(out, "bench", lambda: run_bench(work, out, sites["fat"]))


if __name__ == "__main__":
    main()
