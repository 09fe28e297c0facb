"""``Settings.l0_max_wal_objects``: a memtable is flushed once its writes span that many WAL
objects, so a slow durable writer (one object per write) leaves a bounded log to replay.

Before, only ``l0_sst_size_bytes`` froze a memtable: a writer doing a durable put every few
milliseconds made tens of thousands of WAL objects before its first flush, and every reader's
open and every recovery listed and read them all (a walkthrough measured 33,531 objects after
90 s, and 8.5 s to reopen).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from engine_support import abandon

from shaledb import Db, Settings
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.seeds import test_seed

LIMIT = 20
SLOW = Settings(compactor=None, garbage_collector=None, l0_max_wal_objects=LIMIT)


def test_a_slow_durable_writer_flushes_every_limit_objects(tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    model: dict[bytes, bytes] = {}
    store = FaultInjectingStore(open_store(f"file://{tmp_path}/db"), seed=0)
    with Db.open(store=store, settings=SLOW) as db:
        for _ in range(5 * LIMIT):
            k, v = b"k%03d" % rng.randrange(60), rng.randbytes(8)
            db.put(k, v)  # durable: one WAL object each
            model[k] = v
        deadline = time.monotonic() + 30
        while db._imms and time.monotonic() < deadline:
            time.sleep(0.01)  # frozen memtables reach L0 in the background
        m = db.manifest
        assert len(m.data.l0) >= 4, "the memtable was never frozen by the object count"
        assert db.wal.durable_wal_id - m.replay_after_wal_id <= LIMIT + 2
        assert dict(db.scan()) == model
    store.clear_calls()
    with Db.open(store=store, settings=SLOW) as db:
        assert store.count_calls("get", "wal/") <= LIMIT + 2
        assert dict(db.scan()) == model


def test_objects_a_dead_writer_left_are_flushed_at_the_next_write(tmp_path: Path) -> None:
    inner = open_store(f"file://{tmp_path}/db")
    faults = FaultInjectingStore(inner, seed=3)
    unlimited = SLOW.replace(l0_max_wal_objects=0)
    db = Db.open(store=faults, settings=unlimited)
    for i in range(3 * LIMIT):
        db.put(b"k%03d" % i, b"v")
    assert not db.manifest.data.l0  # no limit: nothing flushed
    abandon(db, faults)
    with Db.open(store=inner, settings=SLOW) as db:
        db.put(b"one", b"more")  # the replayed objects already span the limit
        deadline = time.monotonic() + 30
        while not db.manifest.data.l0 and time.monotonic() < deadline:
            time.sleep(0.01)  # the flush runs in the background
        assert db.manifest.data.l0, "the replayed memtable was not frozen"
        assert len(dict(db.scan())) == 3 * LIMIT + 1


def test_zero_means_no_limit(tmp_path: Path) -> None:
    with Db.open(f"file://{tmp_path}/db", settings=SLOW.replace(l0_max_wal_objects=0)) as db:
        for i in range(3 * LIMIT):
            db.put(b"k%03d" % i, b"v")
        assert not db.manifest.data.l0
