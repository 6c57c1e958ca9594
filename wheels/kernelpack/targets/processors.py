"""The GPU target data table: every known AMD processor and NVIDIA compute capability.

This module's one job is the data: the rows, their indexes by name and EF_AMDGPU_MACH, and the
constants about them. It is the single source of target facts for the builder (matrix validation,
family expansion) and the loader (compatibility, ranking); the logic that reads it (parsing, which
code runs where, image selection) is :mod:`kernelpack.targets`. Facts come from LLVM's ELF.h and
AMDGPUUsage.rst and NVIDIA's compute capability list; see shared/reference/FORMATS.md.

Every load imports this module, so its annotations are evaluated (no ``from __future__ import
annotations``): typing compiles each string annotation of a NamedTuple's fields into a ForwardRef
(docs/loader.md, "Ready time"); each type is defined before it is named.
"""

from typing import NamedTuple

from .._tables import unique_index


class AmdProcessor(NamedTuple):
    """One AMD GPU processor (or generic target) as LLVM names it.

    ``mach`` is the EF_AMDGPU_MACH value in a code object's e_flags; ``generic`` the generic
    target whose code also runs here (None for generic targets themselves and processors with no
    family); ``xnack``/``sramecc`` say whether the processor has that feature at all (a feature it
    lacks may not appear in its target id); ``wavefront`` is the default wave size.
    """

    name: str
    mach: int
    wavefront: int
    generic: str | None = None
    xnack: bool = False
    sramecc: bool = False
    description: str = ""

    @property
    def is_generic(self) -> bool:
        return self.name.endswith("-generic")


_G9, _G94, _G101, _G103, _G11, _G12 = (
    "gfx9-generic",
    "gfx9-4-generic",
    "gfx10-1-generic",
    "gfx10-3-generic",
    "gfx11-generic",
    "gfx12-generic",
)

AMD_PROCESSORS: tuple[AmdProcessor, ...] = (
    AmdProcessor("gfx900", 0x02C, 64, _G9, xnack=True, description="Vega 10"),
    AmdProcessor("gfx902", 0x02D, 64, _G9, xnack=True, description="Raven APU"),
    AmdProcessor("gfx904", 0x02E, 64, _G9, xnack=True, description="Vega 12"),
    AmdProcessor(
        "gfx906", 0x02F, 64, _G9, xnack=True, sramecc=True, description="Vega 20, MI50/60"
    ),
    AmdProcessor("gfx908", 0x030, 64, None, xnack=True, sramecc=True, description="MI100"),
    AmdProcessor("gfx909", 0x031, 64, _G9, xnack=True, description="Raven2 APU"),
    AmdProcessor("gfx90a", 0x03F, 64, None, xnack=True, sramecc=True, description="MI200"),
    AmdProcessor("gfx90c", 0x032, 64, _G9, xnack=True, description="Renoir APU"),
    AmdProcessor("gfx942", 0x04C, 64, _G94, xnack=True, sramecc=True, description="MI300"),
    AmdProcessor("gfx950", 0x04F, 64, _G94, xnack=True, sramecc=True, description="MI350"),
    AmdProcessor("gfx1010", 0x033, 32, _G101, xnack=True, description="RDNA1, RX 5700"),
    AmdProcessor("gfx1011", 0x034, 32, _G101, xnack=True, description="RDNA1, Radeon Pro V520"),
    AmdProcessor("gfx1012", 0x035, 32, _G101, xnack=True, description="RDNA1, RX 5500"),
    AmdProcessor("gfx1013", 0x042, 32, _G101, xnack=True, description="RDNA1 APU"),
    AmdProcessor("gfx1030", 0x036, 32, _G103, description="RDNA2, RX 6800/6900, W6800"),
    AmdProcessor("gfx1031", 0x037, 32, _G103, description="RDNA2, RX 6700"),
    AmdProcessor("gfx1032", 0x038, 32, _G103, description="RDNA2, RX 6600"),
    AmdProcessor("gfx1033", 0x039, 32, _G103, description="RDNA2 APU, Van Gogh"),
    AmdProcessor("gfx1034", 0x03E, 32, _G103, description="RDNA2, RX 6500"),
    AmdProcessor("gfx1035", 0x03D, 32, _G103, description="RDNA2 APU, Rembrandt"),
    AmdProcessor("gfx1036", 0x045, 32, _G103, description="RDNA2 APU, Raphael"),
    AmdProcessor("gfx1100", 0x041, 32, _G11, description="RDNA3, RX 7900, W7900"),
    AmdProcessor("gfx1101", 0x046, 32, _G11, description="RDNA3, RX 7800/7700"),
    AmdProcessor("gfx1102", 0x047, 32, _G11, description="RDNA3, RX 7600"),
    AmdProcessor("gfx1103", 0x044, 32, _G11, description="RDNA3 APU, Phoenix"),
    AmdProcessor("gfx1150", 0x043, 32, _G11, description="RDNA3.5 APU, Strix Point"),
    AmdProcessor("gfx1151", 0x04A, 32, _G11, description="RDNA3.5 APU, Strix Halo"),
    AmdProcessor("gfx1152", 0x055, 32, _G11, description="RDNA3.5 APU, Krackan"),
    AmdProcessor("gfx1153", 0x058, 32, _G11, description="RDNA3.5 APU"),
    AmdProcessor("gfx1200", 0x048, 32, _G12, description="RDNA4, RX 9060"),
    AmdProcessor("gfx1201", 0x04E, 32, _G12, description="RDNA4, RX 9070"),
    AmdProcessor("gfx1250", 0x049, 32, None, description="gfx12.5 (LLVM 21; no ROCm 6 support)"),
    AmdProcessor(_G9, 0x051, 64, xnack=True, description="generic: gfx900-gfx90c but gfx908/90a"),
    AmdProcessor(_G94, 0x05F, 64, xnack=True, sramecc=True, description="generic: gfx942, gfx950"),
    AmdProcessor(_G101, 0x052, 32, xnack=True, description="generic: gfx1010-gfx1013"),
    AmdProcessor(_G103, 0x053, 32, description="generic: gfx1030-gfx1036"),
    AmdProcessor(_G11, 0x054, 32, description="generic: gfx1100-gfx1103, gfx1150-gfx1153"),
    AmdProcessor(_G12, 0x059, 32, description="generic: gfx1200, gfx1201"),
)

