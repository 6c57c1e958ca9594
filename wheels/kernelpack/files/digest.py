"""sha256 for the loader's checks, without OpenSSL's start where the data is small.

``hashlib.sha256`` is OpenSSL's: importing hashlib loads libcrypto and initialises it, about 2 ms
of every fresh process's first load (3.4 ms on the H200 machine), for a cubin of a few KiB. CPython
also builds its own sha256 (HACL*, the module ``_sha2`` from Python 3.12, ``_sha256`` before),
which starts in 0.2 ms but hashes about a quarter as fast (300 against 1180 MB/s on the development
machine, docs/loader.md "Ready time"), so the two meet near 1 MB: data below
:data:`BUILTIN_LIMIT` goes to CPython's, larger data to OpenSSL's. Both compute the same function,
so the digests are the same whichever does it. A build of Python without the built-in module
(``--with-builtin-hashlib-hashes`` can leave it out) uses hashlib throughout.
"""

BUILTIN_LIMIT = 512 * 1024  # bytes: well below where OpenSSL's speed pays for its start

try:
    from _sha2 import sha256 as _builtin_sha256  # Python 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256 as _builtin_sha256  # Python 3.11
    except ImportError:  # a Python built without it: hashlib's for all sizes
        _builtin_sha256 = None


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` in lowercase hex."""
    if _builtin_sha256 is not None and len(data) < BUILTIN_LIMIT:
        digest: str = _builtin_sha256(data).hexdigest()
        return digest
    import hashlib  # deferred: OpenSSL's start (about 2 ms), for data large enough to repay it

    return hashlib.sha256(data).hexdigest()
