"""kernelpack's MLP kernels as torch custom ops: ``torch.ops.kernelpack.<op>``.

``import kernelpack.torch_ops`` registers them (their schemas, real and fake implementations come
from the op table, :mod:`.table` and :mod:`.torch_impl`; :func:`define` adds any entry) (once; importing kernelpack itself never imports
torch). Each op has a fake (meta) implementation, so torch.compile traces it without a graph
break (``fullgraph=True``) and CUDA graphs capture it; the functional ops have autograd formulas
whose backward passes are kernels of the same source (``*_backward``), so a model trains through
them:

- ``swiglu(gate, up) -> silu(gate) * up``
- ``silu_and_mul(x) -> silu(x[..., :d]) * x[..., d:]``
- ``rms_norm(x, weight, eps=1e-6)``
- ``add_rms_norm(x, residual, weight, eps=1e-6) -> (rms_norm(x + residual), x + residual)``
- ``fused_add_rms_norm(x, residual, weight, eps=1e-6) -> ()``: the same in place (x gets the norm,
  residual the sum), declared as mutating both, for inference; no autograd (use add_rms_norm).
- the options a model can adopt (:mod:`.options`): ``rms_norm_options(x, weight?, eps, offset=0.0,
  casting_mode="gemma")`` (the Gemma offset, Liger-Kernel's casting modes, weightless with
  ``weight=None``, a float32 weight with 16-bit rows), with autograd; for inference
  ``rms_norm_options_in_place`` and ``fused_add_rms_norm_options`` over views at any row stride;
  ``swiglu_scaled(gate, up, gate_multiplier=1.0, down_multiplier=1.0)`` (Falcon-H1), with
  autograd; ``silu_and_mul_as_torch(x)``, bit-identical to ``F.silu(x[..., :d]) * x[..., d:]``
  (torch's roundings), with autograd;
- ``rms_norm_with_scale(x, weight, eps=1e-6) -> (rms_norm(x), row scales)`` and
  ``add_rms_norm_with_scale(x, residual, weight, eps=1e-6) -> (norm, sum, row scales)``: the two
  norms with each row's scale 1 / sqrt(mean(x^2) + eps) besides (float32, shape x.shape[:-1]),
  which their backward reads, so that it computes one sum a row instead of two. rms_norm and
  add_rms_norm take these where a gradient is wanted (the scales are not differentiable), and
  stay on the inference path, which stores no scales, where none is.

Inputs may be any layout (they are made contiguous), on one GPU, of one dtype among float32,
float16 and bfloat16; a bad argument raises kernelpack's UsageError (a ValueError) naming it, from
the fake implementation as well, so torch.compile reports it while tracing. torch on ROCm names
its GPUs "cuda" too: the ops are registered for the CUDA dispatch key, which serves both vendors.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...devices.arrays import host_tensor_message
from ...errors import UsageError
from . import hot
from .table import TABLE, Op, schema
from .torch_impl import Impl, implementations

NAMESPACE = "kernelpack"
SCHEMAS = {name: schema(op) for name, op in TABLE.items()}  # name -> schema

_lock = threading.Lock()
_LIBRARY: list[Any] = []  # the torch.library.Library, kept alive: dropping it unregisters the ops
_KEYSETS_KEPT = 256  # keysets an Autograd kernel remembers before its memo starts over
# op -> (real, fake), as defined (the Autograd kernels call the real one straight)
IMPLEMENTATIONS: dict[str, tuple[Impl, Impl]] = {}
# The forward ops' hot calls below autograd, which their CUDA implementations try first
HOT = hot.HOT_BELOW_AUTOGRAD


# ---- autograd: the backward passes are kernels too --------------------------------------------


def _save_swiglu(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0], inputs[1])


def _swiglu_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    gate, up = ctx.saved_tensors
    grad_gate, grad_up = torch.ops.kernelpack.swiglu_backward(grad, gate, up)
    return grad_gate, grad_up


def _save_silu_and_mul(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.save_for_backward(inputs[0])


def _silu_and_mul_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    result: torch.Tensor = torch.ops.kernelpack.silu_and_mul_backward(grad, x)
    return result


# The norms' row scales are a by-product for the backward, not a function to differentiate:
# marked so, they get no gradient. The gradients of outputs that reached no loss stay None
# (set_materialize_grads(False)): materialised, the row scales' zeros cost a fill kernel in every
# backward (torch.profiler; docs/bench-mlp-notes.md).


def _save_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(inputs[0], inputs[1], output[1])  # x, the weight, the row scales


def _rms_norm_grad(
    ctx: Any, grad: Tensor | None, grad_row_scales: Tensor | None
) -> tuple[Tensor | None, ...]:
    if grad is None:
        return None, None, None
    x, weight, row_scales = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.kernelpack.rms_norm_backward(grad, x, weight, row_scales)
    return grad_x, grad_weight, None


def _save_add_rms_norm(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.mark_non_differentiable(output[2])
    ctx.set_materialize_grads(False)
    # the sum, as stored, the weight and the row scales
    ctx.save_for_backward(output[1], inputs[2], output[2])


def _add_rms_norm_grad(
    ctx: Any, grad: Tensor | None, grad_sum: Tensor | None, grad_row_scales: Tensor | None
) -> tuple[Tensor | None, ...]:
    summed, weight, row_scales = ctx.saved_tensors
    if grad is None:  # only the sum reached a loss: its gradient is x's and the residual's
        return grad_sum, grad_sum, None, None
    if grad_sum is None:
        grad_input, grad_weight = torch.ops.kernelpack.rms_norm_backward(
            grad, summed, weight, row_scales
        )
    else:
        grad_input, grad_weight = torch.ops.kernelpack.add_rms_norm_backward(
            grad, grad_sum, summed, weight, row_scales
        )
    # x and residual reach the output only through their sum: one gradient serves both (as
    # autograd's own add does), so the backward writes it once
    return grad_input, grad_input, grad_weight, None


# The options' formulas (kernelpack.ops.mlp.options). Their scalars follow the tensors in
# `inputs` (filled with their defaults); their gradients are None, one for each of the schema's
# arguments (autograd takes trailing Nones past the arguments a call gave, never too few).


def _save_norm_options(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.mark_non_differentiable(output[1])
    ctx.set_materialize_grads(False)
    ctx.offset = inputs[3]
    ctx.save_for_backward(inputs[0], inputs[1], output[1])  # x, the weight (or None), the scales


def _norm_options_grad(
    ctx: Any, grad: Tensor | None, grad_row_scales: Tensor | None
) -> tuple[Tensor | None, ...]:
    if grad is None:
        return None, None, None, None, None
    x, weight, row_scales = ctx.saved_tensors
    grad_x, grad_weight = torch.ops.kernelpack.rms_norm_options_backward(
        grad, x, weight, row_scales, ctx.offset
    )
    return grad_x, (None if weight is None else grad_weight), None, None, None


def _save_swiglu_scaled(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    ctx.multipliers = inputs[2:4]
    ctx.save_for_backward(inputs[0], inputs[1])


def _swiglu_scaled_grad(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
    gate, up = ctx.saved_tensors
    grad_gate, grad_up = torch.ops.kernelpack.swiglu_scaled_backward(
        grad, gate, up, *ctx.multipliers
    )
    return grad_gate, grad_up, None, None


# op -> (backward, setup_context) of its autograd formula
AUTOGRAD: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "swiglu": (_swiglu_grad, _save_swiglu),
    "silu_and_mul": (_silu_and_mul_grad, _save_silu_and_mul),
    "rms_norm_with_scale": (_rms_norm_grad, _save_rms_norm),
    "add_rms_norm_with_scale": (_add_rms_norm_grad, _save_add_rms_norm),
    "rms_norm_options_with_scale": (_norm_options_grad, _save_norm_options),
    "swiglu_scaled": (_swiglu_scaled_grad, _save_swiglu_scaled),
    # torch's roundings change the forward's bits, not its derivative
    "silu_and_mul_as_torch": (_silu_and_mul_grad, _save_silu_and_mul),
}

# op -> (the op with its autograd formula, how many of its results are the op's): where a
# gradient is wanted the norms run as their _with_scale ops, whose row scales the backward reads,
# and return the results they share; where none is, they stay on the hot path (no scales stored).
THROUGH: dict[str, tuple[str, int]] = {
    "rms_norm": ("rms_norm_with_scale", 1),
    "add_rms_norm": ("add_rms_norm_with_scale", 2),
    "rms_norm_options": ("rms_norm_options_with_scale", 1),
}


def _with_grad(name: str) -> Callable[..., Any]:
    """The op's kernel (keyset, *args) where a gradient is wanted: the one
    torch.library.register_autograd makes from its AUTOGRAD formula, or for a THROUGH op a call
    of the op that has the formula (dispatched afresh, so that its own Autograd kernel records
    the backward) and the results the two share."""
    from torch._library import autograd as library_autograd  # what register_autograd uses

    ops = getattr(torch.ops, NAMESPACE)
    if name in THROUGH:
        through, shared = THROUGH[name]
        formula_op = getattr(ops, through).default
        if shared == 1:
            return lambda keyset, *args: formula_op(*args)[0]
        return lambda keyset, *args: formula_op(*args)[:shared]
    backward, setup = AUTOGRAD[name]
    return library_autograd.make_autograd_impl(
        getattr(ops, name).default, library_autograd.Info(backward, setup)
    )


def _autograd_kernel(name: str) -> Callable[..., Any]:
    """The op's kernel for the Autograd dispatch key: where a gradient is wanted,
    :func:`_with_grad`'s; otherwise, on plain CUDA tensors with nothing between autograd and the
    CUDA kernel (no mode, fake or functional tensor, vmap: the keys left below autograd show it),
    the CUDA implementation at once (its hot call first, for the ops that have one).

    Why: register_autograd's kernel redispatches even when no gradient is wanted, through Python
    frames that cost more than the launch (profiled, docs/bench-mlp-notes.md).
    Anything else takes the redispatch, as register_autograd's kernel would. Which keysets go
    straight to CUDA is remembered by the keyset's bits (one call where the keyset arithmetic
    takes four, each a few hundred ns).
    """
    op = getattr(getattr(torch.ops, NAMESPACE), name).default
    with_grad = _with_grad(name)
    real = IMPLEMENTATIONS[name][0]
    below_autograd = torch._C._after_autograd_keyset
    falls_through = torch._C.DispatchKeySet(torch._C.DispatchKey.ADInplaceOrView)  # functional op
    cuda = torch._C.DispatchKey.CUDA
    grad_enabled, any_requires_grad = torch.is_grad_enabled, torch._C._any_requires_grad

    straight: dict[int, bool] = {}  # keyset's bits -> whether CUDA is next below autograd
    # The CUDA implementation's hot call, made here without its Python frame; anything it does
    # not take goes to the implementation. The dispatcher leaves a trailing argument given at its
    # default out of args (eps=1e-06), which the hot call then takes from its descriptor, as it
    # takes out= None. The _with_scale ops have none (the hot path stores no row scales).
    hot_call = HOT[name] if name in hot.SPECS else hot.not_hot

    def kernel(keyset: Any, *args: Any) -> Any:
        if grad_enabled() and any_requires_grad(*args):
            return with_grad(keyset, *args)
        bits = keyset.raw_repr()
        cuda_next = straight.get(bits)
        if cuda_next is None:
            if len(straight) >= _KEYSETS_KEPT:
                straight.clear()
            below = keyset & below_autograd
            cuda_next = straight[bits] = (below - falls_through).highestPriorityTypeId() == cuda
        if cuda_next:
            result = hot_call(*args)
            return real(*args) if result is NotImplemented else result
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & below_autograd, *args)

    return kernel


def _on_host(op: Op) -> Callable[..., Any]:
    """``op``'s CPU kernel: no kernel of kernelpack runs on the CPU, and without one torch ends a
    call on CPU tensors in its dispatcher's list of every registered key; this one says in one
    line where the tensor is and what to do (kernelpack.nn's modules on CPU tensors too)."""
    found = re.match(r"\w+\(Tensor(?:\(\w!\))? (\w+)", schema(op))
    assert found is not None, schema(op)  # every op's first argument is a tensor
    first = found.group(1)

    def kernel(*args: Any) -> Any:
        where = next(str(a.device) for a in args if isinstance(a, Tensor))
        raise UsageError(host_tensor_message(first, where, torch))

    return kernel


def define(library: Any, op: Op) -> None:
    """Define ``op`` in ``library`` (a torch.library.Library of the kernelpack namespace): its
    schema, its real (CUDA) and fake implementations, all from its table entry."""
    library.define(schema(op))
    real, fake = IMPLEMENTATIONS[op.name] = implementations(op)
    library.impl(op.name, real, "CUDA")
    library.impl(op.name, _on_host(op), "CPU")
    torch.library.register_fake(f"{NAMESPACE}::{op.name}", fake, lib=library)


def _traced_through() -> None:
    """Give each C hot call of kernelpack.mlp a polyfill that torch.compile traces instead (its
    tracer cannot enter a C function): the call's torch op (:func:`.hot.traced_call`). Only
    where torch's compiler is loaded already, as torch.compile loads it (importing it here would
    cost every process seconds); calls traced before take kernelpack.mlp's full path, which goes
    to the torch op under the compiler too. A process that ran this before loading the compiler
    gets torch.compile's graph break at the hot call: torch.ops.kernelpack and kernelpack.nn are
    what to compile."""
    if "torch._dynamo" not in sys.modules:
        return
    for name, call in hot.HOT.items():
        if call is hot.not_hot:
            continue

        def polyfill(*args: Any, name: str = name) -> Any:
            return hot.traced_call(name, args, torch.ops.kernelpack)

        torch._dynamo.substitute_in_graph(call, skip_signature_check=True)(polyfill)


def register() -> None:
    """Define the ops of the table in torch's ``kernelpack`` namespace, once per process."""
    if _LIBRARY:
        return
    with _lock:
        if _LIBRARY:
            return
        hot.torch_enable(torch)  # the hot calls, which the Autograd kernels take
        make_library: Any = torch.library.Library  # untyped in torch
        library = make_library(NAMESPACE, "DEF")
        for op in TABLE.values():
            define(library, op)
        for name in (*AUTOGRAD, *THROUGH):
            library.impl(name, _autograd_kernel(name), "Autograd", with_keyset=True)
        _LIBRARY.append(library)
        _traced_through()


register()
