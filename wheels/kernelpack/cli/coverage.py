"""Coverage: for every AMD processor LLVM knows, the image it would load from a set of built targets.

``python -m kernelpack targets`` prints it for what is installed (or for ``--targets``), and
docs/targets.md lists it for the default arch_matrix.toml. Each processor is judged as a GPU of
that processor running ROCm's default modes (sramecc on where the processor has it, as ROCm reports
a gfx942; xnack off, HSA_XNACK unset) by the loader's own rule, :func:`targets.select_image`, so
the table says what the loader would do, candidate by candidate.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from .._console import print_json, print_table
from .._jsonfields import json_fields
from ..devices.argument import device_name
from ..devices.detect import Gpu, detect_gpus
from ..errors import UsageError
from ..loader.catalog import Catalog
from ..loader.hints import install_hint
from ..loader.load import Loader
from ..targets import (
    ParsedTarget,
    agent_target,
    gfx_target_version,
    parse_target,
    select_image,
    split_gfx_target_version,
)
from ..targets.processors import AMD_BY_NAME, AMD_PROCESSORS

How = Literal["specific", "generic", "run-time compile"]


@dataclass(frozen=True)
class CoverageRow:
    """One processor: the built target it would load (None: none fits), how, and why."""

    processor: str
    description: str
    generic: str | None  # its generic target, None where LLVM gives it none
    image: str | None
    how: How
    reason: str

    @property
    def native(self) -> bool:
        """True when an image built for this processor or its generic target loads, with no
        HSA_OVERRIDE_GFX_VERSION and no compile at first load."""
        return self.image is not None

    def to_json(self) -> dict[str, object]:
        return json_fields(self, also=("native",))


def amd_built(targets: Iterable[str]) -> list[ParsedTarget]:
    """The AMD code-object targets among built target names (families expanded), in order."""
    parsed: list[ParsedTarget] = []
    for name in targets:
        target = parse_target(name)
        if target.vendor != "amd":
            continue
        members = [parse_target(m) for m in target.members] if target.kind == "family" else [target]
        parsed += [m for m in members if m not in parsed]
    return parsed


def coverage(
    built: Iterable[str], *, runtime_code_object_v6: bool | None = None
) -> list[CoverageRow]:
    """One row per specific AMD processor of the table (gfx9 on), in table order."""
    images = [
        {"vendor": "amd", "target": target.text, "kind": target.image_kind}
        for target in amd_built(built)
    ]
    specific = [p for p in AMD_PROCESSORS if not p.is_generic]
    rows = []
    for processor in specific:
        agent = agent_target(processor.name, sramecc=processor.sramecc, xnack=False)
        best, reasons = select_image(images, agent, runtime_code_object_v6=runtime_code_object_v6)
        if best is not None:
            chosen = str(best["target"])
            how: How = "generic" if parse_target(chosen).kind == "generic" else "specific"
            reason = next(r for r in reasons if ": selected: " in r).split(": selected: ", 1)[1]
        else:
            how, chosen = "run-time compile", None
            reason = _no_image_reason(
                processor.name, processor.generic, [i["target"] for i in images]
            )
        rows.append(
            CoverageRow(
                processor.name, processor.description, processor.generic, chosen, how, reason
            )
        )
    return rows


def _no_image_reason(processor: str, generic: str | None, built: Sequence[str]) -> str:
    """Why nothing fits, and the ways out: hipRTC at first load, or an override to a built
    processor of the same generic family (the runtime then runs that processor's code)."""
    if generic is None:
        missing = f"{processor} is not built and has no generic target"
    else:
        missing = f"neither {processor} nor {generic} is built"
    same_family = [
        t.split(":")[0]
        for t in built
        if parse_target(t).kind == "specific"
        and generic is not None
        and AMD_BY_NAME[t.split(":")[0]].generic == generic
    ]
    override = ""
    if same_family:
        version = split_gfx_target_version(gfx_target_version(same_family[0]))
        override = (
            f"; or HSA_OVERRIDE_GFX_VERSION={'.'.join(map(str, version))} runs the "
            f"{same_family[0]} image"
        )
    return f"{missing}: hipRTC compiles the source at first load{override}"


def installed_targets(catalog: Catalog) -> tuple[list[str], set[str]]:
    """(the targets the installed kernelpack carries images for or names device wheels for,
    those whose images are installed)."""
    present = {e.image["target"] for located in catalog.images.values() for e in located}
    return sorted({*present, *catalog.device_wheels}), present


def run_targets(json_output: bool, targets: str | None, sysfs_root: str | None = None) -> int:
    """``python -m kernelpack targets [--json] [--targets LIST] [--sysfs-root DIR]``: the table,
    with each image marked installed or not, and for this machine's GPUs the image each loads or
    the exact pip command that installs it."""
    present: set[str] | None = None  # None: judging --targets, not what is installed
    gpus: list[Gpu] = []
    machine: list[str] = []
    if targets is not None:
        built = [t.strip() for t in targets.split(",") if t.strip()]
        source = "--targets"
    else:
        catalog = Loader(gpus=[]).catalog(with_device_wheels=True)
        built, present = installed_targets(catalog)
        source = "the installed kernelpack"
    if not built:
        raise UsageError(
            "no kernelpack index installed, so no built targets to judge; pass --targets "
            "gfx942,gfx11-generic,... or build one with `python -m buildsys build`"
        )
    rows = coverage(built)
    if present is not None:
        gpus = detect_gpus(sysfs_root=sysfs_root)
        machine = [_gpu_line(gpu, catalog, present) for gpu in gpus]
    if json_output:
        print_json(
            {
                "built": amd_names(built),
                "installed": None if present is None else amd_names(sorted(present)),
                "processors": [row.to_json() for row in rows],
                "gpus": [
                    {"device": device_name(g), "target": str(g.target), "advice": line}
                    for g, line in zip(gpus, machine, strict=True)
                ],
            }
        )
        return 0

    def image(row: CoverageRow) -> str:
        if row.image is None:
            return "none"
        if present is None or row.image in present:
            return row.image
        return f"{row.image} (not installed)"

    print_table(
        f"AMD processors and the image each loads from {source}",
        ("processor", "GPU", "generic target", "image", "how", "why"),
        [(r.processor, r.description, r.generic or "-", image(r), r.how, r.reason) for r in rows],
    )
    native = sum(row.native for row in rows)
    print(f"{native} of {len(rows)} processors load a native image")
    if present is not None and any(r.image not in present for r in rows if r.image):
        print(
            "(not installed): the host wheel names its device wheel; pip installs it by the extra"
        )
    for gpu, line in zip(gpus, machine, strict=True):
        print(f"this machine's {device_name(gpu)} ({gpu.target}): {line}")
    return 0


def _gpu_line(gpu: Gpu, catalog: Catalog, present: set[str]) -> str:
    """What ``gpu`` loads from the installed images, or the pip command that installs one."""
    images = [
        {"vendor": t.vendor, "target": t.text, "kind": t.image_kind}
        for t in map(parse_target, sorted(present))
        if t.vendor == gpu.vendor
    ]
    best, _ = select_image(images, gpu.target)
    if best is not None:
        return f"loads the installed {best['target']} image"
    return install_hint(gpu, catalog)


def amd_names(built: Iterable[str]) -> list[str]:
    """The canonical AMD target names among ``built``."""
    return [target.text for target in amd_built(built)]
