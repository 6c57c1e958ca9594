"""Kernels discovered from the compiled objects: their lookup names, symbols and parameter layouts.

What a module's kernels are is read off what the compiler made, never off the source text, so
kernels written through macros and templates are found like any other. Per object:

- AMD code objects: the AMDGPU metadata's ``amdhsa.kernels`` (``.name``, ``.args``: offset, size
  and value kind of each argument; the hidden ones the compiler adds are left out);
- cubins: the kernel symbols (functions marked as entries, local ones included) and their
  EIATTR_KPARAM_INFO records (ordinal, offset, size);
- PTX: the ``.entry`` directives (``.visible`` or not) and their ``.param`` lists.

Kernels with internal linkage (``static``, an unnamed namespace, a template instantiated with a
file-local argument) are kernels like any other on every vendor: the loader finds them by their
symbol (a cubin's local entry, a code object's symbol that clang makes global; docs/loader.md). A
device link renames them so that each unit keeps its own (:func:`unit_symbol`); when several units
of one module define internal kernels of one name, each is named after its unit
(``clear@dot.cu``), never one picked.

The kernel-name rule (docs/loader.md, "Kernel names"): a kernel's lookup name is its symbol
demangled, without the parameter list (and without the ``void`` that a function template's
demangled name starts with, and without ``(anonymous namespace)::``, which the source never
spells): ``swiglu<float>``, ``walk::walk_float<2>``, ``ns::plain``; a kernel with C linkage keeps
its symbol (``extern "C"``). In an AMD object's names, the type names the HIP
translation produced become the CUDA ones again (``__hip_bfloat16`` -> ``__nv_bfloat16``,
``HIP_vector_type<float, 2u>`` -> ``float2``), so a kernel has one name on every vendor and target.
The parameter types come from the same demangled symbol (C linkage: none, only sizes).

Demangling uses binutils' ``c++filt``: every machine that builds NVIDIA images has it (nvcc needs
the host gcc, and gcc needs binutils), and the provisioned AMD toolchain's root file system has it
too, where the host may not; CUDA's ``cu++filt`` is missing from some toolkits (13.0's here) and
``llvm-cxxfilt`` from NVIDIA-only machines. One demangler for both vendors keeps one spelling.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kernelpack.formats import read_code_object, read_cubin, read_ptx
from kernelpack.formats.index import KernelParam, KernelResources
from kernelpack.loader.images import KINDS_BY_NAME
from kernelpack.targets import written_kind

from .cache import BuildCache, key_of
from .errors import BuildError, ToolchainError
from .hipify.tables import RUNTIME_BLOCKS
from .modules import KernelModule
from .toolchain import Toolchain

# PTX has no resource figures before the driver compiles it: zeros, and the warp size of every
# NVIDIA GPU.
_PTX_RESOURCES = KernelResources(
    registers=0, sgpr=0, agpr=0, lds=0, scratch=0, spills=0, wavefront=32, max_workgroup=0
)
# How a device link renames a unit's internal-linkage symbols so that two units' symbols never clash:
# nvlink's input (nvcc -rdc) prefixes ``__nv_static_<n>_<unit id of n characters>_``, the id naming
# the unit's file (``_c8701816_4_a_cu_41113dc9`` for a.cu); clang's -fgpu-rdc appends
# ``.intern.<hash of the unit's -cuid>`` (llvm::MD5Hash: the digest's first 8 bytes, little-endian,
# in hex).
_NV_STATIC = re.compile(r"__nv_static_(\d+)_")
_CLANG_INTERN = re.compile(r"\.intern\.([0-9a-f]+)$")


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


def unit_symbol(symbol: str) -> tuple[str, str]:
    """A kernel symbol as its translation unit named it, and the tag a device link added to it
    to tell the units' internal symbols apart ("" when it has none)."""
    nv_static = _NV_STATIC.match(symbol)
    if nv_static is not None:
        start = nv_static.end()
        end = start + int(nv_static.group(1))
        if symbol[end : end + 1] == "_" and len(symbol) > end + 1:
            return symbol[end + 1 :], symbol[start:end]
    intern = _CLANG_INTERN.search(symbol)
    if intern is not None:
        return symbol[: intern.start()], intern.group(1)
    return symbol, ""


