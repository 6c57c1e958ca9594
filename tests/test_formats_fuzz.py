"""Fuzz every reader of kernelpack.formats from the real fixtures, mutated.

Mutations are bit flips, truncations and overwrites of header fields (found by walking the real
file's structures) with values chosen to break size checks. The only exception a reader may raise
is FormatError; the number of inputs each reader was given is printed at the end of the module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kernelpack.cli.inspection import describe
from kernelpack.errors import FormatError
from kernelpack.formats import (
    EM_AMDGPU,
    EM_CUDA,
    compress_bundle,
    read_bundle,
    read_code_object,
    read_cubin,
    read_ptx,
    write_bundle,
)
from kernelpack.formats import msgpack as _msgpack
from kernelpack.formats.elf import SHT_NOTE, Elf

OBJECTS = Path(__file__).parent / "fixtures" / "objects"
NAMES = (
    "multi.hipfb",
    "compressed.hipfb",
    "compressed_v3.hipfb",
    "gfx90a.co",
    "gfx1100.co",
    "sm_90.cubin",
    "sm_90a.cubin",
    "compute_80.ptx",
)
FIXTURES = {name: (OBJECTS / name).read_bytes() for name in NAMES}
TRIED: Counter[str] = Counter()
REFUSED: Counter[str] = Counter()
EXAMPLES = 500
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _bundle_fields(data: bytes) -> Iterator[int]:
    """Offsets of a plain bundle's count and entry header fields."""
    yield 24
    at = 32
    for _ in range(int.from_bytes(data[24:32], "little")):
        yield from (at, at + 8, at + 16)
        at += 24 + int.from_bytes(data[at + 16 : at + 24], "little")


def _elf_fields(data: bytes, machine: int) -> Iterator[int]:
    """Offsets of ELF header fields, section header fields, notes and .nv.info records."""
    yield from (7, 8, 0x28, 0x30, 0x3A, 0x3C, 0x3E)
    elf = Elf(data, "fixture", machine=machine, what="fixture")
    for section in elf.sections:
        yield from range(section.header_offset, section.header_offset + 64, 8)
        if section.type == SHT_NOTE or section.name.startswith((".nv.info", ".nv.compat")):
            yield from range(section.offset, section.offset + min(section.size, 256), 4)
    for note in elf.notes():
        yield from range(note.desc_offset, note.desc_offset + len(note.desc), 7)


def _fields(name: str) -> list[int]:
    data = FIXTURES[name]
    if name.endswith(".ptx"):
        return [data.index(b".version"), data.index(b".target"), data.index(b".entry")]
    if data.startswith(b"CCOB"):
        return [4, 6, 8, 12, 16, 20, 24, 28]
    if name.endswith(".hipfb"):
        return sorted(set(_bundle_fields(data)))
    return sorted(set(_elf_fields(data, EM_CUDA if name.endswith(".cubin") else EM_AMDGPU)))


FIELDS = {name: _fields(name) for name in NAMES}


def _interesting(width: int, size: int) -> list[int]:
    top = (1 << (8 * width)) - 1
    values = {0, 1, 2, 3, 4, 7, 8, 64, 0x7F, 0x80, 0xFF, size - 1, size, size + 1, top, top >> 1}
    return sorted(v & top for v in values if v >= 0)


@st.composite
def mutated(draw: st.DrawFn, data: bytes, fields: list[int]) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not out:
            break
        operation = draw(st.sampled_from(("flip", "truncate", "overwrite", "overwrite")))
        if operation == "flip":
            at = draw(st.integers(0, len(out) - 1))
            out[at] ^= 1 << draw(st.integers(0, 7))
        elif operation == "truncate":
            del out[draw(st.integers(0, len(out) - 1)) :]
        else:
            width = draw(st.sampled_from((1, 2, 4, 8)))
            if len(out) < width:
                continue
            spots = [f for f in fields if f + width <= len(out)]
            anywhere = st.integers(0, len(out) - width)
            at = draw(st.sampled_from(spots) | anywhere if spots else anywhere)
            value = draw(
                st.sampled_from(_interesting(width, len(out)))
                | st.integers(0, (1 << 8 * width) - 1)
            )
            out[at : at + width] = value.to_bytes(width, "little")
    return bytes(out)


def cases(*names: str) -> st.SearchStrategy[bytes]:
    return st.sampled_from(names).flatmap(lambda name: mutated(FIXTURES[name], FIELDS[name]))


def attempt(reader: str, read: Callable[[bytes, str], Any], data: bytes) -> None:
    """Run one reader on one input: a FormatError is a fine answer, anything else fails."""
    TRIED[reader] += 1
    try:
        read(data, "fuzzed")
    except FormatError as error:
        REFUSED[reader] += 1
        assert error.path.startswith("fuzzed")
        assert error.offset >= 0


@pytest.fixture(scope="module", autouse=True)
def report_counts(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():  # the count shows without -s too
        reporter.ensure_newline()
        for reader in sorted(TRIED):
            tried, refused = TRIED[reader], REFUSED[reader]
            reporter.write_line(
                f"fuzz {reader}: {tried} inputs tried, {refused} refused with FormatError, "
                f"{tried - refused} read"
            )


@FUZZ
@given(cases("multi.hipfb", "compressed.hipfb", "compressed_v3.hipfb"))
def test_fuzz_read_bundle(data: bytes) -> None:
    attempt("read_bundle", read_bundle, data)


@FUZZ
@given(cases("gfx90a.co", "gfx1100.co"))
def test_fuzz_read_code_object(data: bytes) -> None:
    attempt("read_code_object", read_code_object, data)


@FUZZ
@given(cases("sm_90.cubin", "sm_90a.cubin"))
def test_fuzz_read_cubin(data: bytes) -> None:
    attempt("read_cubin", read_cubin, data)


@FUZZ
@given(cases("compute_80.ptx"))
def test_fuzz_read_ptx(data: bytes) -> None:
    attempt("read_ptx", read_ptx, data)


@FUZZ
@given(cases(*FIELDS))
def test_fuzz_describe_any_file(data: bytes) -> None:
    """What `kernelpack inspect` runs: read_image_file, and each bundle entry's image."""
    attempt("describe", describe, data)


SMALL_BUNDLE = write_bundle([("hipv4-amdgcn-amd-amdhsa--gfx1100", FIXTURES["gfx1100.co"])], align=1)
SMALL_FIELDS = sorted(set(_bundle_fields(SMALL_BUNDLE)))


@FUZZ
@given(mutated(SMALL_BUNDLE, SMALL_FIELDS), st.sampled_from(("zstd", "zlib")))
def test_fuzz_bundle_inside_a_valid_ccob(plain: bytes, method: str) -> None:
    """A damaged bundle compressed with a matching hash reaches the parser behind the CCOB."""
    attempt("read_bundle (inside a CCOB)", read_bundle, compress_bundle(plain, method))  # type: ignore[arg-type]


def _metadata_note() -> bytes:
    data = FIXTURES["gfx90a.co"]
    elf = Elf(data, "fixture", machine=EM_AMDGPU, what="fixture")
    return next(note.desc for note in elf.notes() if note.type == 32)


METADATA = _metadata_note()


@FUZZ
@given(st.one_of(mutated(METADATA, list(range(0, 64))), st.binary(max_size=64)))
def test_fuzz_msgpack(data: bytes) -> None:
    attempt("msgpack", lambda d, p: _msgpack.unpack(d, path=p), data)
