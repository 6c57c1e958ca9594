"""kernelpack's MLP ops against Liger-Kernel and torch.compile on one GPU; writes docs/bench-mlp.md.

    python bench/bench_mlp.py [--output docs/bench-mlp.md] [--batches N] [--budget S] [--host-only]
    python bench/bench_mlp.py --forms [--output docs/bench-mlp-forms.md] [--budget S]

First the device's copy bandwidth (a 1 GiB device-to-device copy, bytes read plus written), then
the host cost per call at 1x4096, then per op, dtype, size and pass (forward; forward and backward)
the GPU time of kernelpack (torch.ops.kernelpack), Liger-Kernel and torch.compile (static shapes)
of the same function written with torch's operations, all in this one run.

How GPU times are taken: a batch of back-to-back calls is queued behind a GPU sleep long enough
that the whole batch is queued before the GPU reaches it (three times the host's time to queue it,
measured on the warm-up calls), between two CUDA events; time per call = event time / calls, median
over the batches, after a warm-up. A row's implementations run interleaved, a batch of each a
round, so each round pairs them; the table gives the rounds ours won, and "Rows behind a peer" says
which gaps a sign test over the rounds calls more than the run's spread. So the times are GPU times
(kernels and the gaps between them), free of Python's per-call cost, which is measured apart (wall
time per call of a loop at 1x4096, the fastest of fifteen loops of 1000 calls, every row's loops
interleaved).
Inputs rotate over enough buffer sets to move ~200 MB per round, so mid-size calls read from memory
rather than from the L2. GB/s counts the bytes each pass must move at least (inputs read once,
outputs written once; the backward reads the saved inputs and the incoming gradients and writes the
input gradients, once where two inputs share one: add_rms_norm's x and residual). Forward and
backward: one forward, then torch.autograd.grad of its outputs with fixed random output gradients
(no .grad accumulation).

--forms times the kernel forms instead (kernelpack.ops.mlp.forms.FORMS): for every row of the
table on which the host picks a form, the row's pass with it and with the host's next choice,
the form retired (forms.retired), both through torch.ops.kernelpack and timed as above, a
batch of each a round; docs/bench-mlp-forms.md gives each form's gain on each of its rows, and
says which forms earn their place (at least KEEP_GAIN on some row).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import math
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from kernelpack import mlp
from kernelpack.files.atomic import atomic_write
from kernelpack.ops.mlp import forms as mlp_forms
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import hot as mlp_hot
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp import torch_ops
from kernelpack.ops.mlp.table import TABLE as MLP_TABLE

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO / "docs" / "bench-mlp.md"
FORMS_OUTPUT = REPO / "docs" / "bench-mlp-forms.md"
KEEP_GAIN = 0.03  # a form earns its place by this gain over the host's next choice on some row
EPS = 1e-6
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# (rows, cols) of each op's output at LLaMA sizes: the norms over the hidden size (2048 for
# LLaMA-3.2-1B and Gemma-2B, 4096 for LLaMA-7B/8B, 8192 for 70B), SwiGLU over the intermediate
# size (11008 for 7B, 14336 for 8B/70B); one row (decode) to 16384 (a training batch).
NORM_SIZES = [(1, 2048), (64, 2048), (1, 4096), (64, 4096), (4096, 8192), (16384, 8192)]
SWIGLU_SIZES = [(1, 11008), (64, 11008), (4096, 14336), (16384, 14336)]
ROTATE_BYTES = 200 * 2**20
MAX_SETS = 64
CALLS_PER_BATCH = 25
WARMUP_CALLS = 5
HOST_LOOPS = 15  # loops of calls a host cost is the fastest of
SLEEP_CYCLES = 16_000_000  # ~8 ms at 2 GHz: the shortest sleep before a batch
SM_CYCLES_PER_US = 2_000  # the H100/H200's SM clock under load, about 2 GHz (nvidia-smi: 1980 MHz)
SLEEP_MARGIN = 3  # the sleep lasts at least this many times the host's time to queue a batch
COPY_BYTES = 2**30
OPS = torch.ops.kernelpack


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.float32).to(dtype)


def liger_functions() -> Any:
    """Liger-Kernel's autograd functions (None where it is not installed)."""
    try:
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction, LigerSiLUMulFunction
    except ImportError as error:
        print(f"Liger-Kernel not available: {error}", flush=True)
        return None
    return {
        "swiglu": LigerSiLUMulFunction.apply,
        "silu_and_mul": LigerFusedGateUpSiLUMulFunction.apply,
        # casting_mode "llama" (float32 statistics, as LLaMA); in_place=False keeps dY intact
        "rms_norm": lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False),
        "add_rms_norm": lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS),
    }


def _silu_and_mul_eager(x: torch.Tensor) -> torch.Tensor:
    cols = x.shape[-1] // 2
    return F.silu(x[..., :cols]) * x[..., cols:]


