"""The one signature of the walkers run, run_numpy and reference, and what every call does first.

:class:`Walker` writes the signature once (WALK.md's eight arguments, the GPU, and what the
caller asks for). :func:`walker` turns a walk body into a function of that signature: each call
is bound to it and checked (:func:`bind`: the request, the program, primes, depths and target)
before the body sees it as a :class:`WalkCall`; shifts and dirs are left to the body, which alone
knows where they may live (numpy on the host, torch or CuPy on the GPU). With ``exact=True``
the kept walks the body returns are verified on the CPU (kernelpack.walk.verify). :func:`host_walker`
frames a walk of host arrays the way the CPU walkers share: no device, the selection of
kernelpack.walk.select, only the outputs asked for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any, Protocol, cast

from ..devices.argument import Device
from ..devices.arrays import device_string
from ..errors import UsageError
from .inputs import (
    OUTPUTS,
    Request,
    Scalars,
    WalkInputs,
    WalkResult,
    check_inputs,
    check_program,
    check_request,
    check_scalars,
)
from .program import Program
from .select import select
from .targets import Target, parse_target
from .verify import verify_kept


class Walker(Protocol):
    """A walker: the walks of WALK.md for ``program`` from ``shifts`` and ``dirs`` (B, dim),
    modulo ``primes``, to ``depth``, estimates at ``depth1`` and ``depth2`` against ``target``.

    ``device`` is the GPU (run only; the CPU walkers take None): None for the first, "cuda:N" or
    "hip:N", a torch or CuPy device, or an int where every GPU is of one vendor (a bare number
    could mean either vendor's GPU on a mixed machine). ``outputs`` names the WalkResult
    arrays wanted (the others are None); ``min_delta`` and ``top_k`` ask for the hits and the
    best walks (kernelpack.walk.select). With ``exact=True`` the kept walks are verified on the
    CPU (kernelpack.walk.verify): ``top`` and ``hits`` carry their exact delta and digits
    (``Selection.verified``), ranked by it, and the hits are the screen's candidates whose
    exact delta reaches ``min_delta``.
    """

    def __call__(
        self,
        program: Program,
        shifts: object,
        dirs: object,
        primes: object,
        depth: object,
        depth1: object,
        depth2: object,
        target: object,
        device: object = None,
        *,
        outputs: Collection[str] = OUTPUTS,
        min_delta: float | None = None,
        top_k: int = 0,
        exact: bool = False,
    ) -> WalkResult: ...


_SIGNATURE = inspect.signature(Walker.__call__)
SIGNATURE = _SIGNATURE.replace(parameters=list(_SIGNATURE.parameters.values())[1:])  # no self
_SCALARS = ("primes", "depth", "depth1", "depth2", "target")


@dataclass(frozen=True, eq=False)
class WalkCall:
    """One call of a walker, bound to :class:`Walker`'s signature: everything checked but
    shifts and dirs, which stay as the caller gave them."""

    walker: str  # the walker's name, for messages
    program: Program
    shifts: object
    dirs: object
    scalars: Scalars
    device: Device
    request: Request
    goal: Target  # the target as given (scalars.target is the screen's float64 of it)

    def host_inputs(self) -> WalkInputs:
        """Shifts and dirs as host arrays (anything numpy reads), checked."""
        return check_inputs(self.program, self.shifts, self.dirs, self.scalars)


def bind(*args: Any, walker: str = "walk", **kwargs: Any) -> WalkCall:
    """A call's arguments bound to :class:`Walker`'s signature and checked, in WALK.md's order:
    the request, then program, primes, depths and target (each bad one a UsageError naming it)."""
    try:
        bound = SIGNATURE.bind(*args, **kwargs)
    except TypeError as error:
        raise TypeError(f"{walker}(): {error}") from None
    bound.apply_defaults()
    given = bound.arguments
    request = check_request(given["outputs"], given["min_delta"], given["top_k"], given["exact"])
    program = check_program(given["program"])
    scalars = check_scalars(program, *(given[name] for name in _SCALARS))
    goal = parse_target(given["target"])
    device = given["device"]
    if not (device is None or isinstance(device, (int, str))):  # a torch or CuPy device
        device = device_string(device)
    return WalkCall(walker, program, given["shifts"], given["dirs"], scalars, device, request, goal)


def walker(body: Callable[[WalkCall], WalkResult]) -> Walker:
    """``body`` as a walker: each call bound and checked by :func:`bind`, then walked by the
    body; help() shows the shared signature with the body's docstring."""
    name = body.__name__

    def call(*args: Any, **kwargs: Any) -> WalkResult:
        bound = bind(*args, walker=name, **kwargs)
        result = body(bound)
        request = bound.request
        if not request.exact:
            return result
        hits, top = verify_kept(
            bound.program,
            result.hits,
            result.top,
            bound.scalars.depth2,
            bound.goal,
            request.min_delta,
        )
        return replace(result, hits=hits, top=top)

    functools.update_wrapper(call, body)
    vars(call)["__signature__"] = SIGNATURE
    return cast(Walker, call)


def host_walker(walk: Callable[[WalkInputs], WalkResult]) -> Walker:
    """A CPU walker from ``walk``, which returns every output for checked host inputs: the call
    takes no device, and gets the selection it asks for (kernelpack.walk.select's rule) and
    only the outputs it names."""

    def body(call: WalkCall) -> WalkResult:
        if call.device is not None:
            raise UsageError(
                f"device: {call.walker} walks on the CPU and takes no device, got "
                f"{call.device!r}; use kernelpack.walk.run for a GPU"
            )
        inputs = call.host_inputs()
        full = walk(inputs)
        request = call.request
        hits = top = None
        if request.selects:
            hits, top = select(
                full.alive,
                full.est2,
                full.delta2,
                inputs.shifts,
                inputs.dirs,
                request.min_delta,
                request.top_k,
            )
        kept = {name: getattr(full, name) if name in request.outputs else None for name in OUTPUTS}
        return WalkResult(**kept, hits=hits, top=top if request.top_k else None)

    functools.update_wrapper(body, walk)
    return walker(body)
