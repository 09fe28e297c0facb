"""``run_bounded``: many store calls at once, within a thread count and a byte budget;
``get_in_order``: GETs ahead of an in-order consumer."""

from __future__ import annotations

import random
import threading
import time

import pytest

from shaledb import InvalidArgument, Unavailable
from shaledb.store import ObjectStore, StoreWrapper
from shaledb.store.parallel import check_workers, get_in_order, run_bounded
from shaledb.testing.seeds import test_seed


class Gauge:
    """The most calls and bytes seen in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = self.bytes = self.max_calls = self.max_bytes = 0

    def __call__(self, size: int) -> int:
        with self.lock:
            self.calls += 1
            self.bytes += size
            self.max_calls = max(self.max_calls, self.calls)
            self.max_bytes = max(self.max_bytes, self.bytes)
        time.sleep(0.005)
        with self.lock:
            self.calls -= 1
            self.bytes -= size
        return size * 2


def test_every_item_once_within_the_thread_and_byte_limits() -> None:
    g = Gauge()
    sizes = [10, 30, 50, 10, 10, 200, 10, 40, 40, 40] * 3
    out = list(run_bounded(g, sizes, lambda s: s, workers=4, max_bytes_in_flight=100))
    assert sorted(out) == sorted((s, 2 * s) for s in sizes)
    assert 1 < g.max_calls <= 4
    assert g.max_bytes <= 200  # at most 100 in flight, except the 200 that runs alone
    g1 = Gauge()
    assert [r for _, r in run_bounded(g1, sizes, lambda s: s, workers=1)] == [2 * s for s in sizes]
    assert g1.max_calls == 1


def test_the_first_failure_stops_new_calls_and_is_raised() -> None:
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            started.append(i)
        time.sleep(0.002)
        if i == 5:
            raise OSError("boom")
        return i

    with pytest.raises(OSError, match="boom"):
        list(run_bounded(call, range(1000), lambda _: 0, workers=4))
    assert 5 in started and len(started) < 50


def test_workers_must_be_a_positive_integer() -> None:
    assert check_workers(3) == 3
    for bad in (0, -1, 1.5, True, "8"):
        with pytest.raises(InvalidArgument):
            check_workers(bad)  # type: ignore[arg-type]


class SlowGets(StoreWrapper):
    """GETs that take a random few milliseconds (seeded), counted and gauged."""

    def __init__(self, inner: ObjectStore, seed: int, fail: str | None = None) -> None:
        super().__init__(inner)
        self.rng = random.Random(seed)
        self.fail = fail
        self.lock = threading.Lock()
        self.started: list[str] = []
        self.threads: set[int] = set()
        self.now = self.most = 0

    def get(self, path: str) -> bytes:
        with self.lock:
            self.started.append(path)
            self.threads.add(threading.get_ident())
            self.now += 1
            self.most = max(self.most, self.now)
            delay = self.rng.uniform(0.0, 0.004)
        try:
            time.sleep(delay)
            if path == self.fail:
                raise Unavailable(f"injected failure of {path}")
            return self.inner.get(path)
        finally:
            with self.lock:
                self.now -= 1


def _objects(store: ObjectStore, n: int) -> list[str]:
    names = [f"o/{i:04d}" for i in range(n)]
    for i, name in enumerate(names):
        if i % 7 != 3:  # every seventh is missing
            store.put(name, b"x" * i)
    return names


def test_get_in_order_keeps_the_order_and_the_window(memory_store: ObjectStore) -> None:
    seed = test_seed()
    names = _objects(memory_store, 60)
    slow = SlowGets(memory_store, seed)
    got = list(get_in_order(slow, names, read_ahead=8))
    assert [p for p, _ in got] == names
    assert [d for _, d in got] == [None if i % 7 == 3 else b"x" * i for i in range(60)]
    assert 1 < slow.most <= 8
    assert sorted(slow.started) == names  # each object fetched once
    one = SlowGets(memory_store, seed)
    assert list(get_in_order(one, names, read_ahead=1)) == got
    assert one.most == 1 and one.threads == {threading.get_ident()}


def test_get_in_order_raises_a_failed_get_in_its_turn(memory_store: ObjectStore) -> None:
    names = _objects(memory_store, 200)
    slow = SlowGets(memory_store, 7, fail=names[20])
    seen: list[str] = []
    with pytest.raises(Unavailable, match="o/0020"):
        for path, _ in get_in_order(slow, names, read_ahead=4):
            seen.append(path)
    assert seen == names[:20]
    assert len(slow.started) <= 20 + 4 + 1  # nothing far beyond the window was fetched


def test_closing_early_stops_the_gets_ahead(memory_store: ObjectStore) -> None:
    names = _objects(memory_store, 500)
    slow = SlowGets(memory_store, 11)
    it = get_in_order(slow, names, read_ahead=16)
    assert [next(it)[0], next(it)[0]] == names[:2]
    it.close()
    started = len(slow.started)
    assert started <= 2 + 16 + 1
    time.sleep(0.02)
    assert len(slow.started) == started and slow.now == 0  # nothing still running or started later
