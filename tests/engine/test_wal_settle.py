"""A writer that closes with nothing outside L0 moves the replay point past its WAL objects.

Every open writes a fence (an empty WAL object) and only a flush moved the replay point; a
database opened and closed without writes -- each bulk ingest's claim does that -- kept every
fence above it, so each later open listed and read one more object and the garbage collector
could delete none of them. The close's manifest write (it drops the writer's view checkpoint
anyway) now settles them: :class:`shaledb.manifest.edits.SettleWal`.
"""

from __future__ import annotations

import random
from pathlib import Path

from engine_support import abandon

from shaledb import Db, GarbageCollector, GcOptions, Settings
from shaledb.bulk.ingest import ingest_columns
from shaledb.format import paths
from shaledb.format.wal import encode_wal
from shaledb.manifest.edits import SettleWal
from shaledb.manifest.model import Manifest, TrackedWal
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.seeds import test_seed

QUIET = Settings(compactor=None, garbage_collector=None)


def test_opens_without_writes_leave_nothing_to_replay(tmp_path: Path) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    store = FaultInjectingStore(open_store(f"file://{tmp_path}/db"), seed=0)
    model = {f"k{i:03d}".encode(): rng.randbytes(rng.randrange(1, 40)) for i in range(50)}
    with Db.open(store=store, settings=QUIET) as db:
        for k, v in model.items():
            db.put(k, v)
    for _ in range(6):
        with Db.open(store=store, settings=QUIET) as db:
            assert db.get(b"k007") == model[b"k007"]
    store.clear_calls()
    with Db.open(store=store, settings=QUIET) as db:
        assert store.count_calls("get", "wal/") == 0  # the old code read the six fences before it
        assert dict(db.scan()) == model
        m = db.manifest
        assert m.replay_after_wal_id == m.next_wal_id - 1
        assert not m.tracked_wals


def test_a_crash_before_close_still_replays_every_write(tmp_path: Path) -> None:
    """Only a close settles; writes acknowledged before a crash are replayed as ever."""
    store = open_store(f"file://{tmp_path}/db")
    with Db.open(store=store, settings=QUIET) as db:
        db.put(b"a", b"1")
    faults = FaultInjectingStore(store, seed=1)
    db = Db.open(store=faults, settings=QUIET)
    db.put(b"b", b"2")  # durable, in the WAL, not in L0
    abandon(db, faults)
    for _ in range(2):
        with Db.open(store=store, settings=QUIET) as db:
            assert dict(db.scan()) == {b"a": b"1", b"b": b"2"}


def test_a_fenced_writer_settles_nothing(tmp_path: Path) -> None:
    """The newer writer's buffered writes sit in WAL objects above the old one's: the old
    one's close must not move the replay point past them (the edit checks the epoch)."""
    store = open_store(f"file://{tmp_path}/db")
    old = Db.open(store=store, settings=QUIET)
    faults = FaultInjectingStore(store, seed=2)
    new = Db.open(store=faults, settings=QUIET)
    new.put(b"k", b"v")  # durable; only new's memtable and the WAL hold it
    before = new.manifests.require_latest().replay_after_wal_id
    old.close()
    assert new.manifests.require_latest().replay_after_wal_id == before
    abandon(new, faults)
    with Db.open(store=store, settings=QUIET) as db:
        assert db.get(b"k") == b"v"


def test_the_edit_keeps_other_epochs_and_later_objects() -> None:
    m = Manifest(
        id=7,
        writer_epoch=3,
        next_wal_id=9,
        replay_after_wal_id=2,
        tracked_wals=(TrackedWal(4, 10, 1), TrackedWal(8, 10, 2)),
    )
    assert SettleWal(epoch=2, upto=6).apply(m) is None
    assert SettleWal(epoch=3, upto=2).apply(m) is None
    got = SettleWal(epoch=3, upto=6).apply(m)
    assert got is not None
    assert (got.replay_after_wal_id, got.next_wal_id, got.tracked_wals) == (6, 9, (TrackedWal(8, 10, 2),))
    grown = SettleWal(epoch=3, upto=12).apply(m)
    assert grown is not None and (grown.replay_after_wal_id, grown.next_wal_id) == (12, 13)


def test_ingest_claims_do_not_read_earlier_claims_fences(tmp_path: Path) -> None:
    """Each ingest claims the database (opens and closes a writer); the tenth claim read nine
    fences before, and a stream sink's thousandth a thousand."""
    url = f"file://{tmp_path}/db"
    store = FaultInjectingStore(open_store(url), seed=0)
    for b in range(10):
        store.clear_calls()
        keys = sorted(f"b{b}-{i:04d}".encode() for i in range(20))
        ingest_columns(url, keys, [b"v"] * len(keys), ingest_id=f"batch-{b}", store=store)
        assert store.count_calls("get", "wal/") == 0, f"ingest {b} read WAL objects"
    with Db.open(store=store, settings=QUIET) as db:
        assert sum(1 for _ in db.scan()) == 200


def test_a_journal_object_written_again_after_an_old_fence_is_recorded_by_the_settle(tmp_path: Path) -> None:
    """With value separation, a WAL object is a value-journal file once a manifest lists it.
    An older writer's fence landing in our next slot makes the segment go out one slot on,
    past the id its memtable was sealed with, so the flush does not list it; the settle
    must (else the collector deletes it below the replay point and its values are lost)."""
    url = f"file://{tmp_path}/db"
    sep = Settings(compactor=None, garbage_collector=None, value_separation_threshold=64)
    with Db.open(url, settings=sep) as db:
        db.put(b"a", b"x" * 10)
    db = Db.open(url, settings=sep)
    old_fence = encode_wal(
        [], [], epoch=db.epoch - 1, nonce=bytes(16), created_at_ms=0, codec=db.codec, block_size=4096
    )
    db.store.put(paths.wal_path(db.wal.next_id), old_fence, create=True)
    big = b"V" * 500
    db.put(b"big", big, durable=False)
    db.close()
    with GarbageCollector.open(url, GcOptions(min_age_s=0)) as gc:
        gc.run_once()
    with Db.open(url, settings=sep) as db:
        assert db.get(b"big") == big  # CorruptionError: value-journal object is missing, before
        assert db.get(b"a") == b"x" * 10
