"""The MLP ops' torch hot path on the CPU side: the C hot call (launcher.c's TorchHotPath, compiled
here from source) accepts exactly the calls the full checks would, and hands every other call
back (NotImplemented) without launching, so that kernelpack.mlp's full checks still raise their
one clear error for each bad argument. Without the extension there is no hot path at all.

CPU tensors stand in for GPU ones: an entry prepared for device index -1 (what get_device() gives
on the CPU) with a launch that records its arguments. The tensors are read through torch's own
DLPack exchange API, as on the GPU (on the CPU its current stream is null). The C Launcher's own
path is driven through a real C function pointer (the recording launch of test_loader_launch), so
what it would give the driver, pointers, sizes, eps and stream, is read back as bytes. The
exchange API's declarations in the launcher are compiled beside torch's dlpack.h and compared.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_loader_launch import CONTEXT, GET_CURRENT, LAUNCH, NATIVE_SOURCE, PUSH, fail, native

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = pytest.mark.torch

from kernelpack import mlp  # noqa: E402  (needs torch for the hot calls)
from kernelpack.backends import hotpath  # noqa: E402
from kernelpack.backends.hotpath import HotOp  # noqa: E402
from kernelpack.errors import UsageError  # noqa: E402
from kernelpack.ops.mlp import hot as mlp_hot  # noqa: E402  (needs torch for the hot calls)
from kernelpack.ops.mlp import launch as mlp_launch  # noqa: E402
from kernelpack.ops.mlp.geometry import DeviceFacts  # noqa: E402

__all__ = ["native"]  # the fixture, imported from test_loader_launch

SHAPE = (2, 8)
H200 = DeviceFacts("sm_90", 132)  # the device the counted entries are for: sm_90, 132 SMs
BF16 = torch.bfloat16
EXCHANGE = torch.Tensor.__dlpack_c_exchange_api__  # torch's DLPack C exchange API (a capsule)


class Recording:
    """A launch callable that records each call's positional and keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def entry_for(op: str, launch: Any, general: Any = None) -> mlp_hot.Entry:
    """The entry prepare() would make for a bfloat16 first tensor of SHAPE (op's shapes): the
    elementwise ops' exact forms in 8-byte vectors (a thread for each of 16 and 2 x 4 elements),
    whose pointers must be 8-byte aligned, the general kernel ``general`` on the same grid
    otherwise."""
    rows, cols = SHAPE
    if op == "swiglu":
        return (launch, 1, 128, (rows * cols,), None, None, 8, (general, 1))
    if op == "silu_and_mul":
        sizes = (rows, cols // 2)
        return (launch, (1, rows), 64, sizes, None, sizes, 8, (general, (1, rows)))
    return (launch, 1, (64, 1), (0, rows, cols), (cols,), None, 1, None)  # null row_scales first


class Hot:
    """One op's hot call built by the implementation under test, its entry and its recorder."""

    def __init__(
        self, make: Callable[..., Any], op: str, grad_enabled: Callable[[], bool], types: set[type]
    ) -> None:
        self.launch = Recording()
        self.prepared: dict[mlp_hot.Key, mlp_hot.Entry] = {
            (BF16, -1, torch.Size(SHAPE)): entry_for(op, self.launch)
        }
        self.call = make(mlp_hot.SPECS[op], types, self.prepared, EXCHANGE, grad_enabled)


@pytest.fixture
def make_hot(native: Any) -> Callable[..., Any]:
    """A hot-call factory: (spec, torch types, prepared, exchange API, grad_enabled) -> the C hot
    call."""
    hot_type = native.TorchHotPath

    def make(spec: HotOp, *rest: Any) -> Any:
        return hot_type(tuple(spec), *rest).call

    return make


def bf16(*shape: int) -> Any:
    return torch.randn(shape).to(BF16)


class Subclass(torch.Tensor):
    """A tensor type the hot calls were not told of."""


TYPES = {torch.Tensor, torch.nn.Parameter}


def good_args(op: str) -> list[Any]:
    """A call the hot path accepts (out= None where the op takes one)."""
    cols = SHAPE[1]
    if op == "swiglu":
        return [bf16(*SHAPE), bf16(*SHAPE), None]
    if op == "silu_and_mul":
        return [bf16(*SHAPE), None]
    weight = bf16(cols)
    if op == "rms_norm":
        return [bf16(*SHAPE), weight, 1e-6, None]
    return [bf16(*SHAPE), bf16(*SHAPE), weight, 1e-6]


def result_shape(op: str) -> tuple[int, ...]:
    return (SHAPE[0], SHAPE[1] // 2) if op == "silu_and_mul" else SHAPE


@pytest.mark.parametrize("op", list(mlp_hot.SPECS))
def test_an_accepted_call_launches_the_entry_once(make_hot: Callable[..., Any], op: str) -> None:
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    args = good_args(op)
    result = hot.call(*args)
    ((positional, keywords),) = hot.launch.calls
    entry = hot.prepared[(BF16, -1, torch.Size(SHAPE))]
    spec = mlp_hot.SPECS[op]
    inputs = args[: spec.inputs]
    if op == "fused_add_rms_norm":
        assert result is None
        results = inputs[:2]
    elif op == "add_rms_norm":
        assert isinstance(result, tuple) and len(result) == 2
        results = list(result)
    else:
        results = [result]
    for tensor in results:
        assert tensor.shape == result_shape(op) and tensor.dtype == BF16
    pointers = [*inputs, *results]
    eps = [1e-6] if spec.eps else []
    assert positional[:2] == (entry[1], entry[2])
    # the addresses, read by the hot call (the launcher then takes plain ints)
    assert list(positional[2 : 2 + len(pointers)]) == [t.data_ptr() for t in pointers]
    assert list(positional[2 + len(pointers) :]) == [*entry[3], *eps]
    assert keywords == {"stream": 0}  # torch's current stream for the CPU: none


@pytest.mark.parametrize("op", ["rms_norm", "add_rms_norm", "fused_add_rms_norm"])
def test_trailing_arguments_left_out_take_their_defaults(
    make_hot: Callable[..., Any], op: str
) -> None:
    """A call that leaves out eps (as torch's dispatcher does at its default) launches with the
    descriptor's default eps, 1e-6, and out= left out is None (a result allocated); more
    arguments than the op takes, or fewer than its tensors, raise TypeError."""
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    spec = mlp_hot.SPECS[op]
    tensors = good_args(op)[: spec.inputs]
    result = hot.call(*tensors)
    ((args, kwargs),) = hot.launch.calls
    assert args[-1] == pytest.approx(1e-6, rel=0) and kwargs == {"stream": 0}
    if op == "rms_norm":
        assert tuple(result.shape) == SHAPE
    with pytest.raises(TypeError, match="arguments"):
        hot.call(*tensors[:-1])
    with pytest.raises(TypeError, match="arguments"):
        hot.call(*good_args(op), None)


@pytest.mark.parametrize("op", ["swiglu", "silu_and_mul", "rms_norm"])
def test_out_is_written_not_allocated(make_hot: Callable[..., Any], op: str) -> None:
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    out = bf16(*result_shape(op))
    args = [*good_args(op)[:-1], out]
    assert hot.call(*args) is out
    ((positional, _),) = hot.launch.calls
    assert positional[2 + mlp_hot.SPECS[op].inputs] == out.data_ptr()


def transposed(tensor: Any) -> Any:
    """The same values, not C-contiguous."""
    return tensor.t().contiguous().t()


def elsewhere(tensor: Any) -> Any:
    """The same tensor on another device than the first's: here on the CPU, meta; on the GPU,
    the CPU."""
    return tensor.to("meta") if tensor.device.type == "cpu" else tensor.cpu()


# (op, argument position, what makes it wrong (given that argument, or the first where the
# argument is an out= None), the full checks' message on the GPU): each is one way a call must
# leave the hot path, after which kernelpack.mlp's full checks raise the message. None: the full
# path accepts it (an int eps is valid, just not hot), or the op is torch.ops' alone
# (add_rms_norm)
REJECTIONS: list[tuple[str, int, Callable[[Any], Any], str | None]] = [
    ("swiglu", 0, lambda t: t.float(), "up: dtype bfloat16 differs from gate's float32"),
    ("swiglu", 1, lambda t: t.half(), "up: dtype float16 differs from gate's bfloat16"),
    ("swiglu", 1, lambda t: t.float().cpu().numpy(), "up: dtype float32 differs from gate's"),
    ("swiglu", 1, elsewhere, "up: a torch tensor on cpu, and kernelpack.s kernels run on the GPU"),
    ("swiglu", 1, transposed, "up: must be C-contiguous"),
    ("swiglu", 0, transposed, "gate: must be C-contiguous"),
    ("swiglu", 1, lambda t: t[:, :4].contiguous(), r"up: shape \(2, 4\) does not match gate's"),
    ("swiglu", 2, lambda t: t[:, :4].contiguous(), r"out: shape \(2, 4\) does not match the"),
    ("swiglu", 2, lambda t: t.float(), "out: dtype float32 differs"),
    ("swiglu", 2, transposed, "out: must be C-contiguous"),
    ("silu_and_mul", 0, lambda t: t[:, :7].contiguous(), r"x: shape \(2, 7\): the last"),
    ("silu_and_mul", 1, lambda t: t.clone(), r"out: shape \(2, 8\) does not match"),
    ("rms_norm", 1, lambda t: t[:4].contiguous(), r"weight: shape \(4,\) does not match"),
    ("rms_norm", 1, lambda t: t.half(), "weight: dtype float16 differs from x's bfloat16"),
    (
        "rms_norm",
        1,
        elsewhere,
        "weight: a torch tensor on cpu, and kernelpack.s kernels run on the GPU",
    ),
    ("rms_norm", 2, lambda _: 1, None),
    ("rms_norm", 2, lambda _: True, "eps: expected a float, got bool"),
    ("rms_norm", 2, lambda _: math.nan, "eps: must be a finite number >= 0"),
    ("rms_norm", 2, lambda _: math.inf, "eps: must be a finite number >= 0"),
    ("rms_norm", 2, lambda _: -1e-6, "eps: must be a finite number >= 0"),
    ("rms_norm", 3, lambda t: t[:, :4].contiguous(), r"out: shape \(2, 4\) does not match"),
    ("rms_norm", 0, transposed, "x: must be C-contiguous"),
    ("fused_add_rms_norm", 1, lambda t: t.half(), "residual: dtype float16 differs"),
    ("fused_add_rms_norm", 1, lambda t: t[:1].contiguous(), r"residual: shape \(1, 8\)"),
    ("fused_add_rms_norm", 1, transposed, "residual: its last dimension has stride 2"),
    ("fused_add_rms_norm", 2, lambda t: t[:4].contiguous(), r"weight: shape \(4,\)"),
    ("add_rms_norm", 1, elsewhere, None),
    ("add_rms_norm", 0, lambda t: t.repeat(2, 1)[:3], None),  # a shape not prepared
]


def wrong_args(op: str, position: int, wrong: Callable[[Any], Any], args: list[Any]) -> list[Any]:
    args = list(args)
    args[position] = wrong(args[0] if args[position] is None else args[position])
    return args


@pytest.mark.parametrize(("op", "position", "wrong", "message"), REJECTIONS)
def test_every_wrong_argument_leaves_the_hot_path(
    make_hot: Callable[..., Any], op: str, position: int, wrong: Any, message: str | None
) -> None:
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    assert hot.call(*wrong_args(op, position, wrong, good_args(op))) is NotImplemented
    assert hot.launch.calls == []


@pytest.mark.parametrize(("op", "position", "wrong", "message"), REJECTIONS)
def test_every_wrong_argument_leaves_the_hot_path_after_a_good_call(
    make_hot: Callable[..., Any], op: str, position: int, wrong: Any, message: str | None
) -> None:
    """The same, once a good call made the hot call remember the first tensor's shape."""
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    assert hot.call(*good_args(op)) is not NotImplemented
    assert hot.call(*wrong_args(op, position, wrong, good_args(op))) is NotImplemented
    assert len(hot.launch.calls) == 1


def shifted(tensor: Any, elements: int) -> Any:
    """A copy of ``tensor`` (contiguous) starting ``elements`` elements into its own buffer."""
    buffer = torch.empty(elements + tensor.numel(), dtype=tensor.dtype)
    view = buffer[elements:].view(tensor.shape)
    view.copy_(tensor)
    return view


@pytest.mark.parametrize("op", list(mlp_hot.SPECS))
def test_a_pointer_short_of_the_entrys_alignment_leaves_the_hot_path(
    make_hot: Callable[..., Any], op: str
) -> None:
    """Each tensor (out= too) one bfloat16 element into its buffer: 2-byte aligned, short of the
    elementwise entries' 8 bytes, which the hot call then hands back unlaunched; 4 elements in
    (8 bytes) is enough. The norms' entries need no alignment."""
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    needs = hot.prepared[(BF16, -1, torch.Size(SHAPE))][6]
    args = good_args(op)
    if mlp_hot.SPECS[op].out:
        args[-1] = bf16(*result_shape(op))
    tensors = [i for i, arg in enumerate(args) if isinstance(arg, torch.Tensor)]
    launches = 0
    for position in tensors:
        for elements in (1, 4):
            moved = list(args)
            moved[position] = shifted(args[position], elements)
            result = hot.call(*moved)
            accepted = (moved[position].data_ptr() % needs) == 0
            assert (result is not NotImplemented) == accepted, (position, elements)
            launches += accepted
    assert len(hot.launch.calls) == launches
    assert needs == (8 if op in ("swiglu", "silu_and_mul") else 1)


def test_launch_entry_takes_the_general_kernel_for_pointers_short_of_the_alignment() -> None:
    """The full path's launch of a prepared entry (kernelpack.mlp_hot.torch_run): the exact form for
    8-byte aligned addresses, the entry's general kernel, on its own grid (as a whole form's
    general kernel has: mlp_geometry.ElementwiseLaunch), for any pointer short of that."""
    exact, general = Recording(), Recording()
    entry = (*entry_for("swiglu", exact)[:7], (general, 3))
    mlp_hot.launch_entry(entry, (0x1000, 0x2008, 0x3010), None, 7)
    mlp_hot.launch_entry(entry, (0x1000, 0x2004, 0x3010), None, 7)
    mlp_hot.launch_entry(entry, (0x1000, 0x2008, 0x3002), None, 7)
    assert [args[:5] for args, _ in exact.calls] == [(1, 128, 0x1000, 0x2008, 0x3010)]
    assert [args[:5] for args, _ in general.calls] == [
        (3, 128, 0x1000, 0x2004, 0x3010),
        (3, 128, 0x1000, 0x2008, 0x3002),
    ]
    assert all(keywords == {"stream": 7} for _, keywords in exact.calls + general.calls)


def test_more_shapes_than_the_hot_call_remembers_each_launch_their_own_entry(
    make_hot: Callable[..., Any],
) -> None:
    """Shapes taken in turn, more of them than the hot call keeps (launcher.c's HOT_SLOTS), each
    launch their own entry every time, however often one is looked up again."""
    hot = Hot(make_hot, "swiglu", torch.is_grad_enabled, TYPES)
    shapes = [(rows, 8) for rows in range(1, 8)]
    hot.prepared.update(
        {
            (BF16, -1, torch.Size(shape)): (hot.launch, rows, 128, (rows * 8,), None, None, 1, None)
            for rows, shape in enumerate(shapes, 1)
        }
    )
    for _ in range(3):
        for rows, shape in enumerate(shapes, 1):
            gate, up = bf16(*shape), bf16(*shape)
            result = hot.call(gate, up, None)
            positional, _ = hot.launch.calls[-1]
            assert result.shape == shape
            assert positional[:3] == (rows, 128, gate.data_ptr())
            assert positional[-1] == rows * 8
    assert len(hot.launch.calls) == 3 * len(shapes)


@pytest.mark.parametrize("op", list(mlp_hot.SPECS))
def test_requires_grad_leaves_the_hot_path_only_where_grad_mode_is_on(
    make_hot: Callable[..., Any], op: str
) -> None:
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    below = Hot(make_hot, op, None, TYPES)  # torch.ops' CUDA kernels: below autograd
    for position in range(mlp_hot.SPECS[op].inputs):
        args = good_args(op)
        args[position] = torch.nn.Parameter(args[position])
        assert hot.call(*args) is NotImplemented
        with torch.no_grad():
            assert hot.call(*args) is not NotImplemented
        assert below.call(*args) is not NotImplemented
    inputs = mlp_hot.SPECS[op].inputs
    assert len(hot.launch.calls) == len(below.launch.calls) == inputs


def test_an_unknown_tensor_type_leaves_the_hot_path(make_hot: Callable[..., Any]) -> None:
    hot = Hot(make_hot, "swiglu", torch.is_grad_enabled, {torch.Tensor})
    gate, up, _ = good_args("swiglu")
    assert hot.call(gate, up.as_subclass(Subclass), None) is NotImplemented
    assert hot.call(gate, [1.0] * 16, None) is NotImplemented
    assert hot.launch.calls == []


@pytest.fixture
def mlp_on_cpu_entries(make_hot: Callable[..., Any]) -> Iterator[dict[str, Hot]]:
    """kernelpack.mlp's hot calls replaced by the implementation under test, each with an entry
    for CPU bfloat16 tensors of SHAPE: a bad call must leave them and raise from the full
    checks."""
    hots = {op: Hot(make_hot, op, torch.is_grad_enabled, TYPES) for op in mlp_hot.SPECS}
    saved = dict(mlp_hot.HOT)
    mlp_hot.HOT.update({op: hot.call for op, hot in hots.items()})
    try:
        yield hots
    finally:
        mlp_hot.HOT.update(saved)


MLP_OPS = {
    "swiglu": lambda a: mlp.swiglu(a[0], a[1], out=a[2]),
    "silu_and_mul": lambda a: mlp.silu_and_mul(a[0], out=a[1]),
    "rms_norm": lambda a: mlp.rms_norm(a[0], a[1], a[2], out=a[3]),
    "fused_add_rms_norm": lambda a: mlp.fused_add_rms_norm(*a),
}


@pytest.mark.parametrize(
    ("op", "position", "wrong"), [r[:3] for r in REJECTIONS if r[0] in MLP_OPS and r[3]]
)
def test_kernelpack_mlp_sends_each_wrong_argument_to_the_full_checks(
    mlp_on_cpu_entries: dict[str, Hot], op: str, position: int, wrong: Any
) -> None:
    """On the CPU the full checks stop at their first (a torch tensor on the CPU is no GPU
    array); the GPU test below reads each message."""
    with pytest.raises(UsageError):
        MLP_OPS[op](wrong_args(op, position, wrong, good_args(op)))
    assert mlp_on_cpu_entries[op].launch.calls == []


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("op", "position", "wrong", "message"), [r for r in REJECTIONS if r[0] in MLP_OPS and r[3]]
)
def test_kernelpack_mlp_names_each_wrong_argument_after_the_shape_ran_hot(
    op: str, position: int, wrong: Any, message: str
) -> None:
    """On the GPU: the good call first (which prepares its shape's hot call), then the wrong
    one, which must raise the full checks' message."""
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in good_args(op)]
    for _ in range(2):
        MLP_OPS[op](list(args))
    with pytest.raises(UsageError, match=f"^{message}"):
        MLP_OPS[op](wrong_args(op, position, wrong, args))


