"""torch.ops.kernelpack on the CPU side: registration, schemas, fake (meta) implementations, their
argument checks, and torch.library.opcheck on meta tensors. These need torch (the test dependency
group installs a CPU build) but no GPU; the kernels themselves are tested in test_mlp_torch.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from kernelpack.errors import UsageError

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = pytest.mark.torch

from kernelpack import nn  # noqa: E402  (needs torch)
from kernelpack.ops.mlp import hot as mlp_hot  # noqa: E402  (needs torch)
from kernelpack.ops.mlp import torch_impl, torch_ops  # noqa: E402  (needs torch)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
OPS = torch.ops.kernelpack


def meta(*shape: int, dtype: Any = torch.bfloat16) -> Any:
    return torch.empty(shape, device="meta", dtype=dtype)


def test_importing_kernelpack_and_its_mlp_does_not_import_torch() -> None:
    code = "import sys, kernelpack, kernelpack.mlp, kernelpack.devices.arrays; print('torch' in sys.modules)"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environment
    )
    assert result.stdout.strip() == "False"


# Written out by hand from the op list in the module docstring: what users and torch.compile see.
EXPECTED_SCHEMAS = {
    "swiglu": "kernelpack::swiglu(Tensor gate, Tensor up) -> Tensor",
    "silu_and_mul": "kernelpack::silu_and_mul(Tensor x) -> Tensor",
    "rms_norm": "kernelpack::rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "add_rms_norm": "kernelpack::add_rms_norm(Tensor x, Tensor residual, Tensor weight, "
    "float eps=1e-06) -> (Tensor, Tensor)",
    "fused_add_rms_norm": "kernelpack::fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, "
    "Tensor weight, float eps=1e-06) -> ()",
    "rms_norm_with_scale": "kernelpack::rms_norm_with_scale(Tensor x, Tensor weight, "
    "float eps=1e-06) -> (Tensor, Tensor)",
    "add_rms_norm_with_scale": "kernelpack::add_rms_norm_with_scale(Tensor x, Tensor residual, "
    "Tensor weight, float eps=1e-06) -> (Tensor, Tensor, Tensor)",
    "rms_norm_backward": "kernelpack::rms_norm_backward(Tensor grad, Tensor x, Tensor weight, "
    "Tensor row_scales) -> (Tensor, Tensor)",
    "add_rms_norm_backward": "kernelpack::add_rms_norm_backward(Tensor grad, Tensor grad_sum, "
    "Tensor summed, Tensor weight, Tensor row_scales) -> (Tensor, Tensor)",
}


@pytest.mark.parametrize("name", EXPECTED_SCHEMAS)
def test_schemas(name: str) -> None:
    assert getattr(OPS, name).default._schema == torch._C.parse_schema(EXPECTED_SCHEMAS[name])


MUTATES = {
    "fused_add_rms_norm": ["x", "residual"],
    "fused_add_rms_norm_options": ["x", "residual"],
    "rms_norm_options_in_place": ["x"],
}


def test_only_the_in_place_norms_mutate() -> None:
    for name in torch_ops.SCHEMAS:
        schema = getattr(OPS, name).default._schema
        mutated = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
        assert mutated == MUTATES.get(name, []), name


def test_register_is_idempotent() -> None:
    torch_ops.register()
    torch_ops.register()
    assert len(torch_ops._LIBRARY) == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_fake_shapes_and_dtypes(dtype: Any) -> None:
    x = meta(2, 3, 8, dtype=dtype)
    weight = meta(8, dtype=dtype)
    assert OPS.swiglu(x, x).shape == (2, 3, 8)
    assert OPS.silu_and_mul(x).shape == (2, 3, 4)
    assert OPS.rms_norm(x, weight).shape == (2, 3, 8)
    out, summed = OPS.add_rms_norm(x, x, weight)
    assert out.shape == summed.shape == (2, 3, 8) and out.dtype == summed.dtype == dtype
    assert OPS.fused_add_rms_norm(x, x, weight) is None
    grad_gate, grad_up = OPS.swiglu_backward(x, x, x)
    assert grad_gate.shape == grad_up.shape == (2, 3, 8)
    assert OPS.silu_and_mul_backward(meta(2, 3, 4, dtype=dtype), x).shape == (2, 3, 8)
    out, row_scales = OPS.rms_norm_with_scale(x, weight)
    assert (out.shape, out.dtype) == ((2, 3, 8), dtype)
    assert (row_scales.shape, row_scales.dtype) == ((2, 3), torch.float32)
    assert row_scales.is_contiguous()
    out, summed, row_scales = OPS.add_rms_norm_with_scale(x, x, weight)
    assert out.shape == summed.shape == (2, 3, 8) and out.dtype == summed.dtype == dtype
    assert (row_scales.shape, row_scales.dtype) == ((2, 3), torch.float32)
    grad_x, grad_weight = OPS.rms_norm_backward(x, x, weight, row_scales)
    assert (grad_x.shape, grad_weight.shape, grad_weight.dtype) == ((2, 3, 8), (8,), dtype)
    grad_x, grad_weight = OPS.add_rms_norm_backward(x, x, x, weight, row_scales)
    assert (grad_x.shape, grad_weight.shape, grad_weight.dtype) == ((2, 3, 8), (8,), dtype)


def test_fake_tensors_on_a_gpu_device_without_a_gpu() -> None:
    """What torch.compile traces with: fake CUDA tensors, on a machine with no GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 16, device="cuda", dtype=torch.float16)
        weight = torch.empty(16, device="cuda", dtype=torch.float16)
        out = OPS.rms_norm(x, weight, 1e-5)
        assert (out.shape, out.device.type, out.dtype) == ((4, 16), "cuda", torch.float16)


