"""kernelpack.mlp: every kernel against float64 references on fresh random data, and the checks.

The GPU tests make their inputs with torch on the GPU from a new seed each run (printed with any
failure), compute the reference in float64 with torch's own operations, and poison every output
(NaN) before the launch; outputs live inside NaN guard zones, so a write out of range or a missed
element shows. Sizes cover the vector width's edges, misaligned views (offset by one element, which
sends a kernel down its scalar path), long rows past the register cache, grids that have to
stride, and arrays past 2**31 elements.

The argument checks run on numpy arrays and need no GPU: they fail before anything is copied.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernelpack import mlp
from kernelpack.errors import UsageError
from kernelpack.ops.mlp import geometry as mlp_geometry
from kernelpack.ops.mlp import launch as mlp_launch
from kernelpack.ops.mlp import tuning as mlp_tuning

# The device the counted expectations are for: an sm_90 GPU of 132 SMs (the H100's and H200's).
H200 = mlp_geometry.DeviceFacts("sm_90", 132)
SMS = H200.multiprocessors

DTYPES = ["float32", "float16", "bfloat16"]
# Largest relative error allowed. float32 is computed with the fast exp and reciprocal (a few ulp);
# float16 and bfloat16 are dominated by the final rounding, half an ulp (2**-11 and 2**-8).
RTOL = {"float32": 4e-6, "float16": 1.5e-3, "bfloat16": 8e-3}
# Absolute slack where float16 is subnormal (below 6.1e-5 its spacing is 2**-24).
ATOL = {"float32": 1e-30, "float16": 2.0**-24, "bfloat16": 1e-30}
GUARD = 64  # NaN elements after each output view
EPS = 1e-6

# (rows, cols): row lengths at and around the vector widths (4 and 8), from 1 to 512 threads a
# row, one row a block and several, and rows past the register cache (65536).
ROW_CASES = [
    (1, 1),
    (3, 2),
    (5, 3),
    (2, 7),
    (3, 8),
    (2, 9),
    (4, 31),
    (7, 64),
    (3, 100),
    (2, 1000),
    (132, 512),  # the short-row kernels up to 132 rows, the general one above
    (133, 512),
    (2, 2047),
    (3, 4096),
    (2, 4099),
    (2, 8192),
    (1, 5120),
    (133, 8192),  # the fixed-length kernels, at any number of rows
    (4096, 4096),
    (4096, 5120),
    (4096, 8192),
    (133, 8200),  # the general kernel: more rows than SMs, each longer than its cached chunks
    (1, 16384),
    (2, 32776),
    (2, 65536),
    (100_003, 8),
    (70_001, 1),
]
# 8, 4100, 11008 and 65536 take the exact kernels (mlp_geometry.exact_vector_bytes) in 8-byte vectors
# for every dtype, 4100 with an odd number of them, and 64 * 11008 in 16-byte vectors; the others
# the general ones, as do misaligned views of every size
SWIGLU_SIZES = [1, 2, 7, 8, 9, 15, 17, 4095, 4099, 4100, 11008, 65536, 64 * 11008, 1_000_003]


# ---- argument checks: numpy arrays, no GPU needed ---------------------------------------------


def f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def rows_of(cols: int) -> tuple[np.ndarray, np.ndarray]:
    """A [1, cols] x and its weight that take no memory (broadcast views)."""
    zero = np.float32(0.0)
    return np.broadcast_to(zero, (1, cols)), np.broadcast_to(zero, (cols,))


@pytest.mark.parametrize(
    ("call", "error", "argument"),
    [
        (lambda: mlp.swiglu([1.0], f32(1)), UsageError, "gate"),
        (lambda: mlp.swiglu(f32(4), np.zeros(4, np.int32)), UsageError, "up"),
        (lambda: mlp.swiglu(np.zeros(4), f32(4)), UsageError, "gate"),
        (lambda: mlp.swiglu(f32(4), np.zeros(4, np.float16)), UsageError, "up"),
        (lambda: mlp.swiglu(f32(4), f32(5)), UsageError, "up"),
        (lambda: mlp.swiglu(f32(4), f32(4), out=f32(4, 1)), UsageError, "out"),
        (lambda: mlp.swiglu(f32(4), f32(4), out=np.zeros(4, np.float16)), UsageError, "out"),
        (lambda: mlp.swiglu(f32(4), f32(4), out="out"), UsageError, "out"),
        (lambda: mlp.silu_and_mul(f32(3, 5)), UsageError, "x"),
        (lambda: mlp.silu_and_mul(np.float32(1.0)), UsageError, "x"),
        (lambda: mlp.silu_and_mul(f32(3, 4), out=f32(3, 4)), UsageError, "out"),
        (lambda: mlp.rms_norm(f32(2, 8), f32(7)), UsageError, "weight"),
        (lambda: mlp.rms_norm(f32(2, 8), f32(2, 8)), UsageError, "weight"),
        (lambda: mlp.rms_norm(f32(2, 8), np.zeros(8, np.float16)), UsageError, "weight"),
        (lambda: mlp.rms_norm(np.zeros((), np.float32), f32(1)), UsageError, "x"),
        (lambda: mlp.rms_norm(*rows_of(2**30 + 1)), UsageError, "x"),
        (
            lambda: mlp.fused_add_rms_norm(*rows_of(2**30 + 1), rows_of(2**30 + 1)[1]),
            UsageError,
            "x",
        ),
        (lambda: mlp.rms_norm(f32(2, 8), f32(8), eps=-1.0), UsageError, "eps"),
        (lambda: mlp.rms_norm(f32(2, 8), f32(8), eps=math.nan), UsageError, "eps"),
        (lambda: mlp.rms_norm(f32(2, 8), f32(8), eps="1e-6"), UsageError, "eps"),
        (lambda: mlp.rms_norm(f32(2, 8), f32(8), out=f32(2, 9)), UsageError, "out"),
        (lambda: mlp.fused_add_rms_norm(f32(2, 8), f32(2, 9), f32(8)), UsageError, "residual"),
        (lambda: mlp.fused_add_rms_norm(f32(2, 8), f32(2, 8), f32(9)), UsageError, "weight"),
        (
            lambda: mlp.fused_add_rms_norm(f32(2, 8), np.zeros((2, 8), np.float16), f32(8)),
            UsageError,
            "residual",
        ),
        (lambda: mlp.fused_add_rms_norm(f32(2, 8), f32(2, 8), f32(8), eps=True), UsageError, "eps"),
    ],
)
def test_bad_arguments_name_the_argument(
    call: Callable[[], object], error: type[Exception], argument: str
) -> None:
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value).startswith(f"{argument}:"), str(caught.value)


def test_in_place_op_refuses_read_only_numpy_arrays() -> None:
    x = f32(2, 8)
    x.flags.writeable = False
    with pytest.raises(UsageError, match=r"^x: .*read-only"):
        mlp.fused_add_rms_norm(x, f32(2, 8), f32(8))
    out = f32(4)
    out.flags.writeable = False
    with pytest.raises(UsageError, match=r"^out: .*read-only"):
        mlp.swiglu(f32(4), f32(4), out=out)


# ---- the host's launch choices: pure functions of the shape, written out by hand --------------


@pytest.mark.parametrize(
    ("n", "dtype", "expected"),
    [
        (11008, "bfloat16", (22, 128)),  # 1 row: 8-byte vectors, 2752 of them
        (11008, "float32", (43, 128)),  # 2 float32 a thread: 5504
        (14336, "float16", (28, 128)),
        (64 * 11008, "bfloat16", (688, 128)),  # 688 blocks of 16-byte vectors: enough
        (4096 * 132, "bfloat16", (528, 128)),  # 528 blocks of 16-byte vectors
        (8 * 128 * 131, "bfloat16", (262, 128)),  # 131 blocks of 16 bytes: 8-byte ones instead
        (1, "float32", (1, 128)),
    ],
)
def test_swiglu_grid_takes_8_byte_vectors_below_132_blocks(
    n: int, dtype: str, expected: tuple[int, int]
) -> None:
    assert mlp_geometry.swiglu_geometry(n, dtype, SMS) == expected


@pytest.mark.parametrize(
    ("n", "dtype", "vector_bytes", "form"),
    [
        (11008, "bfloat16", 8, "exact"),  # 2752 8-byte vectors, 2816 threads
        (11008, "float32", 8, "exact"),
        (4100, "float16", 8, "exact"),  # 1025 vectors
        (4099, "bfloat16", 0, ""),  # a tail past the last 8-byte vector
        (4098, "float32", 8, "exact"),  # float32's 8-byte vector is 2 elements
        (4098, "bfloat16", 0, ""),
        # 88064 16-byte vectors, 688 blocks: a thread for each
        (64 * 11008, "bfloat16", 16, "exact_streaming"),
        (64 * 11008, "float32", 16, "exact_streaming"),  # 176128 16-byte vectors, 1376 blocks
        (64 * 11008 + 4, "bfloat16", 0, ""),  # a tail past the last 16-byte vector
        (8 * 128 * 131, "bfloat16", 8, "exact"),  # 16-byte blocks short of 132: 8-byte ones
    ],
)
def test_swiglu_takes_the_exact_kernel_where_a_thread_has_one_whole_vector(
    n: int, dtype: str, vector_bytes: int, form: str
) -> None:
    """The host's choice of mlp.cu's exact form and its vector, against a hand count of the
    grid's vectors and threads; forward and backward alike (both move at most 64 MiB here), on
    swiglu_geometry's grid."""
    for op in ("swiglu", "swiglu_backward"):
        launch = mlp_geometry.swiglu_launch(op, n, dtype, SMS)
        assert (launch.grid, launch.block) == mlp_geometry.swiglu_geometry(n, dtype, SMS)
        _assert_exact_where_aligned(launch, op, dtype, vector_bytes, form)


