"""Image kinds against the compilers' real outputs, and read_image against bytes placed by hand."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kernelpack import formats
from kernelpack.errors import IntegrityError, UsageError
from kernelpack.formats import compress_bundle, write_bundle
from kernelpack.formats.index import Image
from kernelpack.loader.images import IMAGE_KINDS, KINDS_OF_VENDOR, image_kind, read_image

OBJECTS = Path(__file__).parent / "fixtures" / "objects"

# Written by hand: the file hipcc --genco / nvcc -cubin / nvcc -ptx made for each kind
# (tests/fixtures/objects/README.md), and the reader class that must recognise it.
REAL_OUTPUT = {
    "code_object": ("gfx1100.co", formats.CodeObject),
    "cubin": ("sm_90.cubin", formats.Cubin),
    "ptx": ("compute_80.ptx", formats.Ptx),
}


@pytest.mark.parametrize("kind", IMAGE_KINDS, ids=lambda k: k.name)
def test_each_kind_is_what_its_compiler_makes(kind: Any) -> None:
    file, reader = REAL_OUTPUT[kind.name]
    parsed = formats.read_image_file((OBJECTS / file).read_bytes(), file)
    assert isinstance(parsed, reader)
    vendor = "amd" if isinstance(parsed, formats.CodeObject) else "nvidia"
    assert kind.vendor == vendor
    assert kind.object_suffix == Path(file).suffix


def test_amd_images_travel_in_one_bundle() -> None:
    """hipcc's bundle (the .hsaco a package carries) holds code objects of several targets."""
    (kind,) = [k for k in IMAGE_KINDS if k.bundled]
    assert kind.name == "code_object" and kind.file_suffix == ".hsaco"
    parsed = formats.read_image_file((OBJECTS / "multi.hipfb").read_bytes(), "multi.hipfb")
    assert isinstance(parsed, formats.Bundle)
    assert len([e for e in parsed.entries if e.kind.startswith("hip")]) > 1


def test_vendors_and_order() -> None:
    assert KINDS_OF_VENDOR == {"amd": ("code_object",), "nvidia": ("cubin", "ptx")}
    assert [k.name for k in sorted(IMAGE_KINDS, key=lambda k: k.order)] == [
        "code_object",
        "cubin",
        "ptx",
    ]


def test_unknown_kind_lists_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"'fatbin' is unknown.*known: code_object, cubin, ptx"):
        image_kind("fatbin")


def _image(file: str, data: bytes, offset: int, compression: str = "none") -> Image:
    return {
        "vendor": "nvidia",
        "target": "sm_90",
        "kind": "cubin",
        "file": file,
        "offset": offset,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "compression": compression,  # type: ignore[typeddict-item]
        "kernels": {},
    }


def test_reads_the_range_the_index_names(tmp_path: Path) -> None:
    payload = bytes(range(256)) * 3
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "m.bin").write_bytes(b"header--" + payload + b"trailer")
    assert read_image(tmp_path, _image("device/m.bin", payload, 8)) == payload


def test_reads_an_image_out_of_a_compressed_bundle(tmp_path: Path) -> None:
    wanted = b"gfx1100 code object " * 40
    other = b"gfx90a code object " * 40
    raw = write_bundle(
        [("hipv4-amdgcn-amd-amdhsa--gfx90a", other), ("hipv4-amdgcn-amd-amdhsa--gfx1100", wanted)]
    )
    (tmp_path / "m.hsaco").write_bytes(compress_bundle(raw))
    image = _image("m.hsaco", wanted, raw.find(wanted), "zstd")  # found in the raw bytes by hand
    image["target"] = "gfx1100"
    bundles: dict[Path, Any] = {}
    assert read_image(tmp_path, image, bundles=bundles) == wanted
    (tmp_path / "m.hsaco").unlink()  # the second read comes from ``bundles``
    assert read_image(tmp_path, image, bundles=bundles) == wanted


def test_a_changed_byte_shows_both_digests_whole(tmp_path: Path) -> None:
    payload = b"cubin bytes " * 50
    image = _image("m.cubin", payload, 0)
    damaged = b"Cubin bytes " + payload[12:]
    (tmp_path / "m.cubin").write_bytes(damaged)
    with pytest.raises(IntegrityError) as raised:
        read_image(tmp_path, image, remedy="rebuild the shard")
    message = str(raised.value)
    assert hashlib.sha256(damaged).hexdigest() in message
    assert image["sha256"] in message
    assert str(tmp_path / "m.cubin") in message and message.endswith("rebuild the shard")
    assert raised.value.exit_code == 1


def test_truncated_missing_and_corrupt_files(tmp_path: Path) -> None:
    payload = b"x" * 100
    (tmp_path / "short.cubin").write_bytes(payload[:60])
    with pytest.raises(IntegrityError, match="60 bytes, too short for the 100 bytes at offset 0"):
        read_image(tmp_path, _image("short.cubin", payload, 0))
    with pytest.raises(IntegrityError, match=r"missing\.cubin: cannot read the image"):
        read_image(tmp_path, _image("missing.cubin", payload, 0))
    (tmp_path / "bad.hsaco").write_bytes(b"CCOB" + b"\0" * 40)
    with pytest.raises(IntegrityError, match=r"bad\.hsaco.*reinstall kernelpack"):
        read_image(tmp_path, _image("bad.hsaco", payload, 0, "zstd"))


def test_an_image_range_past_the_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """An index may claim any size below the catalog's 1 GiB bound: the reader compares it with
    the file's own size before allocating (read(size) would take that much memory first)."""
    (tmp_path / "m.cubin").write_bytes(b"x" * 64)
    claim = {**_image("m.cubin", b"x" * 64, 0), "size": (1 << 30) - 1}
    with pytest.raises(IntegrityError, match=r"64 bytes, too short for the 1073741823 bytes"):
        read_image(tmp_path, claim)
    os.mkfifo(tmp_path / "f.cubin")
    with pytest.raises(IntegrityError, match=r"f\.cubin: not a regular file"):
        read_image(tmp_path, _image("f.cubin", b"x", 0))


def test_a_compressed_bundle_that_is_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "m.hsaco")  # nobody writes it: a plain open blocks forever

    def waited(signum: int, frame: object) -> None:
        pytest.fail("read_image waited on the FIFO for 5 s")

    previous = signal.signal(signal.SIGALRM, waited)
    signal.alarm(5)
    try:
        with pytest.raises(IntegrityError, match=r"m\.hsaco: is a FIFO.*reinstall kernelpack"):
            read_image(tmp_path, _image("m.hsaco", b"x", 0, "zstd"))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
