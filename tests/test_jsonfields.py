"""The one JSON rule for kernelpack's dataclasses (kernelpack._jsonfields), against hand-written
expectations: which keys a report has, in which order, and how non-JSON values are spelled."""

from __future__ import annotations

import json
import re

import pytest

from kernelpack._jsonfields import json_value
from kernelpack.devices.detect import Gpu
from kernelpack.formats.bundles import compress_bundle, parse_bundle, write_bundle
from kernelpack.formats.params import ObjectParam
from kernelpack.targets import TargetId


def test_bundle_report_keys_and_spelling() -> None:
    entry_id = "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"
    data = compress_bundle(write_bundle([(entry_id, b"\x7fELF....")]), "zlib", version=2)
    report = parse_bundle(data, "test.hsaco").to_json()
    json.dumps(report)  # plain JSON all the way down
    assert list(report) == ["format", "entries", "compression"]  # declaration order
    assert report["format"] == "bundle"
    (header,) = report["compression"]
    assert list(header) == ["offset", "version", "method", "size", "uncompressed_size", "hash"]
    assert (header["offset"], header["version"], header["method"]) == (0, 2, "zlib")
    assert header["size"] == len(data)
    assert re.fullmatch(r"0x[0-9a-f]{16}", header["hash"])
    host, device = report["entries"]
    assert list(device) == ["id", "offset", "kind", "triple", "target", "size"]  # no "view"
    assert host["kind"] == "host" and host["size"] == 0
    assert (device["id"], device["kind"], device["target"]) == (entry_id, "hipv4", "gfx90a:xnack-")
    assert device["size"] == 8


def test_values() -> None:
    assert json_value(TargetId.parse("gfx90a:sramecc+:xnack-")) == "gfx90a:sramecc+:xnack-"
    assert json_value((ObjectParam(0, 8, 8, None),)) == [
        {"ordinal": 0, "offset": 8, "size": 8, "pointer": None}
    ]
    for value in (memoryview(b"x"), b"x", object()):
        with pytest.raises(TypeError, match="no JSON form"):
            json_value(value)


def test_gpu_report_keys_and_spelling() -> None:
    """A detected GPU (a NamedTuple, kernelpack._jsonfields.json_record) by the same rule: its
    fields in declaration order, its target as text, not as the tuple it is."""
    gpu = Gpu(
        1, "amd", TargetId.parse("gfx90a:xnack-"), "MI210", "0000:c1:00.0", "", 3, "kfd", "gfx90a"
    )
    report = gpu.to_json()
    json.dumps(report)
    expected = {
        "index": 1,
        "vendor": "amd",
        "target": "gfx90a:xnack-",
        "name": "MI210",
        "location": "0000:c1:00.0",
        "uuid": "",
        "node": 3,
        "source": "kfd",
        "hardware": "gfx90a",
        "override": "",
    }
    assert list(report.items()) == list(expected.items())  # values and declaration order
