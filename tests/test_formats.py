"""kernelpack.formats against real files: the fixtures hipcc and nvcc made from one source.

Expectations come from the source (tests/fixtures/objects/src/kernels.hip: which kernels, their
launch bound, their shared arrays), from how the fixtures were made (tests/fixtures/make_objects.py:
which targets) and, in the toolchain tests, from LLVM's own tools and ptxas.
"""

from __future__ import annotations

import hashlib
import random
import re
import struct
import subprocess
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from kernelpack import formats
from kernelpack.errors import FormatError, UsageError
from kernelpack.formats import (
    Bundle,
    CodeObject,
    Cubin,
    Ptx,
    compress_bundle,
    read_bundle,
    read_code_object,
    read_cubin,
    read_image_file,
    read_ptx,
    split_bundle_id,
    write_bundle,
)
from kernelpack.formats import msgpack as _msgpack
from kernelpack.formats.elf import SHT_DYNSYM, Elf

if TYPE_CHECKING:
    from buildsys.toolchain import Toolchain

OBJECTS = Path(__file__).parent / "fixtures" / "objects"
KERNELS = ("axpy", "tile_sum", "walk", "spill", "mfma")  # the source's kernels, in source order
MULTI_TARGETS = ("gfx90a", "gfx942", "gfx1100", "gfx11-generic", "gfx908:sramecc+:xnack-")
HOST = "host-x86_64-unknown-linux-gnu-"
TILE_BYTES = 256 * 4  # tile_sum's __shared__ float tile[256]
WALK_TABLE_BYTES = 32 * 4  # walk's int table[32]


def fixture(name: str) -> bytes:
    return (OBJECTS / name).read_bytes()


def amd_id(target: str) -> str:
    return f"hipv4-amdgcn-amd-amdhsa--{target}"


# ---------------------------------------------------------------------------------------------
# Uncompressed bundles


def test_multi_target_bundle_lists_host_then_sorted_targets() -> None:
    entries = read_bundle(fixture("multi.hipfb"), "multi.hipfb")
    assert [e.id for e in entries] == [HOST, *sorted(amd_id(t) for t in MULTI_TARGETS)]
    host, *devices = entries
    assert (host.kind, host.triple, host.target, host.size) == (
        "host",
        "x86_64-unknown-linux-gnu",
        "",
        0,
    )
    for entry in devices:
        assert entry.offset % 4096 == 0
        assert (entry.kind, entry.triple) == ("hipv4", "amdgcn-amd-amdhsa-")
        image = read_code_object(entry.data, entry.id)
        assert str(image.target) == entry.target
        assert [k.name for k in image.kernels] == list(KERNELS)


def test_entry_offsets_locate_the_bytes_in_the_file() -> None:
    data = fixture("multi.hipfb")
    for entry in read_bundle(data, "multi.hipfb"):
        assert data[entry.offset : entry.offset + entry.size] == entry.data


def test_writer_reproduces_hipccs_bundle_byte_for_byte() -> None:
    data = fixture("multi.hipfb")
    devices = [(e.id, e.data) for e in read_bundle(data, "multi.hipfb") if e.kind != "host"]
    random.Random(7).shuffle(devices)
    assert write_bundle(devices) == data


def test_writer_alignment_one_packs_entries() -> None:
    images = [(amd_id("gfx90a"), fixture("gfx90a.co")), (amd_id("gfx1100"), fixture("gfx1100.co"))]
    packed = write_bundle(images, align=1)
    entries = read_bundle(packed, "packed")
    assert len(packed) == entries[-1].offset + entries[-1].size
    assert sum(e.size for e in entries) == len(fixture("gfx90a.co")) + len(fixture("gfx1100.co"))
    assert {e.id: e.data for e in entries[1:]} == dict(images)


