"""Where the MLP ops' time goes on one GPU: the host's cost per call split into its steps, the
kernels of the rows slower than a peer under the profiler, and RMSNorm backward variants timed.

    python bench/profile_mlp.py host [--calls N]
        host µs per call (wall time of a loop, the fastest of five, the loops of every step
        interleaved as bench_mlp.py's; 1x4096 bfloat16) of each step a call takes: the
        Python loop, the stream accessor, allocation, the bare launch (ints, then tensors), the
        checks, and the whole op through kernelpack.mlp and torch.ops.kernelpack
    python bench/profile_mlp.py workload [OP:DTYPE:ROWSxCOLS ...]
        one call of ours, Liger-Kernel's and torch.compile's forward of each row (default: the
        rows behind a peer beyond the run's spread in the last run, ROWS_BEHIND), after a
        warm-up, inside the NVTX range "profile": run it under
        ``ncu --nvtx --nvtx-include profile/`` for their kernels alone
    python bench/profile_mlp.py queue [OP:DTYPE:ROWSxCOLS[:forward+backward] ...]
        the same rows (forward, or forward+backward), a batch of calls of each implementation
        queued back to back as bench_mlp.py's, traced by torch.profiler: per call the span, the
        kernels' time in it and the idle rest between calls, which ncu does not see, and each
        kernel's time
    python bench/profile_mlp.py backward-workload
        one forward+backward of ours and torch.compile's RMSNorm at 1x4096 and 64x4096
        (bfloat16) after a warm-up, between cudaProfilerStart and cudaProfilerStop (the backward
        runs on autograd's thread, which an NVTX range does not see): run it under
        ``ncu --profile-from-start off``
    python bench/profile_mlp.py kernels [--shapes 1x4096,64x4096,16384x8192]
        GPU µs of each kernel of forward+backward RMSNorm and add+RMSNorm at each shape (ours,
        torch.compile's, Liger-Kernel's; bfloat16 and float32), backward included
        (torch.profiler, which sees autograd's thread too)
    python bench/profile_mlp.py geometry
        the forward kernels of the rows behind a peer (1-row SwiGLU, RMSNorm at 1 to 16384
        rows) launched at several geometries beside torch.compile's and Liger-Kernel's
    python bench/profile_mlp.py forward-variants NAME:CUBIN ...
        rms_norm and swiglu forward of each cubin (mlp.cu built alone with a change; its kernels
        with this source's parameters: row_scales after out) at several threads a row, GPU µs
        per call and the error against float64
    python bench/profile_mlp.py short-geometry
        the short-row forward kernel at 1 and 64 rows of 4096 and 8192 at other threads a row
        than the host's, the general and the fixed-length kernels beside it, the short backward
        at other threads a row and the fixed-length one, and the weight sum of 64 partial rows at other block shapes,
        beside torch.compile's and Liger-Kernel's forward
    python bench/profile_mlp.py elementwise-geometry
        swiglu and silu_and_mul, forward and backward kernels, at 1 and 64 rows of 11008 (every
        dtype) at several geometries (16- or 8-byte vectors, blocks of 64 or 128, one vector a
        thread or two by striding over half the grid), the host's marked, beside torch.compile's
        and Liger-Kernel's forward: GPU µs per call queued ahead of the GPU
    python bench/profile_mlp.py weight-sum
        the RMSNorm weight-gradient sum over 1 to 4 partial rows at the host's geometry against
        the 32-column, 8-slice block, GPU µs per call
    python bench/profile_mlp.py variants NAME:CUBIN:ELEMENTS:SLICES ...
        rms_norm_backward of each cubin (mlp.cu built alone, e.g. before and after a change; its
        kernels with this source's parameters: the forward's row scales after x), ELEMENTS a
        thread for 16-bit dtypes (32-bit: 16), at several grids, its weight sum
        launched as 32 columns by SLICES slices a block (0: one 128-thread column a thread, the
        form before 2026-11-23): GPU µs per call of both kernels and of the weight sum alone
        (CUDA events, median of batches) and the error against a float64 reference

What these measured, and which commands to run for which decision: docs/bench-mlp-notes.md.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import re
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from bench_mlp import (  # the benchmark's own measures and ops, so the figures agree
    CALLS_PER_BATCH,
    OP_LIST,
    HostCall,
    PassCalls,
    gpu_times_us,
    host_us_per_calls,
    liger_functions,
    pass_calls,
    sleep_cycles,
)

from kernelpack import mlp, nn
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import hot as mlp_hot
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp import torch_ops

EPS = 1e-6
DTYPE_NAMES = ("bfloat16", "float16", "float32")


def host(calls: int) -> None:
    bf16 = torch.bfloat16
    gate = torch.randn(1, 4096, device="cuda").to(bf16)
    up = torch.randn(1, 4096, device="cuda").to(bf16)
    pair = torch.randn(1, 8192, device="cuda").to(bf16)
    weight = torch.randn(4096, device="cuda").to(bf16)
    residual = torch.randn(1, 4096, device="cuda").to(bf16)
    out = torch.empty_like(gate)
    torch_ops.register()
    mlp.swiglu(gate, up)  # prepares (bfloat16, cuda:0, gate's shape) for the hot calls
    mlp.swiglu(gate, up, out=out)
    kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("swiglu", "bfloat16"))
    grid, block = mlp_geometry.swiglu_geometry(
        4096, "bfloat16", mlp_launch.device_facts("cuda:0").multiprocessors
    )
    addresses = (gate.data_ptr(), up.data_ptr(), out.data_ptr())
    raw = torch._C._cuda_getCurrentRawStream
    stream = int(raw(0))
    hot = mlp_hot.HOT["swiglu"]
    below = mlp_hot.HOT_BELOW_AUTOGRAD["swiglu"]
    entry = mlp_hot.PREPARED["swiglu"][mlp_hot.entry_key(gate)]
    bound = getattr(entry[0], "launch", entry[0])
    ops = torch.ops.kernelpack
    norm_module = nn.RMSNorm(4096, eps=EPS, device="cuda", dtype=bf16)
    device = gate.device
    shape = (1, 4096)
    empty = torch.empty
    empty_strided = torch.empty_strided
    strides = (4096, 1)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("Python loop, lambda: None", lambda: None),
        ("torch._C._cuda_getCurrentRawStream(0)", lambda: raw(0)),
        (
            "torch.cuda.current_stream().cuda_stream",
            lambda: torch.cuda.current_stream().cuda_stream,
        ),
        ("torch.is_grad_enabled()", torch.is_grad_enabled),
        ("torch.empty_like(x)", lambda: torch.empty_like(gate)),
        ("x.new_empty(shape)", lambda: gate.new_empty((1, 4096))),
        (
            "torch.empty(shape, dtype=, device=)",
            lambda: torch.empty((1, 4096), dtype=bf16, device="cuda"),
        ),
        (
            "torch.empty(shape, dtype=, device=torch.device)",
            lambda: empty(shape, dtype=bf16, device=device),
        ),
        (
            "torch.empty_strided(shape, strides, dtype=, device=)",
            lambda: empty_strided(shape, strides, dtype=bf16, device=device),
        ),
        (
            "kernel.launch, int addresses, int stream",
            lambda: kernel.launch(grid, block, *addresses, 4096, stream=stream),
        ),
        (
            "kernel.launch, tensors, int stream",
            lambda: kernel.launch(grid, block, gate, up, out, 4096, stream=stream),
        ),
        (
            "kernel.launch, tensors, raw stream",
            lambda: bound(grid, block, gate, up, out, 4096, stream=raw(0)),
        ),
        ("gate.shape", lambda: gate.shape),
        ("gate.dtype", lambda: gate.dtype),
        ("gate.device", lambda: gate.device),
        ("gate.get_device()", gate.get_device),
        ("gate.is_contiguous()", gate.is_contiguous),
        ("gate.is_cuda", lambda: gate.is_cuda),
        ("gate.data_ptr()", gate.data_ptr),
        ("gate.requires_grad", lambda: gate.requires_grad),
        ("torch.neg(x) (one aten kernel)", lambda: torch.neg(gate)),
        ("torch.neg(x, out=)", lambda: torch.neg(gate, out=out)),
        ("torch.ops.aten.neg.default(x)", lambda: torch.ops.aten.neg.default(gate)),
        (
            "torch.ops.aten.alias.default(x) (the dispatcher, no kernel)",
            lambda: torch.ops.aten.alias.default(gate),
        ),
        ("hot call, out= (checks, stream, launch in one C call)", lambda: hot(gate, up, out)),
        ("hot call below autograd, allocating", lambda: below(gate, up, None)),
        ("kernelpack.mlp.swiglu", lambda: mlp.swiglu(gate, up)),
        ("kernelpack.mlp.swiglu, out=", lambda: mlp.swiglu(gate, up, out=out)),
        ("kernelpack.mlp.rms_norm, out=", lambda: mlp.rms_norm(gate, weight, EPS, out=out)),
        ("kernelpack.mlp.silu_and_mul", lambda: mlp.silu_and_mul(pair)),
        ("kernelpack.mlp.rms_norm", lambda: mlp.rms_norm(gate, weight, EPS)),
        (
            "kernelpack.mlp.fused_add_rms_norm",
            lambda: mlp.fused_add_rms_norm(gate, residual, weight, EPS),
        ),
        (
            "torch_ops' swiglu implementation (the CUDA kernel's Python function)",
            lambda: torch_ops.IMPLEMENTATIONS["swiglu"][0](gate, up),
        ),
        ("torch.ops.kernelpack.swiglu", lambda: ops.swiglu(gate, up)),
        ("torch.ops.kernelpack.swiglu.default", lambda: ops.swiglu.default(gate, up)),
        ("torch.ops.kernelpack.rms_norm.default", lambda: ops.rms_norm.default(gate, weight, EPS)),
        (
            "torch.ops.kernelpack.fused_add_rms_norm.default",
            lambda: ops.fused_add_rms_norm.default(gate, residual, weight, EPS),
        ),
        ("eager F.silu(g) * u", lambda: F.silu(gate) * up),
        ("kernelpack.nn.RMSNorm(4096) module", lambda: norm_module(gate)),
        ("eager F.rms_norm", lambda: F.rms_norm(gate, (4096,), weight, EPS)),
    ]
    sections = (
        (f"host µs per call, no_grad, 1x4096 bfloat16, {calls} calls a loop", torch.no_grad, steps),
        (
            f"host µs per call, inference_mode, 1x4096 bfloat16, {calls} calls a loop",
            torch.inference_mode,
            steps,
        ),
        ("grad enabled, inputs not requiring grad:", torch.enable_grad, steps[-12:]),
    )
    timed: dict[tuple[str, str], HostCall] = {
        (title, name): (mode, call) for title, mode, rows in sections for name, call in rows
    }
    print(f"timing {len(timed)} calls, their loops interleaved", flush=True)
    measured = host_us_per_calls(timed, calls)
    for title, _, rows in sections:
        print(f"\n{title}")
        for name, _ in rows:
            print(f"{measured[title, name]:8.2f}  {name}")


def _forward_backward(
    function: Callable[..., Any], inputs: tuple[torch.Tensor, ...], grads: tuple[torch.Tensor, ...]
) -> Callable[[], object]:
    def run() -> object:
        outputs = function(*inputs)
        return torch.autograd.grad(
            outputs if isinstance(outputs, tuple) else (outputs,), inputs, grads
        )

    return run


def _implementations() -> tuple[dict[str, Callable[..., Any]], dict[str, Callable[..., Any]]]:
    """rms_norm and add_rms_norm as ours, torch.compile's and Liger-Kernel's (as bench_mlp)."""
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    torch_ops.register()
    ops = torch.ops.kernelpack

    def compiled_rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, w.shape, w, EPS)

    def compiled_add(
        x: torch.Tensor, r: torch.Tensor, w: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        summed = x + r
        return F.rms_norm(summed, w.shape, w, EPS), summed

    rms: dict[str, Callable[..., Any]] = {
        "ours": lambda x, w: ops.rms_norm(x, w, EPS),
        "compile": torch.compile(compiled_rms, dynamic=False),
        "liger": lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False),
    }
    add: dict[str, Callable[..., Any]] = {
        "ours": lambda x, r, w: ops.add_rms_norm(x, r, w, EPS),
        "compile": torch.compile(compiled_add, dynamic=False),
        "liger": lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS),
    }
    return rms, add


# The forward rows behind a peer beyond the run's spread in the last benchmark run
# (docs/bench-mlp.md's "Rows behind a peer"), as OP:DTYPE:ROWSxCOLS: workload's default.
ROWS_BEHIND = (
    "silu_and_mul:bfloat16:4096x14336",
    "silu_and_mul:bfloat16:16384x14336",
    "silu_and_mul:float16:4096x14336",
    "silu_and_mul:float16:1x11008",
    "silu_and_mul:float32:1x11008",
    "add_rms_norm:float16:16384x8192",
    "rms_norm:float32:16384x8192",
)


def _row_spec(spec: str) -> tuple[Any, str, int, int, str]:
    """A row OP:DTYPE:ROWSxCOLS[:PASS] (PASS: forward, the default, or forward+backward) as (Op,
    dtype, rows, cols, pass); ValueError saying what is wrong with it."""
    parts = spec.split(":")
    if not 3 <= len(parts) <= 4:
        raise ValueError("not OP:DTYPE:ROWSxCOLS[:PASS]")
    name, dtype, size, *rest = parts
    op = next((op for op in OP_LIST if op.name == name), None)
    which = rest[0] if rest else "forward"
    if op is None:
        raise ValueError(f"no op {name!r} (one of {', '.join(o.name for o in OP_LIST)})")
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"no dtype {dtype!r} (one of {', '.join(DTYPE_NAMES)})")
    rows_cols = size.split("x")
    if len(rows_cols) != 2 or not all(n.isdigit() and int(n) > 0 for n in rows_cols):
        raise ValueError(f"size {size!r} is not ROWSxCOLS (positive integers, e.g. 64x4096)")
    passes = ["forward"] + (["forward+backward"] if op.backward_bytes else [])
    if which not in passes:
        raise ValueError(f"pass {which!r} is not one of {', '.join(passes)}")
    return op, dtype, int(rows_cols[0]), int(rows_cols[1]), which


def _row_calls(spec: str, liger: dict[str, Any]) -> PassCalls:
    """A row OP:DTYPE:ROWSxCOLS[:PASS] (:func:`_row_spec`) as bench_mlp.py measures it: its calls
    (ours, Liger-Kernel's where it has the op, torch.compile's, each taking the index of its input
    set), checked against eager torch."""
    op, dtype, rows, cols, which = _row_spec(spec)
    return pass_calls(op, liger, dtype, rows, cols, which)


def workload(specs: list[str]) -> None:
    """One forward call of ours, Liger-Kernel's (where it has the op) and torch.compile's, in that
    order, of each row OP:DTYPE:ROWSxCOLS, with bench_mlp.py's calls (a compiled function a row,
    as it compiles), after a warm-up, inside the NVTX range "profile": run it under
    ``ncu --nvtx --nvtx-include profile/`` for their kernels alone. The backward runs on
    autograd's own thread, outside the range: see ``kernels`` and ``backward-workload``."""
    torch_ops.register()
    liger = liger_functions() or {}
    calls: list[Callable[[], object]] = []
    for spec in specs:
        for label, call in _row_calls(spec, liger).calls.items():
            calls.append(functools.partial(call, 0))
            print(f"call {len(calls)}: {spec} {label}", flush=True)
    with torch.no_grad():
        for call in calls:
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        nvtx: Any = torch.cuda.nvtx  # untyped in torch
        nvtx.range_push("profile")
        for call in calls:
            call()
        torch.cuda.synchronize()
        nvtx.range_pop()
    print("workload done", flush=True)


