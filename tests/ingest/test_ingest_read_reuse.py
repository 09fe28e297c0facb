"""A read that lets its checkpoint lapse (the Spark source) shares the last one while the
database is unchanged: 150 SQL queries of an unchanged table used to add 150 checkpoints
and 150 manifest versions (the latest manifest grew from 12 to 35 KB), and needed write
permission on the bucket for every query."""

from __future__ import annotations

from shaledb import Db, Settings, admin
from shaledb.bulk.read import plan_read
from shaledb.store import ObjectStore, open_store
from shaledb.testing import FaultInjectingStore

QUIET = Settings(compactor=None, garbage_collector=None)


def _plan(store: ObjectStore, lifetime_s: float = 3600.0) -> str:
    plan = plan_read(store=store, partitions=1, name="spark-read", reuse=True, lifetime_s=lifetime_s)
    return plan.checkpoint_id


def test_repeated_reads_of_an_unchanged_database_write_nothing(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.flush(memtable=True)
    store = FaultInjectingStore(open_store(mem_url), seed=1)
    first = _plan(store)
    store.clear_calls()
    assert [_plan(store) for _ in range(5)] == [first] * 5
    assert store.count_calls("put") == 0  # no manifest version, no checkpoint
    assert len(admin.read_manifest(mem_url).checkpoints) == 1


def test_a_write_since_pins_a_new_version(mem_url: str) -> None:
    db = Db.open(mem_url, settings=QUIET)
    db.put(b"a", b"1")
    store = open_store(mem_url)
    first = _plan(store)
    db.put(b"b", b"2")  # in the WAL only: no new manifest
    second = _plan(store)
    assert second != first
    db.flush(memtable=True)  # a new manifest
    third = _plan(store)
    assert third not in (first, second)
    db.close()
    fourth = _plan(store)  # the close wrote a manifest too
    assert _plan(store) == fourth


def test_only_shared_checkpoints_with_life_left_are_reused(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
    store = open_store(mem_url)
    own = admin.create_checkpoint(mem_url, lifetime=3600, name="spark-read")  # deleted by its maker
    shared = _plan(store)
    assert shared != str(own.id)
    assert _plan(store, lifetime_s=7200.0) != shared  # less than half of the wanted lifetime left
    plain = plan_read(store=store, partitions=1, name="spark-read", lifetime_s=3600.0).checkpoint_id
    assert plain != shared  # without reuse: a checkpoint of its own, as before
