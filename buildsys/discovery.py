"""Kernels discovered from the compiled objects: their lookup names, symbols and parameter layouts.

What a module's kernels are is read off what the compiler made, never off the source text, so
kernels written through macros and templates are found like any other. Per object:

- AMD code objects: the AMDGPU metadata's ``amdhsa.kernels`` (``.name``, ``.args``: offset, size
  and value kind of each argument; the hidden ones the compiler adds are left out);
- cubins: the kernel symbols (STB_GLOBAL functions marked as entries) and their EIATTR_KPARAM_INFO
  records (ordinal, offset, size);
- PTX: the ``.visible .entry`` directives and their ``.param`` lists.

Kernels with internal linkage (``static``, an unnamed namespace) are private to their translation
unit: nvcc does not export them, so they are left out on every vendor alike.

The kernel-name rule (docs/loader.md, "Kernel names"): a kernel's lookup name is its symbol
demangled, without the parameter list (and without the ``void`` that a function template's
demangled name starts with): ``swiglu<float>``, ``walk::walk_float<2>``, ``ns::plain``; a kernel
with C linkage keeps its symbol (``extern "C"``). In an AMD object's names, the type names the HIP
translation produced become the CUDA ones again (``__hip_bfloat16`` -> ``__nv_bfloat16``,
``HIP_vector_type<float, 2u>`` -> ``float2``), so a kernel has one name on every vendor and target.
The parameter types come from the same demangled symbol (C linkage: none, only sizes).

Demangling uses binutils' ``c++filt``: every machine that builds NVIDIA images has it (nvcc needs
the host gcc, and gcc needs binutils), and the provisioned AMD toolchain's root file system has it
too, where the host may not; CUDA's ``cu++filt`` is missing from some toolkits (13.0's here) and
``llvm-cxxfilt`` from NVIDIA-only machines. One demangler for both vendors keeps one spelling.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kernelpack.formats import read_code_object, read_cubin, read_ptx
from kernelpack.images import KINDS_BY_NAME
from kernelpack.index import KernelParam, KernelResources

from .errors import BuildError, ToolchainError
from .hipify.tables import RUNTIME_BLOCKS
from .toolchain import Toolchain

# PTX has no resource figures before the driver compiles it: zeros, and the warp size of every
# NVIDIA GPU.
_PTX_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=0
)
# Markers of internal linkage in an Itanium-mangled name: _ZL (a static function) and the unnamed
# namespace's _GLOBAL__N (clang: _GLOBAL__N_1, nvcc: _GLOBAL__N__<hash>).
_INTERNAL = re.compile(r"^_ZL|_GLOBAL__N")


@dataclass(frozen=True)
class ObjectKernel:
    """One kernel as an object defines it: its symbol, each parameter's (offset, size) in bytes,
    and its resources."""

    symbol: str
    layout: tuple[tuple[int, int], ...]
    resources: KernelResources


def object_kernels(kind: str, data: bytes, name: str) -> tuple[str, list[ObjectKernel]]:
    """An object's target, as the matrix names it, and its externally visible kernels."""
    if KINDS_BY_NAME[kind].vendor == "amd":
        code_object = read_code_object(data, name)
        kernels = [
            ObjectKernel(k.name, tuple((p.offset, p.size) for p in k.params), k.resources())
            for k in code_object.kernels
            if not _INTERNAL.search(k.name)
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
        if k.visible
    ]
    return ptx.compute_target, kernels


# ---------------------------------------------------------------------------------------------
# Demangling and the kernel-name rule


@dataclass(frozen=True)
class Demangled:
    """A symbol's lookup name and, for a C++ symbol, its parameter types as the demangler spells
    them ("float const*", "long long"); None for a symbol with C linkage."""

    name: str
    types: tuple[str, ...] | None


