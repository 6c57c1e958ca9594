"""Raw device memory on one GPU through torch or CuPy, for kernels that take plain addresses.

The walks' memory: buffers, their transfers, and page-locked host memory with a second stream for
copies that overlap the next kernels. The emulator's DeviceMemory (kernelpack.emulator._memory)
has the same interface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import numpy as np

from .arrays import download, gpu_framework, parse_device
from .pinned import pool as pinned_pool

if TYPE_CHECKING:
    from typing import TypeAlias

    # page-locked host memory: its owner (the framework's tensor or CuPy's memory) and its bytes
    Pinned: TypeAlias = tuple[Any, np.ndarray[Any, Any]]


class DeviceMemory:
    """Raw device bytes on one GPU through torch or CuPy, for kernels that take plain addresses.

    Buffers are 1-D uint8 arrays of the framework, at least 16 bytes (an empty table still gets
    an address), made and used on the framework's current stream on the device, so that they
    order with the caller's own work. For results copied back while the next kernels run there
    are page-locked host memory, a second stream that waits for the current one, and events.
    """

    def __init__(self, device: str, framework: str = "") -> None:
        """``device`` "cuda:N" or "hip:N"; ``framework`` "torch" or "cupy" (that of the
        caller's arrays, so results come back in it), or "" for the installed one, torch first."""
        self.index = parse_device(device).ordinal
        self.framework = framework or gpu_framework()
        self._xp: Any = importlib.import_module(self.framework)
        self._torch_device = f"cuda:{self.index}"  # ROCm builds of torch say "cuda" too

    def free_bytes(self) -> int:
        """Free memory on the device as the framework reports it."""
        if self.framework == "torch":
            return int(self._xp.cuda.mem_get_info(self.index)[0])
        with self._xp.cuda.Device(self.index):
            return int(self._xp.cuda.runtime.memGetInfo()[0])

    def upload(self, host: np.ndarray[Any, Any]) -> Any:
        """A device copy of a numpy array's bytes."""
        raw = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        if raw.size == 0:
            raw = np.zeros(16, dtype=np.uint8)
        if not raw.flags.writeable:  # torch warns on read-only numpy memory
            raw = raw.copy()
        if self.framework == "torch":
            return self._xp.from_numpy(raw).to(self._torch_device)
        with self._xp.cuda.Device(self.index):
            return self._xp.asarray(raw)

    def filled(self, nbytes: int, byte: int) -> Any:
        """``nbytes`` bytes, each ``byte`` (poison for outputs, zeros for counters)."""
        xp, nbytes = self._xp, max(nbytes, 16)
        if self.framework == "torch":
            return xp.full((nbytes,), byte, dtype=xp.uint8, device=self._torch_device)
        with xp.cuda.Device(self.index):
            return xp.full(nbytes, byte, dtype=xp.uint8)

    def download(self, buffer: Any, dtype: Any, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
        """The first bytes of ``buffer`` on the host as a numpy array of ``dtype`` and ``shape``
        (after the work queued so far)."""
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        host: np.ndarray[Any, Any] = download(buffer[:count]).view(dtype).reshape(shape)
        return host

    def typed(self, buffer: Any, dtype: str, shape: tuple[int, ...]) -> Any:
        """The first bytes of ``buffer`` as a device array of ``dtype`` (a numpy name) and
        ``shape``, without a copy."""
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buffer[:count].view(getattr(self._xp, dtype)).reshape(shape)

    def pointer(self, buffer: Any) -> int:
        return int(buffer.data_ptr()) if self.framework == "torch" else int(buffer.data.ptr)

    def stream(self) -> int:
        """The raw handle of the framework's current stream on the device."""
        if self.framework == "torch":
            return int(self._xp.cuda.current_stream(self.index).cuda_stream)
        with self._xp.cuda.Device(self.index):
            return int(self._xp.cuda.get_current_stream().ptr)

    def pinned(self, nbytes: int) -> Pinned:
        """Page-locked host memory of ``nbytes`` (its owner, and its bytes as numpy), from the
        framework's pool (kernelpack.devices.pinned): it goes back there once the numpy view
        and every array made from it are collected, for a later call of any size to reuse."""
        owner, view, _ = pinned_pool(self.framework).take(nbytes)
        return owner, view

    def side_stream(self) -> Any:
        """A second stream on the device, for copies that overlap the current stream's work."""
        if self.framework == "torch":
            return self._xp.cuda.Stream(device=self.index)
        with self._xp.cuda.Device(self.index):
            return self._xp.cuda.Stream(non_blocking=True)

    def side_waits(self, side: Any) -> None:
        """What is queued on ``side`` next runs only after the current stream's work so far."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(self._xp.cuda.current_stream(self.index))
        else:
            with self._xp.cuda.Device(self.index):  # CuPy makes the event on this device
                event = self._xp.cuda.Event()
                event.record(self._xp.cuda.get_current_stream())
        side.wait_event(event)

    def copy_to_host(self, host: Pinned, offset: int, buffer: Any, nbytes: int, side: Any) -> None:
        """Queue on ``side`` a copy of the first ``nbytes`` of ``buffer`` into pinned ``host``
        (from :meth:`pinned`) at ``offset``."""
        owner, view = host
        if self.framework == "torch":
            with self._xp.cuda.stream(side):
                owner[offset : offset + nbytes].copy_(buffer[:nbytes], non_blocking=True)
            buffer.record_stream(side)  # the allocator keeps it until the copy has run
            return
        runtime = self._xp.cuda.runtime
        target = view.ctypes.data + offset
        kind = runtime.memcpyDeviceToHost
        runtime.memcpyAsync(target, self.pointer(buffer), nbytes, kind, side.ptr)

    def mark(self, side: Any) -> Any:
        """An event after the work queued on ``side`` so far (wait on it with .synchronize())."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(side)
            return event
        with self._xp.cuda.Device(self.index):
            event = self._xp.cuda.Event()
            event.record(side)
        return event
