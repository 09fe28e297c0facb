"""With one WAL PUT at a time (``wal_max_in_flight=1``, the default) a durable writer
whose PUT no one else is making writes its WAL object on its own thread instead of
handing it to the flusher thread and waiting to be woken (two thread hand-offs per
durable put). What is written, in which order, and when a write is acknowledged
must not change: these tests pin where the PUT runs and that failures, fencing,
group commit and non-durable writes behave as before.

The main thread makes its own PUT only while PUTs are fast (``wal.SLOW_PUT_S``): on a
slow store Ctrl-C would raise KeyboardInterrupt in it (``tests/api/test_api_interrupt.py``).
Most tests here write from a worker thread, which always does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from engine_support import dump

from shaledb import Db, Settings
from shaledb.engine import wal
from shaledb.errors import ClosedError, FencedError
from shaledb.format import paths
from shaledb.store import ObjectStore, StoreWrapper, open_store


class Boom(Exception):
    """A store failure no retry covers."""


class WalThreads(StoreWrapper):
    """Records the thread of every WAL PUT; ``fail`` makes WAL PUTs raise; ``gate``
    (when set) holds every WAL PUT until it is set."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.threads: list[str] = []
        self.fail = False
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.delay_s = 0.0

    def put(self, path: str, data: bytes | bytearray | memoryview, **kw: object) -> None:  # type: ignore[override]
        if path.startswith(paths.WAL_DIR):
            self.threads.append(threading.current_thread().name)
            self.entered.set()
            if self.gate is not None:
                self.gate.wait(10)
            if self.fail:
                raise Boom("injected: the WAL PUT failed")
            time.sleep(self.delay_s)
        self.inner.put(path, data, **kw)  # type: ignore[arg-type]


def on_a_thread(fn: Callable[[], object], name: str = "writer") -> None:
    """Run ``fn`` on a thread that is not the main one; raise what it raised."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # (re-raised on the calling thread)
            raised.append(exc)

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join(60)
    assert not t.is_alive()
    if raised:
        raise raised[0]


def settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(compactor=None, garbage_collector=None, flush_interval_s=3600.0)
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


def test_a_lone_durable_put_writes_its_wal_object_on_its_own_thread(mem_url: str) -> None:
    store = WalThreads(open_store(mem_url))
    with Db.open(store=store, settings=settings()) as db:
        opened = len(store.threads)  # the fence, written by the opening thread

        def writes() -> None:
            db.put(b"a", b"1")
            db.delete(b"a")
            db.put(b"b", b"2")

        on_a_thread(writes)
        assert store.threads[opened:] == ["writer"] * 3
        assert db.wal.durable_wal_id == db.wal.next_id - 1
        db.put(b"c", b"3")  # the main thread's durable put, on a fast store: its own PUT too
        assert store.threads[opened + 3 :] == [threading.main_thread().name]
        store.delay_s = 2 * wal.SLOW_PUT_S  # now as slow as a cloud store's round trip
        db.put(b"d", b"4")  # measured slow (made by the main thread)
        db.put(b"e", b"5")  # so the flusher makes this one, and the main thread only waits
        assert store.threads[opened + 4 :] == [threading.main_thread().name, "shaledb-wal"]
    with Db.open(mem_url, settings=settings()) as db:
        assert dump(db) == {b"b": b"2", b"c": b"3", b"d": b"4", b"e": b"5"}


def test_pipelined_wal_still_puts_from_its_pool(mem_url: str) -> None:
    store = WalThreads(open_store(mem_url))
    with Db.open(store=store, settings=settings(wal_max_in_flight=4)) as db:
        opened = len(store.threads)
        db.put(b"a", b"1")
        assert store.threads[opened:] and all(t.startswith("shaledb-wal-put") for t in store.threads[opened:])


def test_non_durable_writes_are_still_written_by_the_flusher(mem_url: str) -> None:
    store = WalThreads(open_store(mem_url))
    with Db.open(store=store, settings=settings(flush_interval_s=0.01)) as db:
        opened = len(store.threads)
        written = db.wal.objects_written
        db.put(b"a", b"1", durable=False)
        deadline = time.monotonic() + 10
        while db.wal.objects_written == written:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert store.threads[opened:] == ["shaledb-wal"]


def test_a_failed_own_put_stops_the_writer(mem_url: str) -> None:
    store = WalThreads(open_store(mem_url))
    db = Db.open(store=store, settings=settings())
    store.fail = True
    t0 = time.monotonic()
    with pytest.raises(ClosedError) as info:  # the failure, surfaced as waiters see it
        on_a_thread(lambda: db.put(b"a", b"1"))
    assert isinstance(info.value.__cause__, Boom)
    assert store.threads[-1] == "writer"
    assert time.monotonic() - t0 < 5  # at once, not after a latch's poll
    store.fail = False
    with pytest.raises(ClosedError):
        db.put(b"b", b"2")
    assert db.wal.failure is not None
    db.wal._thread.join(10)  # the flusher sees the failure and ends
    assert not db.wal._thread.is_alive()
    try:
        db.close()
    except ClosedError:
        pass
    with Db.open(mem_url, settings=settings()) as again:
        assert dump(again) == {}


def test_fenced_on_its_own_put(mem_url: str) -> None:
    store = WalThreads(open_store(mem_url))
    old = Db.open(store=store, settings=settings())
    old.put(b"a", b"1")
    new = Db.open(mem_url, settings=settings())  # its fence takes the old writer's next slot
    with pytest.raises(FencedError):
        on_a_thread(lambda: old.put(b"b", b"2"))
    assert store.threads[-1] == "writer"
    with pytest.raises(FencedError):
        old.put(b"c", b"3")
    assert dump(new) == {b"a": b"1"}
    new.close()
    try:
        old.close()
    except FencedError:
        pass


def test_a_put_arriving_during_anothers_put_is_acknowledged_after_it(mem_url: str) -> None:
    """Writer 1 makes its own PUT (held); writer 2's write goes to the flusher, which
    writes it as the next object once writer 1's has landed; neither is acknowledged
    before its object and every earlier one are written."""
    store = WalThreads(open_store(mem_url))
    db = Db.open(store=store, settings=settings())
    opened = len(store.threads)
    store.gate = threading.Event()
    store.entered.clear()
    done: dict[str, bool] = {}

    def put(k: bytes) -> None:
        db.put(k, b"v")
        done[k.decode()] = True

    t1 = threading.Thread(target=put, args=(b"one",), name="writer-1")
    t1.start()
    assert store.entered.wait(10)
    t2 = threading.Thread(target=put, args=(b"two",), name="writer-2")
    t2.start()
    time.sleep(0.2)
    assert done == {}  # both wait: one's object is held, two's comes after it
    store.gate.set()
    t1.join(10)
    t2.join(10)
    assert done == {"one": True, "two": True}
    assert store.threads[opened] == "writer-1"
    assert store.threads[opened + 1] in ("shaledb-wal", "writer-2")
    assert len(store.threads) == opened + 2
    db.close()
    with Db.open(mem_url, settings=settings()) as again:
        assert dump(again) == {b"one": b"v", b"two": b"v"}