def queue(specs: list[str]) -> None:
    """Each row OP:DTYPE:ROWSxCOLS[:PASS] (:func:`_row_calls`) with bench_mlp.py's calls (its
    inputs, functions and ring of input sets), CALLS_PER_BATCH calls of each implementation
    queued back to back behind a GPU sleep (its warm-up and sleep), as its batches, traced by
    torch.profiler (CUPTI's kernel timestamps, which see autograd's thread): per call, the span
    from the first kernel's start to the last one's end, the kernels' own time in it, and the
    idle rest, which ncu (kernels alone) does not see; then each kernel's µs a call."""
    from torch.profiler import ProfilerActivity, profile

    torch_ops.register()
    liger = liger_functions() or {}
    print(f"{'row':50s} {'':8s} {'span':>8s} {'kernels':>8s} {'idle':>7s}  µs a call", flush=True)
    for spec in specs:
        prepared = _row_calls(spec, liger)
        for label, call in prepared.calls.items():
            with torch.enable_grad() if prepared.backward else torch.no_grad():
                sleep = sleep_cycles(call, prepared.sets)
                with profile(activities=[ProfilerActivity.CUDA]) as trace:
                    torch.cuda._sleep(sleep)
                    for i in range(CALLS_PER_BATCH):
                        call(i % prepared.sets)
                    torch.cuda.synchronize()
            with tempfile.TemporaryDirectory() as folder:
                path = Path(folder) / "trace.json"
                trace.export_chrome_trace(str(path))
                events = json.loads(path.read_text())["traceEvents"]
            kernels = sorted(
                (event["ts"], event["dur"], event["name"])
                for event in events
                if event.get("cat") == "kernel" and "spin_kernel" not in event["name"]
            )
            span = (kernels[-1][0] + kernels[-1][1] - kernels[0][0]) / CALLS_PER_BATCH
            busy = sum(duration for _, duration, _ in kernels) / CALLS_PER_BATCH
            print(
                f"{spec:50s} {label:8s} {span:8.2f} {busy:8.2f} {span - busy:7.2f}  "
                f"({len(kernels) // CALLS_PER_BATCH} kernels a call)",
                flush=True,
            )
            by_name: dict[str, float] = {}
            for _, duration, kernel in kernels:
                by_name[kernel] = by_name.get(kernel, 0.0) + duration / CALLS_PER_BATCH
            for kernel, us in by_name.items():
                print(f"{'':60s}{us:8.2f}  {kernel[:100]}", flush=True)
        torch._dynamo.reset()


