"""Page-locked host memory kept for reuse: a pool of buffers by size class.

Allocating page-locked memory is slow (the driver locks every page: about half of the first walk
at B = 10^6, K = 32, issue 46), and the results a call returns live in it, so a framework's own
cache, which reuses a buffer only for a request of the same rounded size, still allocates afresh
at every new size. This pool rounds a request up to a size class (1, 1.25, 1.5 or 1.75 times a
power of two, at least :data:`MIN_CLASS`: at most a quarter more than asked for; powers of two
through torch, whose host allocator pins that much anyway) and serves it from the smallest idle
buffer of that class or any larger one, so calls at other sizes reuse what earlier calls
locked.

A buffer is leased as a numpy view through a ctypes array of its own, which every array derived
from the view keeps alive; when the last of them is collected (the caller dropped the results),
the buffer goes back to the pool, never earlier, so a result is never overwritten by a later
call. Idle buffers beyond :data:`MAX_IDLE_BYTES` are freed, least recently used first, and all
idle ones at exit (:func:`pool` registers that; torch's pinned tensors go back to torch's own
host cache, which frees them at its exit). Allocation is passed in, so the logic runs
without a GPU in tests; :func:`pool` gives the one pool of a framework (torch or CuPy), whose
page-locked memory serves copies from every GPU of the process (unified addressing).
"""

from __future__ import annotations

import atexit
import ctypes
import importlib
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # numpy is imported where a buffer is viewed: the loader reaches this module,
    import numpy as np  # and kernelpack's report commands run without numpy (issue 50 item 8)

MIN_CLASS = 1 << 20  # the smallest buffer: small calls share one class
STEPS = (4, 5, 6, 7)  # size classes are these times a power of two
# torch's host allocator pins every block at the next power of two: classes in between would
# pin that much and use less of it
TORCH_STEPS = (4,)
MAX_IDLE_BYTES = 4 << 30  # idle page-locked memory kept for later calls, the rest freed


def size_class(nbytes: int, steps: tuple[int, ...] = STEPS) -> int:
    """The bytes of the buffer that serves a request of ``nbytes``: the smallest s * 2^k >= it
    with s in ``steps`` (each in 4..7), and at least MIN_CLASS."""
    if nbytes <= MIN_CLASS:
        return MIN_CLASS
    shift = max(0, (nbytes - 1).bit_length() - 3)  # 4 * 2^shift <= nbytes - 1 < 8 * 2^shift
    for step in (*steps, 8):
        if step << shift >= nbytes:
            return step << shift
    raise AssertionError("unreachable: 8 * 2^shift >= nbytes")


class Pinned(NamedTuple):
    """A leased buffer: ``owner`` the framework's object (for its own copy calls), ``view`` the
    first bytes asked for as numpy uint8, and their address."""

    owner: Any
    view: np.ndarray[Any, np.dtype[np.uint8]]
    address: int


@dataclass(eq=False)
class _Buffer:
    owner: Any
    address: int
    nbytes: int
    used: int = 0  # the pool's clock at its last lease, for the least recently used


@dataclass
class PoolStats:
    """What the pool did, for tests and the benchmark: buffers allocated (and the time it took)
    and freed, leases served from an idle buffer, and the bytes held idle and leased now."""

    allocations: int = 0
    reuses: int = 0
    frees: int = 0
    allocate_seconds: float = 0.0  # wall time spent allocating (what reuse saves)
    idle_bytes: int = 0
    leased_bytes: int = 0


