"""kernelpack.devices.arrays, the one framework adapter: what it reads off arrays, the device argument, and
its one error convention. CPU-side (numpy, torch's CPU build); the GPU side runs in test_mlp.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from kernelpack.devices import arrays, pointers
from kernelpack.errors import KernelpackError, UsageError


def test_usage_errors_are_value_errors() -> None:
    assert issubclass(UsageError, ValueError)
    assert issubclass(UsageError, KernelpackError)
    assert UsageError.exit_code == 2


def test_numpy_arrays_are_host_arrays() -> None:
    host = np.zeros((3, 8), np.float16)[:, ::2]
    array = arrays.wrap("x", host)
    assert (array.framework, array.dtype, array.shape) == ("numpy", "float16", (3, 4))
    assert array.strides == (8, 2)  # elements, not numpy's bytes
    assert not array.on_gpu and not array.contiguous
    assert array.device_name == "cpu"


def test_strides_not_whole_elements_are_refused_naming_the_array() -> None:
    """Byte strides that are not a whole number of elements (a view no kernel can index) are
    refused, not rounded down to a stride that names other memory."""
    buffer = np.zeros(64, np.float32)
    view = np.lib.stride_tricks.as_strided(buffer, (4, 8), (30, 2))
    with pytest.raises(UsageError, match=r"^x: strides \(30, 2\) in bytes are not whole float32"):
        _ = arrays.wrap("x", view).strides


@pytest.mark.parametrize("value", [[1.0, 2.0], 3.0, "x", None])
def test_non_arrays_are_refused_naming_the_argument(value: object) -> None:
    with pytest.raises(UsageError, match=r"^gate: expected a GPU array"):
        arrays.wrap("gate", value)


@pytest.mark.parametrize(
    ("given", "expected"), [("cuda:0", "cuda:0"), ("hip:3", "hip:3"), ("cuda:12", "cuda:12")]
)
def test_vendor_qualified_names(given: str, expected: str) -> None:
    assert arrays.device_string(given) == expected
    parsed = arrays.parse_device(expected)
    assert (parsed.runtime, parsed.ordinal) == (expected.split(":")[0], int(expected.split(":")[1]))


@pytest.mark.parametrize("given", ["cuda", "gpu:0", "cuda:-1", "cuda:01", "cuda:0 ", "rocm:0", ""])
def test_malformed_names_are_refused(given: str) -> None:
    with pytest.raises(UsageError, match=r"^device: .*expected 'cuda:N' or 'hip:N'"):
        arrays.device_string(given)


@pytest.mark.parametrize("given", [0, 1, True])
def test_bare_ints_are_refused_as_ambiguous(given: int) -> None:
    with pytest.raises(UsageError, match=r"does not say which vendor"):
        arrays.device_string(given)


def test_other_objects_are_refused() -> None:
    with pytest.raises(UsageError, match=r"^device: cannot use a float"):
        arrays.device_string(0.0)


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def test_torch_devices_name_their_vendor(torch: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    device = torch.device("cuda", 1)
    monkeypatch.setattr(torch.version, "hip", None)
    assert arrays.device_string(device) == "cuda:1"
    # torch on ROCm calls its GPUs "cuda" too: torch.version.hip says they are AMD's.
    monkeypatch.setattr(torch.version, "hip", "6.4.43484")
    assert arrays.device_string(device) == "hip:1"


def test_torch_cpu_devices_and_tensors_are_refused(torch: Any) -> None:
    with pytest.raises(UsageError, match=r"^device: torch device cpu is not a GPU"):
        arrays.device_string(torch.device("cpu"))
    with pytest.raises(UsageError, match=r"^x: a torch tensor on cpu, and "):
        arrays.wrap("x", torch.zeros(3))
    with pytest.raises(UsageError, match=r"^device: a torch tensor on cpu"):
        arrays.device_string(torch.zeros(3))
    with pytest.raises(UsageError, match=r"not GPU memory"):
        pointers.pointer_of(torch.zeros(3))