@pytest.mark.parametrize(
    ("rows", "cols", "dtype", "vector_bytes", "form"),
    [
        (1, 11008, "bfloat16", 8, "exact"),  # a single row: the 2-D form's grid of one row
        (1, 11008, "float32", 8, "exact"),
        (1, 4099, "float32", 0, ""),  # a row is not a whole number of 8-byte vectors
        (2, 11008, "bfloat16", 8, "exact"),
        (3, 4099, "float32", 0, ""),
        (3, 4100, "float16", 8, "exact"),
        # 1376 16-byte vectors a row, 11 blocks of 128 a row
        (64, 11008, "bfloat16", 16, "exact_streaming"),
        (64, 11004, "bfloat16", 0, ""),  # a row is not a whole number of 16-byte vectors
        (65_535, 8, "bfloat16", 8, "exact"),  # a grid row for each row
        (70_001, 8, "bfloat16", 0, ""),  # more rows than grid.y: the row loop
    ],
)
def test_silu_and_mul_takes_the_exact_kernel_where_a_thread_has_one_whole_vector(
    rows: int, cols: int, dtype: str, vector_bytes: int, form: str
) -> None:
    for op in ("silu_and_mul", "silu_and_mul_backward"):
        launch = mlp_geometry.silu_and_mul_launch(op, rows, cols, dtype, SMS)
        assert (launch.grid, launch.block) == mlp_geometry.silu_and_mul_geometry(
            rows, cols, dtype, SMS
        )
        _assert_exact_where_aligned(launch, op, dtype, vector_bytes, form)


def test_one_row_of_16_byte_vectors_takes_the_streaming_2_d_form() -> None:
    """A row long enough for 132 blocks of 16-byte vectors (135_168 bfloat16 outputs, 16_896
    vectors) takes the streaming 2-D form."""
    launch = mlp_geometry.silu_and_mul_launch("silu_and_mul", 1, 135_168, "bfloat16", SMS)
    assert (launch.name, launch.grid) == (
        "mlp::silu_and_mul_exact_streaming<__nv_bfloat16>",
        (132, 1),
    )


def _assert_exact_where_aligned(
    launch: mlp_geometry.ElementwiseLaunch,
    op: str,
    dtype: str,
    vector_bytes: int,
    form: str,
) -> None:
    """The kernel names written out by hand: mlp.cu's form ``form`` ("exact" in vectors of
    ``vector_bytes``, "exact_streaming" through streaming cache hints: the 16-byte cases of 64 x
    11008) for pointers aligned to ``vector_bytes``
    (16 bytes, or 8), the general kernel for pointers short of that (4, 2 bytes) and wherever
    (0) no form covers the shape."""
    kernel_type = mlp_geometry.KERNEL_TYPE[dtype]
    general = f"mlp::{op}<{kernel_type}>"
    exact = general
    if form == "exact":
        exact = f"mlp::{op}_exact<{kernel_type}, {vector_bytes}>"
    elif form:
        exact = f"mlp::{op}_{form}<{kernel_type}>"
    assert (launch.general, launch.general_grid) == (general, launch.grid)
    for pointers_alignment in (16, 8, 4, 2):
        aligned = vector_bytes and pointers_alignment % vector_bytes == 0
        assert launch.kernel_for(pointers_alignment) == (exact if aligned else general, launch.grid)


@pytest.mark.parametrize(
    ("addresses", "expected"),
    [
        ((0x7F00_0000_1000,), 16),
        ((0x7F00_0000_1000, 0x7F00_0000_1008), 8),
        ((0x7F00_0000_1000, 0x7F00_0000_1004, 0x7F00_0000_1010), 4),
        ((0x7F00_0000_1002,), 2),
        ((0x7F00_0000_1003, 0x7F00_0000_1000), 1),
        ((0, 0x7F00_0000_1040), 16),  # a null pointer (an unused one) divides by anything
    ],
)
def test_alignment_of_is_the_largest_vector_dividing_every_address(
    addresses: tuple[int, ...], expected: int
) -> None:
    assert mlp_geometry.alignment_of(*addresses) == expected


@pytest.mark.parametrize(
    ("op", "n", "dtype", "streaming"),
    [
        # gate, up and out of 2 bytes an element: 6 bytes, 64 MiB at 11_184_810.67 elements
        ("swiglu", 11_184_808, "bfloat16", True),  # 67_108_848 bytes of 67_108_864
        ("swiglu", 11_184_816, "bfloat16", False),  # 67_108_896 bytes
        ("swiglu", 4 * 2**20, "float32", True),  # 3 arrays of 16 MiB: 48 MiB
        ("swiglu", 8 * 2**20 + 4, "float32", False),  # 96 MiB (not whole blocks: the exact form)
        # the backward reads gate, up and the gradient and writes two gradients: 5 arrays
        ("swiglu_backward", 6_710_880, "float16", True),  # 67_108_800 bytes of 67_108_864
        ("swiglu_backward", 6_710_888, "float16", False),  # 67_108_880 bytes
        ("swiglu", 8 * 2**20, "float16", True),  # 48 MiB forward, 80 MiB backward
        ("swiglu_backward", 8 * 2**20, "float16", False),
    ],
)
def test_exact_forms_stream_up_to_64_mib_moved(
    op: str, n: int, dtype: str, streaming: bool
) -> None:
    """The host takes the 16-byte exact form through streaming cache hints where the call reads
    and writes at most 64 MiB (STREAMING_MAX_BYTES), past it plain accesses (the backwards in
    8-byte vectors); byte counts by hand."""
    kernel_type = mlp_geometry.KERNEL_TYPE[dtype]
    launch = mlp_geometry.swiglu_launch(op, n, dtype, SMS)
    if streaming:
        expected = (f"mlp::{op}_exact_streaming<{kernel_type}>", 16)
    elif op == "swiglu_backward":
        expected = (f"mlp::{op}_exact<{kernel_type}, 8>", 8)
    else:
        expected = (f"mlp::{op}_exact<{kernel_type}, 16>", 16)
    assert (launch.name, launch.alignment) == expected


@pytest.mark.parametrize(
    ("op", "shape", "dtype", "grid", "name", "alignment"),
    [
        # gate, up and out: 3 arrays of 4096 * 14336 + 8 bfloat16, 336 MiB; a thread a 16-byte
        # vector (8 elements): 7_340_033 threads, 57_345 blocks of 128, the last not whole
        (
            "swiglu",
            (4096 * 14336 + 8,),
            "bfloat16",
            57_345,
            "swiglu_exact<__nv_bfloat16, 16>",
            16,
        ),
        # 5 arrays, 560 MiB: a thread an 8-byte vector (4 elements), twice the blocks
        (
            "swiglu_backward",
            (4096 * 14336,),
            "bfloat16",
            114_688,
            "swiglu_backward_exact<__nv_bfloat16, 8>",
            8,
        ),
        # 5 arrays of 8 * 2**20 float16, 80 MiB: 2**21 8-byte vectors
        ("swiglu_backward", (8 * 2**20,), "float16", 16_384, "swiglu_backward_exact<__half, 8>", 8),
        # rows of 11008 float32: 2752 16-byte vectors (21.5 blocks of 128) or 5504 8-byte ones (43)
        (
            "silu_and_mul",
            (16384, 11008),
            "float32",
            (22, 16384),
            "silu_and_mul_exact<float, 16>",
            16,
        ),
        (
            "silu_and_mul_backward",
            (16384, 11008),
            "float32",
            (43, 16384),
            "silu_and_mul_backward_exact<float, 8>",
            8,
        ),
    ],
)
def test_backwards_past_64_mib_moved_take_8_byte_vectors(
    op: str, shape: tuple[int, ...], dtype: str, grid: Any, name: str, alignment: int
) -> None:
    """Past STREAMING_MAX_BYTES the forwards take plain 16-byte vectors and the backwards plain
    8-byte ones, on a grid with a thread for each; grids and names by hand."""
    if len(shape) == 1:
        launch = mlp_geometry.swiglu_launch(op, shape[0], dtype, SMS)
    else:
        launch = mlp_geometry.silu_and_mul_launch(op, *shape, dtype, SMS)
    assert (launch.grid, launch.block) == (grid, 128)
    assert (launch.name, launch.alignment) == (f"mlp::{name}", alignment)


