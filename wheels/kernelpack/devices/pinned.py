"""Page-locked host memory kept for reuse: a pool of buffers by size class.

Allocating page-locked memory is slow (the driver locks every page: about half of the first walk
at B = 10^6, K = 32, issue 46), and the results a call returns live in it, so a framework's own
cache, which reuses a buffer only for a request of the same rounded size, still allocates afresh
at every new size. This pool rounds a request up to a size class (1, 1.25, 1.5 or 1.75 times a
power of two, at least :data:`MIN_CLASS`: at most a quarter more than asked for; powers of two
through torch, whose host allocator pins that much anyway) and serves it from the smallest idle
buffer of that class or any larger one, so calls at other sizes reuse what earlier calls
locked.

A request that no idle buffer fits is served at once from ordinary (pageable) host memory, and a
page-locked buffer of its class is locked on a thread of its own for the calls after it: the
first call at a size larger than any before copies its results at pageable speed (the copies
wait for the GPU, where page-locked ones overlap it) instead of waiting for the driver to lock
every page of the buffer first, and its later calls find the buffer idle.

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
    staged: int = 0  # leases served from pageable memory while their class was locked aside
    background_seconds: float = 0.0  # of allocate_seconds, spent on the locking thread
    frees: int = 0
    allocate_seconds: float = 0.0  # wall time spent allocating (what reuse saves)
    idle_bytes: int = 0
    leased_bytes: int = 0


class PinnedPool:
    """Page-locked buffers by size class (module docstring). ``allocate(nbytes)`` returns the
    framework's owner and its address; ``free(owner)`` releases one (dropping the owner is
    enough for torch and CuPy, whose objects free their memory). ``pageable(nbytes)``, where
    given, returns an owner and an address of ordinary host memory the framework copies into
    as it does into its page-locked memory; without it a request no idle buffer fits waits for
    its allocation."""

    def __init__(
        self,
        allocate: Callable[[int], tuple[Any, int]],
        free: Callable[[Any], None] = lambda owner: None,
        max_idle_bytes: int = MAX_IDLE_BYTES,
        steps: tuple[int, ...] = STEPS,
        pageable: Callable[[int], tuple[Any, int]] | None = None,
    ) -> None:
        self._allocate, self._free, self.max_idle_bytes = allocate, free, max_idle_bytes
        self.steps = steps
        self._pageable = pageable
        self._locking: dict[int, threading.Thread] = {}  # class -> its thread locking a buffer
        self._idle: list[_Buffer] = []
        self._lock = threading.Lock()  # leases are given back from the garbage collector
        self._clock = 0
        self.stats = PoolStats()

    def take(self, nbytes: int) -> Pinned:
        """A buffer of at least ``nbytes``, leased until the view and everything derived from it
        are collected: an idle page-locked one, else pageable memory while one of its class is
        locked aside (module docstring), else (no ``pageable``) a new page-locked one. An
        allocation that fails (out of page-locked memory) is tried again once after the idle
        buffers are freed."""
        wanted = size_class(max(nbytes, 1), self.steps)
        with self._lock:
            fitting = [b for b in self._idle if b.nbytes >= wanted]
            buffer = min(fitting, key=lambda b: (b.nbytes, -b.used)) if fitting else None
            if buffer is not None:
                self._idle.remove(buffer)
                self.stats.reuses += 1
                self.stats.idle_bytes -= buffer.nbytes
            elif self._pageable is not None:
                self.stats.staged += 1
                if wanted not in self._locking:
                    thread = threading.Thread(
                        target=self._lock_aside,
                        args=(wanted,),
                        name="kernelpack-pinned",
                        daemon=True,
                    )
                    self._locking[wanted] = thread
                    thread.start()
        if buffer is None and self._pageable is not None:
            import numpy as np

            owner, address = self._pageable(max(nbytes, 1))
            staged = (ctypes.c_uint8 * max(nbytes, 1)).from_address(address)
            weakref.finalize(staged, lambda: owner)  # the memory lives as long as the view
            view = np.frombuffer(memoryview(staged), dtype=np.uint8)[:nbytes]
            return Pinned(owner, view, address)
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
            if not self._free_idle():
                raise
            owner, address = self._allocate(nbytes)
        with self._lock:
            self.stats.allocations += 1
            self.stats.allocate_seconds += time.perf_counter() - started
        return _Buffer(owner, address, nbytes)

    def _lock_aside(self, nbytes: int) -> None:
        """On its own thread: a page-locked buffer of ``nbytes`` made idle for later leases. A
        failure (out of page-locked memory) leaves the class to be tried again by a later lease."""
        started = time.perf_counter()
        try:
            buffer = self._new(nbytes)
        except (RuntimeError, MemoryError, OSError):
            buffer = None
        with self._lock:
            self.stats.background_seconds += time.perf_counter() - started
            del self._locking[nbytes]
        if buffer is not None:
            with self._lock:
                self._clock += 1
                buffer.used = self._clock
                self.stats.leased_bytes += buffer.nbytes  # _give_back counts it out again
            self._give_back(buffer)

    def wait_locked(self) -> None:
        """Wait until the buffers being locked aside are idle (for tests and clear)."""
        while True:
            with self._lock:
                threads = list(self._locking.values())
            if not threads:
                return
            for thread in threads:
                thread.join()

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
        """Free every idle buffer (leased ones return later and stay), after those being locked
        aside; how many were freed."""
        self.wait_locked()
        return self._free_idle()

    def _free_idle(self) -> int:
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
                found = PinnedPool(
                    _torch_allocator(xp), steps=TORCH_STEPS, pageable=_torch_pageable(xp)
                )
            else:
                found = PinnedPool(_cupy_allocator(xp), pageable=_numpy_pageable)
            atexit.register(found.clear)
            _POOLS[framework] = found
        return found


def _torch_allocator(torch: Any) -> Callable[[int], tuple[Any, int]]:
    def allocate(nbytes: int) -> tuple[Any, int]:
        owner = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return owner, int(owner.data_ptr())

    return allocate


def _torch_pageable(torch: Any) -> Callable[[int], tuple[Any, int]]:
    def allocate(nbytes: int) -> tuple[Any, int]:  # a CPU tensor torch's copy_ writes into
        owner = torch.empty(nbytes, dtype=torch.uint8)
        return owner, int(owner.data_ptr())

    return allocate


def _numpy_pageable(nbytes: int) -> tuple[Any, int]:
    """Host memory CuPy's memcpyAsync copies into by address (synchronously, being pageable)."""
    import numpy as np

    owner = np.empty(nbytes, dtype=np.uint8)
    return owner, int(owner.ctypes.data)


def _cupy_allocator(cupy: Any) -> Callable[[int], tuple[Any, int]]:
    def allocate(nbytes: int) -> tuple[Any, int]:
        owner = cupy.cuda.alloc_pinned_memory(nbytes)
        return owner, int(owner.ptr)

    return allocate
