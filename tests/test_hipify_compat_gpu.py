"""The HIP compatibility layer equals CUDA's own intrinsics, bit for bit, on an NVIDIA GPU.

tests/hipify_compat_gpu.cu includes buildsys/hipify/compat/kernelpack_hip_compat.h with every
function renamed kp_<name> and compares each with CUDA's intrinsic on edge and random inputs (see
that file). The same header text is what translated sources include on AMD.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gpu_comparison import run_comparison

from buildsys.hipify.tables import COMPAT_FUNCTIONS

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

PROGRAM = Path(__file__).with_name("hipify_compat_gpu.cu")


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, int]]:
    return run_comparison(PROGRAM, tmp_path_factory.mktemp("compat"))


def test_every_compat_function_is_compared(comparison: dict[str, tuple[int, int]]) -> None:
    """Each function the translator routes to the header was tried (atomicCAS's 16-bit form is
    checked under its own label)."""
    compared = {re.split(r"[(<]", name)[0] for name in comparison}
    if "__shfl/__shfl_xor/__shfl_up/__shfl_down" in compared:  # the bf16 shuffles, one line
        compared |= {"__shfl", "__shfl_xor", "__shfl_up", "__shfl_down"}
    for joined in [name for name in compared if name.count("/")]:
        compared |= set(joined.split("/"))  # conversions, pipeline primitives: one line each
    if "loads-stores" in compared:  # each element read and written through all ten hints
        compared |= {"__ldcs", "__ldcg", "__ldca", "__ldlu", "__ldcv", "__ldg"}
        compared |= {"__stcs", "__stcg", "__stwb", "__stwt"}
    if "min/max" in compared:  # the mixed-signedness overloads, both names on one line
        compared |= {"min", "max"}
    # __trap stops the kernel: it is compiled, not run.
    assert COMPAT_FUNCTIONS - compared == {"__trap"}
    assert any(name.startswith("cg::reduce") for name in comparison)
    # tile shuffles of vectors and 16-bit floats (members of HIP's tiles, not COMPAT_FUNCTIONS)
    tiles = [name for name in comparison if name.startswith("tile.shfl/shfl_xor/shfl_up/shfl_down")]
    assert len(tiles) == 8


def test_bit_for_bit_equal(comparison: dict[str, tuple[int, int]]) -> None:
    assert comparison
    assert all(tried > 0 for tried, _ in comparison.values())
    assert {name: bad for name, (_, bad) in comparison.items() if bad} == {}
