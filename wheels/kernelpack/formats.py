"""Read and write the files GPU code ships in: offload bundles, code objects, cubins, PTX.

One reader and writer for the builder (which bundles, compresses and indexes what the compilers
made) and for the installed package (which picks an image out of a bundle and checks it). Layouts
are in shared/reference/FORMATS.md, taken from LLVM (clang/lib/Driver/OffloadBundler.cpp,
AMDGPUUsage.rst, ELF.h) and checked against files made by hipcc 7 / LLVM 21 and nvcc 13.0 (the
fixtures under tests/fixtures/objects).

Every reader takes the file's bytes and a path used only in messages. Anything truncated, corrupt
or hostile ends in one :class:`~kernelpack.errors.FormatError` naming the path, the byte offset
and what was expected there; no size read from a header is used to allocate or to loop before it
has been checked against the bytes present and a sane bound.
"""

from __future__ import annotations

import hashlib
import re
import struct
import sys
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from . import _msgpack
from ._elf import SHT_DYNSYM, SHT_SYMTAB, STB_GLOBAL, STT_FUNC, Elf, Section
from .errors import FormatError, UsageError
from .index import KernelResources
from .targets import AMD_BY_MACH, TargetId

# ---------------------------------------------------------------------------------------------
# Clang offload bundles

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
HIP_BUNDLE_ALIGNMENT = 4096  # what hipcc --genco uses (the bundler's own default is 1)
HOST_ENTRY_ID = "host-x86_64-unknown-linux-gnu-"  # the empty host entry hipcc --genco writes
MAX_UNCOMPRESSED_BYTES = 1 << 32  # a sane bound: a bundle of GPU code is far below 4 GiB
DEFAULT_CCOB_VERSION = 2  # what clang-offload-bundler 21 (Debian, ROCm 7) writes by default
ZSTD_LEVEL = 3  # LLVM's level for zstd
ZLIB_LEVEL = 6  # zlib's default, which LLVM uses

_ENTRY_HEADER = struct.Struct("<QQQ")  # offset, size, id length
_CCOB_COMMON = struct.Struct("<4sHH")  # magic, version, method
# CCOB version -> layout of the header after the common part (see FORMATS.md).
_CCOB_HEADERS: dict[int, struct.Struct] = {
    1: struct.Struct("<IQ"),  # uncompressed size, hash
    2: struct.Struct("<IIQ"),  # total size, uncompressed size, hash
    3: struct.Struct("<QQQ"),  # total size, uncompressed size, hash
}
_CCOB_METHODS: dict[int, Literal["zlib", "zstd"]] = {0: "zlib", 1: "zstd"}
_CCOB_METHOD_IDS = {name: number for number, name in _CCOB_METHODS.items()}
_DECOMPRESS_CHUNK = 1 << 20


@dataclass(frozen=True)
class BundleEntry:
    """One image of a bundle: ``<kind>-<triple>-<target>`` and its bytes.

    ``offset`` is where the bytes sit in the uncompressed bundle (for a compressed bundle, in the
    bundle its CCOB decompresses to): the builder stores it in the index.
    """

    id: str
    data: bytes = field(repr=False)
    offset: int
    kind: str  # "host", "hip", "hipv4", "openmp"
    triple: str  # "amdgcn-amd-amdhsa-" (empty environment), "x86_64-unknown-linux-gnu"
    target: str  # "gfx90a:xnack-", "gfx11-generic"; "" for the host

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class CompressedHeader:
    """One CCOB header, as found at ``offset`` in the file."""

    offset: int
    version: int
    method: Literal["zlib", "zstd"]
    size: int  # the whole CCOB, header included
    uncompressed_size: int
    hash: int  # low 64 bits of the MD5 of the uncompressed bundle

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "version": self.version,
            "method": self.method,
            "size": self.size,
            "uncompressed_size": self.uncompressed_size,
            "hash": f"0x{self.hash:016x}",
        }


