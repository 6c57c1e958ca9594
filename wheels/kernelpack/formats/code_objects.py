"""AMDGPU code objects: target from e_flags, kernels from the metadata note, checked descriptors.

An AMDGPU code object is an ELF64 file (AMDGPUUsage.rst): its e_flags name the processor and the
xnack/sramecc settings, its NT_AMDGPU_METADATA note (MessagePack) lists the kernels with their
arguments and resources, and each kernel's 64-byte descriptor says wave32 or wave64. The reader
checks that these agree; anything else ends in one :class:`~kernelpack.errors.FormatError`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._jsonfields import json_fields
from ..errors import FormatError
from ..targets import TargetId
from ..targets.processors import AMD_BY_MACH
from . import msgpack as _msgpack
from .elf import SHT_DYNSYM, SHT_SYMTAB, Buffer, Elf
from .index import KernelResources
from .params import ObjectParam

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
NT_AMDGPU_METADATA = 32
# EI_ABIVERSION -> code object version (AMDGPUUsage.rst); v4 is the first with today's e_flags.
CODE_OBJECT_VERSIONS: dict[int, int] = {2: 4, 3: 5, 4: 6}
_MACH_MASK = 0xFF
_GENERIC_VERSION_SHIFT = 24
# e_flags feature fields (v4+): mask, and field value -> fixed setting (None: "any"/unsupported).
_FEATURE_FLAGS: dict[str, tuple[int, dict[int, bool | None]]] = {
    "xnack": (0x300, {0x000: None, 0x100: None, 0x200: False, 0x300: True}),
    "sramecc": (0xC00, {0x000: None, 0x400: None, 0x800: False, 0xC00: True}),
}
_KERNEL_DESCRIPTOR_SIZE = 64
_KD_CODE_PROPERTIES = 56  # u16 kernel_code_properties
_KD_WAVE32_BIT = 1 << 10  # ENABLE_WAVEFRONT_SIZE32
_METADATA_INT_LIMIT = 1 << 32
# .value_kind of the arguments the C source declares: pointers, and values (AMDGPUUsage.rst); the
# others (hidden_*) are added by the compiler
_POINTER_KINDS = frozenset({"global_buffer", "dynamic_shared_pointer"})
_VALUE_KINDS = frozenset({"by_value"})


@dataclass(frozen=True)
class KernelArg:
    offset: int
    size: int
    value_kind: str  # by_value, global_buffer, hidden_block_count_x, ...
    name: str | None = None
    type_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)


@dataclass(frozen=True)
class AmdKernel:
    """One kernel's entry of the metadata note (AMDGPUUsage.rst, code object metadata v3+)."""

    name: str
    symbol: str  # the kernel descriptor, "<name>.kd"
    args: tuple[KernelArg, ...]
    kernarg_size: int
    sgpr: int
    vgpr: int
    agpr: int
    lds: int  # .group_segment_fixed_size
    scratch: int  # .private_segment_fixed_size, bytes per work-item
    sgpr_spills: int
    vgpr_spills: int
    wavefront: int
    max_workgroup: int  # .max_flat_workgroup_size

    @property
    def params(self) -> tuple[ObjectParam, ...]:
        """The parameters the source declares, in order: the arguments that are not hidden."""
        declared = [a for a in self.args if not a.value_kind.startswith("hidden_")]
        return tuple(
            ObjectParam(ordinal, arg.offset, arg.size, _is_pointer(arg.value_kind))
            for ordinal, arg in enumerate(declared)
        )

    def resources(self) -> KernelResources:
        return KernelResources(
            registers=self.vgpr,
            sgpr=self.sgpr,
            agpr=self.agpr,
            lds=self.lds,
            scratch=self.scratch,
            spills=self.sgpr_spills + self.vgpr_spills,
            wavefront=self.wavefront,
            max_workgroup=self.max_workgroup,
        )

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, also=("params",))


def _is_pointer(value_kind: str) -> bool | None:
    """True for a pointer, False for a value, None for a kind that is neither (an image)."""
    if value_kind in _POINTER_KINDS:
        return True
    return False if value_kind in _VALUE_KINDS else None


