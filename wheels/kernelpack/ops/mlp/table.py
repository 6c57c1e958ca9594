"""The MLP ops, one table entry each: what every layer reads instead of repeating it.

An :class:`Op` says an op's tensor inputs (their names, the shape and dtype each must have), its
results, whether it takes eps and ``out=``, what it writes in place, and how its kernel is chosen
and launched for a shape (its ``plan``: :mod:`.geometry`), with the null pointers its inference
launch passes after the tensors. From it, and from nothing else:

- the public functions of :mod:`kernelpack.mlp` check their arguments (:mod:`.checks`), allocate
  and launch (:mod:`.api`);
- the torch schemas are written (:func:`schema`), and the fake implementations allocate their
  results (:mod:`.torch_impl`);
- the hot path's descriptor for the C launcher is made (:func:`hot_op`), and its prepared entries
  (:mod:`.hot`).

Shape rules, relative to the first input's shape ``S``: "same" S, "last" S[-1:], "leading"
S[:-1], "half" S with its last dimension halved; of a result, "weight" the weight input's shape
(S[-1:]), or (0,) where the weight is None (a weightless norm has no weight gradient). Rules of the first input itself: "rows" (a
normalised last dimension: at least one, at most MAX_ROW elements), "halves" (a last dimension of
two halves, gate and up). A backward op has no plan (its launch is its own, :mod:`.torch_impl`),
and no public function or hot path.

The options a model can adopt (the Gemma offset, casting modes, weightless norms, a float32 weight,
rows at a stride, SwiGLU's multipliers, torch's SiLU-and-mul roundings: :mod:`.options`) are ops
of their own here, with the scalar arguments they take after eps (:class:`Option`); they launch
the option kernels by hand, so the ops above keep their hot path and their kernels. An in-place
op names the option op that serves its inputs at a row stride (``strided``), read by
:mod:`kernelpack.mlp` and the torch op alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..._tables import unique_index
from ...backends.hotpath import HotOp
from .geometry import DeviceFacts, Plan, elementwise_plan, halves_plan, norm_plan

DEFAULT_EPS = 1e-6  # eps's default in every function and schema that takes it
# the norms' casting modes (Liger-Kernel's) -> mlp.cu's kCast (its comment says what each rounds
# when); the default is the arithmetic of every other norm here: float32, rounded once
CASTING_MODES = {"gemma": 0, "llama": 1, "none": 2}
DEFAULT_CASTING_MODE = "gemma"

# plan(kernel family, the first input's shape, dtype, device) -> its Plan, None for no elements
PlanFn = Callable[[str, tuple[int, ...], str, DeviceFacts], Plan | None]


class Input(NamedTuple):
    """A tensor argument: its name, its shape rule, and its dtype ("same": the first input's, a
    supported one; "float32": that, for the row scales; "weight": the first input's or float32,
    a weight's). ``contiguous``: the torch ops take it as given (it must be contiguous already),
    where they make other inputs contiguous. ``optional``: it may be None (``Tensor?``).
    ``strided``: its rows may lie at any stride (the last dimension's stride 1), as the in-place
    norms take views."""

    name: str
    shape: str = "same"
    dtype: str = "same"
    contiguous: bool = False
    optional: bool = False
    strided: bool = False


class Option(NamedTuple):
    """A scalar argument after eps: its name, torch schema type ("float" or "str"), default, and
    for a str the values it takes."""

    name: str
    kind: str
    default: float | str
    choices: tuple[str, ...] = ()


class Result(NamedTuple):
    """A result: its shape rule and dtype rule, as an Input's."""

    shape: str = "same"
    dtype: str = "same"


class Op(NamedTuple):
    """One op (the module docstring says who reads what)."""

    name: str
    inputs: tuple[Input, ...]
    results: tuple[Result, ...]
    eps: bool = False
    first: str = ""  # the first input's own rule: "", "rows" or "halves"
    out: bool = False  # takes out= for its one result
    in_place: tuple[int, ...] = ()  # inputs written as its results (its results: none)
    kernel: str = ""  # the kernel family its plan launches (its name where empty)
    plan: PlanFn | None = None  # a forward op's launch for a shape; None: launched by hand
    nulls: int = 0  # null pointers after the results on the inference launch (no row scales)
    options: tuple[Option, ...] = ()  # scalar arguments after eps
    # the op (of this table, at its default options) whose kernel takes the inputs written in
    # place as views at a row stride; contiguous ones keep this op's kernels and hot call
    strided: str = ""

    @property
    def kernel_family(self) -> str:
        return self.kernel or self.name


ROWS = "rows"
HALVES = "halves"

_gate, _up = Input("gate"), Input("up")
_x, _residual = Input("x"), Input("residual")
_weight = Input("weight", "last")
_row_scales = Input("row_scales", "leading", "float32", contiguous=True)

# the options' inputs and scalars
_weight_option = Input("weight", "last", "weight", optional=True)
_x_strided, _residual_strided = Input("x", strided=True), Input("residual", strided=True)
_offset = Option("offset", "float", 0.0)
_casting_mode = Option("casting_mode", "str", DEFAULT_CASTING_MODE, tuple(CASTING_MODES))
_norm_options = (_offset, _casting_mode)
_multipliers = (Option("gate_multiplier", "float", 1.0), Option("down_multiplier", "float", 1.0))
_scales = Result("leading", "float32")  # a norm's row scales, which its backward reads


def _norm(name: str, inputs: tuple[Input, ...], results: tuple[Result, ...], **more: Any) -> Op:
    """A norm's entry: eps after its tensors, its first input normalised rows."""
    return Op(name, inputs, results, eps=True, first=ROWS, **more)


def _inference_norm(
    name: str, inputs: tuple[Input, ...], results: tuple[Result, ...], **more: Any
) -> Op:
    """A norm of the hot path: its plan, with the null row scales of a launch that stores none."""
    return _norm(name, inputs, results, plan=norm_plan, nulls=1, **more)


def _option_norm(
    name: str, inputs: tuple[Input, ...], results: tuple[Result, ...], **more: Any
) -> Op:
    """A norm with the options: the Gemma offset and the casting mode after eps."""
    return _norm(name, inputs, results, options=_norm_options, **more)


OPS: tuple[Op, ...] = (
    Op("swiglu", (_gate, _up), (Result(),), out=True, plan=elementwise_plan),
    Op("silu_and_mul", (_x,), (Result("half"),), first=HALVES, out=True, plan=halves_plan),
    _inference_norm("rms_norm", (_x, _weight), (Result(),), out=True),
    _inference_norm("add_rms_norm", (_x, _residual, _weight), (Result(), Result())),
    _inference_norm(
        "fused_add_rms_norm",
        (_x, _residual, _weight),
        (),
        in_place=(0, 1),
        kernel="add_rms_norm",
        strided="fused_add_rms_norm_options",  # vLLM's views of x[..., :hidden]
    ),
    # the training path's forward norms: each row's scale besides (float32, S[:-1])
    _norm("rms_norm_with_scale", (_x, _weight), (Result(), _scales)),
    _norm("add_rms_norm_with_scale", (_x, _residual, _weight), (Result(), Result(), _scales)),
    # the backward ops: the incoming gradient first, then what the forward saved
    Op("swiglu_backward", (Input("grad"), _gate, _up), (Result(), Result())),
    Op("silu_and_mul_backward", (Input("grad", "half"), _x), (Result(),), first=HALVES),
    Op(
        "rms_norm_backward",
        (Input("grad"), _x, _weight, _row_scales),
        (Result(), Result("last")),
        first=ROWS,
    ),
    # one input gradient: x's and residual's are the same (the sum's); `summed` is the sum
    Op(
        "add_rms_norm_backward",
        (Input("grad"), Input("grad_sum"), Input("summed"), _weight, _row_scales),
        (Result(), Result("last")),
        first=ROWS,
    ),
    # ---- the options (:mod:`.options`) ----
    _option_norm("rms_norm_options", (_x, _weight_option), (Result(),)),
    _option_norm("rms_norm_options_with_scale", (_x, _weight_option), (Result(), _scales)),
    # in place over x (a view at any row stride): for inference
    _option_norm("rms_norm_options_in_place", (_x_strided, _weight_option), (), in_place=(0,)),
    # vLLM's fused_add_rms_norm over views at any row stride, with the options
    _option_norm(
        "fused_add_rms_norm_options",
        (_x_strided, _residual_strided, _weight_option),
        (),
        in_place=(0, 1),
    ),
    Op(
        "rms_norm_options_backward",
        (Input("grad"), _x, _weight_option, _row_scales),
        (Result(), Result("weight", "weight")),
        first=ROWS,
        options=(_offset,),
    ),
    Op("swiglu_scaled", (_gate, _up), (Result(),), options=_multipliers),
    Op(
        "swiglu_scaled_backward",
        (Input("grad"), _gate, _up),
        (Result(), Result()),
        options=_multipliers,
    ),
    Op("silu_and_mul_as_torch", (_x,), (Result("half"),), first=HALVES),
)


def by_name(ops: tuple[Op, ...]) -> dict[str, Op]:
    """The ops by name; a name twice is a mistake in the table."""
    return unique_index(ops, lambda op: op.name, "op")


TABLE: Mapping[str, Op] = by_name(OPS)


def subject(op: Op) -> int:
    """The position of the input the rules are relative to: the first, except for a backward op,
    whose incoming gradients come first and are checked against what the forward saved."""
    return next(i for i, tensor in enumerate(op.inputs) if not tensor.name.startswith("grad"))


def hot_op(op: Op) -> HotOp:
    """The op's descriptor for the C hot call (kernelpack.backends.hotpath)."""
    return HotOp(
        inputs=len(op.inputs),
        shapes="".join("w" if i.shape == "last" else "f" for i in op.inputs),
        eps=op.eps,
        out=op.out,
        allocates=0 if op.in_place else len(op.results),
        in_place=op.in_place,
        default_eps=DEFAULT_EPS,
    )


def schema(op: Op) -> str:
    """The op's torch schema: its tensors (those written in place marked ``Tensor(a!)``), eps
    with its default, and its results."""
    aliases = "abcdefgh"
    params = []
    for position, tensor in enumerate(op.inputs):
        mark = f"({aliases[op.in_place.index(position)]}!)" if position in op.in_place else ""
        params.append(f"Tensor{mark}{'?' if tensor.optional else ''} {tensor.name}")
    if op.eps:
        params.append(f"float eps={DEFAULT_EPS!r}")
    for option in op.options:
        default = f'"{option.default}"' if option.kind == "str" else repr(option.default)
        params.append(f"{option.kind} {option.name}={default}")
    returns = ", ".join("Tensor" for _ in op.results)
    if len(op.results) != 1:
        returns = f"({returns})"
    return f"{op.name}({', '.join(params)}) -> {returns}"
