"""A MessagePack decoder for the AMDGPU metadata note, safe on hostile input.

The note is the only MessagePack kernelpack reads, and it comes from files a user hands to
``inspect`` or a wheel installs, so the decoder trusts nothing: every length is checked against the
bytes that remain before anything is sliced or built, a container may not claim more elements than
bytes remain, nesting is capped, and every failure is a FormatError naming the byte offset in the
file. Extension types are refused (the metadata never uses them).
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import FormatError

MAX_DEPTH = 32  # the metadata nests four deep (root map, kernels, kernel, args, arg)

# Fixed-size scalars: type byte -> how its big-endian bytes unpack (the size is the Struct's).
_SCALARS: dict[int, struct.Struct] = {
    0xCA: struct.Struct(">f"),
    0xCB: struct.Struct(">d"),
    0xCC: struct.Struct(">B"),
    0xCD: struct.Struct(">H"),
    0xCE: struct.Struct(">I"),
    0xCF: struct.Struct(">Q"),
    0xD0: struct.Struct(">b"),
    0xD1: struct.Struct(">h"),
    0xD2: struct.Struct(">i"),
    0xD3: struct.Struct(">q"),
}
_LENGTH_8, _LENGTH_16, _LENGTH_32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")
# Variable-size types: type byte -> (kind, its length field).
_SIZED: dict[int, tuple[str, struct.Struct]] = {
    0xC4: ("bin", _LENGTH_8),
    0xC5: ("bin", _LENGTH_16),
    0xC6: ("bin", _LENGTH_32),
    0xD9: ("str", _LENGTH_8),
    0xDA: ("str", _LENGTH_16),
    0xDB: ("str", _LENGTH_32),
    0xDC: ("array", _LENGTH_16),
    0xDD: ("array", _LENGTH_32),
    0xDE: ("map", _LENGTH_16),
    0xDF: ("map", _LENGTH_32),
}


class _Reader:
    def __init__(self, data: bytes, path: str, base: int) -> None:
        self.data = data
        self.path = path
        self.base = base
        self.pos = 0

    def fail(self, expected: str) -> FormatError:
        return FormatError(self.path, self.base + self.pos, expected)

    def take(self, size: int, expected: str) -> bytes:
        if size > len(self.data) - self.pos:
            raise self.fail(expected)
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise self.fail(f"MessagePack nested at most {MAX_DEPTH} deep")
        start = self.pos
        tag = self.take(1, "a MessagePack value")[0]
        if tag <= 0x7F:
            return tag
        if tag >= 0xE0:
            return tag - 0x100
        if 0x80 <= tag <= 0x8F:
            return self.mapping(tag & 0x0F, depth)
        if 0x90 <= tag <= 0x9F:
            return self.array(tag & 0x0F, depth)
        if 0xA0 <= tag <= 0xBF:
            return self.text(tag & 0x1F)
        if tag == 0xC0:
            return None
        if tag in (0xC2, 0xC3):
            return tag == 0xC3
        scalar = _SCALARS.get(tag)
        if scalar is not None:
            return scalar.unpack(self.take(scalar.size, "a MessagePack number"))[0]
        sized = _SIZED.get(tag)
        if sized is None:
            self.pos = start
            raise self.fail(f"a MessagePack type byte (0x{tag:02x} is not one the metadata uses)")
        kind, length_field = sized
        (length,) = length_field.unpack(self.take(length_field.size, f"a {kind} length"))
        if kind == "str":
            return self.text(length)
        if kind == "bin":
            return self.take(length, f"{length} bytes of MessagePack bin")
        if kind == "array":
            return self.array(length, depth)
        return self.mapping(length, depth)

    def text(self, length: int) -> str:
        start = self.pos
        raw = self.take(length, f"a {length}-byte MessagePack string")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.pos = start
            raise self.fail("a UTF-8 MessagePack string") from None

    def array(self, count: int, depth: int) -> list[Any]:
        if count > len(self.data) - self.pos:
            raise self.fail(f"{count} array elements (only {len(self.data) - self.pos} bytes left)")
        return [self.value(depth + 1) for _ in range(count)]

    def mapping(self, count: int, depth: int) -> dict[Any, Any]:
        if 2 * count > len(self.data) - self.pos:
            raise self.fail(f"{count} map entries (only {len(self.data) - self.pos} bytes left)")
        result: dict[Any, Any] = {}
        for _ in range(count):
            key_at = self.pos
            key = self.value(depth + 1)
            if not isinstance(key, (str, int, bool)) and key is not None:
                self.pos = key_at
                raise self.fail("a MessagePack map key that is a string or a number")
            if key in result:
                self.pos = key_at
                raise self.fail(f"map keys once each ({key!r} repeats)")
            result[key] = self.value(depth + 1)
        return result


def unpack(data: bytes, *, path: str, base: int = 0) -> Any:
    """Decode one MessagePack value that fills ``data`` exactly.

    ``base`` is where ``data`` starts in the file, so that errors name file offsets.
    """
    reader = _Reader(data, path, base)
    value = reader.value(0)
    if reader.pos != len(data):
        raise reader.fail("the end of the MessagePack value")
    return value