@pytest.mark.parametrize(
    "entries",
    [
        [(HOST, b"")],
        [(amd_id("gfx90a"), b"a"), (amd_id("gfx90a"), b"b")],
        [("gfx90a", b"a")],
        [(amd_id("gfx90a:xnack\u00b1"), b"a")],
    ],
    ids=["host entry", "repeated id", "not kind-triple-target", "not ascii"],
)
def test_writer_refuses_bad_entries(entries: list[tuple[str, bytes]]) -> None:
    with pytest.raises(UsageError):
        write_bundle(entries)


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        (
            amd_id("gfx90a:sramecc+:xnack-"),
            ("hipv4", "amdgcn-amd-amdhsa-", "gfx90a:sramecc+:xnack-"),
        ),
        (amd_id("gfx11-generic"), ("hipv4", "amdgcn-amd-amdhsa-", "gfx11-generic")),
        (HOST, ("host", "x86_64-unknown-linux-gnu", "")),
        ("host-x86_64-unknown-linux", ("host", "x86_64-unknown-linux", "")),  # LLVM 15
    ],
)
def test_split_bundle_id(text: str, parts: tuple[str, str, str]) -> None:
    assert split_bundle_id(text) == parts


def _entry_header_at(data: bytes, index: int) -> int:
    """File offset of entry ``index``'s header in a plain bundle (walked by hand)."""
    at = 32
    for _ in range(index):
        at += 24 + struct.unpack_from("<Q", data, at + 16)[0]
    return at


def test_entry_count_beyond_the_file_is_refused_at_once() -> None:
    data = bytearray(fixture("multi.hipfb"))
    struct.pack_into("<Q", data, 24, 1 << 60)
    with pytest.raises(FormatError, match="entry count") as caught:
        read_bundle(bytes(data), "bad.hipfb")
    assert (caught.value.path, caught.value.offset) == ("bad.hipfb", 24)


# field of an entry header: (its place in the header, where the error points, in the header)
ENTRY_FIELDS = {"offset": (0, 0), "size": (8, 0), "id length": (16, 16)}


@pytest.mark.parametrize(
    ("field", "value"),
    [("offset", 0), ("offset", 1 << 40), ("size", 1 << 63), ("id length", 1 << 62)],
)
def test_entry_header_fields_are_checked(field: str, value: int) -> None:
    data = bytearray(fixture("multi.hipfb"))
    entry = _entry_header_at(bytes(data), 2)
    place, error_at = ENTRY_FIELDS[field]
    struct.pack_into("<Q", data, entry + place, value)
    with pytest.raises(FormatError) as caught:
        read_bundle(bytes(data), "bad.hipfb")
    assert caught.value.offset == entry + error_at


def test_repeated_entry_id_is_refused() -> None:
    images = [(amd_id("gfx90a"), b"first"), (amd_id("gfx942"), b"second")]
    data = write_bundle(images, align=1)
    twice = data.replace(b"gfx942", b"gfx90a", 1)  # ids of the same length: only the name changes
    with pytest.raises(FormatError, match="once") as caught:
        read_bundle(twice, "twice.hipfb")
    assert caught.value.offset == twice.rindex(amd_id("gfx90a").encode())


# ---------------------------------------------------------------------------------------------
# Compressed bundles (CCOB)


def _ccob_fields(data: bytes) -> tuple[int, int]:
    return struct.unpack_from("<HH", data, 4)


def test_hipcc_compressed_bundle_is_ccob_v2_zstd() -> None:
    data = fixture("compressed.hipfb")
    assert _ccob_fields(data) == (2, 1)
    image = read_image_file(data, "compressed.hipfb")
    assert isinstance(image, Bundle)
    (header,) = image.compression
    assert (header.version, header.method, header.size) == (2, "zstd", len(data))
    assert [e.id for e in image.entries] == [HOST, amd_id("gfx1100"), amd_id("gfx90a")]
    # same source and flags as the single code objects: the same kernels and figures
    for entry, single in zip(image.entries[1:], ("gfx1100.co", "gfx90a.co"), strict=True):
        alone = read_code_object(fixture(single), single)
        assert read_code_object(entry.data, entry.id).resources() == alone.resources()


