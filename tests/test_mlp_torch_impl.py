"""The real implementations of the ops the table gives no plan (kernelpack.ops.mlp.torch_impl), on
the CPU side: what each hands its launcher, from the arguments as the dispatcher passes them
(trailing defaults given or left out), and the results it returns. The launchers are replaced by
recorders, so no GPU is needed; the kernels themselves are tested in test_mlp_torch.py. Each
expectation is written out by hand from the launchers' parameter lists (launch.py, options.py).
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = pytest.mark.torch

from kernelpack.ops.mlp import geometry, hot, launch, options, torch_impl  # noqa: E402  (needs torch)
from kernelpack.ops.mlp.table import TABLE  # noqa: E402

DEVICE, STREAM = "cuda:0", "the stream"


class FakePlan:
    """What the implementations read of hot.torch_plan's answer."""

    device, index = DEVICE, 0

    def stream(self, index: int) -> str:
        assert index == self.index
        return STREAM


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Every launcher the implementations call, recording (its name, its arguments)."""
    seen: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(hot, "torch_plan", lambda tensor: FakePlan())
    monkeypatch.setattr(launch, "device_facts", lambda device: geometry.DeviceFacts("sm_90", 132))
    for module, name in [
        (launch, "launch_op"),
        (launch, "launch_swiglu_backward"),
        (launch, "launch_silu_and_mul_backward"),
        (launch, "launch_rms_norm_backward"),
        (launch, "launch_rms_norm_backward_short"),
        (options, "launch_norm"),
        (options, "launch_norm_backward"),
        (options, "launch_swiglu_scaled"),
        (options, "launch_silu_and_mul_as_torch"),
    ]:
        monkeypatch.setattr(module, name, lambda *args, name=name: seen.append((name, args)))
    return seen


def described(value: Any, names: dict[int, str]) -> Any:
    """``value`` with each tensor named: an argument or result by its name in ``names`` (by
    identity), any other (a scratch buffer) as ("scratch", its shape, its dtype)."""
    if isinstance(value, tuple):
        return tuple(described(item, names) for item in value)
    if isinstance(value, torch.Tensor):
        if id(value) in names:
            return names[id(value)]
        return ("scratch", tuple(value.shape), str(value.dtype))
    return value


def call(op: str, args: tuple[Any, ...], names: dict[str, Any]) -> tuple[Any, dict[int, str]]:
    """``op``'s real implementation called with ``args``; (its result, the names of ``names``'
    tensors and of the result's by identity: "result", or "result 0", "result 1", ...)."""
    result = torch_impl.implementations(TABLE[op])[0](*args)
    known = {id(tensor): name for name, tensor in names.items()}
    if isinstance(result, torch.Tensor):
        known[id(result)] = "result"
    elif result is not None:
        known.update({id(tensor): f"result {i}" for i, tensor in enumerate(result)})
    return result, known


def tensors(*shapes: tuple[int, ...]) -> list[Any]:
    return [torch.randn(shape) for shape in shapes]


def test_the_norm_options_hand_the_kernel_their_scalars_given_or_left_out(
    launches: list[tuple[str, tuple[Any, ...]]],
) -> None:
    x, weight = tensors((3, 8), (8,))
    names = {"x": x, "weight": weight}
    for args, scalars in [
        ((x, weight), ("gemma", 1e-6, 0.0)),
        ((x, weight, 1e-5), ("gemma", 1e-5, 0.0)),
        ((x, weight, 1e-5, 1.0, "llama"), ("llama", 1e-5, 1.0)),
    ]:
        launches.clear()
        result, known = call("rms_norm_options", args, names)
        assert result.shape == x.shape and result.dtype == x.dtype
        mode, eps, offset = scalars
        ((name, given),) = launches
        assert name == "launch_norm"
        assert described(given, known) == (
            DEVICE,
            "float32",
            "float32",
            mode,
            ("x", "weight", "result", 0),
            (8, 8),
            3,
            8,
            eps,
            offset,
            STREAM,
        )


