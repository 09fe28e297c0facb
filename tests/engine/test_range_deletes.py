"""Range deletes (``delete_range``): one entry, honoured by every read path.

Each test names the read path it covers; the random mix with compaction,
snapshots and reopen is ``test_range_delete_stateful.py``.
"""

from __future__ import annotations

import contextlib
import random
from datetime import UTC, datetime

import pytest

from shaledb import Db, DbReader, Settings, WriteBatch
from shaledb.bulk.read import plan_read, read_part
from shaledb.compaction import Compactor
from shaledb.errors import InvalidArgument, ShaleError, TransactionConflict
from shaledb.format.range_dels import KIND_RANGE_DEL, Fragments
from shaledb.format.sst import FORMAT_VERSION, decode_meta
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing import FaultInjectingStore, SimulatedCrash
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed
from shaledb.testing.strategies import tiny_settings

QUIET = Settings(compactor=None, garbage_collector=None)
KEYS = [b"k%03d" % i for i in range(100)]
PAD = b"." * 100  # 100 keys fill a few 4 KiB SSTs


def V(k: bytes) -> bytes:
    return b"v" + k + PAD


def fill(db: Db) -> None:
    b = WriteBatch()
    for k in KEYS:
        b.put(k, V(k))
    db.write(b)


def live(lo: int, hi: int, gone: range) -> list[bytes]:
    return [KEYS[i] for i in range(lo, hi) if i not in gone]


def compact_all(url: str, clock: ManualClock | None = None) -> None:
    opts = CompactorOptions(
        min_l0_ssts=1, min_merge_runs=2, max_space_amplification=1e-9, max_sst_size_bytes=4096
    )
    c = (
        Compactor.open(url, opts, settings=QUIET, clock=clock)
        if clock
        else Compactor.open(url, opts, settings=QUIET)
    )
    try:
        for _ in range(4):
            c.run_once()
    finally:
        c.close()


