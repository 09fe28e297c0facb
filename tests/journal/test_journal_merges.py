"""Merges over values in the value journal (issue 31): a merge whose base is a journal
value folds on every read path (get, scan, DbReader, bulk reads), stays self-contained
through ledger compaction, and survives journal compaction and GC."""

from __future__ import annotations

from journal_kit import collect, journal_settings, wall_clock

from shaledb import Db, DbReader
from shaledb.bulk.read import plan_read, read_part
from shaledb.testing.compacting import compact_until_idle as compact


def test_merge_over_a_journal_value_survives_journal_compaction_and_gc(mem_url: str) -> None:
    """Before: journal compaction took the base of a compacted merge for a superseded
    value and dropped it; after GC the key read CorruptionError (object missing)."""
    s = journal_settings(merge_operator="append")
    clock = wall_clock()
    with Db.open(mem_url, settings=s, clock=clock) as db:
        for i in range(20):
            db.put(b"k%03d" % i, b"x" * 200)
        db.flush(memtable=True)
        for i in range(20):
            db.merge(b"k%03d" % i, b"+")
        db.flush(memtable=True)
        for i in range(40):
            db.put(b"j%03d" % i, b"y" * 200)
            db.put(b"j%03d" % i, b"z" * 200)
        db.flush(memtable=True)
        compact(mem_url, clock=clock)
        db.merge(b"k000", b"-")
        db.flush(memtable=True)
        assert db.compact_journal().runs
        collect(db.store, clock, later_s=1200)
        want = {b"k%03d" % i: b"x" * 200 + b"+" for i in range(20)}
        want[b"k000"] += b"-"
        assert {k: db.get(k) for k in want} == want
        assert dict(db.scan(b"k", b"l")) == want
        assert db.compact_journal().runs == []  # what it kept counts as live
    with Db.open(mem_url, settings=s, clock=clock) as db:
        collect(db.store, clock, later_s=2400)  # again, after the writer released its pins
        assert dict(db.scan(b"k", b"l")) == want
    with DbReader.open(mem_url) as r:
        assert dict(r.scan(b"k", b"l")) == want
    plan = plan_read(mem_url, partitions=1)
    rows = {
        k: v for part in plan.parts for ks, _s, _t, vs in read_part(part, mem_url) for k, v in zip(ks, vs)
    }
    assert {k: rows[k] for k in want} == want


def test_bulk_read_folds_a_merge_over_a_journal_value(mem_url: str) -> None:
    """Before: NotSupported ("a bulk read of a merge over a value in the value journal")."""
    s = journal_settings(merge_operator="append")
    with Db.open(mem_url, settings=s) as db:
        db.put(b"k", b"v" * 100)
        db.flush(memtable=True)
        db.merge(b"k", b"+")
        db.flush(memtable=True)
        db.merge(b"k", b"!")  # WAL only
        db.flush()
        assert db.get(b"k") == b"v" * 100 + b"+!"
    compact(mem_url)
    plan = plan_read(mem_url, partitions=1)
    rows = {
        k: v for part in plan.parts for ks, _s, _t, vs in read_part(part, mem_url) for k, v in zip(ks, vs)
    }
    assert rows == {b"k": b"v" * 100 + b"+!"}


def test_rebuilt_ledger_keeps_merges(mem_url: str) -> None:
    """Before: the rebuild kept each key's newest journal entry, so a merged key came back
    as its last operand alone (its base and earlier operands lost)."""
    from shaledb.format import paths
    from shaledb.store import open_store

    s = journal_settings(merge_operator="append")
    clock = wall_clock()
    with Db.open(mem_url, settings=s, clock=clock) as db:
        db.put(b"k", b"v" * 100)  # a journal value
        db.merge(b"k", b"+")
        db.merge(b"k", b"!")
        db.merge(b"m", b"a")
        db.put(b"r", b"old")
        db.delete_range(b"r", b"s")
        db.merge(b"r", b"new")  # after the range delete: onto nothing
        db.flush(memtable=True)
        want = dict(db.scan())
    assert want == {b"k": b"v" * 100 + b"+!", b"m": b"a", b"r": b"new"}
    store = open_store(mem_url)
    for meta in list(store.list(paths.SST_DIR)):
        store.delete(meta.path)
    with Db.open(mem_url, settings=s, clock=clock) as db:
        db.rebuild_ledger()
        assert dict(db.scan()) == want
