"""Time-travel reads by time (``at_time``) of writes a crash left only in the WAL.

The writer persists marks (time -> seq) only for writes already in L0, so after a
crash the replayed writes had no mark: a time after them resolved to the last mark
before the crash, a state without acknowledged writes made seconds (or hours) before
the time asked -- and for good, since the reopened writer's first mark was its open.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime

from shaledb import Db, DbReader, Settings
from shaledb.errors import ShaleError
from shaledb.store import drop_memory_store, open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock

SETTINGS = Settings(history_retention_s=3600, compactor=None, garbage_collector=None)


def _at(db: Db | DbReader, t: float) -> bytes | None:
    with db.snapshot(at_time=datetime.fromtimestamp(t, tz=UTC)) as snap:
        return snap.get(b"k")


def test_at_time_reads_writes_replayed_from_the_wal_after_a_crash() -> None:
    name = f"history-crash-{uuid.uuid4().hex}"
    inner = open_store(f"memory://{name}")
    clock = ManualClock()
    faults = FaultInjectingStore(inner, seed=1)
    db = Db.open(store=faults, settings=SETTINGS, clock=clock)
    db.put(b"k", b"v1")
    db.flush(memtable=True)  # v1 and its mark are in L0 and the manifest
    clock.advance(5)
    t1 = clock.now()
    clock.advance(5)
    db.put(b"k", b"v2")  # acknowledged: in a WAL object, never flushed to L0
    clock.advance(5)
    t2 = clock.now()
    clock.advance(5)
    db.put(b"k", b"v3")
    clock.advance(5)
    t3 = clock.now()
    assert (_at(db, t1), _at(db, t2), _at(db, t3)) == (b"v1", b"v2", b"v3")
    faults.crash()  # the process dies: nothing more reaches the store
    with contextlib.suppress(ShaleError, SimulatedCrash):
        db.close()
    clock.advance(60)
    try:
        with Db.open(store=inner, settings=SETTINGS, clock=clock) as db:
            assert db.get(b"k") == b"v3"
            assert (_at(db, t1), _at(db, t2), _at(db, t3)) == (b"v1", b"v2", b"v3")
            db.flush(memtable=True)  # the replayed writes' marks reach the manifest
        with Db.open(store=inner, settings=SETTINGS, clock=clock) as db:
            assert (_at(db, t1), _at(db, t2), _at(db, t3)) == (b"v1", b"v2", b"v3")
        with DbReader.open(store=inner, clock=clock) as reader:
            assert (_at(reader, t1), _at(reader, t2), _at(reader, t3)) == (b"v1", b"v2", b"v3")
    finally:
        drop_memory_store(name)