@dataclass(frozen=True)
class Bundle:
    """A bundle file: its entries, and the CCOB headers it was compressed under (none if plain)."""

    entries: tuple[BundleEntry, ...]
    compression: tuple[CompressedHeader, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "bundle",
            "compression": [header.to_json() for header in self.compression],
            "entries": [
                {
                    "id": entry.id,
                    "offset": entry.offset,
                    "size": entry.size,
                    "kind": entry.kind,
                    "triple": entry.triple,
                    "target": entry.target,
                }
                for entry in self.entries
            ],
        }


def split_bundle_id(text: str) -> tuple[str, str, str]:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> (kind, triple, target).

    As clang-offload-bundler reads it: at most six dash-separated fields, the kind, four of the
    triple (LLVM 15 wrote three for the host), and the target id, which may hold dashes itself
    (``gfx11-generic``). Raises ValueError for anything else.
    """
    parts = text.split("-", 5)
    if len(parts) < 4 or not parts[0] or not parts[1]:
        raise ValueError(f"bundle entry id {text!r} is not <kind>-<triple>-<target>")
    target = parts[5] if len(parts) == 6 else ""
    return parts[0], "-".join(parts[1:5]), target


def read_bundle(data: bytes, path: str) -> list[BundleEntry]:
    """The entries of a bundle, plain or compressed (one CCOB or several in a row)."""
    return list(_read_bundle(data, path).entries)


def _read_bundle(data: bytes, path: str) -> Bundle:
    if data.startswith(CCOB_MAGIC):
        headers: list[CompressedHeader] = []
        entries: list[BundleEntry] = []
        for header, plain in _decompress_all(data, path):
            headers.append(header)
            entries += _read_plain_bundle(plain, f"{path} (bundle of the CCOB at {header.offset})")
        return Bundle(tuple(entries), tuple(headers))
    return Bundle(tuple(_read_plain_bundle(data, path)))


def _read_plain_bundle(data: bytes, path: str) -> list[BundleEntry]:
    if not data.startswith(BUNDLE_MAGIC):
        raise FormatError(path, 0, f"the offload bundle magic {BUNDLE_MAGIC.decode()}")
    at = len(BUNDLE_MAGIC)
    if len(data) < at + 8:
        raise FormatError(path, at, "the bundle's entry count")
    (count,) = struct.unpack_from("<Q", data, at)
    at += 8
    if count > (len(data) - at) // _ENTRY_HEADER.size:
        raise FormatError(path, at - 8, f"an entry count that fits the file, not {count}")
    entries: list[BundleEntry] = []
    seen: set[str] = set()
    for _ in range(count):
        if len(data) - at < _ENTRY_HEADER.size:
            raise FormatError(path, at, "a 24-byte bundle entry header")
        offset, size, id_size = _ENTRY_HEADER.unpack_from(data, at)
        if id_size > len(data) - at - _ENTRY_HEADER.size:
            raise FormatError(path, at + 16, f"an entry id length inside the file, not {id_size}")
        id_at = at + _ENTRY_HEADER.size
        try:
            text = data[id_at : id_at + id_size].decode("ascii")
            kind, triple, target = split_bundle_id(text)
        except (UnicodeDecodeError, ValueError):
            raise FormatError(
                path, id_at, "an entry id <kind>-<triple>-<target> in ASCII"
            ) from None
        if text in seen:
            raise FormatError(path, id_at, f"each entry id once ({text} repeats)")
        seen.add(text)
        if offset == 0 or offset > len(data) or size > len(data) - offset:
            raise FormatError(
                path,
                at,
                f"entry {text} ({size} bytes at {offset}) inside the {len(data)}-byte file",
            )
        entries.append(
            BundleEntry(text, data[offset : offset + size], offset, kind, triple, target)
        )
        at = id_at + id_size
    return entries


def write_bundle(
    entries: Sequence[tuple[str, bytes]], *, align: int = HIP_BUNDLE_ALIGNMENT
) -> bytes:
    """An uncompressed bundle laid out as ``hipcc --genco`` writes it.

    The empty host entry comes first, then the given device entries sorted by id; each payload
    starts at a multiple of ``align``. Given the same entries, the bytes are the same: for the
    code objects of a hipcc bundle they equal hipcc's own bundle.
    """
    if align < 1:
        raise UsageError(f"bundle alignment must be at least 1, not {align}")
    ids = [entry_id for entry_id, _ in entries]
    for entry_id in ids:
        try:
            kind = split_bundle_id(entry_id)[0]
        except ValueError as error:
            raise UsageError(str(error)) from None
        if kind == "host":
            raise UsageError(f"{entry_id}: give device entries only; the host entry is added")
        if not entry_id.isascii():
            raise UsageError(f"bundle entry id {entry_id!r} is not ASCII")
    if len(set(ids)) != len(ids):
        raise UsageError(
            f"bundle entry ids repeat: {sorted(i for i in set(ids) if ids.count(i) > 1)}"
        )
    ordered = [(HOST_ENTRY_ID, b""), *sorted(entries, key=lambda entry: entry[0])]
    end = len(BUNDLE_MAGIC) + 8 + sum(_ENTRY_HEADER.size + len(i) for i, _ in ordered)
    header = [BUNDLE_MAGIC, struct.pack("<Q", len(ordered))]
    offsets = []
    for entry_id, payload in ordered:
        offset = -(-end // align) * align
        offsets.append(offset)
        header += [_ENTRY_HEADER.pack(offset, len(payload), len(entry_id)), entry_id.encode()]
        end = offset + len(payload)
    out = bytearray(b"".join(header))
    for offset, (_, payload) in zip(offsets, ordered, strict=True):
        out += bytes(offset - len(out)) + payload
    return bytes(out)


def compress_bundle(
    data: bytes,
    method: Literal["zstd", "zlib"] = "zstd",
    version: int = DEFAULT_CCOB_VERSION,
) -> bytes:
    """A CCOB holding ``data``, as ``clang-offload-bundler --compress`` writes it.

    zstd at level 3 and zlib at level 6 as LLVM uses them; the same input and library version give
    the same bytes (not necessarily LLVM's, which also turns on zstd's long-distance matching).
    """
    if method not in _CCOB_METHOD_IDS:
        raise UsageError(f"compression method {method!r}; known: zlib, zstd")
    if version not in _CCOB_HEADERS:
        raise UsageError(f"CCOB version {version}; known: 1, 2, 3")
    payload = _zstd_compress(data) if method == "zstd" else zlib.compress(data, ZLIB_LEVEL)
    digest = _md5_low64(data)
    layout = _CCOB_HEADERS[version]
    total = _CCOB_COMMON.size + layout.size + len(payload)
    if version < 3 and max(total, len(data)) > 0xFFFFFFFF:
        raise UsageError(f"{len(data)} bytes do not fit a CCOB version {version}; use version 3")
    common = _CCOB_COMMON.pack(CCOB_MAGIC, version, _CCOB_METHOD_IDS[method])
    sizes = (len(data),) if version == 1 else (total, len(data))
    return common + layout.pack(*sizes, digest) + payload


def _md5_low64(data: bytes) -> int:
    """LLVM's MD5Result::low(): the first 8 bytes of the digest as a little-endian integer."""
    low: int = struct.unpack("<Q", hashlib.md5(data, usedforsecurity=False).digest()[:8])[0]
    return low


