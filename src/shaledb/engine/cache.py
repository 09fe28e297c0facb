"""A thread-safe LRU cache with a byte budget.

Holds decoded blocks, read-ahead chunks and SST metadata. Entries report
their own (approximate) resident size; the cache evicts least recently used
entries until the total fits ``capacity_bytes``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class LruCache:
    __slots__ = ("_capacity", "_data", "_lock", "_size", "hits", "misses")

    def __init__(self, capacity_bytes: int) -> None:
        self._capacity = capacity_bytes
        self._data: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._size = 0
        self.hits = 0
        self.misses = 0

    @property
    def entries(self) -> OrderedDict[Hashable, tuple[Any, int]]:
        """The entries ``(value, nbytes)`` in recency order, for a hot path that reads
        them in place (``SstReader.get``) the way :meth:`get` does: ``get`` then
        ``move_to_end``, tolerating a ``KeyError`` from a concurrent eviction, and
        counting ``hits``. Writes go through :meth:`put` and :meth:`discard` only."""
        return self._data

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: Hashable) -> Any:
        """The cached value, or None. Takes no lock: every point read calls this twice.

        Each ``OrderedDict`` call is atomic (keys are tuples of str and int, so
        hashing and comparing run no Python code). An entry evicted between the
        lookup and ``move_to_end`` is still returned, once. ``hits`` and
        ``misses`` are statistics and may miss a count under concurrency.
        """
        data = self._data
        item = data.get(key)
        if item is None:
            self.misses += 1
            return None
        try:
            data.move_to_end(key)
        except KeyError:
            pass
        self.hits += 1
        return item[0]

    def put(self, key: Hashable, value: Any, nbytes: int) -> None:
        if nbytes > self._capacity:
            return
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._size -= old[1]
            self._data[key] = (value, nbytes)
            self._size += nbytes
            while self._size > self._capacity and self._data:
                _, (_, n) = self._data.popitem(last=False)
                self._size -= n

    def discard(self, key: Hashable) -> None:
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self._size -= old[1]

    def discard_where(self, pred: Any) -> None:
        with self._lock:
            # ``list()`` copies the keys in one C call: iterating the dict itself while
            # ``pred`` runs would meet lock-free ``get``s reordering it.
            for k in [k for k in list(self._data) if pred(k)]:
                self._size -= self._data.pop(k)[1]

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0
