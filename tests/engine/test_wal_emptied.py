"""A WAL object emptied by damage is not taken for a fence (format/wal.md, "Fencing objects").

A zero-length WAL object used to count as a fence of unknown epoch wherever it was, so a
data object truncated to nothing lost its acknowledged writes without a word: recovery, a
reader, the change feed and ``verify`` all passed over it, and the next writer's open made
the loss permanent. Only a newer writer can fence, so an object after the empty one from the
epoch before it proves the damage.
"""

from __future__ import annotations

import pytest
from engine_support import abandon, dump, wal_paths

from shaledb import CorruptionError, Db, DbReader, DbReaderOptions, FencedError, Settings
from shaledb.admin.verify import verify
from shaledb.store import ObjectStore
from shaledb.testing import FaultInjectingStore

QUIET = Settings(compactor=None, garbage_collector=None)


def _crashed_writer(store: ObjectStore, puts: int) -> list[str]:
    """A writer that made ``puts`` durable puts (one WAL object each) and died; its WAL paths."""
    faults = FaultInjectingStore(store, seed=1)
    db = Db.open(store=faults, settings=QUIET)
    for i in range(puts):
        db.put(b"k%d" % i, b"v%d" % i)
    abandon(db, faults)
    return wal_paths(store)


def test_an_emptied_data_object_fails_recovery_reads_and_verify(memory_store: ObjectStore) -> None:
    objects = _crashed_writer(memory_store, 3)  # the fence, then k0, k1, k2
    emptied = objects[-2]  # k1's object: k2's, by the same writer, follows it
    memory_store.put(emptied, b"")
    with pytest.raises(CorruptionError) as err:
        Db.open(store=memory_store, settings=QUIET)
    assert err.value.path == emptied and "epoch" in str(err.value)
    opts = DbReaderOptions(establish_checkpoint=False, background_poll=False)
    with pytest.raises(CorruptionError) as err:
        DbReader.open(store=memory_store, options=opts)
    assert err.value.path == emptied
    report = verify(store=memory_store)
    assert not report.ok and any(p.startswith(emptied) for p in report.problems), report.problems
    assert wal_paths(memory_store)[: len(objects)] == objects  # nothing deleted (the open fenced after them)
    with pytest.raises(CorruptionError):
        Db.open(store=memory_store, settings=QUIET)  # and again: its fence made nothing permanent


def test_the_change_feed_refuses_it_too(memory_store: ObjectStore) -> None:
    from shaledb.clock import SYSTEM_CLOCK
    from shaledb.engine.changes import open_feed

    objects = _crashed_writer(memory_store, 3)
    memory_store.put(objects[-2], b"")
    feed = open_feed(memory_store, None, SYSTEM_CLOCK, follow=False)
    with pytest.raises(CorruptionError):
        list(feed)


def test_salvage_modes_report_it(memory_store: ObjectStore) -> None:
    objects = _crashed_writer(memory_store, 3)
    memory_store.put(objects[-2], b"")
    with Db.open(store=memory_store, settings=QUIET.replace(wal_recovery_mode="point_in_time")) as db:
        assert dump(db) == {b"k0": b"v0"}  # stops at the damage: nothing after it


def test_skip_any_keeps_what_follows(memory_store: ObjectStore) -> None:
    objects = _crashed_writer(memory_store, 3)
    memory_store.put(objects[-2], b"")
    with Db.open(
        store=memory_store, settings=QUIET.replace(wal_recovery_mode="skip_corrupted_records")
    ) as db:
        assert dump(db) == {b"k0": b"v0", b"k2": b"v2"}


def test_a_newer_writers_zero_length_fence_still_fences(memory_store: ObjectStore) -> None:
    """The documented fence of unknown epoch: the writer that meets it stops, the next
    writer's objects follow it, and nothing acknowledged is lost."""
    faults = FaultInjectingStore(memory_store, seed=1)
    a = Db.open(store=faults, settings=QUIET)
    a.put(b"a", b"1")
    nxt = int(wal_paths(memory_store)[-1].split("/")[1].split(".")[0]) + 1
    memory_store.put(f"wal/{nxt:020d}.sst", b"")  # someone fences A without an epoch
    with pytest.raises(FencedError):
        a.put(b"b", b"2")
    abandon(a, faults)
    faults_b = FaultInjectingStore(memory_store, seed=2)
    b = Db.open(store=faults_b, settings=QUIET)
    b.put(b"c", b"3")
    abandon(b, faults_b)  # B's objects follow the empty one: replayed, no error
    assert verify(store=memory_store).ok
    with Db.open(store=memory_store, settings=QUIET) as c:
        assert dump(c) == {b"a": b"1", b"c": b"3"}