def _decompress_all(data: bytes, path: str) -> list[tuple[CompressedHeader, bytes]]:
    """Each CCOB of a file and the bundle it holds; CCOBs may follow each other directly."""
    results = []
    at = 0
    while at < len(data):
        header = _ccob_header(data, at, path)
        payload_at = at + _CCOB_COMMON.size + _CCOB_HEADERS[header.version].size
        plain = _decompress(header, data[payload_at : at + header.size], path, payload_at)
        if _md5_low64(plain) != header.hash:
            raise FormatError(
                path,
                payload_at - 8,
                f"the MD5 hash 0x{header.hash:016x} of the decompressed bundle",
            )
        results.append((header, plain))
        at += header.size
    return results


def _ccob_header(data: bytes, at: int, path: str) -> CompressedHeader:
    if len(data) - at < _CCOB_COMMON.size:
        raise FormatError(path, at, "an 8-byte CCOB header")
    magic, version, method_id = _CCOB_COMMON.unpack_from(data, at)
    if magic != CCOB_MAGIC:
        raise FormatError(path, at, "the CCOB magic of the next compressed bundle")
    layout = _CCOB_HEADERS.get(version)
    if layout is None:
        raise FormatError(path, at + 4, f"CCOB version 1, 2 or 3, not {version}")
    method = _CCOB_METHODS.get(method_id)
    if method is None:
        raise FormatError(path, at + 6, f"CCOB method 0 (zlib) or 1 (zstd), not {method_id}")
    header_size = _CCOB_COMMON.size + layout.size
    if len(data) - at < header_size:
        raise FormatError(path, at, f"a {header_size}-byte CCOB version {version} header")
    fields = layout.unpack_from(data, at + _CCOB_COMMON.size)
    if version == 1:  # no total size: the payload runs to the end of the file
        uncompressed, digest = fields
        total = len(data) - at
    else:
        total, uncompressed, digest = fields
        if not header_size <= total <= len(data) - at:
            raise FormatError(
                path, at + 8, f"a CCOB size between {header_size} and {len(data) - at}, not {total}"
            )
    if uncompressed > MAX_UNCOMPRESSED_BYTES:
        size_at = at + (8 if version == 1 else 12 if version == 2 else 16)
        raise FormatError(
            path,
            size_at,
            f"an uncompressed size of at most {MAX_UNCOMPRESSED_BYTES}, not {uncompressed}",
        )
    return CompressedHeader(at, version, method, total, uncompressed, digest)


