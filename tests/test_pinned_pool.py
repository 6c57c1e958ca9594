"""kernelpack.devices.pinned's pool logic on ordinary host memory (no GPU): size classes, reuse
across calls and sizes, no reuse while a result lives, the idle cap, freeing at clear, and the
retry after an allocation fails. The GPU side (the walks' results in pooled memory) is
tests/test_walk_gpu.py's."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from kernelpack.devices.pinned import MIN_CLASS, TORCH_STEPS, PinnedPool, size_class


class FakeMemory:
    """Stands in for page-locked memory: numpy buffers, each allocation and free recorded."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.live: dict[int, np.ndarray[Any, Any]] = {}
        self.allocated: list[int] = []
        self.fail_after = fail_after

    def allocate(self, nbytes: int) -> tuple[Any, int]:
        if self.fail_after is not None and len(self.live) >= self.fail_after:
            raise RuntimeError("CUDA error: out of memory")
        owner = np.zeros(nbytes, dtype=np.uint8)
        self.live[owner.ctypes.data] = owner
        self.allocated.append(nbytes)
        return owner, owner.ctypes.data

    def free(self, owner: Any) -> None:
        del self.live[owner.ctypes.data]


def classes_by_search(nbytes: int, steps: tuple[int, ...]) -> int:
    """The size class by enumeration, independently of size_class's bit arithmetic."""
    candidates = [s * 2**k for k in range(60) for s in steps]
    return int(max(MIN_CLASS, min(c for c in candidates if c >= nbytes)))


@pytest.mark.parametrize(
    "nbytes",
    [0, 1, MIN_CLASS, MIN_CLASS + 1, 1_250_001, 4_000_000, 512_000_000, 548_000_000, 2**33 + 3],
)
def test_size_class_is_the_smallest_step_that_fits(nbytes: int) -> None:
    found = size_class(nbytes)
    assert found == classes_by_search(nbytes, (4, 5, 6, 7))
    assert found >= nbytes and (nbytes <= MIN_CLASS or found <= 1.25 * nbytes)
    power = size_class(nbytes, TORCH_STEPS)
    assert power == classes_by_search(nbytes, (4,)) and power & (power - 1) == 0


def test_reused_across_calls_and_sizes_once_results_are_gone() -> None:
    memory = FakeMemory()
    pool = PinnedPool(memory.allocate, memory.free)
    first = pool.take(5_000_000).view
    first[:] = 7
    assert len(first) == 5_000_000 and memory.allocated == [size_class(5_000_000)]
    # while the result lives (here a derived view), a second call gets memory of its own
    derived = first[100:].view(np.uint32)[:10]
    del first
    gc.collect()
    second = pool.take(3_000_000).view
    assert len(memory.allocated) == 2 and pool.stats.reuses == 0
    assert (derived == 0x07070707).all()
    second[:] = 1
    assert (derived == 0x07070707).all()
    del derived, second
    gc.collect()
    # both back: a smaller request takes the smallest idle buffer that fits, a larger the other
    assert pool.stats.idle_bytes == sum(memory.allocated) and pool.stats.leased_bytes == 0
    small = pool.take(2_000_000)
    large = pool.take(4_500_000)
    assert len(memory.allocated) == 2 and pool.stats.reuses == 2
    assert len(memory.live[small.address]) == size_class(3_000_000)
    assert len(memory.live[large.address]) == size_class(5_000_000)
    # a request larger than every idle buffer allocates
    del small, large
    gc.collect()
    pool.take(50_000_000)
    assert memory.allocated[-1] == size_class(50_000_000)


def test_idle_memory_past_the_cap_is_freed_least_recently_used_first() -> None:
    memory = FakeMemory()
    pool = PinnedPool(memory.allocate, memory.free, max_idle_bytes=3 * MIN_CLASS)
    leases = [pool.take(MIN_CLASS) for _ in range(4)]
    addresses = [lease.address for lease in leases]
    del leases
    gc.collect()
    assert pool.stats.idle_bytes == 3 * MIN_CLASS and pool.stats.frees == 1
    assert sorted(memory.live) == sorted(addresses[1:])  # the first leased went first
    assert pool.clear() == 3 and not memory.live and pool.stats.idle_bytes == 0


def test_a_failed_allocation_frees_the_idle_buffers_and_tries_once_more() -> None:
    memory = FakeMemory(fail_after=1)
    pool = PinnedPool(memory.allocate, memory.free)
    pool.take(MIN_CLASS)  # dropped at once: idle
    gc.collect()
    kept = pool.take(8 * MIN_CLASS)  # too large for the idle one: freed, then allocated
    assert len(memory.live) == 1 and memory.allocated[-1] == 8 * MIN_CLASS
    with pytest.raises(RuntimeError, match="out of memory"):
        pool.take(8 * MIN_CLASS)  # nothing idle to free: the failure stands
    del kept


def test_a_pool_of_powers_of_two_allocates_them() -> None:
    """torch's pool (TORCH_STEPS): 5 MB takes 8 MiB, which then serves a 7.5 MB request too."""
    memory = FakeMemory()
    pool = PinnedPool(memory.allocate, memory.free, steps=TORCH_STEPS)
    pool.take(5_000_000)
    gc.collect()
    pool.take(7_500_000)
    assert memory.allocated == [8 << 20] and pool.stats.reuses == 1
