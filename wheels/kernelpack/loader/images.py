"""Image kinds, and the one reader of an image's bytes out of a package or build output folder.

An *image* is one compiled object of one module for one target, listed in an index
(:class:`kernelpack.formats.index.Image`). There are three kinds; everything kernelpack and its builder know
about a kind (its vendor, where it sorts in a module's image list, the file it is packed into, the
compiler flags that make it) is one row of :data:`IMAGE_KINDS`, so a fourth kind is one new row.

:func:`read_image` is how the loader, ``kernelpack info`` and the builder (merge, wheels) get an
image's bytes: the byte range the index names, out of the file it names (through the decompressed
bundle for a compressed one), checked against the index's sha256 before anyone uses it.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import os
import stat
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from .._tables import unique_index
from ..errors import FormatError, IntegrityError, UsageError
from ..files.digest import sha256_hex
from ..files.regular import IMAGE_FILE_LIMIT, read_regular
from ..formats.index import Image

if TYPE_CHECKING:
    from ..formats import BundleEntry

KindName = Literal["code_object", "cubin", "ptx"]
Vendor = Literal["amd", "nvidia"]


class ImageKind(NamedTuple):
    """One kind of image and how it is made, packed and listed (a NamedTuple, not a dataclass:
    the loader imports this module, and creating a dataclass costs a first load about 1 ms)."""

    name: KindName
    vendor: Vendor
    order: int  # place in a module's image list (and in merged indexes): AMD, cubins, PTX
    file_suffix: str  # its file in a package's device/ folder
    bundled: bool  # True: every target's image in one offload bundle per module (AMD)
    object_suffix: str  # one compiled object in the build cache and temporary tree
    compile_flags: tuple[str, ...]  # what hipcc / nvcc are given to make one (index "flags")
    compiler: Literal["hip", "cuda"]


# hipcc: a device code object (--genco), plain rather than bundled (--no-gpu-bundle-output): the
# builder writes the bundle itself
_HIPCC_GENCO = ("--genco", "-O3", "--no-gpu-bundle-output")
IMAGE_KINDS: tuple[ImageKind, ...] = (
    # name, vendor, order, file suffix, bundled, object suffix, compile flags, compiler
    ImageKind("code_object", "amd", 0, ".hsaco", True, ".co", _HIPCC_GENCO, "hip"),
    ImageKind("cubin", "nvidia", 1, ".cubin", False, ".cubin", ("-cubin", "-O3"), "cuda"),
    ImageKind("ptx", "nvidia", 2, ".ptx", False, ".ptx", ("-ptx", "-O3"), "cuda"),
)


KINDS_BY_NAME: dict[str, ImageKind] = unique_index(
    IMAGE_KINDS, lambda kind: kind.name, "image kind"
)
if sorted(kind.order for kind in IMAGE_KINDS) != list(range(len(IMAGE_KINDS))):
    raise AssertionError("IMAGE_KINDS orders must be 0, 1, 2, ... each once")
KINDS_OF_VENDOR: dict[str, tuple[str, ...]] = {
    vendor: tuple(k.name for k in IMAGE_KINDS if k.vendor == vendor) for vendor in ("amd", "nvidia")
}
# Suffixes of the image files a build writes into device/ (with the sources, what a rebuild owns).
IMAGE_FILE_SUFFIXES: tuple[str, ...] = tuple(k.file_suffix for k in IMAGE_KINDS)


def image_kind(name: str) -> ImageKind:
    """The row of a kind named in an index, or a UsageError listing the known kinds."""
    found = KINDS_BY_NAME.get(name)
    if found is None:
        raise UsageError(
            f"image kind {name!r} is unknown to this kernelpack; known: "
            f"{', '.join(KINDS_BY_NAME)}. A newer kernelpack may read it"
        )
    return found


def read_image(
    package_dir: Path,
    image: Image,
    *,
    remedy: str = "reinstall kernelpack",
    bundles: "MutableMapping[Path, list[BundleEntry]] | None" = None,
) -> bytes:
    """The bytes of ``image``, read from ``package_dir / image["file"]`` and checked.

    ``offset`` and ``size`` locate the image in the file, or for a compressed bundle
    (``compression`` other than "none") in the bundle it decompresses to. An unreadable or short
    file, a range outside it, or bytes whose sha256 is not the index's raise IntegrityError naming
    the file, both values in full, and ``remedy`` (what restores the folder: reinstall for a
    package, rebuild for a build output). ``bundles``, when given, keeps each compressed bundle's
    entries by path across calls (the builder reads every image of a bundle in turn).
    """
    path = package_dir / image["file"]
    offset, size = image["offset"], image["size"]
    if image["compression"] == "none":
        data = _read_range(path, offset, size, remedy)
    else:
        entries = bundles.get(path) if bundles is not None else None
        if entries is None:
            entries = _bundle_entries(path, remedy)
            if bundles is not None:
                bundles[path] = entries
        placed = [e for e in entries if e.offset == offset and e.size == size]
        placed.sort(key=lambda e: e.target != image["target"])  # the named target first
        if not placed:
            raise IntegrityError(
                f"{path}: no bundle entry of {size} bytes at offset {offset}, where the index "
                f"places the {image['target']} image; the file was changed or damaged: {remedy}"
            )
        data = placed[0].data
    verify_image(path, image, data, remedy=remedy)
    return data


def verify_image(path: Path, image: Image, data: bytes, *, remedy: str) -> None:
    """IntegrityError unless ``data`` has the index's sha256 (both digests shown whole)."""
    digest = sha256_hex(data)
    if digest != image["sha256"]:
        raise IntegrityError(
            f"{path}: the {image['target']} {image['kind']} (offset {image['offset']}, "
            f"{image['size']} bytes) has sha256 {digest}, the index says {image['sha256']}; the "
            f"file was changed or damaged: {remedy}"
        )


