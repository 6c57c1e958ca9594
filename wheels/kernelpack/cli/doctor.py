"""``python -m kernelpack doctor``: what this machine needs to run the images of every installed
kernelpack-built package (kernelpack's own and each one of the entry point group
``kernelpack.packages``, as ``info`` lists them), and why not.

For each GPU and package: its target, the image each module would load (and from which wheel), the
exact pip command that installs what is missing; the vendor runtime libraries against what the images need
(generic AMD images are code object v6: ROCm 6.2 or later); and known problem signatures, each with
what to do:

- ``override``: HSA_OVERRIDE_GFX_VERSION[_<node>] or KERNELPACK_TARGET changes a GPU's target,
  though an image for the GPU's own processor (or its generic target) is installed or published;
- ``rdna-host-memory``: an RDNA1/RDNA2 GPU (gfx10.1, gfx10.3), which ROCm does not officially
  support, with coherent (fine-grained) host memory, read uncached over PCIe; a warning where
  HIP_HOST_COHERENT=1 makes every hipHostMalloc coherent, a note otherwise;
- ``xnack``: HSA_XNACK=1 where every image was built xnack-, or where the processor has no xnack;
- ``hidden``: a GPU of the machine that ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES or
  CUDA_VISIBLE_DEVICES hides from this process;
- ``no-image`` / ``runtime``: a GPU no installed image fits; a runtime missing or too old.

Everything is computed by :func:`diagnose` from values passed in (GPUs with and without the
visible-devices variables, one Loader per installed package, the runtime versions, the
environment), so the tests run it on recorded topologies.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .._console import print_json, print_table
from .._jsonfields import json_fields
from ..backends.support import runtime_versions
from ..devices.detect import Gpu, detect_gpus
from ..loader.catalog import RUNTIME_PACKAGE, Unreadable
from ..loader.hints import build_command, install_hint, unservable
from ..loader.load import Loader, installed_loaders
from ..targets import TargetId, agent_target, parse_target, runs_code_object_v6
from ..targets.processors import AMD_BY_NAME, GENERIC_CODE_OBJECT_VERSION, GENERIC_MIN_ROCM

Severity = Literal["error", "warning", "info"]
VISIBLE_DEVICES = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
RUNTIME_OF = {"amd": "hip", "nvidia": "cuda"}


@dataclass(frozen=True)
class Finding:
    """One problem signature seen on this machine, and what to do about it."""

    code: str
    severity: Severity
    device: int | None  # position in kernelpack's GPU list; None for the machine
    message: str
    advice: str

    def to_json(self) -> dict[str, object]:
        return json_fields(self)


def _hardware_gpu(gpu: Gpu) -> Gpu:
    """The GPU as its hardware is, without HSA_OVERRIDE_GFX_VERSION or KERNELPACK_TARGET."""
    if gpu.vendor != "amd" or not gpu.hardware or not isinstance(gpu.target, TargetId):
        return gpu
    features = dict(gpu.target.features)
    hardware = agent_target(
        gpu.hardware, sramecc=features.get("sramecc", False), xnack=features.get("xnack", False)
    )
    return gpu._replace(target=hardware, override="")


def _identity(gpu: Gpu) -> tuple[str, str, str, int | None]:
    return (gpu.vendor, gpu.uuid, gpu.location, gpu.node)


def diagnose(
    loaders: Loader | Sequence[Loader],
    *,
    hidden_from: Sequence[Gpu],
    runtimes: Mapping[str, str],
    environ: Mapping[str, str],
    runtimes_apply: bool = True,
    unreadable: Sequence[Unreadable] = (),
    gpus: Sequence[Gpu] | None = None,
) -> dict[str, Any]:
    """The doctor's report (what ``--json`` prints).

    ``loaders`` (one per installed package, sharing the GPUs; the first one's GPUs are used) give
    the GPUs this process sees and the installed indexes; ``hidden_from`` is the machine's GPUs
    read without the visible-devices variables; ``runtimes`` the vendor libraries' versions
    (kernelpack.backends.support.library_versions); ``runtimes_apply`` False when the GPUs come from a
    recorded topology, whose runtimes are not this machine's; ``unreadable`` the installed
    packages whose index cannot be read (:func:`kernelpack.loader.load.installed_loaders`), one
    ``package`` finding each; ``gpus`` replaces the first loader's GPUs (there may be no loader).
    """
    every = [loaders] if isinstance(loaders, Loader) else list(loaders)
    catalogs = {loader.package: loader.catalog(with_device_wheels=True) for loader in every}
    if gpus is None:
        gpus = every[0].gpus() if every else []
    findings: list[Finding] = []
    rows: list[dict[str, Any]] = []
    hip = runtimes.get("hip", "not found")
    hip_version = None if hip == "not found" or hip.startswith("error") else hip.split()[0]
    v6 = None if hip_version is None else runs_code_object_v6(hip_version)
    needs_v6: list[int] = []

    for position, gpu in enumerate(gpus):
        images: dict[str, dict[str, dict[str, str] | None]] = {}
        install: dict[str, str] = {}
        for loader in every:
            catalog = catalogs[loader.package]
            if not catalog.modules:
                continue
            modules: dict[str, dict[str, str] | None] = {}
            for module in sorted(catalog.modules):
                located = loader.choose(module, gpu).located
                modules[module] = (
                    None
                    if located is None
                    else {"target": located.image["target"], "package": located.origin}
                )
                if located is not None and parse_target(located.image["target"]).kind == "generic":
                    needs_v6.append(position)
            images[loader.package] = modules
            missing = [m for m, image in modules.items() if image is None]
            if not missing:
                continue
            hardware = _hardware_gpu(gpu)
            build = build_command(hardware, catalog)
            if build is None:  # gfx803, sm_70: say so, rather than name a command that fails
                advice = unservable(hardware)
            else:
                install[loader.package] = command = install_hint(hardware, catalog)
                advice = f"{command}; or build it: {build}"
            owner = "" if loader.package == RUNTIME_PACKAGE else f"of {loader.package} "
            findings.append(
                Finding(
                    "no-image",
                    "error",
                    position,
                    f"no installed image {owner}fits {gpu.target} for {', '.join(missing)}",
                    advice,
                )
            )
        rows.append(
            {
                "device": position,
                "vendor": gpu.vendor,
                "target": str(gpu.target),
                "hardware": gpu.hardware,
                "name": gpu.name,
                "override": gpu.override,
                "images": images,
                "install": install,
            }
        )
        findings += _override(position, gpu, every)
        findings += _rdna(position, gpu, environ)
        for loader in every:
            findings += _xnack(position, gpu, environ, loader, catalogs[loader.package].modules)

    findings += _hidden(gpus, hidden_from, environ)
    findings += [Finding("package", "error", None, u.problem, u.remedy) for u in unreadable]
    if not any(catalog.modules for catalog in catalogs.values()):
        findings.append(
            Finding(
                "no-index",
                "error",
                None,
                "no kernelpack index is installed",
                "pip install kernelpack (or python -m buildsys build in a source tree)",
            )
        )
    requirements = _requirements(gpus, needs_v6, hip_version, v6, runtimes, runtimes_apply)
    findings += [f for f in requirements if isinstance(f, Finding)]
    return {
        "gpus": rows,
        "runtimes": dict(runtimes),
        "runtimes_apply": runtimes_apply,
        "requirements": [r for r in requirements if isinstance(r, dict)],
        "findings": [f.to_json() for f in findings],
        "packages": {
            package: {
                "distribution": catalog.distribution,
                "version": catalog.version,
                "indexes": catalog.origins,
            }
            for package, catalog in catalogs.items()
        }
        | {
            broken.package: {
                "distribution": broken.distribution,
                "version": "",
                "indexes": [],
                "error": broken.problem,
            }
            for broken in unreadable
        },
    }


def _override(position: int, gpu: Gpu, loaders: Sequence[Loader]) -> list[Finding]:
    if not gpu.override or gpu.source == "KERNELPACK_TARGET" or not gpu.hardware:
        return []
    variable = gpu.override.split("=", 1)[0]
    own = _hardware_gpu(gpu)
    native: dict[tuple[str, str], Any] = {}
    lacking: list[Loader] = []  # packages with a module that has no image for the hardware
    for loader in loaders:
        catalog = loader.catalog(with_device_wheels=True)
        for module in sorted(catalog.modules):
            native[(loader.package, module)] = found = loader.choose(module, own).located
            if found is None and loader not in lacking:
                lacking.append(loader)
    images = sorted({n.image["target"] for n in native.values() if n is not None})
    what = f"{gpu.override} makes this {gpu.hardware} GPU run {gpu.target} code"
    if native and not lacking:
        return [
            Finding(
                "override",
                "warning",
                position,
                f"{what}, though the installed packages carry {', '.join(images)} code for it",
                f"unset {variable}: {gpu.hardware} then loads its own image",
            )
        ]
    build = build_command(own)  # None: no image can serve the hardware (gfx803), nor a wheel
    hints = [install_hint(own, loader.catalog(with_device_wheels=True)) for loader in lacking]
    if build and hints and all("if a device wheel" not in hint for hint in hints):
        return [
            Finding(
                "override",
                "warning",
                position,
                f"{what}; a device wheel for {gpu.hardware} itself is published",
                f"{'; '.join(hints)}, then unset {variable}",
            )
        ]
    return [
        Finding(
            "override",
            "info",
            position,
            f"{what}; no image for {gpu.hardware} itself is installed or known",
            f"keep {variable} only while the results are right"
            + (f", or build {gpu.hardware}: {build}" if build else f"; {unservable(own)}"),
        )
    ]


def _rdna(position: int, gpu: Gpu, environ: Mapping[str, str]) -> list[Finding]:
    info = AMD_BY_NAME.get(gpu.hardware) if gpu.vendor == "amd" else None
    if info is None or info.generic not in ("gfx10-1-generic", "gfx10-3-generic"):
        return []
    coherent = environ.get("HIP_HOST_COHERENT", "") == "1"
    generation = "RDNA1" if info.generic == "gfx10-1-generic" else "RDNA2"
    return [
        Finding(
            "rdna-host-memory",
            "warning" if coherent else "info",
            position,
            f"{gpu.hardware} is {generation}, a Radeon generation ROCm does not officially support "
            "(gfx1030 Pro cards aside); the GPU reads coherent (fine-grained) host memory uncached "
            "over PCIe, so kernels touching it crawl, and on these GPUs may hang or fault"
            + ("; HIP_HOST_COHERENT=1 makes every hipHostMalloc coherent" if coherent else ""),
            ("unset HIP_HOST_COHERENT; " if coherent else "")
            + "keep kernel inputs in device memory (torch/CuPy device arrays) and pin host buffers "
            "with hipHostMallocNonCoherent",
        )
    ]


def _xnack(
    position: int,
    gpu: Gpu,
    environ: Mapping[str, str],
    loader: Loader,
    modules: Mapping[str, object],
) -> list[Finding]:
    if gpu.vendor != "amd" or not isinstance(gpu.target, TargetId):
        return []
    processor = gpu.target.processor
    info = AMD_BY_NAME.get(processor)
    if environ.get("HSA_XNACK") == "1" and info is not None and not info.xnack:
        return [
            Finding(
                "xnack",
                "info",
                position,
                f"HSA_XNACK=1 has no effect on {processor}, which has no xnack mode",
                "unset HSA_XNACK",
            )
        ]
    mismatched = [
        m
        for m in sorted(modules)
        if (choice := loader.choose(m, gpu)).located is None
        and any("the GPU runs xnack" in reason for reason in choice.reasons)
    ]
    if not mismatched:
        return []
    mode = gpu.target.feature("xnack")
    running = "xnack+ (HSA_XNACK=1)" if mode else "xnack- (HSA_XNACK unset or 0)"
    if loader.package != RUNTIME_PACKAGE:
        mismatched = [f"{loader.package} {m}" for m in mismatched]
    return [
        Finding(
            "xnack",
            "error",
            position,
            f"{', '.join(mismatched)}: every {processor} image fixes the other xnack mode; this "
            f"process runs {running}",
            ("unset HSA_XNACK" if mode else "set HSA_XNACK=1")
            + f", or build {processor}:xnack{'+' if mode else '-'} (or {processor} with xnack any)",
        )
    ]


def _hidden(
    gpus: Sequence[Gpu], machine: Sequence[Gpu], environ: Mapping[str, str]
) -> list[Finding]:
    seen = {_identity(gpu) for gpu in gpus}
    hidden = [gpu for gpu in machine if _identity(gpu) not in seen]
    if not hidden:
        return []
    variables = [f"{v}={environ[v]}" for v in VISIBLE_DEVICES if v in environ]
    return [
        Finding(
            "hidden",
            "warning",
            None,
            f"{gpu.vendor} GPU {gpu.name or gpu.hardware} ({gpu.target}, "
            f"{gpu.location or 'node ' + str(gpu.node)}) is hidden from this process by "
            f"{' and '.join(variables) or 'a visible-devices variable'}",
            "unset the variable, or list this GPU in it, if kernelpack should use it",
        )
        for gpu in hidden
    ]


def _requirements(
    gpus: Sequence[Gpu],
    needs_v6: list[int],
    hip_version: str | None,
    v6: bool | None,
    runtimes: Mapping[str, str],
    runtimes_apply: bool,
) -> list[dict[str, Any] | Finding]:
    """One row per vendor runtime the GPUs need, and a finding where it falls short."""
    rows: list[dict[str, Any] | Finding] = []
    rocm = ".".join(map(str, GENERIC_MIN_ROCM))
    for vendor in sorted({gpu.vendor for gpu in gpus}):
        library = RUNTIME_OF[vendor]
        have = runtimes.get(library, "not found")
        need = "a HIP runtime (ROCm)" if vendor == "amd" else "the CUDA driver (libcuda)"
        if vendor == "amd" and needs_v6:
            need = (
                f"HIP from ROCm {rocm} (code object v{GENERIC_CODE_OBJECT_VERSION}: generic images)"
            )
        found = have != "not found" and not have.startswith("error")
        ok: bool | None = v6 if found and vendor == "amd" and needs_v6 else found
        rows.append({"vendor": vendor, "library": library, "needs": need, "found": have, "ok": ok})
        if ok is not False or not runtimes_apply:
            continue
        if found:
            message = (
                f"HIP {hip_version} cannot load code object v{GENERIC_CODE_OBJECT_VERSION}, the "
                f"generic images devices {', '.join(map(str, sorted(set(needs_v6))))} need"
            )
            advice = (
                f"upgrade to ROCm {rocm} or later, or install an image built for the GPU itself"
            )
        else:
            message = f"no {library} runtime library found for the {vendor} GPUs"
            advice = (
                f"install ROCm {rocm} or later (libamdhip64)"
                if vendor == "amd"
                else "install the NVIDIA driver (libcuda.so.1)"
            )
        rows.append(Finding("runtime", "error", None, message, advice))
    return rows


WIDTH = 100  # a finding's lines are wrapped to this: messages and advice run to 1,000 characters


def _wrapped(text: str, indent: str) -> str:
    """``text`` in lines of at most :data:`WIDTH`, continued with ``indent``; a word longer than
    that (a path, a pip command) is kept whole on a line of its own rather than cut."""
    return textwrap.fill(
        text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _images_cell(modules: Mapping[str, Mapping[str, str] | None]) -> str:
    """What a GPU loads of one package: each module's image for up to three modules, else the
    count of modules per image (a project can have dozens)."""

    def label(image: Mapping[str, str] | None) -> str:
        return f"{image['target']} [{image['package']}]" if image else "none"

    if len(modules) <= 3:
        return ", ".join(f"{m}: {label(i)}" for m, i in modules.items())
    counts: dict[str, int] = {}
    for image in modules.values():
        counts[label(image)] = counts.get(label(image), 0) + 1
    return "; ".join(f"{n} module{'' if n == 1 else 's'}: {text}" for text, n in counts.items())


def run_doctor(json_output: bool, sysfs_root: str | None) -> int:
    """``python -m kernelpack doctor [--json] [--sysfs-root DIR]``; exit 1 when an error is found."""

    environ = dict(os.environ)
    visible = detect_gpus(sysfs_root=sysfs_root, environ=environ)
    unfiltered = {k: v for k, v in environ.items() if k not in VISIBLE_DEVICES}
    machine = detect_gpus(sysfs_root=sysfs_root, environ=unfiltered)
    loaders, unreadable = installed_loaders(visible)
    report = diagnose(
        loaders,
        hidden_from=machine,
        runtimes=runtime_versions(),
        environ=environ,
        runtimes_apply=sysfs_root is None,
        unreadable=unreadable,
        gpus=visible,
    )
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if json_output:
        print_json(report)
        return 1 if errors else 0
    print_table(
        "GPUs",
        ("device", "target", "name", "package", "images"),
        [
            (
                g["device"],
                g["target"] + (f" ({g['override']})" if g["override"] else ""),
                g["name"],
                package,
                _images_cell(modules),
            )
            for g in report["gpus"]
            for package, modules in (g["images"] or {"-": {}}).items()
        ]
        or [("-", "no GPU found", "", "", "")],
    )
    print()
    where = "" if report["runtimes_apply"] else " (this machine's, not the recorded topology's)"
    print_table(
        f"Runtime libraries{where}",
        ("vendor", "library", "needs", "found", "ok"),
        [
            (
                r["vendor"],
                r["library"],
                r["needs"],
                r["found"],
                {True: "yes", False: "no"}.get(r["ok"], "?"),
            )
            for r in report["requirements"]
        ]
        or [("-", "-", "no GPU", "-", "-")],
    )
    print()
    print("Findings")
    for finding in report["findings"] or [
        {"severity": "ok", "device": None, "message": "nothing found", "advice": ""}
    ]:
        where = "" if finding["device"] is None else f"GPU {finding['device']}: "
        print(_wrapped(f"{finding['severity']}: {where}{finding['message']}", "  "))
        if finding["advice"]:
            print(_wrapped(f"  what to do: {finding['advice']}", "    "))
    return 1 if errors else 0