def test_hipcc_compressed_bundle_version_3() -> None:
    data = fixture("compressed_v3.hipfb")
    image = read_image_file(data, "compressed_v3.hipfb")
    assert isinstance(image, Bundle)
    (header,) = image.compression
    assert (header.version, header.method, header.size) == (3, "zstd", len(data))
    assert [e.id for e in image.entries] == [HOST, amd_id("gfx942")]


def test_stored_hash_is_md5_low_64_of_the_bundle() -> None:
    data = fixture("compressed.hipfb")
    image = read_image_file(data, "compressed.hipfb")
    assert isinstance(image, Bundle)
    entries = [(e.id, e.data) for e in image.entries if e.kind != "host"]
    plain = write_bundle(entries)  # hipcc's layout, so the same bytes it compressed
    assert struct.unpack_from("<Q", data, 16)[0] == int.from_bytes(
        hashlib.md5(plain).digest()[:8], "little"
    )


def test_concatenated_ccobs_give_all_their_entries() -> None:
    """As the HIP runtime reads a .hip_fatbin of several bundles (clang-offload-bundler 21's
    --list does not: it fails on any two CCOBs in a row)."""
    first, second = fixture("compressed.hipfb"), fixture("compressed_v3.hipfb")
    image = read_image_file(first + second, "both.hipfb")
    assert isinstance(image, Bundle)
    assert [h.offset for h in image.compression] == [0, len(first)]
    parts = read_bundle(first, "first") + read_bundle(second, "second")
    assert [(e.id, e.data) for e in image.entries] == [(e.id, e.data) for e in parts]
    assert [e.target for e in image.entries] == ["", "gfx1100", "gfx90a", "", "gfx942"]


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("method", ["zstd", "zlib"])
def test_compress_round_trip(method: str, version: int) -> None:
    plain = fixture("multi.hipfb")
    packed = compress_bundle(plain, method, version)  # type: ignore[arg-type]
    assert packed == compress_bundle(plain, method, version)  # type: ignore[arg-type]
    assert _ccob_fields(packed) == (version, {"zlib": 0, "zstd": 1}[method])
    assert len(packed) < len(plain) // 4
    image = read_image_file(packed, "packed")
    assert isinstance(image, Bundle)
    assert image.compression[0].uncompressed_size == len(plain)
    assert [(e.id, e.data) for e in image.entries] == [
        (e.id, e.data) for e in read_bundle(plain, "plain")
    ]


def test_zlib_payload_is_a_plain_zlib_stream() -> None:
    plain = fixture("multi.hipfb")
    packed = compress_bundle(plain, "zlib", 2)
    assert zlib.decompress(packed[24:]) == plain


def test_hash_mismatch_is_refused_at_the_hash() -> None:
    data = bytearray(fixture("compressed.hipfb"))
    data[16] ^= 1
    with pytest.raises(FormatError, match="MD5") as caught:
        read_bundle(bytes(data), "flipped.hipfb")
    assert caught.value.offset == 16


@pytest.mark.parametrize(
    ("version", "field_at", "value"),
    [
        (3, 16, 1 << 63),  # uncompressed size: refused before anything is allocated
        (3, 8, 1 << 63),  # total size beyond the file
        (2, 12, 0xFFFFFFFF),  # 4 GiB - 1 claimed, a few KB present
        (2, 8, 3),  # total size smaller than the header
        (1, 8, 0xFFFFFFFF),
    ],
)
def test_hostile_ccob_sizes(version: int, field_at: int, value: int) -> None:
    data = bytearray(compress_bundle(fixture("gfx90a.co"), "zstd", version))
    width = 8 if version == 3 else 4
    data[field_at : field_at + width] = value.to_bytes(width, "little")
    with pytest.raises(FormatError) as caught:
        read_bundle(bytes(data), "hostile.hipfb")
    assert caught.value.offset in (field_at, 24 if version == 2 else 20)


def test_claimed_size_larger_than_the_stream_yields() -> None:
    data = bytearray(compress_bundle(fixture("multi.hipfb"), "zstd", 3))
    struct.pack_into("<Q", data, 16, len(fixture("multi.hipfb")) + 1)
    with pytest.raises(FormatError, match="exactly"):
        read_bundle(bytes(data), "short.hipfb")


