"""Target ids, the runtimes' compatibility rules and image selection (kernelpack.targets).

The table tests run over the table itself, so a new row is tested the day it is added. The fixed
facts below (KFD versions, generic families) are taken from LLVM's ELF.h / AMDGPUUsage.rst and
ROCm clr's GenericTargetMapping, not from the code under test.
"""

from __future__ import annotations

import itertools
from typing import cast

import pytest

from kernelpack.errors import UsageError
from kernelpack.index import Image
from kernelpack.targets import (
    AMD_BY_MACH,
    AMD_BY_NAME,
    AMD_PROCESSORS,
    FEATURES,
    NVIDIA_ARCHS,
    AmdProcessor,
    NvidiaArch,
    NvidiaTarget,
    TargetId,
    agent_target,
    amd_compatible,
    amd_mismatch,
    gfx_target_version,
    nvidia_compatible,
    processor_name,
    select_image,
    split_gfx_target_version,
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


# --- the table ------------------------------------------------------------------------------------


@pytest.mark.parametrize("processor", AMD_PROCESSORS, ids=_id)
def test_every_processor_round_trips_through_its_mach_value(processor: AmdProcessor) -> None:
    assert AMD_BY_MACH[processor.mach] is processor
    assert AMD_BY_NAME[processor.name] is processor


@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_every_processor_round_trips_through_its_gfx_target_version(
    processor: AmdProcessor,
) -> None:
    version = gfx_target_version(processor.name)
    assert processor_name(*split_gfx_target_version(version)) == processor.name


@pytest.mark.parametrize(
    ("version", "name"),
    # LLVM ELF.h AMDGPU_MACH_LIST pairs each processor with its KFD version
    [(90010, "gfx90a"), (90012, "gfx90c"), (90402, "gfx942"), (100300, "gfx1030"),
     (110000, "gfx1100"), (110501, "gfx1151"), (120001, "gfx1201")],
)  # fmt: skip
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


def test_generic_families_are_the_hip_runtimes() -> None:
    # clr hipamd/src/hip_comgr_helper.cpp GenericTargetMapping, plus gfx1152/gfx1153, which LLVM's
    # AMDGPUUsage.rst and ROCR's isa.cpp put in gfx11-generic
    hip = {
        "gfx9-generic": {"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"},
        "gfx9-4-generic": {"gfx942", "gfx950"},
        "gfx10-1-generic": {"gfx1010", "gfx1011", "gfx1012", "gfx1013"},
        "gfx10-3-generic": {f"gfx103{i}" for i in range(7)},
        "gfx11-generic": {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151",
                          "gfx1152", "gfx1153"},
        "gfx12-generic": {"gfx1200", "gfx1201"},
    }  # fmt: skip
    table = {g.name: {p.name for p in SPECIFIC if p.generic == g.name} for g in GENERIC}
    assert table == hip


@pytest.mark.parametrize("processor", [p for p in SPECIFIC if p.generic], ids=_id)
def test_every_processor_with_a_family_runs_its_generic_code(processor: AmdProcessor) -> None:
    assert processor.generic is not None
    assert AMD_BY_NAME[processor.generic].is_generic
    for sramecc, xnack in MODES:
        agent = agent_target(processor.name, sramecc=sramecc, xnack=xnack)
        assert amd_compatible(TargetId.parse(processor.generic), agent), agent


@pytest.mark.parametrize("generic", GENERIC, ids=_id)
@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_generic_code_runs_on_its_family_only(
    generic: AmdProcessor, processor: AmdProcessor
) -> None:
    agent = agent_target(processor.name, sramecc=False, xnack=False)
    assert amd_compatible(TargetId(generic.name), agent) == (processor.generic == generic.name)


@pytest.mark.parametrize("processor", SPECIFIC, ids=_id)
def test_code_for_a_processor_runs_on_it_and_nothing_else(processor: AmdProcessor) -> None:
    code = TargetId(processor.name)
    for other in SPECIFIC:
        for sramecc, xnack in MODES:
            agent = agent_target(other.name, sramecc=sramecc, xnack=xnack)
            assert amd_compatible(code, agent) == (other is processor)


@pytest.mark.parametrize("processor", AMD_PROCESSORS, ids=_id)
def test_target_ids_parse_to_canonical_order_and_back(processor: AmdProcessor) -> None:
    supported = [f for f in FEATURES if getattr(processor, f)]
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
    assert {name for name, _ in agent.features} == {f for f in FEATURES if getattr(processor, f)}
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
    agent = agent_target("gfx1250", sramecc=True, xnack=True)
    assert agent == TargetId("gfx1250")
    assert amd_compatible(TargetId("gfx1250"), agent)
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
        ("sm_90", ["sm_90a", "sm_90", "compute_90a", "compute_90", "compute_80"], ["sm_80", "sm_100"]),
        ("sm_89", ["sm_89", "sm_86", "sm_80", "compute_89", "compute_80"], ["sm_90", "compute_90"]),
        ("sm_120", ["sm_120", "compute_100", "compute_90"], ["sm_100", "sm_90a", "compute_121"]),
    ],
)  # fmt: skip
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
        image("gfx1250"),
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
