"""A kernel's parameters as its compiled object records them: one shape for both vendors.

What a launch must pack, read off the object rather than the source: each explicit parameter's
place in the argument buffer (offset and size, bytes) and, where the object says it, whether it is
a pointer. AMDGPU code objects say it (the metadata's ``.value_kind``: ``global_buffer`` is a
pointer, ``by_value`` a value); cubins do not (EIATTR_KPARAM_INFO gives ordinal, offset and size
only), so their ``pointer`` is None.

What the index keeps of it is :class:`kernelpack.formats.index.KernelParam` (offset, size and the C
type the builder reads off the demangled symbol): one name per shape, the read one and the stored one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._jsonfields import json_fields


@dataclass(frozen=True)
class ObjectParam:
    ordinal: int  # its position in the C parameter list, from 0
    offset: int  # bytes from the start of the argument buffer
    size: int  # bytes
    pointer: bool | None  # None: the object does not say

    def to_json(self) -> dict[str, Any]:
        return json_fields(self)
