"""Which GPU code file a file is: a bundle (plain or CCOB), a code object, a cubin or PTX text,
told apart by its first bytes and read by that format's reader (``kernelpack inspect``)."""

from __future__ import annotations

import struct
from typing import TypeAlias

from ..errors import FormatError
from .bundles import BUNDLE_MAGIC, CCOB_MAGIC, Bundle, parse_bundle
from .code_objects import EM_AMDGPU, CodeObject, read_code_object
from .cubins import EM_CUDA, Cubin, Ptx, read_cubin, read_ptx
from .elf import Buffer

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
