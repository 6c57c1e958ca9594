"""kernelpack.walk on the GPU against the numpy walker on the CPU; writes docs/bench-walk.md.

    python bench/bench_walk.py [--output docs/bench-walk.md] [--walks 10000,100000,1000000]
                               [--primes 8,32] [--sizes 2,3] [--depth 1000] [--no-gpu] [--no-cpu]

Throughput is (walk, prime, step) triples per second, depth 1000, for each matrix size m, number
of primes K and number of walks B; both columns come from one run on one machine.

How times are taken. GPU: kernelpack.walk.run (numpy in, numpy out), best of REPEATS after a
warm-up; "kernel" is the GPU time of its launches (CUDA events around each launch, on the stream
the call runs on: the residue kernel and the float pass, which is given apart as a share),
"end to end" the whole call, transfers included; "search end to end" a call that asks for no
array and the top 100 (selected on the GPU), with numpy shifts/dirs and with torch tensors
already on the GPU. CPU: kernelpack.walk.run_numpy on one core
(numpy does not thread these operations), timed at ``steps`` steps and at 1 and scaled: the
steps per call are chosen to take about CPU_SECONDS, which at B = 10^6 is a handful of steps out
of the 1000 (the table says how many).

The limit is the GPU's 32-bit integer multiply rate over the multiplier work of one step of one
(walk, prime): per entry of P*M, m products of 32x32 -> 64 bits (2 multiplier slots each) and
one Montgomery reduction (a 32-bit multiply and a high half, 1 + 2 slots); the entries of M cost
no multiplication here, as both fields advance them by finite differences in registers
(lower.py's "registers" form). So slots = 2 m^3 + 3 m^2 (28 for m = 2, 81 for m = 3), and
limit = rate x SMs x clock / slots.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "wheels"))

from kernelpack.files.atomic import atomic_write  # noqa: E402
from kernelpack.walk import Program, WalkResult, compile_program, run, run_numpy  # noqa: E402
from kernelpack.walk.launch import float_registers_exact  # noqa: E402
from kernelpack.walk.lower import lower  # noqa: E402
from kernelpack.walk.walker import bind  # noqa: E402

DEFAULT_OUTPUT = REPO / "docs" / "bench-walk.md"
REPEATS = 3
CPU_SECONDS = 2.0
# 32-bit integer multiply (IMAD) results per clock per SM by compute capability: the CUDA C++
# Programming Guide's table of arithmetic instruction throughput.
IMAD_PER_CLOCK_PER_SM = {(8, 0): 64, (8, 6): 64, (8, 9): 64, (9, 0): 64}
# Representative fields of a formula search: a continued-fraction-like 2x2 matrix and an
# order-3 recurrence's companion matrix, polynomials of degree up to 3 in two axes.
MATRICES = {
    2: [["2*x + y + 1", "-(x + 1)**2 * (x + y + 1)"], ["1", "0"]],
    3: [["0", "0", "x**3 + 2*y"], ["1", "0", "-(x*y + 2)"], ["0", "1", "3*x + 2*y + 1"]],
}
AXES = ["x", "y"]


def multiplier_slots(m: int) -> int:
    return 2 * m**3 + 3 * m**2


def largest_primes(count: int) -> np.ndarray:
    found: list[int] = []
    candidate = 2**31 - 1
    while len(found) < count:
        if all(candidate % f for f in range(3, int(candidate**0.5) + 1, 2)):
            found.append(candidate)
        candidate -= 2
    return np.array(found, dtype=np.uint32)


@dataclass(frozen=True)
class Case:
    m: int
    primes: int
    walks: int


@dataclass(frozen=True)
class Row:
    case: Case
    gpu_kernel: float | None  # triples per second
    gpu_end_to_end: float | None
    gpu_top_numpy: float | None  # end to end, outputs=(), top_k=100, numpy shifts/dirs in
    gpu_top_torch: float | None  # the same with torch shifts/dirs already on the GPU
    float_share: float | None  # of the kernel time, the float pass's
    cpu: float | None
    cpu_steps: int


def walk_arguments(case: Case, depth: int) -> tuple[Program, dict[str, object]]:
    rng = np.random.default_rng(case.walks * 131 + case.primes * 7 + case.m)
    program = compile_program(MATRICES[case.m], AXES)
    arguments: dict[str, object] = {
        "shifts": rng.integers(1, 100, (case.walks, len(AXES))),
        "dirs": rng.integers(-3, 4, (case.walks, len(AXES))) * 2 + 1,  # odd: never 0
        "primes": largest_primes(case.primes),
        "depth": depth,
        "depth1": depth // 2,
        "depth2": depth,
        "target": 1.0,
    }
    return program, arguments


def best_seconds(call: Callable[[], WalkResult], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


class LaunchTimer:
    """Times every launch of the walk module's kernels with CUDA events on torch's current stream
    (the stream kernelpack.walk.run launches on), per kernel name: each kernel's ``launch`` is
    wrapped while the timer is entered."""

    def __init__(self) -> None:
        import torch

        from kernelpack.loader import load as loader

        module = loader.load("walk")
        self._torch = torch
        self._kernels = [module.kernel(name) for name in module.kernel_names]
        self.events: list[tuple[str, Any, Any]] = []

    def __enter__(self) -> LaunchTimer:
        for kernel in self._kernels:
            kernel.launch = self._timed(kernel.name, kernel.launch)
        return self

    def _timed(self, name: str, launch: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> None:
            start = self._torch.cuda.Event(enable_timing=True)
            end = self._torch.cuda.Event(enable_timing=True)
            start.record()
            launch(*args, **kwargs)
            end.record()
            self.events.append((name, start, end))

        timed.untimed = launch  # type: ignore[attr-defined]
        return timed

    def __exit__(self, *exc: object) -> None:
        for kernel in self._kernels:
            kernel.launch = kernel.launch.untimed  # type: ignore[attr-defined]

    def seconds(self) -> dict[str, float]:
        self._torch.cuda.synchronize()
        total: dict[str, float] = {}
        for name, start, end in self.events:
            total[name] = total.get(name, 0.0) + start.elapsed_time(end) / 1e3
        self.events.clear()
        return total


def measure_selection(case: Case, depth: int) -> tuple[float, float]:
    """End-to-end triples/s of a search call (no array back, the top 100 selected on the GPU):
    numpy shifts and dirs in, and torch ones already on the GPU. Best of REPEATS."""
    import torch

    program, arguments = walk_arguments(case, depth)
    search = {**arguments, "outputs": (), "top_k": 100}
    on_gpu = {
        **search,
        "shifts": torch.from_numpy(arguments["shifts"]).cuda(),  # type: ignore[arg-type]
        "dirs": torch.from_numpy(arguments["dirs"]).cuda(),
    }  # type: ignore[arg-type]
    rates = []
    for call in (search, on_gpu):
        run(program, **call)  # type: ignore[arg-type]  # warm-up
        seconds = best_seconds(lambda call=call: run(program, **call), REPEATS)  # type: ignore[arg-type, misc]
        rates.append(case.walks * case.primes * depth / seconds)
    return rates[0], rates[1]


def measure_gpu(case: Case, depth: int) -> tuple[float, float, float]:
    """(kernel triples/s, end-to-end triples/s, the float pass's share of the kernel time)."""
    program, arguments = walk_arguments(case, depth)
    run(program, **arguments)  # type: ignore[arg-type]  # warm-up: module load, allocator
    best_kernel, best_wall, float_share = float("inf"), float("inf"), 0.0
    with LaunchTimer() as timer:
        for _ in range(REPEATS):
            started = time.perf_counter()
            run(program, **arguments)  # type: ignore[arg-type]
            wall = time.perf_counter() - started
            per_kernel = timer.seconds()
            kernel = sum(per_kernel.values())
            if kernel < best_kernel:
                best_kernel = kernel
                float_share = sum(t for n, t in per_kernel.items() if "float" in n) / kernel
            best_wall = min(best_wall, wall)
    triples = case.walks * case.primes * depth
    return triples / best_kernel, triples / best_wall, float_share


def measure_cpu(case: Case, depth: int) -> tuple[float, int]:
    program, arguments = walk_arguments(case, depth)
    short = {**arguments, "depth": 1, "depth1": 1, "depth2": 1}
    setup = best_seconds(lambda: run_numpy(program, **short), 1)  # type: ignore[arg-type]
    probe_steps = 3
    probe = {**arguments, "depth": probe_steps, "depth1": 1, "depth2": probe_steps}
    per_step = (best_seconds(lambda: run_numpy(program, **probe), 1) - setup) / (probe_steps - 1)  # type: ignore[arg-type]
    steps = int(min(depth, max(probe_steps, CPU_SECONDS / max(per_step, 1e-9))))
    timed = {**arguments, "depth": steps, "depth1": 1, "depth2": steps}
    elapsed = best_seconds(lambda: run_numpy(program, **timed), 1)  # type: ignore[arg-type]
    return case.walks * case.primes * (steps - 1) / (elapsed - setup), steps


def device_facts() -> dict[str, object]:
    """Name, SM count, clock and compute capability of GPU 0 (through torch or CuPy)."""
    try:
        import torch

        props = torch.cuda.get_device_properties(0)
        facts: dict[str, object] = {
            "name": props.name,
            "sms": props.multi_processor_count,
            "capability": (props.major, props.minor),
        }
    except ImportError:
        import cupy

        raw = cupy.cuda.runtime.getDeviceProperties(0)
        facts = {
            "name": raw["name"].decode(),
            "sms": raw["multiProcessorCount"],
            "capability": (raw["major"], raw["minor"]),
        }
    facts["clock_mhz"] = max_sm_clock_mhz()
    return facts


def max_sm_clock_mhz() -> float:
    query = ["nvidia-smi", "--query-gpu=clocks.max.sm", "--format=csv,noheader,nounits"]
    output = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    return float(output.splitlines()[0])


def limit_per_second(facts: dict[str, object], m: int) -> float | None:
    rate = IMAD_PER_CLOCK_PER_SM.get(facts["capability"])  # type: ignore[call-overload]
    if rate is None:
        return None
    sms, clock = float(facts["sms"]), float(facts["clock_mhz"])  # type: ignore[arg-type]
    return rate * sms * clock * 1e6 / multiplier_slots(m)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def short(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def render(rows: list[Row], facts: dict[str, object] | None, depth: int, command: str) -> str:
    today = datetime.date.today().isoformat()
    gpu = (
        "no GPU"
        if facts is None
        else (
            f"{facts['name']} ({facts['sms']} SMs, max SM clock {facts['clock_mhz']:.0f} MHz, "
            f"compute capability {facts['capability'][0]}.{facts['capability'][1]})"  # type: ignore[index]
        )
    )
    lines = [
        "# Walk kernel: throughput",
        "",
        f"Measured {today} with `{command}` on one machine: GPU {gpu}; CPU {cpu_name()} "
        f"({os.cpu_count()} cores; the numpy walker uses one). Python {platform.python_version()}, "
        f"numpy {np.__version__}.",
        "",
        f"Triples = (walk, prime, step) per second at depth {depth}. GPU kernel: the GPU time of "
        "the launches of one `kernelpack.walk.run` call (CUDA events; the residue kernel and the "
        "float pass, whose share is given), best of 3; end to end: the whole call, numpy in and "
        "out. CPU: `run_numpy`, timed over the steps shown and scaled (its time per step does "
        "not depend on the step).",
        "",
        "The limit is 64 IMAD results per clock per SM (compute capability 8.x/9.0) x SMs x the "
        "maximum SM clock, over the multiplier slots one step of one (walk, prime) needs: "
        "2 m^3 + 3 m^2 (m^3 products of 32 x 32 -> 64 bits at 2 slots, and m^2 Montgomery "
        "reductions, a low product and a high half with its 64-bit addend, at 1 + 2). The entries "
        "of M cost no multiplication: both fields advance them by finite differences in "
        "registers.",
        "",
        "Search end to end: `run(..., outputs=(), top_k=100)`, the whole call with the selection "
        "on the GPU and only the top 100 back; numpy shifts/dirs in, or torch tensors already on "
        "the GPU; the share is of the kernel rate.",
        "",
        "| m | K | B | GPU kernel (float pass) | GPU end to end, all outputs | search end to end, "
        "numpy in (of kernel) | search end to end, torch in (of kernel) | CPU numpy (steps timed) "
        "| kernel / CPU | limit | limit / kernel |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        case = row.case
        limit = None if facts is None else limit_per_second(facts, case.m)
        speedup = None if row.gpu_kernel is None or row.cpu is None else row.gpu_kernel / row.cpu
        ratio = None if limit is None or row.gpu_kernel is None else limit / row.gpu_kernel
        cpu = "—" if row.cpu is None else f"{row.cpu:.3g} ({row.cpu_steps})"
        share = "" if row.float_share is None else f" ({row.float_share:.0%})"
        searches = [
            "—"
            if rate is None or row.gpu_kernel is None
            else f"{rate:.3g} ({rate / row.gpu_kernel:.0%})"
            for rate in (row.gpu_top_numpy, row.gpu_top_torch)
        ]
        lines.append(
            f"| {case.m} | {case.primes} | {case.walks:,} | {short(row.gpu_kernel)}{share} | "
            f"{short(row.gpu_end_to_end)} | {searches[0]} | {searches[1]} | {cpu} | "
            f"{short(speedup)} | {short(limit)} | "
            f"{'—' if ratio is None else f'{ratio:.2f}x'} |"
        )
    lines += [
        "",
        "Reading the table: the residue kernel runs one thread per (walk, prime), B K threads, "
        "in blocks of at most 128; the float pass one per walk, B threads through all the steps, "
        "here in its register form (the entries advanced by finite differences in float64, "
        "exact below 2^52, which the host checks for the batch). At B = 10^4 neither fills the "
        "GPU (132 SMs x 2048 threads), and the float pass's share of the time grows as K "
        "falls. End to end adds the transfers (P_final alone is B K m^2 4 bytes) and numpy's "
        "copies.",
        "",
        "Fields (axes x, y; shifts 1..99, odd dirs -5..7):",
        "",
    ]
    for m, matrix in MATRICES.items():
        program = compile_program(matrix, AXES)
        residue = lower(program, len(AXES), depth, registers=True).residue
        cpu_form = lower(program, len(AXES), depth, registers=False).residue.form
        _, arguments = walk_arguments(Case(m, 8, 1000), depth)
        exact = residue.form == "registers" and float_registers_exact(
            bind(program, **arguments).host_inputs(),
            residue.degree,
        )
        floats = "the float pass too" if exact else "the float pass evaluates"
        lines.append(
            f"- m = {m}: `{matrix}` (GPU: {residue.form} of degree {residue.degree}, {floats}; "
            f"numpy: {cpu_form})"
        )
    return "\n".join(lines) + "\n"


def integers(text: str) -> list[int]:
    return [int(float(part)) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--walks", type=integers, default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--primes", type=integers, default=[8, 32])
    parser.add_argument("--sizes", type=integers, default=[2, 3])
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--no-gpu", action="store_true", help="the CPU column only")
    parser.add_argument("--no-cpu", action="store_true", help="the GPU columns only")
    options = parser.parse_args()
    facts = None if options.no_gpu else device_facts()
    rows = []
    for m in options.sizes:
        for primes in options.primes:
            for walks in options.walks:
                case = Case(m, primes, walks)
                kernel = end_to_end = share = cpu = top_numpy = top_torch = None
                steps = 0
                if not options.no_gpu:
                    kernel, end_to_end, share = measure_gpu(case, options.depth)
                    top_numpy, top_torch = measure_selection(case, options.depth)
                if not options.no_cpu:
                    cpu, steps = measure_cpu(case, options.depth)
                rows.append(Row(case, kernel, end_to_end, top_numpy, top_torch, share, cpu, steps))
                print(rows[-1], flush=True)
    command = "python bench/bench_walk.py " + " ".join(sys.argv[1:])
    text = render(rows, facts, options.depth, command.strip())
    atomic_write(options.output, text)
    print(text)


if __name__ == "__main__":
    main()