BAD_CALLS: list[tuple[Callable[[], object], str]] = [
    (lambda: OPS.swiglu(meta(4), meta(5)), "up: shape"),
    (lambda: OPS.swiglu(meta(4), meta(4, dtype=torch.float16)), "up: dtype float16 differs"),
    (lambda: OPS.swiglu(meta(4, dtype=torch.float64), meta(4)), "gate: dtype float64 is not"),
    (lambda: OPS.silu_and_mul(meta(3, 5)), "x: shape (3, 5): the last dimension must be even"),
    (lambda: OPS.rms_norm(meta(2, 8), meta(7)), "weight: shape (7,)"),
    (lambda: OPS.rms_norm(meta(2, 8), meta(8), -1.0), "eps: must be a finite number"),
    (lambda: OPS.rms_norm(meta(2, 8), meta(8), float("nan")), "eps: must be a finite number"),
    (lambda: OPS.add_rms_norm(meta(2, 8), meta(2, 9), meta(8)), "residual: shape"),
    (lambda: OPS.fused_add_rms_norm(meta(2, 8), meta(3, 8), meta(8)), "residual: shape"),
    (lambda: OPS.rms_norm(meta(2, 8), torch.empty(8, dtype=torch.bfloat16)), "weight: on cpu"),
    (lambda: OPS.rms_norm_with_scale(meta(2, 8), meta(7)), "weight: shape (7,)"),
    (lambda: OPS.add_rms_norm_with_scale(meta(2, 8), meta(2, 8), meta(8), -1.0), "eps: must"),
    (lambda: backward(meta(2, 8), meta(2, dtype=torch.bfloat16)), "row_scales: dtype bfloat16"),
    (lambda: backward(meta(2, 8), meta(3, dtype=torch.float32)), "row_scales: shape (3,)"),
    (lambda: backward(meta(2, 8), meta(2, 1, dtype=torch.float32)), "row_scales: shape (2, 1)"),
    (lambda: backward(meta(2, 8), torch.empty(2)), "row_scales: on cpu, but x is on meta"),
    (
        lambda: backward(meta(2, 3, 8), meta(3, 2, dtype=torch.float32).t()),
        "row_scales: must be contiguous",
    ),
    (
        lambda: OPS.add_rms_norm_backward(*[meta(2, 8)] * 3, meta(8), torch.empty(2)),
        "row_scales: on cpu",
    ),
    # the options
    (
        lambda: OPS.rms_norm_options(meta(2, 8), None, 1e-6, 0.0, "llama2"),
        "casting_mode: 'llama2' is not one of 'gemma', 'llama', 'none'",
    ),
    (
        lambda: OPS.rms_norm_options(meta(2, 8), meta(8), 1e-6, float("inf")),
        "offset: must be a finite number",
    ),
    (
        lambda: OPS.rms_norm_options(meta(2, 8), meta(8, dtype=torch.float16)),
        "weight: dtype float16; expected x's bfloat16 or float32",
    ),
    (
        lambda: OPS.rms_norm_options(meta(2, 8, dtype=torch.float32), meta(8)),
        "weight: dtype bfloat16; expected x's float32",
    ),
    (lambda: OPS.rms_norm_options(meta(2, 8), meta(7)), "weight: shape (7,)"),
    (lambda: OPS.swiglu_scaled(meta(2, 8), meta(2, 8), float("nan")), "gate_multiplier: must"),
    (lambda: OPS.swiglu_scaled(meta(2, 8), meta(2, 9)), "up: shape (2, 9)"),
    (lambda: OPS.silu_and_mul_as_torch(meta(2, 7)), "x: shape (2, 7): the last dimension"),
]


