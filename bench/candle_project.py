"""Lay out candle's candle-kernels sources as a kernelpack project, one module per folder, with no
source edits, and optionally build it and summarise the kernels by target (issue 14's end-to-end
check; tests/test_candle.py and docs/your-kernels.md use it).

    python bench/candle_project.py CANDLE_KERNELS_SRC OUT [--modules affine,unary,moe]
        [--targets gfx942,sm_90 | --targets default] [--build [--jobs N] [--vendor amd|nvidia]]

CANDLE_KERNELS_SRC is candle's ``candle-kernels/src`` (candle 2a13b0f in docs/hipify-corpus.toml;
never committed here). Each top-level ``<module>.cu`` is copied byte for byte to
``OUT/kernel_sources/<module>/<module>.cu`` and each shared header to ``OUT/kernel_sources/include/``;
each folder (``moe/``: 3 translation units, ``mmq_gguf/``: 11) is copied as it is into
``OUT/kernel_sources/<folder>/``, a module the builder device-links from its units.
``OUT/pyproject.toml`` names the project ``candle-kernels`` (import name ``candle_kernels``).

``--targets default`` takes kernelpack's own arch_matrix.toml; its PTX targets are left out (and
said so) when a module of several units is laid out, as PTX cannot be device-linked.

``--build`` then runs ``python -m buildsys build --project OUT --out OUT/out`` with the builder's
progress on the terminal, and prints the wall time, the machine and a table of kernels by module
and target read from the index it wrote (``OUT/summary.json`` holds the same). The build's own
summary table (compile times, sizes) comes first, and a failed build's one-line error last.

``--wheels`` is issue 14's end-to-end check instead: ``python -m buildsys wheels --project OUT
--out OUT/dist``, the host wheel and every device wheel installed into a fresh virtual environment
(``OUT/venv``, with the runtime's dependencies, zstandard and numpy, packed from this interpreter;
the runtime is this checkout's, on PYTHONPATH), ``python -P -m kernelpack info --json`` there on the
recorded MI300X topology, and per module and target three kernel counts side by side: info's
kernels, the index's symbols of that image, and readelf's count in the installed object (cubin:
entry functions of any binding; code object: kernel descriptors ``*.kd``), plus the image info
selects on each of the eight GPUs.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HEADER_SUFFIXES = (".cuh", ".h")
DEFAULT_TARGETS = ("gfx942", "sm_90")
REPO_ROOT = Path(__file__).resolve().parent.parent


def pyproject_text() -> str:
    return (
        "[build-system]\n"
        'requires = ["kernelpack-buildsys"]\n'
        'build-backend = "buildsys.backend"\n\n'
        "[project]\n"
        'name = "candle-kernels"\n'
        'version = "0.9.1"\n'
        'description = "candle\'s CUDA kernels, packed by kernelpack for AMD and NVIDIA GPUs"\n'
        'requires-python = ">=3.11"\n\n'
        "[tool.kernelpack]\n"
        'sources = "kernel_sources"\n'
        'matrix = "arch_matrix.toml"\n'
    )


def _quoted(targets: list[str]) -> str:
    return "[" + ", ".join(f'"{t}"' for t in targets) + "]"


def matrix_text(targets: tuple[str, ...]) -> str:
    """arch_matrix.toml with the AMD, NVIDIA sm and PTX (compute_XY) targets of ``targets``."""
    amd = [t for t in targets if t.startswith("gfx")]
    nvidia = [t for t in targets if t.startswith("sm_")]
    ptx = [t for t in targets if t.startswith("compute_")]
    text = f"[amd]\ntargets = {_quoted(amd)}\n" if amd else ""
    if nvidia or ptx:
        text += f"[nvidia]\ntargets = {_quoted(nvidia)}\n"
        text += f"ptx = {_quoted(ptx)}\n" if ptx else ""
    return text


def default_targets() -> tuple[str, ...]:
    """kernelpack's own default matrix, every AMD, NVIDIA sm and PTX target."""
    matrix = tomllib.loads((REPO_ROOT / "arch_matrix.toml").read_text())
    amd, nvidia = matrix.get("amd", {}), matrix.get("nvidia", {})
    return (*amd.get("targets", []), *nvidia.get("targets", []), *nvidia.get("ptx", []))


def module_folders(source: Path) -> list[str]:
    """candle's folders of several translation units (moe, mmq_gguf)."""
    return sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.cu")))