@pytest.mark.parametrize("op", list(MLP_OPS))
def test_kernelpack_mlp_takes_the_hot_call(mlp_on_cpu_entries: dict[str, Hot], op: str) -> None:
    MLP_OPS[op](good_args(op))
    assert len(mlp_on_cpu_entries[op].launch.calls) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(MLP_OPS))
def test_on_the_gpu_a_shapes_second_call_is_hot(op: str) -> None:
    """With the built extension and torch's exchange API on the GPU, once a shape went through
    the full checks, kernelpack.mlp's hot call and torch.ops' below autograd both take the next
    call of it (neither hands it back)."""
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in good_args(op)]
    MLP_OPS[op](list(args))
    with torch.no_grad():
        assert mlp_hot.HOT[op](*args) is not NotImplemented
    assert mlp_hot.HOT_BELOW_AUTOGRAD[op](*args) is not NotImplemented
    torch.cuda.synchronize()


def test_the_c_hot_call_drives_the_c_launcher_directly(native: Any) -> None:
    """An entry whose launch is a C Launcher: the hot call packs through it with no Python frame;
    the recording driver function sees the tensors' addresses, the sizes, eps and the stream."""
    seen: list[tuple[tuple[int, ...], int, list[bytes]]] = []

    def record(function: int, *rest: Any) -> int:
        dims, stream, params = rest[:6], rest[7], rest[8]
        seen.append((dims, stream or 0, [ctypes.string_at(params[i], 8) for i in range(7)]))
        return 0

    launch_fn, get_current, push = LAUNCH(record), GET_CURRENT(lambda out: 0), PUSH(lambda c: 0)
    launcher = native.Launcher(
        launch=mlp_hot_address(launch_fn),
        function=0x1234,
        codes="PPPPqqf",
        binding=0,
        get_current=mlp_hot_address(get_current),
        enter=mlp_hot_address(push),
        leave=mlp_hot_address(get_current),
        context=CONTEXT,
        pointer_getters={torch.Tensor: lambda t: t.data_ptr()},
        pointer_of=lambda t: t.data_ptr(),
        torch_getter=fail,  # not a torch tensor's getter here: CPU tensors are read by the dict
        stream_of=lambda s: s,
        fail=fail,
    )
    prepared = {(BF16, -1, torch.Size(SHAPE)): entry_for("rms_norm", launcher)}
    spec = tuple(mlp_hot.SPECS["rms_norm"])
    hot = native.TorchHotPath(spec, TYPES, prepared, EXCHANGE, torch.is_grad_enabled).call
    x, weight, eps, _ = good_args("rms_norm")
    result = hot(x, weight, eps, None)
    ((dims, stream, slots),) = seen
    assert dims == (1, 1, 1, 64, 1, 1) and stream == 0
    addresses = [x.data_ptr(), weight.data_ptr(), result.data_ptr(), 0]  # row_scales null
    assert slots[:6] == [struct.pack("<Q", a) for a in addresses] + [
        struct.pack("<q", v) for v in SHAPE
    ]
    assert slots[6][:4] == struct.pack("<f", eps)