@dataclass(frozen=True)
class CodeObject:
    target: TargetId
    code_object_version: int  # 4, 5 or 6
    generic_version: int  # 0 for a processor, >= 1 for a generic target (v6)
    kernels: tuple[AmdKernel, ...]

    def resources(self) -> dict[str, KernelResources]:
        """Per kernel name, the figures the index records (see kernelpack.formats.index)."""
        return {kernel.name: kernel.resources() for kernel in self.kernels}

    def to_json(self) -> dict[str, Any]:
        return {"format": "code_object", **json_fields(self)}


def read_code_object(data: Buffer, path: str) -> CodeObject:
    """An AMDGPU code object's target (from e_flags) and kernels (from the metadata note).

    The metadata's own target string and each kernel descriptor's wave32 bit are checked against
    what the rest of the file says.
    """
    elf = Elf(data, path, machine=EM_AMDGPU, what="an AMDGPU code object")
    if elf.osabi != ELFOSABI_AMDGPU_HSA:
        raise FormatError(
            path, 7, f"ELF OS ABI {ELFOSABI_AMDGPU_HSA} (AMDGPU HSA), not {elf.osabi}"
        )
    version = CODE_OBJECT_VERSIONS.get(elf.abi_version)
    if version is None:
        raise FormatError(
            path, 8, f"ELF ABI version 2, 3 or 4 (code object v4 to v6), not {elf.abi_version}"
        )
    target, generic_version = _target_from_flags(elf.flags, version, path)
    note = next(
        (n for n in elf.notes() if n.name == b"AMDGPU" and n.type == NT_AMDGPU_METADATA), None
    )
    if note is None:
        raise FormatError(path, 0, "an AMDGPU metadata note (NT_AMDGPU_METADATA)")
    metadata = _msgpack.unpack(note.desc, path=path, base=note.desc_offset)
    kernels = _amd_kernels(metadata, str(target), path, note.desc_offset)
    _check_kernel_descriptors(elf, kernels)
    return CodeObject(target, version, generic_version, kernels)


def _target_from_flags(flags: int, version: int, path: str) -> tuple[TargetId, int]:
    processor = AMD_BY_MACH.get(flags & _MACH_MASK)
    if processor is None:
        raise FormatError(path, 48, f"a known EF_AMDGPU_MACH value, not 0x{flags & _MACH_MASK:x}")
    generic_version = flags >> _GENERIC_VERSION_SHIFT if version >= 6 else 0
    if processor.is_generic != (generic_version >= 1):
        raise FormatError(
            path,
            48,
            f"a generic version >= 1 exactly for generic targets ({processor.name}: "
            f"{generic_version})",
        )
    features = []
    for name, (mask, settings) in _FEATURE_FLAGS.items():
        setting = settings[flags & mask]
        if setting is not None:
            if not getattr(processor, name):
                raise FormatError(path, 48, f"no {name} setting for {processor.name}")
            features.append((name, setting))
    return TargetId(processor.name, tuple(sorted(features))), generic_version


def _amd_kernels(metadata: Any, target: str, path: str, at: int) -> tuple[AmdKernel, ...]:
    fields = _MetadataFields(path, at)
    if not isinstance(metadata, dict):
        raise fields.fail("a MessagePack map as the AMDGPU metadata")
    declared = metadata.get("amdhsa.target")
    if declared is not None and declared != f"amdgcn-amd-amdhsa--{target}":
        raise fields.fail(
            f"amdhsa.target amdgcn-amd-amdhsa--{target} as e_flags say, not {declared!r}"
        )
    kernels = metadata.get("amdhsa.kernels")
    if not isinstance(kernels, list) or not all(isinstance(k, dict) for k in kernels):
        raise fields.fail("a list of maps as amdhsa.kernels in the AMDGPU metadata")
    return tuple(_amd_kernel(entry, fields) for entry in kernels)


