"""WAL objects are fetched ahead of replay (``wal_read_ahead``) and still applied in id order.

Every WAL object below overwrites one key, and the GETs take a seeded random
few milliseconds each, so they finish out of order: a reader's replay (the
last entry applied per key wins) that applied objects as their GETs finished
would end with the wrong value. A gauge counts the WAL GETs in flight: above
one with read-ahead, one without. Covered:
a writer opening after a crash, a reader of a checkpoint, a reader catching up
with a writer (its batches ramp up, and an idle poll still sends one WAL GET),
and a Spark-style checkpoint read part (``export.read_part``).
"""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from engine_support import abandon

from shaledb import Db, DbReader, InvalidArgument, Settings
from shaledb.bulk import read as export
from shaledb.settings import WAL_READ_AHEAD, DbReaderOptions, RetryOptions
from shaledb.store import ObjectStore, StoreWrapper
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock

OBJECTS = 40
WRITER = Settings(compactor=None, garbage_collector=None, flush_interval_s=0.01)


class WalGauge(StoreWrapper):
    """WAL GETs take a random few milliseconds (seeded); counts them and the most in flight."""

    def __init__(self, inner: ObjectStore, seed: int) -> None:
        super().__init__(inner)
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.gets = self.now = self.most = 0

    def get(self, path: str) -> bytes:
        if not path.startswith("wal/"):
            return self.inner.get(path)
        with self.lock:
            self.gets += 1
            self.now += 1
            self.most = max(self.most, self.now)
            delay = self.rng.uniform(0.0, 0.003)
        try:
            time.sleep(delay)
            return self.inner.get(path)
        finally:
            with self.lock:
                self.now -= 1


def _write_objects(db: Db, start: int = 0) -> dict[bytes, bytes]:
    """``OBJECTS`` durable writes, each its own WAL object: ``b"k"`` again and a key of its own."""
    want: dict[bytes, bytes] = {}
    for i in range(start, start + OBJECTS):
        db.put(b"k", b"v%03d" % i)
        want[b"k"] = b"v%03d" % i
        want[b"own%03d" % i] = b"x%03d" % i
        db.put(b"own%03d" % i, b"x%03d" % i)
    return want


@pytest.mark.parametrize("read_ahead", [1, 8])
def test_open_after_a_crash_replays_in_order(store: ObjectStore, seed: int, read_ahead: int) -> None:
    faults = FaultInjectingStore(store, seed=seed)
    db = Db.open(store=faults, settings=WRITER, clock=ManualClock(), seed=seed)
    want = _write_objects(db)
    abandon(db, faults)
    gauge = WalGauge(store, seed)
    settings = Settings(compactor=None, garbage_collector=None, wal_read_ahead=read_ahead)
    with Db.open(store=gauge, settings=settings, clock=ManualClock(), seed=seed + 1) as db:
        assert gauge.gets >= 2 * OBJECTS
        assert {k: db.get(k) for k in want} == want
    assert gauge.most == 1 if read_ahead == 1 else 1 < gauge.most <= read_ahead


def test_a_checkpoint_reader_replays_in_order(store: ObjectStore, seed: int) -> None:
    with Db.open(store=store, settings=WRITER, clock=ManualClock(), seed=seed) as db:
        want = _write_objects(db)
        cp = db.create_checkpoint()
        db.put(b"k", b"after the checkpoint")
        gauge = WalGauge(store, seed)
        opts = DbReaderOptions(background_poll=False, wal_read_ahead=8)
        with DbReader.open(checkpoint=cp.id, store=gauge, options=opts) as r:
            assert {k: r.get(k) for k in want} == want
        assert 1 < gauge.most <= 8


def test_a_reader_catching_up_ramps_its_batches_and_idles_on_one_get(store: ObjectStore, seed: int) -> None:
    with Db.open(store=store, settings=WRITER, clock=ManualClock(), seed=seed) as db:
        gauge = WalGauge(store, seed)
        opts = DbReaderOptions(background_poll=False, establish_checkpoint=False, wal_read_ahead=8)
        with DbReader.open(store=gauge, options=opts) as r:
            want = _write_objects(db)
            r.refresh()
            assert {k: r.get(k) for k in want} == want
            assert 1 < gauge.most <= 8
            before = gauge.gets
            r.refresh()  # nothing new: one GET finds the next object missing
            assert gauge.gets == before + 1
            # The batch that found the end may have missed objects written just after its
            # GETs; the next poll finds them.
            want.update(_write_objects(db, OBJECTS))
            r.refresh()
            assert {k: r.get(k) for k in want} == want


def test_a_read_part_replays_the_checkpoint_wal_in_order(store: ObjectStore, seed: int) -> None:
    with Db.open(store=store, settings=WRITER, seed=seed) as db:
        want = _write_objects(db)
        plan = export.plan_read(store=store, partitions=1, name=f"t-{uuid.uuid4().hex}")
        db.put(b"k", b"after the checkpoint")
    (part,) = plan.parts
    assert len(part.wal_ids) >= 2 * OBJECTS
    gauge = WalGauge(store, seed)
    got: dict[bytes, bytes] = {}
    for keys, _, _, payloads in export.read_part(part, store=gauge):
        got.update(zip(keys, payloads))
    assert got == want
    assert 1 < gauge.most <= WAL_READ_AHEAD


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_read_ahead_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(InvalidArgument, match="wal_read_ahead"):
        DbReaderOptions(wal_read_ahead=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("action", ["fail_before", "apply_then_fail"])
def test_failing_wal_gets_during_read_ahead_are_retried(store: ObjectStore, seed: int, action: str) -> None:
    """A third of the WAL GETs fail (in the read-ahead threads); the retries behind them
    still hand the replay every object, in order."""
    faults = FaultInjectingStore(store, seed=seed)
    db = Db.open(store=faults, settings=WRITER, clock=ManualClock(), seed=seed)
    want = _write_objects(db)
    abandon(db, faults)
    flaky = FaultInjectingStore(store, seed=seed)
    rule = flaky.add_rule(action, ops="get", path_prefix="wal/", probability=0.3)  # type: ignore[arg-type]
    # A GET gives up only if all 16 attempts fail: 0.3**16, about 4e-9.
    retry = RetryOptions(max_attempts=16, initial_backoff_s=0.001, max_backoff_s=0.002)
    settings = Settings(compactor=None, garbage_collector=None, wal_read_ahead=8, retry=retry)
    with Db.open(store=flaky, settings=settings, clock=ManualClock(), seed=seed + 1) as db:
        assert {k: db.get(k) for k in want} == want
    assert rule.fired > 0
