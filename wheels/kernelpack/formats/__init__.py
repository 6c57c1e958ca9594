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
:mod:`.cubins`), :mod:`.image_file` tells which format a file is, and this module gives their names
one import path. It imports them on first use of a name: a load imports :mod:`.index` (the
index's types) and, for an image inside a bundle, :mod:`.bundles`, never the ELF and msgpack
readers and their classes (19 to 31 ms, docs/loader.md "Ready time") that ``kernel.info`` of a
run-time compiled image, ``inspect`` and the builder need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from .code_objects import (
        EM_AMDGPU,
        AmdKernel,
        CodeObject,
        KernelArg,
        read_code_object,
    )
    from .cubins import (
        EM_CUDA,
        Cubin,
        CudaKernel,
        Ptx,
        read_cubin,
        read_ptx,
    )
    from .image_file import (
        ImageFile,
        read_image_file,
    )

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

# name -> the module that defines it, imported when the name is first asked for
_HOMES = {
    name: module
    for module, names in (
        (
            "bundles",
            (
                "BUNDLE_MAGIC",
                "CCOB_MAGIC",
                "DEFAULT_CCOB_VERSION",
                "HIP_BUNDLE_ALIGNMENT",
                "HOST_ENTRY_ID",
                "Bundle",
                "BundleEntry",
                "CompressedHeader",
                "compress_bundle",
                "parse_bundle",
                "read_bundle",
                "require_zstd",
                "split_bundle_id",
                "write_bundle",
            ),
        ),
        ("code_objects", ("EM_AMDGPU", "AmdKernel", "CodeObject", "KernelArg", "read_code_object")),
        ("cubins", ("EM_CUDA", "Cubin", "CudaKernel", "Ptx", "read_cubin", "read_ptx")),
        ("image_file", ("ImageFile", "read_image_file")),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    module = _HOMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # asked once: later lookups find it here
    return value
