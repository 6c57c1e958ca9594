"""kernelpack.mlp against torch eager and torch.compile on one GPU; writes docs/bench-mlp.md.

    python bench/bench_mlp.py [--output docs/bench-mlp.md] [--batches N]

First the device's copy bandwidth (a 1 GiB device-to-device copy, bytes read plus written), then
per op, dtype and size the GPU time of kernelpack, torch eager and torch.compile (static shapes).

How times are taken: a batch of back-to-back calls is queued behind a GPU sleep long enough that the
whole batch is queued before the GPU reaches it, between two CUDA events; time per call = event
time / calls, median over the batches, after a warm-up. So the times are GPU times (kernels and the
gaps between them), free of Python's per-call cost, which is reported apart (host µs per call in a
loop at the smallest size). Inputs rotate over enough buffer sets to move ~200 MB per round, so
mid-size calls read from memory rather than from the 50 MB L2. GB/s counts the bytes each op must
move at least (inputs read once, outputs written once).
"""

from __future__ import annotations

import argparse
import datetime
import math
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kernelpack import mlp
from kernelpack.atomic import atomic_write

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "bench-mlp.md"
EPS = 1e-6
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# (rows, cols) of the op's output: one row of 4096 up to 16384 x 8192.
SIZES = [(1, 4096), (64, 4096), (512, 4096), (4096, 8192), (16384, 8192)]
LARGE = {(4096, 8192), (16384, 8192)}  # where the bandwidth goal applies
ROTATE_BYTES = 200 * 2**20
MAX_SETS = 64
CALLS_PER_BATCH = 25
WARMUP_CALLS = 10
SLEEP_CYCLES = 16_000_000  # ~8 ms at 2 GHz: longer than queueing a batch takes
COPY_BYTES = 2**30


@dataclass(frozen=True)
class Op:
    """One op: how to make a set of inputs, its three implementations, and its traffic."""

    name: str
    inputs: Callable[[int, int, torch.dtype], tuple[torch.Tensor, ...]]
    ours: Callable[..., object]
    eager: Callable[..., object]
    bytes_moved: Callable[[int, int, int], int]  # rows, cols, item size
    out_of_place: Callable[..., object] | None = None  # compiled too, for a table of its own


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)


def _silu_and_mul_eager(x: torch.Tensor) -> torch.Tensor:
    cols = x.shape[-1] // 2
    return F.silu(x[..., :cols]) * x[..., cols:]


def _rms_norm_eager(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, weight.shape, weight, EPS)


