"""The MLP op table drives every layer: a new op is one table entry plus its kernel.

A toy op (``toy_axpy2``: out = x + 2 * y, float32, its kernel a few lines of CUDA compiled here
for sm_90 by nvcc) is added as one :class:`~kernelpack.ops.mlp.table.Op` and nothing else; its
kernelpack.mlp-style function (:func:`kernelpack.ops.mlp.api.function`), its torch op (schema,
fake implementation) and its hot call all come from that entry. On this machine: the signature,
the schema written against the one expected by hand, the fake's shapes and its checks, and the
hot call's packed arguments read back from a recording launch function, byte for byte at the
offsets and sizes the compiler gave the kernel's parameters (its cubin, read with kernelpack's
reader). On a GPU (marked gpu), the toy kernel runs through all three and is checked against
torch's own x + 2 * y. The built-in ops' signatures and schemas are checked against the table and
against the schemas written out here.
"""

from __future__ import annotations

import ctypes
import inspect
import math
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_loader_launch import CONTEXT, GET_CURRENT, LAUNCH, PUSH, fail, native

from buildsys.discovery import object_kernels
from kernelpack import mlp
from kernelpack.backends import signature as kargs
from kernelpack.errors import UsageError
from kernelpack.ops.mlp import api, hot, table
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp.geometry import DeviceFacts, Plan
from kernelpack.ops.mlp.table import Input, Op, Result

__all__ = ["native"]  # the fixture, imported from test_loader_launch

TOY_SOURCE = r"""
extern "C" __global__ void toy_axpy2(const float *x, const float *y, float *out, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + 2.0f * y[i];
}
"""
TOY_BLOCK = 128


