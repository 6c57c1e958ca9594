"""The little of ELF64 that GPU code objects need: header, sections, symbols, notes.

Both AMDGPU code objects and NVIDIA cubins are little-endian ELF64 files. This reader checks every
offset and size against the file before it reads, so a truncated or hostile file ends in one
FormatError that names the byte offset of the field at fault.

Work stays linear in the file: sections are found by name through one dict, and names are read
once per place in their string table, all of them together within :data:`NAMES_PER_FILE_BYTE`
times the file (names in a string table may overlap, so a small hostile file could otherwise name
each of thousands of symbols with the same megabyte of text). What a reader reports from the file
is charged to the same budget each time it reports it (:meth:`Elf.charge_names`), so that a
report stays proportional to the file too. Section headers may name the same
bytes too: a symbol table or note section that several headers name is read once, and the
regions read (symbol tables, note sections, a reader's own record sections) may together be no
larger than the file, which is all the room that regions that do not overlap can take.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

from ..errors import FormatError

MAGIC = b"\x7fELF"
ELFCLASS64 = 2
ELFDATA2LSB = 1
SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_DYNSYM = 11
STT_FUNC = 2
STB_LOCAL = 0
STB_GLOBAL = 1
STB_WEAK = 2

# What the readers accept: a file's bytes, or a view of part of them (a bundle entry).
Buffer: TypeAlias = bytes | bytearray | memoryview

NAMES_PER_FILE_BYTE = 4  # names read and reported, in bytes, per byte of the file
NAMES_FLOOR_BYTES = 1 << 20

_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
SYMBOL_SIZE = _SYMBOL.size  # 24: a symbol's place in its table is index * SYMBOL_SIZE
_NOTE = struct.Struct("<III")


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    header_offset: int  # where this section's header sits in the file, for error messages


@dataclass(frozen=True)
class Symbol:
    index: int
    name: str
    value: int
    size: int
    type: int
    bind: int
    other: int
    section: int


@dataclass(frozen=True)
class Note:
    name: bytes
    type: int
    desc: bytes
    desc_offset: int  # file offset of the descriptor


class Elf:
    """A parsed ELF64 little-endian file: header fields and section table."""

    def __init__(self, data: Buffer, path: str, *, machine: int, what: str) -> None:
        # a view (a bundle entry: perhaps most of a decompressed bundle of 1 GiB) is read in
        # place, never copied whole; only the names, notes and records taken from it are copied
        self.data: bytes | memoryview = (
            data if isinstance(data, bytes) else memoryview(data).toreadonly().cast("B")
        )
        data = self.data
        self.path = path
        if len(data) < _HEADER.size:
            raise FormatError(path, len(data), f"a {_HEADER.size}-byte ELF header ({what})")
        header = _HEADER.unpack_from(data, 0)
        ident, e_machine, shoff, flags = header[0], header[2], header[6], header[7]
        shentsize, shnum, shstrndx = header[11:14]
        if ident[:4] != MAGIC:
            raise FormatError(path, 0, f"the ELF magic ({what})")
        if ident[4] != ELFCLASS64 or ident[5] != ELFDATA2LSB:
            raise FormatError(path, 4, f"a 64-bit little-endian ELF file ({what})")
        if e_machine != machine:
            raise FormatError(path, 18, f"ELF machine {machine} ({what}), not {e_machine}")
        self.osabi: int = ident[7]
        self.abi_version: int = ident[8]
        self.flags: int = flags
        self._names: dict[tuple[int, int, int], str] = {}
        self._names_left = max(NAMES_FLOOR_BYTES, NAMES_PER_FILE_BYTE * len(data))
        self._symbol_tables: dict[tuple[int, int, int, int], tuple[Symbol, ...]] = {}
        self._notes_read: set[tuple[int, int]] = set()
        self._region_bytes_left = len(data)
        self.sections = self._sections(shoff, shentsize, shnum, shstrndx)
        self._by_name: dict[str, Section] = {}
        for section in self.sections:
            self._by_name.setdefault(section.name, section)

    def fail(self, offset: int, expected: str) -> FormatError:
        return FormatError(self.path, offset, expected)

    def charge_region(self, section: Section, what: str) -> None:
        """Account for reading ``section``'s bytes as ``what`` (callers read each place once).

        The regions read are charged to one budget of the file's size: regions that do not
        overlap fit in the file, so only overlapping ones (a hostile file's thousands of headers
        over shifted places of one table) can exhaust it, and they are refused.
        """
        self._region_bytes_left -= section.size
        if self._region_bytes_left < 0:
            raise self.fail(
                section.header_offset,
                f"sections that do not overlap: {what} {section.index} ({section.size} bytes at "
                f"{section.offset}) brings the bytes read beyond the {len(self.data)} of the file",
            )

    def _sections(self, shoff: int, shentsize: int, shnum: int, shstrndx: int) -> list[Section]:
        if shnum == 0:
            return []
        if shentsize != _SECTION.size:
            raise self.fail(58, f"section headers of {_SECTION.size} bytes, not {shentsize}")
        if shoff > len(self.data) or shnum * _SECTION.size > len(self.data) - shoff:
            raise self.fail(40, f"{shnum} section headers at offset {shoff} inside the file")
        if shstrndx >= shnum:
            raise self.fail(62, f"a section name table index below {shnum}, not {shstrndx}")
        raw = [_SECTION.unpack_from(self.data, shoff + i * _SECTION.size) for i in range(shnum)]
        for i, (_n, sh_type, _f, _a, offset, size, *_rest) in enumerate(raw):
            if sh_type != SHT_NOBITS and (
                offset > len(self.data) or size > len(self.data) - offset
            ):
                raise self.fail(
                    shoff + i * _SECTION.size, f"section {i} ({size} bytes at {offset}) in the file"
                )
        names = raw[shstrndx]
        names_offset, names_size = names[4], names[5]
        sections = []
        for i, (name, sh_type, _flags, addr, offset, size, link, info, _al, _es) in enumerate(raw):
            header_offset = shoff + i * _SECTION.size
            text = self._string(names_offset, names_size, name, header_offset)
            sections.append(
                Section(i, text, sh_type, addr, offset, size, link, info, header_offset)
            )
        return sections

    def _string(self, table_offset: int, table_size: int, at: int, where: int) -> str:
        if at >= table_size:
            raise self.fail(where, f"a string table index below {table_size}, not {at}")
        key = (table_offset, table_size, at)
        known = self._names.get(key)
        if known is not None:
            return known
        start = table_offset + at
        end = self._find_nul(start, table_offset + table_size)
        if end < 0:
            raise self.fail(start, "a NUL-terminated string inside its string table")
        self.charge_names(end - start, start)
        try:
            text = str(self.data[start:end], "utf-8")
        except UnicodeDecodeError:
            raise self.fail(start, "a UTF-8 name") from None
        self._names[key] = text
        return text

    def _find_nul(self, start: int, end: int) -> int:
        """Where the first NUL in ``start:end`` is, -1 if none; a view is searched in pieces
        that double, so finding a name costs about its length, never a copy of its table."""
        if isinstance(self.data, bytes):
            return self.data.find(b"\0", start, end)
        at, step = start, 256
        while at < end:
            stop = min(end, at + step)
            found = bytes(self.data[at:stop]).find(b"\0")
            if found >= 0:
                return at + found
            at, step = stop, 2 * step
        return -1

    def take(self, start: int, size: int) -> bytes:
        """A copy of ``size`` bytes at ``start`` (checked by the caller to lie in the file)."""
        return bytes(self.data[start : start + size])

    def charge_names(self, size: int, at: int) -> None:
        """Charge ``size`` bytes of names (or of records about a name) read or reported at ``at``
        to the budget of :data:`NAMES_PER_FILE_BYTE` times the file (at least 1 MiB)."""
        self._names_left -= size
        if self._names_left < 0:
            limit = max(NAMES_FLOOR_BYTES, NAMES_PER_FILE_BYTE * len(self.data))
            raise self.fail(
                at,
                f"names and records of at most {limit} bytes in all, read and reported "
                f"({NAMES_PER_FILE_BYTE} times the file; the file repeats names, overlaps them "
                "or shares records between kernels)",
            )

    def contents(self, section: Section) -> bytes:
        if section.type == SHT_NOBITS:
            return b""
        return self.take(section.offset, section.size)

    def section(self, name: str) -> Section | None:
        """The first section of that name, if any."""
        return self._by_name.get(name)

    def symbols(self, table: Section) -> tuple[Symbol, ...]:
        """The symbols of a SHT_SYMTAB or SHT_DYNSYM section, read once per table and names."""
        key = self._symbol_table_key(table)
        known = self._symbol_tables.get(key)
        if known is not None:
            return known
        self.charge_region(table, "symbol table")
        strings_offset, strings_size = key[2:]
        symbols = []
        for i in range(table.size // _SYMBOL.size):
            at = table.offset + i * _SYMBOL.size
            name, info, other, shndx, value, size = _SYMBOL.unpack_from(self.data, at)
            text = self._string(strings_offset, strings_size, name, at) if name else ""
            symbols.append(Symbol(i, text, value, size, info & 0xF, info >> 4, other, shndx))
        self._symbol_tables[key] = found = tuple(symbols)
        return found

    def symbol_tables(self, *types: int) -> Iterator[tuple[Symbol, ...]]:
        """The symbols of each section of these types; a table several headers name comes once."""
        seen: set[tuple[int, int, int, int]] = set()
        for section in self.sections:
            if section.type in types:
                key = self._symbol_table_key(section)
                if key not in seen:
                    seen.add(key)
                    yield self.symbols(section)

    def _symbol_table_key(self, table: Section) -> tuple[int, int, int, int]:
        """Where a symbol table and its string table are: what its symbols depend on."""
        if table.link >= len(self.sections):
            raise self.fail(table.header_offset, f"symbol table {table.index} linked to a section")
        strings = self.sections[table.link]
        if strings.type == SHT_NOBITS:
            raise self.fail(table.header_offset, "a symbol string table with contents")
        return table.offset, table.size, strings.offset, strings.size

    def notes(self) -> Iterator[Note]:
        """Every note record of every SHT_NOTE section (4-byte aligned, as both vendors write); a
        section that several headers name is read once."""
        seen: set[tuple[int, int]] = set()
        for section in self.sections:
            if section.type != SHT_NOTE or (section.offset, section.size) in seen:
                continue
            seen.add((section.offset, section.size))
            if (section.offset, section.size) not in self._notes_read:  # charged once
                self._notes_read.add((section.offset, section.size))
                self.charge_region(section, "note section")
            at, end = section.offset, section.offset + section.size
            while at < end:
                if end - at < _NOTE.size:
                    raise self.fail(at, "a 12-byte note header")
                name_size, desc_size, note_type = _NOTE.unpack_from(self.data, at)
                name_at = at + _NOTE.size
                desc_at = name_at + _align4(name_size)
                next_at = desc_at + _align4(desc_size)
                if next_at > end:
                    raise self.fail(at, f"a note of {next_at - at} bytes inside its section")
                name = self.take(name_at, name_size).rstrip(b"\0")
                yield Note(name, note_type, self.take(desc_at, desc_size), desc_at)
                at = next_at

    def symbol_bytes(self, symbol: Symbol, size: int) -> tuple[bytes, int]:
        """``size`` bytes at a symbol's address in its section, and their file offset."""
        if not 0 < symbol.section < len(self.sections):
            raise self.fail(0, f"symbol {symbol.name} in a section of the file")
        section = self.sections[symbol.section]
        start = symbol.value - section.addr
        if section.type == SHT_NOBITS or not 0 <= start <= section.size - size:
            raise self.fail(
                section.header_offset, f"{size} bytes of {symbol.name} inside {section.name}"
            )
        at = section.offset + start
        return self.take(at, size), at


def _align4(value: int) -> int:
    return (value + 3) & ~3
