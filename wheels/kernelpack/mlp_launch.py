"""Launching the MLP kernels: their launch geometry and the calls that start them.

This module's one job is the step from checked sizes to a kernel launch: the constants that mirror
mlp.cu, the pure integer functions that turn a shape into a grid and a block, the per-process cache
of loaded kernels, and one ``launch_*`` function per kernel. Checking arguments and choosing a
framework is :mod:`kernelpack.mlp`'s job; it and :mod:`kernelpack.torch_ops` call these.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .devices.arrays import pointer_of
from .loader.load import load

MODULE = "mlp"

# dtype name -> the template argument of its kernels: mlp.cu defines each op as a template,
# instantiated per storage type; the index names it so: "mlp::swiglu<float>" (docs/loader.md)
KERNEL_TYPE = {"float32": "float", "float16": "__half", "bfloat16": "__nv_bfloat16"}
SUPPORTED = ", ".join(KERNEL_TYPE)  # the dtypes, for messages
ITEM_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}

# Launch geometry; the constants mirror mlp.cu where they must agree with it.
VECTOR_BYTES = 16  # kVectorBytes: the widest load the kernels issue
NARROW_BYTES = 8  # kNarrowBytes: the elementwise kernels' vector on short inputs
# Elementwise inputs whose one-16-byte-vector-a-thread grid has fewer blocks than this (an H100's
# or H200's SMs) get a thread for every 8-byte vector instead: twice the blocks, half the chain
# of sigmoids a thread (the kernels see the grid and take 8-byte vectors; mlp.cu narrow_grid).
NARROW_BELOW_BLOCKS = 132
ELEMENTWISE_BLOCK = 128  # kElementwiseBlockThreads, the elementwise kernels' __launch_bounds__
# The 16-byte exact elementwise forms through streaming cache hints (mlp.cu's *_exact_streaming,
# StreamingAccess) for calls that move at most this many bytes (read and written), through plain
# accesses (*_exact; the backwards in 8-byte vectors, widest_vector_bytes) past it. Measured on the
# H200 over rows of 14336, each call right after a plain kernel that wrote 64 MB elsewhere (as after
# a GEMM), µs, streaming / plain: SwiGLU forward bfloat16 at 22 MB 9.90 / 10.35, 44 MB 14.74 /
# 15.65, 88 MB 25.33 / 25.41, 176 MB 47.12 / 45.86, 352 MB 89.57 / 85.73, 1.4 GB 342.37 / 325.41
# (float32 alike); its backward, bfloat16 at 37 MB 14.48-15.74 / 13.71-13.74, 73 MB 22.16 /
# 22.10-22.66, 147 MB 40.13 / 38.46, 587 MB 148.19 / 140.29, and float32 alike. Back to back (as the
# benchmark times them) streaming was mostly the faster, by 0.1-0.8 µs, but its first call after a
# plain kernel took 342 µs at 16384 x 14336 bfloat16 where the next ones took 323, and in some runs
# every call 334-341 (docs/bench-mlp-notes.md, twenty-first session).
STREAMING_MAX_BYTES = 64 * 2**20
BLOCK_MIN = 64  # the smallest block: a multiple of every wavefront width (32 and 64)
ROW_BLOCK_MAX = 512  # kRowBlockThreads, the row kernels' __launch_bounds__
# The short-row forward norms (rms_norm_short, add_rms_norm_short): one 16-byte vector a thread,
# one block a row, at most kShortRowThreads threads; the host takes them for at most
# SHORT_ROWS_MAX rows (one block a row, all at once on an H100's or H200's 132 SMs).
SHORT_ROW_THREADS = 512  # kShortRowThreads (each thread takes up to two vectors)
SHORT_ROWS_MAX = 132
# ... and for rows of at most this many vectors: on the H200 (2026-11-23, bench-mlp-notes.md) rows
# of 512 vectors (4096 16-bit columns) gained 0.1 µs, rows of 1024 (4096 float32 columns) lost
# 0.5-0.8 µs against the general kernel (1 and 64 rows, both norms).
SHORT_ROW_VECTORS_MAX = 512
# The fixed-length forward norms (rms_norm_fixed, add_rms_norm_fixed: mlp.cu's FixedRow, the row
# length a template argument): the host takes them for rows of these lengths (LLaMA's hidden
# sizes; mlp.cu instantiates each), few or many; a thread takes FIXED_CHUNKS vectors for each
# FIXED_ROW_VECTORS (begun) of a row. They are exact forms: the grid must have a block for each
# row and the rows be of the kernel's length (any alignment). For more than SHORT_ROWS_MAX rows
# both take their form for many rows (rms_norm_fixed_full, bounded to fill an SM;
# add_rms_norm_fixed_full), which reads and writes its rows without the few-row forms' streaming
# cache hints (mlp.cu's StreamingAccess says why). Measured on the H200 against the general
# kernel, the host's choice past 132 rows until then (docs/bench-mlp-notes.md, thirteenth
# session): rows of 5120 took 14-19% less in every dtype, both norms (bfloat16 rms_norm 4096 x
# 5120 23.2 us against 28.6), 512 and 1024 rows of 4096 and 8192 3-13% less, and from 4096 rows
# on within about 1% either way (float16 add_rms_norm 16384 x 8192 1.3% more).
FIXED_COLUMNS = (4096, 5120, 8192)
# (op, dtype) -> the fewest rows that take the streaming few-row form; fewer take the form for many
# rows. 16-bit add_rms_norm's streaming form holds 48 registers where the other holds 43, and
# alone it took longer; from about 64 rows its shorter idle time after it pays. Measured on the
# H200 (docs/bench-mlp-notes.md, nineteenth session), rows of 4096, streaming against not, µs a
# call: bfloat16 1 row 2.49 against 2.30 (Liger-Kernel 2.34), 2 rows 2.49 / 2.39, 8 rows 2.54 /
# 2.50, 64 rows 2.93 / 2.94; float16 2.48 / 2.29, 2.48 / 2.38, 2.52 / 2.51, 2.90 / 2.94; float32
# took the streaming form faster at every count (1 row 2.68 / 2.69, 64 rows 3.14 / 3.56).
STREAMING_FROM_ROWS = {("add_rms_norm", "bfloat16"): 64, ("add_rms_norm", "float16"): 64}
# The blocks an SM the fixed-length forward norms are held to from FIXED_CAP_ROWS rows on, on the
# targets of TUNED_TARGETS: (op, dtype, cols) -> blocks, fewer than their registers and
# threads allow, the cap made by dynamic shared memory (Kernel.shared_mem_for_blocks). The rows
# move faster with fewer in flight. Measured on the H200 (docs/bench-mlp-notes.md, fifteenth
# session) through launch_add_rms_norm and launch_rms_norm, µs at 4096 and 16384 rows,
# uncapped -> capped: add_rms_norm bfloat16 4096 35.72 -> 34.92 and 132.75 -> 131.18 (5 an SM ->
# 3), float16 4096 35.82 -> 34.87, 133.02 -> 131.11 (6 -> 3), float16 5120 43.31 -> 42.75,
# 163.02 -> 161.95 (4 -> 3), float16 8192 68.54 -> 67.49, 261.45 -> 259.90 (3 -> 2), float32
# 4096 68.20 -> 67.25, 261.75 -> 258.82 (4 -> 2), float32 8192 132.40 -> 130.97, 519.62 ->
# 512.46 (2 -> 1); rms_norm (rms_norm_fixed_full) float32 4096 35.38 -> 35.05, 131.18 -> 129.50
# (4 -> 3), float32 5120 43.31 -> 42.52, 162.81 -> 160.86 (4 -> 3). Chosen from a sweep of every
# count (kept where both row counts gained 0.5% or more): no cap helped bfloat16 add_rms_norm
# 8192 or 16-bit rms_norm (every cap 1-60% slower), bfloat16 add_rms_norm 5120 and float32 5120
# gained 0.3-0.7%, and shared memory taken without capping (the L1 carve-out alone) was up to 8%
# slower: the counts are the H200's, not a rule. Fewer rows lose: at 512 rows the capped grid
# takes two waves where the uncapped one took one (2-13% slower), at 1024 from 1.2% faster to
# 2.4% slower.
FIXED_BLOCKS_PER_SM = {
    ("add_rms_norm", "bfloat16", 4096): 3,
    ("add_rms_norm", "float16", 4096): 3,
    ("add_rms_norm", "float16", 5120): 3,
    ("add_rms_norm", "float16", 8192): 2,
    ("add_rms_norm", "float32", 4096): 2,
    ("add_rms_norm", "float32", 8192): 1,
    ("rms_norm", "float32", 4096): 3,
    ("rms_norm", "float32", 5120): 3,
}
FIXED_CAP_ROWS = 4096
# rms_norm's fixed-length form with its row read twice and its registers bounded to
# REREAD_BLOCKS_PER_SM blocks an SM (rms_norm_fixed_reread, mlp.cu instantiates these):
# (dtype, cols) -> the rows from which the host takes it, on TUNED_TARGETS. Measured on the H200
# (docs/bench-mlp-notes.md, seventeenth session) at 16384 rows: 253.6 us against
# rms_norm_fixed_full's 256.5 (compile 253.2). The rows from which it pays are the sixteenth
# session's, for the same two reads in blocks of 1024: level at 6144 rows, 1.3% faster at 8192,
# 1-3% slower at 4096 and fewer.
REREAD_FROM_ROWS = {("float32", 8192): 8192}
REREAD_BLOCKS_PER_SM = 3  # kRereadMinBlocks
# The targets the choices above were measured on (the H200's), which alone take them: elsewhere
# the fixed forms run at the blocks their registers allow.
TUNED_TARGETS = ("sm_90",)
FIXED_CHUNKS = 2  # kFixedChunks
FIXED_ROW_VECTORS = 1024  # kFixedRowVectors
CACHED_CHUNKS = 4  # kCachedChunks: vectors per thread kept in registers across RMSNorm's two passes
BACKWARD_CACHED_CHUNKS = 4  # kBackwardCachedChunks: the same for the backward kernel
MAX_GRID_Y = 65535
MAX_ROW = 2**30  # the row kernels index inside a row in 32 bits
# A grid's total thread count stays below 2**31: HIP counts work-items in 32 bits, and the
# kernels' loops stride over whatever the grid does not cover.
MAX_GRID_THREADS = 2**31
# The RMSNorm backward kernel's grid: as many blocks as are resident at once on an H100/H200, so
# that all of them start together, counted as 132 SMs of 512 resident threads (sm_90: 16-bit rows
# of 8192 take 256 threads at 119-125 registers, two blocks an SM; float32 rows 512 threads at
# 108, one). Measured on the H200 at 16384 x 8192: bfloat16 257 us at 264 blocks of 256, 302 at 528,
# 374 at 132; float32 431 us at 132 blocks of 512, 450 at 264. Each block writes one row of
# float32 partial weight gradients (deterministic: summed in a fixed order by a second kernel).
BACKWARD_RESIDENT_THREADS = 132 * 512
# The short-row backward (rms_norm_backward_short: one block a row, a thread a vector of x, dy, the
# weight and grad_extra held from load to store, each row's scale the forward's; one row's weight
# gradient written by the kernel, more rows' summed by a second kernel, ROW_SCALE_DTYPES below):
# at most SHORT_BACKWARD_THREADS threads a row (kShortBackwardThreads), each with at most
# SHORT_BACKWARD_CHUNKS vectors (kShortBackwardChunks), for at most SHORT_BACKWARD_ROWS_MAX rows
# (one block a row on an H100's or H200's 132 SMs).
SHORT_BACKWARD_THREADS = 512
SHORT_BACKWARD_CHUNKS = 2
SHORT_BACKWARD_ROWS_MAX = 132
# The dtypes whose short backward of more than one row has its weight gradient summed
# (launch_rms_norm_weight_grad_inputs) from the inputs and the forward's row scales, with no scratch
# (mlp.cu's kRowScales: 16-bit types); float32 leaves a float32 row of shares a row in scratch for
# rms_norm_weight_grad.
ROW_SCALE_DTYPES = ("bfloat16", "float16")
# The weight-gradient sum's block: 32 columns by 8 slices of the partial rows (kWeightGradThreads,
# 256, bounds their product); with fewer partial rows, fewer slices and up to 128 columns. (On the
# H200 at 64 partial rows, once each thread had 8 rows' loads in flight: 32 by 8 2.51-2.75 µs,
# 16 by 16 2.74-3.28, 64 by 4 2.93-3.10; before, with one load in flight, 16 by 16 had been the
# fastest; profile_mlp.py short-geometry, docs/bench-mlp-notes.md.)
WEIGHT_GRAD_COLUMNS = 32
WEIGHT_GRAD_SLICES = 8
WEIGHT_GRAD_THREADS = 256
WEIGHT_GRAD_COLUMNS_MAX = 128
# The 16-bit sum from the inputs in pairs of columns (rms_norm_weight_grad_input_pairs, where
# the pointers allow): at least WEIGHT_GRAD_SLICES slices, more where a slice would have more than
# WEIGHT_GRAD_IN_FLIGHT rows (kWeightGradInFlight: one round of loads), up to
# WEIGHT_GRAD_SLICES_MAX. On the H200 after the float16 backward of rows of 4096 (µs, the kernel
# traced): 2 rows 1.35 against 1.49 a column a thread, 8 rows 1.43-1.46 against 1.68, 64 rows
# 2.10-2.16 against 2.08-2.09; 132 rows 2.79-2.88 in 32 slices, 3.06 in 16, 3.29 a column a thread
# (docs/bench-mlp-notes.md, twentieth session).
WEIGHT_GRAD_IN_FLIGHT = 8
WEIGHT_GRAD_SLICES_MAX = 32


_MODULES: dict[str, Any] = {}  # "cuda:0" -> the loaded module
_KERNELS: dict[tuple[str, str], Any] = {}  # ("cuda:0", kernel name) -> Kernel
_TARGETS: dict[str, str] = {}  # "cuda:0" -> its module's code-object target, "sm_90"


def kernel_name(op: str, dtype: str, *arguments: int) -> str:
    """The kernel of ``op`` ("swiglu") for ``dtype`` ("bfloat16"): "mlp::swiglu<__nv_bfloat16>";
    a template's further arguments after the type ("mlp::rms_norm_fixed<float, 4096>")."""
    return "mlp::{}<{}>".format(op, ", ".join((KERNEL_TYPE[dtype], *map(str, arguments))))