def lay_out(
    source: Path,
    out: Path,
    modules: list[str] | None = None,
    targets: tuple[str, ...] = DEFAULT_TARGETS,
) -> list[str]:
    """Write the project into ``out``; returns the modules laid out (sorted)."""
    folders = module_folders(source)
    found = sorted([p.stem for p in source.glob("*.cu")] + folders)
    chosen = found if modules is None else [m for m in found if m in modules]
    missing = sorted(set(modules or []) - set(found))
    if missing:
        raise SystemExit(f"{source}: no module {', '.join(missing)} (a .cu file or a folder)")
    include = out / "kernel_sources" / "include"
    include.mkdir(parents=True, exist_ok=True)
    for header in sorted(source.iterdir()):
        if header.suffix in HEADER_SUFFIXES:
            shutil.copyfile(header, include / header.name)
    for module in chosen:
        folder = out / "kernel_sources" / module
        if module in folders:
            shutil.copytree(source / module, folder, dirs_exist_ok=True)
            continue
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / f"{module}.cu", folder / f"{module}.cu")
    (out / "pyproject.toml").write_text(pyproject_text())
    (out / "arch_matrix.toml").write_text(matrix_text(targets))
    return chosen


def kernels_by_target(index: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per module, how many kernels each target's image defines (its symbols), and the module's
    kernel count under "all"."""
    table: dict[str, dict[str, int]] = {}
    for name, module in sorted(index["modules"].items()):
        row = {"all": len(module["kernels"])}
        for image in module["images"]:
            row[image["target"]] = len(image["symbols"])
        table[name] = row
    return table


def read_index_file(path: Path) -> dict[str, Any]:
    """The INDEX literal of a written _index.py, read without importing it."""
    text = path.read_text()
    literal = text[text.index("INDEX: Index = ") + len("INDEX: Index = ") :]
    index: dict[str, Any] = ast.literal_eval(literal)
    return index


def build(project: Path, jobs: int, vendor: str | None) -> dict[str, Any]:
    """Run the builder on the project (progress to the terminal); the measurement."""
    argv = [sys.executable, "-m", "buildsys", "build", "--project", str(project)]
    argv += ["--out", str(project / "out"), "--jobs", str(jobs)]
    if vendor:
        argv += ["--vendor", vendor]
    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT}:{REPO_ROOT / 'wheels'}")
    started = time.monotonic()
    status = subprocess.run(argv, env=env, check=False).returncode
    seconds = time.monotonic() - started
    summary: dict[str, Any] = {
        "command": " ".join(argv[1:]),
        "status": status,
        "seconds": round(seconds, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
    }
    index_file = project / "out" / "_index.py"
    if status == 0 and index_file.is_file():
        summary["kernels"] = kernels_by_target(read_index_file(index_file))
    return summary


def readelf_kernels(data: bytes, name: str) -> int:
    """How many kernels binutils' readelf finds in a cubin (functions marked as entries,
    STO_CUDA_ENTRY in st_other, defined) or an AMD code object (kernel descriptors, ``*.kd``); a
    bundle's gfx942 code object is taken out first (decompressed, for a compressed one)."""
    from kernelpack.formats import read_bundle

    if not data.startswith(b"\x7fELF"):
        (entry,) = [e for e in read_bundle(data, name) if e.target.startswith("gfx942")]
        data = bytes(entry.view)
    with tempfile.NamedTemporaryFile(suffix=".elf") as file:
        file.write(data)
        file.flush()
        listing = subprocess.run(
            ["readelf", "-sW", file.name], capture_output=True, text=True, check=True
        ).stdout
    kernels: set[str] = set()  # a code object lists its symbols twice, .dynsym and .symtab
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) < 8 or "UND" in fields:
            continue
        descriptor = fields[3] == "OBJECT" and fields[-1].endswith(".kd")
        entry = fields[3] == "FUNC" and "[<other>:" in line
        if descriptor or (entry and int(line.split("[<other>:")[1].split("]")[0], 16) & 0x10):
            kernels.add(fields[-1])
    return len(kernels)


