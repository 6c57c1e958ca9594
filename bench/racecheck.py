"""compute-sanitizer racecheck over every kernel form of the MLP and walk modules, and its verdict.

Why a driver of its own: bench/sanitize_mlp.py and the walk's GPU tests (memcheck's drivers) run
large shapes in every dtype, aligned and not, and under racecheck they did not finish in the GPU
suite's time. Racecheck looks for hazards on shared memory inside a block, which no grid size
changes, so one launch of each form at the smallest shape that selects it is enough. The cases
below are those shapes, found by the host's own choice (kernelpack.ops.mlp.geometry and
kernelpack.walk.lower / launch, pure functions): tests/test_racecheck.py checks on any machine
that they select every kernel that mlp.cu and walk.cu instantiate.

Three steps (bench/gpu_all.sh runs them behind KERNELPACK_GPU_SANITIZE):

    compute-sanitizer --tool racecheck --kernel-name kns=mlp \\
        python bench/racecheck.py run mlp --record build/racecheck-mlp.json > racecheck-mlp.log
    (the same for walk)
    python bench/racecheck.py verdict --out racecheck.json \\
        mlp build/racecheck-mlp.json racecheck-mlp.log walk build/racecheck-walk.json ...

``run`` launches each case once (every launch recorded through kernelpack's Kernel objects, the
hot path's included), checks each result against float64 or the numpy walker, and writes the
record: the module's kernels, each case's launches, its check. ``verdict`` reads the record and
the sanitizer's log and writes, per module, the forms reached (kernel -> the cases that launched
it, and the hazards racecheck reported in it), the kernels no case reached, and one line.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from kernelpack.files.atomic import atomic_write
from kernelpack.ops.mlp import options
from kernelpack.ops.mlp.geometry import (
    ITEM_SIZE,
    DeviceFacts,
    fixed_backward,
    kernel_name,
    norm_launch,
    short_backward_threads,
    silu_and_mul_launch,
    swiglu_launch,
)
from kernelpack.ops.mlp.table import CASTING_MODES
from kernelpack.ops.mlp.tuning import (
    FIXED_COLUMNS,
    ROW_SCALE_DTYPES,
    SHORT_BACKWARD_THREADS,
    VECTOR_BYTES,
)

DTYPES = ("float32", "float16", "bfloat16")
EPS = 1e-6
TOLERANCE = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}  # relative norm, against float64

# ---- the MLP cases ---------------------------------------------------------------------------


class MlpCase(NamedTuple):
    """One call: ``op`` (a forward op, or a backward op run after its training forward) on
    ``rows`` x ``cols`` (swiglu: one row of ``cols``; silu_and_mul: ``cols`` outputs a row),
    its tensors 16-byte aligned."""

    op: str
    dtype: str
    rows: int
    cols: int
    weight: str = ""  # the option norms' weight dtype (the rows' own or float32)
    mode: str = ""  # the option norms' casting mode

    @property
    def name(self) -> str:
        options = f" weight {self.weight} {self.mode}" if self.weight else ""
        return f"{self.op} {self.dtype} {self.rows}x{self.cols}{options}"


def _past_streaming(arrays: int, dtype: str, multiple: int) -> int:
    """The fewest elements of the forward's output past the streaming forms' 64 MiB for a call
    moving ``arrays`` arrays of that size, a multiple of ``multiple``."""
    n = 64 * 2**20 // (arrays * ITEM_SIZE[dtype]) + 1
    return -(-n // multiple) * multiple


def mlp_cases(facts: DeviceFacts) -> list[MlpCase]:
    """Every form the host picks on a device of ``facts``, each at the smallest shape that
    selects it there, in every dtype:
    the general kernels (a row that is no whole number of vectors), the exact elementwise forms
    in 8-byte vectors (a grid short of a block a multiprocessor), in 16-byte vectors through
    streaming cache hints (a grid of a block a multiprocessor or more) and plain past 64 MiB
    moved; the short-row and fixed-length (few rows, more rows than multiprocessors) forward
    norms; the general, short and fixed-length backward norms with each weight-gradient sum.
    Small cases first, the large ones last."""
    sms = facts.multiprocessors
    few = min(64, sms)  # rows of the few-row fixed forms (16-bit add_rms_norm's from 64)
    streaming = sms * 2048  # 16-byte vectors in blocks of 128: 2 or 4 blocks a multiprocessor
    small: list[MlpCase] = []
    large: list[MlpCase] = []
    for dtype in DTYPES:
        vector = VECTOR_BYTES // ITEM_SIZE[dtype]
        for op in ("swiglu", "swiglu_backward"):
            small += [MlpCase(op, dtype, 1, n) for n in (9, 4096, streaming)]
        for op in ("silu_and_mul", "silu_and_mul_backward"):
            shapes = ((3, 9), (2, 4096), (-(-sms // 4), 4096))
            small += [MlpCase(op, dtype, rows, cols) for rows, cols in shapes]
        for op in ("rms_norm", "add_rms_norm"):
            small += [MlpCase(op, dtype, 3, 9), MlpCase(op, dtype, 2, 1024)]
            small += [MlpCase(op, dtype, r, c) for c in FIXED_COLUMNS for r in (few, sms + 1)]
        for op in ("rms_norm_backward", "add_rms_norm_backward"):
            small += [
                MlpCase(op, dtype, rows, cols) for rows, cols in ((3, 9), (1, 1024), (2, 1024))
            ]
            small += [MlpCase(op, dtype, 2, cols) for cols in FIXED_COLUMNS]
        large.append(MlpCase("swiglu", dtype, 1, _past_streaming(3, dtype, vector)))
        rows = -(-(64 * 2**20 + 1) // (3 * 11008 * ITEM_SIZE[dtype]))
        large.append(MlpCase("silu_and_mul", dtype, rows, 11008))
    return small + option_cases() + large


def option_cases() -> list[MlpCase]:
    """The option kernels (kernelpack.ops.mlp.options): a block a row whatever the shape, so one
    small shape each: the norms in every casting mode with the rows' own weight dtype and with
    float32, with a residual and without, their backward, and the elementwise options."""
    cases: list[MlpCase] = []
    for dtype in DTYPES:
        for weight in sorted({dtype, "float32"}):
            for mode in CASTING_MODES:
                for op in ("rms_norm_options", "fused_add_rms_norm_options"):
                    cases.append(MlpCase(op, dtype, 3, 200, weight=weight, mode=mode))
            cases.append(MlpCase("rms_norm_options_backward", dtype, 3, 200, weight=weight))
        for op in ("swiglu_scaled", "swiglu_scaled_backward", "silu_and_mul_as_torch"):
            cases.append(MlpCase(op, dtype, 3, 200))
    return cases


def _norm_backward_kernels(case: MlpCase, facts: DeviceFacts) -> list[str]:
    """The backward's kernels, as kernelpack.ops.mlp.torch_impl and launch choose them."""
    rows, cols, dtype = case.rows, case.cols, case.dtype
    threads = short_backward_threads(rows, cols, dtype, facts.multiprocessors)
    if not threads:
        return [kernel_name("rms_norm_backward", dtype), kernel_name("rms_norm_weight_grad", dtype)]
    if threads == SHORT_BACKWARD_THREADS and fixed_backward(cols, dtype):
        kernels = [kernel_name("rms_norm_backward_fixed", dtype, cols)]
    else:
        kernels = [kernel_name("rms_norm_backward_short", dtype)]
    if rows == 1:
        return kernels
    if dtype not in ROW_SCALE_DTYPES:
        return [*kernels, kernel_name("rms_norm_weight_grad", dtype)]
    return [*kernels, kernel_name("rms_norm_weight_grad_inputs", dtype)]