def unit_tags(module: KernelModule) -> dict[str, str]:
    """The tags (:func:`unit_symbol`) each vendor's device link gives a linked module's units,
    to the unit's file name: clang's hash of the unit's ``-cuid``, and the ``<length>_<file name,
    non-word characters as _>`` that nvcc puts in its unit id."""
    tags: dict[str, str] = {}
    if not module.linked:
        return tags
    for unit in module.sources:
        file = unit.rsplit("/", 1)[-1]
        digest = hashlib.md5(module.cuid(unit).encode(), usedforsecurity=False).digest()
        tags[f"{int.from_bytes(digest[:8], 'little'):x}"] = file
        identifier = re.sub(r"\W", "_", file)
        tags[f"{len(identifier)}_{identifier}"] = file
    return tags


def unit_of_tag(tag: str, tags: Mapping[str, str]) -> str | None:
    """The unit a device link's tag names (clang's: the whole tag; nvcc's id holds
    ``_<length>_<file>_``), or None."""
    if tag in tags:
        return tags[tag]
    found = {file for key, file in tags.items() if f"_{key}_" in tag}
    return found.pop() if len(found) == 1 else None


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


def demangle(
    symbols: Iterable[str], command: Sequence[str], cache: BuildCache | None = None
) -> dict[str, Demangled]:
    """Each symbol's name and parameter types (see the module's docstring), by one run of c++filt
    with and one without ``-p`` (``--no-params``, which also drops a template's return type); a
    device link's renaming of internal symbols (:func:`unit_symbol`) is undone first. With
    ``cache``, the two runs' output is kept under the symbols and the demangler (its command and
    the files it names), so a rebuild of the same objects starts no c++filt."""
    wanted = {s: unit_symbol(s)[0] for s in set(symbols)}
    mangled = sorted({base for base in wanted.values() if base.startswith("_Z")})
    bases = {base: Demangled(base, None) for base in wanted.values() if not base.startswith("_Z")}
    if mangled:
        full, names = _filtered(command, mangled, cache)
        for symbol, whole, name in zip(mangled, full, names, strict=True):
            bases[symbol] = split_demangled(symbol, whole, name)
    return {symbol: bases[base] for symbol, base in sorted(wanted.items())}


def _filtered(
    command: Sequence[str], mangled: list[str], cache: BuildCache | None
) -> tuple[list[str], list[str]]:
    """c++filt's lines for ``mangled``, with and without ``-p``: from the cache (namespace
    ``demangle``) when an earlier build asked the same demangler about the same symbols."""
    if cache is None:
        return _run_filter(command, mangled), _run_filter(command, mangled, "-p")
    files = [[part, _stat(part)] for part in command if os.path.isabs(part)]
    key = key_of({"command": list(command), "files": files, "symbols": mangled})
    stored = cache.get_text("demangle", key)
    if stored is not None:
        found = _demangled_record(stored, len(mangled))
        if found is not None:
            return found
    full, names = _run_filter(command, mangled), _run_filter(command, mangled, "-p")
    cache.put_text("demangle", key, json.dumps({"full": full, "names": names}))
    return full, names


def _stat(path: str) -> list[int] | None:
    """(size, mtime in ns) of a file the demangler's command names, None where there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return [found.st_size, found.st_mtime_ns]


def _demangled_record(text: str, count: int) -> tuple[list[str], list[str]] | None:
    """A stored record of ``count`` symbols, or None for anything but the shape _filtered writes
    (the cache folder is untrusted input: docs/security.md)."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not (isinstance(record, dict) and set(record) == {"full", "names"}):
        return None
    full, names = record["full"], record["names"]
    for lines in (full, names):
        if not (type(lines) is list and len(lines) == count):
            return None
        if not all(type(line) is str and "\n" not in line for line in lines):
            return None
    return full, names


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


