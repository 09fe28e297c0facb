"""Flushes before compactions while writers wait for memory (``shaledb.engine.admission``).

While a writer waits for memtables to reach L0, the embedded compactor holds off
between chunks (its lease kept alive), until no writer waits, L0 is half way to
``l0_max_ssts``, or the compactor stops.
"""

from __future__ import annotations

import threading

from engine_support import GateStore

from shaledb import Db
from shaledb.engine.admission import flush_first, hold_off
from shaledb.store import ObjectStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.strategies import tiny_settings


def test_flush_first_only_while_writers_wait_and_l0_is_shallow() -> None:
    assert flush_first(1, 0, 16, closing=False)
    assert flush_first(2, 7, 16, closing=False)
    assert not flush_first(0, 0, 16, closing=False)  # nobody waits
    assert not flush_first(1, 8, 16, closing=False)  # L0 half way to its limit: compaction goes on
    assert not flush_first(1, 0, 16, closing=True)
    assert not flush_first(1, 1, 1, closing=False)


def test_hold_off_waits_beating_the_lease_until_told_or_stopped() -> None:
    beats = []
    answers = iter([True, True, True, False])
    hold_off(lambda: next(answers), threading.Event(), lambda: beats.append(1))
    assert len(beats) == 4  # three waits and the beat after them
    stop = threading.Event()
    stop.set()
    hold_off(lambda: True, stop, lambda: beats.append(1))  # a stopping compactor never waits
    assert len(beats) == 5


def test_the_writer_asks_compaction_to_wait_only_while_a_write_is_stalled(memory_store: ObjectStore) -> None:
    gate = GateStore(memory_store, lambda op, path: op == "put_create" and path.startswith("compacted/"))
    db = Db.open(
        store=gate,
        settings=tiny_settings(l0_sst_size_bytes=4096, max_unflushed_bytes=16 * 1024),
        clock=ManualClock(),
        seed=7,
    )
    host = db._host
    assert not host.flush_first()
    gate.close_gate()

    def writer() -> None:
        for i in range(200):
            db.put(b"k%04d" % i, b"v" * 200, durable=False)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    gate.wait_for_waiters()  # an L0 flush is stuck: the writer soon waits for memory
    for _ in range(1000):
        if host.flush_first():
            break
        threading.Event().wait(0.01)
    assert host.flush_first()
    gate.open_gate()
    th.join(30)
    assert not th.is_alive()
    assert not host.flush_first()
    db.close()
