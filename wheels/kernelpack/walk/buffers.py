"""Walk buffers: GPU memory and its transfers through torch or CuPy, for the walk kernels.

This module's one job is memory: telling which framework and GPU a caller's array lives on (and
its address), and :class:`Buffers`, raw device bytes on one GPU through that framework (uploads,
poisoned outputs, downloads, page-locked host memory, and the side stream that copies results back
while the next piece computes). What is launched on these buffers is :mod:`kernelpack.walk.gpu`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import RuntimeLibraryError


def on_device(value: object) -> bool:
    """Whether ``value`` is an array on a CUDA/HIP device (torch, CuPy: the CUDA array
    interface)."""
    return hasattr(value, "__cuda_array_interface__")


def framework_of(value: object) -> str:
    module = type(value).__module__.split(".")[0]
    if module not in ("torch", "cupy"):
        raise ValueError(
            f"shifts: arrays on the GPU are taken from torch or CuPy, got {type(value).__name__}"
        )
    return module


def vendor_of(value: Any) -> str:
    """ "hip" for an array of a ROCm build of torch or CuPy, else "cuda"."""
    if framework_of(value) == "torch":
        import torch

        return "hip" if torch.version.hip else "cuda"
    import cupy

    return "hip" if cupy.cuda.runtime.is_hip else "cuda"


def device_index(value: Any) -> int:
    device = value.device
    return int(device.index if hasattr(device, "index") else device.id)


def device_array(value: Any, name: str) -> tuple[int, tuple[int, ...]]:
    """Address and shape of a C-contiguous int64 device array, or a ValueError naming it."""
    interface = value.__cuda_array_interface__
    shape = tuple(int(n) for n in interface["shape"])
    contiguous = interface.get("strides") in (None, (8 * shape[1], 8) if len(shape) == 2 else ())
    if interface["typestr"] != "<i8" or not contiguous:
        raise ValueError(
            f"{name}: expected a C-contiguous int64 array on the GPU, got typestr "
            f"{interface['typestr']} strides {interface.get('strides')}; convert it on the device "
            "first (torch: .to(torch.int64).contiguous())"
        )
    return int(interface["data"][0]), shape


class Buffers:
    """Device buffers through torch or CuPy on one device, as raw bytes."""

    def __init__(self, device: int, framework: str | None = None) -> None:
        self.device = device
        for name in (framework,) if framework else ("torch", "cupy"):
            try:
                self.framework = name
                self._xp: Any = __import__(name)
                return
            except ImportError:
                continue
        raise RuntimeLibraryError(
            "kernelpack.walk.run moves arrays to the GPU through torch or CuPy, and neither is "
            "installed; install one of them (or use run_numpy on the CPU)"
        )

    def free_bytes(self) -> int:
        if self.framework == "torch":
            return int(self._xp.cuda.mem_get_info(self.device)[0])
        with self._xp.cuda.Device(self.device):
            return int(self._xp.cuda.runtime.memGetInfo()[0])

    def upload(self, array: npt.NDArray[Any]) -> Any:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if raw.size == 0:  # a valid address for an empty table
            raw = np.zeros(16, dtype=np.uint8)
        if not raw.flags.writeable:  # torch warns on read-only numpy memory
            raw = raw.copy()
        if self.framework == "torch":
            return self._xp.from_numpy(raw).to(f"cuda:{self.device}")
        with self._xp.cuda.Device(self.device):
            return self._xp.asarray(raw)

    def filled(self, nbytes: int, byte: int) -> Any:
        nbytes = max(nbytes, 16)
        if self.framework == "torch":
            xp = self._xp
            return xp.full((nbytes,), byte, dtype=xp.uint8, device=f"cuda:{self.device}")
        with self._xp.cuda.Device(self.device):
            return self._xp.full(nbytes, byte, dtype=self._xp.uint8)

    def download(self, buffer: Any, dtype: type[Any], shape: tuple[int, ...]) -> npt.NDArray[Any]:
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        part = buffer[:count]
        raw = part.cpu().numpy() if self.framework == "torch" else part.get()
        host: npt.NDArray[Any] = np.asarray(raw).view(dtype).reshape(shape)
        return host

    def typed(self, buffer: Any, dtype: str, shape: tuple[int, ...]) -> Any:
        """The bytes of ``buffer`` as a device array of ``dtype`` (a numpy name) and ``shape``."""
        count = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return buffer[:count].view(getattr(self._xp, dtype)).reshape(shape)

    def pointer(self, buffer: Any) -> int:
        return int(buffer.data_ptr()) if self.framework == "torch" else int(buffer.data.ptr)

    # Copies to the host that overlap the next piece's kernels: page-locked host memory, a
    # second stream that waits for the launching stream's work so far, events to wait on.

    def pinned(self, nbytes: int) -> tuple[Any, npt.NDArray[np.uint8]]:
        """Page-locked host memory of ``nbytes`` (its owner, and the bytes as numpy)."""
        if self.framework == "torch":
            owner = self._xp.empty(max(nbytes, 1), dtype=self._xp.uint8, pin_memory=True)
            return owner, owner.numpy()[:nbytes]
        owner = self._xp.cuda.alloc_pinned_memory(max(nbytes, 1))
        return owner, np.frombuffer(owner, np.uint8, nbytes)

    def side_stream(self) -> Any:
        if self.framework == "torch":
            return self._xp.cuda.Stream(device=self.device)
        with self._xp.cuda.Device(self.device):
            return self._xp.cuda.Stream(non_blocking=True)

    def side_waits(self, side: Any) -> None:
        """``side`` runs what is queued on it next only after the launching stream's work so
        far."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(self._xp.cuda.current_stream(self.device))
        else:
            with self._xp.cuda.Device(self.device):  # CuPy makes the event on this device
                event = self._xp.cuda.Event()
                event.record(self._xp.cuda.get_current_stream())
        side.wait_event(event)

    def copy_to_host(
        self,
        host: tuple[Any, npt.NDArray[np.uint8]],
        offset: int,
        buffer: Any,
        nbytes: int,
        side: Any,
    ) -> None:
        """Queue a copy of ``nbytes`` of ``buffer`` to pinned ``host`` (from pinned(), at
        ``offset``) on ``side``."""
        owner, view = host
        if self.framework == "torch":
            with self._xp.cuda.stream(side):
                owner[offset : offset + nbytes].copy_(buffer[:nbytes], non_blocking=True)
            buffer.record_stream(side)  # the allocator keeps it until the copy has run
            return
        runtime = self._xp.cuda.runtime
        runtime.memcpyAsync(view.ctypes.data + offset, self.pointer(buffer), nbytes,
                            runtime.memcpyDeviceToHost, side.ptr)  # fmt: skip

    def mark(self, side: Any) -> Any:
        """An event after the work queued on ``side`` so far (wait on it with .synchronize())."""
        if self.framework == "torch":
            event = self._xp.cuda.Event()
            event.record(side)
            return event
        with self._xp.cuda.Device(self.device):
            event = self._xp.cuda.Event()
            event.record(side)
        return event

    def stream(self) -> int:
        if self.framework == "torch":
            return int(self._xp.cuda.current_stream(self.device).cuda_stream)
        with self._xp.cuda.Device(self.device):
            return int(self._xp.cuda.get_current_stream().ptr)
