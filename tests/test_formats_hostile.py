"""The readers on hostile files: bounded memory, linear time, one FormatError line.

The files come from tests/hostile_files.py (made on the fly, the same every time). The last test is
the issue's bar: ``inspect --json`` on each kind of hostile file, in a process whose address space
is capped at 2 GiB (tests/capped.py), ends within 5 s (60 s for the linear cases of 20 MB) with
exit status 2 or the right kernels.
"""

from __future__ import annotations

import json
import os
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from capped import assert_one_line_refusal, run_capped
from hostile_files import (
    BUNDLE_MAGIC,
    FIXTURE_KERNELS,
    HOSTILE_FILES,
    OBJECTS,
    aliasing_bundle,
    ccob,
    ccob_train,
    cubin,
    kparam_records,
    md5_low64,
    plain_bundle,
    write_hostile_files,
    zstd_bomb,
    zstd_frame,
)

from kernelpack.cli.inspection import describe
from kernelpack.errors import FormatError
from kernelpack.formats import read_cubin
from kernelpack.formats.bundles import decompression_budget, read_bundle

MIB = 1 << 20


# ---------------------------------------------------------------------------------------------
# Memory


def test_aliasing_entries_are_views_not_copies() -> None:
    data = aliasing_bundle(200, 256 * 1024)  # 51 MB if each entry were copied
    tracemalloc.start()
    try:
        entries = read_bundle(data, "aliasing.hipfb")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(entries) == 200
    assert all(entry.view.obj is data and entry.size == 256 * 1024 for entry in entries)
    assert peak < len(data)  # a header's worth of objects, not one copy per entry


def test_inspect_reads_an_aliased_region_once() -> None:
    report = describe(aliasing_bundle(50, 64 * 1024), "aliasing.hipfb")
    first, *others = report["entries"]
    assert [k["name"] for k in first["image"]["kernels"]] == list(FIXTURE_KERNELS)
    assert first["same_bytes_as"] is None
    assert all(row["image"] is None and row["same_bytes_as"] == first["id"] for row in others)


def test_partly_overlapping_entries_are_refused_by_inspect() -> None:
    image = (OBJECTS / "gfx90a.co").read_bytes() + bytes(64 * 1024)
    ids = [f"hipv4-amdgcn-amd-amdhsa--gfx90a:part{i}" for i in range(3)]
    at = 4096
    entries = [(entry_id, at, len(image) - 8 * i) for i, entry_id in enumerate(ids)]
    data = plain_bundle(entries, image, at)
    assert len(read_bundle(data, "overlap.hipfb")) == 3  # the reader itself makes no copies
    with pytest.raises(FormatError, match="do not overlap") as caught:
        describe(data, "overlap.hipfb")
    assert caught.value.offset == at


@pytest.mark.parametrize(
    ("size", "budget"),
    [
        (0, 16 * MIB),
        (100_000, 16 * MIB),
        (MIB, 128 * MIB),
        (8 * MIB, 1024 * MIB),
        (1 << 40, 1 << 30),
    ],
)
def test_decompression_budget(size: int, budget: int) -> None:
    assert decompression_budget(size) == budget


def test_a_ccob_claiming_more_than_the_budget_is_refused_at_its_size() -> None:
    data = zstd_bomb(100 * MIB)  # 3 KB of RLE blocks that really inflate to 100 MiB
    with pytest.raises(FormatError, match="decompression budget") as caught:
        read_bundle(data, "bomb.hipfb")
    assert caught.value.offset == 16  # a version 3 header's uncompressed size


def test_the_budget_holds_for_all_ccobs_together() -> None:
    data = ccob_train(3, 7 * MIB)  # each within the 16 MiB floor, 21 MiB together
    block = len(data) // 3
    with pytest.raises(FormatError, match="14680064 spent by the CCOBs before") as caught:
        read_bundle(data, "train.hipfb")
    assert caught.value.offset == 2 * block + 12  # the third block's (version 2) size field
    assert len(read_bundle(data[: 2 * block], "two.hipfb")) == 0  # two fit: bundles of no entries


def test_a_stream_that_yields_more_than_it_claims_stops_one_byte_past() -> None:
    header = BUNDLE_MAGIC + bytes(8)
    claim = MIB
    data = ccob(zstd_frame(header, 1 << 30), claim, digest=md5_low64(header + bytes(claim - 32)))
    with pytest.raises(FormatError, match=f"exactly {claim} bytes"):
        read_bundle(data, "liar.hipfb")