def _module(device: str) -> Any:
    module = _MODULES.get(device)
    if module is None:
        module = _MODULES[device] = load(MODULE, device=device)
    return module


def load_kernel(device: str, name: str) -> Any:
    """The kernel ``name`` on ``device`` ("cuda:0"), loaded once per process."""
    kernel = _KERNELS.get((device, name))
    if kernel is None:
        kernel = _KERNELS[(device, name)] = _module(device).kernel(name)
    return kernel


def device_target(device: str) -> str:
    """The code-object target of the module loaded on ``device`` ("sm_90"), loading it once and
    naming it once (the norms' launches ask on every call)."""
    target = _TARGETS.get(device)
    if target is None:
        target = _TARGETS[device] = str(_module(device).gpu.target)
    return target


# ---- launch geometry: pure integer functions of the shape -------------------------------------


def _grid_cap(threads_per_block: int) -> int:
    return max(1, MAX_GRID_THREADS // threads_per_block)


def _vector_width(dtype: str, vector_bytes: int = VECTOR_BYTES) -> int:
    return vector_bytes // ITEM_SIZE[dtype]


def widest_vector_bytes(op: str, outputs: int, dtype: str) -> int:
    """The vector an elementwise op's grid is sized for over ``outputs`` elements of the
    forward's output, unless that grid would be short of blocks: 16 bytes, 8 for the backwards
    past STREAMING_MAX_BYTES moved (their plain exact forms *_backward_exact<T, 8>: mlp.cu builds
    their 16-byte forms streaming only). The backwards read three arrays and write two; on the
    H200 over rows of 14336, back to back, both took 0.1-0.9% less time in 8-byte vectors than in
    16-byte ones, every dtype at 4096 and 16384 rows (µs: SwiGLU's bfloat16 at 4096 rows 138.01
    against 138.69, 16384 543.50 against 545.30; float32 at 1024 rows 70.80 against 71.17, 4096
    273.85 against 275.17, 16384 1090.21 against 1091.33), as torch.compile's float32 backward
    did in 512 elements a block of 256 threads against 1024 of 128 (its autotuner picks between
    the two, in some processes the slower). The forwards took 0.5-1% longer in 8-byte vectors
    (docs/bench-mlp-notes.md, twenty-second session)."""
    if op.endswith("_backward") and not within_streaming_bytes(op, outputs, dtype):
        return NARROW_BYTES
    return VECTOR_BYTES


def within_streaming_bytes(op: str, outputs: int, dtype: str) -> bool:
    """Whether ``op`` over ``outputs`` elements of the forward's output moves at most
    STREAMING_MAX_BYTES: its exact form streams (16-byte vectors, streaming cache hints), where
    past it the plain forms take over (the backwards' in 8-byte vectors). The one test both
    choices read, so that they agree: mlp.cu builds no 16-byte plain backward."""
    return elementwise_bytes(op, outputs, dtype) <= STREAMING_MAX_BYTES


def swiglu_geometry(n: int, dtype: str, widest: int = VECTOR_BYTES) -> tuple[int, int]:
    """(grid, block) of the elementwise kernels over n elements: one vector of ``widest`` bytes
    a thread, or one 8-byte vector where that grid would be short of NARROW_BELOW_BLOCKS
    blocks."""
    chunks = -(-n // _vector_width(dtype, widest))
    if -(-chunks // ELEMENTWISE_BLOCK) < NARROW_BELOW_BLOCKS:
        chunks = -(-n // _vector_width(dtype, NARROW_BYTES))
    return min(-(-chunks // ELEMENTWISE_BLOCK), _grid_cap(ELEMENTWISE_BLOCK)), ELEMENTWISE_BLOCK


def silu_and_mul_geometry(
    rows: int, cols: int, dtype: str, widest: int = VECTOR_BYTES
) -> tuple[tuple[int, int], int]:
    """((grid x over the columns, grid y over the rows), block) of silu_and_mul and its backward:
    one vector of ``widest`` bytes a thread, or one 8-byte vector where that grid would be short
    of NARROW_BELOW_BLOCKS blocks."""
    grid_y = min(rows, MAX_GRID_Y)
    for vector_bytes in (widest, NARROW_BYTES):
        chunks = -(-cols // _vector_width(dtype, vector_bytes))
        block = min(max(BLOCK_MIN, 1 << (chunks - 1).bit_length()), ELEMENTWISE_BLOCK)
        grid_x = min(-(-chunks // block), _grid_cap(block * grid_y))
        if grid_x * grid_y >= NARROW_BELOW_BLOCKS:
            break
    return (grid_x, grid_y), block


class ElementwiseLaunch(NamedTuple):
    """An elementwise op's launch for a shape: ``name`` the kernel on ``grid`` for pointers
    aligned to ``alignment`` bytes (an exact form, "mlp::swiglu_exact<float, 16>",
    "mlp::swiglu_exact_streaming<float>" or "mlp::swiglu_whole<float>", where
    :func:`exact_vector_bytes` allows it; else the general kernel, alignment 1), ``general`` the
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


def swiglu_launch(op: str, n: int, dtype: str) -> ElementwiseLaunch:
    """``op``'s launch ("swiglu" or "swiglu_backward") over n elements."""
    grid, block = swiglu_geometry(n, dtype, widest_vector_bytes(op, n, dtype))
    vector_bytes = exact_vector_bytes(grid * block, 1, n, dtype)
    return _elementwise_launch(op, dtype, vector_bytes, grid, block, 1, n)


def silu_and_mul_launch(op: str, rows: int, cols: int, dtype: str) -> ElementwiseLaunch:
    """``op``'s launch ("silu_and_mul" or "silu_and_mul_backward") over rows of cols outputs."""
    widest = widest_vector_bytes(op, rows * cols, dtype)
    (grid_x, grid_y), block = silu_and_mul_geometry(rows, cols, dtype, widest)
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
    the launcher reads: :func:`kernelpack.devices.arrays.pointer_of`); a null pointer divides by any."""
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
    output (swiglu's: one row of n) on ``grid``: its whole form where :func:`whole_blocks` says
    so (on its own grid, a block for each ELEMENTWISE_BLOCK vectors), else its exact form in
    vectors of ``vector_bytes``, or (0) its general kernel alone."""
    general = kernel_name(op, dtype)
    if not vector_bytes:
        return ElementwiseLaunch(general, grid, general, grid, block, 1)
    blocks = whole_blocks(op, rows, cols, dtype) if vector_bytes == VECTOR_BYTES else 0
    if blocks:
        whole = kernel_name(op + "_whole", dtype)
        return ElementwiseLaunch(whole, blocks, general, grid, block, vector_bytes)
    exact = one_row_kernel(op, dtype, rows, vector_bytes) or exact_kernel_name(
        op, dtype, vector_bytes, rows * cols
    )
    return ElementwiseLaunch(exact, grid, general, grid, block, vector_bytes)


def one_row_kernel(op: str, dtype: str, rows: int, vector_bytes: int) -> str | None:
    """silu_and_mul's or its backward's form over a single row ("mlp::silu_and_mul_one_row<float>":
    swiglu's exact form over the row's two halves, mlp.cu says why) where a call of one row takes
    the exact form in vectors of ``vector_bytes`` = NARROW_BYTES; else None (swiglu's calls are
    one row of n already)."""
    if op.startswith("silu_and_mul") and rows == 1 and vector_bytes == NARROW_BYTES:
        return kernel_name(op + "_one_row", dtype)
    return None


def whole_blocks(op: str, rows: int, cols: int, dtype: str) -> int:
    """The blocks of the whole form of ``op`` (mlp.cu's swiglu_whole and silu_and_mul_whole: the
    plain 16-byte exact forwards with no test before the store, silu_and_mul's over a 1-D grid)
    over ``rows`` rows of ``cols`` outputs, or 0 where it does not serve: a backward, a call of
    at most STREAMING_MAX_BYTES (the streaming form's), or a row that is not a whole number of
    blocks of ELEMENTWISE_BLOCK 16-byte vectors (14336 columns of a 16-bit type are 14 blocks,
    11008 are not). The caller has checked the exact form's other conditions
    (:func:`exact_vector_bytes`)."""
    per_block = ELEMENTWISE_BLOCK * _vector_width(dtype)
    if (
        op.endswith("_backward")
        or within_streaming_bytes(op, rows * cols, dtype)
        or cols % per_block
    ):
        return 0
    return rows * cols // per_block


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
    registers. (Tried on the H200: one vector a thread for rows no more than the SMs, 512
    threads at 1 x 4096, made the small forward rows 0.1-0.25 us slower; docs/bench-mlp-notes.md.)
    """
    needed = _threads_needed(cols, dtype, cached)
    return min(1 << (needed - 1).bit_length(), ROW_BLOCK_MAX)


def _forward_row_threads(cols: int, dtype: str) -> int:
    """Threads a row of the general forward norms: as :func:`_row_threads` for rows that share a
    block (BLOCK_MIN threads or fewer), whole blocks of BLOCK_MIN past that, so that no thread
    idles through a cached vector the row does not have. On the H200 (docs/bench-mlp-notes.md,
    thirteenth session), the power of two against this, rms_norm: bfloat16 rows of 4104 (513
    vectors: 256 threads or 192) 95.2 against 81.9 µs at 16384 rows, of 6144 108.9 against 100.3;
    float32 rows of 4104 (1026: 512 or 320) 187.1 against 137.6, of 5632 to 7168 1-4% less from
    4096 rows (up to 1.6% more at 512); add_rms_norm float32 0.3-5% less, bfloat16 the same
    within 0.5% from 512 rows; both up to 0.09 µs more at 64 rows."""
    needed = _threads_needed(cols, dtype, CACHED_CHUNKS)
    if needed <= BLOCK_MIN:
        return _row_threads(cols, dtype, CACHED_CHUNKS)
    return min(-(-needed // BLOCK_MIN) * BLOCK_MIN, ROW_BLOCK_MAX)


def row_geometry(rows: int, cols: int, dtype: str) -> tuple[int, tuple[int, int]]:
    """The grid, and the block as (threads per row, rows per block), of the RMSNorm forward
    kernels. Rows that need fewer than BLOCK_MIN threads share a block of BLOCK_MIN. (Measured on
    the H100 from 1 x 4096 to 16384 x 8192: several rows of 64 or more threads to a block were
    slower everywhere, and twice the threads to a row were at best 2% faster and up to 20% slower
    at 512 rows.) The kernel is bounded to 64 registers (mlp.cu kRowNormMinBlocks), so that two
    512-thread blocks share an SM on sm_90, four of 256 (16-bit rows of 8192): at 74, float32
    took 94 µs where it takes 68 at 4096 x 8192 on the H200 (tests/test_build.py checks the built
    cubin)."""
    threads = _forward_row_threads(cols, dtype)
    per_block = max(1, BLOCK_MIN // threads)
    grid = min(-(-rows // per_block), _grid_cap(threads * per_block))
    return grid, (threads, per_block)


def short_rows(rows: int, cols: int, dtype: str) -> bool:
    """Whether the forward norms of ``rows`` rows of ``cols`` take the short-row kernels: few
    rows, each a whole number of 16-byte vectors, at most one a thread and SHORT_ROW_VECTORS_MAX
    in all."""
    width = _vector_width(dtype)
    return (
        0 < rows <= SHORT_ROWS_MAX and cols % width == 0 and cols // width <= SHORT_ROW_VECTORS_MAX
    )


def fixed_threads(cols: int, dtype: str) -> int:
    """Threads a row of the fixed-length norms for rows of ``cols`` (one of FIXED_COLUMNS), as
    mlp.cu's FixedRow<T, cols>::kThreads: two vectors a thread up to FIXED_ROW_VECTORS vectors,
    four past."""
    vectors = cols // _vector_width(dtype)
    chunks = -(-vectors // FIXED_ROW_VECTORS) * FIXED_CHUNKS
    return vectors // chunks


class NormLaunch(NamedTuple):
    """A forward norm's launch: its kernel, grid and block (threads per row, rows per block), and
    the blocks an SM it is held to (0: as many as fit)."""

    name: str
    grid: int
    block: tuple[int, int]
    blocks_per_sm: int


def norm_launch(op: str, rows: int, cols: int, dtype: str, target: str) -> NormLaunch:
    """The launch of a forward norm (``op`` "rms_norm" or "add_rms_norm") on ``target`` (the
    device's code-object target, "sm_90"): for rows of one of FIXED_COLUMNS the fixed-length
    kernel (exact: a block for each row, at :func:`fixed_threads`, so for fewer rows than a grid
    of MAX_GRID_THREADS holds; the few-row form from STREAMING_FROM_ROWS rows to SHORT_ROWS_MAX,
    the form for many rows elsewhere; on TUNED_TARGETS, rms_norm's reread form from
    REREAD_FROM_ROWS rows on, and both held to FIXED_BLOCKS_PER_SM from FIXED_CAP_ROWS rows on),
    else the short-row kernel, one block a row and a thread per vector (a power of two, at least
    BLOCK_MIN), where :func:`short_rows` says so, else the general kernel at
    :func:`row_geometry`."""
    if cols in FIXED_COLUMNS and 0 < rows * fixed_threads(cols, dtype) < MAX_GRID_THREADS:
        tuned = target in TUNED_TARGETS
        block = (fixed_threads(cols, dtype), 1)
        reread_from = REREAD_FROM_ROWS.get((dtype, cols)) if op == "rms_norm" and tuned else None
        if reread_from is not None and rows >= reread_from:
            return NormLaunch(kernel_name("rms_norm_fixed_reread", dtype, cols), rows, block, 0)
        few_rows = STREAMING_FROM_ROWS.get((op, dtype), 1) <= rows <= SHORT_ROWS_MAX
        name = kernel_name(f"{op}_fixed" if few_rows else f"{op}_fixed_full", dtype, cols)
        capped = tuned and rows >= FIXED_CAP_ROWS
        blocks = FIXED_BLOCKS_PER_SM.get((op, dtype, cols), 0) if capped else 0
        return NormLaunch(name, rows, block, blocks)
    if short_rows(rows, cols, dtype):
        chunks = cols // _vector_width(dtype)
        threads = max(BLOCK_MIN, 1 << (chunks - 1).bit_length())
        return NormLaunch(kernel_name(f"{op}_short", dtype), rows, (threads, 1), 0)
    grid, block = row_geometry(rows, cols, dtype)
    return NormLaunch(kernel_name(op, dtype), grid, block, 0)


def norm_shared_mem(kernel: Any, launch: NormLaunch) -> int:
    """The ``shared_mem`` of a forward norm's launch: what holds it to ``launch.blocks_per_sm``,
    else 0."""
    if not launch.blocks_per_sm:
        return 0
    threads, rows_per_block = launch.block
    return int(kernel.shared_mem_for_blocks(threads * rows_per_block, launch.blocks_per_sm))


def backward_row_geometry(rows: int, cols: int, dtype: str) -> tuple[int, int]:
    """(grid, threads per row) of the RMSNorm backward kernel: one row a block at a time, at
    least BLOCK_MIN threads, and as many blocks as are resident at once (at most one a row), each
    of which writes one row of float32 partial weight gradients that the second pass sums in a
    fixed order."""
    threads = max(BLOCK_MIN, _row_threads(cols, dtype, BACKWARD_CACHED_CHUNKS))
    return min(rows, BACKWARD_RESIDENT_THREADS // threads), threads


def short_backward_threads(rows: int, cols: int, dtype: str) -> int:
    """Threads a row of the short-row backward for ``rows`` rows of ``cols`` (a power of two, at
    least BLOCK_MIN: a thread a 16-byte vector up to SHORT_BACKWARD_THREADS, then up to
    SHORT_BACKWARD_CHUNKS vectors a thread), or 0 where the shape takes the general backward:
    more rows than SHORT_BACKWARD_ROWS_MAX, rows not a whole number of vectors, or too long for
    the registers. Its grid is one block a row."""
    width = _vector_width(dtype)
    chunks = cols // width
    if not (
        0 < rows <= SHORT_BACKWARD_ROWS_MAX
        and cols % width == 0
        and 0 < chunks <= SHORT_BACKWARD_CHUNKS * SHORT_BACKWARD_THREADS
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
    )


def short_backward_scratch(rows: int, cols: int, dtype: str) -> tuple[int, ...] | None:
    """The shape of the float32 scratch the short-row backward of ``rows`` rows leaves for its
    weight sum: a row of shares a row (float32), or None where it needs none: one row (the kernel
    writes the weight gradient itself) and ROW_SCALE_DTYPES (the sum reads the inputs and the
    forward's row scales)."""
    if rows == 1 or dtype in ROW_SCALE_DTYPES:
        return None
    return (rows, cols)


def weight_grad_geometry(cols: int, partial_rows: int) -> tuple[int, tuple[int, int]]:
    """(grid, block as (columns, slices)) of the weight-gradient sum over ``partial_rows`` rows
    (of partial sums, or the short backward's rows of inputs): WEIGHT_GRAD_SLICES slices of the
    rows by 32 columns (128 bytes a row of partial sums, read whole), one block per column group;
    with fewer partial rows than slices, a slice per row (a power of two) and the block's other
    threads on more columns, up to 128 (at 1 x 4096 the 8-slice block launched 128 blocks to add
    one row, 0.5 µs slower than 32 blocks of 128 columns: docs/bench-mlp-notes.md). A function of
    the shape alone (the partial rows are backward_row_geometry's grid), so a shape's sum, and its
    bits, are the same every run."""
    slices = min(WEIGHT_GRAD_SLICES, 1 << max(partial_rows - 1, 0).bit_length())
    columns = max(WEIGHT_GRAD_COLUMNS, min(WEIGHT_GRAD_COLUMNS_MAX, WEIGHT_GRAD_THREADS // slices))
    return min(-(-cols // columns), _grid_cap(columns * slices)), (columns, slices)


def weight_grad_pairs_geometry(cols: int, rows: int) -> tuple[int, tuple[int, int]]:
    """(grid, block as (pairs, slices)) of the 16-bit weight sum from the inputs of ``rows`` rows
    in pairs of columns (cols even): WEIGHT_GRAD_SLICES slices, or as many as keep a slice's rows
    to WEIGHT_GRAD_IN_FLIGHT (a power of two, at most WEIGHT_GRAD_SLICES_MAX), the block's other
    threads on pairs; a block a group of pairs. A function of the shape alone, as
    :func:`weight_grad_geometry`."""
    wanted = -(-rows // WEIGHT_GRAD_IN_FLIGHT)
    slices = min(WEIGHT_GRAD_SLICES_MAX, max(WEIGHT_GRAD_SLICES, 1 << (wanted - 1).bit_length()))
    pairs = WEIGHT_GRAD_THREADS // slices
    return min(-(-(cols // 2) // pairs), _grid_cap(WEIGHT_GRAD_THREADS)), (pairs, slices)


# ---- launches: addresses (ints or tensors, which the launcher reads) and sizes ----------------
# A forward norm's ``row_scales`` is 0 (null: nothing stored, the inference path) or float32
# [rows], which receives each row's scale 1 / sqrt(mean(x^2) + eps); the backward's is that
# array, required.


def launch_swiglu(
    device: str, dtype: str, gate: Any, up: Any, out: Any, n: int, stream: int
) -> None:
    if n == 0:
        return
    launch = swiglu_launch("swiglu", n, dtype)
    name, grid = launch.kernel_for(alignment_of(gate, up, out))
    load_kernel(device, name).launch(grid, launch.block, gate, up, out, n, stream=stream)


def launch_silu_and_mul(
    device: str, dtype: str, x: Any, out: Any, rows: int, cols: int, stream: int
) -> None:
    if rows * cols == 0:
        return
    launch = silu_and_mul_launch("silu_and_mul", rows, cols, dtype)
    name, grid = launch.kernel_for(alignment_of(x, out))
    load_kernel(device, name).launch(grid, launch.block, x, out, rows, cols, stream=stream)


def _launch_norm(
    device: str,
    op: str,
    dtype: str,
    pointers: tuple[Any, ...],
    rows: int,
    cols: int,
    eps: float,
    stream: int,
) -> None:
    """A forward norm's launch at :func:`norm_launch`'s kernel and geometry, held to its blocks an
    SM where :func:`norm_shared_mem` says so; nothing for no elements."""
    if rows * cols == 0:
        return
    launch = norm_launch(op, rows, cols, dtype, device_target(device))
    kernel = load_kernel(device, launch.name)
    kernel.launch(
        launch.grid,
        launch.block,
        *pointers,
        rows,
        cols,
        eps,
        shared_mem=norm_shared_mem(kernel, launch),
        stream=stream,
    )


def launch_rms_norm(
    device: str,
    dtype: str,
    x: Any,
    weight: Any,
    out: Any,
    row_scales: Any,
    rows: int,
    cols: int,
    eps: float,
    stream: int,
) -> None:
    """out = rms_norm(x), and each row's scale to ``row_scales`` unless it is 0."""
    pointers = (x, weight, out, row_scales)
    _launch_norm(device, "rms_norm", dtype, pointers, rows, cols, eps, stream)


def launch_add_rms_norm(
    device: str,
    dtype: str,
    x: Any,
    residual: Any,
    weight: Any,
    out: Any,
    residual_out: Any,
    row_scales: Any,
    rows: int,
    cols: int,
    eps: float,
    stream: int,
) -> None:
    """residual_out = x + residual (rounded to the dtype), out = rms_norm(residual_out), and each
    row's scale to ``row_scales`` unless it is 0; in place when out is x and residual_out is
    residual (fused_add_rms_norm)."""
    pointers = (x, residual, weight, out, residual_out, row_scales)
    _launch_norm(device, "add_rms_norm", dtype, pointers, rows, cols, eps, stream)


def launch_swiglu_backward(
    device: str,
    dtype: str,
    gate: Any,
    up: Any,
    grad: Any,
    grad_gate: Any,
    grad_up: Any,
    n: int,
    stream: int,
) -> None:
    if n == 0:
        return
    launch = swiglu_launch("swiglu_backward", n, dtype)
    name, grid = launch.kernel_for(alignment_of(gate, up, grad, grad_gate, grad_up))
    load_kernel(device, name).launch(
        grid, launch.block, gate, up, grad, grad_gate, grad_up, n, stream=stream
    )


def launch_silu_and_mul_backward(
    device: str, dtype: str, x: Any, grad: Any, grad_x: Any, rows: int, cols: int, stream: int
) -> None:
    if rows * cols == 0:
        return
    launch = silu_and_mul_launch("silu_and_mul_backward", rows, cols, dtype)
    name, grid = launch.kernel_for(alignment_of(x, grad, grad_x))
    load_kernel(device, name).launch(grid, launch.block, x, grad, grad_x, rows, cols, stream=stream)


def launch_rms_norm_backward(
    device: str,
    dtype: str,
    x: Any,
    row_scales: Any,
    weight: Any,
    grad: Any,
    grad_extra: Any,
    grad_x: Any,
    grad_x_copy: Any,
    partial: Any,
    grad_weight: Any,
    rows: int,
    cols: int,
    stream: int,
) -> None:
    """grad_x (and grad_x_copy unless 0) = the input gradient of RMSNorm plus grad_extra (unless
    0), from x and the forward's row scales; grad_weight from ``partial``, float32 scratch of
    backward_row_geometry's grid x cols."""
    if cols == 0:
        return
    if rows:
        grid, threads = backward_row_geometry(rows, cols, dtype)
        load_kernel(device, kernel_name("rms_norm_backward", dtype)).launch(
            grid,
            threads,
            x,
            row_scales,
            weight,
            grad,
            grad_extra,
            grad_x,
            grad_x_copy,
            partial,
            rows,
            cols,
            stream=stream,
        )
    else:
        grid = 0
    columns, block = weight_grad_geometry(cols, grid)
    load_kernel(device, kernel_name("rms_norm_weight_grad", dtype)).launch(
        columns, block, partial, grad_weight, grid, cols, stream=stream
    )


def launch_rms_norm_backward_short(
    device: str,
    dtype: str,
    x: Any,
    row_scales: Any,
    weight: Any,
    grad: Any,
    grad_extra: Any,
    grad_x: Any,
    grad_weight: Any,
    scratch: Any,
    rows: int,
    cols: int,
    threads: int,
    stream: int,
) -> None:
    """grad_x = the input gradient of RMSNorm plus grad_extra (unless 0), and grad_weight, from x
    and the forward's row scales: one block a row of ``threads`` (:func:`short_backward_threads`;
    the fixed-length kernel where :func:`fixed_backward` says so); one row is one kernel; more
    rows' weight gradient is summed by a second kernel, from the inputs and row scales
    (ROW_SCALE_DTYPES: :func:`launch_rms_norm_weight_grad_inputs`), or rms_norm_weight_grad from
    the float32 shares the backward leaves in ``scratch`` (of :func:`short_backward_scratch`'s
    shape; 0 where that is None)."""
    if threads == SHORT_BACKWARD_THREADS and fixed_backward(cols, dtype):
        name = kernel_name("rms_norm_backward_fixed", dtype, cols)
    else:
        name = kernel_name("rms_norm_backward_short", dtype)
    load_kernel(device, name).launch(
        rows,
        threads,
        x,
        row_scales,
        weight,
        grad,
        grad_extra,
        grad_x,
        grad_weight,
        scratch,
        rows,
        cols,
        stream=stream,
    )
    if rows == 1:
        return
    if dtype in ROW_SCALE_DTYPES:
        launch_rms_norm_weight_grad_inputs(
            device, dtype, x, grad, row_scales, grad_weight, rows, cols, stream
        )
    else:
        columns, block = weight_grad_geometry(cols, rows)
        load_kernel(device, kernel_name("rms_norm_weight_grad", dtype)).launch(
            columns, block, scratch, grad_weight, rows, cols, stream=stream
        )


def launch_rms_norm_weight_grad_inputs(
    device: str,
    dtype: str,
    x: Any,
    grad: Any,
    row_scales: Any,
    grad_weight: Any,
    rows: int,
    cols: int,
    stream: int,
) -> None:
    """grad_weight = the sum over the rows of grad * x * row_scales[row] (a 16-bit dtype of
    ROW_SCALE_DTYPES): in pairs of columns where cols is even and x, grad and grad_weight are
    4-byte aligned (:func:`weight_grad_pairs_geometry`), else a column a thread
    (:func:`weight_grad_geometry`)."""
    if cols % 2 == 0 and alignment_of(x, grad, grad_weight) >= 4:
        grid, block = weight_grad_pairs_geometry(cols, rows)
        name = kernel_name("rms_norm_weight_grad_input_pairs", dtype)
    else:
        grid, block = weight_grad_geometry(cols, rows)
        name = kernel_name("rms_norm_weight_grad_inputs", dtype)
    load_kernel(device, name).launch(
        grid, block, x, grad, row_scales, grad_weight, rows, cols, stream=stream
    )