def mlp_kernels(case: MlpCase, facts: DeviceFacts) -> list[str]:
    """The kernels ``case`` launches on a device of ``facts``, by the host's rules."""
    op, dtype, rows, cols = case.op, case.dtype, case.rows, case.cols
    if op in ("rms_norm_options", "fused_add_rms_norm_options"):
        return [options.norm_name(op != "rms_norm_options", dtype, case.weight, case.mode)]
    if op == "rms_norm_options_backward":
        return [
            options.norm_name(False, dtype, case.weight, "gemma"),
            options.backward_name(dtype, case.weight),
            kernel_name("rms_norm_weight_grad", case.weight),
        ]
    if op in ("swiglu_scaled", "swiglu_scaled_backward", "silu_and_mul_as_torch"):
        return [options.elementwise_name(op, dtype)]
    if op in ("swiglu", "swiglu_backward"):
        launch = swiglu_launch(op, rows * cols, dtype, facts.multiprocessors)
        return [launch.name]
    if op in ("silu_and_mul", "silu_and_mul_backward"):
        launch = silu_and_mul_launch(op, rows, cols, dtype, facts.multiprocessors)
        return [launch.name]
    if op in ("rms_norm", "add_rms_norm"):
        return [norm_launch(op, rows, cols, dtype, facts).name]
    forward = op.removesuffix("_backward")
    return [
        norm_launch(forward, rows, cols, dtype, facts).name,
        *_norm_backward_kernels(case, facts),
    ]


