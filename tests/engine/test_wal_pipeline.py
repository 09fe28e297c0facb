"""Pipelined WAL writes (``Settings.wal_max_in_flight``): several PUTs in flight, ids
contiguous, each write acknowledged only once its object and every earlier one are
written.

A :class:`HeldPuts` store holds every WAL PUT until the test lets it go, so a test
puts a window of objects in flight, lets any subset of them land, and then crashes
the writer (its held PUTs never land, or land late, after the next writer opened).
The next writer must then recover every acknowledged write, nothing written after
the first object that did not land (the recovered state is a prefix), readers and
the change feed must agree, and writing must go on.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import pytest
from engine_support import dump

from shaledb import Db, DbReader, Settings
from shaledb.errors import FencedError, InvalidArgument, ShaleError
from shaledb.format import paths
from shaledb.format.wal import encode_wal
from shaledb.settings import DbReaderOptions
from shaledb.store import ObjectStore, StoreWrapper, drop_memory_store, open_store
from shaledb.testing import SimulatedCrash

WINDOW = 4
CASES: list[tuple[int, ...]] = []


class HeldPuts(StoreWrapper):
    """Holds WAL PUTs (``wal/*``) until :meth:`release`; after :meth:`crash` a held or new
    call raises ``SimulatedCrash`` without reaching the store, unless ``late`` lets the
    held PUTs through when released (a dead process's requests still on the wire)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._cv = threading.Condition()
        self.held: dict[str, bool] = {}
        """path -> released."""
        self.holding = False
        """Set once the writer opened (its fence goes through)."""
        self.crashed = False
        self.late = False

    def put(self, path: str, data: bytes | bytearray | memoryview, **kw: object) -> None:  # type: ignore[override]
        if self.crashed and not self.late:
            raise SimulatedCrash(f"crashed before put {path}")
        if path.startswith(paths.WAL_DIR) and self.holding and not self.crashed:
            with self._cv:
                self.held[path] = False
                self._cv.notify_all()
                while not self.held[path]:
                    self._cv.wait(0.05)
                if self.crashed and not self.late:
                    raise SimulatedCrash(f"crashed during put {path}")
        self.inner.put(path, data, **kw)  # type: ignore[arg-type]

    def wait_held(self, n: int) -> list[str]:
        deadline = time.monotonic() + 20
        with self._cv:
            while sum(not r for r in self.held.values()) < n:
                assert time.monotonic() < deadline, f"only {self.held} held"
                self._cv.wait(0.05)
            return sorted(p for p, r in self.held.items() if not r)

    def release(self, path: str) -> None:
        with self._cv:
            self.held[path] = True
            self._cv.notify_all()

    def crash(self, *, late: bool = False) -> None:
        with self._cv:
            self.crashed = True
            self.late = late
            self.holding = False

    def release_all(self) -> None:
        with self._cv:
            for p in self.held:
                self.held[p] = True
            self._cv.notify_all()


def settings(**kw: object) -> Settings:
    base: dict[str, object] = dict(
        compactor=None, garbage_collector=None, flush_interval_s=3600.0, wal_max_in_flight=WINDOW
    )
    base.update(kw)
    return Settings(**base)  # type: ignore[arg-type]


@pytest.fixture
def mem() -> Iterator[str]:
    url = f"memory://wal-pipeline-{time.monotonic_ns()}"
    yield url
    drop_memory_store(url)


def fill_window(db: Db, held: HeldPuts, n: int) -> tuple[list[threading.Thread], dict[int, bool], list[str]]:
    """``n`` durable single puts from ``n`` threads, one WAL object each, all in flight;
    returns the threads, which writes were acknowledged (filled in as they are) and the
    held WAL paths in id order."""
    acked: dict[int, bool] = {}
    held.holding = True

    def put(i: int) -> None:
        try:
            db.put(b"k%d" % i, b"v%d" % i)
            acked[i] = True
        except (ShaleError, SimulatedCrash):
            acked[i] = False

    threads = []
    for i in range(n):  # one at a time, so write i is in object i of the window
        t = threading.Thread(target=put, args=(i,), daemon=True)
        t.start()
        threads.append(t)
        held.wait_held(i + 1)
    return threads, acked, held.wait_held(n)


def recovered(url: str, **kw: object) -> dict[bytes, bytes]:
    with Db.open(url, settings=settings(**kw)) as db:
        return dump(db)


@pytest.mark.parametrize("late", [False, True], ids=["lost", "late"])
def test_crash_at_every_point_of_a_window(mem: str, late: bool) -> None:
    """Any subset of a window of in-flight objects lands, then the writer dies (its other
    PUTs never land, or land after the next writer opened): the next writer recovers
    exactly the objects before the first hole; every acknowledged write is among them."""
    for landed in CASES or itertools.chain.from_iterable(
        itertools.combinations(range(WINDOW), r) for r in range(WINDOW + 1)
    ):
        url = f"{mem}-{''.join(map(str, landed)) or 'none'}"
        base = open_store(url)
        with Db.open(store=base, settings=settings()) as db:
            db.put(b"before", b"durable")
        held = HeldPuts(base)
        db = Db.open(store=held, settings=settings())
        threads, acked, wal = fill_window(db, held, WINDOW)
        prefix = next((i for i in range(WINDOW) if i not in landed), WINDOW)
        for i in landed:
            held.release(wal[i])
        deadline = time.monotonic() + 10
        while sum(acked.values()) < prefix:  # the landed prefix is acknowledged...
            assert time.monotonic() < deadline, (landed, acked)
            time.sleep(0.01)
        time.sleep(0.05)
        assert sorted(i for i, ok in acked.items() if ok) == list(range(prefix)), (landed, acked)
        held.crash(late=late)  # ...and nothing after the first hole is
        if not late:
            held.release_all()
        got = recovered(url)
        want = {b"before": b"durable"} | {b"k%d" % i: b"v%d" % i for i in range(prefix)}
        assert got == want, (landed, got)
        if late:  # the dead writer's PUTs land now, after the new writer fenced
            held.release_all()
        for t in threads:
            t.join(10)
        try:
            db.close()
        except (ShaleError, SimulatedCrash):
            pass
        assert all(not ok for i, ok in acked.items() if i >= prefix), (landed, acked)
        # A reader, a second recovery and the change feed agree; the log goes on.
        with DbReader.open(url, options=DbReaderOptions(background_poll=False)) as r:
            assert dump(r) == want, landed
        with Db.open(url, settings=settings()) as db2:
            assert dump(db2) == want
            db2.put(b"after", b"x")
        assert recovered(url) == want | {b"after": b"x"}, landed
        drop_memory_store(url)


def test_fenced_while_objects_are_in_flight(mem: str) -> None:
    """A newer writer opens while three objects are in flight and the first has landed:
    the old writer acknowledges only that one and then fails with FencedError; the new
    writer has exactly the acknowledged write."""
    base = open_store(mem)
    held = HeldPuts(base)
    old = Db.open(store=held, settings=settings())
    threads, acked, wal = fill_window(old, held, 3)
    held.release(wal[0])
    deadline = time.monotonic() + 10
    while not acked.get(0):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    new = Db.open(mem, settings=settings())  # fences at the hole: wal[1]'s slot
    held.holding = False
    held.release_all()
    for t in threads:
        t.join(10)
    assert acked == {0: True, 1: False, 2: False}
    with pytest.raises(FencedError):
        old.put(b"later", b"x")
    assert dump(new) == {b"k0": b"v0"}
    new.put(b"new", b"y")
    new.close()
    try:
        old.close()
    except ShaleError:
        pass
    assert recovered(mem) == {b"k0": b"v0", b"new": b"y"}


def test_older_fence_in_the_window_writes_the_rest_again_in_order(mem: str) -> None:
    """An older writer's late fence takes the slot of the second object in flight: that
    object and every later one are written again above the window, in order, so the
    overwrites of one key across them end with the newest value, and all are acknowledged."""
    base = open_store(mem)
    held = HeldPuts(base)
    db = Db.open(store=held, settings=settings())
    acked: dict[int, bool] = {}
    held.holding = True

    def put(i: int) -> None:
        db.put(b"same", b"v%d" % i)
        acked[i] = True

    threads = []
    for i in range(WINDOW):
        t = threading.Thread(target=put, args=(i,), daemon=True)
        t.start()
        threads.append(t)
        held.wait_held(i + 1)
    wal = held.wait_held(WINDOW)
    older = encode_wal([], [], epoch=db.epoch - 1, nonce=bytes(16), created_at_ms=0, codec=0, block_size=4096)
    base.put(wal[1], older, create=True)  # lands before our PUT of that slot
    held.holding = False
    held.release_all()
    for t in threads:
        t.join(10)
    assert acked == dict.fromkeys(range(WINDOW), True)
    assert db.get(b"same") == b"v%d" % (WINDOW - 1)
    db.put(b"more", b"m")
    db.close()
    assert recovered(mem) == {b"same": b"v%d" % (WINDOW - 1), b"more": b"m"}
    with DbReader.open(mem, options=DbReaderOptions(background_poll=False)) as r:
        assert r.get(b"same") == b"v%d" % (WINDOW - 1)


def test_sixteen_writers_share_a_window(mem: str) -> None:
    """Many durable writers at once with a window of 4: every write acknowledged and
    recovered, WAL ids contiguous."""
    with Db.open(mem, settings=settings(flush_interval_s=0.05)) as db:

        def work(t: int) -> None:
            for i in range(30):
                db.put(b"t%02d-%03d" % (t, i), b"v")

        threads = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(recovered(mem)) == 16 * 30
    ids = sorted(paths.parse_wal_id(m.path) or 0 for m in open_store(mem).list(paths.WAL_DIR))
    assert ids == list(range(ids[0], ids[0] + len(ids)))


@pytest.mark.parametrize("bad", [0, 5, -1, 2.5, "4", True])
def test_wal_max_in_flight_is_checked(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="wal_max_in_flight"):
        Settings(wal_max_in_flight=bad)  # type: ignore[arg-type]


class WalPuts(StoreWrapper):
    """Records the path of every WAL PUT."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.wal_puts: list[str] = []

    def put(self, path: str, data: bytes | bytearray | memoryview, **kw: object) -> None:  # type: ignore[override]
        if path.startswith(paths.WAL_DIR):
            self.wal_puts.append(path)
        self.inner.put(path, data, **kw)  # type: ignore[arg-type]


def test_fence_slots_at_open_only_where_a_writer_pipelined(mem: str) -> None:
    """With the default (one PUT in flight) an open writes one WAL object, its fence, as
    before pipelining; once a writer claimed a window of 4, every later open also fences
    the 3 slots after its fence (the GC deletes those later, tests/gc)."""
    one = Settings(compactor=None, garbage_collector=None)
    assert one.wal_max_in_flight == 1
    for i in range(2):
        counted = WalPuts(open_store(mem))
        with Db.open(store=counted, settings=one) as db:
            db.put(b"a%d" % i, b"1")
        assert len(counted.wal_puts) == 2, counted.wal_puts  # the fence and the put
    counted = WalPuts(open_store(mem))
    with Db.open(store=counted, settings=settings()):
        pass  # claims the window: no writer before it pipelined, but it fences for itself
    for s in (one, settings()):
        counted = WalPuts(open_store(mem))
        with Db.open(store=counted, settings=s) as db:
            assert dump(db) == {b"a0": b"1", b"a1": b"1"}
        assert len(counted.wal_puts) == WINDOW, counted.wal_puts