def mlp_hot_address(function: Any) -> int:
    return int(ctypes.cast(function, ctypes.c_void_p).value or 0)


@pytest.mark.parametrize("op", list(mlp_hot.SPECS))
def test_the_hot_call_keeps_no_reference_it_should_not(
    make_hot: Callable[..., Any], op: str
) -> None:
    """A hundred calls, accepted and refused, leave the entry's, the arguments' and the
    results' reference counts as they were (the C call owns its references exactly); the hot call
    keeps one reference to the entry, where it remembers the shape, and lets it go with itself."""
    hot = Hot(make_hot, op, torch.is_grad_enabled, TYPES)
    entry = hot.prepared[(BF16, -1, torch.Size(SHAPE))]
    args = good_args(op)
    refused = wrong_args(op, 0, transposed, args)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]  # None and eps are shared widely
    before = sys.getrefcount(entry)
    counts = [before + 1, *(sys.getrefcount(t) for t in tensors)]
    for _ in range(100):
        result = hot.call(*args)
        assert hot.call(*refused) is NotImplemented
    hot.launch.calls.clear()  # the recorder holds the launches' arguments
    results = result if isinstance(result, tuple) else (result,)
    del result
    for tensor in results:
        if tensor is not None and all(tensor is not a for a in args):
            assert sys.getrefcount(tensor) == 3  # results, tensor, getrefcount's argument
    assert [sys.getrefcount(entry), *(sys.getrefcount(t) for t in tensors)] == counts
    del hot.call  # the C hot call, and with it the slot's reference
    assert sys.getrefcount(entry) == before


