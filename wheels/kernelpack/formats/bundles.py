"""Clang offload bundles and their CCOB compression: read, write, compress.

The container hipcc writes for AMD code objects (clang/lib/Driver/OffloadBundler.cpp): a plain
bundle is a header listing ``<kind>-<triple>-<target>`` entries with their offsets and sizes; a
compressed bundle is one or more CCOB blocks, each a zlib or zstd stream of a plain bundle with its
size and an MD5 hash. Layouts are in shared/reference/FORMATS.md.

Anything truncated, corrupt or hostile ends in one :class:`~kernelpack.errors.FormatError` naming
the path, the byte offset and what was expected there. Memory stays proportional to the file:
entries are read-only views of the file's (or the decompressed bundle's) bytes, so entries that
alias one region cost nothing each, and all CCOB blocks of a file together decompress to at most
:func:`decompression_budget` bytes, refused from their headers before anything is inflated.
"""

from __future__ import annotations

import hashlib
import struct
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal

from .._jsonfields import json_fields
from ..errors import FormatError, UsageError
from .elf import Buffer

BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
HIP_BUNDLE_ALIGNMENT = 4096  # what hipcc --genco uses (the bundler's own default is 1)
HOST_ENTRY_ID = "host-x86_64-unknown-linux-gnu-"  # the empty host entry hipcc --genco writes
# The decompression budget of one file, all its CCOB blocks together (decompression_budget):
# hipcc's zstd bundles are 5 to 10 times smaller than what they hold (the fixtures: 5.4, 6.2);
# 128 times leaves room for bundles of near-identical targets, the floor for small files.
DECOMPRESSED_PER_FILE_BYTE = 128
DECOMPRESSED_FLOOR_BYTES = 16 << 20
MAX_DECOMPRESSED_BYTES = 1 << 30  # the hard cap, whatever the file's size
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
    bundle its CCOB decompresses to): the builder stores it in the index. ``view`` is a read-only
    view of the bytes where they lie, never a copy: a hostile bundle may point thousands of
    entries at one region, and ``data`` copies one entry only when it is asked for.
    """

    id: str
    view: memoryview = field(repr=False)
    offset: int
    kind: str  # "host", "hip", "hipv4", "openmp"
    triple: str  # "amdgcn-amd-amdhsa-" (empty environment), "x86_64-unknown-linux-gnu"
    target: str  # "gfx90a:xnack-", "gfx11-generic"; "" for the host

    @property
    def size(self) -> int:
        return self.view.nbytes

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, also=("size",), skip=("view",))

    @property
    def data(self) -> bytes:
        """A copy of the entry's bytes (each call copies; ``view`` does not)."""
        return self.view.tobytes()


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
        return {**json_fields(self), "hash": f"0x{self.hash:016x}"}


@dataclass(frozen=True)
class Bundle:
    """A bundle file: its entries, and the CCOB headers it was compressed under (none if plain)."""

    entries: tuple[BundleEntry, ...]
    compression: tuple[CompressedHeader, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"format": "bundle", **json_fields(self)}


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


def decompression_budget(file_size: int) -> int:
    """How many bytes all CCOB blocks of a ``file_size``-byte file may decompress to, together:
    proportional to the file, at least the floor, never more than the hard cap."""
    proportional = max(DECOMPRESSED_FLOOR_BYTES, DECOMPRESSED_PER_FILE_BYTE * file_size)
    return min(MAX_DECOMPRESSED_BYTES, proportional)


def read_bundle(data: Buffer, path: str) -> list[BundleEntry]:
    """The entries of a bundle, plain or compressed (one CCOB or several in a row)."""
    return list(parse_bundle(data, path).entries)


def parse_bundle(data: Buffer, path: str) -> Bundle:
    """A bundle, plain or compressed, with the CCOB headers it was compressed under."""
    view = memoryview(data).toreadonly().cast("B")
    if view[: len(CCOB_MAGIC)] == CCOB_MAGIC:
        headers: list[CompressedHeader] = []
        entries: list[BundleEntry] = []
        for header, plain in _decompress_all(view, path):
            headers.append(header)
            where = f"{path} (bundle of the CCOB at {header.offset})"
            entries += _read_plain_bundle(memoryview(plain).toreadonly(), where)
        return Bundle(tuple(entries), tuple(headers))
    return Bundle(tuple(_read_plain_bundle(view, path)))


def _read_plain_bundle(data: memoryview, path: str) -> list[BundleEntry]:
    if data[: len(BUNDLE_MAGIC)] != BUNDLE_MAGIC:
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
            text = bytes(data[id_at : id_at + id_size]).decode("ascii")
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
    pieces = [b"".join(header)]
    at = len(pieces[0])
    for offset, (_, payload) in zip(offsets, ordered, strict=True):
        pieces += [bytes(offset - at), payload]
        at = offset + len(payload)
    return b"".join(pieces)  # one copy of the payloads: a fat bundle is tens of megabytes


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


