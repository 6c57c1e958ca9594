"""kernelpack.mlp.fused_add_rms_norm over views at a row stride (vLLM's ``x[..., :hidden]``), in
every framework it takes: torch, CuPy, and arrays through ``__cuda_array_interface__`` or DLPack.

CPU-side: the layout rule (row strides read off shapes and element strides, written out by hand),
and the dispatch of the framework-neutral path, through kernelpack's own array adapter over a
stand-in CuPy (a module with CuPy's few attributes the adapter reads, arrays that report CuPy's
byte strides and device addresses) with a recording kernel loader: a strided view launches the
torch op's option kernel with each view's own row stride, a contiguous call keeps the tuned
kernel, and each layout the kernel cannot serve is refused in one line naming the argument,
before anything is launched.

GPU (marked gpu): the views written in place against float64 on fresh random data (the seed is
printed with any failure); every element of their buffers outside the views is NaN before the call
and must still be after it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
from collections.abc import Callable, Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from kernelpack import mlp
from kernelpack.errors import UsageError
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp import table
from kernelpack.ops.mlp.checks import in_place_row_stride, row_stride
from tests.test_mlp import (
    EPS,
    H200,
    ArrayInterfaceOnly,
    DLPackOnly,
    assert_close,
    randn,
    ref_rms_norm,
    torch_rng,
)

__all__ = ["torch_rng"]  # the fixture, imported from test_mlp

# ---- the layout rule: (shape, element strides) -> row stride, by hand --------------------------


@pytest.mark.parametrize(
    ("shape", "strides", "expected"),
    [
        ((4, 8), (8, 1), 8),  # contiguous
        ((4, 8), (16, 1), 16),  # vLLM's x[:, :8] of rows of 16
        ((2, 3, 8), (48, 16, 1), 16),  # 3-D: the leading dimensions fold into one stride
        ((2, 3, 8), (64, 16, 1), None),  # a gap after every third row: no one stride
        ((4, 8), (1, 4), None),  # a transposed matrix: elements 4 apart
        ((8,), (2,), None),
        ((8,), (1,), 8),  # one row: its length
        ((1, 8), (999, 1), 8),
        ((4, 1, 8), (16, 3, 1), 16),  # a dimension of one element has any stride
        ((4, 1), (5, 77), 5),  # rows of one element: the last stride is free
        ((0, 8), (5, 2), 8),  # no elements
        ((4, 8), (-16, 1), -16),  # CuPy's rows reversed
        ((4, 8), (0, 1), 0),  # broadcast rows: one stride (which the in-place rule refuses)
    ],
)
def test_row_stride_of_a_layout(
    shape: tuple[int, ...], strides: tuple[int, ...], expected: int | None
) -> None:
    assert row_stride(shape, strides) == expected


@pytest.mark.parametrize(
    ("shape", "strides", "message"),
    [
        ((4, 8), (1, 4), r"^x: its last dimension has stride 4 \(strides \(1, 4\)\); .* stride 1"),
        ((3, 8), (16, 2), r"^x: its last dimension has stride 2"),
        ((2, 3, 8), (64, 16, 1), r"^x: rows at strides \(64, 16, 1\) of shape \(2, 3, 8\) are not"),
        ((4, 8), (0, 1), r"^x: rows 0 elements apart overlap \(each has 8\); .* at least 8"),
        ((4, 8), (4, 1), r"^x: rows 4 elements apart overlap"),
        ((4, 8), (-4, 1), r"^x: rows -4 elements apart overlap"),
    ],
)
def test_in_place_views_the_kernel_cannot_serve_are_refused(
    shape: tuple[int, ...], strides: tuple[int, ...], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        in_place_row_stride("x", shape, strides)


def test_strided_ops_of_the_table_take_the_in_place_inputs_as_views() -> None:
    """An op's ``strided`` names an op of the table that writes the same inputs in place and
    takes each of them at a row stride, with options all of which have defaults."""
    strided = [op for op in table.OPS if op.strided]
    assert [op.name for op in strided] == ["fused_add_rms_norm"]
    for op in strided:
        other = table.TABLE[op.strided]
        assert other.in_place == op.in_place
        assert [i.name for i in other.inputs] == [i.name for i in op.inputs]
        assert all(other.inputs[i].strided for i in op.in_place)
        assert other.eps == op.eps and not other.results


# ---- dispatch over a stand-in CuPy, with a recording kernel loader ------------------------------

BASE = 0x7F00_0000_0000  # the stand-in device address of the first buffer's first byte
BUFFER_SPACING = 1 << 32  # each buffer's own addresses (so that arguments cannot be confused)
STREAM = 0x5EA
_BUFFERS = itertools.count()


class FakeCupyArray:
    """What kernelpack's adapter reads of a CuPy array, over a numpy view of a buffer: dtype,
    shape, byte strides, C-contiguity, the device address of its first element (CuPy's
    ``data.ptr``: the buffer's stand-in address plus the view's offset in it) and the device."""

    def __init__(self, view: np.ndarray, buffer: np.ndarray, address: int) -> None:
        self.dtype, self.shape, self.strides = view.dtype, view.shape, view.strides
        self.flags = SimpleNamespace(c_contiguous=view.flags.c_contiguous)
        offset = view.__array_interface__["data"][0] - buffer.__array_interface__["data"][0]
        self.address = address  # the buffer's
        self.data = SimpleNamespace(ptr=address + offset)
        self.device = SimpleNamespace(id=0)


FakeCupyArray.__module__ = "cupy"  # how the adapter tells a CuPy array (framework_of)


def cupy_view(
    shape: tuple[int, ...], view: Callable[[np.ndarray], np.ndarray], dtype: str = "float16"
) -> FakeCupyArray:
    buffer = np.zeros(shape, dtype)
    return FakeCupyArray(view(buffer), buffer, BASE + next(_BUFFERS) * BUFFER_SPACING)


def contiguous(*shape: int, dtype: str = "float16") -> FakeCupyArray:
    return cupy_view(shape, lambda b: b, dtype)


class Recorder:
    """The kernels loaded and their launches, in order: (name, grid, block, args, stream)."""

    def __init__(self) -> None:
        self.launches: list[tuple[str, Any, Any, tuple[Any, ...], int]] = []

    def load(self, device: str, name: str) -> Any:
        assert device == "cuda:0"

        def launch(grid: Any, block: Any, *args: Any, stream: int) -> None:
            self.launches.append((name, grid, block, args, stream))

        return SimpleNamespace(launch=launch)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    """A stand-in CuPy module, kernels that record their launches, and an H200's facts."""
    cupy = ModuleType("cupy")
    cupy.cuda = SimpleNamespace(  # type: ignore[attr-defined]
        runtime=SimpleNamespace(is_hip=False),
        Device=lambda index: contextlib.nullcontext(),
        get_current_stream=lambda: SimpleNamespace(ptr=STREAM),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    recorder = Recorder()
    monkeypatch.setattr(mlp_launch, "load_kernel", recorder.load)
    monkeypatch.setattr(mlp_launch, "device_facts", lambda device: H200)
    yield recorder


def test_a_view_at_a_row_stride_launches_the_option_kernel_at_its_strides(
    recorded: Recorder,
) -> None:
    """x as vLLM's view (rows of 40 in rows of 80), residual contiguous: one launch of the torch
    op's kernel (gemma, offset 0), x written over itself at 80, the residual at 40; a block a
    row of 64 threads (the power of two covering 40)."""
    x = cupy_view((6, 80), lambda b: b[:, :40])
    residual, weight = contiguous(6, 40), contiguous(40)
    assert mlp.fused_add_rms_norm(x, residual, weight, 1e-5) is None
    ((name, grid, block, args, stream),) = recorded.launches
    assert name == "mlp::add_rms_norm_options<__half, __half, 0>"
    assert (grid, block, stream) == (6, 64, STREAM)
    xp, rp, wp = x.address, residual.address, weight.address
    assert args == (xp, rp, wp, xp, rp, 0, 6, 40, 80, 40, 80, 40, 1e-5, 0.0)


@pytest.mark.parametrize(
    ("shape", "view", "start", "stride"),
    [
        ((2, 3, 56), lambda b: b[..., 8:48], 8, 56),  # 3-D, 8 elements into each row
        ((6, 40), lambda b: b[::-1], 5 * 40, -40),  # rows reversed: the last row first
        ((12, 40), lambda b: b[::2], 0, 80),  # every other row
    ],
    ids=["3-d", "reversed", "every-other-row"],
)
def test_views_launch_at_their_first_element_and_row_stride(
    recorded: Recorder,
    shape: tuple[int, ...],
    view: Callable[[np.ndarray], np.ndarray],
    start: int,
    stride: int,
) -> None:
    """Both x and residual views of the same layout, float32 (4 bytes an element)."""
    x, residual = cupy_view(shape, view, "float32"), cupy_view(shape, view, "float32")
    weight = contiguous(40, dtype="float32")
    mlp.fused_add_rms_norm(x, residual, weight)
    ((name, grid, _, args, _),) = recorded.launches
    assert name == "mlp::add_rms_norm_options<float, float, 0>"
    assert x.data.ptr == x.address + 4 * start
    assert residual.data.ptr == residual.address + 4 * start
    assert args[:6] == (
        x.data.ptr,
        residual.data.ptr,
        weight.address,
        x.data.ptr,
        residual.data.ptr,
        0,
    )
    assert args[6:12] == (6, 40, stride, stride, stride, stride)
    assert grid == 6


def test_contiguous_arrays_keep_the_tuned_kernel(recorded: Recorder) -> None:
    x, residual, weight = contiguous(6, 40), contiguous(6, 40), contiguous(40)
    mlp.fused_add_rms_norm(x, residual, weight)
    ((name, *_),) = recorded.launches
    assert name.startswith("mlp::add_rms_norm") and "options" not in name, name


@pytest.mark.parametrize(
    ("x", "residual", "weight", "message"),
    [
        (
            lambda: cupy_view((40, 6), lambda b: b.T),
            lambda: contiguous(6, 40),
            lambda: contiguous(40),
            r"^x: its last dimension has stride 6 \(strides \(1, 6\)\)",
        ),
        (
            lambda: contiguous(6, 40),
            lambda: cupy_view((6, 80), lambda b: b[:, ::2]),
            lambda: contiguous(40),
            r"^residual: its last dimension has stride 2",
        ),
        (
            lambda: cupy_view((2, 4, 40), lambda b: b[:, :3]),
            lambda: contiguous(2, 3, 40),
            lambda: contiguous(40),
            r"^x: rows at strides \(160, 40, 1\) of shape \(2, 3, 40\) are not one stride",
        ),
        (
            lambda: cupy_view((1, 40), lambda b: np.broadcast_to(b, (6, 40))),
            lambda: contiguous(6, 40),
            lambda: contiguous(40),
            r"^x: rows 0 elements apart overlap",
        ),
        (
            lambda: cupy_view(
                (6 * 81,),
                lambda b: np.lib.stride_tricks.as_strided(b, (6, 40), (81, 2)),
                "float16",
            ),
            lambda: contiguous(6, 40),
            lambda: contiguous(40),
            r"^x: strides \(81, 2\) in bytes are not whole float16 elements of 2 bytes",
        ),
        (
            lambda: cupy_view((6, 80), lambda b: b[:, :40]),
            lambda: contiguous(6, 40),
            lambda: cupy_view((80,), lambda b: b[::2]),
            r"^weight: must be C-contiguous",
        ),
        (
            lambda: cupy_view((6, 80), lambda b: b[:, :40]),
            lambda: contiguous(6, 41),
            lambda: contiguous(40),
            r"^residual: shape \(6, 41\) does not match x's",
        ),
    ],
    ids=[
        "transposed",
        "last-stride-2",
        "no-one-stride",
        "overlap",
        "byte-strides",
        "weight",
        "shape",
    ],
)
def test_layouts_the_kernel_cannot_serve_are_refused_before_a_launch(
    recorded: Recorder,
    x: Callable[[], FakeCupyArray],
    residual: Callable[[], FakeCupyArray],
    weight: Callable[[], FakeCupyArray],
    message: str,
) -> None:
    with pytest.raises(UsageError, match=message):
        mlp.fused_add_rms_norm(x(), residual(), weight())
    assert recorded.launches == []


def test_ops_without_a_strided_kernel_still_refuse_views(recorded: Recorder) -> None:
    view = cupy_view((6, 80), lambda b: b[:, :40])
    with pytest.raises(UsageError, match=r"^x: must be C-contiguous"):
        mlp.rms_norm(view, contiguous(40))
    with pytest.raises(UsageError, match=r"^gate: must be C-contiguous"):
        mlp.swiglu(view, contiguous(6, 40))
    assert recorded.launches == []


# ---- GPU: views written in place, against float64 ----------------------------------------------

DTYPES = ["float32", "float16", "bfloat16"]
# (buffer shape, the view of it, x's and residual's): rows of 769 (odd, so misaligned rows) and
# 4096 in rows twice as long, 3 elements into each row, 3-D, and a strided x with a contiguous
# residual
LAYOUTS: dict[str, tuple[tuple[int, ...], Any, bool]] = {
    "half-rows-769": ((83, 2 * 769), (slice(None), slice(0, 769)), True),
    "half-rows-4096": ((7, 2 * 4096), (slice(None), slice(0, 4096)), True),
    "offset-3": ((33, 1000), (slice(None), slice(3, 3 + 777)), True),
    "3-d": ((2, 5, 2064), (Ellipsis, slice(0, 2048)), True),
    "residual-contiguous": ((9, 2 * 1000), (slice(None), slice(0, 1000)), False),
}
FRAMEWORKS = ["torch", "cuda-array-interface", "dlpack", "cupy"]


def _as_framework(framework: str, base: Any, index: Any) -> Any:
    """The view ``base[index]`` as ``framework`` passes it: a torch view, a wrapper offering only
    __cuda_array_interface__ or DLPack over it, or a CuPy view of the CuPy array over base."""
    if framework == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.from_dlpack(base)[index]
    view = base[index]
    if framework == "torch":
        return view
    return (ArrayInterfaceOnly if framework == "cuda-array-interface" else DLPackOnly)(view)


@pytest.mark.gpu
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm_over_views_against_float64(
    torch_rng: Any, dtype: str, layout: str, framework: str
) -> None:
    torch = torch_rng[0]
    if framework == "cupy" and dtype == "bfloat16":
        pytest.skip("CuPy has no bfloat16")
    if framework == "cuda-array-interface" and dtype == "bfloat16":
        pytest.skip("__cuda_array_interface__ has no bfloat16 type string (torch gives raw bytes)")
    shape, index, residual_strided = LAYOUTS[layout]
    kind = getattr(torch, dtype)
    x_base = torch.full(shape, math.nan, dtype=kind, device="cuda")
    x_view = x_base[index]
    x_view.copy_(randn(torch_rng, tuple(x_view.shape), dtype))
    if residual_strided:
        residual_base = torch.full(shape, math.nan, dtype=kind, device="cuda")
        residual_view = residual_base[index]
        residual_view.copy_(randn(torch_rng, tuple(x_view.shape), dtype))
        residual = _as_framework(framework, residual_base, index)
    else:
        residual_view = randn(torch_rng, tuple(x_view.shape), dtype)
        residual_base = residual_view
        residual = _as_framework(framework, residual_view, ...)
    weight = randn(torch_rng, tuple(x_view.shape[-1:]), dtype)
    stored_sum = (x_view.double() + residual_view.double()).to(kind)
    expected_x = ref_rms_norm(torch, stored_sum, weight, EPS)
    outside_x = _outside(torch, x_base, index)
    outside_residual = _outside(torch, residual_base, index if residual_strided else ())
    x = _as_framework(framework, x_base, index)
    assert mlp.fused_add_rms_norm(x, residual, _as_framework(framework, weight, ...), EPS) is None
    torch.cuda.synchronize()
    what = f"fused_add_rms_norm {framework} {layout}"
    assert_close(torch_rng, residual_view, stored_sum.double(), dtype, what + " residual")
    assert_close(torch_rng, x_view, expected_x, dtype, what + " x")
    assert bool(x_base[outside_x].isnan().all()), "written between x's rows"
    assert bool(residual_base[outside_residual].isnan().all()), "written between residual's rows"


def _outside(torch: Any, base: Any, index: Any) -> Any:
    """A mask of base's elements outside ``base[index]``."""
    mask = torch.ones(base.shape, dtype=torch.bool, device=base.device)
    mask[index] = False
    return mask


@pytest.mark.gpu
def test_cupy_views_with_rows_reversed(torch_rng: Any) -> None:
    """A CuPy view at a negative row stride (torch has none): the rows written where they lie."""
    torch = torch_rng[0]
    cupy = pytest.importorskip("cupy")
    rows, hidden = 17, 513
    x_base = torch.full((rows, 2 * hidden), math.nan, device="cuda")
    residual_base = torch.full((rows, 2 * hidden), math.nan, device="cuda")
    index = (slice(None), slice(0, hidden))
    x_base[index] = randn(torch_rng, (rows, hidden), "float32")
    residual_base[index] = randn(torch_rng, (rows, hidden), "float32")
    weight = randn(torch_rng, (hidden,), "float32")
    stored_sum = (x_base[index].double() + residual_base[index].double()).float()
    expected_x = ref_rms_norm(torch, stored_sum, weight, EPS)
    x = cupy.from_dlpack(x_base)[::-1, :hidden]
    residual = cupy.from_dlpack(residual_base)[::-1, :hidden]
    mlp.fused_add_rms_norm(x, residual, cupy.from_dlpack(weight), EPS)
    cupy.cuda.get_current_stream().synchronize()
    assert_close(torch_rng, residual_base[index], stored_sum.double(), "float32", "reversed sum")
    assert_close(torch_rng, x_base[index], expected_x, "float32", "reversed x")
    assert bool(x_base[:, hidden:].isnan().all()) and bool(residual_base[:, hidden:].isnan().all())


@pytest.mark.gpu
def test_torch_views_the_kernel_cannot_serve_are_refused(torch_rng: Any) -> None:
    torch = torch_rng[0]
    weight = randn(torch_rng, (8,), "float32")
    x = randn(torch_rng, (8, 8), "float32")
    before = x.clone()
    with pytest.raises(UsageError, match=r"^x: its last dimension has stride 8"):
        mlp.fused_add_rms_norm(x.t(), x.clone(), weight)
    broadcast = x[:1].expand(4, 8)
    with pytest.raises(UsageError, match=r"^residual: rows 0 elements apart overlap"):
        mlp.fused_add_rms_norm(x[4:].clone(), broadcast, weight)
    torch.cuda.synchronize()
    assert torch.equal(x, before), "a refused call wrote x"
