"""The NVIDIA variants' properties against NVIDIA's provider's rule: for every GPU of the table and
every code target, the variant matches (one of its values is among those the GPU reports) exactly
where the loader would run the image (kernelpack.targets.nvidia_compatible).

What NVIDIA's provider reports for a GPU of compute capability X.z, written out from its source
(wheelnext/nvidia-variant-provider, plugin.py, get_supported_configs): ``Xm_real`` for m = z down
to 0, then ``X0_virtual``.
"""

from __future__ import annotations

import pytest

from buildsys.device_groups import DeviceGroup
from buildsys.variants import nvidia_sm_arch, variant_properties
from kernelpack.targets import NvidiaTarget, nvidia_compatible
from kernelpack.targets.processors import NVIDIA_ARCHS

GPUS = [a.name for a in NVIDIA_ARCHS if not a.arch_specific]
CODE = [a.name for a in NVIDIA_ARCHS] + [a.name.replace("sm_", "compute_") for a in NVIDIA_ARCHS]


def reported(gpu: str) -> list[str]:
    major, minor = NvidiaTarget.parse(gpu).major, NvidiaTarget.parse(gpu).minor
    return [f"{major}{m}_real" for m in range(minor, -1, -1)] + [f"{major}0_virtual"]


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("code", CODE)
def test_an_nvidia_variant_matches_only_where_its_image_runs(gpu: str, code: str) -> None:
    matches = bool(set(nvidia_sm_arch(code)) & set(reported(gpu)))
    runs = nvidia_compatible(NvidiaTarget.parse(code), NvidiaTarget.parse(gpu))
    # PTX for X.y with y > 0 runs on X.y to X.9, which X0_virtual cannot tell from X.0: no match
    # there (the null variant serves those GPUs); arch-specific code has no value of its own
    lost = code.endswith("a") or (code.startswith("compute_") and not code.endswith("0"))
    assert matches == runs or (lost and runs and not matches), (code, gpu)


def test_values_as_written_by_hand() -> None:
    assert nvidia_sm_arch("sm_90") == ["90_real"]
    assert nvidia_sm_arch("sm_86") == ["86_real"]
    assert nvidia_sm_arch("compute_80") == [f"{m}0_virtual" for m in (8, 9, 10, 11, 12)]
    assert nvidia_sm_arch("compute_86") == [f"{m}0_virtual" for m in (9, 10, 11, 12)]
    assert nvidia_sm_arch("sm_90a") == []


def _group(*targets: str) -> DeviceGroup:
    return DeviceGroup("g", targets, "demo", "demo")


def test_a_group_takes_nvidias_namespace_only_where_every_target_has_values() -> None:
    assert variant_properties(_group("sm_90")) == {"nvidia": {"sm_arch": ["90_real"]}}
    assert variant_properties(_group("sm_90a")) == {"kernelpack": {"nvidia_target": ["sm_90a"]}}
    assert variant_properties(_group("gfx1100", "gfx1101")) == {
        "kernelpack": {"amd_target": ["gfx1100", "gfx1101"]}
    }