def test_the_norm_options_without_a_weight_and_with_row_scales(
    launches: list[tuple[str, tuple[Any, ...]]],
) -> None:
    (x,) = tensors((2, 4, 8))
    result, known = call("rms_norm_options_with_scale", (x, None, 1e-6, 0.5), {"x": x})
    assert isinstance(result, tuple) and len(result) == 2
    assert result[1].shape == (2, 4) and result[1].dtype == torch.float32
    ((name, given),) = launches
    assert (name, described(given, known)) == (
        "launch_norm",
        (
            DEVICE,
            "float32",
            "float32",  # the rows' dtype where weightless
            "gemma",
            ("x", 0, "result 0", "result 1"),
            (8, 8),
            8,
            8,
            1e-6,
            0.5,
            STREAM,
        ),
    )


def test_the_in_place_norm_options_at_their_row_strides(
    launches: list[tuple[str, tuple[Any, ...]]],
) -> None:
    wide, wider, weight = tensors((3, 16), (3, 24), (8,))
    x, residual = wide[:, :8], wider[:, :8]
    result, known = call("rms_norm_options_in_place", (x, weight), {"x": x, "weight": weight})
    assert result is None
    result, known_fused = call(
        "fused_add_rms_norm_options", (x, residual, None, 1e-5), {"x": x, "residual": residual}
    )
    assert result is None
    # fused_add_rms_norm's views at a row stride take the option kernel, at the default options
    result, known_views = call(
        "fused_add_rms_norm", (x, residual, weight), {"x": x, "residual": residual, "w": weight}
    )
    assert result is None
    assert [
        (name, described(given, names))
        for (name, given), names in zip(launches, [known, known_fused, known_views], strict=True)
    ] == [
        (
            "launch_norm",
            (
                DEVICE,
                "float32",
                "float32",
                "gemma",
                ("x", "weight", "x", 0),
                (16, 16),
                3,
                8,
                1e-6,
                0.0,
                STREAM,
            ),
        ),
        (
            "launch_norm",
            (
                DEVICE,
                "float32",
                "float32",
                "gemma",
                ("x", "residual", 0, "x", "residual", 0),
                (16, 24, 16, 24),
                3,
                8,
                1e-5,
                0.0,
                STREAM,
            ),
        ),
        (
            "launch_norm",
            (
                DEVICE,
                "float32",
                "float32",
                "gemma",
                ("x", "residual", "w", "x", "residual", 0),
                (16, 24, 16, 24),
                3,
                8,
                1e-6,
                0.0,
                STREAM,
            ),
        ),
    ]


@pytest.mark.parametrize("weighted", [True, False], ids=["weight", "weightless"])
def test_the_norm_options_backward(
    launches: list[tuple[str, tuple[Any, ...]]], weighted: bool
) -> None:
    grad, x, weight, row_scales = tensors((3, 8), (3, 8), (8,), (3,))
    names = {"grad": grad, "x": x, "weight": weight, "row_scales": row_scales}
    args = (grad, x, weight if weighted else None, row_scales, *((0.25,) if weighted else ()))
    result, known = call("rms_norm_options_backward", args, names)
    assert result[0].shape == x.shape
    assert result[1].shape == ((8,) if weighted else (0,))
    ((name, given),) = launches
    partial = ("scratch", (options.backward_blocks(3), 8), "torch.float32") if weighted else 0
    assert (name, described(given, known)) == (
        "launch_norm_backward",
        (
            DEVICE,
            "float32",
            "float32",
            ("x", "row_scales", "weight" if weighted else 0, "grad", 0, "result 0"),
            partial,
            "result 1" if weighted else 0,
            3,
            8,
            0.25 if weighted else 0.0,
            STREAM,
        ),
    )