# nvcc's namespace for a unit's internal-linkage entities (_INTERNAL_<hash>_<n>_<file>_<hash>),
# which a template argument naming a static function shows.
_NVCC_INTERNAL_NAMESPACE = re.compile(r"\b_INTERNAL_\w+::")


def as_source_spells(text: str) -> str:
    """A demangled name or type without what its source never spells: CCCL's versioned inline
    namespaces, the unnamed namespace (``(anonymous namespace)::k`` is ``k`` in its unit), nvcc's
    namespace of a unit's internal entities, and the signature c++filt adds to the address of a
    function of internal linkage that clang mangles (``&(f(int const&))`` is ``&f``, as nvcc's
    spelling of the same template argument reads)."""
    text = without_inline_namespaces(text).replace("(anonymous namespace)::", "")
    text = _NVCC_INTERNAL_NAMESPACE.sub("", text)
    return _without_function_signatures(text)


def _without_function_signatures(text: str) -> str:
    """``&(name(params))`` -> ``&name`` wherever it occurs (balanced brackets; else unchanged)."""
    out: list[str] = []
    at = 0
    while (start := text.find("&(", at)) >= 0:
        end = _address_of_function_end(text, start + 2)
        if end is None:
            out.append(text[at : start + 2])
            at = start + 2
            continue
        name_end = _top_level(text, start + 2, "(")
        out.append(text[at:start] + "&" + text[start + 2 : name_end])
        at = end
    return "".join(out) + text[at:]


def _top_level(text: str, start: int, wanted: str) -> int:
    """The index of the first ``wanted`` at template depth 0 from ``start`` (len(text) if none)."""
    depth = 0
    for index in range(start, len(text)):
        char = text[index]
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        elif char == wanted and depth == 0:
            return index
    return len(text)


