"""NVIDIA cubins and PTX: the SM target and each kernel's registers, shared and local memory.

A cubin is an ELF64 file (machine EM_CUDA) whose e_flags (and, for arch-specific targets with
nvcc 13, the .nv.compat section) name the SM; .nv.info records give per-kernel figures. PTX is
text: its .version, .target and .entry directives. Anything else ends in one
:class:`~kernelpack.errors.FormatError`.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from typing import Any

from .._jsonfields import json_fields
from ..errors import FormatError
from .elf import (
    SHT_NOBITS,
    SHT_SYMTAB,
    STB_GLOBAL,
    STB_LOCAL,
    STB_WEAK,
    STT_FUNC,
    SYMBOL_SIZE,
    Buffer,
    Elf,
    Section,
)
from .index import KernelResources
from .params import ObjectParam

EM_CUDA = 190
# Attributes of .nv.info / .nv.compat records (format byte, attribute byte, 16-bit value or size).
EIATTR_MAX_THREADS = 0x05  # per kernel: __launch_bounds__ / .maxntid x, y, z
EIATTR_REQNTID = 0x10  # per kernel: .reqntid x, y, z
# per kernel, one per parameter: u32 index (0), u16 ordinal, u16 offset, u32 flags whose bits 18-31
# are the size in bytes (bits 12-16 the constant bank, 0x1f: the parameter bank)
EIATTR_KPARAM_INFO = 0x17
_KPARAM_SIZE_SHIFT = 18
_KPARAM_RECORD_SIZE = 16  # a record's 4-byte header and 12 bytes: what a reported parameter costs
EIATTR_MIN_STACK_SIZE = 0x12  # per symbol: local memory bytes per thread, callees included
EIATTR_REGCOUNT = 0x2F  # per symbol: registers per thread
_EIFMT_SIZED = 4  # EIFMT_SVAL: a 16-bit size, then that many bytes
_EIFMT_INLINE = (1, 2, 3)  # EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL: the value in the 16-bit field
# Seen with nvcc 13.0 (ELF ABI version 8): e_flags are the same for sm_90 and sm_90a (and for
# sm_100/sm_100a, sm_120/sm_120a); the arch-specific target is told by .nv.compat attribute 0x09
# set to 1 (0 for sm_90, sm_100, sm_100f, sm_120, sm_120f). sm_80 cubins have no .nv.compat.
NV_COMPAT_ARCH_SPECIFIC = 0x09
# ELF ABI version 7 (CUDA 12 and older), from LLVM's ELF.h: SM in the low byte, 'a' at 0x800.
_V7_ARCH_SPECIFIC_FLAG = 0x800
# st_other of a kernel's symbol (seen: set for kernels, not for device functions).
_STO_CUDA_ENTRY = 0x10
CUDA_MAX_BLOCK = 1024  # the block size limit of every SM since sm_20


@dataclass(frozen=True)
class CudaKernel:
    name: str
    registers: int  # per thread (EIATTR_REGCOUNT)
    # static shared bytes: the size of .nv.shared.<kernel>, which on sm_90 (nvcc 13.0) is 1 KiB
    # more than ptxas -v reports (2048 for a 1024-byte array; 1024 on sm_80)
    shared: int
    local: int  # local (stack) bytes per thread (EIATTR_MIN_STACK_SIZE)
    max_threads: int  # __launch_bounds__ / reqntid, else CUDA_MAX_BLOCK
    params: tuple[ObjectParam, ...] = ()  # by ordinal (EIATTR_KPARAM_INFO); pointer unknown

    def resources(self) -> KernelResources:
        """Cubins record no spill counts (ptxas prints them only), so spills is 0."""
        return KernelResources(
            registers=self.registers,
            sgpr=0,
            agpr=0,
            lds=self.shared,
            scratch=self.local,
            spills=0,
            wavefront=32,
            max_workgroup=self.max_threads,
        )

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


@dataclass(frozen=True)
class Cubin:
    sm: int  # 90 for sm_90 and sm_90a
    arch_specific: bool
    elf_abi_version: int
    kernels: tuple[CudaKernel, ...]

    @property
    def target(self) -> str:
        return f"sm_{self.sm}{'a' if self.arch_specific else ''}"

    def resources(self) -> dict[str, KernelResources]:
        """Per kernel name, the figures the index records (see kernelpack.formats.index)."""
        return {kernel.name: kernel.resources() for kernel in self.kernels}

    def to_json(self) -> dict[str, Any]:
        return {"format": "cubin", "target": self.target, **json_fields(self)}


def read_cubin(data: Buffer, path: str) -> Cubin:
    """A cubin's SM (e_flags, and .nv.compat for 'a' targets) and its kernels' resources.

    The kernels are its entry functions, what a loader looks up by name: global and weak symbols,
    and local ones, the kernels of internal linkage (a ``static`` kernel, one in an anonymous
    namespace, a template instantiated with a file-local argument), which nvcc binds locally and
    cuModuleGetFunction finds all the same (docs/loader.md, "Kernel names").

    Symbols may repeat a name and per-kernel sections may share their bytes, so each kernel's
    name and parameters are charged to the file's names budget as they are reported
    (:meth:`~kernelpack.formats.elf.Elf.charge_names`): 8,192 kernels of one 256 KiB name are refused,
    not turned into 2 GiB of report.
    """
    elf = Elf(data, path, machine=EM_CUDA, what="an NVIDIA cubin")
    if elf.abi_version == 8:
        sm = (elf.flags >> 8) & 0xFF
        arch_specific = _nv_compat_arch_specific(elf)
    elif elf.abi_version == 7:
        sm = elf.flags & 0xFF
        arch_specific = bool(elf.flags & _V7_ARCH_SPECIFIC_FLAG)
    else:
        raise FormatError(path, 8, f"CUDA ELF ABI version 7 or 8, not {elf.abi_version}")
    if sm < 10:
        raise FormatError(path, 48, f"an SM number in e_flags, not {sm}")
    symtab = next((s for s in elf.sections if s.type == SHT_SYMTAB), None)
    if symtab is None:
        raise FormatError(path, 0, "a symbol table (.symtab) naming the kernels")
    symbols = elf.symbols(symtab)
    per_symbol = _per_symbol_attributes(elf, len(symbols))
    kernels = []
    # per name: symbols may repeat one, its .nv.info.<name> records are read once, and once per
    # place in the file (the sections of several names may be headers over the same bytes)
    info_of: dict[str, tuple[int, tuple[ObjectParam, ...]]] = {}
    info_at: dict[tuple[int, int], tuple[int, tuple[ObjectParam, ...]]] = {}
    # Weak: nvlink makes a template's instances weak in a device-linked cubin (each unit may
    # have one); local ones are static kernels, private to their unit.
    for symbol in symbols:
        if not (
            symbol.type == STT_FUNC
            and symbol.bind in (STB_GLOBAL, STB_WEAK, STB_LOCAL)
            and symbol.other & _STO_CUDA_ENTRY
        ):
            continue
        attributes = per_symbol.get(symbol.index, {})
        shared = elf.section(f".nv.shared.{symbol.name}")
        if symbol.name not in info_of:
            info_of[symbol.name] = _kernel_info(elf, symbol.name, info_at)
        max_threads, params = info_of[symbol.name]
        reported = len(symbol.name) + _KPARAM_RECORD_SIZE * len(params)
        elf.charge_names(reported, symtab.offset + symbol.index * SYMBOL_SIZE)
        kernels.append(
            CudaKernel(
                name=symbol.name,
                registers=attributes.get(EIATTR_REGCOUNT, 0),
                shared=shared.size if shared else 0,
                local=attributes.get(EIATTR_MIN_STACK_SIZE, 0),
                max_threads=max_threads,
                params=params,
            )
        )
    return Cubin(sm, arch_specific, elf.abi_version, tuple(kernels))


def _records(elf: Elf, section: Section) -> list[tuple[int, int, bytes | int, int]]:
    """(format, attribute, value, file offset) of each record of an .nv.info-style section."""
    records: list[tuple[int, int, bytes | int, int]] = []
    if section.type == SHT_NOBITS:  # its offset and size were never checked against the file
        raise elf.fail(section.header_offset, f"records in {section.name}, not SHT_NOBITS")
    elf.charge_region(section, "attribute section")
    at, end = section.offset, section.offset + section.size
    while at < end:
        if end - at < 4:
            raise elf.fail(at, f"a 4-byte attribute record in {section.name}")
        fmt, attribute, word = struct.unpack_from("<BBH", elf.data, at)
        if fmt == _EIFMT_SIZED:
            if word > end - at - 4:
                raise elf.fail(at + 2, f"an attribute of {word} bytes inside {section.name}")
            records.append((fmt, attribute, elf.take(at + 4, word), at))
            at += 4 + word
        elif fmt in _EIFMT_INLINE:
            records.append((fmt, attribute, word, at))
            at += 4
        else:
            raise elf.fail(at, f"an attribute format 1 to 4 in {section.name}, not {fmt}")
    return records


def _nv_compat_arch_specific(elf: Elf) -> bool:
    compat = elf.section(".nv.compat")
    if compat is None:
        return False
    return any(
        attribute == NV_COMPAT_ARCH_SPECIFIC and fmt in _EIFMT_INLINE and value == 1
        for fmt, attribute, value, _ in _records(elf, compat)
    )


def _per_symbol_attributes(elf: Elf, symbol_count: int) -> dict[int, dict[int, int]]:
    """Symbol index -> {attribute: value} from the module-wide .nv.info section."""
    info = elf.section(".nv.info")
    result: dict[int, dict[int, int]] = {}
    if info is None:
        return result
    for fmt, attribute, value, at in _records(elf, info):
        if attribute not in (EIATTR_REGCOUNT, EIATTR_MIN_STACK_SIZE):
            continue
        if fmt != _EIFMT_SIZED or not isinstance(value, bytes) or len(value) != 8:
            raise elf.fail(at, f"an 8-byte symbol attribute 0x{attribute:02x} in .nv.info")
        index, number = struct.unpack("<II", value)
        if index >= symbol_count:
            raise elf.fail(at + 4, f"a symbol index below {symbol_count}, not {index}")
        result.setdefault(index, {})[attribute] = number
    return result


def _kernel_info(
    elf: Elf, kernel: str, known: dict[tuple[int, int], tuple[int, tuple[ObjectParam, ...]]]
) -> tuple[int, tuple[ObjectParam, ...]]:
    """A kernel's block size limit and parameters, from its own .nv.info.<kernel> section
    (``known``: what was found by the place of the sections read before)."""
    info = elf.section(f".nv.info.{kernel}")
    if info is None:
        return CUDA_MAX_BLOCK, ()
    place = (info.offset, info.size)
    if place not in known:
        known[place] = _kernel_records(elf, info)
    return known[place]


def _kernel_records(elf: Elf, info: Section) -> tuple[int, tuple[ObjectParam, ...]]:
    """The block size limit and parameters that one .nv.info.<kernel> section records."""
    threads: int | None = None
    params: dict[int, ObjectParam] = {}
    for fmt, attribute, value, at in _records(elf, info):
        if attribute in (EIATTR_MAX_THREADS, EIATTR_REQNTID) and threads is None:
            if fmt != _EIFMT_SIZED or not isinstance(value, bytes) or len(value) != 12:
                raise elf.fail(at, f"three block dimensions in attribute 0x{attribute:02x}")
            x, y, z = struct.unpack("<III", value)
            threads = x * y * z
        elif attribute == EIATTR_KPARAM_INFO:
            if fmt != _EIFMT_SIZED or not isinstance(value, bytes) or len(value) != 12:
                raise elf.fail(at, f"a 12-byte parameter record (attribute 0x{attribute:02x})")
            _, ordinal, offset, flags = struct.unpack("<IHHI", value)
            if ordinal in params:
                raise elf.fail(at + 8, f"each parameter ordinal once ({ordinal} repeats)")
            size = flags >> _KPARAM_SIZE_SHIFT
            params[ordinal] = ObjectParam(ordinal, offset, size, None)
    ordered = tuple(params[ordinal] for ordinal in sorted(params))
    return (CUDA_MAX_BLOCK if threads is None else threads), ordered


_PTX_VERSION = re.compile(r"^[ \t]*\.version[ \t]+(\d+\.\d+)[ \t]*$", re.M)
_PTX_TARGET = re.compile(r"^[ \t]*\.target[ \t]+(\w+)", re.M)
_PTX_ADDRESS_SIZE = re.compile(r"^[ \t]*\.address_size[ \t]+(\d+)", re.M)
_PTX_ENTRY = re.compile(r"\.entry[ \t\r\n]+([A-Za-z_$%][\w$]*)")
# A kernel's whole directive: linkage, name and parameter list (PTX ISA, "Kernel Function
# Parameters"): ".visible .entry name(.param .u64 p0, .param .align 8 .b8 p1[16])". The linkage
# and .entry directives are found one by one, each with the blank after it, and a linkage applies
# when nothing else stands between it and the .entry: one regex of "(linkage blank)* .entry"
# would try the whole run of linkage directives again from each of their dots (quadratic on
# ".visible .visible ...", 40,000 of them took more than 15 s).
_PTX_LINKAGE_OR_ENTRY = re.compile(r"\.(visible|weak|extern|entry)[ \t\r\n]+")
_PTX_KERNEL_REST = re.compile(r"([A-Za-z_$%][\w$]*)[ \t\r\n]*(?:\(([^()]*)\))?")
_PTX_PARAM = re.compile(
    r"\.param[ \t\r\n]+((?:\.[a-z][a-z0-9]*(?:[ \t\r\n]+\d+)?[ \t\r\n]+)*)[A-Za-z_$%][\w$]*"
    r"(?:[ \t\r\n]*\[(\d+)\])?$"
)
# One word of a parameter's declaration: ".u32", ".ptr", ".align 8".
_PTX_PARAM_WORD = re.compile(r"\.([a-z][a-z0-9]*)(?:[ \t\r\n]+(\d+))?")
_PTX_TYPE_SIZE = re.compile(r"\.[busf](8|16|32|64)$")
# An unclosed /* runs to the end of the text: one match, where requiring */ would rescan the rest
# of the text from every /* (quadratic on a file of "/*/*/*...").
_PTX_COMMENT = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)", re.S)
_PTX_SM = re.compile(r"sm_(\d+)[af]?")
# The numbers of a PTX directive (.address_size, .align, an array's count) are below 2^32: one
# of more digits is refused before int() sees it (which raises ValueError past 4,300 digits).
_PTX_NUMBER_LIMIT = 1 << 32
_PTX_NUMBER_DIGITS = len(str(_PTX_NUMBER_LIMIT))


@dataclass(frozen=True)
class Ptx:
    version: str  # the PTX ISA version, "9.0"
    target: str  # as .target names it: "sm_80", "sm_90a"
    address_size: int  # 64 or 32 (32 when the directive is absent)
    entries: tuple[str, ...]
    kernels: tuple[PtxKernel, ...] = ()

    @property
    def compute_target(self) -> str:
        """The virtual architecture the PTX is for, as the index names it: "compute_80"."""
        return "compute_" + self.target.removeprefix("sm_")

    def to_json(self) -> dict[str, Any]:
        return {"format": "ptx", **json_fields(self)}


@dataclass(frozen=True)
class PtxKernel:
    """One ``.entry``: its name, whether other modules may see it (``.visible``; the loader finds
    the others too, a ``static`` kernel's, after the driver's JIT) and its parameters, laid out as the PTX ISA places them (each at the next
    multiple of its alignment)."""

    name: str
    visible: bool
    params: tuple[ObjectParam, ...]

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


def read_ptx(data: Buffer, path: str) -> Ptx:
    """PTX text: its ISA version, target and kernel entry names."""
    body = bytes(data).rstrip(b"\0")  # PTX taken from a fat binary ends in NULs
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FormatError(path, error.start, "PTX text in UTF-8") from None
    code = _PTX_COMMENT.sub(" ", text)
    version = _PTX_VERSION.search(code)
    target = _PTX_TARGET.search(code)
    if version is None or target is None:
        raise FormatError(path, 0, "PTX text with .version and .target directives")
    if _PTX_SM.fullmatch(target.group(1)) is None:
        raise FormatError(path, 0, f"a PTX .target sm_XX, not {target.group(1)}")
    address = _PTX_ADDRESS_SIZE.search(code)
    address_size = 32
    if address is not None:
        address_size = _ptx_number(address.group(1), ".address_size", path, address.start(1))
    if address_size not in (32, 64):
        raise FormatError(path, 0, f"a PTX .address_size of 32 or 64, not {address_size}")
    entries = tuple(match.group(1) for match in _PTX_ENTRY.finditer(code))
    return Ptx(version.group(1), target.group(1), address_size, entries, _ptx_kernels(code, path))


def _ptx_kernels(code: str, path: str) -> tuple[PtxKernel, ...]:
    """Each ``.entry`` with the linkage directives right before it, in one pass over the text."""
    kernels = []
    linkage: set[str] = set()
    linkage_end = skip_to = 0
    for match in _PTX_LINKAGE_OR_ENTRY.finditer(code):
        if match.start() < skip_to:  # inside the last kernel's parameter list
            continue
        if match.start() != linkage_end:  # something else came after the last linkage
            linkage = set()
        if match.group(1) != "entry":
            linkage.add(match.group(1))
            linkage_end = match.end()
            continue
        rest = _PTX_KERNEL_REST.match(code, match.end())
        linkage_end = -1
        if rest is None:  # ".entry" and no name: not a kernel (nor in .entries)
            linkage = set()
            continue
        params = _ptx_params(rest.group(2) or "", path, match.start())
        kernels.append(PtxKernel(rest.group(1), "visible" in linkage, params))
        linkage, skip_to = set(), rest.end()
    return tuple(kernels)


def _ptx_number(digits: str, what: str, path: str, at: int) -> int:
    """A directive's decimal number, below 2^32."""
    if len(digits) > _PTX_NUMBER_DIGITS or int(digits) >= _PTX_NUMBER_LIMIT:
        raise FormatError(path, at, f"a PTX {what} below 2^32, not {_shown(digits)}")
    return int(digits)