def find_demangler(toolchains: Iterable[Toolchain] = ()) -> list[str]:
    """The c++filt command: the host's, else the one in a provisioned AMD toolchain's root file
    system; none is a ToolchainError saying what to install."""
    host = shutil.which("c++filt")
    if host is not None:
        return [host]
    for toolchain in toolchains:
        if toolchain.rootfs is not None and (toolchain.rootfs / "usr/bin/c++filt").exists():
            return toolchain.command(["/usr/bin/c++filt"])
    raise ToolchainError(
        "no c++filt found to demangle the kernel names; install binutils (it comes with gcc)"
    )


def _run_filter(command: Sequence[str], symbols: Sequence[str], *options: str) -> list[str]:
    text = "".join(f"{s}\n" for s in symbols)
    try:
        result = subprocess.run(
            [*command, *options], input=text, capture_output=True, text=True, check=False
        )
    except OSError as error:
        raise ToolchainError(f"{command[0]}: cannot run: {error.strerror}") from None
    lines = result.stdout.splitlines()
    if result.returncode != 0 or len(lines) != len(symbols):
        raise ToolchainError(
            f"{' '.join(command)} {' '.join(options)} failed (exit status {result.returncode}): "
            f"{result.stderr.strip()[:200]}"
        )
    return lines


def demangle(symbols: Iterable[str], command: Sequence[str]) -> dict[str, Demangled]:
    """Each symbol's name and parameter types (see the module's docstring), by one run of c++filt
    with and one without ``-p`` (``--no-params``, which also drops a template's return type)."""
    wanted = sorted(set(symbols))
    mangled = [s for s in wanted if s.startswith("_Z")]
    found = {s: Demangled(s, None) for s in wanted if not s.startswith("_Z")}
    if not mangled:
        return found
    full = _run_filter(command, mangled)
    names = _run_filter(command, mangled, "-p")
    for symbol, whole, name in zip(mangled, full, names, strict=True):
        found[symbol] = split_demangled(symbol, whole, name)
    return found


# The versioned inline namespaces of NVIDIA's CCCL (CUB, Thrust, libcu++), which name the CUDA
# version and the target architecture (cub::CUB_300001_SM_900::, thrust::THRUST_300001_SM_900_NS::,
# cuda::std::__4::): the source never spells them, and with them a library kernel (a thrust call's
# cub::DeviceScanKernel<...>) would be another kernel on each target.
_CCCL_INLINE_NAMESPACES = re.compile(
    r"\b(?:CUB_\d+_SM_\d+(?:_\d+)*|THRUST_\d+_SM_\d+(?:_\d+)*_NS|(?<=cuda::std::)__\d+)::"
)


def without_inline_namespaces(text: str) -> str:
    """A demangled name or type without CCCL's versioned inline namespaces."""
    return _CCCL_INLINE_NAMESPACES.sub("", text)


def split_demangled(symbol: str, whole: str, name: str) -> Demangled:
    """The name and parameter types of ``whole`` ("void k<float>(float const*, int)"), given the
    name without parameters and return type that ``c++filt -p`` printed ("k<float>"), both
    without CCCL's versioned inline namespaces."""
    if whole == symbol:  # c++filt could not demangle it: keep the symbol, types unknown
        return Demangled(symbol, None)
    whole, name = without_inline_namespaces(whole), without_inline_namespaces(name)
    rest = whole.removeprefix("void ") if not whole.startswith(name) else whole
    if not (rest.startswith(name + "(") and rest.endswith(")")):
        raise BuildError(
            f"kernel symbol {symbol}: demangled as {whole!r}, which is not "
            f"{name!r} followed by a parameter list"
        )
    inner = rest[len(name) + 1 : -1]
    types = tuple(split_top_level(inner)) if inner and inner != "void" else ()
    return Demangled(name, types)


def split_top_level(text: str) -> list[str]:
    """``text`` split at the commas outside brackets: "a<b, c>, d (*)(e, f)" -> two pieces."""
    pieces: list[str] = []
    depth = 0
    start = 0
    for index, char in enumerate(text):
        if char in "(<[":
            depth += 1
        elif char in ")>]":
            depth -= 1
        elif char == "," and depth == 0:
            pieces.append(text[start:index].strip())
            start = index + 1
    pieces.append(text[start:].strip())
    return pieces