def backward_workload() -> None:
    """Forward+backward RMSNorm rows behind torch.compile, ours and compile's once each, inside
    the profiler's start and stop, which hold for every thread."""
    rms, _ = _implementations()
    calls: list[Callable[[], object]] = []
    for rows in (1, 64):
        x = torch.randn(rows, 4096, device="cuda").to(torch.bfloat16).requires_grad_()
        w = torch.randn(4096, device="cuda").to(x.dtype).requires_grad_()
        grad = torch.randn_like(x)
        calls += [_forward_backward(rms[name], (x, w), (grad,)) for name in ("ours", "compile")]
    for call in calls:
        for _ in range(3):
            call()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print("backward workload done", flush=True)


def kernels(shapes: list[tuple[int, int]]) -> None:
    """GPU µs of every kernel of forward+backward RMSNorm and add+RMSNorm at each of ``shapes``
    (ours, torch.compile's, Liger-Kernel's), backward included, from torch.profiler: mean of 5
    calls."""
    from torch.profiler import ProfilerActivity, profile

    rms, add = _implementations()
    for (rows_, cols), dtype in itertools.product(shapes, (torch.bfloat16, torch.float32)):
        big = [torch.randn(rows_, cols, device="cuda").to(dtype).requires_grad_() for _ in "xr"]
        weight = torch.randn(cols, device="cuda").to(dtype).requires_grad_()
        grad = torch.randn(rows_, cols, device="cuda").to(dtype)
        rows = {
            f"rms_norm {name}": _forward_backward(f, (big[0], weight), (grad,))
            for name, f in rms.items()
        }
        rows |= {
            f"add_rms_norm {name}": _forward_backward(f, (*big, weight), (grad, grad))
            for name, f in add.items()
        }
        for label, call in rows.items():
            for _ in range(3):
                call()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as trace:
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
            name = str(dtype).removeprefix("torch.")
            print(f"\n{name} {rows_}x{cols} fwd+bwd {label}:", flush=True)
            total = 0.0
            for event in trace.key_averages():
                us = event.device_time_total / 5
                if us > 0.05:
                    total += us
                    print(f"  {us:9.2f} µs  {event.key[:90]}", flush=True)
            print(f"  {total:9.2f} µs  all kernels", flush=True)
        del big, weight, grad