def _md5_low64(data: Buffer) -> int:
    """LLVM's MD5Result::low(): the first 8 bytes of the digest as a little-endian integer."""
    low: int = struct.unpack("<Q", hashlib.md5(data, usedforsecurity=False).digest()[:8])[0]
    return low


def _decompress_all(data: memoryview, path: str) -> list[tuple[CompressedHeader, Buffer]]:
    """Each CCOB of a file and the bundle it holds; CCOBs may follow each other directly.

    Each block's claimed size is charged to the file's budget before it is inflated, and inflating
    stops one byte past the claim: the blocks together never allocate more than the budget.
    """
    results: list[tuple[CompressedHeader, Buffer]] = []
    budget = decompression_budget(len(data))
    left = budget
    at = 0
    while at < len(data):
        header = _ccob_header(data, at, path)
        if header.uncompressed_size > left:
            size_at = at + (8 if header.version == 1 else 12 if header.version == 2 else 16)
            spent = f"{budget - left} spent by the CCOBs before; " if left < budget else ""
            raise FormatError(
                path,
                size_at,
                f"an uncompressed size within the decompression budget of the {len(data)}-byte "
                f"file ({budget} bytes for all its CCOBs together: {DECOMPRESSED_PER_FILE_BYTE} "
                f"times the file, at least {DECOMPRESSED_FLOOR_BYTES}, at most "
                f"{MAX_DECOMPRESSED_BYTES}; {spent}{left} left), not {header.uncompressed_size}",
            )
        left -= header.uncompressed_size
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


def _ccob_header(data: memoryview, at: int, path: str) -> CompressedHeader:
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
    return CompressedHeader(at, version, method, total, uncompressed, digest)


def _decompress(header: CompressedHeader, payload: memoryview, path: str, at: int) -> Buffer:
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


def require_zstd() -> None:
    """Refuse at once where zstd is missing, so that a command needing it (a build that
    compresses its bundles) fails before its work and not after: Python 3.14 has it built in,
    older ones need the zstandard package."""
    if sys.version_info < (3, 14):
        _zstandard()


def _zstandard() -> ModuleType:
    try:
        import zstandard  # deferred: the codec before Python 3.14
    except ImportError:
        raise UsageError(
            f"the zstandard package is not installed for {sys.executable}, and zstd bundles need "
            "it before Python 3.14: install it into a virtual environment "
            "(python3 -m venv .venv && .venv/bin/pip install zstandard) or run the builder "
            "through nox, which installs it"
        ) from None
    return zstandard


def zstd_identity() -> str:
    """The zstd that :func:`compress_bundle` runs, by its versions: the same input and this give
    the same bytes (the builder keys its cache of compressed bundles by it)."""
    if sys.version_info >= (3, 14):
        from compression import zstd  # deferred: Python 3.14's zstd, absent before

        return f"compression.zstd {zstd.zstd_version}"
    zstandard = _zstandard()
    libzstd = ".".join(str(part) for part in zstandard.ZSTD_VERSION)
    return f"zstandard {zstandard.__version__} ({zstandard.backend}), libzstd {libzstd}"


def _zstd_compress(data: bytes) -> bytes:
    if sys.version_info >= (3, 14):
        from compression import zstd  # deferred: Python 3.14's zstd, absent before

        return zstd.compress(data, level=ZSTD_LEVEL)
    zstandard = _zstandard()
    compressed: bytes = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    return compressed


def _zstd_decompress(payload: memoryview, size: int) -> bytearray | None:
    """zstd frames decompressed up to ``size + 1`` bytes; None if the stream is corrupt.

    Reading in chunks bounds memory by what the stream really yields, whatever a frame header
    claims; a stream that yields more than ``size`` is cut short and then refused by the caller.
    The chunks go straight into one buffer, so the peak is the output, not twice it.
    """
    out = bytearray()
    produced = 0
    if sys.version_info >= (3, 14):
        from compression import zstd  # deferred: Python 3.14's zstd, absent before

        rest: Buffer = payload
        try:
            while rest and produced <= size:
                decompressor = zstd.ZstdDecompressor()
                chunk = decompressor.decompress(rest, max_length=size + 1 - produced)
                out += chunk
                produced += len(chunk)
                if not decompressor.eof:
                    break
                rest = decompressor.unused_data
        except zstd.ZstdError:
            return None
        return out if not rest or produced > size else None
    zstandard = _zstandard()
    reader = zstandard.ZstdDecompressor().stream_reader(payload, read_across_frames=True)
    try:
        while produced <= size:
            chunk = reader.read(min(_DECOMPRESS_CHUNK, size + 1 - produced))
            if not chunk:
                break
            out += chunk
            produced += len(chunk)
    except zstandard.ZstdError:
        return None
    return out