def backward(x: Any, row_scales: Any) -> Any:
    """rms_norm_backward of x (bfloat16) with a weight of ones and the given row scales."""
    return OPS.rms_norm_backward(x, x, meta(x.shape[-1]), row_scales)


@pytest.mark.parametrize(("call", "message"), BAD_CALLS)
def test_fake_implementations_check_arguments(call: Callable[[], object], message: str) -> None:
    with pytest.raises(UsageError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        call()


def opcheck_cases(dtype: Any) -> list[tuple[str, tuple[Any, ...]]]:
    def grad(t: Any) -> Any:
        return t.requires_grad_()

    x, weight = meta(3, 16, dtype=dtype), meta(16, dtype=dtype)
    row_scales = meta(3, dtype=torch.float32)
    return [
        ("swiglu", (grad(meta(3, 16, dtype=dtype)), grad(meta(3, 16, dtype=dtype)))),
        ("silu_and_mul", (grad(meta(3, 16, dtype=dtype)),)),
        ("rms_norm", (grad(meta(3, 16, dtype=dtype)), grad(meta(16, dtype=dtype)), 1e-6)),
        (
            "add_rms_norm",
            (grad(meta(3, 16, dtype=dtype)), grad(meta(3, 16, dtype=dtype)), grad(weight), 1e-5),
        ),
        ("fused_add_rms_norm", (x, meta(3, 16, dtype=dtype), weight, 1e-6)),
        ("rms_norm_with_scale", (grad(meta(3, 16, dtype=dtype)), grad(meta(16, dtype=dtype)))),
        (
            "add_rms_norm_with_scale",
            (grad(meta(3, 16, dtype=dtype)), grad(meta(3, 16, dtype=dtype)), grad(weight), 1e-5),
        ),
        ("swiglu_backward", (x, x, x)),
        ("silu_and_mul_backward", (meta(3, 8, dtype=dtype), x)),
        ("rms_norm_backward", (x, x, weight, row_scales)),
        ("add_rms_norm_backward", (x, x, x, weight, row_scales)),
        # the options: a float32 weight, none, the offset and the casting modes, strided views
        (
            "rms_norm_options",
            (
                grad(meta(3, 16, dtype=dtype)),
                grad(meta(16, dtype=torch.float32)),
                1e-6,
                1.0,
                "llama",
            ),
        ),
        ("rms_norm_options_with_scale", (grad(meta(3, 16, dtype=dtype)), None, 1e-6, 0.0, "none")),
        ("rms_norm_options_in_place", (meta(3, 32, dtype=dtype)[:, :16], weight)),
        (
            "fused_add_rms_norm_options",
            (meta(3, 32, dtype=dtype)[:, :16], meta(3, 16, dtype=dtype), None, 1e-6, 1.0),
        ),
        ("rms_norm_options_backward", (x, x, meta(16, dtype=torch.float32), row_scales, 1.0)),
        (
            "swiglu_scaled",
            (grad(meta(3, 16, dtype=dtype)), grad(meta(3, 16, dtype=dtype)), 0.7, 1.3),
        ),
        ("swiglu_scaled_backward", (x, x, x, 1.5, 0.5)),
        ("silu_and_mul_as_torch", (grad(meta(3, 16, dtype=dtype)),)),
    ]


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_on_meta_tensors(dtype: Any) -> None:
    """Schema, fake implementation, autograd registration and AOT dispatch (dynamic shapes); the
    same check on GPU tensors, against the kernels, is in test_mlp_torch.py."""
    cases = opcheck_cases(dtype)
    assert sorted(name for name, _ in cases) == sorted(torch_ops.SCHEMAS)
    for name, args in cases:
        results = torch.library.opcheck(getattr(OPS, name), args)
        assert set(results.values()) == {"SUCCESS"}, (name, results)


def test_modules_have_llamas_parameters() -> None:
    norm = nn.RMSNorm(64, eps=1e-5, device="meta")
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    assert norm.variance_epsilon == 1e-5
    mlp_block = nn.SwiGLUMLP(64, 176, device="meta")
    names = {name: tuple(p.shape) for name, p in mlp_block.named_parameters()}
    assert names == {
        "gate_proj.weight": (176, 64),
        "up_proj.weight": (176, 64),
        "down_proj.weight": (64, 176),
    }
    x = torch.empty(2, 5, 64, device="meta")
    assert mlp_block(x).shape == (2, 5, 64)
    assert norm(x).shape == (2, 5, 64)


class RecordingHot:
    """A hot call that records its arguments and answers ``answer`` (NotImplemented: hand back)."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, *args: Any) -> Any:
        self.calls.append(args)
        return self.answer


def modules_on_meta() -> tuple[Any, Any, Any]:
    return (
        nn.RMSNorm(64, eps=1e-5, device="meta"),
        nn.SwiGLUMLP(64, 176, device="meta"),
        meta(2, 5, 64, dtype=torch.float32),
    )


def test_modules_with_options_take_the_option_ops() -> None:
    """A module with an option set runs its option op (here its meta implementation): the
    weightless norm has no parameter, a float32 weight stays float32 and the result keeps the
    input's dtype; at the defaults the module keeps rms_norm (test above)."""
    x = meta(2, 5, 64)
    weightless = nn.RMSNorm(64, device="meta", elementwise_affine=False)
    assert list(weightless.named_parameters()) == []
    gemma = nn.RMSNorm(64, device="meta", dtype=torch.float32, offset=1.0)
    llama = nn.RMSNorm(64, device="meta", dtype=torch.bfloat16, casting_mode="llama")
    for norm in (weightless, gemma, llama):
        out = norm(x)
        assert out.shape == x.shape and out.dtype == x.dtype, norm
    assert gemma.weight is not None and gemma.weight.dtype == torch.float32
    in_place = nn.RMSNorm(64, device="meta", in_place=True)
    with torch.no_grad():
        assert in_place(x) is x
    falcon = nn.SwiGLUMLP(64, 176, device="meta", gate_multiplier=0.5, down_multiplier=2.0)
    assert falcon(x).shape == x.shape
    with pytest.raises(UsageError, match=r"^casting_mode: 'mistral' is not one of"):
        nn.RMSNorm(64, device="meta", casting_mode="mistral")


def test_fused_add_rms_norm_refuses_rows_at_no_one_stride() -> None:
    """A view the kernel cannot write in place (a transposed matrix, rows that overlap) is
    refused in one line naming x, its strides and what to pass."""
    x = torch.empty(8, 4, dtype=torch.bfloat16).t()  # rows at stride 1, elements at stride 4
    with pytest.raises(UsageError, match=r"^x: its last dimension has stride 4 \(strides \(1, 4"):
        torch_impl._strided("x", x)
    with pytest.raises(UsageError, match=r"^x: rows 0 elements apart overlap \(each has 8\)"):
        torch_impl._strided("x", torch.empty(1, 8).expand(4, 8))
    wide = torch.empty(3, 16)[:, :8]
    assert torch_impl._strided("x", wide) == 16
    assert torch_impl._strided("x", torch.empty(1, 8)[:, :4]) == 4


def test_modules_run_eagerly_take_the_hot_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run eagerly, each module first offers its op to kernelpack.mlp's hot call, with every
    argument, and returns what it gives."""
    norm, block, x = modules_on_meta()
    answers = {"rms_norm": meta(2, 5, 64, dtype=torch.float32), "swiglu": meta(2, 5, 176)}
    hots = {op: RecordingHot(answer) for op, answer in answers.items()}
    for op, hot in hots.items():
        monkeypatch.setitem(mlp_hot.HOT, op, hot)
    assert norm(x) is answers["rms_norm"]
    ((args),) = hots["rms_norm"].calls
    assert args[0] is x and args[1] is norm.weight and args[2:] == (1e-5, None)
    assert block(x).shape == (2, 5, 64)
    ((gate, up, out),) = hots["swiglu"].calls
    assert gate.shape == up.shape == (2, 5, 176) and out is None


def test_modules_take_the_op_where_the_hot_call_hands_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hot call that hands the call back (autograd wanted, a shape not prepared, no GPU): the
    module runs torch.ops.kernelpack's op, here its meta implementation."""
    norm, block, x = modules_on_meta()
    hots = {op: RecordingHot(NotImplemented) for op in ("rms_norm", "swiglu")}
    for op, hot in hots.items():
        monkeypatch.setitem(mlp_hot.HOT, op, hot)
    assert norm(x).shape == (2, 5, 64) and block(x).shape == (2, 5, 64)
    assert [len(hot.calls) for hot in hots.values()] == [1, 1]


def test_compiled_modules_trace_the_ops_not_the_hot_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under torch.compile(fullgraph=True) the modules never reach the hot call (its C function
    would break the graph): the graph holds torch.ops.kernelpack's ops."""
    norm, block, x = modules_on_meta()
    hots = {op: RecordingHot(NotImplemented) for op in ("rms_norm", "swiglu")}
    for op, hot in hots.items():
        monkeypatch.setitem(mlp_hot.HOT, op, hot)
    seen: list[str] = []

    def backend(graph: Any, inputs: Any) -> Any:
        seen.extend(str(n.target) for n in graph.graph.nodes if n.op == "call_function")
        return graph.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(lambda t: block(norm(t)), fullgraph=True, backend=backend)(x)
    assert out.shape == (2, 5, 64)
    assert [name for name in seen if "kernelpack" in name] == [
        "kernelpack.rms_norm",
        "kernelpack.swiglu",
    ]
    assert [hot.calls for hot in hots.values()] == [[], []]


@pytest.mark.parametrize("eps_given", [False, True])
@pytest.mark.parametrize("name", ["rms_norm", "add_rms_norm", "swiglu"])
def test_autograd_kernel_gives_the_hot_call_the_arguments_as_given(
    monkeypatch: pytest.MonkeyPatch, name: str, eps_given: bool
) -> None:
    """The Autograd kernel calls the CUDA implementation's hot call itself, with the arguments
    the dispatcher gave (eps left out where it was at its default: the hot call takes its
    descriptor's default then, and out=None, tests/test_mlp_hot.py)."""
    seen: list[tuple[Any, ...]] = []

    def record(*args: Any) -> Any:
        seen.append(args)
        return "launched"

    monkeypatch.setitem(torch_ops.HOT, name, record)
    kernel = torch_ops._autograd_kernel(name)
    spec = mlp_hot.SPECS[name]
    tensors = tuple(torch.zeros(2, 8) for _ in range(spec.inputs))
    given = (*tensors, 1e-3) if eps_given and spec.eps else tensors
    cuda = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
    with torch.no_grad():
        assert kernel(cuda, *given) == "launched"
    assert seen == [given]


@pytest.mark.parametrize(
    ("name", "inputs", "through", "backward"),
    [
        ("rms_norm", 2, "rms_norm_with_scale", "rms_norm_backward"),
        ("add_rms_norm", 3, "add_rms_norm_with_scale", "add_rms_norm_backward"),
    ],
)
def test_norms_wanting_a_gradient_save_their_row_scales(
    name: str, inputs: int, through: str, backward: str
) -> None:
    """Where a gradient is wanted, rms_norm and add_rms_norm run as their _with_scale ops and
    the backward op is handed those row scales (float32, one a row); where none is, the op runs
    as itself. Seen from below autograd (a dispatch mode) on meta tensors."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[tuple[str, tuple[Any, ...]]] = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            result = func(*args, **(kwargs or {}))
            if func.namespace == "kernelpack":
                calls.append((func._opname, args))
            return result

    x = meta(3, 5, 16).requires_grad_()
    others = [meta(3, 5, 16).requires_grad_() for _ in range(inputs - 2)]
    weight = meta(16).requires_grad_()
    with Record():
        result = getattr(OPS, name)(x, *others, weight, 1e-5)
        outputs = (result,) if name == "rms_norm" else result
        assert outputs[0].shape == (3, 5, 16) and outputs[0].requires_grad
        torch.autograd.grad(sum(output.sum() for output in outputs), [x, weight])
    assert [call[0] for call in calls] == [through, backward]
    row_scales = calls[1][1][-1]
    assert (row_scales.shape, row_scales.dtype) == ((3, 5), torch.float32)
    calls.clear()
    with torch.no_grad(), Record():
        getattr(OPS, name)(x, *others, weight, 1e-5)
    assert [call[0] for call in calls] == [name]


# Importing torch's dynamo (torch 2.11) warns through torch.jit's deprecated script_method.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_traces_a_training_step_through_the_row_scales() -> None:
    """torch.compile(fullgraph=True) over a training step of the norms, on meta tensors (no GPU):
    the forward graph runs the _with_scale ops, the backward graph the backward ops (which read
    their row scales); without gradients the norms stay as they are (the inference path)."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    graphs: list[tuple[str, list[str]]] = []

    def keep(kind: str) -> Callable[[Any, Any], Any]:
        def compiler(graph: Any, inputs: Any) -> Any:
            calls = [n.target for n in graph.graph.nodes if n.op == "call_function"]
            graphs.append(
                (kind, [t._opname for t in calls if getattr(t, "namespace", "") == "kernelpack"])
            )
            return make_boxed_func(graph.forward)

        return compiler

    def backend(module: Any, inputs: Any) -> Any:
        return aot_module_simplified(
            module,
            inputs,
            fw_compiler=keep("forward"),
            bw_compiler=keep("backward"),
            inference_compiler=keep("inference"),
        )

    def step(x: Any, residual: Any, w1: Any, w2: Any) -> Any:
        h, summed = OPS.add_rms_norm(x, residual, w1, 1e-6)
        return OPS.rms_norm(OPS.swiglu(h, summed), w2, 1e-6)

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend=backend)
    inputs = [
        meta(*shape, dtype=torch.float32).requires_grad_()
        for shape in [(6, 64), (6, 64), (64,), (64,)]
    ]
    grads = torch.autograd.grad(compiled(*inputs).sum(), inputs)
    assert [tuple(g.shape) for g in grads] == [(6, 64), (6, 64), (64,), (64,)]
    assert graphs == [
        ("forward", ["add_rms_norm_with_scale", "swiglu", "rms_norm_with_scale"]),
        ("backward", ["rms_norm_backward", "swiglu_backward", "add_rms_norm_backward"]),
    ]
    graphs.clear()
    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(step, fullgraph=True, backend=backend)(*inputs)
    assert graphs == [("inference", ["add_rms_norm", "swiglu", "rms_norm"])]