# dtype -> how a mangled name spells mlp.cu's template argument: mlp::rms_norm<__nv_bfloat16> is
# _ZN3mlp8rms_normI13__nv_bfloat16E...
MANGLED_TYPES = {"bfloat16": "13__nv_bfloat16", "float16": "6__half", "float32": "f"}


class Cubin:
    """One cubin of mlp.cu loaded with CuPy (which loads it as it is); its kernels are found by
    their mangled names, read from the file's symbol strings."""

    def __init__(self, path: str) -> None:
        import cupy

        self.module = cupy.RawModule(path=path)
        self.data = Path(path).read_bytes()

    def kernel(self, op: str, dtype: str) -> Any:
        """The kernel mlp::op<T> for ``dtype``."""
        prefix = f"_ZN3mlp{len(op)}{op}I{MANGLED_TYPES[dtype]}E".encode()
        names = re.findall(re.escape(prefix) + rb"[A-Za-z0-9_]*", self.data)
        if not names:
            raise SystemExit(f"no kernel {op} for {dtype} in the cubin")
        return self.module.get_function(names[0].decode())


def _events_us(run: Callable[[], None], batches: int) -> float:
    """GPU µs per call of ``run``: CUDA events around ten calls, median of batches."""
    event: Any = torch.cuda.Event  # untyped in torch
    start, end = event(enable_timing=True), event(enable_timing=True)
    samples: list[float] = []
    for _ in range(batches):
        start.record()
        for _ in range(10):
            run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / 10)
    return statistics.median(samples)


