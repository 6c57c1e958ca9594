"""Target ids, the runtimes' compatibility rules, the target parser and image selection.

Every fact about a processor is checked against a source other than kernelpack.targets.processors' own table:
LLVM's ELF.h (EF_AMDGPU_MACH values, KFD versions), LLVM's AMDGPUUsage.rst processor and generic
processor tables (features, generic families, wave sizes), ROCm clr's GenericTargetMapping, each
transcribed below by hand, and the provisioned compiler's own list of processors (a toolchain test).
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import cast

import pytest

from kernelpack.cli.coverage import coverage
from kernelpack.errors import UsageError
from kernelpack.formats.index import Image
from kernelpack.targets import (
    NvidiaTarget,
    TargetId,
    agent_target,
    amd_compatible,
    amd_mismatch,
    gfx_target_version,
    nvidia_compatible,
    parse_target,
    processor_name,
    runs_code_object_v6,
    select_image,
    split_gfx_target_version,
)
from kernelpack.targets.processors import (
    AMD_BY_MACH,
    AMD_BY_NAME,
    AMD_PROCESSORS,
    FEATURES,
    NVIDIA_ARCHS,
    AmdProcessor,
    NvidiaArch,
)

SPECIFIC = [p for p in AMD_PROCESSORS if not p.is_generic]
GENERIC = [p for p in AMD_PROCESSORS if p.is_generic]
MODES = list(itertools.product((False, True), repeat=2))  # (sramecc, xnack) of a running GPU


def _id(row: AmdProcessor | NvidiaArch) -> str:
    return row.name


def image(target: str, kind: str | None = None, vendor: str | None = None) -> Image:
    """An index entry as the builder writes it; only vendor, target and kind matter here."""
    nvidia = target.startswith(("sm_", "compute_"))
    default_kind = "ptx" if target.startswith("compute_") else "cubin" if nvidia else "code_object"
    entry = {
        "vendor": vendor or ("nvidia" if nvidia else "amd"),
        "target": target,
        "kind": kind or default_kind,
        "file": f"device/{target}.bin",
        "offset": 0,
        "size": 1,
        "sha256": "0" * 64,
        "compression": "none",
        "kernels": {},
    }
    return cast(Image, entry)


def chosen(targets: list[str], gpu: TargetId | NvidiaTarget) -> str | None:
    best, _ = select_image([image(t) for t in targets], gpu)
    return None if best is None else best["target"]


# --- the table against LLVM -----------------------------------------------------------------------

# llvm/include/llvm/BinaryFormat/ELF.h, AMDGPU_MACH_LIST: EF_AMDGPU_MACH value per processor
# (kept five to a line, as a transcription is easier to check against the header that way)
ELF_H_MACH = {
    "gfx900": 0x02C, "gfx902": 0x02D, "gfx904": 0x02E, "gfx906": 0x02F, "gfx908": 0x030,
    "gfx909": 0x031, "gfx90c": 0x032, "gfx1010": 0x033, "gfx1011": 0x034, "gfx1012": 0x035,
    "gfx1030": 0x036, "gfx1031": 0x037, "gfx1032": 0x038, "gfx1033": 0x039, "gfx1035": 0x03D,
    "gfx1034": 0x03E, "gfx90a": 0x03F, "gfx1100": 0x041, "gfx1013": 0x042, "gfx1150": 0x043,
    "gfx1103": 0x044, "gfx1036": 0x045, "gfx1101": 0x046, "gfx1102": 0x047, "gfx1200": 0x048,
    "gfx1250": 0x049, "gfx1151": 0x04A, "gfx942": 0x04C, "gfx1201": 0x04E, "gfx950": 0x04F,
    "gfx9-generic": 0x051, "gfx10-1-generic": 0x052, "gfx10-3-generic": 0x053,
    "gfx11-generic": 0x054, "gfx1152": 0x055, "gfx1153": 0x058, "gfx12-generic": 0x059,
    "gfx9-4-generic": 0x05F,
}  # fmt: skip  # five to a line, to check against ELF.h

# AMDGPUUsage.rst "AMDGPU Processors": the target features a target id may name
AMDGPU_USAGE_XNACK = {"gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a",
                      "gfx90c", "gfx942", "gfx950", "gfx1010", "gfx1011", "gfx1012", "gfx1013",
                      "gfx9-generic", "gfx9-4-generic", "gfx10-1-generic"}  # fmt: skip  # as AMDGPUUsage lists them
AMDGPU_USAGE_SRAMECC = {"gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx9-4-generic"}

# (the sets laid out as the documents list them)
# AMDGPUUsage.rst "AMDGPU Generic Processors" with clr's GenericTargetMapping (which adds
# gfx9-4-generic and gfx12-generic) and ROCR's isa.cpp (gfx1152/gfx1153 in gfx11-generic)
LLVM_GENERIC_FAMILIES = {
    "gfx9-generic": {"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"},
    "gfx9-4-generic": {"gfx942", "gfx950"},
    "gfx10-1-generic": {"gfx1010", "gfx1011", "gfx1012", "gfx1013"},
    "gfx10-3-generic": {f"gfx103{i}" for i in range(7)},
    "gfx11-generic": {f"gfx110{i}" for i in range(4)} | {f"gfx115{i}" for i in range(4)},
    "gfx12-generic": {"gfx1200", "gfx1201"},
}
_USAGE_FEATURES = {"xnack": AMDGPU_USAGE_XNACK, "sramecc": AMDGPU_USAGE_SRAMECC}
FAMILY_OF = {p: g for g, members in LLVM_GENERIC_FAMILIES.items() for p in members}


def test_the_table_names_exactly_the_processors_elf_h_names() -> None:
    assert {p.name: p.mach for p in AMD_PROCESSORS} == ELF_H_MACH
    for name, mach in ELF_H_MACH.items():
        assert AMD_BY_MACH[mach].name == name


@pytest.mark.parametrize("name", sorted(ELF_H_MACH))
def test_features_are_those_amdgpu_usage_lists(name: str) -> None:
    processor = AMD_BY_NAME[name]
    assert processor.xnack == (name in AMDGPU_USAGE_XNACK)
    assert processor.sramecc == (name in AMDGPU_USAGE_SRAMECC)
    for feature, allowed in (("xnack", AMDGPU_USAGE_XNACK), ("sramecc", AMDGPU_USAGE_SRAMECC)):
        if name in allowed:
            assert TargetId.parse(f"{name}:{feature}+").feature(feature) is True
        else:
            with pytest.raises(UsageError, match=f"has no {feature}"):
                TargetId.parse(f"{name}:{feature}-")


@pytest.mark.parametrize("name", sorted(ELF_H_MACH))
def test_wave_size_is_64_on_gfx9_and_32_on_rdna(name: str) -> None:
    # AMDGPUUsage.rst: wavefrontsize64 is an option of gfx10 and later, whose native size is 32
    assert AMD_BY_NAME[name].wavefront == (64 if name.startswith("gfx9") else 32)


@pytest.mark.parametrize("name", sorted(ELF_H_MACH))
def test_generic_families_are_llvms(name: str) -> None:
    processor = AMD_BY_NAME[name]
    assert processor.is_generic == (name in LLVM_GENERIC_FAMILIES)
    assert processor.generic == FAMILY_OF.get(name)


@pytest.mark.toolchain
def test_the_table_names_every_processor_the_compiler_knows_from_gfx9_on() -> None:
    """clang lists the processors it can target (-mcpu=help); from gfx9 on, the table has them all
    and nothing else (a newer LLVM adds rows: this test then names them)."""
    from buildsys.toolchain import amd_toolchain

    toolchain = amd_toolchain(provision=True)
    listed = toolchain.run([toolchain.tool("clang"), "--target=amdgcn-amd-amdhsa", "-mcpu=help"])
    names = {line.strip() for line in (listed.stdout + listed.stderr).splitlines()}
    from_gfx9 = {n for n in names if re.fullmatch(r"gfx(9|1\d)[0-9a-z-]*", n)}
    assert from_gfx9 >= {"gfx900", "gfx1151", "gfx11-generic"}  # the list was read
    assert {p.name for p in AMD_PROCESSORS} == from_gfx9


@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_every_processor_round_trips_through_its_gfx_target_version(
    processor: AmdProcessor,
) -> None:
    version = gfx_target_version(processor.name)
    assert processor_name(*split_gfx_target_version(version)) == processor.name


@pytest.mark.parametrize(
    ("version", "name"),
    # LLVM ELF.h AMDGPU_MACH_LIST pairs each processor with its KFD version
    [
        (90010, "gfx90a"),
        (90012, "gfx90c"),
        (90402, "gfx942"),
        (100300, "gfx1030"),
        (110000, "gfx1100"),
        (110501, "gfx1151"),
        (110502, "gfx1152"),
        (110503, "gfx1153"),
        (120001, "gfx1201"),
        (120500, "gfx1250"),
    ],
)
def test_kfd_versions_name_the_processors_llvm_names(version: int, name: str) -> None:
    assert processor_name(*split_gfx_target_version(version)) == name
    assert gfx_target_version(name) == version


@pytest.mark.parametrize("processor", GENERIC, ids=_id)
def test_generic_targets_have_no_kfd_version(processor: AmdProcessor) -> None:
    with pytest.raises(ValueError, match=processor.name):
        gfx_target_version(processor.name)


def test_versions_without_a_one_digit_spelling_name_no_processor() -> None:
    for version in [(9, 16, 0), (9, 0, 16), (0, 0, 0)]:
        with pytest.raises(ValueError):
            processor_name(*version)


@pytest.mark.parametrize("processor", sorted(FAMILY_OF))
def test_every_processor_with_a_family_runs_its_generic_code(processor: str) -> None:
    for sramecc, xnack in MODES:
        agent = agent_target(processor, sramecc=sramecc, xnack=xnack)
        assert amd_compatible(TargetId.parse(FAMILY_OF[processor]), agent), agent


@pytest.mark.parametrize("generic", sorted(LLVM_GENERIC_FAMILIES))
@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_generic_code_runs_on_its_family_only(generic: str, processor: AmdProcessor) -> None:
    agent = agent_target(processor.name, sramecc=False, xnack=False)
    assert amd_compatible(TargetId(generic), agent) == (
        processor.name in LLVM_GENERIC_FAMILIES[generic]
    )


@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_code_for_a_processor_runs_on_it_and_nothing_else(processor: AmdProcessor) -> None:
    code = TargetId(processor.name)
    for other in SPECIFIC:
        for sramecc, xnack in MODES:
            agent = agent_target(other.name, sramecc=sramecc, xnack=xnack)
            assert amd_compatible(code, agent) == (other is processor)


@pytest.mark.parametrize("processor", AMD_PROCESSORS, ids=_id)
def test_target_ids_parse_to_canonical_order_and_back(processor: AmdProcessor) -> None:
    supported = [f for f in FEATURES if processor.name in _USAGE_FEATURES[f]]
    for signs in itertools.product((None, "+", "-"), repeat=len(supported)):
        parts = [f"{name}{sign}" for name, sign in zip(supported, signs, strict=True) if sign]
        canonical = ":".join([processor.name, *parts])
        for order in itertools.permutations(parts):
            parsed = TargetId.parse(":".join([processor.name, *order]))
            assert str(parsed) == canonical
            assert TargetId.parse(str(parsed)) == parsed


@pytest.mark.parametrize("processor", AMD_PROCESSORS, ids=_id)
def test_a_running_gpu_fixes_exactly_the_features_its_processor_has(
    processor: AmdProcessor,
) -> None:
    agent = agent_target(processor.name, sramecc=True, xnack=False)
    assert {name for name, _ in agent.features} == {
        f for f in FEATURES if processor.name in _USAGE_FEATURES[f]
    }
    assert agent.feature("sramecc") in (None, True)
    assert agent.feature("xnack") in (None, False)


def test_features_a_processor_lacks_are_refused() -> None:
    with pytest.raises(UsageError, match="gfx1100 has no xnack"):
        TargetId.parse("gfx1100:xnack+")
    with pytest.raises(UsageError, match="bad feature"):
        TargetId.parse("gfx90a:xnack")


# --- AMD compatibility cases ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "agent", "fits"),
    [
        ("gfx90a:xnack+", "gfx90a:sramecc+:xnack+", True),
        ("gfx90a:xnack+", "gfx90a:sramecc+:xnack-", False),
        ("gfx90a:xnack-", "gfx90a:sramecc-:xnack-", True),
        ("gfx90a", "gfx90a:sramecc+:xnack+", True),  # features left out match any mode
        ("gfx90a", "gfx90a:sramecc-:xnack-", True),
        ("gfx942:sramecc-", "gfx942:sramecc+:xnack-", False),
        ("gfx942:sramecc+", "gfx942:sramecc+:xnack-", True),
        ("gfx942:sramecc+:xnack+", "gfx942:sramecc+:xnack-", False),
        ("gfx9-4-generic:xnack-", "gfx942:sramecc+:xnack-", True),
        ("gfx9-4-generic:xnack+", "gfx950:sramecc+:xnack-", False),
        ("gfx9-4-generic", "gfx90a:sramecc+:xnack-", False),  # gfx90a has no generic target
        ("gfx9-generic", "gfx906:sramecc+:xnack-", True),
        ("gfx9-generic", "gfx908:sramecc+:xnack-", False),
        ("gfx11-generic", "gfx1151", True),
        ("gfx11-generic", "gfx1030", False),
        ("gfx1100", "gfx1101", False),
        ("gfx11-generic", "gfx11-generic", True),  # a target forced to the generic one
        ("gfx942:xnack-", "gfx942", False),  # a forced target that leaves xnack open
        ("gfx942", "gfx942", True),
    ],
)
def test_compatibility_as_the_hip_runtime_decides(code: str, agent: str, fits: bool) -> None:
    why_not = amd_mismatch(TargetId.parse(code), TargetId.parse(agent))
    assert (why_not is None) == fits
    if why_not is not None:
        assert why_not.strip()


def test_a_processor_missing_from_the_table_runs_only_code_named_for_it() -> None:
    agent = agent_target("gfx1310", sramecc=True, xnack=True)
    assert agent == TargetId("gfx1310")
    assert amd_compatible(TargetId("gfx1310"), agent)
    assert not amd_compatible(TargetId("gfx12-generic"), agent)


# --- ranking ----------------------------------------------------------------------------------------

AMD_PREFERENCE = [  # best first, for a gfx942 running sramecc+ xnack-
    "gfx942:sramecc+:xnack-",
    "gfx942:xnack-",
    "gfx942",
    "gfx9-4-generic:sramecc+:xnack-",
    "gfx9-4-generic",
]
AMD_MISFITS = ["gfx942:xnack+", "gfx942:sramecc-", "gfx90a", "gfx9-generic", "gfx950"]


def test_fixed_features_then_any_then_generic() -> None:
    agent = agent_target("gfx942", sramecc=True, xnack=False)
    remaining = list(AMD_PREFERENCE)
    while remaining:
        for order in itertools.permutations(remaining + AMD_MISFITS[:1]):
            assert chosen(list(order), agent) == remaining[0], order
        remaining.pop(0)
    assert chosen(AMD_MISFITS, agent) is None


def test_equally_good_images_go_to_the_first_listed() -> None:
    agent = agent_target("gfx942", sramecc=True, xnack=False)
    assert chosen(["gfx942:xnack-", "gfx942:sramecc+"], agent) == "gfx942:xnack-"
    assert chosen(["gfx942:sramecc+", "gfx942:xnack-"], agent) == "gfx942:sramecc+"


# --- NVIDIA ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", NVIDIA_ARCHS, ids=_id)
def test_every_nvidia_arch_parses_to_its_table_row(arch: NvidiaArch) -> None:
    target = NvidiaTarget.parse(arch.name)
    assert (target.major, target.minor, target.arch_specific) == (
        arch.major,
        arch.minor,
        arch.arch_specific,
    )
    assert not target.ptx
    assert str(target) == arch.name
    ptx = NvidiaTarget.parse(arch.name.replace("sm_", "compute_"))
    assert ptx.ptx and str(ptx) == arch.name.replace("sm_", "compute_")


@pytest.mark.nvcc
def test_every_nvidia_arch_is_one_nvcc_builds() -> None:
    """The table against nvcc's own lists (--list-gpu-code, --list-gpu-arch): every row names a GPU
    code nvcc builds (an arch-specific row by its base name, sm_90a as sm_90) and its PTX target.
    nvcc may know more (13.0 lists sm_88, which has no row): a row comes with what GPU it is."""
    from buildsys.toolchain import cuda_toolchain

    toolchain = cuda_toolchain()
    assert toolchain is not None
    nvcc = toolchain.tool("nvcc")
    codes = set(toolchain.run([nvcc, "--list-gpu-code"]).stdout.split())
    archs = set(toolchain.run([nvcc, "--list-gpu-arch"]).stdout.split())
    assert {"sm_80", "sm_90"} <= codes and "compute_90" in archs  # the lists were read
    for arch in NVIDIA_ARCHS:
        plain = arch.name.removesuffix("a")
        assert plain in codes, f"{arch.name}: nvcc does not list {plain}"
        assert plain.replace("sm_", "compute_") in archs


@pytest.mark.parametrize("text", ["sm_9", "sm90", "gfx90a", "sm_100f", "compute_", "sm_90b"])
def test_malformed_nvidia_targets_are_refused(text: str) -> None:
    with pytest.raises(UsageError, match="not an NVIDIA target"):
        NvidiaTarget.parse(text)


@pytest.mark.parametrize(
    ("code", "gpu", "fits"),
    [
        ("sm_80", "sm_86", True),  # same major, newer minor
        ("sm_80", "sm_80", True),
        ("sm_86", "sm_80", False),
        ("sm_80", "sm_90", False),  # another major
        ("sm_90", "sm_100", False),
        ("sm_90a", "sm_90", True),  # arch-specific: its own GPU only
        ("sm_100a", "sm_103", False),
        ("sm_90a", "sm_100", False),
        ("compute_80", "sm_90", True),  # PTX: any newer GPU
        ("compute_80", "sm_120", True),
        ("compute_90", "sm_80", False),
        ("compute_90", "sm_89", False),
        ("compute_90a", "sm_90", True),
        ("compute_90a", "sm_100", False),
    ],
)
def test_nvidia_compatibility(code: str, gpu: str, fits: bool) -> None:
    assert nvidia_compatible(NvidiaTarget.parse(code), NvidiaTarget.parse(gpu)) == fits


@pytest.mark.parametrize(
    ("gpu", "preference", "misfits"),
    [
        (
            "sm_90",
            ["sm_90a", "sm_90", "compute_90a", "compute_90", "compute_80"],
            ["sm_80", "sm_100"],
        ),
        ("sm_89", ["sm_89", "sm_86", "sm_80", "compute_89", "compute_80"], ["sm_90", "compute_90"]),
        ("sm_120", ["sm_120", "compute_100", "compute_90"], ["sm_100", "sm_90a", "compute_121"]),
    ],
)
def test_cubins_before_ptx_and_the_closest_version_first(
    gpu: str, preference: list[str], misfits: list[str]
) -> None:
    target = NvidiaTarget.parse(gpu)
    remaining = list(preference)
    while remaining:
        for order in itertools.permutations(remaining + misfits[:1]):
            assert chosen(list(order), target) == remaining[0], order
        remaining.pop(0)
    assert chosen(misfits, target) is None


# --- select_image ---------------------------------------------------------------------------------


def test_reasons_say_for_each_image_why_in_the_given_order() -> None:
    images = [
        image("gfx942"),
        image("gfx942:sramecc+:xnack-"),
        image("gfx942:xnack+"),
        image("sm_90"),
        image("gfx1310"),
        image("gfx942", kind="cubin"),
    ]
    gpu = agent_target("gfx942", sramecc=True, xnack=False)
    best, reasons = select_image(images, gpu)
    assert best is images[1]
    assert len(reasons) == len(images)
    assert [r.split(": ", 1)[0] for r in reasons] == [
        f"{i['target']} {i['kind']} for {gpu}" for i in images
    ]
    verdicts = [r.split(": ", 2)[1] for r in reasons]
    assert verdicts[0].startswith("fits") and verdicts[1] == "selected"
    assert all(v == "rejected" for v in verdicts[2:])
    assert "xnack+" in reasons[2] and "xnack-" in reasons[2]
    assert "nvidia" in reasons[3]
    assert "unknown" in reasons[4]
    assert "'cubin'" in reasons[5]


def test_nothing_fits_or_nothing_to_choose_from() -> None:
    gpu = NvidiaTarget.parse("sm_80")
    best, reasons = select_image([image("sm_90"), image("compute_86"), image("gfx90a")], gpu)
    assert best is None
    assert len(reasons) == 3 and all("rejected" in r for r in reasons)
    assert select_image([], gpu) == (None, [])


def test_a_cubin_and_ptx_kind_must_match_the_target() -> None:
    gpu = NvidiaTarget.parse("sm_90")
    best, reasons = select_image([image("compute_90", kind="cubin")], gpu)
    assert best is None and "does not match" in reasons[0]


# --- the one target parser ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical", "vendor", "kind", "features", "image_kind"),
    [
        ("gfx942", "gfx942", "amd", "specific", (), "code_object"),
        (
            " gfx90a:xnack+:sramecc- ",
            "gfx90a:sramecc-:xnack+",
            "amd",
            "specific",
            (("sramecc", False), ("xnack", True)),
            "code_object",
        ),
        ("gfx11-generic", "gfx11-generic", "amd", "generic", (), "code_object"),
        (
            "gfx9-4-generic:xnack-",
            "gfx9-4-generic:xnack-",
            "amd",
            "generic",
            (("xnack", False),),
            "code_object",
        ),
        ("gfx110X", "gfx110X", "amd", "family", (), "code_object"),
        ("sm_90", "sm_90", "nvidia", "sm", (), "cubin"),
        ("sm_90a", "sm_90a", "nvidia", "sm", (), "cubin"),
        ("sm_200", "sm_200", "nvidia", "sm", (), "cubin"),  # newer than the table: still parses
        ("compute_80", "compute_80", "nvidia", "compute", (), "ptx"),
    ],
)
def test_parse_target_classifies_every_kind_of_name(
    text: str,
    canonical: str,
    vendor: str,
    kind: str,
    features: tuple[tuple[str, bool], ...],
    image_kind: str,
) -> None:
    parsed = parse_target(text)
    assert (parsed.text, parsed.vendor, parsed.kind) == (canonical, vendor, kind)
    assert (parsed.features, parsed.image_kind) == (features, image_kind)
    assert parsed.arch_specific == text.strip().endswith("a")
    assert parse_target(parsed.text) == parsed


def test_a_family_parses_to_its_processors() -> None:
    # TheRock's gfx110X device wheels: Navi 31, 32 and 33
    assert parse_target("gfx110X").members == ("gfx1100", "gfx1101", "gfx1102")
    with pytest.raises(UsageError, match="not one AMD target id"):
        _ = parse_target("gfx110X").amd


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gfx1110", "gfx1110: unknown AMD target; did you mean gfx1100?"),
        ("sm_9", "not an NVIDIA target"),
        ("gfx1100:xnack+", "gfx1100 has no xnack"),
        ("", "unknown AMD target"),
        ("sm90", "not an NVIDIA target"),
    ],
)
def test_parse_target_refuses_unknown_names_with_the_nearest(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        parse_target(text)


# --- generic images and the runtime's code object version ------------------------------------------


@pytest.mark.parametrize(
    ("version", "runs"),
    # ROCm 6.2 is the first release whose runtime loads code object v6 (generic targets)
    [
        ("6.4.43484", True),
        ("6.2.41133", True),
        ("7.0.1", True),
        ("6.1.40093", False),
        ("5.7.31921", False),
        ("10.0.0", True),
        ("unknown", None),
        ("", None),
    ],
)
def test_runtimes_from_rocm_6_2_run_code_object_v6(version: str, runs: bool | None) -> None:
    assert runs_code_object_v6(version) is runs


@pytest.mark.parametrize("v6", [True, None])
def test_a_specific_image_before_a_generic_one(v6: bool | None) -> None:
    agent = agent_target("gfx1100", sramecc=False, xnack=False)
    images = [image("gfx11-generic"), image("gfx1100"), image("gfx1101")]
    best, reasons = select_image(images, agent, runtime_code_object_v6=v6)
    assert best is images[1]
    assert reasons[0].startswith("gfx11-generic code_object for gfx1100: fits")
    assert "code object v6" in reasons[0]


def test_a_generic_image_when_no_specific_one_fits() -> None:
    agent = agent_target("gfx1031", sramecc=False, xnack=False)
    images = [image("gfx1030"), image("gfx10-3-generic"), image("gfx11-generic")]
    best, reasons = select_image(images, agent, runtime_code_object_v6=True)
    assert best is images[1]
    assert "selected: generic code for gfx1031 (gfx10-3-generic" in reasons[1]
    assert "rejected" in reasons[0] and "rejected" in reasons[2]


def test_an_old_runtime_gets_no_generic_image() -> None:
    agent = agent_target("gfx1031", sramecc=False, xnack=False)
    best, reasons = select_image([image("gfx10-3-generic")], agent, runtime_code_object_v6=False)
    assert best is None
    assert "rejected" in reasons[0] and "code object v6" in reasons[0] and "6.2" in reasons[0]
    agent = agent_target("gfx1030", sramecc=False, xnack=False)
    images = [image("gfx10-3-generic"), image("gfx1030")]
    assert select_image(images, agent, runtime_code_object_v6=False)[0] is images[1]


# --- coverage of the default matrix -----------------------------------------------------------------

# What each processor should load from the default arch_matrix.toml, worked out by hand from the
# generic families above: its own image where the matrix names it, else its generic target's;
# gfx1250 has no generic target and HIP 6.4 cannot build it.
_G9, _G101, _G103, _G11 = "gfx9-generic", "gfx10-1-generic", "gfx10-3-generic", "gfx11-generic"
DEFAULT_MATRIX_LOADS: dict[str, str | None] = {
    "gfx900": _G9, "gfx902": _G9, "gfx904": _G9, "gfx906": _G9, "gfx908": "gfx908", "gfx909": _G9,
    "gfx90a": "gfx90a", "gfx90c": _G9, "gfx942": "gfx942", "gfx950": "gfx950",
    "gfx1010": _G101, "gfx1011": _G101, "gfx1012": _G101, "gfx1013": _G101,
    "gfx1030": "gfx1030", "gfx1031": _G103, "gfx1032": _G103, "gfx1033": _G103, "gfx1034": _G103,
    "gfx1035": _G103, "gfx1036": _G103,
    "gfx1100": "gfx1100", "gfx1101": "gfx1101", "gfx1102": _G11, "gfx1103": _G11,
    "gfx1150": _G11, "gfx1151": _G11, "gfx1152": _G11, "gfx1153": _G11,
    "gfx1200": "gfx1200", "gfx1201": "gfx1201", "gfx1250": None,
}  # fmt: skip  # one line per family, as the matrix lists them


def _default_targets() -> list[str]:
    from buildsys.matrix import load_matrix

    return [t.target for t in load_matrix().targets]


def test_every_processor_gets_a_native_image_from_the_default_matrix() -> None:
    rows = coverage(_default_targets())
    assert {row.processor: row.image for row in rows} == DEFAULT_MATRIX_LOADS
    for row in rows:
        expected = DEFAULT_MATRIX_LOADS[row.processor]
        assert row.how == (
            "run-time compile"
            if expected is None
            else "generic"
            if expected.endswith("-generic")
            else "specific"
        )
        assert row.reason.strip()
    (gfx1250,) = [row for row in rows if row.processor == "gfx1250"]
    assert "hipRTC" in gfx1250.reason and "no generic target" in gfx1250.reason


def test_an_old_runtime_falls_back_to_specific_images_and_run_time_compilation() -> None:
    rows = {
        row.processor: row for row in coverage(_default_targets(), runtime_code_object_v6=False)
    }
    assert rows["gfx1030"].image == "gfx1030"
    assert rows["gfx1031"].image is None
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0 runs the gfx1030 image" in rows["gfx1031"].reason


FIXTURES = Path(__file__).parent / "fixtures" / "sysfs"


@pytest.mark.parametrize(
    ("fixture", "hardware", "loads"),
    [
        ("rx6700-gfx1031", "gfx1031", "gfx10-3-generic"),
        ("rx6600-gfx1032", "gfx1032", "gfx10-3-generic"),
        ("rx7600-gfx1102", "gfx1102", "gfx11-generic"),
        ("strix-halo-gfx1151", "gfx1151", "gfx11-generic"),
        ("laptop-gfx1100-gfx1151", "gfx1100", "gfx1100"),
        ("mi300x-8gpu", "gfx942", "gfx942"),
        ("two-mi210", "gfx90a", "gfx90a"),
    ],
)
def test_recorded_gpus_get_a_native_image_with_no_override(
    fixture: str, hardware: str, loads: str
) -> None:
    from kernelpack.devices.detect import detect_gpus

    gpus = detect_gpus(sysfs_root=FIXTURES / fixture, environ={})
    assert gpus[0].hardware == hardware and not gpus[0].override
    images = [image(target) for target in _default_targets()]
    for gpu in gpus:
        best, _ = select_image(images, gpu.target, runtime_code_object_v6=True)
        assert best is not None
        expected = DEFAULT_MATRIX_LOADS[gpu.hardware]
        assert best["target"].split(":")[0] == expected


def test_the_targets_command_prints_the_coverage_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kernelpack.cli import main as cli

    assert cli.main(["targets", "--json", "--targets", "gfx1030,gfx11-generic,sm_90"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["built"] == ["gfx1030", "gfx11-generic"]
    rows = {row["processor"]: row for row in report["processors"]}
    assert rows["gfx1151"]["image"] == "gfx11-generic" and rows["gfx1151"]["native"]
    assert rows["gfx1031"]["image"] is None and rows["gfx1031"]["how"] == "run-time compile"
    assert set(rows) == {name for name in ELF_H_MACH if name not in LLVM_GENERIC_FAMILIES}


def test_the_targets_command_refuses_an_unknown_target(capsys: pytest.CaptureFixture[str]) -> None:
    from kernelpack.cli import main as cli

    assert cli.main(["targets", "--targets", "gfx1110"]) == 2
    err = capsys.readouterr().err
    assert "gfx1110: unknown AMD target; did you mean gfx1100?" in err and "Traceback" not in err
