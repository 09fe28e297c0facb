"""Opening fetches what it needs in parallel: the writer's and the reader's open cost no more
sequential round trips than their protocol orders (docs/design/writer-open-and-recovery.md).

A store wrapper delays every call and gives it a depth: one more than the deepest call that had
finished when it started. The deepest call is the open's wall time in round trips on a store with
that latency, whatever the machine's speed (only a thread held up longer than the delay could add
one)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from engine_support import abandon

from shaledb import Db, DbReader
from shaledb.settings import DbReaderOptions, Settings
from shaledb.store import open_store
from shaledb.store.base import ObjectStore
from shaledb.store.wrappers import PerCallStore
from shaledb.testing.faults import FaultInjectingStore

T = TypeVar("T")
QUIET = Settings(compactor=None, garbage_collector=None)
DELAY_S = 0.15


class DepthStore(PerCallStore):
    """Records ``(depth, kind)`` of every call; a listing is read whole inside its call."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._finished = 0
        self.calls: list[tuple[int, str]] = []

    def _call(self, kind: str, fn: Callable[[], T], requests: int = 1) -> T:
        with self._lock:
            depth = self._finished + 1
        time.sleep(DELAY_S)
        out: Any = fn()
        if kind == "list":
            out = iter(list(out))
        with self._lock:
            self._finished = max(self._finished, depth)
            self.calls.append((depth, kind))
        return out  # type: ignore[no-any-return]

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[Any]:
        return self._call("list", lambda: self.inner.list(prefix, offset=offset))


def _database(tmp_path: Path, wal_key: bytes) -> str:
    """Two SSTs (index and filter to pin) and a WAL object after them (to replay): its writer died."""
    url = str(tmp_path / "db")
    faults = FaultInjectingStore(open_store(url), seed=1)
    db = Db.open(store=faults, settings=QUIET)
    for s in range(2):
        for i in range(50):
            db.put(b"k%03d-%04d" % (s, i), b"v")
        db.flush(memtable=True)
    db.put(wal_key, b"w")  # durable: one WAL object the next open replays
    abandon(db, faults)
    return url


def _opened(store: DepthStore, open_: Callable[[ObjectStore], T]) -> tuple[T, FaultInjectingStore]:
    faults = FaultInjectingStore(store, seed=2)  # to leave without the close's flush (slow here)
    return open_(faults), faults


def test_writer_open_overlaps_pinning_and_the_reread_with_the_wal(tmp_path: Path) -> None:
    url = _database(tmp_path, b"in-the-wal")
    store = DepthStore(open_store(url))
    db, faults = _opened(store, lambda s: Db.open(store=s, settings=QUIET))
    calls = sorted(store.calls)
    assert len(db.tables.pinned) == 2
    assert db.get(b"in-the-wal") == b"w"
    assert db.get(b"k001-0007") == b"v"
    abandon(db, faults)
    print(calls)
    # manifest: list, GET, CAS, list after it; WAL: list + pin; fence; re-read + WAL list; WAL GET.
    # Before: the epoch claim listed the manifests again, and the re-read, the WAL listing and
    # the pinning ran one after another (11).
    assert max(d for d, _ in calls) <= 8, calls
    kinds = [k for _, k in calls]
    assert kinds.count("put_create") == 2  # the epoch CAS and the fence, in that order:
    cas, fence = [d for d, k in calls if k == "put_create"]
    assert cas < fence


def test_reader_open_overlaps_pinning_with_the_checkpoint_and_the_wal(tmp_path: Path) -> None:
    url = _database(tmp_path, b"in-the-wal")
    store = DepthStore(open_store(url))
    with DbReader.open(store=store) as reader:
        calls = sorted(store.calls)
        assert reader.get(b"in-the-wal") == b"w"
        assert reader.get(b"k000-0001") == b"v"
    print(calls)
    # Before: the pinning waited for the checkpoint's CAS and its check, the WAL for the pinning.
    gets_at_open = [d for d, k in calls if k == "get_range"]
    assert gets_at_open and max(gets_at_open) <= 3, calls
    assert max(d for d, _ in calls) <= 5, calls  # before: 6


def _one_after_another(calls: list[tuple[int, str]]) -> None:
    """No call overlaps another, but the final pin's GETs (in parallel with each other),
    which come after everything else."""
    pins = [d for d, k in calls if k == "get_range"]
    others = [d for d, k in calls if k != "get_range"]
    assert pins and min(pins) > max(others), calls
    assert len(set(others)) == len(others), calls


def test_open_in_parallel_off_makes_the_writers_open_one_call_at_a_time(tmp_path: Path) -> None:
    """``Settings.open_in_parallel`` False: what fault scripts need (a fixed order); the
    WAL's read-ahead is a separate setting and leaves the open's overlap alone."""
    url = _database(tmp_path, b"in-the-wal")
    store = DepthStore(open_store(url))
    off = replace(QUIET, open_in_parallel=False)
    db, faults = _opened(store, lambda s: Db.open(store=s, settings=off))
    assert db.get(b"in-the-wal") == b"w" and len(db.tables.pinned) == 2
    abandon(db, faults)
    print(sorted(store.calls))
    _one_after_another(store.calls)

    store = DepthStore(open_store(_database(tmp_path / "fresh", b"in-the-wal")))
    one_get = replace(QUIET, wal_read_ahead=1)
    db, faults = _opened(store, lambda s: Db.open(store=s, settings=one_get))
    assert db.get(b"in-the-wal") == b"w"
    abandon(db, faults)
    assert max(d for d, _ in store.calls) <= 8, sorted(store.calls)


def test_open_in_parallel_off_makes_the_readers_open_one_call_at_a_time(tmp_path: Path) -> None:
    url = _database(tmp_path, b"in-the-wal")
    store = DepthStore(open_store(url))
    off = DbReaderOptions(open_in_parallel=False, wal_read_ahead=1)
    with DbReader.open(store=store, options=off) as reader:
        calls = sorted(store.calls)
        assert reader.get(b"in-the-wal") == b"w"
    print(calls)
    _one_after_another(calls)
