"""The MLP kernels' launch geometry: pure functions from a checked shape to a kernel and its grid.

Nothing here touches a GPU: a shape, a dtype and the device's facts (:class:`DeviceFacts`: its
code-object target and multiprocessor count) give the kernel form and geometry (a :class:`Plan`),
so every choice is testable on any machine. The constants are :mod:`.tuning`'s.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from ...devices.pointers import pointer_of
from .forms import offered
from .tuning import (
    BACKWARD_CACHED_CHUNKS,
    BACKWARD_THREADS_PER_SM,
    BLOCK_MIN,
    CACHED_CHUNKS,
    ELEMENTWISE_BLOCK,
    FIXED_CHUNKS,
    FIXED_COLUMNS,
    FIXED_ROW_VECTORS,
    MAX_GRID_THREADS,
    MAX_GRID_Y,
    NARROW_BYTES,
    ROW_BLOCK_MAX,
    ROW_SCALE_DTYPES,
    SHORT_BACKWARD_CHUNKS,
    SHORT_BACKWARD_THREADS,
    SHORT_ROW_VECTORS_MAX,
    STREAMING_FROM_ROWS,
    STREAMING_MAX_BYTES,
    VECTOR_BYTES,
    WEIGHT_GRAD_COLUMNS,
    WEIGHT_GRAD_COLUMNS_MAX,
    WEIGHT_GRAD_SLICES,
    WEIGHT_GRAD_THREADS,
    family,
)

# dtype name -> the template argument of its kernels: mlp.cu defines each op as a template,
# instantiated per storage type; the index names it so: "mlp::swiglu<float>" (docs/loader.md)
KERNEL_TYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
SUPPORTED = ", ".join(KERNEL_TYPE)  # the dtypes, for messages
ITEM_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


class DeviceFacts(NamedTuple):
    """What the geometry reads of a device: its code-object target ("sm_90", "gfx942"), which
    picks the tuning family, and its multiprocessor (SM or CU) count, which sizes the grids that
    want a block a multiprocessor."""

    target: str
    multiprocessors: int


def kernel_name(op: str, dtype: str, *arguments: int) -> str:
    """The kernel of ``op`` ("swiglu") for ``dtype`` ("bfloat16"): "mlp::swiglu<__nv_bfloat16>";
    a template's further arguments after the type ("mlp::rms_norm_fixed<float, 4096>")."""
    return "mlp::{}<{}>".format(op, ", ".join((KERNEL_TYPE[dtype], *map(str, arguments))))


# ---- launch geometry: pure integer functions of the shape -------------------------------------


