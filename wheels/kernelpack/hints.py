"""What to say when no image of a module fits a GPU: the NoImageError's text and its three fixes.

The same advice reaches the user three ways (the exception from :func:`kernelpack.load`, and
``kernelpack info`` as a table or as JSON), so it is written here once: install the device wheel
that carries the GPU's target, rebuild with that target, or run a compatible build through an
override.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .devices import device_name

if TYPE_CHECKING:
    from .catalog import Catalog, Choice
    from .detect import Gpu
    from .targets import ParsedTarget


def no_image_message(choice: Choice, catalog: Catalog, compile_problem: str) -> str:
    """The NoImageError's text: what was looked for, each image's verdict, and what to do."""
    gpu = choice.gpu
    built = sorted({e.image["target"] for e in catalog.images.get(choice.module, [])})
    lines = [
        f"no image of module {choice.module} fits GPU {device_name(gpu)} "
        f"({gpu.vendor}{' ' + gpu.name if gpu.name else ''}, target {gpu.target}); built for: "
        f"{', '.join(built) or 'no targets'}",
        *[f"  {reason}" for reason in choice.reasons],
        f"  run-time compilation: {compile_problem}",
        "what to do:",
        *[f"  - {fix}" for fix in fixes(gpu, catalog, built)],
    ]
    return "\n".join(lines)


def fixes(gpu: Gpu, catalog: Catalog, built: Sequence[str]) -> list[str]:
    """The three ways to get an image for ``gpu``, one line each (another package than kernelpack
    is rebuilt from its own project folder)."""
    project = ""
    if catalog.distribution not in ("", "kernelpack"):
        project = f"--project <{catalog.distribution}'s source folder> "
    return [
        f"install the device wheel for it: {install_hint(gpu, catalog)}",
        f"or rebuild with the target: python -m buildsys build {project}--targets "
        f"{_build_target(gpu)}",
        f"or {'run a compatible build' if gpu.vendor == 'amd' else 'instead'}: "
        f"{override_hint(gpu, built)}",
    ]


def _build_target(gpu: Gpu) -> str:
    from .targets import TargetId

    return gpu.target.processor if isinstance(gpu.target, TargetId) else str(gpu.target)


def install_hint(gpu: Gpu, catalog: Catalog) -> str:
    """The pip command for the device wheel that would fit ``gpu``: from the host index's map of
    targets to extras where it names one that fits, else the name the wheels are given; the
    distribution is the one the index was built for (kernelpack, or another kernelpack-built
    package)."""
    from .targets import select_image

    candidates: list[dict[str, Any]] = [
        {"vendor": t.vendor, "target": t.text, "kind": t.image_kind}
        for t in _known_targets(sorted(catalog.device_wheels))
        if t.vendor == gpu.vendor
    ]
    best, _ = select_image(candidates, gpu.target)
    distribution = catalog.distribution or "kernelpack"
    if best is not None:
        return f'pip install "{distribution}[{catalog.device_wheels[best["target"]]}]"'
    extra = _build_target(gpu).replace("_", "").lower()
    return (
        f'pip install "{distribution}[{extra}]" (if a device wheel for {_build_target(gpu)} is '
        "published)"
    )


def _known_targets(targets: Iterable[str]) -> list[ParsedTarget]:
    """The targets this kernelpack knows, parsed; a device wheel from a newer kernelpack may name
    one it does not, which no hint can use."""
    from .errors import UsageError
    from .targets import parse_target

    known = []
    for target in targets:
        try:
            known.append(parse_target(target))
        except UsageError:
            continue
    return known


def override_hint(gpu: Gpu, built: Sequence[str]) -> str:
    """For AMD, HSA_OVERRIDE_GFX_VERSION (which makes the runtime treat the GPU as a built
    processor of its family) or KERNELPACK_TARGET; for NVIDIA, where no override makes another
    major's cubin run, the PTX build that runs on this GPU."""
    from .processors import AMD_BY_NAME
    from .targets import NvidiaTarget, TargetId, gfx_target_version, split_gfx_target_version

    if isinstance(gpu.target, NvidiaTarget):
        # A cubin runs only on its own major version, so no built cubin can stand in; PTX for
        # this GPU's compute capability is what the driver compiles for it and for later GPUs.
        return (
            f"build PTX the driver compiles for it and newer GPUs: python -m buildsys build "
            f"--targets compute_{gpu.target.major}{gpu.target.minor}"
        )
    processors = sorted(
        {t.amd.processor for t in _known_targets(built) if t.vendor == "amd" and t.kind != "family"}
    )
    assert isinstance(gpu.target, TargetId)
    own = gpu.target.processor
    specific = [p for p in processors if not AMD_BY_NAME[p].is_generic]
    # Closest first: the same generic family (gfx1151 -> gfx1100), then the same generation; never
    # another generation (an RX 6700 told to run gfx942 code would only crash).
    family = [
        p for p in specific if AMD_BY_NAME[p].generic == AMD_BY_NAME[own].generic is not None
    ] or [p for p in specific if p[:-2] == own[:-2]]
    if not family:
        return "KERNELPACK_TARGET=<a built target> or HSA_OVERRIDE_GFX_VERSION=<major.minor.step>"
    version = ".".join(str(v) for v in split_gfx_target_version(gfx_target_version(family[0])))
    return (
        f"HSA_OVERRIDE_GFX_VERSION={version} (runs {family[0]} code; only if the GPU is close "
        f"enough) or KERNELPACK_TARGET={family[0]}"
    )