def _shown(text: str) -> str:
    """``text`` quoted for a message, its middle left out past 60 characters."""
    if len(text) <= 60:
        return repr(text)
    return f"{text[:28]!r}...{text[-28:]!r} ({len(text)} characters)"


def _ptx_params(text: str, path: str, at: int) -> tuple[ObjectParam, ...]:
    """The parameters of one .entry: ``.param [.align N] .type [.ptr ...] name[[count]]``."""
    params: list[ObjectParam] = []
    offset = 0
    for ordinal, piece in enumerate(p.strip() for p in text.split(",") if p.strip()):
        match = _PTX_PARAM.match(piece)
        words = list(_PTX_PARAM_WORD.finditer(match.group(1))) if match else []
        types = [found for w in words if (found := _PTX_TYPE_SIZE.fullmatch("." + w.group(1)))]
        sizes = [int(found.group(1)) // 8 for found in types]
        if match is None or len(sizes) != 1:
            raise FormatError(
                path, at, f"a PTX kernel parameter .param .type name, not {_shown(piece)}"
            )
        count = match.group(2)
        size = sizes[0] * (1 if count is None else _ptx_number(count, "array size", path, at))
        align = sizes[0]
        aligned = next((word for word in words if word.group(1) == "align"), None)
        if aligned is not None:
            if aligned.group(2) is None:
                raise FormatError(path, at, f"a number after .align in {_shown(piece)}")
            align = _ptx_number(aligned.group(2), ".align", path, at)
        if align < 1 or align & (align - 1):
            raise FormatError(path, at, f"a power-of-two .align in {_shown(piece)}")
        offset = -(-offset // align) * align
        params.append(ObjectParam(ordinal, offset, size, None))
        offset += size
    return tuple(params)