def test_trailing_garbage_after_a_ccob_is_refused() -> None:
    data = fixture("compressed.hipfb") + b"\0" * 16
    with pytest.raises(FormatError, match="CCOB") as caught:
        read_bundle(data, "padded.hipfb")
    assert caught.value.offset == len(fixture("compressed.hipfb"))


def test_compress_refuses_unknown_method_and_version() -> None:
    with pytest.raises(UsageError):
        compress_bundle(b"x", "lz4")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        compress_bundle(b"x", "zstd", 4)


# ---------------------------------------------------------------------------------------------
# AMDGPU code objects


def _multi_images() -> dict[str, CodeObject]:
    return {
        e.target: read_code_object(e.data, e.id)
        for e in read_bundle(fixture("multi.hipfb"), "multi.hipfb")
        if e.kind != "host"
    }


def test_targets_from_e_flags_match_the_bundle_ids() -> None:
    images = _multi_images()
    assert sorted(images) == sorted(MULTI_TARGETS)
    for target, image in images.items():
        assert str(image.target) == target
        assert image.code_object_version == 6  # LLVM 21 writes v6
        assert image.generic_version == (1 if target.endswith("-generic") else 0)
    assert images["gfx908:sramecc+:xnack-"].target.features == (("sramecc", True), ("xnack", False))


@pytest.mark.parametrize(("name", "wavefront"), [("gfx90a.co", 64), ("gfx1100.co", 32)])
def test_single_code_object_kernels(name: str, wavefront: int) -> None:
    image = read_image_file(fixture(name), name)
    assert isinstance(image, CodeObject)
    kernels = {k.name: k for k in image.kernels}
    assert list(kernels) == list(KERNELS)
    assert {k.wavefront for k in image.kernels} == {wavefront}
    assert {k.symbol for k in image.kernels} == {f"{k}.kd" for k in KERNELS}
    assert kernels["tile_sum"].lds == TILE_BYTES
    assert kernels["tile_sum"].max_workgroup == 256
    assert kernels["axpy"].max_workgroup == 1024
    assert kernels["axpy"].lds == kernels["axpy"].scratch == 0
    assert kernels["walk"].scratch >= WALK_TABLE_BYTES
    assert kernels["spill"].vgpr_spills > 0 and kernels["spill"].scratch > 0
    assert kernels["spill"].vgpr <= 32  # amdgpu_num_vgpr(16), allocated in granules
    explicit = [
        (a.offset, a.size, a.value_kind)
        for a in kernels["axpy"].args
        if "hidden" not in a.value_kind
    ]
    assert explicit == [
        (0, 4, "by_value"),
        (8, 8, "global_buffer"),
        (16, 8, "global_buffer"),
        (24, 4, "by_value"),
    ]
    assert kernels["axpy"].kernarg_size >= 28


def test_accumulation_registers_on_gfx908() -> None:
    kernels = {k.name: k for k in _multi_images()["gfx908:sramecc+:xnack-"].kernels}
    assert kernels["mfma"].agpr >= 4  # a 16x16x4 f32 MFMA accumulates into four AGPRs
    assert kernels["axpy"].agpr == 0


def test_resources_map_the_metadata_for_the_index() -> None:
    image = read_code_object(fixture("gfx90a.co"), "gfx90a.co")
    resources = image.resources()
    assert list(resources) == list(KERNELS)
    for kernel in image.kernels:
        figures = resources[kernel.name]
        assert figures["registers"] == kernel.vgpr
        assert (figures["sgpr"], figures["agpr"]) == (kernel.sgpr, kernel.agpr)
        assert (figures["lds"], figures["scratch"]) == (kernel.lds, kernel.scratch)
        assert figures["spills"] == kernel.sgpr_spills + kernel.vgpr_spills
        assert (figures["wavefront"], figures["max_workgroup"]) == (64, kernel.max_workgroup)


