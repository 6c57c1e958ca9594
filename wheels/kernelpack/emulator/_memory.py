"""Raw device bytes in the emulator's memory, as kernelpack.devices.memory.DeviceMemory gives them on a GPU.

Hosts that work in plain addresses (the walk's :func:`kernelpack.walk.gpu._walk`) take a
DeviceMemory; this is the same interface over the emulator's memory, which is host memory: a
buffer is a numpy uint8 view of a :class:`kernelpack.emulator.DeviceArray` (so it slices as a
torch or CuPy buffer does, and its address is the view's), streams are 0, launches run to the end
before they return (so a copy "on the side stream" is a plain copy and an event has nothing to
wait for), and page-locked memory is ordinary numpy memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..devices.memory import Pinned

FREE_BYTES = 1 << 30  # what the walk may plan a piece of the batch for


class _Done:
    """A stream or event of the emulator: everything queued has already run."""

    def synchronize(self) -> None:
        return None


class EmulatorMemory:
    """DeviceMemory's interface over the emulator's memory (see the module docstring)."""

    framework = "emulator"

    def __init__(self, make: Any) -> None:
        self._make = make  # (nbytes) -> DeviceArray of 0xFF bytes
        self._owners: list[Any] = []  # the DeviceArrays the handed-out views live in

    def _buffer(self, nbytes: int) -> np.ndarray[Any, Any]:
        owner = self._make(max(nbytes, 16))
        self._owners.append(owner)
        view: np.ndarray[Any, Any] = owner.view()
        return view

    def free_bytes(self) -> int:
        return FREE_BYTES

    def upload(self, host: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        buffer = self._buffer(raw.size)
        buffer[: raw.size] = raw
        if raw.size == 0:
            buffer[:] = 0
        return buffer

    def filled(self, nbytes: int, byte: int) -> np.ndarray[Any, Any]:
        buffer = self._buffer(nbytes)
        buffer[:] = byte
        return buffer

    def download(self, buffer: Any, dtype: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        return self.typed(buffer, np.dtype(dtype).name, shape).copy()

    def typed(self, buffer: Any, dtype: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        view: np.ndarray[Any, Any] = buffer[:count].view(dtype).reshape(shape)
        return view

    def pointer(self, buffer: Any) -> int:
        return int(buffer.ctypes.data)

    def stream(self) -> int:
        return 0

    def pinned(self, nbytes: int) -> Pinned:
        host = np.zeros(max(nbytes, 1), dtype=np.uint8)
        return host, host[:nbytes]

    def side_stream(self) -> _Done:
        return _Done()

    def side_waits(self, side: Any) -> None:
        return None

    def copy_to_host(self, host: Pinned, offset: int, buffer: Any, nbytes: int, side: Any) -> None:
        host[1][offset : offset + nbytes] = buffer[:nbytes]

    def mark(self, side: Any) -> _Done:
        return _Done()
