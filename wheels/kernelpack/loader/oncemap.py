"""A dict whose values are made once, for the loader's per-process caches (runtimes, modules)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class OnceMap(Generic[K, V]):
    """Concurrent callers for one key wait for one maker; later calls are a dict lookup.

    A maker that raises leaves the key empty, so a later call tries again.
    """

    def __init__(self) -> None:
        self._values: dict[K, V] = {}
        self._locks: dict[K, threading.Lock] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._values.get(key)

    def get_or_make(self, key: K, make: Callable[[], V]) -> V:
        found = self._values.get(key)
        if found is not None:
            return found
        with self._lock:
            key_lock = self._locks.setdefault(key, threading.Lock())
        with key_lock:
            found = self._values.get(key)
            if found is None:
                found = self._values[key] = make()
            return found
