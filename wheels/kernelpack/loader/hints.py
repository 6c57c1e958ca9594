"""What to say when no image of a module fits a GPU: the NoImageError's text and its three fixes.

The same advice reaches the user three ways (the exception from :func:`kernelpack.load`, and
``kernelpack info`` as a table or as JSON), so it is written here once: install the device wheel
that carries the GPU's target, rebuild with that target, or run a compatible build through an
override. Only advice that can work is given: the target named is one the builder accepts
(:func:`kernelpack.targets.build_targets_for`), and for a GPU no such target runs on (gfx803,
sm_70) the one line says so and why (:func:`unservable`) instead of a command that fails.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..devices.argument import device_name
from ..errors import UsageError
from ..targets import (
    NvidiaTarget,
    TargetId,
    agent_target,
    build_targets_for,
    gfx_target_version,
    parse_target,
    select_image,
    split_gfx_target_version,
)
from ..targets.processors import AMD_BY_NAME, AMD_PROCESSORS, NVIDIA_ARCHS

if TYPE_CHECKING:
    from ..devices.detect import Gpu
    from ..targets import ParsedTarget
    from .catalog import Catalog, Choice


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
    is rebuilt from its own project folder); for a GPU no kernelpack image can serve, the one line
    that says why."""
    command = build_command(gpu, catalog)
    if command is None:
        return [unservable(gpu)]
    return [
        f"install the device wheel for it: {install_hint(gpu, catalog)}",
        f"or rebuild with the target: {command}",
        f"or {'run a compatible build' if gpu.vendor == 'amd' else 'instead'}: "
        f"{override_hint(gpu, built)}",
    ]


def build_target(gpu: Gpu) -> str | None:
    """The target to build for ``gpu``: the best one the builder accepts whose images it loads
    (its own processor or sm_XY where the table has it); None where there is none."""
    return next(iter(build_targets_for(gpu.target)), None)


def build_command(gpu: Gpu, catalog: Catalog | None = None) -> str | None:
    """The command that makes an image ``gpu`` loads; None where the builder accepts no target
    whose code runs on ``gpu`` (:func:`unservable` says why).

    kernelpack itself is rebuilt in its checkout (``python -m buildsys build --targets T``, which
    the checkout's runtime then loads); another package is a project of its user's, whose
    installed copy changes only by installing its wheels again: ``kernelpack-build wheels``, the
    command of the builder it was made with (docs/your-kernels.md), then pip from that dist/."""
    target = build_target(gpu)
    if target is None:
        return None
    if catalog is not None and catalog.distribution not in ("", "kernelpack"):
        name = catalog.distribution
        return (
            f"kernelpack-build wheels --project <{name}'s source folder> --targets {target}, "
            f'then pip install --find-links <that folder>/dist "{name}"'
        )
    return f"python -m buildsys build --targets {target}"


def unservable(gpu: Gpu) -> str:
    """Why no kernelpack image, installed, published or rebuilt, can run on ``gpu``: its
    processor is outside the target table the builder accepts, and no target in it makes code
    this GPU runs."""
    if isinstance(gpu.target, TargetId):
        specific = sorted(
            (p.name for p in AMD_PROCESSORS if not p.is_generic), key=gfx_target_version
        )
        own = gpu.target.processor
        try:
            newer = gfx_target_version(own) > gfx_target_version(specific[-1])
        except ValueError:
            newer = False
        return (
            f"no kernelpack image can serve {own}: the builder makes code only for the AMD "
            f"processors of kernelpack's target table ({specific[0]} to {specific[-1]} and "
            f"their generic targets; python -m kernelpack targets lists them), {own} is not one, "
            "and AMD code built for another processor does not run on it, so neither a device "
            "wheel nor a rebuild can give it one (HSA_OVERRIDE_GFX_VERSION would only make it "
            "run another processor's code)" + ("; a newer kernelpack may know it" if newer else "")
        )
    assert isinstance(gpu.target, NvidiaTarget)
    portable = [a.name for a in NVIDIA_ARCHS if not a.arch_specific]
    return (
        f"no kernelpack image can serve {gpu.target} (compute capability "
        f"{gpu.target.capability}): the builder makes cubins for {portable[0]} to {portable[-1]} "
        f"and PTX for compute_{portable[0][3:]} on; a cubin runs only on GPUs of its own major "
        "version and PTX only from its own compute capability on, so none runs on this GPU"
    )


