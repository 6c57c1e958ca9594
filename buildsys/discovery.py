"""Kernels discovered from the compiled objects: their symbols, parameter layouts and names.

What a module's kernels are is read off what the compiler made, never off the source text, so
kernels written through macros and templates are found like any other. Per object:

- AMD code objects: the AMDGPU metadata's ``amdhsa.kernels`` (``.name``, ``.args``: offset, size
  and value kind of each argument; the hidden ones the compiler adds are left out);
- cubins: the kernel symbols (functions marked as entries, local ones included) and their
  EIATTR_KPARAM_INFO records (ordinal, offset, size);
- PTX: the ``.entry`` directives (``.visible`` or not) and their ``.param`` lists.

Each image's kernels are then named by the kernel-name rule (buildsys.demangling) and checked to
agree across a module's images (:func:`name_kernels`); when several units of a device-linked
module define internal kernels of one name, each is named after its unit (``clear@dot.cu``,
buildsys.unit_symbols), never one picked. Which kernels some targets lack, and which of those the
project allows, is buildsys.missing_kernels'.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kernelpack.formats import read_code_object, read_cubin, read_ptx
from kernelpack.formats.index import KernelParam, KernelResources
from kernelpack.loader.images import KINDS_BY_NAME

from .demangling import Demangled, cuda_spelling
from .errors import BuildError
from .unit_symbols import unit_of_tag, unit_symbol

# PTX has no resource figures before the driver compiles it: zeros, and the warp size of every
# NVIDIA GPU.
_PTX_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=0
)


@dataclass(frozen=True)
class ObjectKernel:
    """One kernel as an object defines it: its symbol, each parameter's (offset, size) in bytes,
    and its resources."""

    symbol: str
    layout: tuple[tuple[int, int], ...]
    resources: KernelResources


def object_kernels(kind: str, data: bytes, name: str) -> tuple[str, list[ObjectKernel]]:
    """An object's target, as the matrix names it, and every kernel it defines."""
    if KINDS_BY_NAME[kind].vendor == "amd":
        code_object = read_code_object(data, name)
        kernels = [
            ObjectKernel(k.name, tuple((p.offset, p.size) for p in k.params), k.resources())
            for k in code_object.kernels
        ]
        return str(code_object.target), kernels
    if kind == "cubin":
        cubin = read_cubin(data, name)
        kernels = [
            ObjectKernel(k.name, tuple((p.offset, p.size) for p in k.params), k.resources())
            for k in cubin.kernels
        ]
        return cubin.target, kernels
    ptx = read_ptx(data, name)
    kernels = [
        ObjectKernel(k.name, tuple((p.offset, p.size) for p in k.params), _PTX_RESOURCES.copy())
        for k in ptx.kernels
    ]
    return ptx.compute_target, kernels


@dataclass(frozen=True)
class ImageKernels:
    """One image's kernels as discovered: by symbol; ``units`` (buildsys.unit_symbols.unit_tags)
    tells which unit of a device-linked module each internal symbol comes from."""

    module: str
    vendor: str
    target: str
    kernels: Sequence[ObjectKernel]
    units: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _NamedKernel:
    """A kernel of an image with its name by the kernel-name rule, its parameter types (None for
    C linkage) and, for an internal symbol a device link tagged, the unit that defines it."""

    kernel: ObjectKernel
    name: str
    types: tuple[str, ...] | None
    unit: str


def _named(
    image: ImageKernels, kernel: ObjectKernel, demangled: Mapping[str, Demangled]
) -> _NamedKernel:
    found = demangled[kernel.symbol]
    name, types = found.name, found.types
    if image.vendor == "amd":
        name = cuda_spelling(name)
        types = tuple(cuda_spelling(t) for t in types) if types is not None else None
    tag = unit_symbol(kernel.symbol)[1]
    unit = unit_of_tag(tag, image.units) if tag else ""
    if unit is None:
        raise BuildError(
            f"module {image.module} {image.target}: kernel symbol {kernel.symbol}: its device-link "
            f"tag {tag!r} names none of the module's units ({', '.join(sorted(set(image.units.values())))})"
        )
    return _NamedKernel(kernel, name, types, unit)