def _read_range(path: Path, offset: int, size: int, remedy: str) -> bytes:
    """The ``size`` bytes at ``offset`` of the image file, refused before anything is allocated
    when the file is not a regular file or is too short to hold them (an index may claim any
    size; ``read(size)`` would allocate that much first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise IntegrityError(
            f"{path}: cannot read the image: {error.strerror or error}; {remedy}"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IntegrityError(f"{path}: not a regular file; {remedy}")
        if offset + size > info.st_size:
            raise IntegrityError(
                f"{path}: {info.st_size} bytes, too short for the {size} bytes at offset {offset} "
                f"the index places there; the file is truncated: {remedy}"
            )
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as file:
            file.seek(offset)
            data = file.read(size)
    except OSError as error:
        raise IntegrityError(
            f"{path}: cannot read the image: {error.strerror or error}; {remedy}"
        ) from None
    finally:
        os.close(fd)
    if len(data) != size:
        raise IntegrityError(
            f"{path}: {len(data)} bytes at offset {offset}, the index says {size}; the file is "
            f"truncated: {remedy}"
        )
    return data


def _bundle_entries(path: Path, remedy: str) -> "list[BundleEntry]":
    """The entries of a compressed (CCOB) bundle file, offsets in the bundle it decompresses to."""
    try:
        packed = read_regular(path, limit=IMAGE_FILE_LIMIT, what="a compressed bundle")
    except OSError as error:
        raise IntegrityError(
            f"{path}: cannot read the bundle: {error.strerror or error}; {remedy}"
        ) from None
    except UsageError as error:  # a FIFO, a device, a file over the limit: never read
        raise IntegrityError(f"{error}; {remedy}") from None
    # deferred: the bundle reader and its classes, for images inside compressed bundles only
    from ..formats import read_bundle

    try:
        return read_bundle(packed, str(path))
    except FormatError as error:
        raise IntegrityError(f"{error}; the file was changed or damaged: {remedy}") from None
