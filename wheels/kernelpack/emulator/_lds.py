"""The LDS the emulator runs a kernel with: a reservation that every 32-bit LDS address falls in.

The emulator's DS instructions compute every lane's address and read LDS there, inactive lanes
included (their VGPRs hold whatever they held last: a float, a pointer), and write the old value
back where the lane is inactive; on a GPU an inactive lane touches nothing. Given an LDS the size
of the kernel's allocation (as run_asm makes it), such a read lands outside it and the process
dies (SIGSEGV): mlp::rms_norm_weight_grad does, when its last column group leaves lanes idle.
So each launch gets its LDS inside a reservation of 4 GiB and 64 KiB (every 32-bit address and an
instruction's 16-bit offset past it), never backed by memory but where touched (zero pages on a
read). After the launch, the pages touched outside the allocation are counted (mincore) and the
reservation is emptied (madvise), so that each launch starts from zeros. Nothing else changes:
active lanes read and write the same bytes as before.

A launch that touched LDS outside its allocation has either inactive lanes reading stale
addresses (the emulator's doing) or a kernel reading or writing past its LDS (on a GPU: reads
give 0, writes are dropped); the count cannot tell them apart, and says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import RuntimeLibraryError

RESERVATION = (1 << 32) + (1 << 16)
PAGE = mmap.PAGESIZE
MAP_NORESERVE = 0x4000  # Linux's (Python's mmap names it from 3.13 on)
MADV_DONTNEED = 4


class LdsReservation:
    """One reservation, made on first use and kept for the runtime's life."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._anchor: Any = None  # keeps the mapping's buffer exported (its address stable)
        self.address = 0
        self._libc: Any = None

    def _open(self) -> None:
        if self._map is not None:
            return
        try:
            self._map = mmap.mmap(
                -1,
                RESERVATION,
                flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except OSError as error:
            raise RuntimeLibraryError(
                f"the emulated runtime could not reserve {RESERVATION} bytes of address space "
                f"for LDS: {error}"
            ) from None
        self._anchor = ctypes.c_char.from_buffer(self._map)
        self.address = ctypes.addressof(self._anchor)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._libc = libc

    @contextlib.contextmanager
    def around(self, emu: Any, lds_bytes: int) -> Iterator[list[int]]:
        """While the block runs, run_asm's LDS buffer (the first buffer of its
        ``max(lds_bytes // 4, 1)`` words it makes) is this reservation; afterwards the list it
        yields holds the pages touched outside the allocation."""
        self._open()
        real = emu.Buffer
        words = max(lds_bytes // 4, 1)
        placed: list[bool] = []

        def buffer(device: Any, size: int, dtype: Any, *args: Any, **options: Any) -> Any:
            lds = size == words and dtype == emu.dtypes.uint32 and not args
            if lds and not placed and options.get("options") is None:
                placed.append(True)
                options["options"] = emu.BufferSpec(external_ptr=self.address)
            return real(device, size, dtype, *args, **options)

        outside: list[int] = []
        emu.Buffer = buffer
        try:
            yield outside
        finally:
            emu.Buffer = real
            outside.append(self._touched_past(words * 4))
            self._libc.madvise(self.address, RESERVATION, MADV_DONTNEED)
        if not placed:
            raise RuntimeLibraryError(
                "the emulator made no LDS buffer of the size asked for: its run_asm is not the "
                "one kernelpack.emulator was written against (docs/amd.md names the commit)"
            )

    def _touched_past(self, allocated: int) -> int:
        """Pages of the reservation in memory past the allocation's own pages."""
        first = -(-allocated // PAGE)
        pages = RESERVATION // PAGE - first
        vector = np.zeros(pages, dtype=np.uint8)
        start = self.address + first * PAGE
        if self._libc.mincore(start, pages * PAGE, vector.ctypes.data) != 0:
            raise RuntimeLibraryError(f"mincore failed (errno {ctypes.get_errno()})")
        return int(np.count_nonzero(vector & 1))