# ---- the walk cases --------------------------------------------------------------------------


class WalkCase(NamedTuple):
    """One walk call: ``matrix`` over axes x and y, ``walks`` walks to ``depth``; ``select``
    runs the selection on the device, ``resident`` passes shifts and dirs as GPU arrays."""

    name: str
    matrix: tuple[tuple[str, ...], ...]
    depth: int
    walks: int = 40
    select: bool = False
    resident: bool = False


def _diagonal(m: int, entry: str) -> tuple[tuple[str, ...], ...]:
    """``entry`` plus i*y on the diagonal, the rest of the first row 1, the rest 0: every entry
    of the degree of ``entry`` in x."""
    rows = [["0"] * m for _ in range(m)]
    for i in range(m):
        rows[i][i] = f"{entry} + {i}*y"
    rows[0][1:] = ["1"] * (m - 1)
    return tuple(tuple(row) for row in rows)


def _tables_field(m: int) -> tuple[tuple[str, ...], ...]:
    """A field of m x m matrices whose one entry of degree 6 costs more to evaluate every step
    than to advance by tables (lower.py's costs), at a depth of 20."""
    rows = [["0"] * m for _ in range(m)]
    rows[0] = ["x**6 - 3*x**5*y + x*y**2 + 5", *(["y**3"] * (m - 1))]
    for i in range(1, m):
        rows[i][i - 1], rows[i][i] = "1", f"x*y + {i}"
    return tuple(tuple(row) for row in rows)


def walk_cases() -> list[WalkCase]:
    """Every residue and float kernel of walk.cu: per matrix size, the register form at each
    degree it takes (with the float register form where float64 stays exact), tables in shared
    memory (degree 6) and the program evaluated every step (degree 40, past the tables' 32): the
    case's name says the form (tests/test_racecheck.py checks it); the selection kernels and
    the device-resident inputs' bounds kernel once."""
    from kernelpack.walk.lower import REGISTER_DEGREES

    cases: list[WalkCase] = []
    for m, top in REGISTER_DEGREES.items():
        for degree in range(1, top + 1):
            entry = f"x**{degree}" if degree > 1 else "2*x"
            cases.append(WalkCase(f"m={m} registers D={degree}", _diagonal(m, entry), 12))
        cases.append(WalkCase(f"m={m} tables", _tables_field(m), 20))
        cases.append(WalkCase(f"m={m} evaluate", _diagonal(m, "x**40"), 12))
    field = _diagonal(2, "x**2")
    cases.append(WalkCase("m=2 selection", field, 12, walks=300, select=True))
    cases.append(WalkCase("m=2 device-resident", field, 12, resident=True))
    return cases


def walk_arguments(case: WalkCase) -> dict[str, Any]:
    """The walk's arguments: positive shifts and dirs (small enough that float64 stays exact in
    the register forms), primes below 2^31."""
    rng = np.random.default_rng(sum(map(ord, case.name)))
    return {
        "shifts": rng.integers(1, 30, (case.walks, 2)),
        "dirs": rng.integers(1, 4, (case.walks, 2)),
        "primes": [2147483647, 2147483629, 2147483587, 3],
        "depth": case.depth,
        "depth1": case.depth // 3,
        "depth2": case.depth,
        "target": 0.25,
    }


