"""Build speed and bundle size: the builder against the usual one-call fat hipcc build.

Measures, in one run and on this machine:
- a cold build of the full matrix (every job compiled, empty cache), and of its AMD part alone
  next to one ``hipcc --genco`` call per module naming every AMD target (the usual fat build);
- a no-op rebuild (``python -m buildsys build`` as a user runs it, interpreter start included);
- a rebuild after editing one module's source;
- each module's bundle: ours zstd (CCOB), ours uncompressed, and hipcc ``--offload-compress``.

Writes a markdown table (with the command and the machine) to docs/bench-build.md, or --out.
Run: ``python bench/bench_build.py`` (or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# this checkout's builder and the kernelpack it builds, as `python -m buildsys` runs them
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "wheels")]

from buildsys.build import build  # noqa: E402
from buildsys.jobs import BuildResult  # noqa: E402
from buildsys.matrix import load_matrix  # noqa: E402
from buildsys.settings import BuildSettings  # noqa: E402
from buildsys.toolchain import Toolchain, amd_toolchain, cuda_toolchain  # noqa: E402


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def checked(result: BuildResult) -> BuildResult:
    if result.failed:
        messages = [o.message for o in result.outcomes if o.message] + [result.error]
        raise SystemExit(f"build failed: {messages}")
    return result


def noop_argv(settings: BuildSettings) -> list[str]:
    argv = [sys.executable, "-m", "buildsys", "build", "--sources", str(settings.sources)]
    argv += ["--out", str(settings.out), "--cache-dir", str(settings.cache_dir)]
    return argv + (["--vendor", settings.vendor] if settings.vendor else [])


def noop_cli_seconds(settings: BuildSettings, repeats: int) -> float:
    """Median wall time of ``python -m buildsys build`` with nothing to do, as a user runs it:
    interpreter start included, bytecode cached (PYTHONDONTWRITEBYTECODE, which some shells and
    CI set, would recompile every module on every run: about 0.15 s more)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(noop_argv(settings), cwd=REPO_ROOT, check=True, capture_output=True, env=env)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(noop_argv(settings), cwd=REPO_ROOT, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def noop_only(args: argparse.Namespace) -> int:
    """``--noop-only``: the default matrix built (warm from the user's cache, or cold) into a
    temporary folder, then the no-op rebuild's median; printed, and written to ``args.out``'s
    "No-op rebuild" section when that file exists."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kernelpack-bench-") as tmp:
        settings = BuildSettings(out=Path(tmp) / "out", vendor=None if cuda_toolchain() else "amd")
        jobs = len(checked(build(settings, progress=False)).outcomes)
        noop = noop_cli_seconds(settings, args.repeats)
    section = [
        NOOP_HEADING,
        "",
        f"Command: `python bench/bench_build.py --noop-only --repeats {args.repeats}`, "
        f"{time.strftime('%Y-%m-%d')}. Machine: {machine()}; load average {load_before:.1f} "
        f"before, {os.getloadavg()[0]:.1f} after.",
        "",
        "| build | seconds |",
        "| --- | ---: |",
        f"| default matrix ({jobs} jobs), no-op rebuild (`python -m buildsys build`, median of "
        f"{args.repeats}, interpreter start included) | {noop:.3f} |",
        "",
    ]
    print("\n".join(section))
    if args.out.exists():
        text = args.out.read_text()
        before, _, after = text.partition(NOOP_HEADING)
        rest = after.partition("\n## ")[2]
        args.out.write_text(
            before.rstrip("\n") + "\n\n" + "\n".join(section) + ("\n## " + rest if rest else "")
        )
    return 0


NOOP_HEADING = "## No-op rebuild"


def fat_hipcc(
    toolchain: Toolchain, hip_source: Path, targets: list[str], folder: Path, *, compress: bool
) -> tuple[float, int]:
    """One hipcc call for every AMD target (the usual fat build): seconds and bundle bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(hip_source, folder / hip_source.name)
    output = folder / (hip_source.stem + ".hsaco")
    argv = ["hipcc", "--genco", "-O3", *[f"--offload-arch={t}" for t in targets]]
    argv += ["--offload-compress"] if compress else []
    argv += [hip_source.name, "-o", output.name]
    seconds = timed(lambda: toolchain.run(argv, cwd=folder))
    return seconds, output.stat().st_size


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "docs" / "bench-build.md")
    parser.add_argument(
        "--repeats", type=int, default=5, help="no-op rebuilds to take the median of"
    )
    parser.add_argument(
        "--noop-only",
        action="store_true",
        help="measure only the no-op rebuild of the default matrix (noop_only)",
    )
    args = parser.parse_args()
    if args.noop_only:
        return noop_only(args)

    load_before = os.getloadavg()[0]
    hip = amd_toolchain()
    cuda = cuda_toolchain()
    amd_targets = [t.target for t in load_matrix().amd]
    with tempfile.TemporaryDirectory(prefix="kernelpack-bench-") as tmp:
        work = Path(tmp)
        sources = work / "kernel_sources"
        shutil.copytree(REPO_ROOT / "kernel_sources", sources)
        full = BuildSettings(
            sources=sources,
            out=work / "full",
            cache_dir=work / "cache-full",
            vendor=None if cuda else "amd",
        )
        amd_only = replace(full, out=work / "amd", cache_dir=work / "cache-amd", vendor="amd")

        cold_full = timed(lambda: checked(build(full, progress=False)))
        cold_amd_result: list[BuildResult] = []
        cold_amd = timed(lambda: cold_amd_result.append(checked(build(amd_only, progress=False))))
        modules = sorted({o.job.module.name for o in cold_amd_result[0].outcomes})
        noop = noop_cli_seconds(full, args.repeats)

        edited = sorted((sources / modules[0]).glob("*.cu"))[0]
        edited.write_text(edited.read_text() + "\n// edited by bench_build.py\n")
        edit_result: list[BuildResult] = []
        edit = timed(lambda: edit_result.append(checked(build(full, progress=False))))
        recompiled = edit_result[0].count("compiled")

        uncompressed = work / "amd-plain"
        checked(build(replace(amd_only, out=uncompressed, compress=False), progress=False))
        rows = []
        fat_seconds = 0.0
        for module in modules:
            hip_source = amd_only.out / "device" / f"{module}.hip"
            seconds, fat_plain = fat_hipcc(
                hip, hip_source, amd_targets, work / "fat" / module, compress=False
            )
            _, fat_zstd = fat_hipcc(
                hip, hip_source, amd_targets, work / "fatz" / module, compress=True
            )
            fat_seconds += seconds
            ours = (amd_only.out / "device" / f"{module}.hsaco").stat().st_size
            plain = (uncompressed / "device" / f"{module}.hsaco").stat().st_size
            rows.append((module, ours, plain, fat_zstd, fat_plain))
        with ThreadPoolExecutor(max_workers=os.cpu_count()) as pool:
            fat_parallel = timed(
                lambda: list(
                    pool.map(
                        lambda m: fat_hipcc(
                            hip,
                            amd_only.out / "device" / f"{m}.hip",
                            amd_targets,
                            work / "fatp" / m,
                            compress=False,
                        ),
                        modules,
                    )
                )
            )

    load_after = os.getloadavg()[0]
    jobs = len(amd_targets) * len(modules)
    full_jobs = len(edit_result[0].outcomes)
    command = "python bench/bench_build.py"
    lines = [
        "# Build benchmark",
        "",
        f"Command: `{command}` (one run, {time.strftime('%Y-%m-%d')}; writes this file). "
        f"Machine: {machine()}; load average "
        f"{load_before:.1f} before, {load_after:.1f} after (other work on the machine shows here).",
        f"Toolchains: {hip.name} {hip.version}"
        + (f"; {cuda.name} {cuda.version}" if cuda else "")
        + f". Matrix: arch_matrix.toml ({len(amd_targets)} AMD targets"
        + (f", {full_jobs // len(modules) - len(amd_targets)} NVIDIA" if cuda else "")
        + f"), modules: {', '.join(modules)}.",
        "",
        "## Time",
        "",
        "| build | seconds | ratio |",
        "| --- | ---: | ---: |",
        f"| AMD, one `hipcc --genco` per module naming all {len(amd_targets)} targets, modules "
        f"one after another | {fat_seconds:.2f} | 1.00 |",
        f"| AMD, the same hipcc calls, modules at once ({os.cpu_count()} at a time) "
        f"| {fat_parallel:.2f} | {fat_parallel / fat_seconds:.2f} |",
        f"| AMD, buildsys cold: {jobs} per-target jobs, --jobs {os.cpu_count()} "
        f"| {cold_amd:.2f} | {cold_amd / fat_seconds:.2f} |",
        f"| full matrix, buildsys cold ({full_jobs} jobs) | {cold_full:.2f} | "
        f"{cold_full / fat_seconds:.2f} |",
        f"| full matrix, no-op rebuild (`python -m buildsys build`, median of {args.repeats}) "
        f"| {noop:.3f} | {noop / fat_seconds:.3f} |",
        f"| full matrix, after editing {edited.name} ({recompiled} jobs recompiled) "
        f"| {edit:.2f} | {edit / fat_seconds:.2f} |",
        "",
        "## AMD bundle size (bytes; ratio to the uncompressed bundle)",
        "",
        "| module | buildsys zstd (CCOB) | buildsys uncompressed | hipcc --offload-compress "
        "| hipcc uncompressed |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for module, ours, plain, fat_zstd, fat_plain in rows:
        lines.append(
            f"| {module} | {ours:,} ({ours / plain:.3f}) | {plain:,} (1.000) "
            f"| {fat_zstd:,} ({fat_zstd / plain:.3f}) | {fat_plain:,} ({fat_plain / plain:.3f}) |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