def _descriptor_offset(data: bytes, symbol: str) -> int:
    elf = Elf(data, "x", machine=formats.EM_AMDGPU, what="test")
    table = next(s for s in elf.sections if s.type == SHT_DYNSYM)
    found = next(s for s in elf.symbols(table) if s.name == symbol)
    return elf.symbol_bytes(found, 64)[1]


def test_kernel_descriptor_wave32_bit_must_agree_with_the_metadata() -> None:
    data = bytearray(fixture("gfx1100.co"))
    properties = _descriptor_offset(bytes(data), "walk.kd") + 56
    assert data[properties + 1] & 0x04  # bit 10 of the u16: wave32, as the metadata says
    data[properties + 1] &= ~0x04
    with pytest.raises(FormatError, match="wave32") as caught:
        read_code_object(bytes(data), "wave64.co")
    assert caught.value.offset == properties


@pytest.mark.parametrize(
    ("flags_byte", "value", "match"),
    [(48, 0x01, "EF_AMDGPU_MACH"), (48, 0x51, "generic"), (49, 0x03, "xnack")],
    ids=["unknown machine", "generic without a version", "xnack on gfx1100"],
)
def test_e_flags_are_checked(flags_byte: int, value: int, match: str) -> None:
    data = bytearray(fixture("gfx1100.co"))
    data[flags_byte] = value
    with pytest.raises(FormatError, match=match):
        read_code_object(bytes(data), "flags.co")


def test_metadata_target_must_agree_with_e_flags() -> None:
    data = bytearray(fixture("gfx90a.co"))
    data[48] = 0x4C  # gfx942 in e_flags, the note still says gfx90a
    with pytest.raises(FormatError, match=r"amdhsa\.target"):
        read_code_object(bytes(data), "gfx942?.co")


def test_code_object_v3_is_refused() -> None:
    data = bytearray(fixture("gfx90a.co"))
    data[8] = 1
    with pytest.raises(FormatError, match="code object v4") as caught:
        read_code_object(bytes(data), "v3.co")
    assert caught.value.offset == 8


# ---------------------------------------------------------------------------------------------
# MessagePack