def walk_kernels(case: WalkCase) -> list[str]:
    """The kernels ``case`` launches, by kernelpack.walk.gpu's rules."""
    from kernelpack.walk import compile_program
    from kernelpack.walk.launch import Launch
    from kernelpack.walk.lower import lower
    from kernelpack.walk.walker import bind

    program = compile_program([list(row) for row in case.matrix], ["x", "y"])
    inputs = bind(program, **walk_arguments(case)).host_inputs()
    lowered = lower(program, 2, case.depth, registers=True)
    m, residue = program.m, lowered.residue
    registers = residue.form == "registers"
    kernels = [f"walk_registers<{m}, {residue.degree}>" if registers else f"walk_residues<{m}>"]
    if Launch.build(lowered, inputs).float_registers:
        kernels.append(f"walk_float_registers<{m}, {residue.degree}>")
    else:
        kernels.append(f"walk_float<{m}>")
    if case.select:
        kernels += [f"walk_select_{name}" for name in ("hits", "histogram", "pick", "top")]
    if case.resident:
        kernels.append("walk_bounds")
    return kernels


# ---- run: each case once, every launch recorded ----------------------------------------------


def _record_launches(launched: list[str]) -> None:
    """Append the name of every kernel launched from now on to ``launched``: each Kernel's
    launch wrapped where it is made (the hot path's prepared entries take the wrapped one)."""
    from kernelpack.loader import module

    made = module.Kernel.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        launch, name = self.launch, self.name

        def recorded(*args: Any, **kwargs: Any) -> Any:
            launched.append(name)
            return launch(*args, **kwargs)

        self.launch = recorded

    module.Kernel.__init__ = init  # type: ignore[method-assign]


def _relative_error(got: Any, want: Any) -> float:
    got, want = got.double(), want.double()
    if not want.numel():
        return 0.0
    return float(((got - want).norm() / want.norm().clamp_min(1e-30)).item())