def _address_of_function_end(text: str, start: int) -> int | None:
    """For ``&(`` ending just before ``start``: the index after its closing ``)`` when what it
    holds is ``name(params)``, else None."""
    open_paren = _top_level(text, start, "(")
    name = text[start:open_paren]
    if open_paren == len(text) or not re.fullmatch(r"[\w:]+(?:<.*>)?", name):
        return None
    depth = 0
    for index in range(open_paren, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return index + 2 if text[index + 1 : index + 2] == ")" else None
    return None


def split_demangled(symbol: str, whole: str, name: str) -> Demangled:
    """The name and parameter types of ``whole`` ("void k<float>(float const*, int)"), given the
    name without parameters and return type that ``c++filt -p`` printed ("k<float>"), both
    as the source spells them (:func:`as_source_spells`)."""
    if whole == symbol:  # c++filt could not demangle it: keep the symbol, types unknown
        return Demangled(symbol, None)
    whole, name = as_source_spells(whole), as_source_spells(name)
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


@functools.cache  # every AMD target's objects spell the same names and types
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
    """One image's kernels as discovered: by symbol; ``units`` (:func:`unit_tags`) tells which unit
    of a device-linked module each internal symbol comes from."""

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


# The namespaces of the vendor libraries whose host calls bring kernels of their own: a thrust
# algorithm is CUB's kernels on NVIDIA and rocPRIM's on AMD (candle's moe/). Such a kernel is the
# library's way of doing the call on one vendor, not a kernel of the project: it is listed like any
# other, and must be on every target of the vendors whose objects have it, not of the others.
VENDOR_LIBRARY_NAMESPACES = ("cub::", "thrust::", "rocprim::", "hipcub::")


def _vendor(target: str) -> str:
    return "amd" if written_kind(target) == "amd" else "nvidia"


def absent_targets(kernel: str, present: Collection[str], targets: Sequence[str]) -> list[str]:
    """The targets that should have ``kernel`` and lack it: all of them, or for a vendor
    library's kernel (VENDOR_LIBRARY_NAMESPACES) the targets of the vendors that have it."""
    if kernel.startswith(VENDOR_LIBRARY_NAMESPACES):
        vendors = {_vendor(t) for t in present}
        targets = [t for t in targets if _vendor(t) in vendors]
    return [t for t in targets if t not in present]


def missing_kernels(
    modules: Mapping[str, ModuleKernels], targets: Sequence[str]
) -> dict[str, dict[str, list[str]]]:
    """Per module and kernel, the targets whose object lacks it (only kernels that some lack;
    :func:`absent_targets`)."""
    missing: dict[str, dict[str, list[str]]] = {}
    for name, module in sorted(modules.items()):
        for kernel, present in sorted(module.targets.items()):
            absent = absent_targets(kernel, present, targets)
            if absent:
                missing.setdefault(name, {})[kernel] = absent
    return missing


def allowed_on(module: str, kernel: str, target: str, allowed: Mapping[str, Sequence[str]]) -> bool:
    """Whether ``allow-missing-kernels`` lets ``kernel`` of ``module`` be missing on ``target``.

    A key is ``MODULE`` (any target) or ``MODULE@T1,T2`` (those targets only); the module, each
    target and each kernel entry may be a shell-style pattern (fnmatch: ``*_f8_e4m3``,
    ``*@sm_80,compute_80``), matched case-sensitively."""
    for key, kernels in allowed.items():
        module_pattern, at, targets = key.partition("@")
        if not fnmatch.fnmatchcase(module, module_pattern):
            continue
        if at and not any(fnmatch.fnmatchcase(target, t.strip()) for t in targets.split(",")):
            continue
        if any(fnmatch.fnmatchcase(kernel, pattern) for pattern in kernels):
            return True
    return False


def allowance_block(refused: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """The ``[tool.kernelpack]`` table that allows exactly ``refused`` (module -> kernel -> the
    targets lacking it), ready to paste into pyproject.toml: one key per module and set of
    targets, ``"module@t1,t2" = [kernels]``."""
    keys: dict[str, list[str]] = {}
    for module, kernels in sorted(refused.items()):
        for kernel, targets in sorted(kernels.items()):
            keys.setdefault(f"{module}@{','.join(targets)}", []).append(kernel)
    lines = ["[tool.kernelpack.allow-missing-kernels]"]
    for key, names in keys.items():
        quoted = [json.dumps(kernel) for kernel in names]
        if sum(len(q) + 2 for q in quoted) + len(key) < 90:
            lines.append(f"{json.dumps(key)} = [{', '.join(quoted)}]")
        else:
            lines += [f"{json.dumps(key)} = [", *(f"  {q}," for q in quoted), "]"]
    return "\n".join(lines)


def check_missing(
    missing: Mapping[str, Mapping[str, Sequence[str]]],
    allowed: Mapping[str, Sequence[str]],
    where: str,
) -> None:
    """A BuildError naming the kernels missing from some targets that the project's
    ``allow-missing-kernels`` does not allow there (:func:`allowed_on`): one line, then the
    ``[tool.kernelpack]`` block that would allow them, ready to paste."""
    refused: dict[str, dict[str, list[str]]] = {}
    for module, kernels in missing.items():
        for kernel, targets in kernels.items():
            lacking = [t for t in targets if not allowed_on(module, kernel, t, allowed)]
            if lacking:
                refused.setdefault(module, {})[kernel] = lacking
    shown_all = [
        f"{module} {kernel} (not on {', '.join(targets)})"
        for module, kernels in refused.items()
        for kernel, targets in kernels.items()
    ]
    if shown_all:
        shown = "; ".join(shown_all[:6]) + (
            f"; and {len(shown_all) - 6} more" if len(shown_all) > 6 else ""
        )
        raise BuildError(
            f"{len(shown_all)} kernel(s) are missing from some targets (a preprocessor guard, a "
            f"failed instantiation?): {shown}. Make them build everywhere, or allow the difference "
            f'in {where} (patterns such as "*_f8_e4m3" and keys "module@target,..." '
            "allow whole families; merge it with an allow-missing-kernels you have); this allows "
            f"exactly these:\n{allowance_block(refused)}"
        )
