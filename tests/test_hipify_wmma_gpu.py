"""kernelpack's portable WMMA equals CUDA's own nvcuda::wmma on an NVIDIA GPU.

tests/hipify_wmma_gpu.cu compiles buildsys/hipify/compat/kernelpack_hip_wmma.h as kp_nvcuda::wmma
(the same text translated sources include on AMD, with __shfl_sync for the width-32 shuffles) and
runs it beside CUDA's WMMA in the same kernels: load, store, fill, element access and mma_sync bit
for bit on exact inputs, mma_sync on random inputs against float64 (see that file).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from gpu_comparison import run_comparison

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

PROGRAM = Path(__file__).with_name("hipify_wmma_gpu.cu")

# What must have been compared, written out here (not read from the program).
SHAPES = ("m16n16k16", "m32n8k16", "m8n32k16")
MMA_TYPES = (
    "half*half+float->float",
    "half*half+half->half",
    "half*half+half->float",
    "half*half+float->half",
    "bf16*bf16+float->float",
)
MMA_CASES = ("exact-load", "exact-fill", "exact-elementwise", "random-load")
GROUPS = ("32", "64")  # warp ids from threadIdx.x / 32 and / 64 (wave64's warpSize)


def expected_names() -> set[str]:
    mma = {
        f"mma {shape} {types} A={a} B={b} {case} group={group}"
        for shape, types, a, b, case, group in itertools.product(
            SHAPES, MMA_TYPES, ("row", "col"), ("row", "col"), MMA_CASES, GROUPS
        )
    }
    roundtrip = {
        f"roundtrip {shape} {kind} load={load} store={store} group={group}"
        for shape, kind, load, store, group in itertools.product(
            SHAPES, ("float", "half"), ("row", "col"), ("row", "col"), GROUPS
        )
    }
    return mma | roundtrip


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    return run_comparison(PROGRAM, tmp_path_factory.mktemp("wmma"))


def test_every_combination_is_compared(comparison: dict[str, tuple[int, int]]) -> None:
    assert set(comparison) == expected_names()
    assert all(tried > 0 for tried, _ in comparison.values())


def test_equal_to_cuda_wmma(comparison: dict[str, tuple[int, int]]) -> None:
    assert {name: bad for name, (_, bad) in comparison.items() if bad} == {}