def _add_rms_norm_eager(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x + residual
    return F.rms_norm(summed, weight.shape, weight, EPS), summed


def _fused_eager(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    """In place, as kernelpack's op: residual += x, then x = rms_norm(residual)."""
    residual.add_(x)
    x.copy_(F.rms_norm(residual, weight.shape, weight, EPS))


@dataclass(frozen=True)
class Op:
    """One op: its inputs, the three implementations, its sizes and its traffic per pass."""

    name: str
    inputs: Callable[[int, int, torch.dtype], tuple[torch.Tensor, ...]]
    ours: Callable[..., Any]
    eager: Callable[..., Any]
    sizes: list[tuple[int, int]]
    forward_bytes: Callable[[int, int, int], int]  # rows, cols, item size
    backward_bytes: Callable[[int, int, int], int] | None  # None: forward only (in place)


OP_LIST = [
    Op(
        "swiglu",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(r, c, dtype=t)),
        OPS.swiglu,
        lambda g, u: F.silu(g) * u,
        SWIGLU_SIZES,
        lambda r, c, s: 3 * r * c * s,
        lambda r, c, s: 5 * r * c * s,
    ),
    Op(
        "silu_and_mul",
        lambda r, c, t: (_randn(r, 2 * c, dtype=t),),
        OPS.silu_and_mul,
        _silu_and_mul_eager,
        SWIGLU_SIZES,
        lambda r, c, s: 3 * r * c * s,
        lambda r, c, s: 5 * r * c * s,
    ),
    Op(
        "rms_norm",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(c, dtype=t)),
        lambda x, w: OPS.rms_norm(x, w, EPS),
        lambda x, w: F.rms_norm(x, w.shape, w, EPS),
        NORM_SIZES,
        lambda r, c, s: (2 * r * c + c) * s,
        lambda r, c, s: (3 * r * c + 2 * c) * s,
    ),
    Op(
        "add_rms_norm",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(r, c, dtype=t), _randn(c, dtype=t)),
        lambda x, res, w: OPS.add_rms_norm(x, res, w, EPS),
        _add_rms_norm_eager,
        NORM_SIZES,
        lambda r, c, s: (4 * r * c + c) * s,
        # x and residual reach the outputs only through their sum: one gradient serves both
        lambda r, c, s: (4 * r * c + 2 * c) * s,
    ),
    Op(
        "fused_add_rms_norm",
        lambda r, c, t: (_randn(r, c, dtype=t), _randn(r, c, dtype=t), _randn(c, dtype=t)),
        lambda x, res, w: OPS.fused_add_rms_norm(x, res, w, EPS),
        _fused_eager,
        NORM_SIZES,
        lambda r, c, s: (4 * r * c + c) * s,
        None,
    ),
]


@dataclass(frozen=True)
class Timing:
    """GPU µs per call of each timed batch, in the order the rounds ran, and whether every batch
    was queued ahead of the GPU."""

    batches_us: tuple[float, ...]
    queued_ahead: bool

    @property
    def median_us(self) -> float:
        return statistics.median(self.batches_us)


def input_sets(moved_bytes: int) -> int:
    """How many input sets a row rotates over so that its calls move ~ROTATE_BYTES a round (mid-size
    calls then read from memory rather than from the L2), at most MAX_SETS."""
    return max(1, min(MAX_SETS, math.ceil(ROTATE_BYTES / moved_bytes)))


def sleep_cycles(call: Callable[[int], object], sets: int) -> int:
    """Warms ``call`` up and returns the GPU sleep to queue a batch of it behind: SLEEP_MARGIN
    times the host's time to queue the batch (the warm-up calls, timed), at least SLEEP_CYCLES.
    Forward+backward through autograd costs the host hundreds of µs a call, which a fixed ~8 ms
    sleep did not cover at 25 calls."""
    for i in range(WARMUP_CALLS):
        call(i % sets)
    torch.cuda.synchronize()
    began = time.perf_counter()
    for i in range(WARMUP_CALLS):
        call(i % sets)
    queue_us = (time.perf_counter() - began) * 1e6 / WARMUP_CALLS
    torch.cuda.synchronize()
    return max(SLEEP_CYCLES, int(SLEEP_MARGIN * CALLS_PER_BATCH * queue_us * SM_CYCLES_PER_US))


def gpu_times_us(
    calls: dict[str, Callable[[int], object]], sets: int, batches: int
) -> dict[str, Timing]:
    """The GPU time per call of each of ``calls`` (called with the index of the input set), in
    ``batches`` rounds. Round b times batch b of every call, each behind its own sleep, the order
    rotated by one each round. Interleaved so, a drift of the GPU's state over the seconds a row
    takes falls on every implementation alike, and round b of two calls is a pair: how many
    rounds one wins says whether a gap in the medians is more than the run's spread (one
    kernel's time can move 1% between processes where its peer's does not). Each batch takes the
    next input sets of the ring, not the sets the batch before it just read: those would still
    be in the L2, and the batch after ours would read them faster (docs/bench-mlp-notes.md, "Why
    the harness is shaped so")."""
    sleeps = {name: sleep_cycles(call, sets) for name, call in calls.items()}
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    samples: dict[str, list[float]] = {name: [] for name in calls}
    ahead = dict.fromkeys(calls, True)
    names = list(calls)
    position = 0  # in the ring of input sets, which every batch of every call moves along
    for batch in range(batches):
        turn = batch % len(names)
        for name in names[turn:] + names[:turn]:
            torch.cuda._sleep(sleeps[name])
            start.record()
            for i in range(CALLS_PER_BATCH):
                calls[name]((position + i) % sets)
            end.record()
            position += CALLS_PER_BATCH
            ahead[name] &= not start.query()
            end.synchronize()
            samples[name].append(start.elapsed_time(end) * 1e3 / CALLS_PER_BATCH)
    return {name: Timing(tuple(samples[name]), ahead[name]) for name in names}


def rounds_at_least_as_fast(ours: Timing, theirs: Timing) -> int:
    """In how many paired rounds ours took at most their time."""
    return sum(a <= b for a, b in zip(ours.batches_us, theirs.batches_us, strict=True))