def _names_of_several_units(
    images: Sequence[tuple[ImageKernels, list[_NamedKernel]]],
) -> set[tuple[str, str]]:
    """(module, name) of each name that internal kernels of one module's units share, with each
    other or with an external kernel, in some image: those internal kernels are named
    ``name@unit`` in every image, so that a name means one kernel on every target."""
    shared: set[tuple[str, str]] = set()
    for image, kernels in images:
        units: dict[str, set[str]] = {}
        for named in kernels:
            units.setdefault(named.name, set()).add(named.unit)
        shared.update((image.module, name) for name, found in units.items() if len(found) > 1)
    return shared


@dataclass
class ModuleKernels:
    """A module's kernels by lookup name: the parameter layout, and per image target the symbol
    and resources."""

    params: dict[str, list[KernelParam]] = field(default_factory=dict)
    symbols: dict[str, dict[str, str]] = field(default_factory=dict)  # target -> name -> symbol
    resources: dict[str, dict[str, KernelResources]] = field(default_factory=dict)
    targets: dict[str, list[str]] = field(default_factory=dict)  # name -> targets that have it


def name_kernels(
    images: Sequence[ImageKernels], demangled: Mapping[str, Demangled], all_targets: Sequence[str]
) -> dict[str, ModuleKernels]:
    """Per module, its kernels named by the kernel-name rule, checked to agree across images: one
    symbol per name in an image, and one parameter layout per name in all images (a BuildError
    names the kernel and the two targets that disagree)."""
    modules: dict[str, ModuleKernels] = {}
    seen: dict[tuple[str, str], tuple[str, list[KernelParam]]] = {}
    named_images = [(i, [_named(i, k, demangled) for k in i.kernels]) for i in images]
    shared = _names_of_several_units(named_images)
    for image, named_kernels in named_images:
        module = modules.setdefault(image.module, ModuleKernels())
        symbols = module.symbols.setdefault(image.target, {})
        resources = module.resources.setdefault(image.target, {})
        for named in named_kernels:
            kernel, name, types = named.kernel, named.name, named.types
            if named.unit and (image.module, name) in shared:
                name = f"{name}@{named.unit}"
            if name in symbols:
                raise BuildError(
                    f"module {image.module} {image.target}: symbols {symbols[name]} and "
                    f"{kernel.symbol} are both kernel {name!r}"
                )
            if types is not None and len(types) != len(kernel.layout):
                raise BuildError(
                    f"module {image.module} {image.target}: kernel {name} has "
                    f"{len(kernel.layout)} parameters in the object, {len(types)} in its symbol"
                )
            params = [
                KernelParam(type=types[i] if types is not None else "", offset=offset, size=size)
                for i, (offset, size) in enumerate(kernel.layout)
            ]
            symbols[name] = kernel.symbol
            resources[name] = kernel.resources
            earlier = seen.get((image.module, name))
            if earlier is None:
                seen[(image.module, name)] = (image.target, params)
                module.params[name] = params
            elif not same_layout(earlier[1], params):
                raise BuildError(
                    f"module {image.module}: kernel {name} has parameters "
                    f"{describe(earlier[1])} on {earlier[0]} and {describe(params)} on "
                    f"{image.target}; one kernel name must mean one signature on every target"
                )
            module.targets.setdefault(name, []).append(image.target)
    for module in modules.values():
        module.params = dict(sorted(module.params.items()))
        order = {t: i for i, t in enumerate(all_targets)}
        for targets in module.targets.values():
            targets.sort(key=lambda t: (order.get(t, len(order)), t))
    return modules


def same_layout(a: Sequence[KernelParam], b: Sequence[KernelParam]) -> bool:
    """Offsets, sizes and types agree (types as CUDA spells them: cuda_spelling maps an AMD
    object's back first)."""
    if len(a) != len(b):
        return False
    return all(
        p["offset"] == q["offset"] and p["size"] == q["size"] and p["type"] == q["type"]
        for p, q in zip(a, b, strict=True)
    )


def describe(params: Sequence[KernelParam]) -> str:
    return "(" + ", ".join(f"{p['type'] or '?'} {p['size']}@{p['offset']}" for p in params) + ")"
