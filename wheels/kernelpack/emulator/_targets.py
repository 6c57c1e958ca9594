"""The AMD processors the emulator runs, as data: which of its decoders runs each, at what wavefront.

tinygrad's emulator (test/mockgpu/amd/emu.py) decodes three instruction sets from AMD's own
machine-readable ISA descriptions: RDNA3 ("rdna3", wave32), RDNA4 ("rdna4", wave32) and CDNA4
("cdna", wave64; its mock GPU offers gfx950 only). gfx942 (CDNA3) code runs on the CDNA4 decoder:
the instructions it uses are CDNA4's with the same encodings; the decoder's choice is said
(:attr:`EmulatedTarget.stand_in`) and counted by the runtime, never hidden.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._tables import unique_index
from ..errors import UsageError


@dataclass(frozen=True)
class EmulatedTarget:
    """One processor the emulator runs: ``arch`` is the emulator's decoder ("rdna3", "rdna4",
    "cdna"), ``wavefront`` the lanes of a wave it runs, ``stand_in`` the processor whose decoder
    runs it where that is another one ("" when the decoder is the processor's own)."""

    processor: str
    arch: str
    wavefront: int
    stand_in: str = ""


EMULATED_TARGETS: tuple[EmulatedTarget, ...] = (
    EmulatedTarget("gfx942", "cdna", 64, stand_in="gfx950"),
    EmulatedTarget("gfx950", "cdna", 64),
    EmulatedTarget("gfx1100", "rdna3", 32),
    EmulatedTarget("gfx1201", "rdna4", 32),
)


EMULATED_BY_PROCESSOR = unique_index(EMULATED_TARGETS, lambda row: row.processor, "emulated target")


def emulated_target(name: object) -> EmulatedTarget:
    """The table's row for ``name`` (a processor, "gfx942"); a UsageError naming the ones the
    emulator runs for anything else."""
    known = ", ".join(EMULATED_BY_PROCESSOR)
    found = EMULATED_BY_PROCESSOR.get(name) if isinstance(name, str) else None
    if found is None:
        raise UsageError(
            f"the AMD emulator cannot run target {name!r}; it runs: {known} "
            "(RDNA3 and RDNA4 at wave32, CDNA at wave64)"
        )
    return found