def _decompress(header: CompressedHeader, payload: bytes, path: str, at: int) -> bytes:
    """The payload decompressed, never producing more than the header's size plus one byte."""
    size = header.uncompressed_size
    expected = f"a {header.method} stream of exactly {size} bytes"
    if header.method == "zlib":
        inflater = zlib.decompressobj()
        try:
            plain = inflater.decompress(payload, size + 1)
        except zlib.error:
            raise FormatError(path, at, expected) from None
        if len(plain) != size or not inflater.eof or inflater.unused_data:
            raise FormatError(path, at, expected)
        return plain
    unpacked = _zstd_decompress(payload, size)
    if unpacked is None or len(unpacked) != size:
        raise FormatError(path, at, expected)
    return unpacked


def _zstd_compress(data: bytes) -> bytes:
    if sys.version_info >= (3, 14):
        from compression import zstd

        return zstd.compress(data, level=ZSTD_LEVEL)
    import zstandard

    compressed: bytes = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    return compressed


def _zstd_decompress(payload: bytes, size: int) -> bytes | None:
    """zstd frames decompressed up to ``size + 1`` bytes; None if the stream is corrupt.

    Reading in chunks bounds memory by what the stream really yields, whatever a frame header
    claims; a stream that yields more than ``size`` is cut short and then refused by the caller.
    """
    chunks: list[bytes] = []
    produced = 0
    if sys.version_info >= (3, 14):
        from compression import zstd

        rest = payload
        try:
            while rest and produced <= size:
                decompressor = zstd.ZstdDecompressor()
                chunk = decompressor.decompress(rest, max_length=size + 1 - produced)
                chunks.append(chunk)
                produced += len(chunk)
                if not decompressor.eof:
                    break
                rest = decompressor.unused_data
        except zstd.ZstdError:
            return None
        return b"".join(chunks) if not rest or produced > size else None
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
    try:
        while produced <= size:
            chunk = reader.read(min(_DECOMPRESS_CHUNK, size + 1 - produced))
            if not chunk:
                break
            chunks.append(chunk)
            produced += len(chunk)
    except zstandard.ZstdError:
        return None
    return b"".join(chunks)


# ---------------------------------------------------------------------------------------------
# AMDGPU code objects

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


