"""The no-GPU failure, as a newcomer meets it: one kernelpack line, whatever else is installed.

Issue 50 item 7: the same mistake (an op called on a machine without a GPU) used to end in four
different places depending on the installed packages: a request to install torch or CuPy (which
then fails in turn), torch's "Found no NVIDIA driver", a `.cuda()` that cannot work, and torch's
dispatcher listing every key. Each case here must give one line that says there is no GPU (or
where the tensor is) and what to do. This machine has no GPU, so the detection is the real one;
on a machine with a GPU the tests stand the detection in for an empty one, and torch's
``cuda.is_available`` for a CPU build's.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from kernelpack import mlp
from kernelpack.devices import arrays, detect
from kernelpack.errors import KernelpackError, RuntimeLibraryError, UsageError

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = pytest.mark.torch

NO_GPU = "this machine has no GPU that kernelpack can use"
NEXT_STEP = "run on a machine with one (`python -m kernelpack doctor` lists what it finds)"


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a GPU or driver: what this machine is, whatever machine runs it."""
    monkeypatch.delenv("KERNELPACK_TARGET", raising=False)
    monkeypatch.setattr(detect, "detect_gpus", lambda **_: [])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _one_kernelpack_line(error: pytest.ExceptionInfo[KernelpackError]) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


def _operands() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    return np.ones((4, 64), np.float32), np.ones(64, np.float32)


def test_numpy_without_torch_or_cupy_says_there_is_no_gpu(
    no_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeLibraryError) as error:
        mlp.rms_norm(*_operands())
    message = _one_kernelpack_line(error)
    assert NO_GPU in message and message.endswith(NEXT_STEP)
    assert "install" not in message  # no torch or CuPy would help here


def test_numpy_with_torch_says_there_is_no_gpu_not_torchs_driver_error(no_gpu: None) -> None:
    with pytest.raises(RuntimeLibraryError) as error:
        mlp.rms_norm(*_operands())
    message = _one_kernelpack_line(error)
    assert message.startswith("numpy arrays cannot be copied to a GPU: " + NO_GPU)


def test_a_cpu_tensor_on_a_machine_without_gpu_is_not_told_to_move_to_one(no_gpu: None) -> None:
    with pytest.raises(UsageError) as error:
        mlp.rms_norm(torch.ones(4, 64), torch.ones(64))
    message = _one_kernelpack_line(error)
    assert message.startswith("x: a torch tensor on cpu, and " + NO_GPU)
    assert ".cuda()" not in message and "numpy" not in message


def test_a_torch_module_on_cpu_tensors_is_one_kernelpack_line(no_gpu: None) -> None:
    nn = pytest.importorskip("kernelpack.nn")
    with pytest.raises(UsageError) as error:
        nn.RMSNorm(64)(torch.ones(4, 64))
    assert _one_kernelpack_line(error).startswith("x: a torch tensor on cpu, and " + NO_GPU)
    with pytest.raises(UsageError, match=r"^gate: a torch tensor on cpu, and " + NO_GPU):
        torch.ops.kernelpack.swiglu(torch.ones(2, 8), torch.ones(2, 8))


def test_a_gpu_that_torch_cannot_reach_names_torchs_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU is there (KERNELPACK_TARGET stands for one), torch is a CPU build."""
    monkeypatch.setenv("KERNELPACK_TARGET", "sm_90")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UsageError) as error:
        mlp.rms_norm(torch.ones(4, 64), torch.ones(64))
    message = _one_kernelpack_line(error)
    assert "this machine has a GPU (nvidia sm_90)" in message
    assert f"torch {torch.__version__} cannot reach it" in message
    with pytest.raises(RuntimeLibraryError, match=r"^numpy arrays cannot be copied to a GPU: this"):
        mlp.rms_norm(*_operands())
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeLibraryError, match=r"neither torch nor CuPy, .*; install one"):
        mlp.rms_norm(*_operands())


def test_a_cpu_tensor_where_torch_reaches_a_gpu_is_told_to_move(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(UsageError, match=r"^x: a torch tensor on cpu, .* with \.cuda\(\)"):
        arrays.wrap("x", torch.zeros(3))
