"""Helpers of the engine tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from shaledb import Db, Settings
from shaledb.errors import ShaleError
from shaledb.store import ObjectStore, StoreWrapper
from shaledb.store.base import ObjectMeta
from shaledb.testing import FaultInjectingStore, SimulatedCrash


def dump(db: Any) -> dict[bytes, bytes]:
    """Everything a full scan of ``db`` (a Db or a Snapshot) returns."""
    return dict(db.scan())


def abandon(db: Db | None, faults: FaultInjectingStore | None) -> None:
    """Simulate a process dying: its store stops answering, then its threads are reaped.

    Crash mode makes every later call through ``faults`` raise
    ``SimulatedCrash``, so closing the handle only joins its threads (they
    cannot write anything); it also waits out any call already in flight, so
    the next opener sees a quiet store.
    """
    if faults is not None:
        faults.crash()
    if db is not None:
        try:
            db.close()
        except (ShaleError, SimulatedCrash):
            pass


def wal_paths(store: ObjectStore) -> list[str]:
    return [m.path for m in store.list("wal/")]


def sst_paths(store: ObjectStore) -> list[str]:
    return [m.path for m in store.list("compacted/")]


def flip_byte(store: ObjectStore, path: str, pos: int) -> bytes:
    """Overwrite ``path`` with byte ``pos`` inverted; returns the original bytes."""
    data = store.get(path)
    damaged = bytearray(data)
    damaged[pos] ^= 0xFF
    store.put(path, bytes(damaged))
    return data


def open_db(store: ObjectStore, settings: Settings, **kw: Any) -> Db:
    return Db.open(store=store, settings=settings, **kw)


class GateStore(StoreWrapper):
    """Holds calls selected by ``selects(op, path)`` while the gate is closed.

    ``waiting`` counts calls currently held; ``held`` counts every call that
    had to wait. Used to keep an L0 flush (or a WAL write) in flight while a
    test does something else.
    """

    def __init__(self, inner: ObjectStore, selects: Callable[[str, str], bool]) -> None:
        super().__init__(inner)
        self._selects = selects
        self._open = threading.Event()
        self._open.set()
        self._cond = threading.Condition()
        self.waiting = 0
        self.held = 0

    def close_gate(self) -> None:
        self._open.clear()

    def open_gate(self) -> None:
        self._open.set()

    def wait_for_waiters(self, n: int = 1, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.waiting >= n, timeout):
                raise AssertionError(f"no call reached the gate within {timeout}s")

    def _gate(self, op: str, path: str) -> None:
        if self._open.is_set() or not self._selects(op, path):
            return
        with self._cond:
            self.waiting += 1
            self.held += 1
            self._cond.notify_all()
        try:
            self._open.wait()
        finally:
            with self._cond:
                self.waiting -= 1

    def put(
        self,
        path: str,
        data: bytes | bytearray | memoryview,
        *,
        create: bool = False,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        self._gate("put_create" if create else "put", path)
        self.inner.put(path, data, create=create, attributes=attributes)

    def get(self, path: str) -> bytes:
        self._gate("get", path)
        return self.inner.get(path)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        self._gate("list", prefix)
        return self.inner.list(prefix, offset=offset)


def model_scan(
    model: dict[bytes, bytes], start: bytes | None, end: bytes | None, reverse: bool, limit: int | None
) -> list[tuple[bytes, bytes]]:
    """What ``Db.scan(start, end, reverse=, limit=)`` must return over a dict model."""
    rows = sorted(
        (k, v) for k, v in model.items() if (start is None or k >= start) and (end is None or k < end)
    )
    if reverse:
        rows.reverse()
    return rows if limit is None else rows[:limit]


SMALL_BLOCKS = Settings(
    compactor=None, garbage_collector=None, block_size_bytes=1024, block_cache_bytes=1 << 20
)
"""Scan tests' settings: 1 KiB blocks (many per SST) and a small cache, nothing in the background."""


def key(i: int) -> bytes:
    """The ``i``-th key of the scan tests (fixed width: blocks of one shape)."""
    return b"k%06d" % i