def toy_plan(kernel: str, shape: tuple[int, ...], dtype: str, device: DeviceFacts) -> Plan | None:
    """A thread an element; the kernel takes n after the pointers."""
    n = math.prod(shape)
    return Plan(kernel, -(-n // TOY_BLOCK), TOY_BLOCK, (n,)) if n else None


TOY = Op("toy_axpy2", (Input("x"), Input("y")), (Result(),), out=True, plan=toy_plan)

# the schemas as torch.ops.kernelpack has always declared them (docs/torch.md), written out
EXPECTED_SCHEMAS = {
    "swiglu": "swiglu(Tensor gate, Tensor up) -> Tensor",
    "silu_and_mul": "silu_and_mul(Tensor x) -> Tensor",
    "rms_norm": "rms_norm(Tensor x, Tensor weight, float eps=1e-06) -> Tensor",
    "add_rms_norm": "add_rms_norm(Tensor x, Tensor residual, Tensor weight, float eps=1e-06) "
    "-> (Tensor, Tensor)",
    "fused_add_rms_norm": "fused_add_rms_norm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, "
    "float eps=1e-06) -> ()",
    "swiglu_backward": "swiglu_backward(Tensor grad, Tensor gate, Tensor up) -> (Tensor, Tensor)",
    "silu_and_mul_backward": "silu_and_mul_backward(Tensor grad, Tensor x) -> Tensor",
    "rms_norm_with_scale": "rms_norm_with_scale(Tensor x, Tensor weight, float eps=1e-06) "
    "-> (Tensor, Tensor)",
    "add_rms_norm_with_scale": "add_rms_norm_with_scale(Tensor x, Tensor residual, Tensor weight, "
    "float eps=1e-06) -> (Tensor, Tensor, Tensor)",
    "rms_norm_backward": "rms_norm_backward(Tensor grad, Tensor x, Tensor weight, "
    "Tensor row_scales) -> (Tensor, Tensor)",
    "add_rms_norm_backward": "add_rms_norm_backward(Tensor grad, Tensor grad_sum, Tensor summed, "
    "Tensor weight, Tensor row_scales) -> (Tensor, Tensor)",
    # the options (issue 47)
    "rms_norm_options": "rms_norm_options(Tensor x, Tensor? weight, float eps=1e-06, "
    'float offset=0.0, str casting_mode="gemma") -> Tensor',
    "rms_norm_options_with_scale": "rms_norm_options_with_scale(Tensor x, Tensor? weight, "
    'float eps=1e-06, float offset=0.0, str casting_mode="gemma") -> (Tensor, Tensor)',
    "rms_norm_options_in_place": "rms_norm_options_in_place(Tensor(a!) x, Tensor? weight, "
    'float eps=1e-06, float offset=0.0, str casting_mode="gemma") -> ()',
    "fused_add_rms_norm_options": "fused_add_rms_norm_options(Tensor(a!) x, Tensor(b!) residual, "
    'Tensor? weight, float eps=1e-06, float offset=0.0, str casting_mode="gemma") -> ()',
    "rms_norm_options_backward": "rms_norm_options_backward(Tensor grad, Tensor x, "
    "Tensor? weight, Tensor row_scales, float offset=0.0) -> (Tensor, Tensor)",
    "swiglu_scaled": "swiglu_scaled(Tensor gate, Tensor up, float gate_multiplier=1.0, "
    "float down_multiplier=1.0) -> Tensor",
    "swiglu_scaled_backward": "swiglu_scaled_backward(Tensor grad, Tensor gate, Tensor up, "
    "float gate_multiplier=1.0, float down_multiplier=1.0) -> (Tensor, Tensor)",
    "silu_and_mul_as_torch": "silu_and_mul_as_torch(Tensor x) -> Tensor",
}


@pytest.mark.parametrize("name", list(table.TABLE))
def test_each_schema_is_the_one_torch_ops_has_declared(name: str) -> None:
    assert table.schema(table.TABLE[name]) == EXPECTED_SCHEMAS[name]


@pytest.mark.parametrize(
    ("function", "expected"),
    [
        (mlp.swiglu, ["gate", "up", "out"]),
        (mlp.silu_and_mul, ["x", "out"]),
        (mlp.rms_norm, ["x", "weight", "eps", "out"]),
        (mlp.fused_add_rms_norm, ["x", "residual", "weight", "eps"]),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_each_public_function_has_its_table_entrys_signature(
    function: Any, expected: list[str]
) -> None:
    """kernelpack.mlp's functions, written out for their docstrings and speed, take what
    api.function would make of their entries (and what they always took)."""
    made = inspect.signature(api.function(table.TABLE[function.__name__]))
    assert list(inspect.signature(function).parameters) == list(made.parameters) == expected
    for name, parameter in made.parameters.items():
        assert inspect.signature(function).parameters[name].default == parameter.default


def test_a_table_entry_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        table.by_name((TOY, TOY))


def test_the_toy_ops_function_checks_from_its_entry() -> None:
    """The toy's function: its signature is the entry's, and the entry's checks name a bad
    argument before anything touches a GPU (numpy arrays here)."""
    toy = api.function(TOY)
    assert str(inspect.signature(toy)) == "(x, y, out=None)"
    x = np.zeros(4, np.float32)
    with pytest.raises(UsageError, match=r"^y: shape \(3,\) does not match x's \(4,\)$"):
        toy(x, np.zeros(3, np.float32))
    with pytest.raises(UsageError, match=r"^y: dtype float64 is not supported"):
        toy(x, np.zeros(4, np.float64))
    with pytest.raises(UsageError, match=r"^out: shape \(5,\) does not match the result's \(4,\)"):
        toy(x, x, out=np.zeros(5, np.float32))


torch = pytest.importorskip("torch", reason="torch is in the test dependency group")

from kernelpack.ops.mlp import torch_ops  # noqa: E402  (registers torch.ops.kernelpack)


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The toy op defined in torch's kernelpack namespace (a fragment library, dropped after the
    test) and given a hot path, as a table entry of the product would be."""
    monkeypatch.setattr(hot, "OPS", dict(hot.OPS))
    monkeypatch.setattr(hot, "SPECS", dict(hot.SPECS))
    monkeypatch.setattr(hot, "PREPARED", dict(hot.PREPARED))
    monkeypatch.setattr(hot, "HOT", dict(hot.HOT))
    monkeypatch.setattr(hot, "HOT_BELOW_AUTOGRAD", dict(hot.HOT_BELOW_AUTOGRAD))
    monkeypatch.setattr(api, "HOT", hot.HOT)
    hot.add(TOY)
    library = torch.library.Library("kernelpack", "FRAGMENT")  # type: ignore[no-untyped-call]
    torch_ops.define(library, TOY)
    yield torch.ops.kernelpack.toy_axpy2
    library._destroy()
    torch_ops.IMPLEMENTATIONS.pop(TOY.name, None)


@pytest.mark.torch
def test_the_toy_ops_torch_schema_and_fake_come_from_its_entry(toy_registered: Any) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert (
        str(toy_registered.default._schema) == "kernelpack::toy_axpy2(Tensor x, Tensor y) -> Tensor"
    )
    with FakeTensorMode():
        x, y = torch.empty(3, 5), torch.empty(3, 5)
        result = toy_registered(x, y)
        assert (tuple(result.shape), result.dtype) == ((3, 5), torch.float32)
        with pytest.raises(UsageError, match=r"^y: shape \(5,\) does not match x's \(3, 5\)$"):
            toy_registered(x, torch.empty(5))
        with pytest.raises(UsageError, match=r"^y: dtype float16 differs from x's float32$"):
            toy_registered(x, torch.empty(3, 5, dtype=torch.float16))


def toy_cubin(folder: Path) -> bytes:
    source = folder / "toy.cu"
    source.write_text(TOY_SOURCE, encoding="utf-8")
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cubin = folder / "toy.cubin"
    subprocess.run([nvcc, "-cubin", "-arch=sm_90", "-o", str(cubin), str(source)], check=True)
    return cubin.read_bytes()


def toy_signature(cubin: bytes) -> tuple[kargs.Signature, tuple[tuple[int, int], ...]]:
    """The toy kernel's signature as the index records a C-linkage kernel's (no types: each
    parameter's size), and its (offset, size) layout, both read off the compiler's cubin."""
    _, kernels = object_kernels("cubin", cubin, "toy.cubin")
    (kernel,) = [k for k in kernels if k.symbol == "toy_axpy2"]
    params = [{"type": None, "offset": o, "size": s} for o, s in kernel.layout]
    return kargs.Signature.from_index("toy_axpy2", params), kernel.layout  # type: ignore[arg-type]


@pytest.mark.nvcc
@pytest.mark.torch
def test_the_toy_ops_hot_call_packs_its_arguments_at_the_kernels_layout(
    native: Any, toy_registered: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toy op's hot call, descriptor and entry both from its table entry, launching through
    a C Launcher made for the toy kernel's compiled signature: the recording launch function
    sees x's, y's and the new result's addresses and n at the offsets and sizes nvcc laid out,
    on the plan's grid."""
    signature, layout = toy_signature(toy_cubin(tmp_path))
    assert layout == ((0, 8), (8, 8), (16, 8), (24, 8))  # three pointers, then a long long
    seen: list[tuple[tuple[int, ...], bytes]] = []

    def record(function: int, *rest: Any) -> int:
        params = rest[8]
        packed = b"".join(ctypes.string_at(params[i], size) for i, (_, size) in enumerate(layout))
        seen.append((rest[:6], packed))
        return 0

    launch_fn, get_current, push = LAUNCH(record), GET_CURRENT(lambda out: 0), PUSH(lambda c: 0)
    address = lambda f: int(ctypes.cast(f, ctypes.c_void_p).value or 0)  # noqa: E731
    launcher = native.Launcher(
        launch=address(launch_fn),
        function=0x1234,
        codes=signature.codes,
        binding=0,
        get_current=address(get_current),
        enter=address(push),
        leave=address(get_current),
        context=CONTEXT,
        pointer_getters={torch.Tensor: lambda t: t.data_ptr()},
        pointer_of=lambda t: t.data_ptr(),
        torch_getter=fail,
        stream_of=lambda s: s,
        fail=fail,
    )
    monkeypatch.setattr(
        hot, "load_kernel", lambda device, name: SimpleNamespace(launch=launcher.launch)
    )
    monkeypatch.setattr(mlp_launch, "device_facts", lambda device: DeviceFacts("sm_90", 132))
    x, y = torch.randn(3, 100), torch.randn(3, 100)
    hot.prepare(TOY.name, x, "cuda:0")  # what the full path does on a GPU tensor's first call
    exchange = torch.Tensor.__dlpack_c_exchange_api__
    call = native.TorchHotPath(
        tuple(hot.SPECS[TOY.name]), {torch.Tensor}, hot.PREPARED[TOY.name], exchange, None
    ).call
    monkeypatch.setitem(hot.HOT, TOY.name, call)
    result = api.function(TOY)(x, y)
    assert result is not NotImplemented and tuple(result.shape) == (3, 100)
    ((dims, packed),) = seen
    assert dims == (3, 1, 1, TOY_BLOCK, 1, 1)  # 300 elements, 128 a block
    assert packed == struct.pack("<QQQq", x.data_ptr(), y.data_ptr(), result.data_ptr(), 300)
    assert call(x, torch.randn(3, 99), None) is NotImplemented  # a shape not prepared
    assert len(seen) == 1


@pytest.mark.gpu
@pytest.mark.nvcc
@pytest.mark.torch
def test_on_the_gpu_the_toy_op_runs_through_its_function_torch_ops_and_the_hot_call(
    toy_registered: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The toy kernel loaded on the GPU by the CUDA runtime and launched through the product's
    own paths: the full path (first call, which prepares the shape), the hot call (second), and
    torch.ops.kernelpack.toy_axpy2; each result against torch's x + 2 * y (exact in float32:
    2 * y is exact, then one rounded add), into outputs poisoned with NaN first."""
    from kernelpack.backends.cuda import CudaRuntime

    cubin = toy_cubin(tmp_path)
    signature, _ = toy_signature(cubin)
    runtime = CudaRuntime()
    loaded = runtime.load(0, cubin)
    launch = runtime.launcher(loaded, runtime.function(loaded, "toy_axpy2"), signature, fail)
    kernel = SimpleNamespace(launch=launch)
    monkeypatch.setattr(hot, "load_kernel", lambda device, name: kernel)
    monkeypatch.setattr(mlp_launch, "load_kernel", lambda device, name: kernel)
    hot.torch_enable(torch)
    hot._make_calls(TOY.name, torch)
    toy = api.function(TOY)
    x, y = torch.randn(4, 1000, device="cuda"), torch.randn(4, 1000, device="cuda")
    expected = x + 2 * y
    for _ in range(2):  # the full path, then the hot call
        out = torch.full_like(x, math.nan)
        assert toy(x, y, out=out) is out
        torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert hot.PREPARED[TOY.name]  # the first call prepared the shape
    torch.testing.assert_close(toy(x, y), expected, rtol=0, atol=0)
    torch.testing.assert_close(toy_registered(x, y), expected, rtol=0, atol=0)
