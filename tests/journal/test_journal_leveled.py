"""Leveled's behavioural scenarios (reference/leveled_rocksdb.md §3.2), on shaledb's value journal.

Numbers refer to that list: 1 CRUD across restarts, 2 unclean kill, 5 journal
compaction blocked by a live snapshot, 6 deleting everything reclaims space,
10 ledger rebuilt exactly under retain, 11 recovr's documented index loss,
13 incremental backups, 14 convergence and object size, 15 a missing journal
object found by checked head folds, 16 a corrupted journal object degrades
GET only, 17 close during journal compaction, 19 TTL on objects and indexes.
"""

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from journal_kit import collect, journal_settings, wall_clock

from shaledb import Compactor, CorruptionError, Db, DbReader, DbReaderOptions
from shaledb.errors import ClosedError, InvalidDbState
from shaledb.format import paths
from shaledb.format.row import KIND_TOMBSTONE
from shaledb.format.sst import decode_meta
from shaledb.journal.folds import journal_blocks
from shaledb.settings import CompactorOptions
from shaledb.store import open_store


def big(i: int, gen: int = 0, size: int = 300) -> bytes:
    return (b"%06d-%03d-" % (i, gen)) * (size // 11 + 1)


def compact_ledger(db: Db) -> None:
    """Merge the whole ledger into one bottom run (tombstones and expired entries reaped)."""
    db.flush(memtable=True)
    c = Compactor.open(
        store=db.store,
        options=CompactorOptions(
            min_l0_ssts=1, min_merge_runs=2, max_sources=64, max_space_amplification=0.0001
        ),
        settings=db.settings,
        clock=db.clock,
    )
    for _ in range(10):
        if not c.run_once().did_work:
            break
    db.refresh_manifest()


def _journal_entries(db: Db) -> list[tuple[bytes, tuple[int, int, bytes]]]:
    out = []
    for j in db.manifest.journal:
        data = db.store.get(paths.journal_object_path(j.id))
        for _off, _len, b in journal_blocks(data, j.id):
            out += [(b.keys[i], (b.seqs[i], b.kinds[i], b.payload(i))) for i in range(len(b))]
    return out


def journal_ids(db: Db) -> list[str]:
    return [j.id for j in db.refresh_manifest().journal]


# ----------------------------------------------------------------------- 1


def test_crud_survives_restart(url: str) -> None:
    s = journal_settings()
    clock = wall_clock()
    with Db.open(url, settings=s, clock=clock) as db:
        db.put(b"k", big(1), indexes={"idx": [b"t1"]}, metadata=b"m")
        db.put(b"small", b"v")
        assert db.get(b"k") == big(1)
        h = db.head(b"k")
        assert h is not None and (h.value_size, h.metadata, dict(h.indexes)) == (
            len(big(1)),
            b"m",
            {"idx": (b"t1",)},
        )
        db.put(b"k", big(1, 2), indexes={"idx": [b"t2"]})  # replaces the term: t1 removed
        db.flush(memtable=True)
        assert db.head(b"k").in_journal  # type: ignore[union-attr]
    with Db.open(url, settings=s, clock=clock) as db:
        assert db.get(b"k") == big(1, 2) and db.get(b"small") == b"v"
        assert db.index_query("idx", return_terms=True) == [(b"t2", b"k")]
        db.delete(b"k")
        assert db.get(b"k") is None and db.head(b"k") is None
        assert db.index_query("idx") == []
    with Db.open(url, settings=s, clock=clock) as db:
        assert db.get(b"k") is None and db.head(b"k") is None and db.index_query("idx") == []


# ----------------------------------------------------------------------- 2

_KILL_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from shaledb import Db, Settings
    s = Settings(value_separation_threshold=64, wal_max_bytes=1000, compactor=None, garbage_collector=None)
    db = Db.open(sys.argv[1], settings=s)
    db.put(b"key", b"first" * 100)
    db.put(b"key", b"second" * 100)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_unclean_kill_keeps_the_last_acknowledged_write(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    proc = subprocess.run(
        [sys.executable, "-c", _KILL_CHILD, url], check=False, capture_output=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr.decode()
    with Db.open(url, settings=journal_settings()) as db:
        assert db.get(b"key") == b"second" * 100
        db.flush(memtable=True)  # the replayed WAL objects become journal files, with pointers
        assert db.head(b"key").in_journal  # type: ignore[union-attr]
        assert db.get(b"key") == b"second" * 100


# ----------------------------------------------------------------------- 5


def test_journal_compaction_is_blocked_by_a_live_snapshot(mem_url: str) -> None:
    clock = wall_clock()
    with Db.open(mem_url, settings=journal_settings(), clock=clock) as db:
        for i in range(40):
            db.put(b"k%03d" % i, big(i))
        db.flush(memtable=True)
        snap = db.snapshot()
        for i in range(40):
            db.put(b"k%03d" % i, big(i, 1))
        db.flush(memtable=True)
        before = set(journal_ids(db))
        report = db.compact_journal()
        assert report.runs and report.bytes_reclaimed > 0
        replaced = before - set(journal_ids(db))
        assert replaced
        gc = collect(db.store, clock)
        assert gc.deleted["wal"] == [] and gc.deleted["journal"] == [], (
            "a live snapshot's values were deleted"
        )
        assert all(snap.get(b"k%03d" % i) == big(i) for i in range(40))
        # A second compaction while one is running answers busy.
        with db._journal_lock:
            assert db.compact_journal().busy
        snap.close()
        db.flush(memtable=True)
        db.put(b"x", b"y")
        db.flush(memtable=True)  # a manifest write gives the released pin its grace period
        gc = collect(db.store, clock, later_s=120)
        gone = {p for p in gc.deleted["wal"]} | {p for p in gc.deleted["journal"]}
        assert {paths.journal_object_path(r) for r in replaced} <= gone
        assert all(db.get(b"k%03d" % i) == big(i, 1) for i in range(40))
    with Db.open(mem_url, settings=journal_settings(), clock=clock) as db:
        assert all(db.get(b"k%03d" % i) == big(i, 1) for i in range(40))


# ----------------------------------------------------------------------- 6


@pytest.mark.parametrize("strategy", ["retain", "recovr"])
def test_deleting_everything_reclaims_space(mem_url: str, strategy: str) -> None:
    clock = wall_clock()
    with Db.open(mem_url, settings=journal_settings(strategy), clock=clock) as db:
        n = 60
        for i in range(n):
            db.put(b"k%03d" % i, big(i))
        db.flush(memtable=True)
        snap = db.snapshot()
        for i in range(n):
            db.delete(b"k%03d" % i)
        db.flush(memtable=True)
        assert len(list(snap.fold_keys())) == n  # taken before the deletes
        assert list(db.fold_keys()) == [] and list(db.fold_objects(order="sqn")) == []
        snap.close()
        compact_ledger(db)
        assert not list(db.manifest.data.ssts()), "tombstones are reaped at the bottom"
        report = db.compact_journal()
        size_after = sum(j.size for j in db.refresh_manifest().journal)
        assert report.runs
        if strategy == "recovr":
            assert db.manifest.journal == () and size_after == 0
        else:  # the deletes stay as key changes, the values are gone
            kinds = {e[1] for _, e in _journal_entries(db)}
            assert kinds == {KIND_TOMBSTONE}, "only the deletes are left"
        assert report.bytes_read >= n * len(big(0)), "every object holding a value was rewritten"
        assert not db.compact_journal().runs


# -------------------------------------------------------------------- 10/11


def _rotate(db: Db, n: int, rounds: int) -> None:
    """Each round gives every key a new value and a new term (the old one is removed)."""
    for r in range(rounds):
        for i in range(n):
            db.put(b"k%03d" % i, big(i, r), indexes={"idx": [b"t%d-%03d" % (r, i)]})
        db.flush(memtable=True)


def _lose_ledger(url: str) -> None:
    store = open_store(url)
    for meta in list(store.list(paths.SST_DIR)):
        store.delete(meta.path)


def test_rebuilt_ledger_is_exact_under_retain(url: str) -> None:
    s = journal_settings("retain")
    clock = wall_clock()
    n = 30
    with Db.open(url, settings=s, clock=clock) as db:
        _rotate(db, n, 4)
        for i in range(0, n, 3):
            db.delete(b"k%03d" % i)
        db.flush(memtable=True)
        compact_ledger(db)
        db.compact_journal()
        want = dict(db.scan())
        want_index = db.index_query("idx", return_terms=True)
    _lose_ledger(url)
    with Db.open(url, settings=s, clock=clock) as db:
        report = db.rebuild_ledger()
        assert report["data_keys"] == len(want)
        assert dict(db.scan()) == want
        assert db.index_query("idx", return_terms=True) == want_index
        assert len(want_index) == len(want), "one current term per live key, deleted keys have none"
    with Db.open(url, settings=s, clock=clock) as db:
        assert dict(db.scan()) == want and db.index_query("idx", return_terms=True) == want_index


def test_recovr_keeps_values_but_not_index_history(mem_url: str) -> None:
    s = journal_settings("recovr")
    clock = wall_clock()
    n = 30
    with Db.open(mem_url, settings=s, clock=clock) as db:
        _rotate(db, n, 1)
        first = journal_ids(db)  # the objects holding the first terms
        _rotate(db, n, 3)
        compact_ledger(db)  # reaps the removals' index tombstones
        later = [j for j in journal_ids(db) if j not in first]
        report = db.compact_journal(objects=later)  # the removals go; the first adds stay
        assert report.runs
        want = dict(db.scan())
    _lose_ledger(mem_url)
    with Db.open(mem_url, settings=s, clock=clock) as db:
        db.rebuild_ledger()
        assert dict(db.scan()) == want, "every key's value is its latest"
        terms = db.index_query("idx", return_terms=True)
        keys = {k for _, k in terms}
        assert keys == set(want)
        assert len(keys) < len(terms) < 4 * len(keys), "stale terms came back (recovr's documented loss)"


# ---------------------------------------------------------------------- 13


def test_incremental_backups(tmp_path: Path) -> None:
    src, dest = str(tmp_path / "src"), str(tmp_path / "backup")
    s = journal_settings()
    clock = wall_clock()
    with Db.open(src, settings=s, clock=clock) as db:
        _rotate(db, 20, 1)
        b1 = db.backup(dest)
        assert b1.manifest_written and b1.copied == b1.objects > 0 and b1.server_side
        again = db.backup(dest)
        assert again.copied == 0 and not again.manifest_written, "a second backup copies nothing"
        _rotate(db, 20, 1)
        b2 = db.backup(dest)
        assert 0 < b2.copied < b2.objects
        db.compact_journal()
        b3 = db.backup(dest)
        assert b3.manifest_written and b3.pruned > 0
        assert db.backup(dest).copied == 0
        want = dict(db.scan())
        want_index = db.index_query("idx", return_terms=True)
    with DbReader.open(dest, clock=clock) as r:  # a reader of the backup keeps its checkpoint
        assert dict(r.scan()) == want
        with Db.open(src, settings=s, clock=clock) as db:
            db.put(b"more", big(1))
            assert db.backup(dest).manifest_written
        assert dict(r.scan()) == want
    with Db.open(dest, settings=s, clock=clock) as bk:
        assert dict(bk.scan()) == {**want, b"more": big(1)}
        assert bk.index_query("idx", return_terms=True) == want_index
        bk.put(b"after", b"restore")
    # A backup a writer opened is a fork: backing up into it is refused.
    with Db.open(src, settings=s, clock=clock) as db, pytest.raises(InvalidDbState):
        db.backup(dest)


# ---------------------------------------------------------------------- 14


def test_journal_compaction_converges_and_cuts_objects(mem_url: str) -> None:
    s = journal_settings("retain")
    clock = wall_clock()
    s = s.replace(wal_max_bytes=8000)  # several values per WAL object
    with Db.open(mem_url, settings=s, clock=clock) as db:
        for i in range(80):
            db.put(b"k%03d" % i, big(i, 0), durable=False)
        db.flush(memtable=True)
        for gen in (1, 2):
            for i in range(0, 80, 2):  # half of every object goes dead
                db.put(b"k%03d" % i, big(i, gen), durable=False)
            db.flush(memtable=True)
        r1 = db.compact_journal()
        r2 = db.compact_journal()
        r3 = db.compact_journal()
        assert r1.runs and not r2.runs and not r3.runs, "a repeat run rewrites nothing"
        assert r1.bytes_rewritten < r1.bytes_read
        outputs = [j for j in db.manifest.journal if not j.id.isdigit()]
        assert len(outputs) > 1
        limit = s.journal_max_bytes + s.block_size_bytes + 2 * (len(big(0)) + 64)
        assert all(j.size <= limit for j in outputs), "objects are cut at journal_max_bytes"
        want = {b"k%03d" % i: big(i, 2 if i % 2 == 0 else 0) for i in range(80)}
        assert dict(db.scan()) == want
        r4 = db.compact_journal()
        assert not r4.runs


# ---------------------------------------------------------------------- 15


def test_missing_journal_object_is_found_by_checked_head_folds(mem_url: str) -> None:
    with Db.open(mem_url, settings=journal_settings()) as db:
        for i in range(40):
            db.put(b"k%03d" % i, big(i))
        db.flush(memtable=True)
        victim = db.manifest.journal[3]
        db.store.delete(paths.journal_object_path(victim.id))
        all_heads = list(db.scan_heads())
        checked = list(db.scan_heads(journal_check=True))
        assert len(all_heads) == 40 and 0 < len(checked) < 40
        lost = {k for k, _ in all_heads} - {k for k, _ in checked}
        for k in lost:
            with pytest.raises(CorruptionError, match="missing"):
                db.get(k)


# ---------------------------------------------------------------------- 16


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_corrupted_journal_object_degrades_get_only(mem_url: str, seed: int, compression: str) -> None:
    """A flipped byte in a journal block. Uncompressed blocks carry version 2 pointers
    (each value's range and CRC): a flip inside a value loses exactly that value, a
    flip elsewhere in the block (header, keys) loses none, as every value still passes
    its own CRC. Compressed blocks carry version 1 pointers: a flip anywhere loses
    every value of the block. Either way the keys and heads stay readable."""
    from shaledb.format.journal import raw_value_offset
    from shaledb.format.row import decode_payload
    from shaledb.format.sst import decode_data_block

    rng = random.Random(seed)
    with Db.open(mem_url, settings=journal_settings(wal_max_bytes=8000, compression=compression)) as db:
        n = 120
        for i in range(n):
            db.put(b"k%03d" % i, big(i), durable=(i % 7 == 6))
        db.flush(memtable=True)
        victim = rng.choice([j for j in db.manifest.journal if j.entries > 3])
        path = paths.journal_object_path(victim.id)
        good = db.store.get(path)
        meta = decode_meta(good, len(good))
        b = rng.randrange(len(meta.index))
        lo, hi = meta.index.offsets[b], meta.index.offsets[b + 1]
        blk = decode_data_block(good[lo:hi])
        ranges = {}  # key -> its value's [start, end) in the object (uncompressed blocks)
        for i in range(len(blk)):
            body = decode_payload(blk.kinds[i], blk.payload(i))[0]
            off = raw_value_offset(good, lo, hi - lo, i, len(body))
            if off is not None:
                ranges[blk.keys[i]] = (lo + off, lo + off + len(body))
        assert (compression == "none") == bool(ranges), "zstd compresses these values, none does not"

        def lost_after_flip(pos: int) -> set[bytes]:
            bad = bytearray(good)
            bad[pos] ^= 0xFF
            db.store.put(path, bytes(bad))
            db.cache.clear()
            failed = set()
            for i in range(n):
                k = b"k%03d" % i
                try:
                    assert db.get(k) == big(i)
                except CorruptionError as exc:
                    assert exc.path == path
                    failed.add(k)
            return failed

        if ranges:
            k = rng.choice(sorted(ranges))
            s, e = ranges[k]
            assert lost_after_flip(rng.randrange(s, e)) == {k}, "exactly the damaged value is lost"
            assert lost_after_flip(lo + rng.randrange(12)) == set(), "the block head is not read"
        else:
            lost = lost_after_flip(rng.randrange(lo, hi))
            assert lost == set(blk.keys), "exactly the values stored in the damaged block are lost"
        assert len(list(db.fold_keys())) == n and len(list(db.scan_heads())) == n
        bad = bytearray(good)
        bad[rng.randrange(lo, hi)] ^= 0xFF
        db.store.put(path, bytes(bad))
        report = db.compact_journal(objects=[victim.id])
        assert report.damaged_blocks == 1
        db.store.put(path, good)  # the old object, restored, serves old views again
    with Db.open(mem_url, settings=journal_settings()) as db:
        assert all(db.head(b"k%03d" % i) is not None for i in range(n))


# ---------------------------------------------------------------------- 17


def test_close_during_journal_compaction_is_safe(mem_url: str) -> None:
    s = journal_settings()
    with Db.open(mem_url, settings=s) as db:
        _rotate(db, 40, 3)
        want = dict(db.scan())
        want_index = db.index_query("idx", return_terms=True)
        out: list[Any] = []

        def run() -> None:
            try:
                out.append(db.compact_journal())
            except ClosedError as exc:
                out.append(exc)

        t = threading.Thread(target=run)
        t.start()
        db.close()
        t.join()
        assert out
    with Db.open(mem_url, settings=s) as db:
        assert dict(db.scan()) == want
        assert db.index_query("idx", return_terms=True) == want_index
        assert not db.compact_journal(max_runs=100).busy


# ---------------------------------------------------------------------- 19


def test_ttl_on_objects_and_indexes(mem_url: str) -> None:
    clock = wall_clock()
    with Db.open(mem_url, settings=journal_settings(), clock=clock) as db:
        db.put(b"a", big(1), ttl=100, indexes={"f": [b"x"]})
        db.put(b"b", big(2), ttl=100, indexes={"f": [b"y"]})
        db.put(b"c", b"small", indexes={"f": [b"z"]})
        assert db.index_query("f") == [b"a", b"b", b"c"]
        # Replacing with a shorter TTL and a new term drops the old term at once.
        db.put(b"a", big(3), ttl=10, indexes={"f": [b"w"]})
        assert db.index_query("f", return_terms=True) == [(b"w", b"a"), (b"y", b"b"), (b"z", b"c")]
        db.flush(memtable=True)
        clock.advance(11)
        assert db.get(b"a") is None and db.head(b"a") is None
        assert db.index_query("f") == [b"b", b"c"]
        assert [k for k, _ in db.scan_heads()] == [b"b", b"c"]
        clock.advance(100)
        assert db.index_query("f") == [b"c"] and list(db.fold_keys()) == [b"c"]
        compact_ledger(db)
        assert db.manifest.data.size > 0
        entries = sum(s.entries for s in db.manifest.data.ssts()) + sum(
            s.entries for s in db.manifest.index.ssts()
        )
        assert entries == 2, "compaction reaps expired entries and their index entries"
        db.compact_journal()
        assert db.get(b"c") == b"small" and db.index_query("f") == [b"c"]


# ------------------------------------------------------------------ readers


def test_reader_keeps_reading_a_checkpoint_across_journal_compaction_and_gc(mem_url: str) -> None:
    clock = wall_clock()
    with Db.open(mem_url, settings=journal_settings(), clock=clock) as db:
        for i in range(30):
            db.put(b"k%03d" % i, big(i), indexes={"f": [b"%d" % (i % 3)]})
        db.flush(memtable=True)
        cp = db.create_checkpoint(lifetime=600)
        for i in range(30):
            db.put(b"k%03d" % i, big(i, 1))
        db.flush(memtable=True)
        db.compact_journal()
        collect(db.store, clock)
        with DbReader.open(mem_url, checkpoint=cp.id, clock=clock) as r:
            assert all(r.get(b"k%03d" % i) == big(i) for i in range(30))
            assert r.head(b"k001").in_journal  # type: ignore[union-attr]
            assert r.index_query("f", b"1", b"1\x00") == [b"k%03d" % i for i in range(1, 30, 3)]
        with DbReader.open(
            mem_url,
            options=DbReaderOptions(establish_checkpoint=False, background_poll=False),
            clock=clock,
        ) as r:
            assert all(r.get(b"k%03d" % i) == big(i, 1) for i in range(30))
            assert [k for k, _ in r.scan_heads(limit=3)] == [b"k000", b"k001", b"k002"]


def test_head_only_mode_keeps_no_journal(mem_url: str) -> None:
    clock = wall_clock()
    with Db.open(mem_url, settings=journal_settings(value_separation_threshold=None), clock=clock) as db:
        for i in range(30):
            db.put(b"k%03d" % i, big(i), indexes={"f": [b"t"]}, ttl=1000)
        db.flush(memtable=True)
        assert db.manifest.journal == ()
        assert db.head(b"k001").in_journal is False  # type: ignore[union-attr]
        gc = collect(db.store, clock)
        assert gc.deleted["wal"], "WAL objects are garbage once in L0 without a journal"
        assert db.index_query("f") == [b"k%03d" % i for i in range(30)]
        assert not db.compact_journal().runs


def test_the_seed_fixture_prints_the_seed(capsys: pytest.CaptureFixture[str], seed: int) -> None:
    assert f"SHALEDB_TEST_SEED={seed}" in capsys.readouterr().out