def _variant_row(
    cubin: Cubin, dtype: str, data: tuple[torch.Tensor, ...], geometry: tuple[int, int, int]
) -> tuple[torch.Tensor, torch.Tensor, Callable[[], None], Callable[[], None]]:
    """NaN-poisoned gradients and the launches of one cubin's backward into them (CuPy, which
    loads a cubin as it is; the arrays go as integer views, the kernels take addresses)."""
    import cupy

    x, weight, grad = data
    threads, grid, slices = geometry
    view = torch.int16 if x.element_size() == 2 else torch.int32
    rows, cols = x.shape
    grad_x = torch.full_like(x, float("nan"))
    grad_weight = torch.full_like(weight, float("nan"))
    partial = torch.empty(grid, cols, device="cuda")
    kernel = cubin.kernel("rms_norm_backward", dtype)
    reduce = cubin.kernel("rms_norm_weight_grad", dtype)
    null = cupy.uint64(0)
    x_, w_, g_, gx_, gw_ = (
        cupy.asarray(t.view(view)) for t in (x, weight, grad, grad_x, grad_weight)
    )
    p_ = cupy.asarray(partial)
    # the forward's row scales, which the backward reads (here from float64)
    s_ = cupy.asarray((x.double().square().mean(-1) + EPS).rsqrt().float())
    kernel_args = (x_, s_, w_, g_, null, gx_, null, p_, cupy.int64(rows), cupy.int64(cols))
    reduce_args = (p_, gw_, cupy.int64(grid), cupy.int64(cols))

    sliced = ((-(-cols // 32),), (32, slices))
    reduce_geometry = sliced if slices else ((-(-cols // 128),), (128,))

    def weight_sum() -> None:
        reduce(*reduce_geometry, reduce_args)

    def run() -> None:
        kernel((grid,), (threads,), kernel_args)
        weight_sum()

    return grad_x, grad_weight, run, weight_sum


def variants(specs: list[str], batches: int) -> None:
    """rms_norm_backward of each cubin, checked against float64, timed at several grids."""

    modules = []
    for spec in specs:
        name, path, count, slices = spec.split(":")  # elements a thread for 16-bit dtypes
        modules.append((name, Cubin(path), int(count), int(slices)))
    print("\nrms_norm_backward variants: GPU µs per call (kernel + weight sum), error vs float64")
    for rows, cols in ((16384, 8192), (4096, 8192)):
        for dtype in MANGLED_TYPES:
            data = tuple(
                torch.randn(shape, device="cuda").to(getattr(torch, dtype))
                for shape in ((rows, cols), (cols,), (rows, cols))
            )
            x, w, g = (t.double() for t in data)
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
            want_x = r * w * g - x * r.pow(3) * (g * w * x).mean(-1, keepdim=True)
            want_w = (g * x * r).sum(0)
            del x, w, g, r
            moved = 3 * rows * cols * data[0].element_size()
            for name, module, elements, slices in modules:
                per_thread = elements if data[0].element_size() == 2 else 16
                threads = max(64, min(512, 1 << (-(-cols // per_thread) - 1).bit_length()))
                for grid in (132, 264, 528):
                    geometry = (threads, grid, slices)
                    grad_x, grad_w, run, weight_sum = _variant_row(module, dtype, data, geometry)
                    run()
                    torch.cuda.synchronize()
                    error_x = ((grad_x.double() - want_x).norm() / want_x.norm()).item()
                    error_w = ((grad_w.double() - want_w).norm() / want_w.norm()).item()
                    us = _events_us(run, batches)
                    sum_us = _events_us(weight_sum, batches)
                    print(
                        f"{dtype:8s} {rows:5d}x{cols} {name:8s} grid {grid:3d} threads "
                        f"{threads:3d}: {us:8.2f} µs {moved / us / 1e3:6.0f} GB/s (weight sum "
                        f"{sum_us:6.2f} µs)  err x "
                        f"{error_x:.1e} w {error_w:.1e}",
                        flush=True,
                    )
            del data, want_x, want_w


def _queued_us(call: Callable[[], object], batches: int) -> float:
    """GPU µs per call of ``call`` queued ahead of the GPU (bench_mlp's own measure)."""
    return gpu_times_us({"call": lambda _: call()}, 1, batches)["call"].median_us


def geometry(batches: int) -> None:
    """The forward kernels of the rows behind a peer, launched at several geometries (any
    geometry gives the right answer: the kernels stride), beside torch.compile's and
    Liger-Kernel's, GPU µs per call queued ahead of the GPU."""
    rms, _ = _implementations()
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    compiled_swiglu = torch.compile(silu_mul, dynamic=False)
    print("\nswiglu forward 1x11008: GPU µs per call at (grid, block)", flush=True)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        gate, up = (torch.randn(1, 11008, device="cuda").to(dtype) for _ in "gu")
        out = torch.empty_like(gate)
        kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("swiglu", name))
        chunks = -(-11008 // (16 // gate.element_size()))
        peers = {
            "torch.compile": lambda g=gate, u=up: compiled_swiglu(g, u),
            "Liger-Kernel": lambda g=gate, u=up: LigerSiLUMulFunction.apply(g, u),
        }
        for label, call in peers.items():
            print(f"{name:8s} {label:24s} {_queued_us(call, batches):6.2f}", flush=True)
        for block in (64, 128):
            for grid in sorted({-(-chunks // block), 8, 4, 2, 1}):
                call = functools.partial(kernel.launch, grid, block, gate, up, out, 11008, stream=0)
                us = _queued_us(call, batches)
                print(f"{name:8s} ours grid {grid:4d} block {block:3d}      {us:6.2f}", flush=True)
    print("\nrms_norm forward: GPU µs per call at threads a row", flush=True)
    for rows, cols in ((1, 4096), (64, 4096), (4096, 8192), (16384, 8192)):
        for dtype in (torch.bfloat16, torch.float32):
            name = str(dtype).removeprefix("torch.")
            x = torch.randn(rows, cols, device="cuda").to(dtype)
            w = torch.randn(cols, device="cuda").to(dtype)
            out = torch.empty_like(x)
            kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("rms_norm", name))
            for label in ("compile", "liger"):
                us = _queued_us(functools.partial(rms[label], x, w), batches)
                print(f"{name:8s} {rows:5d}x{cols} {label:18s} {us:8.2f}", flush=True)
            now = mlp_geometry.row_geometry(rows, cols, name)
            for threads in (64, 128, 256, 512):
                per_block = max(1, 64 // threads)
                grid = min(-(-rows // per_block), 2**31 // (threads * per_block))
                run = functools.partial(
                    kernel.launch,
                    grid,
                    (threads, per_block),
                    *(x, w, out, 0),  # no row scales (the inference path)
                    rows,
                    cols,
                    EPS,
                    stream=0,
                )
                mark = " (now)" if now[1][0] == threads else ""
                us = _queued_us(run, batches)
                print(f"{name:8s} {rows:5d}x{cols} ours {threads:3d} threads{mark:6s} {us:8.2f}")


def forward_variants(specs: list[str], batches: int) -> None:
    """rms_norm and swiglu forward of each cubin (mlp.cu built alone with a change), GPU µs per
    call queued ahead of the GPU at several threads a row, checked against float64."""
    import cupy

    modules = [(name, Cubin(path)) for name, path in (s.split(":") for s in specs)]
    print("\nforward variants: GPU µs per call, error vs float64", flush=True)
    sizes = ((1, 4096), (64, 4096), (4096, 8192), (16384, 8192))
    for (rows, cols), dtype in [(size, d) for size in sizes for d in ("bfloat16", "float32")]:
        x = torch.randn(rows, cols, device="cuda").to(getattr(torch, dtype))
        w = torch.randn(cols, device="cuda").to(x.dtype)
        want = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + EPS)
        want = want * w.double()
        view = torch.int16 if x.element_size() == 2 else torch.int32
        for name, module in modules:
            kernel = module.kernel("rms_norm", dtype)
            for threads in (128, 256, 512):
                out = torch.full_like(x, float("nan"))
                per_block = max(1, 64 // threads)
                args = tuple(cupy.asarray(t.view(view)) for t in (x, w, out))
                grid = -(-rows // per_block)
                null = cupy.uint64(0)  # no row scales (the inference path)
                full = (*args, null, cupy.int64(rows), cupy.int64(cols), cupy.float32(EPS))
                run = functools.partial(kernel, (grid,), (threads, per_block), full)
                run()
                torch.cuda.synchronize()
                error = ((out.double() - want).norm() / want.norm()).item()
                us = _queued_us(run, batches)
                print(
                    f"{dtype:8s} {rows:5d}x{cols} {name:8s} {threads:3d} threads: {us:8.2f} µs"
                    f"  err {error:.1e}",
                    flush=True,
                )
    for dtype in ("bfloat16", "float32"):
        gate, up = (torch.randn(1, 11008, device="cuda").to(getattr(torch, dtype)) for _ in "gu")
        want = gate.double() * torch.sigmoid(gate.double()) * up.double()
        view = torch.int16 if gate.element_size() == 2 else torch.int32
        chunks = -(-11008 // (16 // gate.element_size()))
        for name, module in modules:
            kernel = module.kernel("swiglu", dtype)
            out = torch.full_like(gate, float("nan"))
            args = (*(cupy.asarray(t.view(view)) for t in (gate, up, out)), cupy.int64(11008))
            run_swiglu = functools.partial(kernel, (-(-chunks // 128),), (128,), args)
            run_swiglu()
            torch.cuda.synchronize()
            error = ((out.double() - want).norm() / want.norm()).item()
            us = _queued_us(run_swiglu, batches)
            print(f"{dtype:8s} swiglu 1x11008 {name:8s}: {us:8.2f} µs  err {error:.1e}")


def _launch_on_current_stream(launch: Any, args: tuple[Any, ...], _: int) -> None:
    launch(*args, stream=torch._C._cuda_getCurrentRawStream(0))


def weight_sum(batches: int) -> None:
    """The weight-gradient sum alone over 1 to 4 partial rows (the backward's grid at 1 to 4
    rows), at the host's geometry (mlp_geometry.weight_grad_geometry) against the 32-column,
    8-slice block used for every shape before: GPU µs per call, and both sums equal."""
    print("\nweight-gradient sum, GPU µs: partial rows x cols, dtype: host's geometry vs 32x8")
    for dtype in ("bfloat16", "float32"):
        name = mlp_geometry.kernel_name("rms_norm_weight_grad", dtype)
        kernel = mlp_launch.load_kernel("cuda:0", name)
        for rows in (1, 2, 4):
            for cols in (4096, 8192):
                partial = torch.randn(rows, cols, device="cuda")
                out = torch.empty(cols, device="cuda", dtype=getattr(torch, dtype))
                times, sums = [], []
                for grid, block in (
                    mlp_geometry.weight_grad_geometry(cols, rows),
                    (cols // 32, (32, 8)),
                ):
                    args = (grid, block, partial, out, rows, cols)
                    call = functools.partial(_launch_on_current_stream, kernel.launch, args)
                    times.append(gpu_times_us({"call": call}, 1, batches)["call"].median_us)
                    call(0)
                    sums.append(out.clone())
                same = bool(torch.equal(sums[0], sums[1]))
                print(
                    f"{rows} x {cols} {dtype}: {times[0]:6.2f} vs {times[1]:6.2f}"
                    f" (sums equal: {same})",
                    flush=True,
                )


def short_geometry(batches: int) -> None:
    """The short-row kernels at other geometries than the host's (any is right: a thread takes up
    to two vectors of a row, the weight sum any block shape), the general and the fixed-length
    forward beside them, and torch.compile's and Liger-Kernel's forward: GPU µs per call queued
    ahead of the GPU."""
    rms, _ = _implementations()
    print("\nforward (rms_norm_short at threads a row, general, fixed): GPU µs a call", flush=True)
    shapes = ((1, 4096), (64, 4096), (1, 8192), (64, 8192))
    for (rows, cols), dtype in itertools.product(shapes, DTYPE_NAMES):
        x = torch.randn(rows, cols, device="cuda").to(getattr(torch, dtype))
        w = torch.randn(cols, device="cuda").to(x.dtype)
        out = torch.empty_like(x)
        for label in ("compile", "liger"):
            us = _queued_us(functools.partial(rms[label], x, w), batches)
            print(f"{dtype:8s} {rows:3d}x{cols} {label:10s} {us:6.2f}", flush=True)
        now = mlp_geometry.norm_launch(
            "rms_norm", rows, cols, dtype, mlp_launch.device_facts("cuda:0")
        )
        short = mlp_geometry.kernel_name("rms_norm_short", dtype)
        kernel = mlp_launch.load_kernel("cuda:0", short)
        chunks = cols // (16 // x.element_size())
        for threads in (t for t in (128, 256, 512) if chunks <= 2 * t):
            run = functools.partial(
                kernel.launch, rows, threads, x, w, out, 0, rows, cols, EPS, stream=0
            )
            mark = " (now)" if now.name == short and now.block[0] == threads else ""
            us = _queued_us(run, batches)
            print(f"{dtype:8s} {rows:3d}x{cols} ours {threads:3d}{mark:6s} {us:6.2f}", flush=True)
        general = mlp_geometry.kernel_name("rms_norm", dtype)
        grid, block = mlp_geometry.row_geometry(rows, cols, dtype)
        others = [("general", general, grid, block)]
        if cols in mlp_geometry.FIXED_COLUMNS:
            fixed = mlp_geometry.kernel_name("rms_norm_fixed", dtype, cols)
            others.append(("fixed", fixed, rows, (mlp_geometry.fixed_threads(cols, dtype), 1)))
        for label, name, grid, block in others:
            kernel = mlp_launch.load_kernel("cuda:0", name)
            run = functools.partial(
                kernel.launch, grid, block, x, w, out, 0, rows, cols, EPS, stream=0
            )
            mark = " (now)" if now.name == name else ""
            us = _queued_us(run, batches)
            print(f"{dtype:8s} {rows:3d}x{cols} ours {label}{mark:6s} {us:6.2f}", flush=True)
    print("\nshort backward (kernel alone): GPU µs per call at threads a row", flush=True)
    for (rows, cols), dtype in itertools.product(((1, 4096), (64, 4096)), DTYPE_NAMES):
        x, dy = (torch.randn(rows, cols, device="cuda").to(getattr(torch, dtype)) for _ in "xd")
        w = torch.randn(cols, device="cuda").to(x.dtype)
        grad_x, grad_w = torch.empty_like(x), torch.empty_like(w)
        partial = torch.empty(rows, cols, device="cuda")
        scales = (x.double().square().mean(-1) + EPS).rsqrt().float()  # the forward's
        name = mlp_geometry.kernel_name("rms_norm_backward_short", dtype)
        kernel = mlp_launch.load_kernel("cuda:0", name)
        chunks = cols // (16 // x.element_size())
        host = mlp_geometry.short_backward_threads(
            rows, cols, dtype, mlp_launch.device_facts("cuda:0").multiprocessors
        )
        fixed = mlp_geometry.fixed_backward(cols, dtype)
        for threads in (t for t in (128, 256, 512) if chunks <= 2 * t):
            scratch = (
                0 if mlp_geometry.short_backward_scratch(rows, cols, dtype) is None else partial
            )
            launch_args = (rows, threads, x, scales, w, dy, 0, grad_x, grad_w, scratch, rows, cols)
            run = functools.partial(kernel.launch, *launch_args, stream=0)
            mark = " (now)" if threads == host and not fixed else ""
            us = _queued_us(run, batches)
            print(f"{dtype:8s} {rows:3d}x{cols} ours {threads:3d}{mark:6s} {us:6.2f}", flush=True)
            if fixed and threads == mlp_geometry.SHORT_BACKWARD_THREADS:
                name = mlp_geometry.kernel_name("rms_norm_backward_fixed", dtype, cols)
                run = functools.partial(
                    mlp_launch.load_kernel("cuda:0", name).launch, *launch_args, stream=0
                )
                us = _queued_us(run, batches)
                print(f"{dtype:8s} {rows:3d}x{cols} ours fixed (now) {us:6.2f}", flush=True)
    print("\nweight sum of 64 partial rows: GPU µs per call at (columns, slices)", flush=True)
    for cols, dtype in itertools.product((4096, 8192), ("bfloat16", "float32")):
        partial = torch.randn(64, cols, device="cuda")
        out = torch.empty(cols, device="cuda", dtype=getattr(torch, dtype))
        kernel = mlp_launch.load_kernel(
            "cuda:0", mlp_geometry.kernel_name("rms_norm_weight_grad", dtype)
        )
        host_block = mlp_geometry.weight_grad_geometry(cols, 64)[1]
        for block in ((32, 8), (64, 4), (128, 2), (16, 16), (32, 4), (64, 2)):
            grid = -(-cols // block[0])
            run = functools.partial(kernel.launch, grid, block, partial, out, 64, cols, stream=0)
            mark = " (now)" if block == host_block else ""
            us = _queued_us(run, batches)
            print(f"{dtype:8s} 64x{cols} {block}{mark:6s} {us:6.2f}", flush=True)


def _elementwise_geometries(cols: int, width: int) -> list[tuple[str, int, int]]:
    """(label, grid over the columns, block) of the elementwise kernels to time: one 16-byte
    vector a thread in blocks of 128, one 8-byte vector in blocks of 128 or 64 (16-byte vectors in
    blocks of 64 would be the same launch: the kernels see a thread for every 8-byte vector), and
    16-byte vectors over half the grid (two a thread, the kernels striding)."""
    out = []
    for vector_bytes, block in ((16, 128), (8, 128), (8, 64)):
        grid = -(-cols // (width * vector_bytes // 16) // block)
        out.append((f"{vector_bytes:2d} B x{block:3d}", grid, block))
    wide = -(-cols // width // 128)
    out.append(("16 B x128 half grid", -(-wide // 2), 128))
    return out


def elementwise_geometry(batches: int) -> None:
    """swiglu and silu_and_mul, forward and backward kernels, launched at several geometries
    (any is right: the kernels take the 8-byte vector when the grid has a thread for each, else
    the 16-byte one, striding; where the grid has a thread for each vector, the exact form
    too, "_exact", as the host names it: mlp_geometry.exact_kernel_name), beside torch.compile's
    and Liger-Kernel's forward: GPU µs per call queued ahead of the GPU."""
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return F.silu(x[..., :half]) * x[..., half:]

    compiled = {
        "swiglu": torch.compile(silu_mul, dynamic=False),
        "silu_and_mul": torch.compile(silu_and_mul, dynamic=False),
    }
    print("\nelementwise kernels: GPU µs per call at (vector, block)", flush=True)
    for (rows, cols), dtype in itertools.product(((1, 11008), (64, 11008)), DTYPE_NAMES):
        torch_dtype = getattr(torch, dtype)
        width = 16 // torch_dtype.itemsize
        x = torch.randn(rows, 2 * cols, device="cuda").to(torch_dtype)
        gate, up = x[:, :cols].contiguous(), x[:, cols:].contiguous()
        grad = torch.randn(rows, cols, device="cuda").to(torch_dtype)
        out, grad_gate, grad_up = (torch.empty_like(gate) for _ in "ogu")
        grad_x = torch.empty_like(x)
        n = rows * cols
        peers = {
            "swiglu": {
                "compile": lambda g=gate, u=up: compiled["swiglu"](g, u),
                "liger": lambda g=gate, u=up: LigerSiLUMulFunction.apply(g, u),
            },
            "silu_and_mul": {"compile": lambda x=x: compiled["silu_and_mul"](x)},
        }
        shape = f"{dtype:8s} {rows:2d}x{cols}"
        for op, calls in peers.items():
            for label, call in calls.items():
                us = _queued_us(call, batches)
                print(f"{shape} {op:12s} forward  {label:24s} {us:6.2f}", flush=True)
        host = {
            "swiglu": mlp_geometry.swiglu_geometry(
                n, dtype, mlp_launch.device_facts("cuda:0").multiprocessors
            ),
            "silu_and_mul": mlp_geometry.silu_and_mul_geometry(
                rows, cols, dtype, mlp_launch.device_facts("cuda:0").multiprocessors
            ),
        }
        for label, grid, block in _elementwise_geometries(n, width):
            launches = {
                ("swiglu", "forward"): (grid, block, gate, up, out, n),
                ("swiglu", "backward"): (grid, block, gate, up, grad, grad_gate, grad_up, n),
            }
            vector_bytes = mlp_geometry.exact_vector_bytes(grid * block, 1, n, dtype)
            for (op, way), args in launches.items():
                name = op if way == "forward" else f"{op}_backward"
                for form in ("", "_exact") if vector_bytes else ("",):
                    kernel = mlp_launch.load_kernel(
                        "cuda:0",
                        mlp_geometry.exact_kernel_name(name, dtype, vector_bytes, n)
                        if form
                        else mlp_geometry.kernel_name(name, dtype),
                    )
                    us = _queued_us(functools.partial(kernel.launch, *args, stream=0), batches)
                    mark = " (now)" if host[op] == (grid, block) else ""
                    print(f"{shape} {op:12s} {way:8s} {label}{form}{mark:6s} {us:6.2f}", flush=True)
        for label, grid, block in _elementwise_geometries(cols, width):
            launches = {
                "forward": ((grid, rows), block, x, out, rows, cols),
                "backward": ((grid, rows), block, x, grad, grad_x, rows, cols),
            }
            vector_bytes = mlp_geometry.exact_vector_bytes(grid * block, rows, cols, dtype)
            for way, args in launches.items():
                name = "silu_and_mul" if way == "forward" else "silu_and_mul_backward"
                for form in ("", "_exact") if vector_bytes else ("",):
                    kernel = mlp_launch.load_kernel(
                        "cuda:0",
                        mlp_geometry.exact_kernel_name(name, dtype, vector_bytes, rows * cols)
                        if form
                        else mlp_geometry.kernel_name(name, dtype),
                    )
                    us = _queued_us(functools.partial(kernel.launch, *args, stream=0), batches)
                    mark = " (now)" if host["silu_and_mul"] == ((grid, rows), block) else ""
                    print(
                        f"{shape} {'silu_and_mul':12s} {way:8s} {label}{form}{mark:6s} {us:6.2f}",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what",
        choices=[
            "host",
            "workload",
            "queue",
            "backward-workload",
            "kernels",
            "variants",
            "geometry",
            "forward-variants",
            "weight-sum",
            "short-geometry",
            "elementwise-geometry",
        ],
    )
    parser.add_argument(
        "specs",
        nargs="*",
        help="variants: NAME:CUBIN:ELEMENTS:SLICES; forward-variants: NAME:CUBIN; workload: "
        "OP:DTYPE:ROWSxCOLS, queue: OP:DTYPE:ROWSxCOLS[:forward+backward] (default: the rows "
        "behind a peer in the last run)",
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument(
        "--shapes", default="16384x8192", help="kernels: comma-separated ROWSxCOLS, e.g. 1x4096"
    )
    parser.add_argument("--batches", type=int, default=7)
    args = parser.parse_args()
    if args.what in ("workload", "queue"):
        for spec in args.specs:
            try:
                which = _row_spec(spec)[4]
            except ValueError as error:
                parser.error(f"{args.what} row {spec!r}: {error}")
            if args.what == "workload" and which != "forward":
                parser.error(f"workload row {spec!r}: forward only (queue takes forward+backward)")
    if args.what == "host":
        host(args.calls)
    elif args.what == "workload":
        workload(args.specs or list(ROWS_BEHIND))
    elif args.what == "queue":
        queue(args.specs or list(ROWS_BEHIND))
    elif args.what == "backward-workload":
        backward_workload()
    elif args.what == "kernels":
        sizes = [tuple(int(n) for n in shape.split("x")) for shape in args.shapes.split(",")]
        kernels([(rows, cols) for rows, cols in sizes])
    elif args.what == "geometry":
        geometry(args.batches)
    elif args.what == "weight-sum":
        weight_sum(args.batches)
    elif args.what == "short-geometry":
        short_geometry(args.batches)
    elif args.what == "elementwise-geometry":
        elementwise_geometry(args.batches)
    elif args.what == "forward-variants":
        forward_variants(args.specs, args.batches)
    else:
        variants(args.specs, args.batches)


if __name__ == "__main__":
    main()