def _fused_eager(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    """In place, as kernelpack's op: residual += x, then x = rms_norm(residual)."""
    residual.add_(x)
    x.copy_(F.rms_norm(residual, weight.shape, weight, EPS))


def _fused_out_of_place(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same values as new tensors. Each call writes them to the buffers the last call's
    results freed, which stay in L2 up to its size, so at mid sizes it skips the memory writes
    that an in-place update pays: a different operation, timed apart."""
    summed = x + residual
    return F.rms_norm(summed, weight.shape, weight, EPS), summed


OPS = [
    Op(
        "swiglu",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(r, c, dtype=t)),
        mlp.swiglu,
        lambda g, u: F.silu(g) * u,
        lambda r, c, s: 3 * r * c * s,
    ),
    Op(
        "silu_and_mul",
        lambda r, c, t: (_randn(r, 2 * c, dtype=t),),
        mlp.silu_and_mul,
        _silu_and_mul_eager,
        lambda r, c, s: 3 * r * c * s,
    ),
    Op(
        "rms_norm",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(c, dtype=t)),
        lambda x, w: mlp.rms_norm(x, w, EPS),
        _rms_norm_eager,
        lambda r, c, s: (2 * r * c + c) * s,
    ),
    Op(
        "fused_add_rms_norm",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(r, c, dtype=t), _randn(c, dtype=t)),
        lambda x, res, w: mlp.fused_add_rms_norm(x, res, w, EPS),
        _fused_eager,
        lambda r, c, s: (4 * r * c + c) * s,
        _fused_out_of_place,
    ),
]


def gpu_time_us(call: Callable[[int], object], sets: int, batches: int) -> tuple[float, bool]:
    """Median GPU time per call (µs), and whether every batch was queued ahead of the GPU."""
    for i in range(WARMUP_CALLS):
        call(i % sets)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples = []
    all_ahead = True
    for batch in range(batches):
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        for i in range(CALLS_PER_BATCH):
            call((batch * CALLS_PER_BATCH + i) % sets)
        end.record()
        all_ahead &= not start.query()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / CALLS_PER_BATCH)
    return statistics.median(samples), all_ahead


def host_us_per_call(call: Callable[[], object], calls: int = 2000) -> float:
    """Wall time per call of a loop of calls (launch-bound at small sizes: Python's cost)."""
    for _ in range(WARMUP_CALLS):
        call()
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - began) * 1e6 / calls


def copy_bandwidth(batches: int) -> float:
    """GB/s of a large device-to-device copy, counting bytes read plus written."""
    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    microseconds, _ = gpu_time_us(lambda _: target.copy_(source), 1, batches)
    return 2 * COPY_BYTES / microseconds / 1e3


@dataclass(frozen=True)
class Row:
    op: str
    dtype: str
    rows: int
    cols: int
    ours_us: float
    eager_us: float
    compiled_us: float
    gbps: float
    queued_ahead: bool
    out_of_place_us: float | None


def measure(op: Op, dtype: str, rows: int, cols: int, batches: int) -> Row:
    torch_dtype = DTYPES[dtype]
    item = torch.finfo(torch_dtype).bits // 8
    moved = op.bytes_moved(rows, cols, item)
    sets = max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / moved)))
    inputs = [op.inputs(rows, cols, torch_dtype) for _ in range(sets)]
    compiled = torch.compile(op.eager, dynamic=False)
    check = [tensor.clone() for tensor in inputs[0]]
    reference = [tensor.clone() for tensor in inputs[0]]
    got = op.ours(*check)
    expected = op.eager(*reference)
    produced = check[0] if got is None else got
    wanted = reference[0] if expected is None else expected
    if not torch.allclose(produced.float(), wanted.float(), rtol=2e-2, atol=2e-2):
        raise SystemExit(f"{op.name} {dtype} {rows}x{cols}: kernelpack disagrees with torch")
    ours, ahead_ours = gpu_time_us(lambda i: op.ours(*inputs[i]), sets, batches)
    eager, ahead_eager = gpu_time_us(lambda i: op.eager(*inputs[i]), sets, batches)
    compiled_time, ahead_compiled = gpu_time_us(lambda i: compiled(*inputs[i]), sets, batches)
    out_of_place = None
    if op.out_of_place is not None:
        separate = torch.compile(op.out_of_place, dynamic=False)
        out_of_place, _ = gpu_time_us(lambda i: separate(*inputs[i]), sets, batches)
    return Row(
        op.name,
        dtype,
        rows,
        cols,
        ours,
        eager,
        compiled_time,
        moved / ours / 1e3,
        ahead_ours and ahead_eager and ahead_compiled,
        out_of_place,
    )


def machine() -> str:
    props = torch.cuda.get_device_properties(0)
    driver = ""
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, check=False)
        driver = f", driver {result.stdout.strip().splitlines()[0]}" if result.stdout else ""
    return (
        f"{props.name} ({props.multi_processor_count} SMs){driver}; CUDA {torch.version.cuda}; "
        f"torch {torch.__version__}; Python {platform.python_version()}"
    )


def loaded_through() -> str:
    """Which loader produced the kernels (the real one, or a development stand-in)."""
    return type(mlp._kernel(0, "swiglu_f32")).__module__


def verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def render(rows: list[Row], copy_gbps: float, host: dict[str, tuple[float, float, float]]) -> str:
    large = [r for r in rows if (r.rows, r.cols) in LARGE]
    worst_large = min(large, key=lambda r: r.gbps) if large else None
    slower_eager = [r for r in rows if r.ours_us >= r.eager_us]
    slower_compiled = [r for r in rows if r.ours_us > r.compiled_us]
    lines = [
        "# kernelpack.mlp on the GPU: bandwidth against torch eager and torch.compile",
        "",
        f"Command: `{' '.join(['python', 'bench/bench_mlp.py', *sys.argv[1:]])}`  ",
        f"Machine: {machine()}  ",
        f"Kernels loaded through: `{loaded_through()}`  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        f"Device copy bandwidth (1 GiB device-to-device, read + written): **{copy_gbps:.0f} GB/s**.",
        "",
        "Times are GPU µs per call: batches of calls queued behind a GPU sleep, between CUDA",
        "events, median over batches, inputs rotated over ~200 MB of buffers. GB/s counts the bytes",
        "each op must move (inputs read once, outputs written once). torch eager: `F.silu(g) * u`,",
        "`F.silu(x[..., :d]) * x[..., d:]`, `F.rms_norm`, and in place as kernelpack's",
        "fused_add_rms_norm `residual.add_(x)` then `x.copy_(F.rms_norm(residual))`; torch.compile",
        "of the same functions (static shapes, default mode).",
        "",
        "## Goals",
        "",
    ]
    if worst_large is not None:
        fraction = worst_large.gbps / copy_gbps
        lines.append(
            f"- At least 90% of copy bandwidth at large sizes (4096x8192, 16384x8192): "
            f"{verdict(fraction >= 0.9)} (lowest {fraction:.0%}: {worst_large.op} "
            f"{worst_large.dtype} {worst_large.rows}x{worst_large.cols})"
        )
    lines.append(
        f"- Faster than torch eager at every size: {verdict(not slower_eager)} "
        f"({len(rows) - len(slower_eager)} of {len(rows)} rows)"
    )
    lines.append(
        f"- At least as fast as torch.compile: {verdict(not slower_compiled)} "
        f"({len(rows) - len(slower_compiled)} of {len(rows)} rows)"
    )
    not_ahead = [r for r in rows if not r.queued_ahead]
    if not_ahead:
        lines.append(
            f"- Note: in {len(not_ahead)} rows (marked *) a batch was not fully queued ahead of "
            "the GPU (host-bound); those times include host gaps."
        )
    lines += [
        "",
        "## Results",
        "",
        "| op | dtype | rows x cols | kernelpack µs | GB/s | of copy | eager µs | compile µs "
        "| vs eager | vs compile |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.op} | {r.dtype} | {r.rows}x{r.cols}{'' if r.queued_ahead else ' *'} | "
            f"{r.ours_us:.2f} | {r.gbps:.0f} | "
            f"{r.gbps / copy_gbps:.0%} | {r.eager_us:.2f} | {r.compiled_us:.2f} | "
            f"{r.eager_us / r.ours_us:.2f}x | {r.compiled_us / r.ours_us:.2f}x |"
        )
    lines += [
        "",
        "## Host cost per call (µs, a loop of calls at 1x4096 bfloat16, wall time)",
        "",
        "| op | kernelpack | eager | compile |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, (ours, eager, compiled) in host.items():
        lines.append(f"| {name} | {ours:.1f} | {eager:.1f} | {compiled:.1f} |")
    separate = [r for r in rows if r.out_of_place_us is not None]
    if separate:
        lines += [
            "",
            "## fused_add_rms_norm against torch.compile returning new tensors",
            "",
            "torch.compile of `x + residual` then `F.rms_norm`, both returned as new tensors (out "
            "of place).",
            "Each call writes them to the buffers the previous call's results freed, which stay "
            "in the",
            "50 MB L2, so up to that size it skips the memory writes that an in-place update pays.",
            "",
            "| dtype | rows x cols | kernelpack µs (in place) | compile µs (new tensors) "
            "| vs compile |",
            "| --- | --- | ---: | ---: | ---: |",
        ]
        for r in separate:
            assert r.out_of_place_us is not None
            lines.append(
                f"| {r.dtype} | {r.rows}x{r.cols} | {r.ours_us:.2f} | {r.out_of_place_us:.2f} | "
                f"{r.out_of_place_us / r.ours_us:.2f}x |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--batches", type=int, default=11, help="timed batches per measurement")
    parser.add_argument(
        "--ops", default=",".join(op.name for op in OPS), help="comma-separated ops to time"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_mlp: torch sees no CUDA device")
    for name, value in (("cache_size_limit", 1024), ("recompile_limit", 1024)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    torch._dynamo.config.automatic_dynamic_shapes = False

    copy_gbps = copy_bandwidth(args.batches)
    print(f"copy bandwidth: {copy_gbps:.0f} GB/s", flush=True)
    ops = [op for op in OPS if op.name in args.ops.split(",")]
    rows = []
    for op in ops:
        for dtype in DTYPES:
            for r, c in SIZES:
                row = measure(op, dtype, r, c, args.batches)
                rows.append(row)
                print(
                    f"{op.name:20s} {dtype:9s} {r:6d}x{c:<5d} ours {row.ours_us:9.2f} µs "
                    f"{row.gbps:6.0f} GB/s ({row.gbps / copy_gbps:4.0%}) eager {row.eager_us:9.2f} "
                    f"compile {row.compiled_us:9.2f}"
                    + ("" if row.queued_ahead else " (host-bound)"),
                    flush=True,
                )
    torch._dynamo.reset()  # the host cost of compile without the guards of 15 other shapes
    host = {}
    for op in ops:
        single = op.inputs(1, 4096, torch.bfloat16)
        compiled = torch.compile(op.eager, dynamic=False)
        host[op.name] = (
            host_us_per_call(lambda op=op, single=single: op.ours(*single)),
            host_us_per_call(lambda op=op, single=single: op.eager(*single)),
            host_us_per_call(lambda compiled=compiled, single=single: compiled(*single)),
        )
        print(f"host µs/call {op.name}: {host[op.name]}", flush=True)
    atomic_write(args.output, render(rows, copy_gbps, host))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
