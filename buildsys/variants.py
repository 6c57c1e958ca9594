"""The distribution layout: names an index can hold, and PEP 825 variant wheels.

Every file ``python -m buildsys wheels`` writes into dist/ has its own name:

- ``kernelpack-V-0host-cp311-abi3-PLAT.whl``: the host wheel (no images), with one extra per device
  wheel, under the build tag ``0host`` (buildsys.wheelfile.HOST_BUILD_TAG): the plain name is the fat
  wheel's, as every PEP 517 frontend writes it.
  What today's pip installs: ``pip install "kernelpack[gfx942]"`` adds that device wheel;
  ``pip install kernelpack`` alone compiles at run time or names the extra to install.
- ``kernelpack-V-cp311-abi3-PLAT-null.whl``: the fat wheel (every image) as the null variant, what a
  variant-aware installer takes when no variant fits the machine. Today's pip skips variant
  wheels: their file names do not parse as wheel names for it.
- ``kernelpack-V-cp311-abi3-PLAT-LABEL.whl``: one variant per device wheel (label gfx942,
  gfx110x, gfx11_generic, sm90, ptx): the host wheel that also requires that device wheel, with
  ``*.dist-info/variant.json`` naming the targets it serves as ``kernelpack :: amd_target :: V`` or
  ``kernelpack :: nvidia_target :: V`` properties.
- ``kernelpack_device_GROUP-V-py3-none-any.whl``: the device wheels;
  ``kernelpack_variant_provider-V-py3-none-any.whl``: the provider plugin installers run to learn
  which properties this machine supports (:mod:`kernelpack.variant_plugin` and the kernelpack
  modules it imports, :func:`provider_modules`);
  ``kernelpack-V-variants.json``: every variant's properties, for the index.

AMD variants carry kernelpack's own properties (``kernelpack :: amd_target``), chosen by
kernelpack's provider plugin; NVIDIA variants carry NVIDIA's (``nvidia :: sm_arch :: 90_real``),
chosen by NVIDIA's provider, which uv runs built in (docs/wheels.md says why each, and what every
installer takes). The JSON follows PEP 850's schema v0.2.0, the one uv reads; variantlib 0.2.2's
analyze-wheel accepts it (tests/test_wheels.py).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import kernelpack
from kernelpack.files.atomic import atomic_write
from kernelpack.formats.index import Index
from kernelpack.targets import parse_target
from kernelpack.targets.processors import NVIDIA_ARCHS
from kernelpack.variant_plugin import FEATURES, NAMESPACE, property_value

from .device_groups import DeviceGroup, device_groups
from .errors import BuildError
from .index_writer import read_index
from .metadata import add_fields
from .packaging import (
    PROVIDER_DISTRIBUTION,
    PROVIDER_PACKAGE,
    file_name_part,
    pure_wheel_dist_info,
    runtime_version,
)
from .wheelfile import host_wheel_name, read_wheel, write_wheel

if TYPE_CHECKING:
    from .packaging import ProjectMetadata

# PEP 850's schema (providers split out of PEP 825's): of the two uv 0.13 knows, the one with
# providers; a document naming another is ignored by uv, which then installs the non-variant wheel.
VARIANT_SCHEMA = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
NULL_LABEL = "null"
PROVIDER_API = f"{PROVIDER_PACKAGE}.variant_plugin:KernelpackVariantPlugin"
# NVIDIA's provider, spelt exactly as uv recognises it: uv runs it built in (NVML or libcuda; the
# overrides NV_VARIANT_PROVIDER_FORCE_SM_ARCH and NV_VARIANT_PROVIDER_FORCE_CUDA_DRIVER_VERSION).
NVIDIA_NAMESPACE = "nvidia"
NVIDIA_PROVIDER = {
    "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
NVIDIA_FEATURE = "sm_arch"
Properties = dict[str, dict[str, list[str]]]
# The kernelpack the builder runs with (a checkout's wheels/kernelpack, or the installed one).
KERNELPACK_SOURCE = Path(kernelpack.__file__).resolve().parent


def variant_label(group: DeviceGroup) -> str:
    """A device group's variant label ([0-9a-z._]+): gfx11-generic -> gfx11_generic."""
    return group.name.replace("-", "_").lower()