@pytest.mark.parametrize("where", ["memtable", "l0", "compacted"])
def test_get_scan_both_ways_and_get_many(mem_url: str, where: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        if where != "memtable":
            db.flush(memtable=True)
        h = db.delete_range(b"k010", b"k030")
        db.put(b"k020", b"back")  # a later put inside the range stands
        if where != "memtable":
            db.flush(memtable=True)
        if where == "compacted":
            compact_all(mem_url)
            db.refresh_manifest()
        gone = range(10, 30)
        assert db.get(b"k009") == V(b"k009") and db.get(b"k010") is None and db.get(b"k029") is None
        assert db.get(b"k020") == b"back" and db.get(b"k030") == V(b"k030")
        want = sorted({*live(0, 100, gone), b"k020"})
        assert [k for k, _ in db.scan()] == want
        assert [k for k, _ in db.scan(reverse=True)] == want[::-1]
        assert [k for k, _ in db.scan(b"k005", b"k035", limit=7)] == want[5:12]
        assert [k for k, _ in db.scan(b"k015", b"k025")] == [b"k020"]
        assert db.get_many([b"k011", b"k020", b"k031"]) == [None, b"back", V(b"k031")]
        assert h.seq > 0


def test_one_entry_not_a_delete_per_key(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        before = db.stats()["seq"]
        db.delete_range(b"k000", b"k100")
        assert db.stats()["seq"] == before + 1
        assert db._mem.rdels == [(b"k000", b"k100", before + 1)] and not db._mem.d
        db.flush(memtable=True)
        l0 = db.manifest.data.l0[0]
        assert l0.entries == 0 and l0.range_dels == 1
        assert list(db.scan()) == []
    store = open_store(mem_url)
    data = store.get(f"compacted/{l0.id}.sst")
    meta = decode_meta(data, len(data))
    assert meta.footer.version == 2 and meta.range_dels == Fragments([b"k000"], [b"k100"], [(before + 1,)])


def test_snapshots_and_time_travel_snapshots(mem_url: str) -> None:
    clock = ManualClock()
    s = Settings(history_retention_s=600, compactor=None, garbage_collector=None)
    with Db.open(mem_url, settings=s, clock=clock) as db:
        fill(db)
        seq_before = db.stats()["seq"]
        clock.advance(5)
        snap = db.snapshot()
        db.delete_range(b"k000", b"k050")
        db.flush(memtable=True)
        assert snap.get(b"k001") == V(b"k001") and len(list(snap.scan())) == 100
        assert db.get(b"k001") is None and len(list(db.scan())) == 50
        snap.close()
        compact_all(mem_url, clock)
        db.refresh_manifest()
        with db.snapshot(at_seq=seq_before) as old:  # the retention window keeps the covered versions
            assert old.get(b"k001") == V(b"k001") and len(list(old.scan())) == 100
        with db.snapshot(at_time=datetime.fromtimestamp(clock.now() - 1, tz=UTC)) as old:
            assert old.get(b"k049") == V(b"k049")
        assert db.get(b"k001") is None and len(list(db.scan(reverse=True))) == 50


def test_reader_in_another_process_view_checkpoint_and_clone(tmp_path: str, mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        cp_before = db.create_checkpoint()
        db.delete_range(b"k050", b"k100")  # only in the WAL: readers replay it
        db.flush()
        with DbReader.open(mem_url) as r:
            assert r.get(b"k060") is None and r.get(b"k040") == V(b"k040")
            assert [k for k, _ in r.scan(reverse=True)][:1] == [b"k049"]
            assert r.get_many([b"k050", b"k049"]) == [None, V(b"k049")]
        with DbReader.open(mem_url, checkpoint=cp_before.id) as r:
            assert r.get(b"k060") == V(b"k060")  # the checkpoint predates the range delete
        db.flush(memtable=True)
        cp = db.create_checkpoint()
        with DbReader.open(mem_url, checkpoint=cp.id) as r:
            assert len(list(r.scan())) == 50
    clone = str(tmp_path) + "/clone"
    with Db.open_from_checkpoint(clone, mem_url, cp.id, settings=QUIET) as c:
        assert c.get(b"k070") is None and len(list(c.scan())) == 50
        c.delete_range(b"k000", b"k010")
        assert len(list(c.scan())) == 40


def test_reader_process_sees_the_range_delete(mem_url: str, tmp_path: str) -> None:
    """A ``DbReader`` in another process (local directory store)."""
    import subprocess
    import sys

    url = str(tmp_path) + "/db"
    with Db.open(url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        db.delete_range(b"k001", b"k099")
        db.flush()
        code = (
            "import sys; from shaledb import DbReader\n"
            f"r = DbReader.open({url!r}); print(sorted(k.decode() for k, _ in r.scan())); r.close()"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "['k000', 'k099']"


def test_index_query_drops_terms_of_range_deleted_keys(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"x", indexes={"color": [b"red" if i % 2 else b"blue"]})
        db.flush(memtable=True)
        db.delete_range(b"k05", b"k15")
        db.put(b"k07", b"y", indexes={"color": [b"red"]})  # re-added inside the range
        red = [b"k%02d" % i for i in range(1, 20, 2) if not 5 <= i < 15] + [b"k07"]
        assert db.index_query("color", b"red", b"red\x00") == sorted(red)
        db.flush(memtable=True)
        assert db.index_query("color", b"red", b"red\x00") == sorted(red)
        assert db.index_query("color", b"blue", b"blue\x00") == [
            b"k%02d" % i for i in range(0, 20, 2) if not 5 <= i < 15
        ]


def test_compaction_removes_index_terms_of_range_deleted_keys(mem_url: str) -> None:
    """A range delete writes no index tombstones; compaction removes the terms it hides
    (the index tree shrinks), and the data tombstone leaves the bottom only after that.
    Before: the terms stayed in the index tree forever, and once the bottom compaction
    dropped the data tombstone, index_query returned the deleted keys again."""
    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(50):
            db.put(b"k%02d" % i, b"x", indexes={"f": [b"t%d" % (i % 3)]})
        db.flush(memtable=True)
        compact_all(mem_url)
        db.refresh_manifest()
        before = sum(s.entries for s in db.manifest.index.ssts())
        assert before == 50
        db.delete_range(b"k10", b"k40")
        db.put(b"k20", b"y", indexes={"f": [b"t9"]})  # re-added inside the range
        db.flush(memtable=True)
        want = sorted([b"k%02d" % i for i in range(50) if not 10 <= i < 40] + [b"k20"])
        assert sorted(db.index_query("f")) == want
        assert db.index_query("f", b"t2", b"t2\x00")[:3] == [b"k02", b"k05", b"k08"]
        for i in range(2):  # cleans the index; the next bottom compaction may drop the tombstone
            db.put(b"z%d" % i, b"x")
            db.flush(memtable=True)
            compact_all(mem_url)
            db.refresh_manifest()
        assert sum(s.entries for s in db.manifest.index.ssts()) == len(want), "the index tree kept the terms"
        assert not any(s.range_dels for s in db.manifest.data.ssts()), "the data tombstone stayed"
        assert sorted(db.index_query("f")) == want
        assert db.index_query("f", b"t9", b"t9\x00") == [b"k20"]
    with Db.open(mem_url, settings=QUIET) as db:
        assert sorted(db.index_query("f")) == want


def test_bulk_read_path(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        db.delete_range(b"k020", b"k080")  # an L0 range-del block
        db.flush(memtable=True)
        db.delete_range(b"k000", b"k005")  # WAL only
        db.flush()
        plan = plan_read(mem_url, partitions=3, inline_wal_bytes=1 << 20)
        got = [k for part in plan.parts for keys, *_ in read_part(part, mem_url) for k in keys]
        assert got == live(5, 100, range(20, 80))
        # The Arrow path the Spark data source reads with.
        pytest.importorskip("pyarrow")
        from shaledb.bulk.read_arrow import read_part_arrow

        arrow = [k for part in plan.parts for c in read_part_arrow(part, mem_url) for k in c.keys.to_pylist()]
        assert arrow == got


def test_change_feed_yields_a_range_delete_change(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.write(WriteBatch().delete_range(b"b", b"m").put(b"c", b"2"))
        db.flush()
        changes = list(db.changes(follow=False))
    assert [(c.kind, c.key, c.end) for c in changes] == [
        ("put", b"a", None),
        ("delete_range", b"b", b"m"),
        ("put", b"c", None),
    ]
    assert changes[1].seq == changes[2].seq


def test_batch_applies_in_order(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        b = WriteBatch().put(b"b1", b"x").delete_range(b"b", b"c").put(b"b2", b"y").put(b"d", b"z")
        assert b._kinds.count(KIND_RANGE_DEL) == 1 and len(b) == 4 - 1 + 0  # b1 dropped from the batch
        db.put(b"b0", b"old")
        db.write(b)
        assert dict(db.scan()) == {b"b2": b"y", b"d": b"z"}
        db.write(WriteBatch().delete_range(b"x", b"x"))  # empty range: nothing written
        with pytest.raises(InvalidArgument, match="after its end"):
            db.delete_range(b"z", b"a")
        with pytest.raises(InvalidArgument):
            db.delete_range(b"", b"a")
        assert dict(db.scan()) == {b"b2": b"y", b"d": b"z"}


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_transactions_range_delete_and_conflicts(mem_url: str, isolation: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        with db.transaction(isolation) as t:
            t.put(b"k001", b"mine")
            t.delete_range(b"k000", b"k010")
            t.put(b"k005", b"kept")
            assert t.get(b"k001") is None and t.get(b"k005") == b"kept"
            assert [k for k, _ in t.scan(b"k000", b"k012")] == [b"k005", b"k010", b"k011"]
        assert [k for k, _ in db.scan(b"k000", b"k012")] == [b"k005", b"k010", b"k011"]
        # Another commit writes a key inside my range after my snapshot: first committer wins.
        t = db.transaction(isolation)
        t.delete_range(b"k050", b"k060")
        db.put(b"k055", b"racer")
        with pytest.raises(TransactionConflict):
            t.commit()
        assert db.get(b"k055") == b"racer" and db.get(b"k051") == V(b"k051")
        # Another commit range-deletes a key I write.
        t = db.transaction(isolation)
        t.put(b"k071", b"mine")
        db.delete_range(b"k070", b"k080")
        with pytest.raises(TransactionConflict):
            t.commit()
        assert db.get(b"k071") is None
        # Disjoint ranges and keys commit.
        t = db.transaction(isolation)
        t.delete_range(b"k090", b"k095")
        db.put(b"k099", b"other")
        t.commit()
        assert db.get(b"k091") is None and db.get(b"k099") == b"other"


def test_serializable_read_of_a_range_deleted_key_conflicts(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        t = db.transaction("serializable")
        assert t.get(b"k010") == V(b"k010")
        t.put(b"x", b"1")
        db.delete_range(b"k000", b"k020")
        with pytest.raises(TransactionConflict):
            t.commit()
        t = db.transaction("snapshot")  # snapshot isolation tracks no reads
        assert t.get(b"k030") == V(b"k030")
        t.put(b"y", b"1")
        db.delete_range(b"k025", b"k035")
        t.commit()


def test_crash_and_reopen_replays_range_deletes(tmp_path: str) -> None:
    url = str(tmp_path) + "/db"
    inner = open_store(url)
    faults = FaultInjectingStore(inner, seed=1)
    db = Db.open(store=faults, settings=QUIET)
    fill(db)
    db.flush(memtable=True)
    db.delete_range(b"k010", b"k090")
    db.put(b"k050", b"after")
    # A crash: the writer loses the store mid-flight (the WAL holds the range delete).
    faults.crash()
    with pytest.raises((ShaleError, SimulatedCrash)):
        db.flush(memtable=True)
    with contextlib.suppress(ShaleError, SimulatedCrash):
        db.close()
    with Db.open(url, settings=QUIET) as db2:
        assert [k for k, _ in db2.scan()] == sorted({*live(0, 100, range(10, 90)), b"k050"})
        db2.flush(memtable=True)
    with Db.open(url, settings=QUIET) as db3:
        assert db3.get(b"k011") is None and db3.get(b"k050") == b"after" and db3.get(b"k090") == V(b"k090")


def test_compaction_drops_covered_entries_and_the_tombstone_at_the_bottom(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        db.delete_range(b"k010", b"k090")
        db.flush(memtable=True)
        compact_all(mem_url)
        db.refresh_manifest()
        t = db.manifest.data
        assert not t.l0 and len(t.runs) == 1
        assert sum(s.entries for s in t.runs[0].ssts) == 20  # covered entries are gone
        assert not any(s.range_dels for s in t.runs[0].ssts)  # bottom: the tombstone is gone
        assert [k for k, _ in db.scan()] == live(0, 100, range(10, 90))


def test_compaction_above_the_bottom_keeps_the_tombstone_and_run_ssts_stay_disjoint(mem_url: str) -> None:
    opts = CompactorOptions(
        min_l0_ssts=2, min_merge_runs=8, max_space_amplification=None, max_sst_size_bytes=4096
    )
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        c = Compactor.open(mem_url, CompactorOptions(min_l0_ssts=1, max_sst_size_bytes=4096), settings=QUIET)
        c.run_once()  # the bottom run
        c.close()
        db.refresh_manifest()
        db.delete_range(b"k020", b"k040")
        db.delete_range(b"k095", b"zzz")
        db.put(b"k030", b"new")
        db.flush(memtable=True)
        db.put(b"k001", b"again")
        db.flush(memtable=True)
        c = Compactor.open(mem_url, opts, settings=QUIET)
        c.run_once()  # two L0s into a run above the bottom one
        c.close()
        db.refresh_manifest()
        runs = db.manifest.data.runs
        assert len(runs) == 2 and sum(s.range_dels for s in runs[0].ssts) >= 2
        for run in runs:
            for a, b in zip(run.ssts, run.ssts[1:]):
                assert a.last_key < b.first_key
        gone = {*range(20, 40), *range(95, 100)} - {30}
        want = {k: (b"new" if k == b"k030" else b"again" if k == b"k001" else V(k)) for k in KEYS}
        want = {k: v for i, (k, v) in enumerate(want.items()) if i not in gone}
        assert dict(db.scan()) == want
        assert [k for k, _ in db.scan(reverse=True)] == sorted(want, reverse=True)
        assert all(db.get(k) == want.get(k) for k in KEYS)
    from shaledb.admin.verify import verify

    report = verify(mem_url)  # version-2 SSTs with range-del blocks pass the deep check
    assert report.problems == []


def test_old_format_sst_still_reads(mem_url: str) -> None:
    """SSTs without range tombstones keep format version 1 (older code reads them)."""
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        info = db.manifest.data.l0[0]
    data = open_store(mem_url).get(f"compacted/{info.id}.sst")
    assert decode_meta(data, len(data)).footer.version == FORMAT_VERSION == 1


def test_random_mix_with_multi_sst_runs_above_the_bottom(mem_url: str) -> None:
    """Puts, range deletes, flushes and compactions whose runs pile up (no merge for
    space), so outputs above the bottom keep tombstones spread over several SSTs;
    after every compaction each key, both scan directions and an old snapshot equal
    the model, and run SSTs stay disjoint."""
    seed = test_seed()
    rng = random.Random(seed)
    opts = CompactorOptions(
        min_l0_ssts=2,
        min_merge_runs=3,
        max_sst_size_bytes=4096,
        max_subcompactions=2,
        max_space_amplification=None,
    )
    keys = [b"k%02d" % i for i in range(62)]
    model: dict[bytes, bytes] = {}
    seen_split = 0
    with Db.open(mem_url, settings=tiny_settings()) as db:
        c = Compactor.open(mem_url, opts)
        snap, snap_model = db.snapshot(), {}
        # At least 260 steps, and on until a run has spread its tombstones (what the test is
        # for; a rare seed took 260 steps without one): at most 1,000.
        for step in range(1000):
            if step >= 260 and seen_split:
                break
            r = rng.random()
            if r < 0.6:
                k, v = rng.choice(keys[:60]), b"v%d" % step + b"." * 700
                db.put(k, v)
                model[k] = v
            elif r < 0.72:
                a, b = sorted(rng.sample(keys, 2))
                db.delete_range(a, b)
                model = {k: v for k, v in model.items() if not a <= k < b}
            elif r < 0.86:
                db.flush(memtable=True)
            else:
                c.run_once()
                db.refresh_manifest()
                for run in db.manifest.data.runs:
                    for x, y in zip(run.ssts, run.ssts[1:]):
                        assert x.last_key < y.first_key, f"seed={seed} step={step}: run SSTs overlap"
                    if len(run.ssts) > 1 and sum(1 for s in run.ssts if s.range_dels) > 1:
                        seen_split += 1
                assert [db.get(k) for k in keys] == [model.get(k) for k in keys], f"seed={seed} step={step}"
                assert list(db.scan()) == sorted(model.items()), f"seed={seed} step={step}"
                assert list(db.scan(reverse=True)) == sorted(model.items(), reverse=True)
                assert dict(snap.scan()) == snap_model, f"seed={seed} step={step}: snapshot"
                if rng.random() < 0.3:
                    snap.close()
                    snap, snap_model = db.snapshot(), dict(model)
        snap.close()
        c.close()
    assert seen_split, f"seed={seed}: no run spread its tombstones over several SSTs"


def test_value_journal_compaction_and_ledger_rebuild_keep_range_deletes(tmp_path: str) -> None:
    """With key/value separation the WAL objects become journal objects: journal
    compaction keeps a range delete as it is, and a ledger rebuilt from the journal
    (data and index trees) still has the keys it removed removed."""
    from shaledb import JournalOptions

    s = tiny_settings(
        value_separation_threshold=64,
        journal_max_bytes=4096,
        journal=JournalOptions(recovery_strategy="retain", sample_entries=32),
    )
    url = str(tmp_path) + "/db"
    with Db.open(url, settings=s) as db:
        for i in range(40):
            db.put(b"k%02d" % i, b"x" * 100, indexes={"f": [b"t"]})
        db.delete_range(b"k10", b"k30")
        db.put(b"k20", b"y" * 100, indexes={"f": [b"t"]})
        db.flush(memtable=True)
        want = [b"k%02d" % i for i in range(40) if not 10 <= i < 30 or i == 20]
        assert [k for k, _ in db.scan()] == want
        db.compact_journal()
        db.rebuild_ledger(force=True)
        assert [k for k, _ in db.scan()] == want
        assert db.index_query("f", b"t", b"t\x00") == want


def test_one_source_scan_path_honours_memtable_range_deletes(mem_url: str) -> None:
    """One sorted run and a memtable holding only range tombstones: the block-at-a-time
    scan path drops the covered rows fragment by fragment."""
    with Db.open(mem_url, settings=QUIET) as db:
        fill(db)
        db.flush(memtable=True)
        compact_all(mem_url)
        db.refresh_manifest()
        snap = db.snapshot()
        for i in range(5, 95, 10):
            db.delete_range(KEYS[i], KEYS[i + 3])
        gone = {j for i in range(5, 95, 10) for j in range(i, i + 3)}
        want = [k for i, k in enumerate(KEYS) if i not in gone]
        assert not db._mem.d and db._mem.rdels
        assert [k for k, _ in db.scan()] == want
        assert [k for k, _ in db.scan(reverse=True)] == want[::-1]
        assert [k for k, _ in db.scan(KEYS[6], KEYS[40], limit=5)] == [k for k in want if KEYS[6] <= k][:5]
        assert len(list(snap.scan())) == 100  # the snapshot predates them
        snap.close()


def test_cli_delete_range(tmp_path: str) -> None:
    import json
    import subprocess
    import sys

    url = str(tmp_path) + "/db"
    with Db.open(url, settings=QUIET) as db:
        fill(db)
    cli = [sys.executable, "-m", "shaledb", "--path", url, "--json"]
    out = subprocess.run([*cli, "delete-range", "k010", "k090"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout)["deleted_range"] is True
    bad = subprocess.run([*cli, "delete-range", "k090", "k010"], check=False, capture_output=True, text=True)
    assert bad.returncode != 0 and "after its end" in bad.stderr
    with Db.open(url, settings=QUIET) as db:
        assert [k for k, _ in db.scan()] == live(0, 100, range(10, 90))