# ---------------------------------------------------------------------------------------------
# Names


def test_names_in_overlapping_string_table_text_have_a_budget() -> None:
    text = b"\0" + b"k" * (256 * 1024) + b"\0"
    data = cubin(["x"] * 6000, strtab=text, name_offsets=list(range(1, 6001)))
    with pytest.raises(FormatError, match="names and records of at most"):  # 1.5 GB otherwise
        read_cubin(data, "names.cubin")


def test_repeated_names_are_read_once_and_charged_each_time_they_are_reported() -> None:
    text = b"\0" + b"k" * (256 * 1024) + b"\0"
    two = read_cubin(cubin(["x"] * 2, strtab=text, name_offsets=[1] * 2), "two.cubin")
    assert [k.name for k in two.kernels] == ["k" * 256 * 1024] * 2
    assert two.kernels[0].name is two.kernels[1].name  # decoded once
    many = cubin(["x"] * 8192, strtab=text, name_offsets=[1] * 8192)  # a 2 GiB report
    with pytest.raises(
        FormatError, match=r"names and records of at most \d+ bytes in all, read and reported"
    ):
        read_cubin(many, "many.cubin")


def test_kernels_sharing_records_are_charged_for_each_report() -> None:
    params = kparam_records(1000)
    few = read_cubin(cubin(["k"] * 10, shared_info=params), "few.cubin")
    assert len(few.kernels) == 10 and all(len(k.params) == 1000 for k in few.kernels)
    many = cubin([f"k{i}" for i in range(1000)], shared_info=params)  # 1,000,000 parameters
    with pytest.raises(FormatError, match="read and reported"):
        read_cubin(many, "many.cubin")


def test_kernels_find_their_own_sections() -> None:
    names = [f"kernel_{i}" for i in range(40)]
    image = read_cubin(cubin(names, info_sections=True), "many.cubin")
    assert [(k.name, k.registers, k.shared, k.max_threads) for k in image.kernels] == [
        (name, 32, 256, 128) for name in names
    ]


# ---------------------------------------------------------------------------------------------
# The bar: 2 GiB of address space, 5 s (60 s over 20 MB), exit 2 or the right answer


def _kernel_names(report: dict[str, Any]) -> tuple[str, ...]:
    if report["format"] == "bundle":
        images = [row["image"] for row in report["entries"] if row["image"] is not None]
        return tuple(k["name"] for image in images for k in image["kernels"])
    if report["format"] == "ptx":
        return tuple(report["entries"])
    return tuple(k["name"] for k in report["kernels"])


@pytest.fixture(scope="module")
def hostile_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_hostile_files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_inspect_under_an_address_space_cap(hostile_paths: dict[str, Path], name: str) -> None:
    path = hostile_paths[name]
    hostile = HOSTILE_FILES[name]
    result = run_capped(["inspect", str(path), "--json"], timeout=hostile.seconds)
    expected = hostile.kernels
    if expected is None:
        assert (result.returncode, result.stdout) == (2, ""), result.stderr[-2000:]
        assert re.fullmatch(
            rf"error: {re.escape(str(path))}[^\n]*: at offset \d+: expected [^\n]+\n", result.stderr
        ), result.stderr[-2000:]
    else:
        assert (result.returncode, result.stderr) == (0, ""), result.stderr[-2000:]
        assert _kernel_names(json.loads(result.stdout)) == expected


# ---------------------------------------------------------------------------------------------
# Files that are not regular files of a sane size: refused in one line, never read


def test_inspect_refuses_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "image.hsaco"
    os.mkfifo(fifo)  # nobody writes it: a plain open blocks forever
    result = run_capped(["inspect", str(fifo), "--json"])
    assert_one_line_refusal(result)
    assert f"{fifo}: is a FIFO, not a regular file" in result.stderr


def test_inspect_refuses_a_device() -> None:
    result = run_capped(["inspect", "/dev/zero"])  # endless: read whole, it fills memory
    assert_one_line_refusal(result)
    assert "/dev/zero: is a device" in result.stderr


def test_inspect_refuses_a_file_of_8_gib(tmp_path: Path) -> None:
    huge = tmp_path / "huge.hsaco"
    with huge.open("wb") as file:
        file.truncate(8 << 30)  # sparse: no disk spent
    result = run_capped(["inspect", str(huge), "--json"])
    assert_one_line_refusal(result)
    assert f"{huge}: {8 << 30} bytes, over the" in result.stderr