@dataclass(frozen=True)
class KernelArg:
    offset: int
    size: int
    value_kind: str  # by_value, global_buffer, hidden_block_count_x, ...
    name: str | None = None
    type_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "size": self.size,
            "value_kind": self.value_kind,
            "name": self.name,
            "type_name": self.type_name,
        }


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
        return {
            "name": self.name,
            "symbol": self.symbol,
            "vgpr": self.vgpr,
            "sgpr": self.sgpr,
            "agpr": self.agpr,
            "lds": self.lds,
            "scratch": self.scratch,
            "sgpr_spills": self.sgpr_spills,
            "vgpr_spills": self.vgpr_spills,
            "wavefront": self.wavefront,
            "max_workgroup": self.max_workgroup,
            "kernarg_size": self.kernarg_size,
            "args": [arg.to_json() for arg in self.args],
        }


@dataclass(frozen=True)
class CodeObject:
    target: TargetId
    code_object_version: int  # 4, 5 or 6
    generic_version: int  # 0 for a processor, >= 1 for a generic target (v6)
    kernels: tuple[AmdKernel, ...]

    def resources(self) -> dict[str, KernelResources]:
        """Per kernel name, the figures the index records (see kernelpack.index)."""
        return {kernel.name: kernel.resources() for kernel in self.kernels}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "code_object",
            "target": str(self.target),
            "code_object_version": self.code_object_version,
            "generic_version": self.generic_version,
            "kernels": [kernel.to_json() for kernel in self.kernels],
        }


def read_code_object(data: bytes, path: str) -> CodeObject:
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
    for table in elf.sections:
        if table.type in (SHT_DYNSYM, SHT_SYMTAB):
            symbols.update({s.name: s for s in elf.symbols(table) if s.name})
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


# ---------------------------------------------------------------------------------------------
# NVIDIA cubins and PTX

EM_CUDA = 190
# Attributes of .nv.info / .nv.compat records (format byte, attribute byte, 16-bit value or size).
EIATTR_MAX_THREADS = 0x05  # per kernel: __launch_bounds__ / .maxntid x, y, z
EIATTR_REQNTID = 0x10  # per kernel: .reqntid x, y, z
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
        return {
            "name": self.name,
            "registers": self.registers,
            "shared": self.shared,
            "local": self.local,
            "max_threads": self.max_threads,
        }


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
        """Per kernel name, the figures the index records (see kernelpack.index)."""
        return {kernel.name: kernel.resources() for kernel in self.kernels}

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "cubin",
            "target": self.target,
            "sm": self.sm,
            "arch_specific": self.arch_specific,
            "elf_abi_version": self.elf_abi_version,
            "kernels": [kernel.to_json() for kernel in self.kernels],
        }


def read_cubin(data: bytes, path: str) -> Cubin:
    """A cubin's SM (e_flags, and .nv.compat for 'a' targets) and its kernels' resources."""
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
    for symbol in symbols:
        if not (
            symbol.type == STT_FUNC and symbol.bind == STB_GLOBAL and symbol.other & _STO_CUDA_ENTRY
        ):
            continue
        attributes = per_symbol.get(symbol.index, {})
        shared = elf.section(f".nv.shared.{symbol.name}")
        kernels.append(
            CudaKernel(
                name=symbol.name,
                registers=attributes.get(EIATTR_REGCOUNT, 0),
                shared=shared.size if shared else 0,
                local=attributes.get(EIATTR_MIN_STACK_SIZE, 0),
                max_threads=_max_threads(elf, symbol.name),
            )
        )
    return Cubin(sm, arch_specific, elf.abi_version, tuple(kernels))


def _records(elf: Elf, section: Section) -> list[tuple[int, int, bytes | int, int]]:
    """(format, attribute, value, file offset) of each record of an .nv.info-style section."""
    records: list[tuple[int, int, bytes | int, int]] = []
    at, end = section.offset, section.offset + section.size
    while at < end:
        if end - at < 4:
            raise elf.fail(at, f"a 4-byte attribute record in {section.name}")
        fmt, attribute, word = struct.unpack_from("<BBH", elf.data, at)
        if fmt == _EIFMT_SIZED:
            if word > end - at - 4:
                raise elf.fail(at + 2, f"an attribute of {word} bytes inside {section.name}")
            records.append((fmt, attribute, elf.data[at + 4 : at + 4 + word], at))
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