# Families a maintainer may name in arch_matrix.toml instead of listing processors one by one
# (the grouping TheRock uses for its per-family device wheels).
AMD_FAMILIES: dict[str, tuple[str, ...]] = {
    "gfx90X": ("gfx900", "gfx906", "gfx908", "gfx90a"),
    "gfx94X": ("gfx942",),
    "gfx95X": ("gfx950",),
    "gfx101X": ("gfx1010", "gfx1011", "gfx1012"),
    "gfx103X": ("gfx1030", "gfx1031", "gfx1032", "gfx1034"),
    "gfx110X": ("gfx1100", "gfx1101", "gfx1102"),
    "gfx115X": ("gfx1150", "gfx1151", "gfx1152", "gfx1153"),
    "gfx120X": ("gfx1200", "gfx1201"),
}


class NvidiaArch(NamedTuple):
    """One NVIDIA compute capability. ``arch_specific`` marks the 'a' variants (sm_90a) whose
    cubins run on that exact GPU only."""

    name: str
    major: int
    minor: int
    arch_specific: bool = False
    description: str = ""


NVIDIA_ARCHS: tuple[NvidiaArch, ...] = (
    NvidiaArch("sm_75", 7, 5, description="Turing"),
    NvidiaArch("sm_80", 8, 0, description="A100"),
    NvidiaArch("sm_86", 8, 6, description="RTX 30xx, A40"),
    NvidiaArch("sm_87", 8, 7, description="Jetson Orin"),
    NvidiaArch("sm_89", 8, 9, description="RTX 40xx, L40"),
    NvidiaArch("sm_90", 9, 0, description="H100, H200"),
    NvidiaArch("sm_90a", 9, 0, arch_specific=True, description="H100, H200 (wgmma)"),
    NvidiaArch("sm_100", 10, 0, description="B200"),
    NvidiaArch("sm_100a", 10, 0, arch_specific=True, description="B200 (arch-specific)"),
    NvidiaArch("sm_103", 10, 3, description="B300"),
    NvidiaArch("sm_110", 11, 0, description="Thor"),
    NvidiaArch("sm_120", 12, 0, description="RTX 50xx, RTX PRO 6000"),
    NvidiaArch("sm_120a", 12, 0, arch_specific=True, description="RTX 50xx (arch-specific)"),
    NvidiaArch("sm_121", 12, 1, description="DGX Spark"),
)


AMD_BY_NAME = unique_index(AMD_PROCESSORS, lambda row: row.name, "AMD processor")
AMD_BY_MACH: dict[int, AmdProcessor] = {p.mach: p for p in AMD_PROCESSORS}
NVIDIA_BY_NAME = unique_index(NVIDIA_ARCHS, lambda row: row.name, "NVIDIA architecture")
if len(AMD_BY_MACH) != len(AMD_PROCESSORS):
    raise AssertionError("duplicate EF_AMDGPU_MACH value in AMD_PROCESSORS")

FEATURES: tuple[str, ...] = ("sramecc", "xnack")  # canonical order: alphabetical

# Generic code objects are code object v6, which ROCm loads from 6.2 on (AMDGPUUsage.rst: "Generic
# processors are only available on code object V6 and above"; ROCm 6.2 release notes).
GENERIC_CODE_OBJECT_VERSION = 6
GENERIC_MIN_ROCM = (6, 2)