def install_hint(gpu: Gpu, catalog: Catalog) -> str:
    """The pip command for the device wheel that would fit ``gpu``: from the host index's map of
    targets to device wheels where it names one that fits, with the extra named after the GPU
    (:func:`gpu_extra`; the wheel's group name where it has none), else the name the wheels are
    given; the
    distribution is the one the index was built for (kernelpack, or another kernelpack-built
    package)."""
    candidates: list[dict[str, Any]] = [
        {"vendor": t.vendor, "target": t.text, "kind": t.image_kind}
        for t in _known_targets(sorted(catalog.device_wheels))
        if t.vendor == gpu.vendor
    ]
    best, _ = select_image(candidates, gpu.target)
    distribution = catalog.distribution or "kernelpack"
    if best is not None:
        group = catalog.device_wheels[best["target"]]
        return (
            f'pip install "{distribution}[{gpu_extra(gpu, candidates, group, catalog) or group}]"'
        )
    target = build_target(gpu)
    if target is None:
        return unservable(gpu)
    extra = target.replace("_", "").lower()
    return f'pip install "{distribution}[{extra}]" (if a device wheel for {target} is published)'


def gpu_extra(
    gpu: Gpu, candidates: Sequence[dict[str, Any]], group: str, catalog: Catalog
) -> str | None:
    """The extra named after ``gpu`` itself (its processor, or sm_XY), where the host wheel has
    one that pulls in ``group``, the device wheel of the image the loader picks for it; None where
    it has none (a GPU in modes other than ROCm's defaults whose image another wheel holds).

    The wheel builder gives an extra to every AMD processor of the target table that loads a
    published image as a GPU in ROCm's default modes (sramecc where the processor has it, xnack
    off), and to every NVIDIA architecture of the table (buildsys.wheels.gpu_extras); this is the
    same judgement, made from the host index's map of targets to device wheels.
    """
    if isinstance(gpu.target, NvidiaTarget):
        own = str(gpu.target)
        if not any(a.name == own and not a.arch_specific for a in NVIDIA_ARCHS):
            return None
        return own
    assert isinstance(gpu.target, TargetId)
    own = gpu.target.processor
    info = AMD_BY_NAME.get(own)
    if info is None or info.is_generic:
        return None
    default_mode = agent_target(own, sramecc=info.sramecc, xnack=False)
    served, _ = select_image(candidates, default_mode)
    if served is None or catalog.device_wheels[served["target"]] != group:
        return None
    return own


def _known_targets(targets: Iterable[str]) -> list[ParsedTarget]:
    """The targets this kernelpack knows, parsed; a device wheel from a newer kernelpack may name
    one it does not, which no hint can use."""
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
    if isinstance(gpu.target, NvidiaTarget):
        # A cubin runs only on its own major version, so no built cubin can stand in; PTX for
        # this GPU's compute capability (or the newest the builder makes below it) is what the
        # driver compiles for it and for later GPUs.
        ptx = [t for t in build_targets_for(gpu.target) if t.startswith("compute_")]
        if not ptx:
            return unservable(gpu)
        return (
            f"build PTX the driver compiles for it and newer GPUs: python -m buildsys build "
            f"--targets {ptx[0]}"
        )
    processors = sorted(
        {t.amd.processor for t in _known_targets(built) if t.vendor == "amd" and t.kind != "family"}
    )
    assert isinstance(gpu.target, TargetId)
    own = gpu.target.processor
    specific = [p for p in processors if not AMD_BY_NAME[p].is_generic]
    # Closest first: the same generic family (gfx1151 -> gfx1100), then the same generation; never
    # another generation (an RX 6700 told to run gfx942 code would only crash). A processor the
    # table does not know has no family.
    info = AMD_BY_NAME.get(own)
    family = [
        p
        for p in specific
        if info is not None and AMD_BY_NAME[p].generic == info.generic is not None
    ] or [p for p in specific if p[:-2] == own[:-2]]
    if not family:
        return "KERNELPACK_TARGET=<a built target> or HSA_OVERRIDE_GFX_VERSION=<major.minor.step>"
    version = ".".join(str(v) for v in split_gfx_target_version(gfx_target_version(family[0])))
    return (
        f"HSA_OVERRIDE_GFX_VERSION={version} (runs {family[0]} code; only if the GPU is close "
        f"enough) or KERNELPACK_TARGET={family[0]}"
    )
