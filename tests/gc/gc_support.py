"""Helpers of the GC tests (importable by test modules, unlike conftest)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from shaledb.format import paths
from shaledb.store import ObjectStore, drop_memory_store, open_store
from shaledb.store.base import ObjectMeta
from shaledb.store.wrappers import StoreWrapper


@contextmanager
def memory_store() -> Iterator[ObjectStore]:
    name = f"gc-{uuid.uuid4().hex}"
    try:
        yield open_store(f"memory://{name}")
    finally:
        drop_memory_store(name)


class FutureClock:
    """The system clock ``offset_s`` ahead (grace periods and minimum ages have passed)."""

    def __init__(self, offset_s: float = 86_400.0) -> None:
        self.offset_s = offset_s

    def now(self) -> float:
        return time.time() + self.offset_s

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        return event.wait(timeout)


def listing(store: ObjectStore) -> dict[str, int]:
    return {m.path: m.size for m in store.list("")}


def sst_ids(store: ObjectStore) -> set[str]:
    return {i for i in (paths.parse_sst_id(m.path) for m in store.list(paths.SST_DIR)) if i}


def wal_ids(store: ObjectStore) -> list[int]:
    return [i for i in (paths.parse_wal_id(m.path) for m in store.list(paths.WAL_DIR)) if i is not None]


def manifest_ids(store: ObjectStore) -> list[int]:
    return [
        i for i in (paths.parse_manifest_id(m.path) for m in store.list(paths.MANIFEST_DIR)) if i is not None
    ]


class ActOnSstListing(StoreWrapper):
    """The collector's store: runs ``act`` once, when the pass lists ``compacted/``, before
    listing (a write or a compaction lands exactly between the pass's steps)."""

    def __init__(self, inner: ObjectStore, act: Callable[[], None]) -> None:
        super().__init__(inner)
        self.act: Callable[[], None] | None = act

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        if prefix.startswith(paths.SST_DIR) and self.act is not None:
            act, self.act = self.act, None
            act()
        return self.inner.list(prefix, offset=offset)
