"""The discovery results the build cache keeps beside the objects (buildsys.discovered): the same
as reading the object, read back without parsing it again, and a damaged record read as absent.

Pure Python, on the object fixtures of tests/fixtures/objects (no compiler).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from buildsys import discovered
from buildsys.cache import BuildCache, sha256_hex
from buildsys.discovered import cached_object_kernels
from buildsys.discovery import object_kernels

OBJECTS = Path(__file__).parent / "fixtures" / "objects"
FIXTURES = [("code_object", "gfx90a.co"), ("cubin", "sm_90.cubin"), ("ptx", "compute_80.ptx")]


@pytest.mark.parametrize(("kind", "name"), FIXTURES, ids=[n for _, n in FIXTURES])
def test_a_cached_result_is_the_objects_own_and_is_read_without_the_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, name: str
) -> None:
    data = (OBJECTS / name).read_bytes()
    cache = BuildCache(tmp_path)
    expected = object_kernels(kind, data, name)
    assert expected[1]  # the fixture defines kernels
    assert cached_object_kernels(cache, kind, data, name, sha256_hex(data)) == expected

    def unread(*_: object) -> None:
        raise AssertionError("the object was parsed again")

    monkeypatch.setattr(discovered, "object_kernels", unread)
    assert cached_object_kernels(cache, kind, data, name, sha256_hex(data)) == expected


@pytest.mark.parametrize(
    "damage",
    [
        "not json",
        '{"target": "gfx90a", "kernels": [["k", [0, 8, 8], [0, 0, 0, 0, 0, 0, 64, 256]]]}',
        '{"target": "gfx90a", "kernels": [["k", [0, 8], [0, 0, 0, 0, 0, 0, 64]]]}',
        '{"target": "gfx90a", "kernels": [["k", [0, -8], [0, 0, 0, 0, 0, 0, 64, 256]]]}',
        '{"target": "gfx90a", "kernels": [["k", [0, true], [0, 0, 0, 0, 0, 0, 64, 256]]]}',
        '{"target": 1, "kernels": []}',
        '{"target": "gfx90a", "kernels": [], "extra": 1}',
    ],
)
def test_a_damaged_record_is_read_as_absent(tmp_path: Path, damage: str) -> None:
    """The cache folder is untrusted: anything but the shape written costs a re-read, never a
    wrong kernel list or a traceback."""
    data = (OBJECTS / "gfx90a.co").read_bytes()
    cache = BuildCache(tmp_path)
    expected = cached_object_kernels(cache, "code_object", data, "gfx90a.co", sha256_hex(data))
    [record] = [p for p in (tmp_path / "discovery").rglob("*") if p.is_file()]
    record.write_text(damage)
    again = cached_object_kernels(cache, "code_object", data, "gfx90a.co", sha256_hex(data))
    assert again == expected
    assert record.read_text() != damage  # rewritten whole