@pytest.mark.parametrize(
    ("encoded", "value"),
    [
        (b"\x82\xa1a\x01\xa1b\x93\xc3\xc0\xff", {"a": 1, "b": [True, None, -1]}),
        (b"\xcd\x01\x00", 256),
        (b"\xce\x00\x01\x00\x00", 65536),
        (b"\xd0\x80", -128),
        (b"\xd9\x03abc", "abc"),
        (b"\xdc\x00\x02\x01\x02", [1, 2]),
        (b"\xde\x00\x01\xa1k\xc2", {"k": False}),
        (b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00", 1.5),
        (b"\xc4\x02\x00\x01", b"\x00\x01"),
    ],
)
def test_msgpack_decodes_the_spec_encodings(encoded: bytes, value: object) -> None:
    assert _msgpack.unpack(encoded, path="m") == value


@pytest.mark.parametrize(
    "encoded",
    [
        b"\xdd\xff\xff\xff\xff",  # 4 billion array elements claimed
        b"\xdf\x7f\xff\xff\xff\x01",  # 2 billion map entries claimed
        b"\xdb\xff\xff\xff\xff",  # a 4 GB string claimed
        b"\x91" * 40 + b"\x01",  # nested deeper than the metadata ever is
        b"\x01\x02",  # trailing bytes
        b"\xa2\xff\xfe",  # not UTF-8
        b"\x81\x90\x01",  # a list as a map key
        b"\x82\xa1a\x01\xa1a\x02",  # a repeated key
        b"\xc7\x01\x01\x00",  # an extension type
        b"\xc1",  # the never-used type byte
        b"",
    ],
)
def test_msgpack_refuses_hostile_input(encoded: bytes) -> None:
    with pytest.raises(FormatError):
        _msgpack.unpack(encoded, path="m", base=100)


# ---------------------------------------------------------------------------------------------
# NVIDIA


@pytest.mark.parametrize(("name", "target"), [("sm_90.cubin", "sm_90"), ("sm_90a.cubin", "sm_90a")])
def test_cubin_target_and_kernels(name: str, target: str) -> None:
    image = read_image_file(fixture(name), name)
    assert isinstance(image, Cubin)
    assert (image.target, image.sm, image.elf_abi_version) == (target, 90, 8)
    kernels = {k.name: k for k in image.kernels}
    assert sorted(kernels) == sorted(KERNELS)
    assert kernels["tile_sum"].max_threads == 256
    assert kernels["axpy"].max_threads == 1024
    assert kernels["tile_sum"].shared >= TILE_BYTES
    assert kernels["axpy"].shared == kernels["axpy"].local == 0
    assert kernels["walk"].local >= WALK_TABLE_BYTES
    assert 0 < kernels["spill"].registers <= 24  # __maxnreg__(24)
    assert kernels["spill"].local > 0
    assert all(k.registers > 0 for k in image.kernels)
    resources = image.resources()
    assert resources["walk"]["scratch"] == kernels["walk"].local
    assert {r["wavefront"] for r in resources.values()} == {32}


def test_sm90_and_sm90a_differ_only_in_the_compat_marking() -> None:
    plain, specific = fixture("sm_90.cubin"), fixture("sm_90a.cubin")
    assert plain[48:52] == specific[48:52]  # e_flags: the same (nvcc 13.0, ELF ABI 8)
    assert read_cubin(plain, "a").kernels == read_cubin(specific, "b").kernels


def test_ptx_version_target_entries() -> None:
    image = read_image_file(fixture("compute_80.ptx"), "compute_80.ptx")
    assert isinstance(image, Ptx)
    assert (image.target, image.compute_target, image.address_size) == ("sm_80", "compute_80", 64)
    assert re.fullmatch(r"\d+\.\d+", image.version)
    assert list(image.entries) == list(KERNELS)


def test_ptx_entries_in_comments_are_not_kernels() -> None:
    text = b".version 8.0\n.target sm_90a\n// .entry fake(\n/* .entry other( */\n.visible .entry real(\n"
    image = read_ptx(text + b"\0", "x.ptx")
    assert (image.target, image.entries, image.address_size) == ("sm_90a", ("real",), 32)


@pytest.mark.parametrize(
    "text",
    [
        b".version 8.0\n",
        b".target sm_80\n",
        b".version 8.0\n.target gfx90a\n",
        b".version 8.0\n\xff",
    ],
)
def test_not_ptx(text: bytes) -> None:
    with pytest.raises(FormatError):
        read_ptx(text, "x.ptx")


# ---------------------------------------------------------------------------------------------
# What a file is


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("multi.hipfb", Bundle),
        ("compressed.hipfb", Bundle),
        ("gfx90a.co", CodeObject),
        ("sm_90.cubin", Cubin),
        ("compute_80.ptx", Ptx),
    ],
)
def test_read_image_tells_what_a_file_is(name: str, kind: type) -> None:
    assert isinstance(read_image_file(fixture(name), name), kind)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"hello",
        b"\x7fELF",
        fixture("gfx90a.co")[:18] + b"\x3e\x00" + fixture("gfx90a.co")[20:],
    ],
    ids=["empty", "text", "elf magic only", "x86-64 elf"],
)
def test_read_image_refuses_other_files(data: bytes) -> None:
    with pytest.raises(FormatError) as caught:
        read_image_file(data, "other.bin")
    assert str(caught.value).startswith("other.bin: at offset ")


# ---------------------------------------------------------------------------------------------
# Against the toolchains


def _bundler(toolchain: Toolchain, *argv: str) -> subprocess.CompletedProcess[str]:
    return toolchain.run(["clang-offload-bundler", "--type=o", *argv])