def nvidia_sm_arch(target: str) -> list[str]:
    """The ``nvidia :: sm_arch`` values a GPU reports where the image of ``target`` runs.

    NVIDIA's provider reports, for a GPU of compute capability X.z, ``Xm_real`` for every m <= z
    and ``X0_virtual``. A cubin for X.y runs on X.z for z >= y: the one value ``Xy_real``. PTX for
    X.y runs on every X'.z >= X.y: ``X'0_virtual`` for every later major of the table, and X's own
    when y is 0 (X0_virtual also stands for X.1 to X.9 GPUs, where PTX for X.y > X.0 cannot run).
    An arch-specific target (sm_90a) runs on its own GPU only, which no value says: none.
    """
    code = parse_target(target).nvidia
    if code.arch_specific:
        return []
    if not code.ptx:
        return [f"{code.major}{code.minor}_real"]
    majors = sorted({arch.major for arch in NVIDIA_ARCHS})
    return [
        f"{major}0_virtual"
        for major in majors
        if major > code.major or (major == code.major and code.minor == 0)
    ]


def variant_properties(group: DeviceGroup) -> Properties:
    """The group's targets as properties: {"kernelpack": {"amd_target": ["gfx1100", ...]}} for AMD,
    {"nvidia": {"sm_arch": ["90_real"]}} for NVIDIA where NVIDIA's values can say where the images
    run, else kernelpack's own (``kernelpack :: nvidia_target``)."""
    vendors = {parse_target(target).vendor for target in group.targets}
    nvidia = [nvidia_sm_arch(target) for target in group.targets] if vendors == {"nvidia"} else []
    if nvidia and all(nvidia):
        values = [v for target_values in nvidia for v in target_values]
        return {NVIDIA_NAMESPACE: {NVIDIA_FEATURE: list(dict.fromkeys(values))}}
    features: dict[str, list[str]] = {}
    for target in group.targets:
        values = features.setdefault(FEATURES[parse_target(target).vendor], [])
        if property_value(target) not in values:
            values.append(property_value(target))
    return {NAMESPACE: features}


def variant_info(
    runtime_version: str, variants: dict[str, Properties], namespaces: list[str]
) -> str:
    """variant.json (one variant) or {name}-{version}-variants.json (all of them, the null variant
    included: uv counts a label the index file does not list as unsupported). Every document of a
    project names the same providers, those of ``namespaces``."""
    providers: dict[str, dict[str, object]] = {
        NAMESPACE: {
            "requires": [f"{PROVIDER_DISTRIBUTION}=={runtime_version}"],
            "plugin-api": PROVIDER_API,
        },
        NVIDIA_NAMESPACE: dict(NVIDIA_PROVIDER),
    }
    document = {
        "$schema": VARIANT_SCHEMA,
        "default-priorities": {"namespace": namespaces},
        "providers": {namespace: providers[namespace] for namespace in namespaces},
        "variants": variants,
    }
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def variant_wheel_name(plain: str, label: str) -> str:
    """kernelpack-1.0-cp311-abi3-manylinux_2_17_x86_64.whl + gfx942 -> ...x86_64-gfx942.whl."""
    return re.sub(r"\.whl$", f"-{label}.whl", plain)


def _dist_info(files: dict[str, bytes]) -> str:
    return next(n.split("/")[0] for n in files if n.endswith(".dist-info/METADATA"))


def _with_requirement(metadata: str, requirement: str) -> str:
    return add_fields(metadata, [("Requires-Dist", requirement)])


