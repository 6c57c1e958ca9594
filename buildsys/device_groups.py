"""Which device wheels an index makes: one per AMD family with two or more built processors, one per
other AMD target, one per NVIDIA cubin target, one for all PTX; named after the index's project.

A leaf of the wheel builder: target data and the index schema only, nothing of the orchestration
(:mod:`buildsys.wheels` and :mod:`buildsys.variants` both read it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kernelpack.formats.index import Index
from kernelpack.targets import parse_target
from kernelpack.targets.processors import AMD_FAMILIES

from .errors import BuildError


@dataclass(frozen=True)
class DeviceGroup:
    """One device wheel: its extra's name and the targets whose images it carries."""

    name: str  # "gfx110x", "gfx942", "sm90", "ptx"
    targets: tuple[str, ...]
    owner: str  # the project's distribution name: "kernelpack", "demo-kernels"
    owner_package: str  # and its import name: "kernelpack", "demo_kernels"

    @property
    def distribution(self) -> str:
        return f"{self.owner}-device-{self.name}"

    @property
    def package(self) -> str:
        return f"{self.owner_package}_device_" + re.sub(r"[^a-z0-9]", "_", self.name)

    @property
    def entry_point(self) -> str:
        """The entry point's name in the group kernelpack.device: ``<package>.<group>``."""
        return f"{self.owner_package}.{self.name}"


def owner_of(index: Index) -> tuple[str, str]:
    """(distribution, import name) an index was stamped with by :func:`stamp_index`."""
    distribution, package = index.get("distribution"), index.get("package")
    if not distribution or not package:
        raise BuildError("the index names no package; stamp_index() it before making wheels")
    return distribution, package


def device_groups(index: Index) -> list[DeviceGroup]:
    """Group the built targets into device wheels, named after the index's project.

    An AMD family (AMD_FAMILIES) with two or more built processors becomes one wheel named after
    the family (gfx1100 and gfx1101 -> gfx110x); any other AMD target, generic ones included, gets
    its own wheel named after its processor (gfx11-generic); each NVIDIA cubin target its own
    (sm_90 -> sm90); all PTX goes to "ptx".
    """
    built = sorted({image["target"] for m in index["modules"].values() for image in m["images"]})
    parsed = {target: parse_target(target) for target in built}
    groups: dict[str, list[str]] = {}
    amd = [t for t in built if parsed[t].vendor == "amd"]
    processors = {t: parsed[t].amd.processor for t in amd}
    for target in amd:
        family = next(
            (
                name
                for name, members in AMD_FAMILIES.items()
                if processors[target] in members
                and sum(p in members for p in set(processors.values())) > 1
            ),
            None,
        )
        groups.setdefault((family or processors[target]).lower(), []).append(target)
    for target in built:
        if parsed[target].kind == "sm":
            groups.setdefault(target.replace("_", ""), []).append(target)
        elif parsed[target].kind == "compute":
            groups.setdefault("ptx", []).append(target)
    owner, owner_package = owner_of(index)
    return [
        DeviceGroup(name, tuple(targets), owner, owner_package)
        for name, targets in sorted(groups.items())
    ]
