"""Read and write the files GPU code ships in: offload bundles, code objects, cubins, PTX.

One reader and writer for the builder (which bundles, compresses and indexes what the compilers
made) and for the installed package (which picks an image out of a bundle and checks it). Layouts
are in shared/reference/FORMATS.md, taken from LLVM (clang/lib/Driver/OffloadBundler.cpp,
AMDGPUUsage.rst, ELF.h) and checked against files made by hipcc 7 / LLVM 21 and nvcc 13.0 (the
fixtures under tests/fixtures/objects).

Every reader takes the file's bytes and a path used only in messages. Anything truncated, corrupt
or hostile ends in one :class:`~kernelpack.errors.FormatError` naming the path, the byte offset
and what was expected there; no size read from a header is used to allocate or to loop before it
has been checked against the bytes present and a sane bound.

The readers live in one module per format (:mod:`.bundles`, :mod:`.code_objects`,
:mod:`.cubins`); this module tells which format a file is and gives their names one import path.
"""

from __future__ import annotations

import struct
from typing import TypeAlias

from ..errors import FormatError
from .bundles import (
    BUNDLE_MAGIC,
    CCOB_MAGIC,
    DEFAULT_CCOB_VERSION,
    HIP_BUNDLE_ALIGNMENT,
    HOST_ENTRY_ID,
    Bundle,
    BundleEntry,
    CompressedHeader,
    compress_bundle,
    parse_bundle,
    read_bundle,
    require_zstd,
    split_bundle_id,
    write_bundle,
)
from .code_objects import EM_AMDGPU, AmdKernel, CodeObject, KernelArg, read_code_object
from .cubins import EM_CUDA, Cubin, CudaKernel, Ptx, read_cubin, read_ptx
from .elf import Buffer

__all__ = [
    "BUNDLE_MAGIC",
    "CCOB_MAGIC",
    "DEFAULT_CCOB_VERSION",
    "EM_AMDGPU",
    "EM_CUDA",
    "HIP_BUNDLE_ALIGNMENT",
    "HOST_ENTRY_ID",
    "AmdKernel",
    "Bundle",
    "BundleEntry",
    "CodeObject",
    "CompressedHeader",
    "Cubin",
    "CudaKernel",
    "ImageFile",
    "KernelArg",
    "Ptx",
    "compress_bundle",
    "parse_bundle",
    "read_bundle",
    "read_code_object",
    "read_cubin",
    "read_image_file",
    "read_ptx",
    "require_zstd",
    "split_bundle_id",
    "write_bundle",
]

ImageFile: TypeAlias = Bundle | CodeObject | Cubin | Ptx


def read_image_file(data: Buffer, path: str) -> ImageFile:
    """Whatever GPU code file this is: a bundle (plain or CCOB), a code object, a cubin or PTX."""
    head = bytes(data[:65536])  # what tells the formats apart, copied once from a view
    if head.startswith((BUNDLE_MAGIC, CCOB_MAGIC)):
        return parse_bundle(data, path)
    if head.startswith(b"\x7fELF"):
        if len(head) < 20:
            raise FormatError(path, len(head), "an ELF header")
        (machine,) = struct.unpack_from("<H", head, 18)
        if machine == EM_AMDGPU:
            return read_code_object(data, path)
        if machine == EM_CUDA:
            return read_cubin(data, path)
        raise FormatError(
            path, 18, f"ELF machine {EM_AMDGPU} (AMDGPU) or {EM_CUDA} (CUDA), not {machine}"
        )
    if b".version" in head and b".target" in head:
        return read_ptx(data, path)
    raise FormatError(
        path, 0, "an offload bundle, a CCOB, an AMDGPU code object, a cubin or PTX text"
    )