@pytest.mark.toolchain
@pytest.mark.parametrize(
    ("method", "version"),
    [(None, None), ("zstd", 2), ("zstd", 3), ("zlib", 2), ("zlib", 1)],
    ids=["uncompressed", "zstd-v2", "zstd-v3", "zlib-v2", "zlib-v1"],
)
def test_clang_offload_bundler_reads_our_bundles(
    amd_toolchain: Toolchain, tmp_path: Path, method: str | None, version: int | None
) -> None:
    images = {
        amd_id("gfx90a"): fixture("gfx90a.co"),
        amd_id("gfx1100"): fixture("gfx1100.co"),
        "hip-amdgcn-amd-amdhsa--gfx942:xnack+": b"not a code object, just bytes",
    }
    bundle = write_bundle(list(images.items()))
    if method is not None:
        bundle = compress_bundle(bundle, method, version)  # type: ignore[arg-type]
    path = tmp_path / "ours.hipfb"
    path.write_bytes(bundle)
    listed = _bundler(amd_toolchain, "--list", f"--input={path}").stdout.split()
    assert sorted(listed) == sorted([HOST, *images])
    ids = sorted(images)
    outputs = [tmp_path / f"out{i}" for i in range(len(ids))]
    _bundler(
        amd_toolchain,
        "--unbundle",
        f"--input={path}",
        f"--targets={','.join(ids)}",
        *(f"--output={out}" for out in outputs),
    )
    for entry_id, out in zip(ids, outputs, strict=True):
        assert out.read_bytes() == images[entry_id]


def _nvcc() -> str | None:
    import shutil

    from buildsys.toolchain import cuda_toolchain

    cuda = cuda_toolchain()
    return str(cuda.bindir / "nvcc") if cuda else shutil.which("nvcc")


needs_nvcc = pytest.mark.nvcc


@needs_nvcc
@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_90a", "sm_120", "sm_120a"])
def test_nvcc_cubins_name_their_target(arch: str, tmp_path: Path) -> None:
    out = tmp_path / f"{arch}.cubin"
    source = OBJECTS / "src" / "kernels.hip"
    subprocess.run(
        [_nvcc() or "nvcc", "-x", "cu", "-cubin", f"-arch={arch}", str(source), "-o", str(out)],
        check=True,
    )
    image = read_cubin(out.read_bytes(), str(out))
    assert image.target == arch
    assert sorted(k.name for k in image.kernels) == sorted(KERNELS)


@needs_nvcc
def test_cubin_internal_kernels_are_read_with_the_others(tmp_path: Path) -> None:
    """nvcc binds kernels of internal linkage locally; they are kernels all the same (the loader
    finds them by symbol): all three that the source defines are read."""
    source = tmp_path / "linkage.cu"
    source.write_text(
        'extern "C" __global__ void visible(int* x) { x[0] = 1; }\n'
        "static __global__ void file_static(int* x) { x[0] = 2; }\n"
        "namespace { __global__ void anonymous(int* x) { x[0] = 3; } }\n"
        "void launch(int* x) { file_static<<<1, 1>>>(x); anonymous<<<1, 1>>>(x); }\n"
    )
    out = tmp_path / "linkage.cubin"
    subprocess.run(
        [_nvcc() or "nvcc", "-cubin", "-arch=sm_90", str(source), "-o", str(out)], check=True
    )
    names = sorted(k.name for k in read_cubin(out.read_bytes(), "x").kernels)
    assert len(names) == 3 and names[-1] == "visible", names
    assert "file_static" in names[0] + names[1] and "anonymous" in names[0] + names[1]