@pytest.mark.parametrize(
    ("op", "shape", "dtype", "grid"),
    [
        # 4096 * 14336 bfloat16: 7_340_032 16-byte vectors, 57_344 blocks of 128 exactly
        ("swiglu", (4096 * 14336,), "bfloat16", 57_344),
        # 3 arrays of 11_185_152 float16 (10_923 blocks of 1024), 67_110_912 bytes: past 64 MiB
        ("swiglu", (11_185_152,), "float16", 10_923),
        # rows of 14336 bfloat16: 1792 vectors, 14 blocks a row
        ("silu_and_mul", (4096, 14336), "bfloat16", (14, 4096)),
        # rows of 14336 float32: 3584 vectors, 28 blocks a row
        ("silu_and_mul", (16384, 14336), "float32", (28, 16384)),
    ],
)
def test_forwards_past_64_mib_over_whole_blocks_take_the_plain_exact_form(
    op: str, shape: tuple[int, ...], dtype: str, grid: Any
) -> None:
    """Past STREAMING_MAX_BYTES, where the elements (silu_and_mul: a row's) are a whole number
    of blocks of 128 16-byte vectors, the forwards take the plain 16-byte exact form for 16-byte
    aligned pointers, the general kernel on the same grid for any pointer short of that (the
    whole forms that served these shapes gained under 3%, docs/bench-mlp-forms.md); grids and
    names by hand."""
    if len(shape) == 1:
        launch = mlp_geometry.swiglu_launch(op, shape[0], dtype, SMS)
    else:
        launch = mlp_geometry.silu_and_mul_launch(op, *shape, dtype, SMS)
    kernel_type = mlp_geometry.KERNEL_TYPE[dtype]
    exact = (f"mlp::{op}_exact<{kernel_type}, 16>", grid)
    general = (f"mlp::{op}<{kernel_type}>", grid)
    assert (launch.block, launch.alignment) == (128, 16)
    assert [launch.kernel_for(alignment) for alignment in (16, 8)] == [exact, general]


def test_exact_kernels_index_fewer_than_2_31_elements() -> None:
    """Their 32-bit index: x of silu_and_mul holds 2 * rows * cols elements (swiglu's count is
    bounded the same way), whatever threads the grid has."""
    assert mlp_geometry.exact_vector_bytes(2**29, 1, 2**30 - 2, "float32") == 8
    assert mlp_geometry.exact_vector_bytes(2**29, 1, 2**30, "float32") == 0
    assert mlp_geometry.exact_vector_bytes(2**20, 2**11, 2**19, "bfloat16") == 0


@pytest.mark.parametrize(
    ("rows", "cols", "dtype", "expected"),
    [
        (1, 11008, "bfloat16", ((22, 1), 128)),
        (64, 11008, "bfloat16", ((11, 64), 128)),  # 704 blocks: 16-byte vectors
        (3, 4099, "float32", ((17, 3), 128)),  # 1025 vectors of 8 bytes, rounded up
        (70_001, 8, "bfloat16", ((1, 65535), 64)),
    ],
)
def test_silu_and_mul_grid_takes_8_byte_vectors_below_132_blocks(
    rows: int, cols: int, dtype: str, expected: tuple[tuple[int, int], int]
) -> None:
    assert mlp_geometry.silu_and_mul_geometry(rows, cols, dtype, SMS) == expected


@pytest.mark.parametrize(
    ("rows", "cols", "dtype", "expected"),
    [
        (1, 4096, "bfloat16", ("rms_norm_fixed<__nv_bfloat16, 4096>", 1, (256, 1))),
        (64, 4096, "bfloat16", ("rms_norm_fixed<__nv_bfloat16, 4096>", 64, (256, 1))),
        (132, 4096, "float16", ("rms_norm_fixed<__half, 4096>", 132, (256, 1))),
        (1, 4096, "float32", ("rms_norm_fixed<float, 4096>", 1, (512, 1))),  # 1024 vectors
        (64, 5120, "bfloat16", ("rms_norm_fixed<__nv_bfloat16, 5120>", 64, (320, 1))),
        (1, 5120, "float32", ("rms_norm_fixed<float, 5120>", 1, (320, 1))),  # 1280: 4 a thread
        (132, 8192, "float16", ("rms_norm_fixed<__half, 8192>", 132, (512, 1))),
        (1, 8192, "float32", ("rms_norm_fixed<float, 8192>", 1, (512, 1))),  # 2048: 4 a thread
        (2, 8, "bfloat16", ("rms_norm_short<__nv_bfloat16>", 2, (64, 1))),  # at least BLOCK_MIN
        (1, 2048, "float32", ("rms_norm_short<float>", 1, (512, 1))),
        # more rows than SMs: the form bounded to fill an SM
        (133, 4096, "bfloat16", ("rms_norm_fixed_full<__nv_bfloat16, 4096>", 133, (256, 1))),
        (8191, 8192, "float32", ("rms_norm_fixed_full<float, 8192>", 8191, (512, 1))),
        (16384, 8192, "bfloat16", ("rms_norm_fixed_full<__nv_bfloat16, 8192>", 16384, (512, 1))),
        # float32 rows of 8192 from 8192 rows on too (the reread form gained under 3%)
        (8192, 8192, "float32", ("rms_norm_fixed_full<float, 8192>", 8192, (512, 1))),
        (2**22 - 1, 8192, "float32", ("rms_norm_fixed_full<float, 8192>", 2**22 - 1, (512, 1))),
        (2**22, 8192, "float32", ("rms_norm<float>", 2**22, (512, 1))),
        # a block a row while the grid has fewer than MAX_GRID_THREADS threads, then the general
        (2**22 - 1, 8192, "float16", ("rms_norm_fixed_full<__half, 8192>", 2**22 - 1, (512, 1))),
        (2**22, 8192, "bfloat16", ("rms_norm<__nv_bfloat16>", 2**22, (256, 1))),
        # the general kernel: 513 vectors, 4 a thread, in whole blocks of 64 threads (not 256)
        (3, 4104, "bfloat16", ("rms_norm<__nv_bfloat16>", 3, (192, 1))),
        (133, 4104, "bfloat16", ("rms_norm<__nv_bfloat16>", 133, (192, 1))),
        (4096, 4104, "float32", ("rms_norm<float>", 4096, (320, 1))),  # 1026 vectors
        (4096, 7168, "float32", ("rms_norm<float>", 4096, (448, 1))),
        (4096, 2048, "float32", ("rms_norm<float>", 4096, (128, 1))),  # 512: a power of two
        (4096, 200, "float32", ("rms_norm<float>", 1024, (16, 4))),  # rows sharing a block
        (1, 4099, "bfloat16", ("rms_norm<__nv_bfloat16>", 1, (192, 1))),  # 513, misaligned
        (1, 16384, "bfloat16", ("rms_norm<__nv_bfloat16>", 1, (512, 1))),  # 2048 vectors
    ],
)
def test_norm_launch_takes_the_fixed_short_or_general_kernel(
    rows: int, cols: int, dtype: str, expected: tuple[str, int, tuple[int, int]]
) -> None:
    name, grid, block = expected
    launch = mlp_geometry.norm_launch("rms_norm", rows, cols, dtype, H200)
    assert launch == ("mlp::" + name, grid, block)


@pytest.mark.parametrize(
    ("rows", "dtype", "form"),
    [
        (1, "bfloat16", "add_rms_norm_fixed_full"),  # 16-bit: few rows are faster without
        (63, "float16", "add_rms_norm_fixed_full"),
        (64, "bfloat16", "add_rms_norm_fixed"),
        (132, "float16", "add_rms_norm_fixed"),
        (1, "float32", "add_rms_norm_fixed"),
        (133, "float32", "add_rms_norm_fixed_full"),  # more rows than SMs
        (133, "bfloat16", "add_rms_norm_fixed_full"),
    ],
)
def test_add_rms_norm_streams_its_rows_from_the_measured_row_count(
    rows: int, dtype: str, form: str
) -> None:
    """add_rms_norm's fixed-length rows take the streaming few-row form (add_rms_norm_fixed) from
    STREAMING_FROM_ROWS rows (every count for float32) to a row an SM, the form for many rows
    (add_rms_norm_fixed_full) elsewhere: the row counts written out by hand."""
    launch = mlp_geometry.norm_launch("add_rms_norm", rows, 4096, dtype, H200)
    assert launch[:3] == (
        mlp_geometry.kernel_name(form, dtype, 4096),
        rows,
        (256 if dtype != "float32" else 512, 1),
    )