def _grid_cap(threads_per_block: int) -> int:
    return max(1, MAX_GRID_THREADS // threads_per_block)


def _vector_width(dtype: str, vector_bytes: int = VECTOR_BYTES) -> int:
    return vector_bytes // ITEM_SIZE[dtype]


def widest_vector_bytes(op: str, outputs: int, dtype: str) -> int:
    """The vector an elementwise op's grid is sized for over ``outputs`` elements of the
    forward's output, unless that grid would be short of blocks: 16 bytes, 8 for the backwards
    past STREAMING_MAX_BYTES moved (their plain exact forms *_backward_exact<T, 8>: mlp.cu builds
    their 16-byte forms streaming only; docs/mlp-tuning.md has the measurement)."""
    if op.endswith("_backward") and not within_streaming_bytes(op, outputs, dtype):
        return NARROW_BYTES
    return VECTOR_BYTES


def within_streaming_bytes(op: str, outputs: int, dtype: str) -> bool:
    """Whether ``op`` over ``outputs`` elements of the forward's output moves at most
    STREAMING_MAX_BYTES: its exact form streams (16-byte vectors, streaming cache hints), where
    past it the plain forms take over (the backwards' in 8-byte vectors). The one test both
    choices read, so that they agree: mlp.cu builds no 16-byte plain backward."""
    return (
        offered("exact_streaming") and elementwise_bytes(op, outputs, dtype) <= STREAMING_MAX_BYTES
    )


def swiglu_geometry(
    n: int, dtype: str, multiprocessors: int, widest: int = VECTOR_BYTES
) -> tuple[int, int]:
    """(grid, block) of the elementwise kernels over n elements: one vector of ``widest`` bytes
    a thread, or one 8-byte vector where that grid would have fewer blocks than the device has
    multiprocessors (twice the blocks, half the chain of sigmoids a thread)."""
    chunks = -(-n // _vector_width(dtype, widest))
    if -(-chunks // ELEMENTWISE_BLOCK) < multiprocessors and offered("narrow"):
        chunks = -(-n // _vector_width(dtype, NARROW_BYTES))
    return min(-(-chunks // ELEMENTWISE_BLOCK), _grid_cap(ELEMENTWISE_BLOCK)), ELEMENTWISE_BLOCK


def silu_and_mul_geometry(
    rows: int, cols: int, dtype: str, multiprocessors: int, widest: int = VECTOR_BYTES
) -> tuple[tuple[int, int], int]:
    """((grid x over the columns, grid y over the rows), block) of silu_and_mul and its backward:
    one vector of ``widest`` bytes a thread, or one 8-byte vector where that grid would be short
    of a block a multiprocessor."""
    grid_y = min(rows, MAX_GRID_Y)
    for vector_bytes in (widest, NARROW_BYTES) if offered("narrow") else (widest,):
        chunks = -(-cols // _vector_width(dtype, vector_bytes))
        block = min(max(BLOCK_MIN, 1 << (chunks - 1).bit_length()), ELEMENTWISE_BLOCK)
        grid_x = min(-(-chunks // block), _grid_cap(block * grid_y))
        if grid_x * grid_y >= multiprocessors:
            break
    return (grid_x, grid_y), block


class ElementwiseLaunch(NamedTuple):
    """An elementwise op's launch for a shape: ``name`` the kernel on ``grid`` for pointers
    aligned to ``alignment`` bytes (an exact form, "mlp::swiglu_exact<float, 16>" or
    "mlp::swiglu_exact_streaming<float>", where :func:`exact_vector_bytes` allows it; else the
    general kernel, alignment 1), ``general`` the
    general kernel ("mlp::swiglu<float>") on ``general_grid``, which takes the same arguments and
    any alignment; ``block`` the threads of a block of both. The exact forms do not test their
    pointers (mlp.cu): :meth:`kernel_for` is the choice for a call's pointers."""

    name: str
    grid: Any  # int, or (x, y) for silu_and_mul's 2-D forms
    general: str
    general_grid: Any
    block: int
    alignment: int

    def kernel_for(self, pointers_alignment: int) -> tuple[str, Any]:
        """(kernel, grid) for pointers aligned to ``pointers_alignment`` (:func:`alignment_of`)."""
        if pointers_alignment % self.alignment == 0:
            return self.name, self.grid
        return self.general, self.general_grid


def swiglu_launch(op: str, n: int, dtype: str, multiprocessors: int) -> ElementwiseLaunch:
    """``op``'s launch ("swiglu" or "swiglu_backward") over n elements."""
    grid, block = swiglu_geometry(n, dtype, multiprocessors, widest_vector_bytes(op, n, dtype))
    vector_bytes = exact_vector_bytes(grid * block, 1, n, dtype)
    return _elementwise_launch(op, dtype, vector_bytes, grid, block, 1, n)


def silu_and_mul_launch(
    op: str, rows: int, cols: int, dtype: str, multiprocessors: int
) -> ElementwiseLaunch:
    """``op``'s launch ("silu_and_mul" or "silu_and_mul_backward") over rows of cols outputs."""
    widest = widest_vector_bytes(op, rows * cols, dtype)
    (grid_x, grid_y), block = silu_and_mul_geometry(rows, cols, dtype, multiprocessors, widest)
    vector_bytes = exact_vector_bytes(grid_x * block, rows, cols, dtype) if grid_y == rows else 0
    return _elementwise_launch(op, dtype, vector_bytes, (grid_x, grid_y), block, rows, cols)


def elementwise_bytes(op: str, outputs: int, dtype: str) -> int:
    """The bytes ``op`` reads and writes for ``outputs`` elements of the forward's output: gate
    and up read, the output written (3 arrays of that size); backward: gate, up and the gradient
    read, both input gradients written (5)."""
    arrays = 5 if op.endswith("_backward") else 3
    return arrays * outputs * ITEM_SIZE[dtype]


def alignment_of(*pointers: Any) -> int:
    """The largest power of two, up to VECTOR_BYTES, that divides every address (ints, or arrays
    the launcher reads: :func:`kernelpack.devices.pointers.pointer_of`); a null pointer divides by any."""
    bits = 0
    for pointer in pointers:
        bits |= pointer_of(pointer)
    return min(bits & -bits, VECTOR_BYTES) if bits else VECTOR_BYTES


def exact_vector_bytes(threads: int, rows: int, cols: int, dtype: str) -> int:
    """The vector (8 or 16 bytes) of the elementwise kernels' exact form (mlp.cu swiglu_exact: a
    thread for one vector, 32-bit indices, no loop) over ``rows`` rows of ``cols`` elements (a
    row's gate and up, 2 * cols, for silu_and_mul) with ``threads`` threads a row, or 0 where it
    does not cover them. The vector is the one the grid was sized for: 8 bytes where the threads
    cover a row in 8-byte vectors, else 16; the form needs a row of a whole number of them, a
    thread for each, and fewer than 2**31 elements in the largest array."""
    vector_bytes = NARROW_BYTES
    if threads * _vector_width(dtype, vector_bytes) < cols:
        vector_bytes = VECTOR_BYTES
    width = _vector_width(dtype, vector_bytes)
    covered = cols % width == 0 and threads * width >= cols
    return vector_bytes if covered and rows * 2 * cols < MAX_GRID_THREADS else 0


def _elementwise_launch(
    op: str, dtype: str, vector_bytes: int, grid: Any, block: int, rows: int, cols: int
) -> ElementwiseLaunch:
    """An elementwise op's launch over ``rows`` rows of ``cols`` elements of the forward's
    output (swiglu's: one row of n) on ``grid``: its exact form in vectors of ``vector_bytes``,
    or (0) its general kernel alone."""
    general = kernel_name(op, dtype)
    if not vector_bytes or not offered("exact"):
        return ElementwiseLaunch(general, grid, general, grid, block, 1)
    exact = exact_kernel_name(op, dtype, vector_bytes, rows * cols)
    return ElementwiseLaunch(exact, grid, general, grid, block, vector_bytes)


def exact_kernel_name(op: str, dtype: str, vector_bytes: int, outputs: int) -> str:
    """``op``'s exact form in vectors of ``vector_bytes`` over ``outputs`` elements of the
    forward's output: 16-byte vectors through streaming cache hints where the call moves at most
    STREAMING_MAX_BYTES ("mlp::swiglu_exact_streaming<float>"), else plain
    ("mlp::swiglu_exact<float, 16>"; the backwards past it take 8-byte vectors,
    :func:`widest_vector_bytes`)."""
    if vector_bytes == VECTOR_BYTES and within_streaming_bytes(op, outputs, dtype):
        return kernel_name(op + "_exact_streaming", dtype)
    return kernel_name(op + "_exact", dtype, vector_bytes)


def _threads_needed(cols: int, dtype: str, cached: int) -> int:
    """Threads a row of ``cols`` needs so that each keeps at most ``cached`` vectors."""
    vectors = -(-cols // _vector_width(dtype))
    return -(-vectors // cached)


def _row_threads(cols: int, dtype: str, cached: int) -> int:
    """Threads a row gets: a power of two, enough that each keeps at most ``cached`` vectors in
    registers."""
    needed = _threads_needed(cols, dtype, cached)
    return min(1 << (needed - 1).bit_length(), ROW_BLOCK_MAX)


def _forward_row_threads(cols: int, dtype: str) -> int:
    """Threads a row of the general forward norms: as :func:`_row_threads` for rows that share a
    block (BLOCK_MIN threads or fewer), whole blocks of BLOCK_MIN past that, so that no thread
    idles through a cached vector the row does not have (docs/mlp-tuning.md)."""
    needed = _threads_needed(cols, dtype, CACHED_CHUNKS)
    if needed <= BLOCK_MIN:
        return _row_threads(cols, dtype, CACHED_CHUNKS)
    return min(-(-needed // BLOCK_MIN) * BLOCK_MIN, ROW_BLOCK_MAX)


def row_geometry(rows: int, cols: int, dtype: str) -> tuple[int, tuple[int, int]]:
    """The grid, and the block as (threads per row, rows per block), of the RMSNorm forward
    kernels. Rows that need fewer than BLOCK_MIN threads share a block of BLOCK_MIN; rows of more
    take a block each (docs/mlp-tuning.md). The kernel is bounded to 64 registers (mlp.cu
    kRowNormMinBlocks; tests/test_build.py checks the built cubin)."""
    threads = _forward_row_threads(cols, dtype)
    per_block = max(1, BLOCK_MIN // threads)
    grid = min(-(-rows // per_block), _grid_cap(threads * per_block))
    return grid, (threads, per_block)


def short_rows(rows: int, cols: int, dtype: str, multiprocessors: int) -> bool:
    """Whether the forward norms of ``rows`` rows of ``cols`` take the short-row kernels: at most
    a row a multiprocessor, each a whole number of 16-byte vectors, at most one a thread and
    SHORT_ROW_VECTORS_MAX in all."""
    width = _vector_width(dtype)
    return (
        0 < rows <= multiprocessors
        and cols % width == 0
        and cols // width <= SHORT_ROW_VECTORS_MAX
        and offered("short_rows")
    )


def fixed_threads(cols: int, dtype: str) -> int:
    """Threads a row of the fixed-length norms for rows of ``cols`` (one of FIXED_COLUMNS), as
    mlp.cu's FixedRow<T, cols>::kThreads: two vectors a thread up to FIXED_ROW_VECTORS vectors,
    four past."""
    vectors = cols // _vector_width(dtype)
    chunks = -(-vectors // FIXED_ROW_VECTORS) * FIXED_CHUNKS
    return vectors // chunks


class NormLaunch(NamedTuple):
    """A forward norm's launch: its kernel, grid and block (threads per row, rows per block)."""

    name: str
    grid: int
    block: tuple[int, int]


def norm_launch(op: str, rows: int, cols: int, dtype: str, device: DeviceFacts) -> NormLaunch:
    """The launch of a forward norm (``op`` "rms_norm" or "add_rms_norm") on ``device``: for rows
    of one of FIXED_COLUMNS the fixed-length kernel (exact: a block for each row, at
    :func:`fixed_threads`, so for fewer rows than a grid of MAX_GRID_THREADS holds; the few-row
    form from STREAMING_FROM_ROWS rows to a row a multiprocessor, the form for many rows
    elsewhere), else the short-row kernel, one block a row and a thread per vector (a power of two, at
    least BLOCK_MIN), where :func:`short_rows` says so, else the general kernel at
    :func:`row_geometry`."""
    fixed = cols in FIXED_COLUMNS and 0 < rows * fixed_threads(cols, dtype) < MAX_GRID_THREADS
    if fixed and offered("fixed"):
        few_rows = STREAMING_FROM_ROWS.get((op, dtype), 1) <= rows <= device.multiprocessors
        streaming = few_rows and offered("fixed_streaming")
        name = kernel_name(f"{op}_fixed" if streaming else f"{op}_fixed_full", dtype, cols)
        return NormLaunch(name, rows, (fixed_threads(cols, dtype), 1))
    if short_rows(rows, cols, dtype, device.multiprocessors):
        chunks = cols // _vector_width(dtype)
        threads = max(BLOCK_MIN, 1 << (chunks - 1).bit_length())
        return NormLaunch(kernel_name(f"{op}_short", dtype), rows, (threads, 1))
    grid, block = row_geometry(rows, cols, dtype)
    return NormLaunch(kernel_name(op, dtype), grid, block)


def backward_row_geometry(rows: int, cols: int, dtype: str, device: DeviceFacts) -> tuple[int, int]:
    """(grid, threads per row) of the RMSNorm backward kernel on ``device``: one row a block at
    a time, at least BLOCK_MIN threads and at most its family's backward_threads_max (the
    kernel's bound there), and as many blocks as are resident at once (at most one a row), each
    of which writes one row of float32 partial weight gradients that the second pass sums in a
    fixed order."""
    threads = max(BLOCK_MIN, _row_threads(cols, dtype, BACKWARD_CACHED_CHUNKS))
    threads = min(threads, family(device.target).backward_threads_max)
    return min(rows, device.multiprocessors * BACKWARD_THREADS_PER_SM // threads), threads


def short_backward_threads(rows: int, cols: int, dtype: str, multiprocessors: int) -> int:
    """Threads a row of the short-row backward for ``rows`` rows of ``cols`` (a power of two, at
    least BLOCK_MIN: a thread a 16-byte vector up to SHORT_BACKWARD_THREADS, then up to
    SHORT_BACKWARD_CHUNKS vectors a thread), or 0 where the shape takes the general backward:
    more rows than multiprocessors, rows not a whole number of vectors, or too long for
    the registers. Its grid is one block a row."""
    width = _vector_width(dtype)
    chunks = cols // width
    if not (
        0 < rows <= multiprocessors
        and cols % width == 0
        and 0 < chunks <= SHORT_BACKWARD_CHUNKS * SHORT_BACKWARD_THREADS
        and offered("short_backward")
    ):
        return 0
    return max(BLOCK_MIN, min(SHORT_BACKWARD_THREADS, 1 << (chunks - 1).bit_length()))


def fixed_backward(cols: int, dtype: str) -> bool:
    """Whether the short-row backward of rows of ``cols`` takes the fixed-length kernel
    (rms_norm_backward_fixed, the row length a template argument): one of FIXED_COLUMNS that
    SHORT_BACKWARD_THREADS threads of one or SHORT_BACKWARD_CHUNKS vectors cover exactly (mlp.cu
    instantiates those: 4096 columns, and 8192 of 16-bit types)."""
    width = _vector_width(dtype)
    per_thread, left = divmod(cols // width, SHORT_BACKWARD_THREADS)
    return (
        cols in FIXED_COLUMNS
        and cols % width == 0
        and left == 0
        and per_thread in (1, SHORT_BACKWARD_CHUNKS)
        and offered("fixed_backward")
    )


def short_backward_scratch(rows: int, cols: int, dtype: str) -> tuple[int, ...] | None:
    """The shape of the float32 scratch the short-row backward of ``rows`` rows leaves for its
    weight sum: a row of shares a row (float32), or None where it needs none: one row (the kernel
    writes the weight gradient itself) and ROW_SCALE_DTYPES (the sum reads the inputs and the
    forward's row scales)."""
    if rows == 1 or sums_from_inputs(dtype):
        return None
    return (rows, cols)


def sums_from_inputs(dtype: str) -> bool:
    """Whether the short backward of more than one row in ``dtype`` has its weight gradient
    summed from the inputs and the forward's row scales (ROW_SCALE_DTYPES), not from the float32
    shares it leaves in scratch: mlp.cu's kRowScales, fixed by the type when the kernel is built,
    so no form the host could retire."""
    return dtype in ROW_SCALE_DTYPES


def short_backward_kernel(threads: int, cols: int, dtype: str) -> str:
    """The short-row backward's kernel for rows of ``cols`` at ``threads`` a row
    (:func:`short_backward_threads`): the fixed-length kernel where :func:`fixed_backward` says
    so, else rms_norm_backward_short."""
    if threads == SHORT_BACKWARD_THREADS and fixed_backward(cols, dtype):
        return kernel_name("rms_norm_backward_fixed", dtype, cols)
    return kernel_name("rms_norm_backward_short", dtype)


def weight_grad_inputs_launch(rows: int, cols: int, dtype: str) -> tuple[str, int, tuple[int, int]]:
    """(kernel, grid, block) of the weight sum from the inputs of ``rows`` rows of ``cols``
    (:func:`sums_from_inputs`): a column a thread (:func:`weight_grad_geometry`)."""
    grid, block = weight_grad_geometry(cols, rows)
    return kernel_name("rms_norm_weight_grad_inputs", dtype), grid, block


def weight_grad_geometry(cols: int, partial_rows: int) -> tuple[int, tuple[int, int]]:
    """(grid, block as (columns, slices)) of the weight-gradient sum over ``partial_rows`` rows
    (of partial sums, or the short backward's rows of inputs): WEIGHT_GRAD_SLICES slices of the
    rows by 32 columns (128 bytes a row of partial sums, read whole), one block per column group;
    with fewer partial rows than slices, a slice per row (a power of two) and the block's other
    threads on more columns, up to 128 (docs/mlp-tuning.md). A function of
    the shape alone (the partial rows are backward_row_geometry's grid), so a shape's sum, and its
    bits, are the same every run."""
    slices = min(WEIGHT_GRAD_SLICES, 1 << max(partial_rows - 1, 0).bit_length())
    columns = max(WEIGHT_GRAD_COLUMNS, min(WEIGHT_GRAD_COLUMNS_MAX, WEIGHT_GRAD_THREADS // slices))
    return min(-(-cols // columns), _grid_cap(columns * slices)), (columns, slices)


# ---- plans: a forward op's launch for a shape, as every path launches it ------------------------


class Plan(NamedTuple):
    """A forward op's launch for one shape: the kernel ``name`` on ``grid`` and ``block`` for
    pointers aligned to ``alignment`` bytes, ``general`` (its kernel and grid: same block and
    arguments, any alignment) for pointers short of it (None where the alignment is 1), the
    integers the kernel takes after the tensors' pointers (``sizes``; eps follows where the op has
    one)."""

    name: str
    grid: Any  # int, or (x, y)
    block: Any  # int, or (x, y)
    sizes: tuple[int, ...]
    alignment: int = 1
    general: tuple[str, Any] | None = None

    def kernel_for(self, pointers_alignment: int) -> tuple[str, Any]:
        """(kernel, grid) for pointers aligned to ``pointers_alignment`` (:func:`alignment_of`)."""
        if self.general is None or pointers_alignment % self.alignment == 0:
            return self.name, self.grid
        return self.general


def _from_elementwise(launch: ElementwiseLaunch, sizes: tuple[int, ...]) -> Plan:
    general = (launch.general, launch.general_grid) if launch.alignment > 1 else None
    return Plan(launch.name, launch.grid, launch.block, sizes, launch.alignment, general)


def elementwise_plan(
    kernel: str, shape: tuple[int, ...], dtype: str, device: DeviceFacts
) -> Plan | None:
    """swiglu's forms over all the elements of ``shape`` (the kernel takes n)."""
    n = math.prod(shape)
    if not n:
        return None
    return _from_elementwise(swiglu_launch(kernel, n, dtype, device.multiprocessors), (n,))


def halves_plan(
    kernel: str, shape: tuple[int, ...], dtype: str, device: DeviceFacts
) -> Plan | None:
    """silu_and_mul's forms over rows of ``shape``'s last dimension, gate and up its halves (the
    kernel takes rows and the result's columns)."""
    cols = shape[-1] // 2
    rows = math.prod(shape[:-1])
    if not rows * cols:
        return None
    launch = silu_and_mul_launch(kernel, rows, cols, dtype, device.multiprocessors)
    return _from_elementwise(launch, (rows, cols))


def norm_plan(kernel: str, shape: tuple[int, ...], dtype: str, device: DeviceFacts) -> Plan | None:
    """A forward norm's form (:func:`norm_launch`) over the rows of ``shape``'s last dimension
    (the kernel takes rows, columns, then eps)."""
    cols = shape[-1]
    rows = math.prod(shape[:-1])
    if not rows * cols:
        return None
    launch = norm_launch(kernel, rows, cols, dtype, device)
    return Plan(launch.name, launch.grid, launch.block, (rows, cols))
