"""Demangling kernel symbols, and the kernel-name rule that makes their lookup names.

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

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .cache import BuildCache, key_of, stored_record
from .errors import BuildError, ToolchainError
from .hipify.tables import RUNTIME_BLOCKS
from .toolchain import Toolchain
from .unit_symbols import unit_symbol


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
    device link's renaming of internal symbols (buildsys.unit_symbols.unit_symbol) is undone
    first. With ``cache``, the two runs' output is kept under the symbols and the demangler (its
    command and the files it names), so a rebuild of the same objects starts no c++filt."""
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
    record = stored_record(text, ("full", "names"))
    if record is None:
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