def write_variants(
    meta: ProjectMetadata, fat: Path, host: Path, out_dir: Path, *, epoch: int
) -> list[Path]:
    """The null variant (the fat wheel), one variant per device group (the host wheel requiring
    that group's device wheel), the variants JSON and, for kernelpack itself, the provider wheel
    into out_dir. Every project's variants use kernelpack's provider, at the runtime's version."""
    fat_files, host_files = read_wheel(fat), read_wheel(host)
    index: Index = read_index(fat_files[f"{meta.package}/_index.py"].decode())
    version = index["version"]
    provider_version = version if meta.is_runtime else runtime_version()
    if host.name != host_wheel_name(fat.name):
        raise BuildError(f"the fat wheel {fat.name} and the host wheel {host.name} differ in tags")
    written: list[Path] = []
    groups = {variant_label(group): group for group in device_groups(index)}
    all_variants: dict[str, Properties] = {NULL_LABEL: {}} | {
        label: variant_properties(group) for label, group in groups.items()
    }
    used = {namespace for properties in all_variants.values() for namespace in properties}
    namespaces = [n for n in (NAMESPACE, NVIDIA_NAMESPACE) if n in used] or [NAMESPACE]

    null_files = dict(fat_files)
    null_files[f"{_dist_info(fat_files)}/variant.json"] = variant_info(
        provider_version, {NULL_LABEL: {}}, namespaces
    ).encode()
    written.append(
        write_wheel(out_dir / variant_wheel_name(fat.name, NULL_LABEL), null_files, epoch=epoch)
    )

    dist_info = _dist_info(host_files)
    for label, group in groups.items():
        files = dict(host_files)
        files[f"{dist_info}/WHEEL"] = fat_files[f"{dist_info}/WHEEL"]  # no build tag: none named
        files[f"{dist_info}/METADATA"] = _with_requirement(
            host_files[f"{dist_info}/METADATA"].decode(), f"{group.distribution}=={version}"
        ).encode()
        files[f"{dist_info}/variant.json"] = variant_info(
            provider_version, {label: all_variants[label]}, namespaces
        ).encode()
        written.append(
            write_wheel(out_dir / variant_wheel_name(fat.name, label), files, epoch=epoch)
        )

    variants_json = out_dir / f"{file_name_part(meta.name)}-{version}-variants.json"
    atomic_write(variants_json, variant_info(provider_version, all_variants, namespaces).encode())
    written.append(variants_json)
    if meta.is_runtime:  # the provider is part of the runtime's distribution, at its version
        written.append(provider_wheel(version, out_dir, epoch=epoch))
    return written


def provider_modules(root: str = "variant_plugin") -> list[str]:
    """The kernelpack modules the plugin imports, directly or not, at module level or inside
    functions, as paths inside the package ("devices/detect.py"), with the ``__init__.py`` of every
    subpackage on the way: the files the provider wheel copies. Imports under
    ``if TYPE_CHECKING:`` never run and are not followed, nor are compiled and generated modules
    (_launcher, _index): the code that imports them stays unused in the provider."""
    found: set[str] = set()
    pending = [root]
    while pending:
        name = pending.pop()
        parts = name.split(".") if name else []
        path = KERNELPACK_SOURCE.joinpath(*parts[:-1], f"{parts[-1]}.py") if parts else None
        package = parts
        if path is None or not path.is_file():
            path = KERNELPACK_SOURCE.joinpath(*parts, "__init__.py")
        else:
            package = parts[:-1]
        if not path.is_file():
            continue
        relative = path.relative_to(KERNELPACK_SOURCE).as_posix()
        if relative in found:
            continue
        found.add(relative)
        pending += [".".join(parts[:n]) for n in range(1, len(parts))]  # the packages' __init__
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _run_time_nodes(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[: len(package) - (node.level - 1)]
                module = [*base, *node.module.split(".")] if node.module else base
                pending.append(".".join(module))
                pending += [".".join([*module, alias.name]) for alias in node.names]
    return sorted(found)


def _run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those of ``if TYPE_CHECKING:`` bodies (type checkers' only)."""
    checking_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name | ast.Attribute)
        and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in node.body
        for inner in ast.walk(statement)
    }
    return [node for node in ast.walk(tree) if id(node) not in checking_only]


def provider_wheel(version: str, out_dir: Path, *, epoch: int) -> Path:
    """kernelpack-variant-provider: the plugin and the modules it imports, copied from kernelpack
    so that installer and loader detect GPUs with the same code."""
    files = {
        f"{PROVIDER_PACKAGE}/{name}": (KERNELPACK_SOURCE / name).read_bytes()
        for name in provider_modules()
        if name != "__init__.py"
    }
    files[f"{PROVIDER_PACKAGE}/__init__.py"] = (
        b'"""kernelpack\'s wheel-variant provider plugin; see variant_plugin.py."""\n'
    )
    files |= pure_wheel_dist_info(
        PROVIDER_DISTRIBUTION,
        version,
        "Wheel-variant provider plugin for kernelpack: which GPU targets this machine runs",
        file_name=PROVIDER_PACKAGE,
        entry_points={"variant_plugins": {NAMESPACE: PROVIDER_API}},
        requires_python=">=3.11",
    )
    return write_wheel(
        out_dir / f"{PROVIDER_PACKAGE}-{version}-py3-none-any.whl", files, epoch=epoch
    )