def _max_threads(elf: Elf, kernel: str) -> int:
    info = elf.section(f".nv.info.{kernel}")
    if info is None:
        return CUDA_MAX_BLOCK
    for fmt, attribute, value, at in _records(elf, info):
        if attribute in (EIATTR_MAX_THREADS, EIATTR_REQNTID):
            if fmt != _EIFMT_SIZED or not isinstance(value, bytes) or len(value) != 12:
                raise elf.fail(at, f"three block dimensions in attribute 0x{attribute:02x}")
            x, y, z = struct.unpack("<III", value)
            threads: int = x * y * z
            return threads
    return CUDA_MAX_BLOCK


_PTX_VERSION = re.compile(r"^[ \t]*\.version[ \t]+(\d+\.\d+)[ \t]*$", re.M)
_PTX_TARGET = re.compile(r"^[ \t]*\.target[ \t]+(\w+)", re.M)
_PTX_ADDRESS_SIZE = re.compile(r"^[ \t]*\.address_size[ \t]+(\d+)", re.M)
_PTX_ENTRY = re.compile(r"\.entry[ \t\r\n]+([A-Za-z_$%][\w$]*)")
_PTX_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_PTX_SM = re.compile(r"sm_(\d+)[af]?")


@dataclass(frozen=True)
class Ptx:
    version: str  # the PTX ISA version, "9.0"
    target: str  # as .target names it: "sm_80", "sm_90a"
    address_size: int  # 64 or 32 (32 when the directive is absent)
    entries: tuple[str, ...]

    @property
    def compute_target(self) -> str:
        """The virtual architecture the PTX is for, as the index names it: "compute_80"."""
        return "compute_" + self.target.removeprefix("sm_")

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "ptx",
            "version": self.version,
            "target": self.target,
            "address_size": self.address_size,
            "entries": list(self.entries),
        }


def read_ptx(data: bytes, path: str) -> Ptx:
    """PTX text: its ISA version, target and kernel entry names."""
    body = data.rstrip(b"\0")  # PTX taken from a fat binary ends in NULs
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
    address_size = int(address.group(1)) if address else 32
    if address_size not in (32, 64):
        raise FormatError(path, 0, f"a PTX .address_size of 32 or 64, not {address_size}")
    entries = tuple(match.group(1) for match in _PTX_ENTRY.finditer(code))
    return Ptx(version.group(1), target.group(1), address_size, entries)


# ---------------------------------------------------------------------------------------------
# Any of them

ImageFile: TypeAlias = Bundle | CodeObject | Cubin | Ptx


def read_image(data: bytes, path: str) -> ImageFile:
    """Whatever GPU code file this is: a bundle (plain or CCOB), a code object, a cubin or PTX."""
    if data.startswith((BUNDLE_MAGIC, CCOB_MAGIC)):
        return _read_bundle(data, path)
    if data.startswith(b"\x7fELF"):
        if len(data) < 20:
            raise FormatError(path, len(data), "an ELF header")
        (machine,) = struct.unpack_from("<H", data, 18)
        if machine == EM_AMDGPU:
            return read_code_object(data, path)
        if machine == EM_CUDA:
            return read_cubin(data, path)
        raise FormatError(
            path, 18, f"ELF machine {EM_AMDGPU} (AMDGPU) or {EM_CUDA} (CUDA), not {machine}"
        )
    if b".version" in data[:65536] and b".target" in data[:65536]:
        return read_ptx(data, path)
    raise FormatError(
        path, 0, "an offload bundle, a CCOB, an AMDGPU code object, a cubin or PTX text"
    )


def describe(data: bytes, path: str) -> dict[str, Any]:
    """What ``kernelpack inspect --json`` prints: the file as read_image reads it, and for a
    bundle each entry's image as well (null for the host entry and for entries that are not ELF,
    such as the bitcode of an -fgpu-rdc bundle)."""
    image = read_image(data, path)
    report = image.to_json()
    if isinstance(image, Bundle):
        for entry, row in zip(image.entries, report["entries"], strict=True):
            inner = None
            if entry.data.startswith(b"\x7fELF"):
                inner = read_image(entry.data, f"{path}: entry {entry.id}").to_json()
            row["image"] = inner
    return report