def _mlp_call(case: MlpCase) -> float:
    """Run ``case``; its largest relative error against float64."""
    import torch

    ops = torch.ops.kernelpack
    dtype = getattr(torch, case.dtype)
    generator = torch.Generator(device="cuda").manual_seed(hash(case) % 2**31)

    def tensor(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", generator=generator).to(dtype)

    rows, cols = case.rows, case.cols
    if case.weight or case.op in ("swiglu_scaled", "swiglu_scaled_backward"):
        return _option_call(case, tensor)
    if case.op == "silu_and_mul_as_torch":
        x = tensor(rows, 2 * cols)
        g, u = x[:, :cols].double(), x[:, cols:].double()
        return _relative_error(ops.silu_and_mul_as_torch(x), g * g.sigmoid() * u)
    if case.op in ("swiglu", "swiglu_backward"):
        gate, up = tensor(cols), tensor(cols)
        g, u = gate.double(), up.double()
        if case.op == "swiglu":
            return _relative_error(ops.swiglu(gate, up), g * g.sigmoid() * u)
        grad = tensor(cols)
        grad_gate, grad_up = ops.swiglu_backward(grad, gate, up)
        s, dy = g.sigmoid(), grad.double()
        want_gate = dy * u * s * (1 + g * (1 - s))
        return max(_relative_error(grad_gate, want_gate), _relative_error(grad_up, dy * g * s))
    if case.op in ("silu_and_mul", "silu_and_mul_backward"):
        x = tensor(rows, 2 * cols)
        g, u = x[:, :cols].double(), x[:, cols:].double()
        if case.op == "silu_and_mul":
            return _relative_error(ops.silu_and_mul(x), g * g.sigmoid() * u)
        grad = tensor(rows, cols)
        grad_x = ops.silu_and_mul_backward(grad, x)
        s, dy = g.sigmoid(), grad.double()
        want = torch.cat([dy * u * s * (1 + g * (1 - s)), dy * g * s], dim=-1)
        return _relative_error(grad_x, want)
    x, weight = tensor(rows, cols), tensor(cols)
    residual: Any = tensor(rows, cols) if case.op.startswith("add") else None

    def norm(x: Any, residual: Any, weight: Any) -> Any:
        s = x if residual is None else x + residual
        return s * torch.rsqrt(s.square().mean(-1, keepdim=True) + EPS) * weight

    if case.op == "rms_norm":
        return _relative_error(
            ops.rms_norm(x, weight, EPS), norm(x.double(), None, weight.double())
        )
    if case.op == "add_rms_norm":
        out, summed = ops.add_rms_norm(x, residual, weight, EPS)
        want = norm(x.double(), residual.double(), weight.double())
        return max(
            _relative_error(out, want), _relative_error(summed, x.double() + residual.double())
        )
    grad = tensor(rows, cols)
    if residual is None:
        _, scales = ops.rms_norm_with_scale(x, weight, EPS)
        grad_x, grad_weight = ops.rms_norm_backward(grad, x, weight, scales)
        source = x
    else:
        _, summed, scales = ops.add_rms_norm_with_scale(x, residual, weight, EPS)
        grad_sum = tensor(rows, cols)
        grad_x, grad_weight = ops.add_rms_norm_backward(grad, grad_sum, summed, weight, scales)
        source = summed
    leaves = [source.double().requires_grad_(), weight.double().requires_grad_()]
    want_x, want_weight = torch.autograd.grad(
        norm(leaves[0], None, leaves[1]), leaves, grad.double()
    )
    if residual is not None:
        want_x = want_x + grad_sum.double()
    return max(_relative_error(grad_x, want_x), _relative_error(grad_weight, want_weight))


def _option_call(case: MlpCase, tensor: Callable[..., Any]) -> float:
    """An option case (:func:`option_cases`): its largest relative error against float64."""
    import torch

    ops = torch.ops.kernelpack
    rows, cols, offset = case.rows, case.cols, 0.5
    if case.op in ("swiglu_scaled", "swiglu_scaled_backward"):
        gate, up = tensor(rows, cols), tensor(rows, cols)
        g, u, a, b = gate.double(), up.double(), 0.75, 1.5  # the gate's and down's multipliers
        if case.op == "swiglu_scaled":
            want = b * (a * g) * (a * g).sigmoid() * u
            return _relative_error(ops.swiglu_scaled(gate, up, a, b), want)
        leaves = [g.requires_grad_(), u.requires_grad_()]
        grad = tensor(rows, cols)
        found = ops.swiglu_scaled_backward(grad, gate, up, a, b)
        wanted = torch.autograd.grad(
            b * (a * leaves[0]) * (a * leaves[0]).sigmoid() * leaves[1], leaves, grad.double()
        )
        return max(_relative_error(f, w) for f, w in zip(found, wanted, strict=True))
    x = tensor(rows, cols)
    weight = tensor(cols).to(getattr(torch, case.weight))

    def norm(s: Any, w: Any) -> Any:
        return s * torch.rsqrt(s.square().mean(-1, keepdim=True) + EPS) * (w + offset)

    if case.op == "rms_norm_options":
        found = ops.rms_norm_options(x, weight, EPS, offset, case.mode)
        return _relative_error(found, norm(x.double(), weight.double()))
    if case.op == "fused_add_rms_norm_options":
        residual = tensor(rows, cols)
        summed = x.double() + residual.double()
        want = norm(summed, weight.double())
        ops.fused_add_rms_norm_options(x, residual, weight, EPS, offset, case.mode)
        return max(_relative_error(x, want), _relative_error(residual, summed))
    _, scales = ops.rms_norm_options_with_scale(x, weight, EPS, offset)
    grad = tensor(rows, cols)
    grad_x, grad_weight = ops.rms_norm_options_backward(grad, x, weight, scales, offset)
    leaves = [x.double().requires_grad_(), weight.double().requires_grad_()]
    want_x, want_weight = torch.autograd.grad(norm(leaves[0], leaves[1]), leaves, grad.double())
    return max(_relative_error(grad_x, want_x), _relative_error(grad_weight, want_weight))


def _walk_call(case: WalkCase) -> float:
    """Run ``case``; 0 where the GPU's walks (P_final, alive exactly; estimates to 1e-9) and
    selection equal the numpy walker's and the host's rule, else 1."""
    import torch

    from kernelpack.walk import compile_program, run, run_numpy
    from kernelpack.walk.select import select

    program = compile_program([list(row) for row in case.matrix], ["x", "y"])
    arguments = walk_arguments(case)
    expected = run_numpy(program, **arguments)
    given = dict(arguments)
    if case.resident:
        given["shifts"] = torch.from_numpy(arguments["shifts"]).cuda()
        given["dirs"] = torch.from_numpy(arguments["dirs"]).cuda()
    if case.select:  # the device's selection against the host's rule over its own outputs
        finite = expected.delta2[np.isfinite(expected.delta2)]
        min_delta = float(np.median(finite)) if len(finite) else 0.0
        chosen = run(program, **given, min_delta=min_delta, top_k=20)
        hits, top = select(
            chosen.alive, chosen.est2, chosen.delta2, arguments["shifts"], arguments["dirs"],
            min_delta, 20,
        )  # fmt: skip
        if chosen.top is None or chosen.hits is None or hits is None:
            return 1.0
        same = np.array_equal(chosen.top.walk, top.walk)
        return 0.0 if same and np.array_equal(chosen.hits.walk, hits.walk) else 1.0
    result = run(program, **given)

    def host(value: Any) -> Any:
        return value.cpu().numpy() if hasattr(value, "cpu") else value

    same = np.array_equal(host(result.P_final), expected.P_final)
    same = same and np.array_equal(host(result.alive), expected.alive)
    estimates = np.allclose(host(result.est2), expected.est2, rtol=1e-9, equal_nan=True)
    return 0.0 if same and estimates else 1.0


def run_cases(module_name: str, record: Path, budget: float) -> int:
    """Launch every case of ``module_name`` ("mlp" or "walk") once, within ``budget`` seconds
    (cases left when it runs out are recorded as not run), and write the record."""
    import torch

    import kernelpack
    from kernelpack.ops.mlp import torch_ops  # noqa: F401  (registers torch.ops.kernelpack)

    launched: list[str] = []
    _record_launches(launched)
    module = kernelpack.load(module_name)
    calls: list[tuple[str, Callable[[], float], float]]
    if module_name == "mlp":
        from kernelpack.ops.mlp.launch import device_facts

        cases_of = mlp_cases(device_facts(module.device))
        calls = [(c.name, functools.partial(_mlp_call, c), TOLERANCE[c.dtype]) for c in cases_of]
    else:
        calls = [(c.name, functools.partial(_walk_call, c), 0.0) for c in walk_cases()]
    start = time.monotonic()
    cases: list[dict[str, Any]] = []
    failed = 0
    for name, call, tolerance in calls:
        if time.monotonic() - start > budget:
            cases.append({"case": name, "launched": [], "check": "not run: budget spent"})
            continue
        print(f"racecheck case: {name}", flush=True)
        del launched[:]
        try:
            error = call()
            torch.cuda.synchronize()
        except Exception as raised:  # recorded, so that the cases after it still run
            failed += 1
            check = f"raised {type(raised).__name__}: {raised}"
        else:
            passed = error <= tolerance
            failed += not passed
            check = "ok" if passed else f"mismatch: relative error {error:.3g}"
        cases.append({"case": name, "launched": sorted(set(launched)), "check": check})
    document = {
        "module": module_name,
        "device": f"{torch.cuda.get_device_name()} ({module.image})",
        "kernels": module.kernel_names,
        "seconds": round(time.monotonic() - start, 1),
        "cases": cases,
    }
    atomic_write(record, json.dumps(document, indent=1) + "\n")
    print(f"racecheck driver: {len(cases)} cases, {failed} mismatched", flush=True)
    return 1 if failed else 0


# ---- verdict: the record and the sanitizer's log ----------------------------------------------

_HEADER = re.compile(r"(Error|Warning|ERROR|WARNING): (Race reported|Potential \w+ hazard)")
_COUNT = re.compile(r"\[(\d+) hazards?\]")
_SUMMARY = re.compile(
    r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)"
)