@needs_nvcc
def test_cubin_figures_agree_with_ptxas(tmp_path: Path) -> None:
    out = tmp_path / "sm_90.cubin"
    source = OBJECTS / "src" / "kernels.hip"
    result = subprocess.run(
        [
            _nvcc() or "nvcc",
            "-x",
            "cu",
            "-O3",
            "-cubin",
            "-arch=sm_90",
            "-Xptxas",
            "-v",
            str(source),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    reported: dict[str, dict[str, int]] = {}
    current = ""
    for line in result.stderr.splitlines():
        if match := re.search(r"Compiling entry function '(\w+)'", line):
            current = match.group(1)
            reported[current] = {"local": 0}
        elif match := re.search(r"Used (\d+) registers", line):
            reported[current]["registers"] = int(match.group(1))
            if stack := re.search(r"(\d+) bytes cumulative stack size", line):
                reported[current]["local"] = int(stack.group(1))
    image = read_cubin(out.read_bytes(), str(out))
    assert {k.name: {"registers": k.registers, "local": k.local} for k in image.kernels} == reported


# ---------------------------------------------------------------------------------------------
# Parameter layouts, against the C signatures of objects/src/kernels.hip (x86-64 / GPU C ABI:
# a pointer is 8 bytes, each parameter at the next multiple of its own size)

# kernel -> (offset, size, pointer) of each parameter, written from the source by hand
SOURCE_PARAMS = {
    "axpy": [(0, 4, False), (8, 8, True), (16, 8, True), (24, 4, False)],  # float, 2 ptrs, int
    "tile_sum": [(0, 8, True), (8, 8, True)],
    "walk": [(0, 8, True), (8, 8, True)],
    "spill": [(0, 8, True), (8, 8, True)],
    "mfma": [(0, 8, True), (8, 8, True), (16, 8, True)],
}


@pytest.mark.parametrize("name", ["sm_90.cubin", "sm_90a.cubin"])
def test_cubin_parameter_layouts_match_the_source(name: str) -> None:
    image = read_cubin(fixture(name), name)
    layouts = {
        k.name: [(p.ordinal, p.offset, p.size, p.pointer) for p in k.params] for k in image.kernels
    }
    assert layouts == {
        kernel: [(i, offset, size, None) for i, (offset, size, _) in enumerate(params)]
        for kernel, params in SOURCE_PARAMS.items()
    }


@pytest.mark.parametrize("name", ["gfx90a.co", "gfx1100.co"])
def test_code_object_parameter_layouts_match_the_source(name: str) -> None:
    image = read_code_object(fixture(name), name)
    layouts = {
        k.name: [(p.ordinal, p.offset, p.size, p.pointer) for p in k.params] for k in image.kernels
    }
    assert layouts == {
        kernel: [(i, *param) for i, param in enumerate(params)]
        for kernel, params in SOURCE_PARAMS.items()
    }


def test_inspect_json_carries_the_parameters() -> None:
    from kernelpack.cli.inspection import describe

    report = describe(fixture("sm_90.cubin"), "sm_90.cubin")
    axpy = next(k for k in report["kernels"] if k["name"] == "axpy")
    assert [(p["offset"], p["size"]) for p in axpy["params"]] == [(0, 4), (8, 8), (16, 8), (24, 4)]


def test_repeated_parameter_ordinal_is_refused() -> None:
    data = bytearray(fixture("sm_90.cubin"))
    record = bytes([4, 0x17, 12, 0, 0, 0, 0, 0, 3, 0, 24, 0])  # axpy's fourth parameter
    at = data.index(record)
    data[at + 8] = 2  # now the third parameter twice
    with pytest.raises(FormatError, match="ordinal once") as caught:
        read_cubin(bytes(data), "twice.cubin")
    assert caught.value.offset == at + 16 + 8  # the next record's (the real third's) ordinal


MIXED_SOURCE = """
struct Triple { float x, y, z; };
extern "C" __global__ void mixed(char c, double d, const int* p, short s, Triple t, int* out) {
  if (out) out[0] = c + (int)d + p[0] + s + (int)t.x;
}
"""
# by hand: char at 0; double at 8; pointer at 16; short at 24; a 12-byte struct of floats aligned
# to 4 at 28; a pointer at 40
MIXED_PARAMS = [(0, 0, 1), (1, 8, 8), (2, 16, 8), (3, 24, 2), (4, 28, 12), (5, 40, 8)]


@needs_nvcc
def test_nvcc_parameter_records_of_mixed_types(tmp_path: Path) -> None:
    source = tmp_path / "mixed.cu"
    source.write_text(MIXED_SOURCE)
    out = tmp_path / "mixed.cubin"
    subprocess.run(
        [_nvcc() or "nvcc", "-cubin", "-arch=sm_80", str(source), "-o", str(out)], check=True
    )
    (kernel,) = read_cubin(out.read_bytes(), str(out)).kernels
    assert [(p.ordinal, p.offset, p.size) for p in kernel.params] == MIXED_PARAMS
