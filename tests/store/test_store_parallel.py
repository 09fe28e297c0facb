"""``run_bounded``: many store calls at once, within a thread count and a byte budget."""

from __future__ import annotations

import threading
import time

import pytest

from shaledb import InvalidArgument
from shaledb.store.parallel import check_workers, run_bounded


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