def _normal(text: str) -> str:
    """``text`` with the demangler's spellings of template arguments made the index's:
    no spaces, no "(int)" casts."""
    return re.sub(r"\((?:unsigned )?(?:int|long)\)", "", text).replace(" ", "")


def hazard_reports(log: str) -> Iterator[tuple[str, int]]:
    """Each hazard report of racecheck's ``log``: its text (the header and the lines that
    continue it) and the hazards it counts (1 where it gives no count)."""
    lines = log.splitlines()
    for index, line in enumerate(lines):
        if not _HEADER.search(line):
            continue
        report = [line]
        for more in lines[index + 1 :]:
            if _HEADER.search(more) or not more.startswith("=========     "):
                break
            report.append(more)
        text = "\n".join(report)
        counts = [int(found) for found in _COUNT.findall(text)]
        yield text, max(counts, default=1)


# the record of a driver that wrote none (killed before its end): no case ran
NO_RECORD: dict[str, Any] = {"kernels": [], "cases": [], "device": None, "seconds": None}


def module_verdict(record: dict[str, Any], log: str) -> dict[str, Any]:
    """One module's verdict: the forms reached with their cases and hazards, the kernels no case
    reached, reports naming no reached kernel, racecheck's summary, and the checks that failed."""
    forms: dict[str, dict[str, Any]] = {}
    for case in record["cases"]:
        for kernel in case["launched"]:
            forms.setdefault(kernel, {"cases": [], "hazards": 0})["cases"].append(case["case"])
    spelled = {kernel: _normal(kernel) + "(" for kernel in forms}
    unattributed: list[str] = []
    for text, count in hazard_reports(log):
        named = [k for k, key in spelled.items() if key in _normal(text)]
        for kernel in named[:1]:
            forms[kernel]["hazards"] += count
        if not named:
            unattributed.append(text)
    summary = _SUMMARY.findall(log)
    return {
        "device": record.get("device"),
        "driver_seconds": record.get("seconds"),
        "summary": (
            dict(zip(("hazards", "errors", "warnings"), map(int, summary[-1]), strict=True))
            if summary
            else None
        ),
        "forms": dict(sorted(forms.items())),
        "unreached": sorted(set(record["kernels"]) - set(forms)),
        "unattributed": unattributed,
        "checks_failed": [
            c["case"] + ": " + c["check"] for c in record["cases"] if c["check"] != "ok"
        ],
    }


