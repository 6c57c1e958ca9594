"""kernelpack.files.regular.read_toml: the one reader of an untrusted TOML file (a sweep spec; the
builder's matrix and pyproject can read through it too). Each fault is one UsageError naming the
file, where the fault is and what to give; a missing file is left to the caller."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernelpack.errors import UsageError
from kernelpack.files.regular import read_toml

WHAT = "a sweep spec (TOML)"


def test_reads_a_toml_document(tmp_path: Path) -> None:
    path = tmp_path / "spec.toml"
    path.write_text('target = "pi"\n[walk]\ndepth = 3\naxes = ["n", "k"]\n', encoding="utf-8")
    assert read_toml(path, limit=1 << 10, what=WHAT) == {
        "target": "pi",
        "walk": {"depth": 3, "axes": ["n", "k"]},
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b'target = "pi"\n# \xe9\n',
            r": not UTF-8 text \(at byte 16\); give a sweep spec \(TOML\)$",
        ),
        (b"target = \n", r": not TOML \(Invalid value \(at line 1, column 10\)\); give a sweep"),
        (b"x = " + b"[" * 50000 + b"]" * 50000, r": arrays or tables nested too deeply; give a"),
        (b"x = 1\n" * 200_000, r": 1200000 bytes, over the 1048576-byte limit for a sweep spec"),
    ],
    ids=["latin-1", "not-toml", "nested", "huge"],
)
def test_a_file_that_is_no_toml_is_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "spec.toml"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=f"^{re.escape(str(path))}{message}") as raised:
        read_toml(path, limit=1 << 20, what=WHAT)
    assert "\n" not in str(raised.value)


def test_a_missing_file_is_left_to_the_caller(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_toml(tmp_path / "absent.toml", limit=1 << 10, what=WHAT)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError):
        read_toml(tmp_path / "file" / "spec.toml", limit=1 << 10, what=WHAT)