def test_swiglu_scaled_and_its_backward(launches: list[tuple[str, tuple[Any, ...]]]) -> None:
    grad, gate, up = tensors((2, 6), (2, 6), (2, 6))
    names = {"grad": grad, "gate": gate, "up": up}
    result, known = call("swiglu_scaled", (gate, up, 2.0), names)
    assert result.shape == gate.shape
    _, known_backward = call("swiglu_scaled_backward", (grad, gate, up, 2.0, 3.0), names)
    _, known_plain = call("swiglu_backward", (grad, gate, up), names)
    assert [
        (name, described(given, names))
        for (name, given), names in zip(launches, [known, known_backward, known_plain], strict=True)
    ] == [
        (
            "launch_swiglu_scaled",
            (DEVICE, "float32", ("gate", "up", "result"), 12, 2.0, 1.0, STREAM),
        ),
        (
            "launch_swiglu_scaled",
            (
                DEVICE,
                "float32",
                ("gate", "up", "grad", "result 0", "result 1"),
                12,
                2.0,
                3.0,
                STREAM,
            ),
        ),
        (
            "launch_swiglu_backward",
            (DEVICE, "float32", "gate", "up", "grad", "result 0", "result 1", 12, STREAM),
        ),
    ]


def test_silu_and_mul_as_torch_and_the_backward(
    launches: list[tuple[str, tuple[Any, ...]]],
) -> None:
    grad, x = tensors((3, 4), (3, 8))
    result, known = call("silu_and_mul_as_torch", (x,), {"x": x})
    assert result.shape == (3, 4)
    _, known_backward = call("silu_and_mul_backward", (grad, x), {"grad": grad, "x": x})
    assert [
        (name, described(given, names))
        for (name, given), names in zip(launches, [known, known_backward], strict=True)
    ] == [
        ("launch_silu_and_mul_as_torch", (DEVICE, "float32", "x", "result", 3, 4, STREAM)),
        (
            "launch_silu_and_mul_backward",
            (DEVICE, "float32", "x", "grad", "result", 3, 4, STREAM),
        ),
    ]


def test_the_norms_with_row_scales(launches: list[tuple[str, tuple[Any, ...]]]) -> None:
    x, residual, weight = tensors((3, 8), (3, 8), (8,))
    names = {"x": x, "residual": residual, "weight": weight}
    plain, known = call("rms_norm_with_scale", (x, weight), names)
    summed, known_summed = call("add_rms_norm_with_scale", (x, residual, weight, 1e-5), names)
    assert [len(plain), len(summed)] == [2, 3]
    assert [
        (name, described(given, names))
        for (name, given), names in zip(launches, [known, known_summed], strict=True)
    ] == [
        (
            "launch_op",
            (
                DEVICE,
                TABLE["rms_norm"],
                "float32",
                (3, 8),
                ("x", "weight", "result 0", "result 1"),
                1e-6,
                STREAM,
            ),
        ),
        (
            "launch_op",
            (
                DEVICE,
                TABLE["add_rms_norm"],
                "float32",
                (3, 8),
                ("x", "residual", "weight", "result 0", "result 1", "result 2"),
                1e-5,
                STREAM,
            ),
        ),
    ]


def test_the_norms_backward(launches: list[tuple[str, tuple[Any, ...]]]) -> None:
    grad, grad_sum, x, weight, row_scales = tensors((3, 8), (3, 8), (3, 8), (8,), (3,))
    names = {"grad": grad, "grad_sum": grad_sum, "x": x, "weight": weight, "scales": row_scales}
    _, known = call("rms_norm_backward", (grad, x, weight, row_scales), names)
    _, known_summed = call("add_rms_norm_backward", (grad, grad_sum, x, weight, row_scales), names)
    arrays = [
        described(tuple(given[2]), names)
        for (_, given), names in zip(launches, [known, known_summed], strict=True)
    ]
    assert arrays == [
        ("x", "scales", "weight", "grad", 0, "result 0", "result 1"),
        ("x", "scales", "weight", "grad", "grad_sum", "result 0", "result 1"),
    ]