def verdict_line(name: str, verdict: dict[str, Any]) -> str:
    """One line for the summary: the hazards in all, the forms reached out of the module's."""
    reached = len(verdict["forms"])
    total = reached + len(verdict["unreached"])
    hazards = sum(form["hazards"] for form in verdict["forms"].values())
    summary = verdict["summary"]
    if not verdict["forms"]:
        state = "no verdict: the driver wrote no record (killed before its end?)"
    elif summary is None:
        state = "no verdict: racecheck wrote no summary (killed, or it refused an option)"
    elif summary["hazards"] or hazards or verdict["unattributed"]:
        state = f"HAZARDS: {summary['hazards']} reported, {hazards} in our kernels"
    elif verdict["unreached"] or verdict["checks_failed"]:
        state = "0 hazards, but incomplete"
    else:
        state = "0 hazards in every form"
    failed = f", {len(verdict['checks_failed'])} checks failed" if verdict["checks_failed"] else ""
    return f"racecheck {name}: {state} ({reached}/{total} kernels reached{failed})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    run = steps.add_parser("run", help="launch every case of a module (under compute-sanitizer)")
    run.add_argument("module", choices=("mlp", "walk"))
    run.add_argument("--record", type=Path, required=True, help="the record to write (JSON)")
    run.add_argument("--budget", type=float, default=100.0, help="seconds for the cases")
    verdict = steps.add_parser("verdict", help="the verdict of records and sanitizer logs")
    verdict.add_argument("--out", type=Path, required=True, help="the verdict to write (JSON)")
    verdict.add_argument("triples", nargs="+", help="MODULE RECORD LOG, for each module")
    args = parser.parse_args(argv)
    if args.step == "run":
        return run_cases(args.module, args.record, args.budget)
    if len(args.triples) % 3:
        parser.error("verdict: give MODULE RECORD LOG for each module")
    verdicts: dict[str, Any] = {}
    for name, record_path, log_path in zip(*[iter(args.triples)] * 3, strict=True):
        record = Path(record_path)
        log = Path(log_path).read_text(errors="replace") if Path(log_path).exists() else ""
        found = json.loads(record.read_text()) if record.exists() else NO_RECORD
        verdicts[name] = module_verdict(found, log)
        verdicts[name]["line"] = verdict_line(name, verdicts[name])
        print(verdicts[name]["line"])
    atomic_write(args.out, json.dumps(verdicts, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