def _hip_to_cuda_types() -> dict[str, str]:
    """HIP type name -> the CUDA name it was translated from, from the translator's own table
    (the first CUDA name of each HIP one: "__nv_bfloat16", not its typedef "nv_bfloat16")."""
    back: dict[str, str] = {}
    for line in RUNTIME_BLOCKS["device_type"].split("\n"):
        words = line.split()
        if len(words) == 2:
            back.setdefault(words[1], words[0])
    return back


HIP_TO_CUDA_TYPES: dict[str, str] = _hip_to_cuda_types()
_HIP_IDENTIFIER = re.compile(r"\b(?:" + "|".join(map(re.escape, HIP_TO_CUDA_TYPES)) + r")\b")
# HIP's vector types are one template (hip/amd_detail/amd_hip_vector_types.h); CUDA's are structs
# named after the element: HIP_vector_type<unsigned char, 4u> is uchar4.
_HIP_VECTOR = re.compile(r"\bHIP_vector_type<([a-z ]+), (\d)u>")
_VECTOR_ELEMENTS = {
    "char": "char",
    "signed char": "char",
    "unsigned char": "uchar",
    "short": "short",
    "unsigned short": "ushort",
    "int": "int",
    "unsigned int": "uint",
    "long": "long",
    "unsigned long": "ulong",
    "long long": "longlong",
    "unsigned long long": "ulonglong",
    "float": "float",
    "double": "double",
}


def cuda_spelling(text: str) -> str:
    """A name or type demangled from an AMD object, with the HIP type names as CUDA spells them."""
    text = _HIP_IDENTIFIER.sub(lambda m: HIP_TO_CUDA_TYPES[m.group(0)], text)

    def vector(match: re.Match[str]) -> str:
        element = _VECTOR_ELEMENTS.get(match.group(1))
        return f"{element}{match.group(2)}" if element else match.group(0)

    return _HIP_VECTOR.sub(vector, text)


# ---------------------------------------------------------------------------------------------
# A module's kernels over all its images


@dataclass(frozen=True)
class ImageKernels:
    """One image's kernels as discovered: by symbol."""

    module: str
    vendor: str
    target: str
    kernels: Sequence[ObjectKernel]


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
    for image in images:
        module = modules.setdefault(image.module, ModuleKernels())
        symbols = module.symbols.setdefault(image.target, {})
        resources = module.resources.setdefault(image.target, {})
        for kernel in image.kernels:
            found = demangled[kernel.symbol]
            name, types = found.name, found.types
            if image.vendor == "amd":
                name = cuda_spelling(name)
                types = tuple(cuda_spelling(t) for t in types) if types is not None else None
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


def missing_kernels(
    modules: Mapping[str, ModuleKernels], targets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """Per module and kernel, the targets whose object lacks it (only kernels that some lack)."""
    missing: dict[str, dict[str, list[str]]] = {}
    for name, module in sorted(modules.items()):
        for kernel, present in sorted(module.targets.items()):
            absent = [t for t in targets if t not in present]
            if absent:
                missing.setdefault(name, {})[kernel] = absent
    return missing


def check_missing(
    missing: Mapping[str, Mapping[str, Sequence[str]]],
    allowed: Mapping[str, Sequence[str]],
    where: str,
) -> None:
    """A BuildError, one line, naming the kernels missing from some targets that the project's
    ``allow-missing-kernels`` does not list."""
    refused = [
        f"{module} {kernel} (not on {', '.join(targets)})"
        for module, kernels in missing.items()
        for kernel, targets in kernels.items()
        if kernel not in allowed.get(module, ())
    ]
    if refused:
        shown = "; ".join(refused[:6]) + (
            f"; and {len(refused) - 6} more" if len(refused) > 6 else ""
        )
        raise BuildError(
            f"{len(refused)} kernel(s) are missing from some targets (a preprocessor guard, a "
            f"failed instantiation?): {shown}. Make them build everywhere, or allow the difference "
            f'in {where}: allow-missing-kernels = {{module = ["kernel", ...]}}'
        )