def rounds_settling_behind(rounds: int) -> int | None:
    """The fewest of ``rounds`` paired rounds ours must lose for a sign test to call it slower
    (two-sided, p < 0.05: a fair coin loses that many or more, or wins that many or more, less
    than one time in twenty); None where even losing every round would not (fewer than 6)."""
    for lost in range(rounds // 2 + 1, rounds + 1):
        tail = sum(math.comb(rounds, k) for k in range(lost, rounds + 1)) / 2**rounds
        if 2 * tail < 0.05:
            return lost
    return None


# A call whose host cost is timed: the context it runs in (torch.no_grad, torch.inference_mode or
# contextlib.nullcontext), and the call.
HostCall = tuple[Callable[[], AbstractContextManager[Any]], Callable[[], object]]
Key = TypeVar("Key")


def host_us_per_calls(
    calls: dict[Key, HostCall], per_loop: int = 1000, loops: int = HOST_LOOPS
) -> dict[Key, float]:
    """Wall time per call of each of ``calls`` in loops of ``per_loop`` calls (launch-bound at
    1x4096: the host's cost), the fastest of ``loops`` loops. The loops are interleaved, the first
    loop of every call before the second of any, and the fastest is kept: what else runs on the
    host only adds to a loop, and a slow stretch of it, which lasts seconds, then falls on every
    row of the table alike (timed one row after another, the median of five loops moved by a
    third between rows seconds apart); many short loops give each call more chances at the
    quiet stretches between."""
    for context, call in calls.values():
        with context():
            for _ in range(100):
                call()
    torch.cuda.synchronize()
    fastest = dict.fromkeys(calls, math.inf)
    for _ in range(loops):
        for name, (context, call) in calls.items():
            with context():
                began = time.perf_counter()
                for _ in range(per_loop):
                    call()
                torch.cuda.synchronize()
                fastest[name] = min(fastest[name], (time.perf_counter() - began) * 1e6 / per_loop)
    return fastest


def copy_bandwidth(batches: int) -> float:
    """GB/s of a large device-to-device copy, counting bytes read plus written."""
    source = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    copy = gpu_times_us({"copy": lambda _: target.copy_(source)}, 1, batches)["copy"]
    return 2 * COPY_BYTES / copy.median_us / 1e3


def _tensors(values: Any) -> tuple[torch.Tensor, ...]:
    if values is None:
        return ()
    return tuple(values) if isinstance(values, tuple) else (values,)


def forward_backward(function: Callable[..., Any]) -> Callable[..., None]:
    """function's forward, then the gradients of all its inputs for given output gradients."""

    def run(inputs: tuple[torch.Tensor, ...], grads: tuple[torch.Tensor, ...]) -> None:
        torch.autograd.grad(_tensors(function(*inputs)), inputs, grads)

    return run


@dataclass
class Row:
    op: str
    dtype: str
    rows: int
    cols: int
    passes: str  # "forward" or "forward+backward"
    ours: Timing
    liger: Timing | None
    compiled: Timing
    moved_bytes: int

    @property
    def gbps(self) -> float:
        return self.moved_bytes / self.ours.median_us / 1e3

    @property
    def queued_ahead(self) -> bool:
        peers = [self.compiled] + ([] if self.liger is None else [self.liger])
        return self.ours.queued_ahead and all(peer.queued_ahead for peer in peers)

    def peers(self) -> dict[str, Timing]:
        """The peers measured on this row, by the name the table gives them."""
        named = {"Liger-Kernel": self.liger, "torch.compile": self.compiled}
        return {name: timing for name, timing in named.items() if timing is not None}


def _check(op: Op, ours: Any, reference: Any, what: str) -> None:
    for got, expected in zip(_tensors(ours), _tensors(reference), strict=True):
        if not torch.allclose(got.float(), expected.float(), rtol=3e-2, atol=3e-2):
            raise SystemExit(f"{op.name} {what}: kernelpack disagrees with torch")


def measure(op: Op, liger: Any, dtype: str, rows: int, cols: int, batches: int) -> list[Row]:
    passes = ["forward"] + (["forward+backward"] if op.backward_bytes else [])
    return [measure_pass(op, liger, dtype, rows, cols, batches, which) for which in passes]


@dataclass(frozen=True)
class PassCalls:
    """One row's pass as the benchmark times it: each implementation's call (it takes the index of
    its input set), the number of input sets, the bytes a call must move, and whether the pass is
    forward+backward (timed under torch.enable_grad)."""

    calls: dict[str, Callable[[int], object]]
    sets: int
    moved_bytes: int
    backward: bool


def pass_calls(
    op: Op, liger: Any, dtype: str, rows: int, cols: int, which: str, peers: bool = True
) -> PassCalls:
    """Ours, Liger-Kernel's (where it has the op) and torch.compile's call of one row's pass
    ("forward" or "forward+backward"), on fresh inputs; ours checked against eager torch first.
    Ours alone where not ``peers``."""
    torch_dtype = DTYPES[dtype]
    item = torch.finfo(torch_dtype).bits // 8
    grad = which != "forward"
    moved = op.forward_bytes(rows, cols, item)
    if grad:
        assert op.backward_bytes is not None
        moved += op.backward_bytes(rows, cols, item)
    sets = input_sets(moved)
    inputs = [
        tuple(t.requires_grad_(grad) for t in op.inputs(rows, cols, torch_dtype))
        for _ in range(sets)
    ]
    liger_fn = liger.get(op.name) if liger else None
    functions: dict[str, Callable[..., Any] | None] = {"ours": op.ours}
    if peers:
        functions["liger"] = liger_fn
        functions["compiled"] = torch.compile(op.eager, dynamic=False)
    implementations: dict[str, Callable[[int], object]] = {}
    if grad:
        outs = _tensors(op.eager(*inputs[0]))
        grads = [tuple(torch.randn_like(o) for o in outs) for _ in range(sets)]
        for name, function in functions.items():
            if function is not None:
                run = forward_backward(function)
                implementations[name] = lambda i, run=run: run(inputs[i], grads[i])
        check_in = tuple(t.detach().clone().requires_grad_() for t in inputs[0])
        expected = torch.autograd.grad(_tensors(op.eager(*check_in)), check_in, grads[0])
        got = torch.autograd.grad(_tensors(op.ours(*check_in)), check_in, grads[0])
        _check(op, got, expected, f"{dtype} {rows}x{cols} gradients")
    else:
        for name, function in functions.items():
            if function is not None:
                implementations[name] = lambda i, function=function: function(*inputs[i])
        check_ours = [t.clone() for t in inputs[0]]
        check_eager = [t.clone() for t in inputs[0]]
        got = op.ours(*check_ours)
        expected = op.eager(*check_eager)
        _check(
            op,
            check_ours[0] if got is None else got,
            check_eager[0] if expected is None else expected,
            f"{dtype} {rows}x{cols}",
        )
    return PassCalls(implementations, sets, moved, grad)


def measure_pass(
    op: Op, liger: Any, dtype: str, rows: int, cols: int, batches: int, which: str
) -> Row:
    prepared = pass_calls(op, liger, dtype, rows, cols, which)
    with torch.enable_grad() if prepared.backward else torch.no_grad():
        times = gpu_times_us(prepared.calls, prepared.sets, batches)
    return Row(
        op.name,
        dtype,
        rows,
        cols,
        which,
        times["ours"],
        times.get("liger"),
        times["compiled"],
        prepared.moved_bytes,
    )


def driver_floor_us() -> float | None:
    """µs per cuLaunchKernel from C, no Python (bench/launch_floor.cu, built with nvcc where it
    is on PATH): the median of its readings; None where it cannot be built or run."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "launch_floor"
        build = [nvcc, "-O2", str(REPO / "bench" / "launch_floor.cu"), "-lcuda", "-o", str(program)]
        built = subprocess.run(build, capture_output=True, text=True, check=False, timeout=180)
        if built.returncode:
            print(f"launch_floor not built: {built.stderr.strip()[-300:]}", flush=True)
            return None
        ran = subprocess.run(
            [str(program)], capture_output=True, text=True, check=False, timeout=60
        )
    readings = [float(line.rsplit(":", 1)[1].split()[0]) for line in ran.stdout.splitlines()]
    return statistics.median(readings) if readings else None


def host_rows(liger: Any) -> dict[str, dict[str, float]]:
    """Host µs per call at 1x4096 bfloat16 (silu_and_mul: 1x8192 in, 1x4096 out), forward."""
    framework: dict[str, Callable[..., object]] = {
        "swiglu": mlp.swiglu,
        "silu_and_mul": mlp.silu_and_mul,
        "rms_norm": lambda x, w: mlp.rms_norm(x, w, EPS),
        "fused_add_rms_norm": lambda x, r, w: mlp.fused_add_rms_norm(x, r, w, EPS),
    }
    gate, up = _randn(1, 4096, dtype=torch.bfloat16), _randn(1, 4096, dtype=torch.bfloat16)
    out = torch.empty_like(gate)
    into: dict[str, Callable[..., object]] = {  # kernelpack.mlp with out=: no allocation
        "swiglu": lambda g, u: mlp.swiglu(g, u, out=out),
        "silu_and_mul": lambda x: mlp.silu_and_mul(x, out=out),
        "rms_norm": lambda x, w: mlp.rms_norm(x, w, EPS, out=out),
    }
    kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("swiglu", "bfloat16"))
    grid, block = mlp_geometry.swiglu_geometry(
        4096, "bfloat16", mlp_launch.device_facts("cuda:0").multiprocessors
    )
    addresses = (gate.data_ptr(), up.data_ptr(), out.data_ptr())
    stream = int(torch.cuda.current_stream().cuda_stream)
    aten = torch.ops.aten
    plain, no_grad = contextlib.nullcontext, torch.no_grad
    calls: dict[tuple[str, str], HostCall] = {
        ("floor", "bare launch"): (
            plain,
            lambda: kernel.launch(grid, block, *addresses, 4096, stream=stream),
        ),
        ("floor", "torch.empty_like"): (plain, lambda: torch.empty_like(gate)),
        # torch's own ops, as the table's torch.ops column is timed
        ("floor", "torch.neg"): (no_grad, lambda: torch.neg(gate)),
        ("floor", "aten.neg through torch.ops"): (no_grad, lambda: aten.neg.default(gate)),
        ("floor", "aten.alias through torch.ops"): (no_grad, lambda: aten.alias.default(gate)),
    }
    # the dispatcher's cost for a kernel written in Python (torch.library, as kernelpack's ops
    # are): an op whose CUDA kernel returns a tensor made beforehand, nothing else
    library = torch.library.Library("kernelpack_bench", "DEF")  # kept alive until the timing ends
    library.define("returns_out(Tensor x) -> Tensor")
    library.impl("returns_out", lambda x: out, "CUDA")
    returns_out = torch.ops.kernelpack_bench.returns_out.default
    calls["floor", "Python kernel through torch.ops"] = (no_grad, lambda: returns_out(gate))
    torch._dynamo.reset()  # the host cost of compile without the guards of other shapes
    for op in OP_LIST:
        single = op.inputs(1, 4096, torch.bfloat16)
        ours = functools.partial(op.ours, *single)
        calls[op.name, "torch.ops.kernelpack"] = (no_grad, ours)
        calls[op.name, "eager"] = (no_grad, functools.partial(op.eager, *single))
        compiled = torch.compile(op.eager, dynamic=False)
        calls[op.name, "compile"] = (no_grad, functools.partial(compiled, *single))
        if op.name in framework:
            calls[op.name, "kernelpack.mlp"] = (
                no_grad,
                functools.partial(framework[op.name], *single),
            )
        if op.name in into:
            calls[op.name, "kernelpack.mlp out="] = (
                no_grad,
                functools.partial(into[op.name], *single),
            )
        liger_fn = liger.get(op.name) if liger else None
        if liger_fn is not None:
            calls[op.name, "Liger"] = (no_grad, functools.partial(liger_fn, *single))
        calls[op.name, "torch.ops, inference_mode"] = (torch.inference_mode, ours)
    table: dict[str, dict[str, float]] = {}
    for (row, column), us in host_us_per_calls(calls).items():
        table.setdefault(row, {})[column] = us
    driver = driver_floor_us()
    if driver is not None:
        table["floor"]["cuLaunchKernel"] = driver
    for row, columns in table.items():
        print(f"host µs/call {row}: {columns}", flush=True)
    return table


def machine() -> str:
    props = torch.cuda.get_device_properties(0)
    driver = ""
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
        result = subprocess.run(query, capture_output=True, text=True, check=False)
        driver = f", driver {result.stdout.strip().splitlines()[0]}" if result.stdout else ""
    try:
        from importlib.metadata import version

        import liger_kernel  # noqa: F401

        liger = f"; Liger-Kernel {version('liger-kernel')}"
    except ImportError:
        liger = "; Liger-Kernel not installed"
    import triton

    return (
        f"{props.name} ({props.multi_processor_count} SMs){driver}; CUDA {torch.version.cuda}; "
        f"torch {torch.__version__}; triton {triton.__version__}{liger}; "
        f"Python {platform.python_version()}"
    )


def _versus(ours: Timing, theirs: Timing | None) -> str:
    """Their median over ours, and the paired rounds in which ours was at least as fast."""
    if theirs is None:
        return "-"
    rounds = rounds_at_least_as_fast(ours, theirs)
    return f"{theirs.median_us / ours.median_us:.2f}x {rounds}/{len(ours.batches_us)}"


@dataclass(frozen=True)
class Gap:
    """A row whose median is slower than a peer's, and in how many paired rounds."""

    row: Row
    peer: str
    lost_rounds: int

    @property
    def us(self) -> float:
        return self.row.ours.median_us - self.row.peers()[self.peer].median_us

    @property
    def beyond_spread(self) -> bool | None:
        """Whether a sign test over the rounds calls ours slower; None: too few rounds to tell."""
        settling = rounds_settling_behind(len(self.row.ours.batches_us))
        return None if settling is None else self.lost_rounds >= settling

    def line(self) -> str:
        r, rounds = self.row, len(self.row.ours.batches_us)
        beyond = self.beyond_spread
        verdict = (
            "too few rounds to tell"
            if beyond is None
            else f"{'beyond' if beyond else 'within'} the run's spread"
        )
        return (
            f"- {r.op} {r.dtype} {r.rows}x{r.cols} {r.passes}, behind {self.peer} by "
            f"{self.us:.2f} µs ({self.us / r.peers()[self.peer].median_us:.1%}): slower in "
            f"{self.lost_rounds} of {rounds} rounds, {verdict}"
        )


def gaps(rows: list[Row]) -> list[Gap]:
    """Each row and peer where ours has the slower median."""
    return [
        Gap(r, peer, len(r.ours.batches_us) - rounds_at_least_as_fast(r.ours, theirs))
        for r in rows
        for peer, theirs in r.peers().items()
        if r.ours.median_us > theirs.median_us
    ]


def _us(value: float | Timing | None) -> str:
    if isinstance(value, Timing):
        value = value.median_us
    return "-" if value is None else f"{value:.2f}"


HOST_COLUMNS = [
    "kernelpack.mlp",
    "kernelpack.mlp out=",
    "torch.ops.kernelpack",
    "torch.ops, inference_mode",
    "Liger",
    "eager",
    "compile",
]


def render(
    rows: list[Row],
    copy_gbps: float,
    host: dict[str, dict[str, float]],
    left_out: list[str],
) -> str:
    lines = [
        "# kernelpack's MLP ops on the GPU: against Liger-Kernel and torch.compile",
        "",
        f"Command: `{' '.join(['python', 'bench/bench_mlp.py', *sys.argv[1:]])}`  ",
        f"Machine: {machine()}  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        f"Device copy bandwidth (1 GiB device-to-device, read + written): **{copy_gbps:.0f} GB/s**.",
        "",
        "GPU µs per call: batches of calls queued behind a GPU sleep, between CUDA events, median",
        "over the rounds; inputs rotated over ~200 MB of buffers. A row runs its implementations'",
        "batches interleaved, a batch of each a round, so that a drift of the machine over the row",
        "falls on all of them alike; the cells vs Liger and vs compile give the peer's median over",
        "ours, then the rounds in which ours was at least as fast. GB/s counts the bytes each pass",
        "must move (forward: inputs read once, outputs written once; backward: saved inputs and",
        "incoming gradients read once, input gradients written once: add_rms_norm's x and residual",
        "share one). kernelpack: `torch.ops.kernelpack.*`;",
        "Liger-Kernel: `LigerSiLUMulFunction`, `LigerFusedGateUpSiLUMulFunction`,",
        '`LigerRMSNormFunction` (casting mode "llama", not in place), `LigerFusedAddRMSNormFunction`;',
        "torch.compile (default mode, static shapes) of `F.silu(g) * u`,",
        "`F.silu(x[..., :d]) * x[..., d:]`, `F.rms_norm`, `(F.rms_norm(x + r), x + r)` and, for",
        "the in-place fused_add_rms_norm, `r.add_(x); x.copy_(F.rms_norm(r))`. Forward and",
        "backward: the forward, then `torch.autograd.grad` of all inputs. Sizes are LLaMA's: norms",
        "over the hidden size (2048, 4096, 8192), SwiGLU over the intermediate size (11008, 14336).",
        "",
    ]
    if not rows:
        lines.append("No GPU rows were measured (--host-only).")
    else:
        behind = gaps(rows)
        lines += ["## Goals", ""]
        for peer in ("Liger-Kernel", "torch.compile"):
            theirs = [gap for gap in behind if gap.peer == peer]
            beyond = [gap for gap in theirs if gap.beyond_spread]
            lines.append(
                f"- At least as fast as {peer}: {len(rows) - len(theirs)} of {len(rows)} rows; "
                f"behind it beyond the run's spread: {len(beyond)}"
            )
        not_ahead = [r for r in rows if not r.queued_ahead]
        if not_ahead:
            lines.append(
                f"- In {len(not_ahead)} rows (marked *) a batch was not fully queued ahead of the "
                "GPU (host-bound); those times include host gaps."
            )
        if left_out:
            lines.append(f"- Not measured (time budget): {', '.join(left_out)}")
        lines += [
            "",
            "## Results",
            "",
            "| op | dtype | rows x cols | pass | kernelpack µs | GB/s | of copy | Liger µs "
            "| compile µs | vs Liger | vs compile |",
            "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in rows:
            lines.append(
                f"| {r.op} | {r.dtype} | {r.rows}x{r.cols}{'' if r.queued_ahead else ' *'} | "
                f"{r.passes} | {r.ours.median_us:.2f} | {r.gbps:.0f} | {r.gbps / copy_gbps:.0%} | "
                f"{_us(r.liger)} | {r.compiled.median_us:.2f} | {_versus(r.ours, r.liger)} | "
                f"{_versus(r.ours, r.compiled)} |"
            )
        settling = rounds_settling_behind(len(rows[0].ours.batches_us))
        lines += [
            "",
            "## Rows behind a peer",
            "",
            "Beyond the run's spread: slower in so many paired rounds that a fair coin would lose "
            + (
                f"as many (here {settling}) less than one time in twenty (a two-sided sign test)."
                if settling is not None
                else "as many less than one time in twenty; this run has too few rounds to say."
            ),
            "",
            *([gap.line() for gap in behind] or ["None."]),
        ]
    lines += [
        "",
        f"## Host cost per call (µs, forward, the fastest of {HOST_LOOPS} loops of 1000 calls at "
        "1x4096 bfloat16, wall time)",
        "",
        "kernelpack.mlp is the framework-neutral API on torch tensors (its hot path), with",
        "`out=` given the same without allocating; torch.ops.kernelpack goes through torch's",
        "dispatcher (what torch.compile and autograd use), under `torch.no_grad()` and, in its",
        "own column, under `torch.inference_mode()` (no autograd layer).",
    ]
    floor = host.get("floor", {})
    if floor:
        driver = floor.get("cuLaunchKernel")
        lines += [
            "The floor on this machine: one launch of the swiglu kernel through kernelpack's",
            "launcher with int addresses and an int stream, nothing else, "
            f"{floor['bare launch']:.2f} µs; `torch.empty_like` of the output "
            f"{floor['torch.empty_like']:.2f} µs"
            + (
                "."
                if driver is None
                else f"; cuLaunchKernel alone, called from C in a loop (bench/launch_floor.cu), "
                f"{driver:.2f} µs."
            ),
            "torch's own ops, under `torch.no_grad()`: `torch.neg(x)` (one kernel, allocating) "
            f"{floor['torch.neg']:.2f} µs; the same op through torch.ops "
            f"(`torch.ops.aten.neg.default`, a C++ kernel called through the dispatcher) "
            f"{floor['aten.neg through torch.ops']:.2f} µs; the dispatcher with no kernel "
            f"(`torch.ops.aten.alias.default`, a view) "
            f"{floor['aten.alias through torch.ops']:.2f} µs; the dispatcher calling a kernel "
            "written in Python, as kernelpack's are (torch.library, a CUDA kernel that returns a "
            f"tensor made beforehand) {floor['Python kernel through torch.ops']:.2f} µs.",
        ]
    lines += [
        "",
        "| op | " + " | ".join(HOST_COLUMNS) + " |",
        "| --- |" + " ---: |" * len(HOST_COLUMNS),
    ]
    for name, cells in host.items():
        if name != "floor":
            lines.append(
                f"| {name} | "
                + " | ".join(_us(cells.get(column)) for column in HOST_COLUMNS)
                + " |"
            )
    return "\n".join(lines) + "\n"


# ---- --forms: each kernel form against the host's next choice -------------------------------

# (kernel, grid, block) of one launch, as the host makes it
Launch = tuple[str, Any, Any]


def _norm_backward_launches(
    rows: int, cols: int, dtype: str, device: mlp_geometry.DeviceFacts
) -> list[Launch]:
    """The launches of the norms' backward (torch_impl._norm_backward) on aligned tensors."""
    threads = mlp_geometry.short_backward_threads(rows, cols, dtype, device.multiprocessors)
    if threads:
        name = mlp_geometry.short_backward_kernel(threads, cols, dtype)
        launches: list[Launch] = [(name, rows, threads)]
        if rows > 1 and mlp_geometry.sums_from_inputs(dtype):
            launches.append(mlp_geometry.weight_grad_inputs_launch(rows, cols, dtype))
        elif rows > 1:
            grid, block = mlp_geometry.weight_grad_geometry(cols, rows)
            launches.append((mlp_geometry.kernel_name("rms_norm_weight_grad", dtype), grid, block))
        return launches
    grid, threads = mlp_geometry.backward_row_geometry(rows, cols, dtype, device)
    sum_grid, sum_block = mlp_geometry.weight_grad_geometry(cols, grid)
    return [
        (mlp_geometry.kernel_name("rms_norm_backward", dtype), grid, threads),
        (mlp_geometry.kernel_name("rms_norm_weight_grad", dtype), sum_grid, sum_block),
    ]


def pass_launches(
    op: str, dtype: str, rows: int, cols: int, backward: bool, device: mlp_geometry.DeviceFacts
) -> tuple[Launch, ...]:
    """The launches the host makes for one row's pass of ``op`` (a benchmark op: rows x cols of
    its output) on 16-byte aligned tensors on ``device``, from the geometry alone: the forward's
    plan, then (``backward``) the backward's kernels. What tells the rows on which a form is
    picked (:func:`forms_picked`); the timing runs the ops themselves."""
    shape = (rows, 2 * cols) if op == "silu_and_mul" else (rows, cols)
    entry = MLP_TABLE[op]
    assert entry.plan is not None
    plan = entry.plan(entry.kernel_family, shape, dtype, device)
    assert plan is not None
    launches: list[Launch] = [(plan.name, plan.grid, plan.block)]
    if not backward:
        return tuple(launches)
    sms = device.multiprocessors
    if op == "swiglu":
        e = mlp_geometry.swiglu_launch("swiglu_backward", rows * cols, dtype, sms)
        launches.append((e.name, e.grid, e.block))
    elif op == "silu_and_mul":
        e = mlp_geometry.silu_and_mul_launch("silu_and_mul_backward", rows, cols, dtype, sms)
        launches.append((e.name, e.grid, e.block))
    else:
        launches += _norm_backward_launches(rows, cols, dtype, device)
    return tuple(launches)


def forms_picked(
    op: str, dtype: str, rows: int, cols: int, backward: bool, device: mlp_geometry.DeviceFacts
) -> list[str]:
    """The forms of forms.FORMS the host picks on this row: those whose retirement changes
    its launches."""
    picked = pass_launches(op, dtype, rows, cols, backward, device)
    found = []
    for form in mlp_forms.FORMS:
        with mlp_forms.retired(form):
            if pass_launches(op, dtype, rows, cols, backward, device) != picked:
                found.append(form)
    return found


@dataclass(frozen=True)
class FormCase:
    """One form on one row of the table: the launches with it and with the host's next choice."""

    form: str
    op: str
    dtype: str
    rows: int
    cols: int
    passes: str
    kept: tuple[Launch, ...]
    retired: tuple[Launch, ...]


def form_cases(
    device: mlp_geometry.DeviceFacts, ops: list[Op], dtypes: list[str]
) -> list[FormCase]:
    """Every (form, row) of the table where the host picks the form, in rounds: each form's
    first row, then each one's second, ..., so that a budget cut short leaves every form its
    first rows."""
    by_form: dict[str, list[FormCase]] = {form: [] for form in mlp_forms.FORMS}
    for dtype in dtypes:
        for op in ops:
            for rows, cols in op.sizes:
                for passes in ["forward"] + (["forward+backward"] if op.backward_bytes else []):
                    backward = passes != "forward"
                    kept = pass_launches(op.name, dtype, rows, cols, backward, device)
                    for form in forms_picked(op.name, dtype, rows, cols, backward, device):
                        with mlp_forms.retired(form):
                            other = pass_launches(op.name, dtype, rows, cols, backward, device)
                        by_form[form].append(
                            FormCase(form, op.name, dtype, rows, cols, passes, kept, other)
                        )
    rounds = max((len(cases) for cases in by_form.values()), default=0)
    return [cases[i] for i in range(rounds) for cases in by_form.values() if i < len(cases)]


def _forget_plans() -> None:
    """Empties the hot path's prepared entries, made under whichever forms were offered."""
    for memo in mlp_hot.PREPARED.values():
        memo.clear()


def with_forms(retire: tuple[str, ...], call: Callable[[int], object]) -> Callable[[int], object]:
    """``call`` with ``retire`` retired (none: as the host picks), its plans made afresh each
    call, so that both sides of a case pay the same host cost and neither sees the other's."""

    def run(i: int) -> object:
        with mlp_forms.retired(*retire):
            _forget_plans()
            result = call(i)
        _forget_plans()
        return result

    return run


@dataclass(frozen=True)
class FormTiming:
    case: FormCase
    kept: Timing
    retired: Timing

    @property
    def gain(self) -> float:
        """How much longer the host's next choice takes: its median over the form's, less 1."""
        return self.retired.median_us / self.kept.median_us - 1


def measure_form(case: FormCase, batches: int) -> FormTiming:
    """The case's pass with its form and with the form retired, each checked against eager torch
    first, then timed interleaved."""
    op = next(o for o in OP_LIST if o.name == case.op)
    calls: dict[str, Callable[[int], object]] = {}
    sets = 1
    backward = case.passes != "forward"
    for side, retire in (("kept", ()), ("retired", (case.form,))):
        with mlp_forms.retired(*retire):
            _forget_plans()
            prepared = pass_calls(
                op, None, case.dtype, case.rows, case.cols, case.passes, peers=False
            )
        _forget_plans()
        calls[side] = with_forms(retire, prepared.calls["ours"])
        sets = prepared.sets
    with torch.enable_grad() if backward else torch.no_grad():
        times = gpu_times_us(calls, sets, batches)
    return FormTiming(case, times["kept"], times["retired"])


def _differing(case: FormCase) -> tuple[str, str]:
    """The launches of the case that the form's retirement changes, with it and without."""
    pairs = [(a, b) for a, b in zip(case.kept, case.retired, strict=False) if a != b]
    extra_kept, extra_retired = case.kept[len(case.retired) :], case.retired[len(case.kept) :]
    kept = tuple(a for a, _ in pairs) + extra_kept
    retired = tuple(b for _, b in pairs) + extra_retired

    def describe(launches: tuple[Launch, ...]) -> str:
        return "; ".join(
            f"{name.removeprefix('mlp::')} {grid}x{block}" for name, grid, block in launches
        )

    return describe(kept), describe(retired)


def form_verdicts(timings: list[FormTiming]) -> dict[str, float | None]:
    """Each form's best gain over its measured rows (None: picked on no measured row)."""
    best: dict[str, float | None] = dict.fromkeys(mlp_forms.FORMS)
    for timing in timings:
        current = best[timing.case.form]
        best[timing.case.form] = timing.gain if current is None else max(current, timing.gain)
    return best


def render_forms(
    timings: list[FormTiming],
    cases: list[FormCase],
    left_out: list[FormCase],
    failed: list[str],
    machine_line: str,
) -> str:
    """docs/bench-mlp-forms.md: each form's verdict, then its rows, the cases left out for the
    budget and those whose check against eager torch failed (``failed``, a line each);
    ``machine_line``: the machine, as :func:`machine` says it."""
    best = form_verdicts(timings)
    picked = {case.form for case in cases}
    lines = [
        "# kernelpack's MLP kernel forms against the host's next choice",
        "",
        f"Command: `{' '.join(['python', 'bench/bench_mlp.py', *sys.argv[1:]])}`  ",
        f"Machine: {machine_line}  ",
        f"Date: {datetime.date.today().isoformat()}",
        "",
        "For each form the host can pick (kernelpack.ops.mlp.forms.FORMS) and each row of",
        "docs/bench-mlp.md's table on which it picks it: the row's pass through",
        "torch.ops.kernelpack with the form, and with the form retired (forms.retired: what",
        "the host would launch if the form did not exist), GPU µs per call timed as the main",
        "table's, a batch of each a round; gain = without / with - 1, rounds = those in which the",
        f"form was at least as fast. A form earns its place with a gain of {KEEP_GAIN:.0%} or more",
        "on some row; retiring one is the small edit forms.FORMS's comment names.",
        "",
        "## Verdicts",
        "",
        "| form | what it is; else | best gain | verdict |",
        "| --- | --- | ---: | --- |",
    ]
    for form, what in mlp_forms.FORMS.items():
        gain = best[form]
        if gain is None:
            verdict = "not measured (budget)" if form in picked else "picked on no row of the table"
            cell = "-"
        else:
            verdict = "keep" if gain >= KEEP_GAIN else "retire"
            cell = f"{gain:+.1%}"
        lines.append(f"| {form} | {what} | {cell} | {verdict} |")
    lines += [
        "",
        "## Rows",
        "",
        "| form | op | dtype | rows x cols | pass | launches with it | without | µs with | "
        "µs without | gain | rounds |",
        "| --- | --- | --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for t in sorted(timings, key=lambda t: list(mlp_forms.FORMS).index(t.case.form)):
        c = t.case
        kept, retired = _differing(c)
        rounds = rounds_at_least_as_fast(t.kept, t.retired)
        lines.append(
            f"| {c.form} | {c.op} | {c.dtype} | {c.rows}x{c.cols} | {c.passes} | {kept} | "
            f"{retired} | {t.kept.median_us:.2f} | {t.retired.median_us:.2f} | {t.gain:+.1%} | "
            f"{rounds}/{len(t.kept.batches_us)} |"
        )
    if failed:
        lines += ["", "## Not timed: kernelpack disagreed with eager torch", ""]
        lines += [f"- {line}" for line in failed]
    if left_out:
        lines += [
            "",
            "Not measured (time budget): "
            + ", ".join(
                f"{c.form} on {c.op} {c.dtype} {c.rows}x{c.cols} {c.passes}" for c in left_out
            ),
        ]
    return "\n".join(lines) + "\n"


def run_forms(args: argparse.Namespace, began: float) -> None:
    """--forms: every (form, row) case in turn until the budget, then the table."""
    device = mlp_launch.device_facts("cuda:0")
    ops = [op for op in OP_LIST if op.name in args.ops.split(",")]
    cases = form_cases(device, ops, args.dtypes.split(","))
    print(f"{len(cases)} (form, row) cases on {device.target}", flush=True)
    timings: list[FormTiming] = []
    left_out: list[FormCase] = []
    failed: list[str] = []
    for case in cases:
        if time.monotonic() - began > args.budget:
            left_out.append(case)
            continue
        try:
            timing = measure_form(case, args.batches)
        except SystemExit as error:  # pass_calls' check, which ends the main table's run
            failed.append(f"{case.form}: {error}")
            print(f"{case.form}: {error}", flush=True)
            continue
        timings.append(timing)
        print(
            f"{case.form:18s} {case.op:18s} {case.dtype:8s} {case.rows:5d}x{case.cols:<5d} "
            f"{case.passes:16s} with {timing.kept.median_us:9.2f} without "
            f"{timing.retired.median_us:9.2f} µs {timing.gain:+.1%}",
            flush=True,
        )
    output = args.output or FORMS_OUTPUT
    atomic_write(output, render_forms(timings, cases, left_out, failed, machine()))
    print(f"wrote {output} ({time.monotonic() - began:.0f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--output", type=Path, help=f"default {DEFAULT_OUTPUT}; with --forms {FORMS_OUTPUT}"
    )
    parser.add_argument("--batches", type=int, default=9, help="timed batches per measurement")
    parser.add_argument(
        "--ops", default=",".join(op.name for op in OP_LIST), help="comma-separated ops to time"
    )
    parser.add_argument(
        "--dtypes", default="bfloat16,float16,float32", help="comma-separated dtypes, in order"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=330,
        help="seconds after which no new row is started (bench/gpu_all.sh stops it at 400)",
    )
    parser.add_argument(
        "--sizes", default="", help="comma-separated ROWSxCOLS to time (default: every op's own)"
    )
    parser.add_argument("--host-only", action="store_true", help="only the host cost per call")
    parser.add_argument(
        "--forms",
        action="store_true",
        help="time each kernel form against the host's next choice instead (bench-mlp-forms.md)",
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_mlp: torch sees no CUDA device")
    began = time.monotonic()
    torch_ops.register()
    for name, value in (("cache_size_limit", 1024), ("recompile_limit", 1024)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)
    torch._dynamo.config.automatic_dynamic_shapes = False
    if args.forms:
        run_forms(args, began)
        return
    liger = liger_functions()

    copy_gbps = copy_bandwidth(args.batches)
    print(f"copy bandwidth: {copy_gbps:.0f} GB/s", flush=True)
    host = host_rows(liger)
    rows: list[Row] = []
    left_out: list[str] = []
    ops = [op for op in OP_LIST if op.name in args.ops.split(",")]
    sizes = {tuple(int(n) for n in size.split("x")) for size in args.sizes.split(",") if size}
    for dtype in [] if args.host_only else args.dtypes.split(","):
        for op in ops:
            for r, c in op.sizes:
                if sizes and (r, c) not in sizes:
                    continue
                if time.monotonic() - began > args.budget:
                    left_out.append(f"{op.name} {dtype} {r}x{c}")
                    continue
                for row in measure(op, liger, dtype, r, c, args.batches):
                    rows.append(row)
                    print(
                        f"{row.op:18s} {dtype:8s} {r:5d}x{c:<5d} {row.passes:16s} ours "
                        f"{row.ours.median_us:9.2f} µs {row.gbps:5.0f} GB/s liger "
                        f"{_us(row.liger):>9s} compile {row.compiled.median_us:9.2f}"
                        + ("" if row.queued_ahead else " (host)"),
                        flush=True,
                    )
                torch._dynamo.reset()  # keeps compile's guard lists short
    output = args.output or DEFAULT_OUTPUT
    atomic_write(output, render(rows, copy_gbps, host, left_out))
    print(f"wrote {output} ({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