@pytest.mark.parametrize("target", ["sm_90", "sm_80", "sm_120", "gfx942"])
@pytest.mark.parametrize(
    ("op", "rows", "cols", "dtype", "kernel_type", "threads"),
    [
        ("rms_norm", 16384, 8192, "float32", "float", 512),  # 2048 vectors, 4 a thread
        ("add_rms_norm", 4096, 8192, "float16", "__half", 512),  # 1024 vectors, 2 a thread
        ("add_rms_norm", 16384, 8192, "float32", "float", 512),
        ("rms_norm", 4096, 4096, "float32", "float", 512),
    ],
)
def test_fixed_norms_for_many_rows_take_the_full_form_on_every_family(
    target: str, op: str, rows: int, cols: int, dtype: str, kernel_type: str, threads: int
) -> None:
    """Rows that took sm_90's reread form or its cap on blocks an SM (both gained under 3%,
    docs/bench-mlp-forms.md) take the fixed-length form for many rows, at a block a row and as
    many blocks an SM as fit, on every target alike."""
    facts = mlp_geometry.DeviceFacts(target, SMS)
    launch = mlp_geometry.norm_launch(op, rows, cols, dtype, facts)
    assert launch == (f"mlp::{op}_fixed_full<{kernel_type}, {cols}>", rows, (threads, 1))
    plan = mlp_geometry.norm_plan(op, (rows, cols), dtype, facts)
    assert plan == mlp_geometry.Plan(launch.name, rows, (threads, 1), (rows, cols))


# mlp_tuning's constants that must agree with mlp.cu's (launch bounds, vectors a thread), by name
MIRRORED = {
    "kVectorBytes": mlp_geometry.VECTOR_BYTES,
    "kNarrowBytes": mlp_geometry.NARROW_BYTES,
    "kElementwiseBlockThreads": mlp_geometry.ELEMENTWISE_BLOCK,
    "kRowBlockThreads": mlp_geometry.ROW_BLOCK_MAX,
    "kCachedChunks": mlp_geometry.CACHED_CHUNKS,
    "kShortRowThreads": mlp_tuning.SHORT_ROW_THREADS,
    "kBackwardCachedChunks": mlp_geometry.BACKWARD_CACHED_CHUNKS,
    "kShortBackwardThreads": mlp_geometry.SHORT_BACKWARD_THREADS,
    "kShortBackwardChunks": mlp_geometry.SHORT_BACKWARD_CHUNKS,
    "kWeightGradThreads": mlp_geometry.WEIGHT_GRAD_THREADS,
    "kFixedChunks": mlp_geometry.FIXED_CHUNKS,
    "kFixedRowVectors": mlp_geometry.FIXED_ROW_VECTORS,
}


def test_launch_constants_match_the_kernel_source() -> None:
    """Each constant the host mirrors has the value mlp.cu gives it (read from the source)."""
    source = (Path(__file__).resolve().parent.parent / "kernel_sources/mlp/mlp.cu").read_text()
    found = dict(re.findall(r"^constexpr int (k\w+) = (\d+);", source, flags=re.MULTILINE))
    assert {name: int(found[name]) for name in MIRRORED} == MIRRORED
    fixed = re.findall(r"^  MLP_FIXED_KERNELS\(T, (\d+)\)", source, flags=re.MULTILINE)
    assert tuple(int(cols) for cols in fixed) == mlp_geometry.FIXED_COLUMNS
    types = {kernel_type: dtype for dtype, kernel_type in mlp_geometry.KERNEL_TYPE.items()}
    # the fixed-length backward: instantiated exactly where the host takes it
    backward = re.findall(r"^MLP_FIXED_BACKWARD\((\w+), (\d+)\)", source, flags=re.MULTILINE)
    taken = {
        (dtype, cols)
        for dtype in DTYPES
        for cols in mlp_geometry.FIXED_COLUMNS
        if mlp_geometry.fixed_backward(cols, dtype)
    }
    assert {(types[t], int(cols)) for t, cols in backward} == taken
    assert taken == {(d, 4096) for d in DTYPES} | {("float16", 8192), ("bfloat16", 8192)}


@pytest.mark.parametrize(
    ("rows", "cols", "dtype", "expected"),
    [
        (1, 4096, "bfloat16", 512),  # 512 vectors, one a thread
        (64, 4096, "float32", 512),  # 1024 vectors, two a thread
        (132, 8192, "float16", 512),
        (2, 8, "bfloat16", 64),  # at least BLOCK_MIN threads
        (3, 136, "bfloat16", 64),  # 17 vectors
        (1, 2048, "bfloat16", 256),
        (133, 4096, "bfloat16", 0),  # more rows than the bound
        (1, 8192, "float32", 0),  # 2048 vectors: too long
        (1, 4100, "bfloat16", 0),  # not whole vectors
        (0, 4096, "bfloat16", 0),
    ],
)
def test_short_backward_takes_few_short_rows(
    rows: int, cols: int, dtype: str, expected: int
) -> None:
    assert mlp_geometry.short_backward_threads(rows, cols, dtype, SMS) == expected


@pytest.mark.parametrize(
    ("rows", "dtype", "expected"),
    [
        (1, "bfloat16", None),  # one row: the kernel writes the weight gradient itself
        (1, "float32", None),
        (64, "bfloat16", None),  # the weight sum reads the inputs and the forward's row scales
        (64, "float16", None),
        (64, "float32", (64, 4096)),  # float32 shares, a row a row
    ],
)
def test_short_backward_scratch_follows_the_dtype(
    rows: int, dtype: str, expected: tuple[int, ...] | None
) -> None:
    assert mlp_geometry.short_backward_scratch(rows, 4096, dtype) == expected


@pytest.mark.parametrize(
    ("cols", "partial_rows", "expected"),
    [
        (4096, 1, (32, (128, 1))),
        (4096, 2, (32, (128, 2))),
        (4096, 3, (64, (64, 4))),
        (4096, 264, (128, (32, 8))),
        (4096, 64, (128, (32, 8))),  # the short backward's partial rows
        (8192, 132, (256, (32, 8))),
        (4096, 31, (128, (32, 8))),
        (4096, 133, (128, (32, 8))),
        (300, 5, (10, (32, 8))),
        (64, 0, (1, (128, 1))),  # no rows: the sum writes zeros
    ],
)
def test_weight_gradient_sum_slices_follow_the_partial_rows(
    cols: int, partial_rows: int, expected: tuple[int, tuple[int, int]]
) -> None:
    assert mlp_geometry.weight_grad_geometry(cols, partial_rows) == expected


# ---- GPU: torch inputs, float64 references ----------------------------------------------------


