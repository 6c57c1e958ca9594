"""kernelpack.files.digest against hashlib's (OpenSSL's) sha256, on fresh random data of sizes
each side of the limit where it changes implementation."""

from __future__ import annotations

import hashlib
import os

import pytest

from kernelpack.files import digest

SIZES = (0, 1, 63, 64, 65, digest.BUILTIN_LIMIT - 1, digest.BUILTIN_LIMIT, 3 * 1024 * 1024 + 7)


@pytest.mark.parametrize("size", SIZES)
def test_sha256_hex_is_sha256(size: int) -> None:
    data = os.urandom(size)
    assert digest.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_a_python_without_the_builtin_hash_uses_hashlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest, "_builtin_sha256", None)
    data = os.urandom(1000)
    assert digest.sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_the_small_path_is_cpythons_own() -> None:
    """Below the limit the digest is CPython's built-in module's, not OpenSSL's: that is the
    2 ms this module exists to save (on the Pythons kernelpack supports, both are built in)."""
    assert digest._builtin_sha256 is not None
    assert not digest._builtin_sha256.__name__.startswith("openssl")