class PinnedPool:
    """Page-locked buffers by size class (module docstring). ``allocate(nbytes)`` returns the
    framework's owner and its address; ``free(owner)`` releases one (dropping the owner is
    enough for torch and CuPy, whose objects free their memory)."""

    def __init__(
        self,
        allocate: Callable[[int], tuple[Any, int]],
        free: Callable[[Any], None] = lambda owner: None,
        max_idle_bytes: int = MAX_IDLE_BYTES,
        steps: tuple[int, ...] = STEPS,
    ) -> None:
        self._allocate, self._free, self.max_idle_bytes = allocate, free, max_idle_bytes
        self.steps = steps
        self._idle: list[_Buffer] = []
        self._lock = threading.Lock()  # leases are given back from the garbage collector
        self._clock = 0
        self.stats = PoolStats()

    def take(self, nbytes: int) -> Pinned:
        """A buffer of at least ``nbytes``, leased until the view and everything derived from it
        are collected. An allocation that fails (out of page-locked memory) is tried again once
        after the idle buffers are freed."""
        wanted = size_class(max(nbytes, 1), self.steps)
        with self._lock:
            fitting = [b for b in self._idle if b.nbytes >= wanted]
            buffer = min(fitting, key=lambda b: (b.nbytes, -b.used)) if fitting else None
            if buffer is not None:
                self._idle.remove(buffer)
                self.stats.reuses += 1
                self.stats.idle_bytes -= buffer.nbytes
        if buffer is None:
            buffer = self._new(wanted)
        with self._lock:
            self._clock += 1
            buffer.used = self._clock
            self.stats.leased_bytes += buffer.nbytes
        lease = (ctypes.c_uint8 * max(nbytes, 1)).from_address(buffer.address)
        weakref.finalize(lease, self._give_back, buffer)
        import numpy as np  # deferred: kernelpack's report commands run without numpy

        view = np.frombuffer(memoryview(lease), dtype=np.uint8)[:nbytes]
        return Pinned(buffer.owner, view, buffer.address)

    def _new(self, nbytes: int) -> _Buffer:
        started = time.perf_counter()
        try:
            owner, address = self._allocate(nbytes)
        except (RuntimeError, MemoryError, OSError):
            if not self.clear():
                raise
            owner, address = self._allocate(nbytes)
        with self._lock:
            self.stats.allocations += 1
            self.stats.allocate_seconds += time.perf_counter() - started
        return _Buffer(owner, address, nbytes)

    def _give_back(self, buffer: _Buffer) -> None:
        with self._lock:
            self.stats.leased_bytes -= buffer.nbytes
            self._idle.append(buffer)
            self.stats.idle_bytes += buffer.nbytes
            freed = []
            while self.stats.idle_bytes > self.max_idle_bytes and self._idle:
                oldest = min(self._idle, key=lambda b: b.used)
                self._idle.remove(oldest)
                self.stats.idle_bytes -= oldest.nbytes
                freed.append(oldest)
        self._release(freed)

    def clear(self) -> int:
        """Free every idle buffer (leased ones return later and stay); how many were freed."""
        with self._lock:
            freed, self._idle = self._idle, []
            self.stats.idle_bytes = 0
        self._release(freed)
        return len(freed)

    def _release(self, buffers: list[_Buffer]) -> None:
        for buffer in buffers:
            self._free(buffer.owner)
        with self._lock:
            self.stats.frees += len(buffers)


_POOLS: dict[str, PinnedPool] = {}
_POOLS_LOCK = threading.Lock()


def pool(framework: str) -> PinnedPool:
    """The process's pool of page-locked memory of ``framework`` ("torch" or "cupy"), made on
    first use and emptied at exit."""
    with _POOLS_LOCK:
        found = _POOLS.get(framework)
        if found is None:
            xp = importlib.import_module(framework)
            if framework == "torch":
                found = PinnedPool(_torch_allocator(xp), steps=TORCH_STEPS)
            else:
                found = PinnedPool(_cupy_allocator(xp))
            atexit.register(found.clear)
            _POOLS[framework] = found
        return found


def _torch_allocator(torch: Any) -> Callable[[int], tuple[Any, int]]:
    def allocate(nbytes: int) -> tuple[Any, int]:
        owner = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return owner, int(owner.data_ptr())

    return allocate


def _cupy_allocator(cupy: Any) -> Callable[[int], tuple[Any, int]]:
    def allocate(nbytes: int) -> tuple[Any, int]:
        owner = cupy.cuda.alloc_pinned_memory(nbytes)
        return owner, int(owner.ptr)

    return allocate