@pytest.fixture
def torch_rng() -> tuple[Any, Any, int]:
    """torch, a CUDA generator with a fresh seed, and the seed (for the failure message)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    seed = secrets.randbits(62)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(seed)
    return torch, generator, seed


def torch_dtype(torch: Any, dtype: str) -> Any:
    return getattr(torch, dtype)


def randn(rng: tuple[Any, Any, int], shape: tuple[int, ...], dtype: str, *, offset: int = 0) -> Any:
    """Random normal values of ``dtype``, as a view starting ``offset`` elements into its buffer."""
    torch, generator, _ = rng
    n = math.prod(shape)
    buffer = torch.randn(offset + n, generator=generator, device="cuda", dtype=torch.float32)
    return buffer.to(torch_dtype(torch, dtype))[offset:].view(shape)


def poisoned(
    rng: tuple[Any, Any, int], shape: tuple[int, ...], dtype: str, *, offset: int = 0
) -> Any:
    """A NaN-filled buffer and a view of ``shape`` inside it, ``offset`` elements in and GUARD
    elements before its end."""
    torch = rng[0]
    n = math.prod(shape)
    buffer = torch.full(
        (offset + n + GUARD,), math.nan, device="cuda", dtype=torch_dtype(torch, dtype)
    )
    return buffer, buffer[offset : offset + n].view(shape)


def assert_guards_intact(buffer: Any, offset: int, n: int) -> None:
    outside = [buffer[:offset], buffer[offset + n :]]
    for part in outside:
        assert bool(part.isnan().all()), "a kernel wrote outside its output"


def assert_close(
    rng: tuple[Any, Any, int], out: Any, reference: Any, dtype: str, what: str
) -> None:
    seed = rng[2]
    got = out.double()
    error = (got - reference).abs()
    bound = RTOL[dtype] * reference.abs() + ATOL[dtype]
    bad = ~(error <= bound)  # NaN counts as bad
    if bool(bad.any()):
        index = int(bad.reshape(-1).nonzero()[0])
        relative = (error / reference.abs().clamp_min(ATOL[dtype])).max().item()
        raise AssertionError(
            f"{what} {dtype} (seed {seed}): {int(bad.sum())} of {bad.numel()} elements off; "
            f"first at flat index {index}: got {got.reshape(-1)[index].item()!r}, "
            f"expected {reference.reshape(-1)[index].item()!r}; max relative error {relative:.3g}"
        )


def ref_swiglu(gate: Any, up: Any) -> Any:
    g = gate.double()
    return g * g.sigmoid() * up.double()


def ref_rms_norm(torch: Any, x: Any, weight: Any, eps: float) -> Any:
    x = x.double()
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight.double()


# Row scales: a float32 sum of squares (positive terms: a thread's few dozen at most in turn, then
# a tree of a few levels), its square root taken by rsqrtf (2 ulp)
ROW_SCALE_TOLERANCE = 4e-6


def assert_row_scales(
    rng: tuple[Any, Any, int], buffer: Any, scales: Any, of: Any, eps: float, what: str
) -> None:
    """The row scales a forward norm stored (a view at the start of a NaN-poisoned ``buffer``)
    against float64's 1 / sqrt(mean(x^2) + eps) of ``of`` (x, or the stored sum), and nothing
    stored past them."""
    want = (of.double().square().mean(-1) + eps).rsqrt()
    bad = ~((scales.double() - want).abs() <= ROW_SCALE_TOLERANCE * want)  # NaN counts as bad
    if bool(bad.any()):
        index = int(bad.nonzero()[0])
        raise AssertionError(
            f"{what} (seed {rng[2]}): {int(bad.sum())} of {bad.numel()} row scales off; first "
            f"row {index}: got {scales[index].item()!r}, expected {want[index].item()!r}"
        )
    assert_guards_intact(buffer, 0, scales.numel())


# all+4: 8 bytes in for the 16-bit dtypes (their 8-byte vectors only), 16 for float32
MISALIGNED = {
    "aligned": (0, 0, 0),
    "all+1": (1, 1, 1),
    "first+1": (1, 0, 0),
    "last+1": (0, 0, 1),
    "all+4": (4, 4, 4),
}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", MISALIGNED)
@pytest.mark.parametrize("n", SWIGLU_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu(torch_rng: Any, dtype: str, n: int, layout: str) -> None:
    gate_at, up_at, out_at = MISALIGNED[layout]
    gate = randn(torch_rng, (n,), dtype, offset=gate_at)
    up = randn(torch_rng, (n,), dtype, offset=up_at)
    buffer, out = poisoned(torch_rng, (n,), dtype, offset=out_at)
    assert mlp.swiglu(gate, up, out=out) is out
    assert_close(torch_rng, out, ref_swiglu(gate, up), dtype, f"swiglu n={n} {layout}")
    assert_guards_intact(buffer, out_at, n)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_views_of_a_prepared_shape_take_the_general_kernels(
    torch_rng: Any, dtype: str
) -> None:
    """1 x 11008 goes to the exact forms, 8-byte vectors whose pointers mlp.cu does not test. Once
    an aligned call prepared the shape's launches, views one element into their buffers must
    leave kernelpack.mlp's hot call (the full path takes the general kernel) and take the
    prepared entry's general kernel through torch.ops.kernelpack; each is right, and out= is
    written within its bounds."""
    torch = torch_rng[0]
    from kernelpack import torch_ops

    torch_ops.register()
    cols = 11008
    for offset in (0, 1, 0, 1):  # aligned first: the shape's entries are the exact forms'
        gate = randn(torch_rng, (1, cols), dtype, offset=offset)
        up = randn(torch_rng, (1, cols), dtype, offset=offset)
        x = randn(torch_rng, (1, 2 * cols), dtype, offset=offset)
        swiglu_expected = ref_swiglu(gate, up)
        pair_expected = ref_swiglu(x[:, :cols], x[:, cols:])
        what = f"1x{cols} {offset} element(s) in"
        swiglu_buffer, swiglu_out = poisoned(torch_rng, (1, cols), dtype, offset=offset)
        pair_buffer, pair_out = poisoned(torch_rng, (1, cols), dtype, offset=offset)
        assert mlp.swiglu(gate, up, out=swiglu_out) is swiglu_out
        assert mlp.silu_and_mul(x, out=pair_out) is pair_out
        assert_close(torch_rng, swiglu_out, swiglu_expected, dtype, "mlp.swiglu " + what)
        assert_close(torch_rng, pair_out, pair_expected, dtype, "mlp.silu_and_mul " + what)
        assert_guards_intact(swiglu_buffer, offset, cols)
        assert_guards_intact(pair_buffer, offset, cols)
        ops = torch.ops.kernelpack
        assert_close(torch_rng, ops.swiglu(gate, up), swiglu_expected, dtype, "ops.swiglu " + what)
        assert_close(
            torch_rng, ops.silu_and_mul(x), pair_expected, dtype, "ops.silu_and_mul " + what
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_allocates_its_output_like_gate(torch_rng: Any, dtype: str) -> None:
    torch = torch_rng[0]
    gate = randn(torch_rng, (3, 5, 7), dtype)
    up = randn(torch_rng, (3, 5, 7), dtype)
    out = mlp.swiglu(gate, up)
    assert isinstance(out, torch.Tensor)
    assert (out.shape, out.dtype, out.device) == (gate.shape, gate.dtype, gate.device)
    assert_close(torch_rng, out, ref_swiglu(gate, up), dtype, "swiglu 3-D")
    empty = mlp.swiglu(gate[:0], up[:0])
    assert empty.shape == (0, 5, 7)


ROW_LAYOUTS = {"aligned": (0, 0, 0), "all+1": (1, 1, 1), "second+1": (0, 1, 0)}


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["aligned", "all+1", "last+1", "all+4"])
@pytest.mark.parametrize(
    ("rows", "cols"),
    [(1, 1), (3, 3), (2, 8), (5, 9), (1, 4096), (3, 4099), (1, 11008), (64, 11008), (70_001, 8)],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(torch_rng: Any, dtype: str, rows: int, cols: int, layout: str) -> None:
    x_at, _, out_at = MISALIGNED[layout]
    x = randn(torch_rng, (rows, 2 * cols), dtype, offset=x_at)
    buffer, out = poisoned(torch_rng, (rows, cols), dtype, offset=out_at)
    assert mlp.silu_and_mul(x, out=out) is out
    reference = ref_swiglu(x[:, :cols], x[:, cols:])
    assert_close(torch_rng, out, reference, dtype, f"silu_and_mul {rows}x{cols} {layout}")
    assert_guards_intact(buffer, out_at, rows * cols)


@pytest.mark.gpu
@pytest.mark.parametrize("grid", [1, 5, 40])  # 16-byte vectors striding (1, 5); 8-byte (40)
@pytest.mark.parametrize("block", [64, 128])  # 128, and 64: silu_and_mul on short rows
@pytest.mark.parametrize("offset", [0, 4, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_kernels_are_right_on_any_grid(
    torch_rng: Any, dtype: str, grid: int, block: int, offset: int
) -> None:
    """swiglu and silu_and_mul launched directly: a grid with a thread for every 8-byte vector
    takes them, a smaller one the 16-byte vectors (striding), misaligned arrays the scalar path;
    each is right, in blocks of 64 threads as of 128."""
    torch = torch_rng[0]
    stream = torch.cuda.current_stream().cuda_stream
    n = 4101  # a tail past the last vector of either width
    gate = randn(torch_rng, (n,), dtype, offset=offset)
    up = randn(torch_rng, (n,), dtype, offset=offset)
    buffer, out = poisoned(torch_rng, (n,), dtype, offset=offset)
    kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("swiglu", dtype))
    kernel.launch(grid, block, gate.data_ptr(), up.data_ptr(), out.data_ptr(), n, stream=stream)
    assert_close(
        torch_rng, out, ref_swiglu(gate, up), dtype, f"swiglu grid {grid}x{block} +{offset}"
    )
    assert_guards_intact(buffer, offset, n)

    rows, cols = 3, 4104
    x = randn(torch_rng, (rows, 2 * cols), dtype, offset=offset)
    buffer, out = poisoned(torch_rng, (rows, cols), dtype, offset=offset)
    kernel = mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("silu_and_mul", dtype))
    kernel.launch((grid, rows), block, x.data_ptr(), out.data_ptr(), rows, cols, stream=stream)
    reference = ref_swiglu(x[:, :cols], x[:, cols:])
    assert_close(torch_rng, out, reference, dtype, f"silu_and_mul grid {grid}x{block} +{offset}")
    assert_guards_intact(buffer, offset, rows * cols)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ROW_LAYOUTS)
@pytest.mark.parametrize(("rows", "cols"), ROW_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(torch_rng: Any, dtype: str, rows: int, cols: int, layout: str) -> None:
    torch = torch_rng[0]
    x_at, weight_at, out_at = ROW_LAYOUTS[layout]
    x = randn(torch_rng, (rows, cols), dtype, offset=x_at)
    weight = randn(torch_rng, (cols,), dtype, offset=weight_at)
    buffer, out = poisoned(torch_rng, (rows, cols), dtype, offset=out_at)
    assert mlp.rms_norm(x, weight, eps=EPS, out=out) is out
    reference = ref_rms_norm(torch, x, weight, EPS)
    assert_close(torch_rng, out, reference, dtype, f"rms_norm {rows}x{cols} {layout}")
    assert_guards_intact(buffer, out_at, rows * cols)


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ROW_LAYOUTS)
@pytest.mark.parametrize(("rows", "cols"), ROW_CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_add_rms_norm(torch_rng: Any, dtype: str, rows: int, cols: int, layout: str) -> None:
    torch = torch_rng[0]
    x_at, residual_at, _ = ROW_LAYOUTS[layout]
    n = rows * cols
    x_buffer, x = poisoned(torch_rng, (rows, cols), dtype, offset=x_at)
    residual_buffer, residual = poisoned(torch_rng, (rows, cols), dtype, offset=residual_at)
    x.copy_(randn(torch_rng, (rows, cols), dtype))
    residual.copy_(randn(torch_rng, (rows, cols), dtype))
    weight = randn(torch_rng, (cols,), dtype)
    stored_sum = (x.double() + residual.double()).to(x.dtype)
    expected_x = ref_rms_norm(torch, stored_sum, weight, EPS)
    assert mlp.fused_add_rms_norm(x, residual, weight, eps=EPS) is None
    what = f"fused_add_rms_norm {rows}x{cols} {layout}"
    assert_close(torch_rng, residual, stored_sum.double(), dtype, what + " residual")
    assert_close(torch_rng, x, expected_x, dtype, what + " x")
    assert_guards_intact(x_buffer, x_at, n)
    assert_guards_intact(residual_buffer, residual_at, n)


# (grid, threads per row, rows per block) the ops never pick for 1001 rows: grids that stride over
# the rows, rows narrower than, as wide as and wider than a wavefront, last blocks past the end.
# (kernel suffix, grid, threads a row, rows a block): the general kernels, then the short-row ones
# (one row a block, a thread one or two vectors, the scalar loop past that: 264 columns are 33
# 16-bit vectors, 66 float32 ones; at 64 threads float32 takes two vectors a thread, at 32 threads
# float32 and at 16 every dtype the scalar loop)
ROW_GEOMETRIES = [
    ("", 1, 1, 64),
    ("", 3, 8, 16),
    ("", 2, 32, 4),
    ("", 5, 64, 2),
    ("", 3, 512, 1),
    ("", 7, 2, 256),
    ("_short", 1, 64, 1),
    ("_short", 3, 128, 1),
    ("_short", 2, 512, 1),
    ("_short", 3, 32, 1),
    ("_short", 2, 16, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize(("kind", "grid", "threads", "per_block"), ROW_GEOMETRIES)
@pytest.mark.parametrize("cols", [264, 263])  # the vector path, and the scalar one
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_kernels_are_right_on_any_geometry(
    torch_rng: Any, dtype: str, cols: int, kind: str, grid: int, threads: int, per_block: int
) -> None:
    """The row kernels launched directly: any grid and block shape they allow is right."""
    torch = torch_rng[0]
    rows = 1001
    stream = torch.cuda.current_stream().cuda_stream
    x = randn(torch_rng, (rows, cols), dtype)
    weight = randn(torch_rng, (cols,), dtype)
    buffer, out = poisoned(torch_rng, (rows, cols), dtype)
    scales_buffer, scales = poisoned(torch_rng, (rows,), "float32")
    mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("rms_norm" + kind, dtype)).launch(
        grid,
        (threads, per_block),
        x.data_ptr(),
        weight.data_ptr(),
        out.data_ptr(),
        scales.data_ptr(),
        rows,
        cols,
        EPS,
        stream=stream,
    )
    what = f"rms_norm{kind} {rows}x{cols} grid {grid} block {threads}x{per_block}"
    assert_close(torch_rng, out, ref_rms_norm(torch, x, weight, EPS), dtype, what)
    assert_guards_intact(buffer, 0, rows * cols)
    assert_row_scales(torch_rng, scales_buffer, scales, x, EPS, what)

    residual = randn(torch_rng, (rows, cols), dtype)
    stored_sum = (x.double() + residual.double()).to(x.dtype)
    scales_buffer, scales = poisoned(torch_rng, (rows,), "float32")
    mlp_launch.load_kernel("cuda:0", mlp_geometry.kernel_name("add_rms_norm" + kind, dtype)).launch(
        grid,
        (threads, per_block),
        x.data_ptr(),
        residual.data_ptr(),
        weight.data_ptr(),
        x.data_ptr(),
        residual.data_ptr(),
        scales.data_ptr(),
        rows,
        cols,
        EPS,
        stream=stream,
    )
    what = f"fused_add_rms_norm{kind} {rows}x{cols} grid {grid} block {threads}x{per_block}"
    assert_close(torch_rng, residual, stored_sum.double(), dtype, what + " residual")
    assert_close(torch_rng, x, ref_rms_norm(torch, stored_sum, weight, EPS), dtype, what + " x")
    assert_row_scales(torch_rng, scales_buffer, scales, stored_sum, EPS, what)


# (form, dtype, cols) of the fixed-length rms_norm kernels mlp.cu instantiates
FIXED_FORMS = [
    (form, dtype, cols)
    for form in ("rms_norm_fixed", "rms_norm_fixed_full")
    for dtype in DTYPES
    for cols in mlp_geometry.FIXED_COLUMNS
]


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ROW_LAYOUTS)
@pytest.mark.parametrize(("form", "dtype", "fixed_cols"), FIXED_FORMS)
def test_fixed_row_kernels_are_right_at_any_alignment(
    torch_rng: Any, dtype: str, fixed_cols: int, layout: str, form: str
) -> None:
    """The fixed-length kernels (every form, and add_rms_norm's) launched directly over 67 rows, a
    block for each (their exact contract): misaligned arrays, whose vectors the kernel loads
    rounded down and then drops for the scalar loop, are right too, and nothing outside the
    outputs is written."""
    torch = torch_rng[0]
    rows, cols = 67, fixed_cols
    x_at, weight_at, out_at = ROW_LAYOUTS[layout]
    threads = mlp_geometry.fixed_threads(fixed_cols, dtype)
    stream = torch.cuda.current_stream().cuda_stream
    x = randn(torch_rng, (rows, cols), dtype, offset=x_at)
    weight = randn(torch_rng, (cols,), dtype, offset=weight_at)
    buffer, out = poisoned(torch_rng, (rows, cols), dtype, offset=out_at)
    scales_buffer, scales = poisoned(torch_rng, (rows,), "float32")
    name = mlp_geometry.kernel_name(form, dtype, fixed_cols)
    mlp_launch.load_kernel("cuda:0", name).launch(
        rows,
        (threads, 1),
        x.data_ptr(),
        weight.data_ptr(),
        out.data_ptr(),
        scales.data_ptr(),
        rows,
        cols,
        EPS,
        stream=stream,
    )
    what = f"{name} {rows}x{cols} {layout}"
    assert_close(torch_rng, out, ref_rms_norm(torch, x, weight, EPS), dtype, what)
    assert_guards_intact(buffer, out_at, rows * cols)
    assert_row_scales(torch_rng, scales_buffer, scales, x, EPS, what)

    residual_buffer, residual = poisoned(torch_rng, (rows, cols), dtype, offset=out_at)
    residual.copy_(randn(torch_rng, (rows, cols), dtype))
    stored_sum = (x.double() + residual.double()).to(x.dtype)
    expected_x = ref_rms_norm(torch, stored_sum, weight, EPS)
    scales_buffer, scales = poisoned(torch_rng, (rows,), "float32")
    add_form = "add_rms_norm_fixed_full" if form == "rms_norm_fixed_full" else "add_rms_norm_fixed"
    name = mlp_geometry.kernel_name(add_form, dtype, fixed_cols)
    mlp_launch.load_kernel("cuda:0", name).launch(
        rows,
        (mlp_geometry.fixed_threads(fixed_cols, dtype), 1),
        x.data_ptr(),
        residual.data_ptr(),
        weight.data_ptr(),
        x.data_ptr(),
        residual.data_ptr(),
        scales.data_ptr(),
        rows,
        cols,
        EPS,
        stream=stream,
    )
    what = f"{name} in place {rows}x{cols} {layout}"
    assert_close(torch_rng, residual, stored_sum.double(), dtype, what + " residual")
    assert_close(torch_rng, x, expected_x, dtype, what + " x")
    assert_guards_intact(residual_buffer, out_at, rows * cols)
    assert_row_scales(torch_rng, scales_buffer, scales, stored_sum, EPS, what)


# (kernel, its template's row length or None, grid, threads a row, rows a block): each form of
# the forward norms, the general and short ones at a grid that strides over the 67 rows (rows
# past the grid), the fixed one (exact) at a block a row
NULL_SCALE_FORMS = [
    ("", None, 5, 64, 2),
    ("_short", None, 7, 64, 1),
    ("_fixed", 4096, None, None, 1),
    ("_fixed_full", 4096, None, None, 1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize(("kind", "fixed", "grid", "threads", "per_block"), NULL_SCALE_FORMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_norms_store_no_row_scales_when_given_null(
    torch_rng: Any,
    dtype: str,
    kind: str,
    fixed: int | None,
    grid: int | None,
    threads: int | None,
    per_block: int,
    add: bool,
) -> None:
    """A null row_scales (the inference path's): the same bits out as with row scales, nothing
    written outside the outputs (all poisoned, with guards), the earlier launch's row scales
    left as they were."""
    torch = torch_rng[0]
    rows, cols = 67, fixed or 264
    op = ("add_rms_norm" if add else "rms_norm") + kind
    name = mlp_geometry.kernel_name(op, dtype, *([fixed] if fixed else []))
    threads = threads or mlp_geometry.fixed_threads(cols, dtype)
    stream = torch.cuda.current_stream().cuda_stream
    x, residual = randn(torch_rng, (rows, cols), dtype), randn(torch_rng, (rows, cols), dtype)
    weight = randn(torch_rng, (cols,), dtype)
    scales_buffer, scales = poisoned(torch_rng, (rows,), "float32")
    results = []
    for row_scales in (scales.data_ptr(), 0):
        buffers = [poisoned(torch_rng, (rows, cols), dtype) for _ in range(2 if add else 1)]
        outs = [out.data_ptr() for _, out in buffers]
        inputs = [x.data_ptr(), residual.data_ptr()] if add else [x.data_ptr()]
        mlp_launch.load_kernel("cuda:0", name).launch(
            grid or rows,
            (threads, per_block),
            *inputs,
            weight.data_ptr(),
            *outs,
            row_scales,
            rows,
            cols,
            EPS,
            stream=stream,
        )
        for buffer, _ in buffers:
            assert_guards_intact(buffer, 0, rows * cols)
        results.append([out.clone() for _, out in buffers])
        if row_scales:
            stored = scales.clone()  # what the launch with null must leave as it is
    of = (x.double() + residual.double()).to(x.dtype) if add else x
    assert_row_scales(torch_rng, scales_buffer, scales, of, EPS, name)
    for with_scales, without in zip(*results, strict=True):
        assert torch.equal(with_scales, without), f"{name}: null row_scales changed the result"
    assert torch.equal(scales, stored)


@pytest.mark.gpu
def test_runs_on_the_callers_current_stream(torch_rng: Any) -> None:
    """On a stream held back by a long sleep, the op must see a copy queued before it there: the
    shape's first call (the full checks), then its second (the hot path), each allocating and
    with out=."""
    torch = torch_rng[0]
    n = 1 << 20 | 8  # a shape no other test runs, so that its first call takes the full checks
    gate = randn(torch_rng, (n,), "float32")
    up = randn(torch_rng, (n,), "float32")
    stream = torch.cuda.Stream()
    for call in ("first call", "hot call", "hot call, out="):
        new_gate = randn(torch_rng, (n,), "float32")
        out = torch.full_like(gate, math.nan) if call.endswith("out=") else None
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            torch.cuda._sleep(100_000_000)
            gate.copy_(new_gate)
            result = mlp.swiglu(gate, up, out=out)
        stream.synchronize()
        assert_close(torch_rng, result, ref_swiglu(new_gate, up), "float32", f"swiglu, {call}")


@pytest.mark.gpu
def test_gpu_argument_checks(torch_rng: Any) -> None:
    torch = torch_rng[0]
    x = randn(torch_rng, (4, 8), "float32")
    with pytest.raises(UsageError, match=r"^x: must be C-contiguous"):
        mlp.rms_norm(x.t(), randn(torch_rng, (4,), "float32"))
    with pytest.raises(UsageError, match=r"^weight: a torch tensor on cpu"):
        mlp.rms_norm(x, torch.ones(8))
    with pytest.raises(UsageError, match=r"^up: gate is a GPU array"):
        mlp.swiglu(x, np.zeros((4, 8), np.float32))


@pytest.mark.gpu
def test_hot_path_keeps_every_check_and_each_shape_its_own_launch(torch_rng: Any) -> None:
    """Once a (dtype, device) and a shape have gone through the hot path, a call of another
    shape gets its own prepared launch (right answer, poisoned output), and wrong arguments of
    the planned dtype and device still fail with the checked path's message."""
    torch = torch_rng[0]
    for shape in ((1, 4096), (3, 100), (1, 4096), (2, 7, 40)):
        x = randn(torch_rng, shape, "bfloat16")
        weight = randn(torch_rng, shape[-1:], "bfloat16")
        up = randn(torch_rng, shape, "bfloat16")
        out = torch.full_like(x, float("nan"))
        mlp.rms_norm(x, weight, EPS, out=out)
        assert_close(torch_rng, out, ref_rms_norm(torch, x, weight, EPS), "bfloat16", f"{shape}")
        out.fill_(float("nan"))
        assert mlp.swiglu(x, up, out=out) is out
        assert_close(torch_rng, out, ref_swiglu(x, up), "bfloat16", f"swiglu {shape}")
        got = mlp.silu_and_mul(torch.cat([x, up], -1))
        assert_close(torch_rng, got, ref_swiglu(x, up), "bfloat16", f"silu_and_mul {shape}")
    x = randn(torch_rng, (4, 64), "bfloat16")
    weight = randn(torch_rng, (64,), "bfloat16")
    with pytest.raises(UsageError, match=r"^up: shape \(4, 32\) does not match gate's"):
        mlp.swiglu(x, x[:, :32].contiguous())
    with pytest.raises(UsageError, match=r"^out: shape \(4, 32\) does not match the result's"):
        mlp.swiglu(x, x, out=x[:, :32].contiguous())
    with pytest.raises(UsageError, match=r"^up: dtype float32 differs from gate's bfloat16"):
        mlp.swiglu(x, x.float())
    with pytest.raises(UsageError, match=r"^x: must be C-contiguous"):
        mlp.rms_norm(x.t(), x[0])
    with pytest.raises(UsageError, match=r"^weight: shape \(63,\) does not match x's last"):
        mlp.rms_norm(x, weight[:63])
    with pytest.raises(UsageError, match=r"^eps: must be a finite number >= 0"):
        mlp.rms_norm(x, weight, -1.0)
    with pytest.raises(UsageError, match=r"^residual: shape \(4, 32\) does not match x's"):
        mlp.fused_add_rms_norm(x, x[:, :32].contiguous(), weight)


class ArrayInterfaceOnly:
    """A foreign GPU array that offers nothing but __cuda_array_interface__."""

    def __init__(self, tensor: Any) -> None:
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class DLPackOnly:
    """A foreign GPU array that offers nothing but DLPack."""

    def __init__(self, tensor: Any) -> None:
        self._tensor = tensor

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._tensor.__dlpack_device__()


@pytest.mark.gpu
@pytest.mark.parametrize("wrapper", [ArrayInterfaceOnly, DLPackOnly])
def test_foreign_gpu_arrays(torch_rng: Any, wrapper: type) -> None:
    torch = torch_rng[0]
    x = randn(torch_rng, (6, 4099), "float16")
    weight = randn(torch_rng, (4099,), "float16")
    out = mlp.rms_norm(wrapper(x), wrapper(weight), eps=EPS)
    assert_close(torch_rng, out, ref_rms_norm(torch, x, weight, EPS), "float16", wrapper.__name__)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cupy_arrays(torch_rng: Any, dtype: str) -> None:
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(torch_rng[2])
    host = rng.standard_normal((3, 2 * 1003)).astype(dtype)
    weight = rng.standard_normal(2 * 1003).astype(dtype)
    x = cupy.asarray(host)
    assert isinstance(mlp.silu_and_mul(x), cupy.ndarray)
    checks = {
        "silu_and_mul": (mlp.silu_and_mul(x), np_swiglu(host[:, :1003], host[:, 1003:])),
        "swiglu": (mlp.swiglu(x, x), np_swiglu(host, host)),
        "rms_norm": (mlp.rms_norm(x, cupy.asarray(weight), EPS), np_rms_norm(host, weight, EPS)),
    }
    for what, (out, reference) in checks.items():
        np_assert_close(cupy.asnumpy(out), reference, dtype, f"cupy {what}", torch_rng[2])


# ---- GPU: numpy in, numpy out -----------------------------------------------------------------


def np_swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = gate.astype(np.float64)
    return g / (1.0 + np.exp(-g)) * up.astype(np.float64)


def np_rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight.astype(np.float64)


def np_assert_close(
    out: np.ndarray, reference: np.ndarray, dtype: str, what: str, seed: int
) -> None:
    got = out.astype(np.float64)
    bound = RTOL[dtype] * np.abs(reference) + ATOL[dtype]
    bad = ~(np.abs(got - reference) <= bound)
    assert not bad.any(), (
        f"{what} {dtype} (seed {seed}): {int(bad.sum())} of {bad.size} elements off; "
        f"first {got[bad][0]!r} expected {reference[bad][0]!r}"
    )


def numpy_dtype(dtype: str) -> Any:
    if dtype == "bfloat16":
        return pytest.importorskip("ml_dtypes").bfloat16
    return np.dtype(dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_arrays_are_copied_in_and_out(torch_rng: Any, dtype: str) -> None:
    seed = torch_rng[2]
    rng = np.random.default_rng(seed)
    kind = numpy_dtype(dtype)
    x = rng.standard_normal((5, 2 * 517)).astype(kind)
    weight = rng.standard_normal(2 * 517).astype(kind)
    residual = rng.standard_normal((5, 2 * 517)).astype(kind)

    out = np.full((5, 517), np.nan, dtype=kind)
    assert mlp.silu_and_mul(x, out=out) is out
    np_assert_close(out, np_swiglu(x[:, :517], x[:, 517:]), dtype, "numpy silu_and_mul", seed)
    np_assert_close(mlp.swiglu(x, residual), np_swiglu(x, residual), dtype, "numpy swiglu", seed)
    np_assert_close(
        mlp.rms_norm(x, weight, EPS), np_rms_norm(x, weight, EPS), dtype, "numpy rms_norm", seed
    )
    stored_sum = (x.astype(np.float64) + residual.astype(np.float64)).astype(kind)
    x_view = x[:, ::-1]  # any layout works for numpy: the copies are contiguous
    expected_x = np_rms_norm(stored_sum[:, ::-1], weight, EPS)
    residual_view = residual[:, ::-1]
    mlp.fused_add_rms_norm(x_view, residual_view, weight, EPS)
    np_assert_close(residual_view, stored_sum[:, ::-1].astype(np.float64), dtype, "residual", seed)
    np_assert_close(x_view, expected_x, dtype, "numpy fused_add_rms_norm", seed)


# ---- GPU: past 2**31 elements (64-bit indexing) -----------------------------------------------


@pytest.mark.gpu
def test_huge_swiglu_past_2_31_elements(torch_rng: Any) -> None:
    torch = torch_rng[0]
    n = 2**31 + 4099
    tail = 1 << 16
    gate = torch.zeros(n, dtype=torch.float16, device="cuda")
    up = torch.zeros(n, dtype=torch.float16, device="cuda")
    gate[-tail:] = randn(torch_rng, (tail,), "float16")
    up[-tail:] = randn(torch_rng, (tail,), "float16")
    out = torch.full((n,), math.nan, dtype=torch.float16, device="cuda")
    mlp.swiglu(gate, up, out=out)
    assert not bool(out.isnan().any())
    reference = ref_swiglu(gate[-tail:], up[-tail:])
    assert_close(torch_rng, out[-tail:], reference, "float16", "swiglu past 2**31")
    del gate, up, out
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_huge_rows_past_2_31_elements(torch_rng: Any) -> None:
    """rms_norm and fused_add_rms_norm on 32769 rows of 65536 (bfloat16)."""
    torch = torch_rng[0]
    rows, cols, tail = 2**15 + 1, 2**16, 3
    x = torch.zeros((rows, cols), dtype=torch.bfloat16, device="cuda")
    x[-tail:] = randn(torch_rng, (tail, cols), "bfloat16")
    weight = randn(torch_rng, (cols,), "bfloat16")
    out = torch.full((rows, cols), math.nan, dtype=torch.bfloat16, device="cuda")
    mlp.rms_norm(x, weight, EPS, out=out)
    assert not bool(out.isnan().any())
    expected = ref_rms_norm(torch, x[-tail:], weight, EPS)
    assert_close(torch_rng, out[-tail:], expected, "bfloat16", "rms_norm past 2**31")

    residual = out.zero_()
    residual[-tail:] = randn(torch_rng, (tail, cols), "bfloat16")
    stored_sum = (x[-tail:].double() + residual[-tail:].double()).to(torch.bfloat16)
    mlp.fused_add_rms_norm(x, residual, weight, EPS)
    assert_close(torch_rng, residual[-tail:], stored_sum.double(), "bfloat16", "fused residual")
    expected = ref_rms_norm(torch, stored_sum, weight, EPS)
    assert_close(torch_rng, x[-tail:], expected, "bfloat16", "fused_add_rms_norm past 2**31")
    del x, out, residual
    torch.cuda.empty_cache()


@pytest.mark.gpu
def test_huge_silu_and_mul_past_2_31_elements(torch_rng: Any) -> None:
    """32769 rows of 2 x 65536 in (2**32 + 2**17 elements), 2**31 + 2**16 out (bfloat16)."""
    torch = torch_rng[0]
    rows, cols, tail = 2**15 + 1, 2**16, 2
    x = torch.zeros((rows, 2 * cols), dtype=torch.bfloat16, device="cuda")
    x[-tail:] = randn(torch_rng, (tail, 2 * cols), "bfloat16")
    out = torch.full((rows, cols), math.nan, dtype=torch.bfloat16, device="cuda")
    mlp.silu_and_mul(x, out=out)
    assert not bool(out.isnan().any())
    expected = ref_swiglu(x[-tail:, :cols], x[-tail:, cols:])
    assert_close(torch_rng, out[-tail:], expected, "bfloat16", "silu_and_mul past 2**31")
    del x, out
    torch.cuda.empty_cache()


# (target, multiprocessors): an sm_90 of 132 SMs, a gfx942 of 304 CUs, a small sm_120 of 20
DEVICES = [("sm_90", 132), ("gfx942", 304), ("sm_120", 20)]


@pytest.mark.parametrize(("target", "sms"), DEVICES)
def test_the_grids_that_want_a_block_a_multiprocessor_follow_the_devices_count(
    target: str, sms: int
) -> None:
    """The few-row forms serve up to a row a multiprocessor, and the elementwise grids go to
    8-byte vectors below a block a multiprocessor, at the device's own count (no constant):
    counted by hand at the count and one past it."""
    device = mlp_geometry.DeviceFacts(target, sms)
    assert mlp_geometry.norm_launch("rms_norm", sms, 1024, "bfloat16", device).name == (
        "mlp::rms_norm_short<__nv_bfloat16>"
    )
    assert mlp_geometry.norm_launch("rms_norm", sms + 1, 1024, "bfloat16", device).name == (
        "mlp::rms_norm<__nv_bfloat16>"
    )
    assert mlp_geometry.short_backward_threads(sms, 4096, "bfloat16", sms) == 512
    assert mlp_geometry.short_backward_threads(sms + 1, 4096, "bfloat16", sms) == 0
    # bfloat16, 16-byte vectors of 8 in blocks of 128: sms blocks are sms * 1024 elements
    assert mlp_geometry.swiglu_geometry(sms * 1024, "bfloat16", sms) == (sms, 128)
    # one block short of that: 8-byte vectors of 4, twice the blocks
    assert mlp_geometry.swiglu_geometry((sms - 1) * 1024, "bfloat16", sms) == (2 * sms - 2, 128)
    # rows of 8192 bfloat16 take 256 threads, as many blocks as 512 threads a multiprocessor hold
    assert mlp_geometry.backward_row_geometry(16384, 8192, "bfloat16", device) == (2 * sms, 256)


def test_a_target_takes_its_vendors_family() -> None:
    assert mlp_tuning.family("sm_120") is mlp_tuning.UNTUNED
    assert mlp_tuning.family("sm_90") is mlp_tuning.UNTUNED
    assert mlp_tuning.family("gfx942") is mlp_tuning.AMD
    assert mlp_tuning.family("gfx9-generic") is mlp_tuning.AMD


@pytest.mark.parametrize(
    ("target", "threads", "grid"),
    # float32 rows of 8192 are 2048 vectors, 4 a thread: 512 threads, one block of them a
    # multiprocessor's 512 resident threads; AMD's bound (mlp.cu kBackwardBlockThreads) halves
    # the block, so two a multiprocessor, 8 vectors a thread (4 of them read again in pass 2)
    [("sm_90", 512, 132), ("sm_120", 512, 132), ("gfx942", 256, 264), ("gfx9-generic", 256, 264)],
)
def test_the_backward_block_stays_within_the_familys_bound(
    target: str, threads: int, grid: int
) -> None:
    device = mlp_geometry.DeviceFacts(target, 132)
    assert mlp_geometry.backward_row_geometry(16384, 8192, "float32", device) == (grid, threads)
    assert mlp_geometry.backward_row_geometry(16384, 4096, "bfloat16", device)[1] == 128


@pytest.mark.gpu
def test_the_device_facts_are_the_devices_own() -> None:
    """The multiprocessor count the geometry reads is the one the CUDA runtime reports for the
    device (torch asks it independently), and the target the loaded module's."""
    torch = pytest.importorskip("torch")
    facts = mlp_launch.device_facts("cuda:0")
    properties = torch.cuda.get_device_properties(0)
    assert facts.multiprocessors == properties.multi_processor_count
    assert facts.target == f"sm_{properties.major}{properties.minor}"
