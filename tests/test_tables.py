"""The data tables' lookup dicts: one row a name, and a name twice refused at import."""

from __future__ import annotations

import pytest

from kernelpack._tables import unique_index
from kernelpack.emulator._targets import EMULATED_BY_PROCESSOR, EMULATED_TARGETS
from kernelpack.loader.images import IMAGE_KINDS, KINDS_BY_NAME
from kernelpack.ops.mlp.table import OPS, TABLE
from kernelpack.targets.processors import (
    AMD_BY_NAME,
    AMD_PROCESSORS,
    NVIDIA_ARCHS,
    NVIDIA_BY_NAME,
)


def test_a_name_twice_is_refused_with_the_table_and_the_name() -> None:
    rows = [("gfx1100", 1), ("gfx90a", 2), ("gfx1100", 3)]
    with pytest.raises(ValueError, match=r"^AMD processor 'gfx1100' is in the table twice$"):
        unique_index(rows, lambda row: row[0], "AMD processor")
    assert unique_index(rows[:2], lambda row: row[0], "AMD processor") == {
        "gfx1100": ("gfx1100", 1),
        "gfx90a": ("gfx90a", 2),
    }


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (AMD_BY_NAME, AMD_PROCESSORS),
        (NVIDIA_BY_NAME, NVIDIA_ARCHS),
        (KINDS_BY_NAME, IMAGE_KINDS),
        (EMULATED_BY_PROCESSOR, EMULATED_TARGETS),
        (TABLE, OPS),
    ],
    ids=["amd", "nvidia", "image-kinds", "emulated", "mlp-ops"],
)
def test_each_lookup_finds_every_row_of_its_table(
    index: dict[str, object], rows: tuple[object, ...]
) -> None:
    assert list(index.values()) == list(rows)