@pytest.mark.parametrize("scalars", [(), (0.7,), (0.7, 1.3)], ids=str)
def test_the_option_ops_backward_with_their_scalars_given_or_left_out(scalars: Any) -> None:
    """Autograd through the option ops (their meta implementations) whichever trailing scalars a
    call gives: a formula returns a gradient for each of the schema's arguments."""
    gate, up = (meta(3, 8, dtype=torch.float32).requires_grad_() for _ in range(2))
    OPS.swiglu_scaled(gate, up, *scalars).sum().backward()
    assert gate.grad is not None and up.grad is not None
    norm_scalars = (1e-6, *((1.0, "llama")[: len(scalars)]))
    for weight in (None, meta(8, dtype=torch.float32).requires_grad_()):
        x = meta(3, 8, dtype=torch.float32).requires_grad_()
        OPS.rms_norm_options(x, weight, *norm_scalars).sum().backward()
        assert x.grad is not None and (weight is None or weight.grad is not None)


COMPILED_CALLS = r"""
import json, torch, torch._dynamo  # the compiler loaded first, as torch.compile loads it
import kernelpack.mlp as mlp

meta = lambda *shape: torch.randn(*shape, device="meta")
calls = {
    "swiglu": (mlp.swiglu, (meta(4, 8), meta(4, 8))),
    "swiglu out=": (lambda g, u, o: mlp.swiglu(g, u, out=o), (meta(4, 8), meta(4, 8), meta(4, 8))),
    "silu_and_mul": (mlp.silu_and_mul, (meta(4, 8),)),
    "rms_norm": (lambda x, w: mlp.rms_norm(x, w, 1e-5), (meta(4, 8), meta(8))),
    "fused_add_rms_norm": (mlp.fused_add_rms_norm, (meta(4, 8), meta(4, 8), meta(8))),
}
seen = {}
for attempt in ("first", "again"):  # again: with the hot calls on, where the extension is built
    for label, (function, args) in calls.items():
        graph = []

        def backend(module, inputs):
            graph.extend(str(n.target) for n in module.graph.nodes if n.op == "call_function")
            return module.forward

        torch._dynamo.reset()
        result = torch.compile(function, fullgraph=True, backend=backend)(*args)
        shape = None if result is None else list(result.shape)
        seen[f"{attempt} {label}"] = [shape, [n for n in graph if "kernelpack" in n]]
print(json.dumps(seen))
"""


def test_compile_traces_kernelpack_mlp_through_to_the_torch_ops() -> None:
    """torch.compile(fullgraph=True) over kernelpack.mlp's functions (framework-neutral, with a
    C hot call): the graph holds torch.ops.kernelpack's op, before and after the hot calls are
    on (a fresh process: which of them are on depends on its history)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run(
        [sys.executable, "-c", COMPILED_CALLS],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.splitlines()[-1])
    for attempt in ("first", "again"):
        assert seen[f"{attempt} swiglu"] == [[4, 8], ["kernelpack.swiglu"]]
        assert seen[f"{attempt} swiglu out="] == [[4, 8], ["kernelpack.swiglu"]]
        assert seen[f"{attempt} silu_and_mul"] == [[4, 4], ["kernelpack.silu_and_mul"]]
        assert seen[f"{attempt} rms_norm"] == [[4, 8], ["kernelpack.rms_norm"]]
        assert seen[f"{attempt} fused_add_rms_norm"] == [None, ["kernelpack.fused_add_rms_norm"]]
