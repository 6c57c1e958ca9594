"""The C launcher's hot-call interface: how a product's op plugs its per-call path into it.

Why: a call that costs the host a few microseconds shows every Python frame, so an op's checks,
allocation and launch for torch tensors run in one C call (``_launcher.TorchHotPath``). The
launcher knows no op: a product describes each of its ops by a :class:`HotOp`, made from the op's
own table, and keeps for each op a memo of prepared :data:`Entry` tuples, keyed by
(torch dtype, device index, torch.Size) of the first tensor, which its full path fills once a
call of that shape passed its checks. The hot call accepts a call only where an entry was
prepared and every tensor has the dtype, device and shape the entry says; it answers
``NotImplemented`` for anything else, and the product's full checks then name what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class HotOp(NamedTuple):
    """An op's arguments as its hot call takes them: ``inputs`` tensors, then eps (a float >= 0)
    when ``eps``, then ``out`` (a tensor, or None to allocate) when ``out``. ``shapes`` has one
    code per input: "f" the first input's shape, "w" the entry's weight shape; ``out`` and the
    results have the entry's result shape. ``allocates`` results are made when out is None (a
    tuple where more than one); the inputs at ``in_place`` are written as the results instead
    (their pointers follow the inputs') and the call returns None. A call may leave out its
    trailing arguments, as torch's dispatcher leaves out those at their defaults: eps is then
    ``default_eps``, out None."""

    inputs: int
    shapes: str
    eps: bool
    out: bool
    allocates: int
    in_place: tuple[int, ...] = ()
    default_eps: float = 0.0


# A prepared launch, the C hot call's entry: (launch: a C Launcher, another callable taking
# (grid, block, *args, stream=), or None when there are no elements; grid; block; the values the
# kernel takes after the tensors' pointers; the weight shape, or None; the result shape, None where
# it is the first input's; the alignment in bytes every pointer must have (else the call is not
# for the hot path); the general kernel's launch and grid for pointers short of it, or None).
Entry = tuple[Any, Any, Any, tuple[Any, ...], Any, Any, int, tuple[Any, Any] | None]
Key = tuple[Any, int, Any]  # (torch dtype, device index, the first tensor's torch.Size)
HotCall = Callable[..., Any]


def native_types() -> tuple[Any, Any]:
    """(TorchHotPath, Launcher) of the C extension, or (None, None) where it was not built."""
    try:
        # deferred: the C extension, absent where it was not built
        from ._launcher import Launcher, TorchHotPath
    except ImportError:
        return None, None
    return TorchHotPath, Launcher


def hot_call(
    op: HotOp,
    torch_types: set[type],
    prepared: dict[Key, Entry],
    exchange: Any,
    grad_enabled: Callable[[], bool] | None,
) -> HotCall | None:
    """The C hot call of ``op`` over the ``prepared`` memo, reading tensors through torch's DLPack
    exchange API ``exchange`` (``torch.Tensor.__dlpack_c_exchange_api__``); ``grad_enabled``
    (torch.is_grad_enabled) refuses tensors that require grad while it is on, None reads no
    requires_grad (a call below autograd). None where the extension was not built, or the exchange
    API is of a major version it does not read."""
    native, _ = native_types()
    if native is None or exchange is None:
        return None
    try:
        call: HotCall = native(tuple(op), torch_types, prepared, exchange, grad_enabled).call
    except ValueError:  # an exchange API of another major version
        return None
    return call


def bare_launch(launch: Any) -> Any:
    """A kernel's bound launch method as the hot call calls it fastest: its C Launcher itself
    (called with no bound method between), or the method where the extension was not built."""
    _, launcher_type = native_types()
    owner = getattr(launch, "__self__", None)
    if launcher_type is not None and type(owner) is launcher_type:
        return owner
    return launch