def test_without_the_extension_there_is_no_hot_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the C extension was not built, the hot calls torch_enable makes are off (each answers
    NotImplemented, so kernelpack.mlp and torch.ops take the full checks)."""
    monkeypatch.setattr(hotpath, "native_types", lambda: (None, None))
    saved = (dict(mlp_hot.HOT), dict(mlp_hot.HOT_BELOW_AUTOGRAD))
    try:
        for name in mlp_hot.SPECS:
            mlp_hot._make_calls(name, torch)
        args = good_args("swiglu")
        for table in (mlp_hot.HOT, mlp_hot.HOT_BELOW_AUTOGRAD):
            assert all(call is mlp_hot.not_hot for call in table.values())
            assert table["swiglu"](*args) is NotImplemented
    finally:
        mlp_hot.HOT.update(saved[0])
        mlp_hot.HOT_BELOW_AUTOGRAD.update(saved[1])


@pytest.mark.parametrize("op", list(mlp_hot.SPECS))
def test_prepare_makes_the_entry_these_tests_assume(
    monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    """prepare()'s entry for a bfloat16 tensor of SHAPE takes, after the tensors' pointers, what
    entry_for's does: the norms a null row_scales (0: the hot path stores no row scales), then
    the sizes."""
    launch = Recording()
    monkeypatch.setattr(mlp_hot, "load_kernel", lambda device, name: SimpleNamespace(launch=launch))
    monkeypatch.setattr(mlp_launch, "device_facts", lambda device: H200)
    monkeypatch.setitem(mlp_hot.PREPARED, op, {})
    entry = mlp_hot.prepare(op, bf16(*SHAPE), "cuda:0")
    assert entry[0] is launch
    assert entry[3:] == entry_for(op, launch, launch)[3:]


def test_prepare_keeps_the_general_kernel_beside_the_plain_exact_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """silu_and_mul over 4096 rows of 14336 bfloat16 outputs (past 64 MiB, 14 blocks a row):
    the plain 16-byte exact form, for 16-byte aligned pointers, and the general kernel, for
    pointers short of that, both over the 2-D grid of 14 x 4096; counted by hand."""
    names: dict[Any, str] = {}

    def load_kernel(device: str, name: str) -> Any:
        launch = Recording()
        names[launch] = name
        return SimpleNamespace(launch=launch)

    monkeypatch.setattr(mlp_hot, "load_kernel", load_kernel)
    monkeypatch.setattr(mlp_launch, "device_facts", lambda device: H200)
    monkeypatch.setitem(mlp_hot.PREPARED, "silu_and_mul", {})
    x = torch.empty(4096, 2 * 14336, dtype=torch.bfloat16, device="meta")
    entry = mlp_hot.prepare("silu_and_mul", x, "cuda:0")
    assert names[entry[0]] == "mlp::silu_and_mul_exact<__nv_bfloat16, 16>"
    assert (entry[1], entry[2], entry[6]) == ((14, 4096), 128, 16)
    general, general_grid = entry[7]
    assert (names[general], general_grid) == ("mlp::silu_and_mul<__nv_bfloat16>", (14, 4096))


# (ours, torch's dlpack.h): each struct of dlpack_exchange.h and the one it declares
DLPACK_STRUCTS = {
    "kp_dl_version": ("DLPackVersion", ["major", "minor"]),
    "kp_dl_device": ("DLDevice", ["type:device_type", "id:device_id"]),
    "kp_dl_dtype": ("DLDataType", ["code", "bits", "lanes"]),
    "kp_dl_tensor": (
        "DLTensor",
        ["data", "device", "ndim", "dtype", "shape", "strides", "byte_offset"],
    ),
    "kp_dl_managed": (
        "DLManagedTensorVersioned",
        ["version", "manager_ctx", "deleter", "flags", "tensor:dl_tensor"],
    ),
    "kp_dl_exchange_header": ("DLPackExchangeAPIHeader", ["version", "prev_api"]),
    "kp_dl_exchange_api": (
        "DLPackExchangeAPI",
        [
            "header",
            "allocate:managed_tensor_allocator",
            "managed_from_object:managed_tensor_from_py_object_no_sync",
            "managed_to_object:managed_tensor_to_py_object_no_sync",
            "view_from_object:dltensor_from_py_object_no_sync",
            "current_stream:current_work_stream",
        ],
    ),
}


def test_the_launchers_dlpack_declarations_match_torchs_dlpack_h(tmp_path: Path) -> None:
    """launcher.c reads torch's tensors through its own declarations of DLPack's exchange API
    (dlpack_exchange.h): compiled beside the dlpack.h torch ships, every struct has the size, and
    every field the offset, of the one it declares; the major version and the capsule's name
    agree too."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    torch_header = Path(torch.__file__).parent / "include" / "ATen" / "dlpack.h"
    checks = [
        '_Static_assert(KP_DL_MAJOR == DLPACK_MAJOR_VERSION, "major version");',
    ]
    for ours, (theirs, fields) in DLPACK_STRUCTS.items():
        checks.append(f'_Static_assert(sizeof({ours}) == sizeof({theirs}), "{ours}");')
        for field in fields:
            mine, _, their = field.partition(":")
            checks.append(
                f"_Static_assert(offsetof({ours}, {mine}) == offsetof({theirs}, {their or mine}),"
                f' "{ours}.{mine}");'
            )
    source = tmp_path / "layout.c"
    source.write_text(
        "#include <stddef.h>\n"
        f'#include "{torch_header}"\n'
        f'#include "{NATIVE_SOURCE.parent / "dlpack_exchange.h"}"\n' + "\n".join(checks) + "\n"
    )
    compiled = subprocess.run(
        [compiler, "-fsyntax-only", "-std=c11", str(source)], capture_output=True, text=True
    )
    assert compiled.returncode == 0, compiled.stderr
    capsule_name = ctypes.pythonapi.PyCapsule_GetName
    capsule_name.restype, capsule_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    assert capsule_name(EXCHANGE) == b"dlpack_exchange_api"
    assert (
        '#define KP_DL_EXCHANGE_CAPSULE "dlpack_exchange_api"'
        in (NATIVE_SOURCE.parent / "dlpack_exchange.h").read_text()
    )
