"""The MLP kernels' launch constants and the per-target-family bounds: data only.

Two kinds of numbers live here. Constants that mirror mlp.cu (a kernel's block bound, vector width,
chunks a thread) must agree with the source; the geometry (:mod:`.geometry`) reads them. What
differs by target family (the bounds its images were built for) is a :class:`Family`, read through
:func:`family`: :data:`AMD` for an AMD target, :data:`UNTUNED` for the others. The multiprocessor
count is the device's own (:func:`kernelpack.ops.mlp.launch.device_facts`), never a constant.
The measurement behind each number is in docs/mlp-tuning.md; docs/bench-mlp.md is the committed
benchmark.
"""

from __future__ import annotations

from typing import NamedTuple

VECTOR_BYTES = 16  # kVectorBytes: the widest load the kernels issue
NARROW_BYTES = 8  # kNarrowBytes: the elementwise kernels' vector on short inputs
ELEMENTWISE_BLOCK = 128  # kElementwiseBlockThreads, the elementwise kernels' __launch_bounds__
# Calls that move at most this many bytes take the 16-byte exact elementwise forms through
# streaming cache hints (mlp.cu's *_exact_streaming), larger ones the plain forms.
STREAMING_MAX_BYTES = 64 * 2**20
BLOCK_MIN = 64  # the smallest block: a multiple of every wavefront width (32 and 64)
ROW_BLOCK_MAX = 512  # kRowBlockThreads, the row kernels' __launch_bounds__
SHORT_ROW_THREADS = 512  # kShortRowThreads (each thread takes up to two vectors)
# The short-row forward norms serve rows of at most this many 16-byte vectors (and at most one
# row a multiprocessor, so that every row's block runs at once).
SHORT_ROW_VECTORS_MAX = 512
# The row lengths of the fixed-length forward norms (LLaMA's hidden sizes; mlp.cu instantiates
# each): exact forms, a block a row.
FIXED_COLUMNS = (4096, 5120, 8192)
# (op, dtype) -> the fewest rows that take the streaming few-row fixed form; fewer take the form
# for many rows (16-bit add_rms_norm's streaming form holds more registers).
STREAMING_FROM_ROWS = {("add_rms_norm", "bfloat16"): 64, ("add_rms_norm", "float16"): 64}
FIXED_CHUNKS = 2  # kFixedChunks
FIXED_ROW_VECTORS = 1024  # kFixedRowVectors
CACHED_CHUNKS = 4  # kCachedChunks: vectors per thread kept in registers across RMSNorm's two passes
BACKWARD_CACHED_CHUNKS = 4  # kBackwardCachedChunks: the same for the backward kernel
MAX_GRID_Y = 65535
MAX_ROW = 2**30  # the row kernels index inside a row in 32 bits
# A grid's total thread count stays below 2**31: HIP counts work-items in 32 bits, and the
# kernels' loops stride over whatever the grid does not cover.
MAX_GRID_THREADS = 2**31
# The RMSNorm backward's grid: as many blocks as are resident at once (all start together),
# counted as this many resident threads a multiprocessor; each block writes one row of float32
# partial weight gradients, summed in a fixed order by a second kernel (deterministic).
BACKWARD_THREADS_PER_SM = 512
SHORT_BACKWARD_THREADS = 512  # kShortBackwardThreads
SHORT_BACKWARD_CHUNKS = 2  # kShortBackwardChunks
# The dtypes whose short backward of more than one row sums its weight gradient from the inputs
# and the forward's row scales, with no scratch (mlp.cu's kRowScales: 16-bit types).
ROW_SCALE_DTYPES = ("bfloat16", "float16")
WEIGHT_GRAD_COLUMNS = 32  # the weight-gradient sum's block: 32 columns by 8 slices of the rows
WEIGHT_GRAD_SLICES = 8
WEIGHT_GRAD_THREADS = 256  # kWeightGradThreads
WEIGHT_GRAD_COLUMNS_MAX = 128


class Family(NamedTuple):
    """One target family's bounds its images were built for."""

    # the most threads a block of the RMSNorm backward kernel takes: mlp.cu's
    # kBackwardBlockThreads, its __launch_bounds__ on the family's images
    backward_threads_max: int = ROW_BLOCK_MAX


UNTUNED = Family()
# Every AMD target: the backward's bound is 256 threads there (a 512-thread block leaves a gfx9
# wave 128 VGPRs, and gfx9-generic's 16-bit backward spilled); nothing measured on one.
AMD = Family(backward_threads_max=256)


def family(target: str) -> Family:
    """The family of ``target`` (a code-object target, "sm_90"): AMD for an AMD target
    ("gfx..."), else UNTUNED."""
    return AMD if target.startswith("gfx") else UNTUNED
