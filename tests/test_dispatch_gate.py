"""launcher.c's DispatchGate, the dispatcher kernel in front of an op's hot call: it returns the
hot call's result where the hot call takes the call, and hands everything else, as it was made, to
the op's Python kernel. As an Autograd kernel it tries the hot call only for the keysets that the
Python kernel recorded as straight (CUDA next below autograd). Driven here on the CPU through
torch's own dispatcher, with recording callables in place of the hot call and the kernel."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from test_loader_launch import native

torch = pytest.importorskip("torch", reason="torch is in the test dependency group")
pytestmark = pytest.mark.torch

__all__ = ["native"]  # the fixture, imported from test_loader_launch

_names = itertools.count()


class Recorder:
    """A callable that records its calls and returns ``result``, or raises ``error``."""

    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.result, self.error = result, error

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        if self.error is not None:
            raise self.error
        return self.result


def library_op(kernel: Any, key: str, with_keyset: bool) -> Any:
    """A fresh op (Tensor x, float eps) -> Tensor with ``kernel`` for ``key``, kept alive on the
    op (dropping the library unregisters it); the CPU kernel of an Autograd one raises."""
    name = f"gate{next(_names)}"
    library = torch.library.Library(f"kptest_{name}", "DEF")
    library.define(f"{name}(Tensor x, float eps=1e-06) -> Tensor")
    if key != "CPU":

        def cpu(*args: Any) -> Any:
            raise AssertionError("the Autograd kernel under test returned into the CPU kernel")

        library.impl(name, cpu, "CPU")
    library.impl(name, kernel, key, with_keyset=with_keyset)
    op = getattr(getattr(torch.ops, f"kptest_{name}"), name)
    op.library = library
    return op


def test_the_hot_calls_result_is_returned_and_the_kernel_not_called(native: Any) -> None:
    made = torch.full((3,), 7.0)
    hot, slow = Recorder(made), Recorder(torch.zeros(3))
    op = library_op(native.DispatchGate(hot, None, slow), "CPU", with_keyset=False)
    x = torch.randn(3)
    assert op(x, 0.5) is made
    assert len(hot.calls) == 1 and hot.calls[0][0][0] is x and hot.calls[0][0][1] == 0.5
    assert slow.calls == []


def test_not_implemented_hands_the_call_to_the_kernel_as_it_was_made(native: Any) -> None:
    fallback = torch.full((3,), 3.0)
    hot, slow = Recorder(NotImplemented), Recorder(fallback)
    op = library_op(native.DispatchGate(hot, None, slow), "CPU", with_keyset=False)
    x = torch.randn(3)
    assert op(x) is fallback
    assert len(hot.calls) == 1 and len(slow.calls) == 1
    assert slow.calls[0][0][0] is x


def test_an_autograd_gate_tries_the_hot_call_only_for_keysets_recorded_straight(
    native: Any,
) -> None:
    made, fallback = torch.full((2,), 1.0), torch.full((2,), 2.0)
    hot, slow = Recorder(made), Recorder(fallback)
    straight: dict[int, bool] = {}
    op = library_op(native.DispatchGate(hot, straight, slow), "Autograd", with_keyset=True)
    x = torch.randn(2)
    with torch.no_grad():
        assert op(x) is fallback  # a keyset not recorded: the kernel, given the keyset first
        keyset = slow.calls[0][0][0]
        assert isinstance(keyset, torch._C.DispatchKeySet) and slow.calls[0][0][1] is x
        assert hot.calls == []
        straight[keyset.raw_repr()] = False
        assert op(x) is fallback and hot.calls == []
        straight[keyset.raw_repr()] = True
        assert op(x) is made
    assert len(hot.calls) == 1 and hot.calls[0][0] == (x,)  # the keyset is not the hot call's
    assert len(slow.calls) == 2


def test_errors_of_the_hot_call_and_of_the_kernel_propagate(native: Any) -> None:
    hot = Recorder(error=ValueError("from the hot call"))
    op = library_op(native.DispatchGate(hot, None, Recorder()), "CPU", with_keyset=False)
    with pytest.raises(ValueError, match="from the hot call"):
        op(torch.randn(2))
    slow = Recorder(error=ValueError("from the kernel"))
    op = library_op(native.DispatchGate(Recorder(NotImplemented), None, slow), "CPU", False)
    with pytest.raises(ValueError, match="from the kernel"):
        op(torch.randn(2))


def test_keywords_go_to_the_kernel(native: Any) -> None:
    hot, slow = Recorder(1), Recorder(2)
    gate = native.DispatchGate(hot, None, slow)
    assert gate(3, eps=0.5) == 2 and hot.calls == [] and slow.calls == [((3,), {"eps": 0.5})]
    assert gate(3) == 1


@pytest.mark.parametrize(
    "arguments",
    [(1, None, print), (print, None, 1), (print, [], print)],
    ids=["hot", "slow", "straight"],
)
def test_bad_arguments_are_refused(native: Any, arguments: tuple[Any, ...]) -> None:
    with pytest.raises(TypeError, match="callables, straight a dict or None"):
        native.DispatchGate(*arguments)