def check_wheels(project: Path, jobs: int) -> dict[str, Any]:
    """The end-to-end check of ``--wheels`` (see the module's docstring): the measurement."""
    sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "wheels")]
    from tests.wheelhouse import repack

    env = dict(os.environ, PYTHONPATH=f"{REPO_ROOT}:{REPO_ROOT / 'wheels'}")
    dist = project / "dist"
    argv = [sys.executable, "-m", "buildsys", "wheels", "--project", str(project)]
    argv += ["--out", str(dist), "--jobs", str(jobs)]
    started = time.monotonic()
    status = subprocess.run(argv, env=env, check=False).returncode
    summary: dict[str, Any] = {
        "command": " ".join(argv[1:]),
        "status": status,
        "seconds": round(time.monotonic() - started, 1),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
    }
    if status != 0:
        return summary
    venv = project / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    wheels = [
        *dist.glob("candle_kernels-*-py3-none-any.whl"),
        *dist.glob("candle_kernels_device_*.whl"),
    ]
    wheels += repack(["zstandard", "numpy"], project / "wheelhouse")  # the runtime's dependencies
    pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    subprocess.run([*pip, *map(str, wheels)], check=True)
    mi300x = REPO_ROOT / "tests" / "fixtures" / "sysfs" / "mi300x-8gpu"
    info = subprocess.run(
        [str(python), "-P", "-m", "kernelpack", "info", "--json", "--sysfs-root", str(mi300x)],
        capture_output=True,
        text=True,
        check=True,
        cwd=project,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO_ROOT / "wheels"),
            "KERNELPACK_CACHE_DIR": str(project / "cache"),
        },
    )
    candle = json.loads(info.stdout)["packages"]["candle_kernels"]
    site = next(venv.glob("lib/python*/site-packages"))
    counts: dict[str, Any] = {
        name: {
            "info": len(module["kernels"]),
            "selected": sorted({r["image"]["target"] for r in module["images"] if r["image"]}),
        }
        for name, module in sorted(candle["modules"].items())
    }
    for device in sorted(
        p for p in site.glob("candle_kernels_device_*") if p.suffix != ".dist-info"
    ):
        fragment = read_index_file(device / "_index.py")
        for name, module in fragment["modules"].items():
            for image in module["images"]:
                data = (device / image["file"]).read_bytes()
                counts[name][image["target"]] = {
                    "index": len(image["symbols"]),
                    "readelf": readelf_kernels(data, str(device / image["file"])),
                }
    summary["kernels"] = counts
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    print(
        f"\n{summary['command']}: exit {summary['status']} in {summary['seconds']} s "
        f"on {summary['machine']}, {summary['date']}"
    )
    table = summary.get("kernels")
    if not table:
        return
    targets = sorted({t for row in table.values() for t in row if t != "all"})
    print("\nkernels by module and target (the index's per-image symbols)")
    print("\t".join(["module", "kernels", *targets]))
    for module, row in table.items():
        cells = [str(row.get(t, "-")) for t in targets]
        print("\t".join([module, str(row["all"]), *cells]))
    total = sum(row["all"] for row in table.values())
    print(f"{len(table)} modules, {total} kernels")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="candle's candle-kernels/src folder")
    parser.add_argument("out", type=Path, help="the project folder to write")
    parser.add_argument(
        "--modules", help="comma-separated modules (default: every top-level .cu and folder)"
    )
    parser.add_argument(
        "--targets",
        default=",".join(DEFAULT_TARGETS),
        help="comma-separated targets, or 'default' for kernelpack's arch_matrix.toml",
    )
    parser.add_argument("--build", action="store_true", help="build it and print the summary")
    parser.add_argument(
        "--wheels", action="store_true", help="build wheels, install, info --json, count kernels"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--vendor", choices=("amd", "nvidia"))
    args = parser.parse_args()
    if not args.source.is_dir():
        print(f"error: {args.source}: not a folder (candle-kernels/src)", file=sys.stderr)
        return 2
    modules = args.modules.split(",") if args.modules else None
    targets = default_targets() if args.targets == "default" else tuple(args.targets.split(","))
    linked = set(module_folders(args.source)) & set(modules or module_folders(args.source))
    ptx = [t for t in targets if t.startswith("compute_")]
    if linked and ptx:
        targets = tuple(t for t in targets if t not in ptx)
        print(
            f"left out {', '.join(ptx)}: PTX cannot be device-linked, and {', '.join(sorted(linked))} "
            "have several units",
            file=sys.stderr,
        )
    laid = lay_out(args.source, args.out, modules, targets)
    print(f"{args.out}: modules {', '.join(laid)}; targets {', '.join(targets)}")
    if args.wheels:
        summary = check_wheels(args.out, args.jobs)
        (args.out / "wheels-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print(json.dumps(summary, indent=1))
        return 0 if summary["status"] == 0 else 1
    if not args.build:
        return 0
    summary = build(args.out, args.jobs, args.vendor)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print_summary(summary)
    return 0 if summary["status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
