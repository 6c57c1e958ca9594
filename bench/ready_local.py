"""kernelpack's own share of the first load, measured where there is no GPU:

    python bench/ready_local.py [--runs 15] [--work DIR] [--out DIR]

The same fat wheel as bench/gpu_loader.py (the test package's sm_80/sm_90 cubins, built with nvcc;
the C launcher built with cc) installed with pip into ``--work``, then ``--runs`` fresh processes
of bench/ready_child.py loading its sm_90 cubin, over bench/stub_libcuda.c: a stand-in libcuda.so.1
whose calls return at once, so that import, index, detection, selection, reading, sha256 and
kernel lookup run as on the GPU machine and the driver's own time is left out. The table
(median ready time, least to most, and each phase's median) is printed and, with ``--out``, written
with the runs as ready_local.json; docs/loader.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

from bench_launch import first_load, ready_table, summarise  # noqa: E402
from gpu_loader import build_native, make_wheels, scratch_tree  # noqa: E402


def stub_driver(folder: Path) -> Path:
    """bench/stub_libcuda.c built as ``folder``/libcuda.so.1."""
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / "libcuda.so.1"
    source = REPO / "bench" / "stub_libcuda.c"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-Wall", str(source), "-o", str(library)], check=True
    )
    return folder


def cpu_model() -> str:
    """The processor's name as /proc/cpuinfo gives it (the machine the figures are of)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine()
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=15, help="fresh processes (default 15)")
    parser.add_argument(
        "--work",
        type=Path,
        help="scratch folder, missing or empty (default: a temporary folder, removed after)",
    )
    parser.add_argument("--out", type=Path, help="write ready_local.json here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give at least 1")
    if args.work is not None and args.work.exists() and any(args.work.iterdir()):
        parser.error(f"--work {args.work}: not empty; give a missing or empty folder")
    with tempfile.TemporaryDirectory(prefix="kernelpack-ready-") as temporary:
        run(args, (args.work or Path(temporary)).resolve())


def run(args: argparse.Namespace, work: Path) -> None:
    """The fat wheel built and installed under ``work``, the runs, the table and the report."""
    work = scratch_tree(work)
    sys.path[:0] = [str(work / "wheels"), str(work)]
    build_native(work)
    site = make_wheels(work, work)["fat"]
    stub = stub_driver(work / "stub")
    raw = first_load(
        site,
        work / "caches",
        paths=(("demo", "cubin"),),
        repeats=args.runs,
        launch=False,
        environ={"LD_LIBRARY_PATH": str(stub)},
    )
    summaries = {name: summarise(runs) for name, runs in raw.items() if isinstance(runs, list)}
    table = ready_table(summaries)
    print(table)
    print(raw["cubin warm profile"], file=sys.stderr)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        report = {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{cpu_model()}, {os.cpu_count()} CPUs, {platform.system()}",
            "python": sys.version.split()[0],
            "summary": summaries,
            "runs": raw,
            "table": table,
        }
        text = json.dumps(report, indent=2, sort_keys=True)
        partial = args.out / ".ready_local.json.partial"  # kernelpack is the scratch copy's here
        partial.write_text(text + "\n")
        partial.replace(args.out / "ready_local.json")


if __name__ == "__main__":
    main()
