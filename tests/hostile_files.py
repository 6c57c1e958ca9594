"""Hostile GPU code files, made on the fly and the same every time (no committed binaries).

Each maker writes what an attacker (or a broken tool) could hand to ``kernelpack inspect`` or ship
in a wheel: bundles whose entries alias one region, CCOB blocks that inflate far beyond their
size, ELF files with huge symbol and section tables, and kernel names made of terminal escapes
and rich markup. The ELF files are written from scratch by :func:`elf64` (a cubin or an AMDGPU
code object of the shape the readers expect), the MessagePack by :func:`msgpack`, and the zstd
streams by hand from RLE blocks (RFC 8878, 3.1.1.2), so nothing depends on a compressor's version.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

OBJECTS = Path(__file__).parent / "fixtures" / "objects"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
HIP_ALIGNMENT = 4096
AMD_ID = "hipv4-amdgcn-amd-amdhsa--"
FIXTURE_KERNELS = ("axpy", "tile_sum", "walk", "spill", "mfma")  # objects/src/kernels.hip's
# Names that must reach a terminal as text: rich markup (a closing tag alone is a MarkupError),
# ANSI CSI and OSC sequences (clear the screen, set the window title), a bell, a carriage return
# that would overwrite the line, and a right-to-left override.
HOSTILE_NAMES = (
    "[bold red]markup[/bold red]",
    "[/]",
    "clear\x1b[2J\x1b[H",
    "title\x1b]0;owned\x07",
    "over\rwritten",
    "bidi\u202etxt.exe",
    "emoji :smile: [link=file:///etc/passwd]x[/link]",
)


# ---------------------------------------------------------------------------------------------
# ELF64 and MessagePack writers


@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    data: bytes = b""
    addr: int = 0
    link: int = 0
    info: int = 0
    entsize: int = 0
    nobits_size: int = 0  # the size of a SHT_NOBITS section (it has no bytes in the file)
    alias_of: int = 0  # the index (1 on) of an earlier section whose bytes this one's header names
    alias_skip: int = 0  # ... starting this many bytes into them


def elf64(
    *, machine: int, osabi: int, abi_version: int, flags: int, sections: Sequence[ElfSection]
) -> bytes:
    """A little-endian ELF64 relocatable: header, the given sections (index 1 on), then .shstrtab
    and the section header table. Section names are written once each, in order; a section with
    ``alias_of`` has no bytes of its own, its header names that earlier section's (from
    ``alias_skip`` bytes in)."""
    names = bytearray(b"\0")
    name_at = []
    for section in [*sections, ElfSection(".shstrtab", 3)]:
        name_at.append(len(names))
        names += section.name.encode() + b"\0"
    body = bytearray(64)
    placed: list[int] = []
    sizes: list[int] = []
    for section in sections:
        if section.alias_of:
            placed.append(placed[section.alias_of - 1] + section.alias_skip)
            sizes.append(sizes[section.alias_of - 1] - section.alias_skip)
            continue
        placed.append(len(body))
        sizes.append(section.nobits_size if section.type == 8 else len(section.data))
        body += section.data
        body += bytes(-len(body) % 8)
    shstrtab_at = len(body)
    body += names
    body += bytes(-len(body) % 8)
    shoff = len(body)
    headers = [bytes(64)]
    for i, section in enumerate(sections):
        headers.append(
            struct.pack(
                "<IIQQQQIIQQ",
                name_at[i],
                section.type,
                0,
                section.addr,
                placed[i],
                sizes[i],
                section.link,
                section.info,
                8,
                section.entsize,
            )
        )
    headers.append(
        struct.pack("<IIQQQQIIQQ", name_at[-1], 3, 0, 0, shstrtab_at, len(names), 0, 0, 1, 0)
    )
    ident = b"\x7fELF" + bytes([2, 1, 1, osabi, abi_version]) + bytes(7)
    count = len(headers)
    header = struct.pack(
        "<16sHHIQQQIHHHHHH",
        ident,
        1,
        machine,
        1,
        0,
        0,
        shoff,
        flags,
        64,
        0,
        0,
        64,
        count,
        count - 1,
    )
    body[:64] = header
    return bytes(body) + b"".join(headers)


def symbol(
    name_at: int, info: int, other: int, section: int, value: int = 0, size: int = 0
) -> bytes:
    return struct.pack("<IBBHQQ", name_at, info, other, section, value, size)


def msgpack(value: object) -> bytes:
    """The MessagePack of maps, lists, strings and non-negative integers (what the note holds)."""
    if isinstance(value, dict):
        out = _sized(0x80, 0xDE, 0xDF, len(value), fix_limit=16)
        return out + b"".join(msgpack(k) + msgpack(v) for k, v in value.items())
    if isinstance(value, list):
        out = _sized(0x90, 0xDC, 0xDD, len(value), fix_limit=16)
        return out + b"".join(msgpack(v) for v in value)
    if isinstance(value, str):
        raw = value.encode()
        if len(raw) < 32:
            return bytes([0xA0 | len(raw)]) + raw
        return b"\xdb" + struct.pack(">I", len(raw)) + raw
    if isinstance(value, int) and value >= 0:
        return bytes([value]) if value < 128 else b"\xce" + struct.pack(">I", value)
    raise TypeError(f"no MessagePack for {value!r}")


def _sized(fix: int, wide16: int, wide32: int, count: int, *, fix_limit: int) -> bytes:
    if count < fix_limit:
        return bytes([fix | count])
    if count < 1 << 16:
        return bytes([wide16]) + struct.pack(">H", count)
    return bytes([wide32]) + struct.pack(">I", count)


# ---------------------------------------------------------------------------------------------
# Cubins and code objects of chosen kernel names


def cubin(
    names: Sequence[str],
    *,
    info_sections: bool = False,
    strtab: bytes | None = None,
    name_offsets: Sequence[int] | None = None,
    shared_info: bytes | None = None,
    shift: int = 0,
) -> bytes:
    """An sm_90 cubin (CUDA ELF ABI 8) whose kernels have these names, each with 32 registers.

    ``info_sections`` adds a ``.nv.info.<name>`` (a 128-thread launch bound) and a
    ``.nv.shared.<name>`` (256 bytes) per kernel: the per-kernel sections a reader looks up by
    name. ``shared_info`` gives each distinct name a ``.nv.info.<name>`` of those records, all
    of them headers over one region (each ``shift`` bytes further in than the one before, when
    given). ``strtab`` and ``name_offsets`` replace the string table and
    where each symbol's name starts in it.
    """
    if strtab is None:
        table = bytearray(b"\0")
        offsets = []
        for name in names:
            offsets.append(len(table))
            table += name.encode() + b"\0"
        strtab, name_offsets = bytes(table), offsets
    assert name_offsets is not None
    kernel_info = (1 << 4) | 2  # STB_GLOBAL, STT_FUNC
    symbols = symbol(0, 0, 0, 0) + b"".join(symbol(at, kernel_info, 0x10, 3) for at in name_offsets)
    registers = b"".join(
        struct.pack("<BBHII", 4, 0x2F, 8, index, 32) for index in range(1, len(name_offsets) + 1)
    )
    sections = [
        ElfSection(".strtab", 3, strtab),
        ElfSection(".symtab", 2, symbols, link=1, entsize=24),
        ElfSection(".nv.info", 0x70000000, registers),
    ]
    if info_sections:
        bound = struct.pack("<BBHIII", 4, 0x05, 12, 128, 1, 1)
        for name in names:
            sections.append(ElfSection(f".nv.info.{name}", 0x70000000, bound))
            sections.append(ElfSection(f".nv.shared.{name}", 8, nobits_size=256))
    if shared_info is not None:
        first = len(sections) + 1
        for i, name in enumerate(dict.fromkeys(names)):
            data, alias = (shared_info, 0) if i == 0 else (b"", first)
            section = ElfSection(f".nv.info.{name}", 0x70000000, data, alias_of=alias)
            sections.append(replace(section, alias_skip=shift * i))
    return elf64(machine=190, osabi=0x33, abi_version=8, flags=90 << 8, sections=sections)


def kparam_records(count: int) -> bytes:
    """``count`` EIATTR_KPARAM_INFO records: one-byte parameters at ordinals and offsets 0 on."""
    return b"".join(
        struct.pack("<BBHIHHI", 4, 0x17, 12, 0, ordinal, ordinal, 1 << 18)
        for ordinal in range(count)
    )


def code_object(
    names: Sequence[str],
    *,
    filler_symbols: int = 0,
    symbol_copies: int = 0,
    filler_notes: int = 0,
    note_copies: int = 0,
    shifted: bool = False,
) -> bytes:
    """A gfx90a code object (v6) whose kernels have these names: metadata note, descriptors.

    ``filler_symbols`` nameless symbols follow the kernels' in .dynsym, and ``symbol_copies``
    more headers (SHT_SYMTAB and SHT_DYNSYM in turn) name the same bytes. ``filler_notes`` empty
    notes fill a note section ahead of the metadata's, and ``note_copies`` more headers name it.
    ``shifted`` starts each copy one symbol or one note further in than the one before.
    """
    kernels = [
        {
            ".name": name,
            ".symbol": f"{name}.kd",
            ".args": [{".offset": 0, ".size": 8, ".value_kind": "global_buffer"}],
            ".kernarg_segment_size": 8,
            ".sgpr_count": 16,
            ".vgpr_count": 8,
            ".group_segment_fixed_size": 0,
            ".private_segment_fixed_size": 0,
            ".wavefront_size": 64,
            ".max_flat_workgroup_size": 256,
        }
        for name in names
    ]
    metadata = msgpack(
        {
            "amdhsa.target": "amdgcn-amd-amdhsa--gfx90a",
            "amdhsa.kernels": kernels,
            "amdhsa.version": [1, 2],
        }
    )
    note = struct.pack("<III", 7, len(metadata), 32) + b"AMDGPU\0\0" + metadata
    note += bytes(-len(note) % 4)
    sections = []
    if filler_notes:
        filler = struct.pack("<III", 2, 0, 1) + b"X\0\0\0"
        sections.append(ElfSection(".note.filler", 7, filler * filler_notes))
        sections += [
            ElfSection(".note.filler", 7, alias_of=1, alias_skip=len(filler) * i * shifted)
            for i in range(1, note_copies + 1)
        ]
    rodata = len(sections) + 2
    table = bytearray(b"\0")
    symbols = symbol(0, 0, 0, 0)
    descriptor_address = 0x1000
    for i, name in enumerate(names):
        symbols += symbol(len(table), (1 << 4) | 1, 0, rodata, descriptor_address + 64 * i, 64)
        table += f"{name}.kd".encode() + b"\0"
    symbols += symbol(0, 1, 0, rodata) * filler_symbols  # nameless local objects
    sections += [
        ElfSection(".note", 7, note),
        ElfSection(".rodata", 1, bytes(64 * len(names)), addr=descriptor_address),
        ElfSection(".dynstr", 3, bytes(table)),
        ElfSection(".dynsym", 11, symbols, link=rodata + 1, entsize=24),
    ]
    dynsym = len(sections)
    sections += [
        ElfSection(
            ".symtab",
            (2, 11)[i % 2],
            link=rodata + 1,
            entsize=24,
            alias_of=dynsym,
            alias_skip=24 * i * shifted,
        )
        for i in range(1, symbol_copies + 1)
    ]
    return elf64(machine=224, osabi=64, abi_version=4, flags=0x3F, sections=sections)


# ---------------------------------------------------------------------------------------------
# Bundles


def plain_bundle(entries: Sequence[tuple[str, int, int]], payload: bytes, payload_at: int) -> bytes:
    """A bundle header of (id, offset, size) entries, then ``payload`` placed at ``payload_at``."""
    header = bytearray(BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    for entry_id, offset, size in entries:
        header += struct.pack("<QQQ", offset, size, len(entry_id)) + entry_id.encode()
    assert len(header) <= payload_at
    return bytes(header) + bytes(payload_at - len(header)) + payload


def aliasing_bundle(count: int, region: int) -> bytes:
    """``count`` entries, each the same ``region`` bytes: a real code object and zeros after it.

    Copied per entry, the bytes would take ``count * region``; the file is about ``region``.
    """
    image = (OBJECTS / "gfx90a.co").read_bytes()
    ids = [f"{AMD_ID}gfx90a:alias{i}" for i in range(count)]
    payload_at = 32 + sum(24 + len(i) for i in ids)
    payload = image + bytes(region - len(image))
    return plain_bundle([(i, payload_at, region) for i in ids], payload, payload_at)


def zstd_frame(prefix: bytes, zeros: int) -> bytes:
    """A zstd frame of ``prefix`` (one raw block) then ``zeros`` zero bytes (RLE blocks, 4 bytes
    per 128 KiB), with no content size in its header."""
    block = 1 << 17
    assert len(prefix) < block
    frame = bytearray(b"\x28\xb5\x2f\xfd" + bytes([0x00, 7 << 3]))  # a 128 KiB window
    left = zeros
    frame += ((len(prefix) << 3) | (left == 0)).to_bytes(3, "little") + prefix  # raw block
    while left:
        part = min(block, left)
        left -= part
        frame += ((part << 3) | (1 << 1) | (left == 0)).to_bytes(3, "little") + b"\0"  # RLE
    return bytes(frame)


def ccob(
    payload: bytes, uncompressed: int, *, version: int = 2, method: int = 1, digest: int = 0
) -> bytes:
    """A CCOB header claiming ``uncompressed`` bytes and ``digest``, then ``payload``."""
    common = b"CCOB" + struct.pack("<HH", version, method)
    if version == 1:
        return common + struct.pack("<IQ", uncompressed, digest) + payload
    total = len(common) + (16 if version == 2 else 24) + len(payload)
    layout = "<IIQ" if version == 2 else "<QQQ"
    return common + struct.pack(layout, total, uncompressed, digest) + payload


def md5_low64(data: bytes, zeros: int = 0) -> int:
    """The CCOB hash of ``data`` followed by ``zeros`` zero bytes (hashed without making them)."""
    digest = hashlib.md5(data)
    chunk = bytes(1 << 20)
    while zeros:
        digest.update(chunk[: min(zeros, len(chunk))])
        zeros -= min(zeros, len(chunk))
    return int.from_bytes(digest.digest()[:8], "little")


def zstd_bomb(size: int) -> bytes:
    """One CCOB v3 whose zstd stream inflates to ``size`` zero bytes (its hash left 0)."""
    return ccob(zstd_frame(b"", size), size, version=3)


def ccob_train(blocks: int, each: int) -> bytes:
    """``blocks`` CCOBs in a row, each a valid bundle of no entries padded with zeros to ``each``
    bytes, with its right hash: each small, all of them together large."""
    header = BUNDLE_MAGIC + bytes(8)
    digest = md5_low64(header + bytes(each - len(header)))
    return ccob(zstd_frame(header, each - len(header)), each, digest=digest) * blocks


def big_bundle(size: int, padding: int) -> bytes:
    """A CCOB of a ``size``-byte bundle (about 1 GiB: the most a file's budget allows) whose one
    entry is a real code object and zeros to the end, then a CCOB of ``padding`` raw bytes that
    makes the file large enough (1/128 of the total) for that budget."""
    image = (OBJECTS / "gfx90a.co").read_bytes()
    at = HIP_ALIGNMENT
    head = plain_bundle([(f"{AMD_ID}gfx90a", at, size - at)], image, at)
    big = ccob(
        zstd_frame(head, size - len(head)),
        size,
        version=3,
        digest=md5_low64(head, size - len(head)),
    )
    empty = BUNDLE_MAGIC + bytes(8) + bytes(padding - len(BUNDLE_MAGIC) - 8)
    block = 1 << 17
    frame = bytearray(b"\x28\xb5\x2f\xfd" + bytes([0x00, 7 << 3]))
    for start in range(0, padding, block):  # raw blocks: the padding takes room in the file
        part = empty[start : start + block]
        frame += ((len(part) << 3) | (start + block >= padding)).to_bytes(3, "little") + part
    return big + ccob(bytes(frame), padding, version=3, digest=md5_low64(empty))


# ---------------------------------------------------------------------------------------------
# The set the address-space test runs: name -> (maker, what a correct reading gives, or None
# where the file must be refused with exit status 2)


@dataclass(frozen=True)
class Hostile:
    make: Callable[[], bytes]
    kernels: tuple[str, ...] | None  # the kernel names a correct reading lists, None: refused
    seconds: float = 5  # the bar; 60 for the linear cases over 20 MB


X3 = ("x0", "x1", "x2")
K3000 = tuple(f"k{i}" for i in range(3000))
PTX_HEAD = b".version 8.0\n.target sm_80\n.address_size 64\n"
DIGITS = b"9" * 5000  # past the 4,300 digits that int() converts


def _ptx_kernel(params: bytes) -> bytes:
    """PTX of one kernel ``k`` with this parameter list."""
    return PTX_HEAD + b".visible .entry k(" + params + b")\n{\n\tret;\n}\n"


def _linkage_ptx(tokens: int) -> bytes:
    """``tokens`` linkage directives (``.visible .weak .extern``, 9 bytes each) that no
    ``.entry`` follows, then one kernel."""
    run = b".visible .weak    .extern  " * (tokens // 3)
    return PTX_HEAD + run + b";\n.visible .entry real()\n{\n\tret;\n}\n"


def _far_nobits_info_cubin() -> bytes:
    """A cubin whose .nv.info is SHT_NOBITS at a terabyte's offset (a NOBITS section's place is
    not checked against the file: it has no bytes there)."""
    data = bytearray(cubin(["k"]))
    shoff = struct.unpack_from("<Q", data, 40)[0]
    header = shoff + 3 * 64  # .nv.info: section 3
    struct.pack_into("<I", data, header + 4, 8)  # sh_type SHT_NOBITS
    struct.pack_into("<Q", data, header + 24, 1 << 40)  # sh_offset
    return bytes(data)


def _shared_name_cubin(count: int) -> bytes:
    """``count`` kernels that all have one 256 KiB name: about 0.55 MB for 8,192 of them, whose
    report would hold the name 8,192 times (2 GiB)."""
    text = b"\0" + b"k" * (256 * 1024) + b"\0"
    return cubin(["x"] * count, strtab=text, name_offsets=[1] * count)


def _string_overlap_cubin() -> bytes:
    """40,000 kernels whose names all start inside one NUL-free megabyte of the string table."""
    text = b"\0" + b"k" * (1 << 20) + b"\0"
    return cubin(["x"] * 40000, strtab=text, name_offsets=list(range(1, 40001)))


HOSTILE_FILES: dict[str, Hostile] = {
    # 1.3 MB: 4,000 entries aliasing one MiB (4 GiB if each entry were copied)
    "aliasing.hipfb": Hostile(lambda: aliasing_bundle(4000, 1 << 20), FIXTURE_KERNELS),
    # 98 KB: one CCOB of 3 GiB of zeros
    "bomb.hipfb": Hostile(lambda: zstd_bomb(3 << 30), None),
    # 128 CCOBs of 15 MiB each, every one within the floor, 1.9 GiB together
    "ccob-train.hipfb": Hostile(lambda: ccob_train(128, 15 << 20), None),
    # 2.5 MB: 10,000 kernels with their own .nv.info.* and .nv.shared.* sections
    "sections.cubin": Hostile(
        lambda: cubin([f"kernel_{i:05d}" for i in range(10000)], info_sections=True),
        tuple(f"kernel_{i:05d}" for i in range(10000)),
    ),
    "names-overlap.cubin": Hostile(_string_overlap_cubin, None),
    "names.cubin": Hostile(lambda: cubin(HOSTILE_NAMES, info_sections=True), HOSTILE_NAMES),
    "names.co": Hostile(lambda: code_object(HOSTILE_NAMES), HOSTILE_NAMES),
    # 3,000 entries that are one code object (read 3,000 times, 15 s, before they were views)
    "aliased-code-objects.hipfb": Hostile(
        lambda: aliasing_bundle(3000, len((OBJECTS / "gfx90a.co").read_bytes())), FIXTURE_KERNELS
    ),
    # a code object of 3,000 kernels
    "kernels.co": Hostile(
        lambda: code_object([f"k{i}" for i in range(3000)]), tuple(f"k{i}" for i in range(3000))
    ),
    # PTX ending in 200,000 block comments that are never closed
    "comments.ptx": Hostile(
        lambda: b".version 8.0\n.target sm_80\n.visible .entry real(\n)\n" + b"/* " * 200000,
        ("real",),
    ),
    # 360 KB of 40,000 linkage directives: a regex rescanned the run from each (> 15 s)
    "linkage.ptx": Hostile(lambda: _linkage_ptx(40000), ("real",)),
    # numbers past int()'s digit limit, and .align without its number (ValueError, IndexError)
    "address-size.ptx": Hostile(lambda: PTX_HEAD.replace(b"64", DIGITS), None),
    "array-size.ptx": Hostile(lambda: _ptx_kernel(b".param .u32 p[" + DIGITS + b"]"), None),
    "align-digits.ptx": Hostile(
        lambda: _ptx_kernel(b".param .align " + DIGITS + b" .b8 p[4]"), None
    ),
    "align-no-value.ptx": Hostile(lambda: _ptx_kernel(b".param .align .b8 p[16]"), None),
    "align-no-value-last.ptx": Hostile(lambda: _ptx_kernel(b".param .u32 .align p"), None),
    # 2,000 SYMTAB and DYNSYM headers over one table of 10,000 symbols (107 s)
    "symbol-tables.co": Hostile(
        lambda: code_object(X3, filler_symbols=10000, symbol_copies=2000), X3
    ),
    # ... each starting one symbol further in: distinct tables, overlapping
    "shifted-symbol-tables.co": Hostile(
        lambda: code_object(X3, filler_symbols=10000, symbol_copies=2000, shifted=True), None
    ),
    # 2,500 note headers over one section of 20,000 notes, the metadata note after them (175 s)
    "note-sections.co": Hostile(lambda: code_object(X3, filler_notes=20000, note_copies=2500), X3),
    "shifted-note-sections.co": Hostile(
        lambda: code_object(X3, filler_notes=20000, note_copies=2500, shifted=True), None
    ),
    # 0.55 MB: 8,192 kernels of one 256 KiB name (MemoryError writing a 2 GiB report, 9 s)
    "shared-name.cubin": Hostile(lambda: _shared_name_cubin(8192), None),
    # 1.3 MB: 3,000 kernels whose .nv.info.<name> sections are headers over one region of 60,000
    # parameters (MemoryError, 30 s)
    "shared-info.cubin": Hostile(lambda: cubin(K3000, shared_info=kparam_records(60000)), None),
    # 1.7 MB: 20,000 symbols of one name, whose .nv.info.<name> has 60,000 parameters
    # (MemoryError, 67 s)
    "repeated-params.cubin": Hostile(
        lambda: cubin(
            ["k"] * 20000,
            strtab=b"\0k\0",
            name_offsets=[1] * 20000,
            shared_info=kparam_records(60000),
        ),
        None,
    ),
    # 3,000 kernels whose .nv.info.<name> sections are headers over one region of 60,000 records
    # the reader skips (parsed once per kernel: 180 million records)
    "shared-records.cubin": Hostile(
        lambda: cubin(K3000, shared_info=struct.pack("<BBH", 1, 0x99, 0) * 60000), K3000
    ),
    # ... each one record further in: distinct sections, overlapping
    "shifted-records.cubin": Hostile(
        lambda: cubin(K3000, shared_info=struct.pack("<BBH", 1, 0x99, 0) * 60000, shift=4), None
    ),
    # a SHT_NOBITS .nv.info placed past the end (struct.error)
    "nobits-info.cubin": Hostile(_far_nobits_info_cubin, None),
    # 8.4 MB: a CCOB of 1,000 MiB whose entry is a code object and zeros: read whole, one copy
    # of the entry more than the 2 GiB held (MemoryError). Inflating and hashing 1 GiB takes
    # 3 to 5 s here, so this linear case gets 30 s.
    "big-bundle.hipfb": Hostile(lambda: big_bundle(1000 << 20, 8 << 20), FIXTURE_KERNELS, 30),
    # the linear cases, 20 MB each
    "linkage-20mb.ptx": Hostile(lambda: _linkage_ptx(2_300_000), ("real",), seconds=60),
    "symbol-tables-20mb.co": Hostile(
        lambda: code_object(X3, filler_symbols=700_000, symbol_copies=65000), X3, seconds=60
    ),
    "note-sections-20mb.co": Hostile(
        lambda: code_object(X3, filler_notes=1_000_000, note_copies=65000), X3, seconds=60
    ),
}


def write_hostile_files(folder: Path) -> dict[str, Path]:
    """Write every file of :data:`HOSTILE_FILES` into ``folder``; their paths by name."""
    paths = {}
    for name, hostile in HOSTILE_FILES.items():
        paths[name] = folder / name
        paths[name].write_bytes(hostile.make())
    return paths