def _amd_kernel(entry: dict[Any, Any], fields: _MetadataFields) -> AmdKernel:
    name = fields.string(entry, ".name", "a kernel")
    owner = f"kernel {name}"
    args = entry.get(".args", [])
    if not isinstance(args, list) or not all(isinstance(arg, dict) for arg in args):
        raise fields.fail(f"a list of maps as .args of {owner}")
    return AmdKernel(
        name=name,
        symbol=fields.string(entry, ".symbol", owner),
        args=tuple(
            KernelArg(
                offset=fields.integer(arg, ".offset", owner),
                size=fields.integer(arg, ".size", owner),
                value_kind=fields.string(arg, ".value_kind", owner),
                name=fields.optional_string(arg, ".name", owner),
                type_name=fields.optional_string(arg, ".type_name", owner),
            )
            for arg in args
        ),
        kernarg_size=fields.integer(entry, ".kernarg_segment_size", owner),
        sgpr=fields.integer(entry, ".sgpr_count", owner),
        vgpr=fields.integer(entry, ".vgpr_count", owner),
        agpr=fields.integer(entry, ".agpr_count", owner, required=False),
        lds=fields.integer(entry, ".group_segment_fixed_size", owner),
        scratch=fields.integer(entry, ".private_segment_fixed_size", owner),
        sgpr_spills=fields.integer(entry, ".sgpr_spill_count", owner, required=False),
        vgpr_spills=fields.integer(entry, ".vgpr_spill_count", owner, required=False),
        wavefront=fields.integer(entry, ".wavefront_size", owner),
        max_workgroup=fields.integer(entry, ".max_flat_workgroup_size", owner),
    )


@dataclass(frozen=True)
class _MetadataFields:
    """Typed reads of metadata map entries; a missing or mistyped one is a FormatError.

    ``at`` is the metadata note's offset: MessagePack values carry no positions of their own.
    Which keys are required follows LLVM's AMDGPUMetadataVerifier (code object v3+).
    """

    path: str
    at: int

    def fail(self, expected: str) -> FormatError:
        return FormatError(self.path, self.at, expected)

    def integer(
        self, entry: Mapping[Any, Any], key: str, owner: str, *, required: bool = True
    ) -> int:
        value = entry.get(key)
        if value is None and not required:
            return 0
        if type(value) is not int or not 0 <= value < _METADATA_INT_LIMIT:
            raise self.fail(f"an integer {key} below 2^32 for {owner}, not {value!r}")
        return value

    def string(self, entry: Mapping[Any, Any], key: str, owner: str) -> str:
        value = entry.get(key)
        if not isinstance(value, str):
            raise self.fail(f"a string {key} for {owner}, not {value!r}")
        return value

    def optional_string(self, entry: Mapping[Any, Any], key: str, owner: str) -> str | None:
        return None if entry.get(key) is None else self.string(entry, key, owner)


def _check_kernel_descriptors(elf: Elf, kernels: tuple[AmdKernel, ...]) -> None:
    """Each kernel's descriptor exists and its wave32 bit agrees with .wavefront_size."""
    symbols = {}
    for table in elf.symbol_tables(SHT_DYNSYM, SHT_SYMTAB):
        symbols.update({s.name: s for s in table if s.name})
    for kernel in kernels:
        symbol = symbols.get(kernel.symbol)
        if symbol is None:
            raise FormatError(elf.path, 0, f"a symbol {kernel.symbol} for kernel {kernel.name}")
        descriptor, at = elf.symbol_bytes(symbol, _KERNEL_DESCRIPTOR_SIZE)
        (properties,) = struct.unpack_from("<H", descriptor, _KD_CODE_PROPERTIES)
        wavefront = 32 if properties & _KD_WAVE32_BIT else 64
        if kernel.wavefront != wavefront:
            raise FormatError(
                elf.path,
                at + _KD_CODE_PROPERTIES,
                f"a kernel descriptor of wave{kernel.wavefront} for {kernel.name} as its "
                f"metadata says, not wave{wavefront}",
            )
