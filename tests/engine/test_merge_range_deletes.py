"""Merges and range deletes together (issue 31, items 2 and 3).

Two rules, checked on every read path: a merge onto a key that a newer range delete
covers folds onto *no* base (the operator gets ``existing=None``, never the deleted
value); a range delete hides every merge operand of the keys it covers, whatever
source (memtable, L0, sorted run, WAL) holds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shaledb import CompactorOptions, Db, DbReader, DbReaderOptions, Settings, WriteBatch
from shaledb.bulk.read import plan_read, read_part
from shaledb.compaction import Compactor
from shaledb.merge import MergeOperator

SEEN: list[tuple[bytes, bytes | None, list[bytes]]] = []


def _rec(key: bytes, existing: bytes | None, operands: list[bytes]) -> bytes:
    SEEN.append((key, existing, list(operands)))
    return (existing or b"") + b"".join(operands)


REC = MergeOperator("rec", _rec)
QUIET = Settings(compactor=None, garbage_collector=None, merge_operator="append")
COMPACT = CompactorOptions(
    min_l0_ssts=1, min_merge_runs=2, max_space_amplification=1e-9, max_sst_size_bytes=4096
)


def compact_all(url: str, settings: Settings = QUIET) -> None:
    c = Compactor.open(url, COMPACT, settings=settings)
    try:
        for _ in range(4):
            c.run_once()
    finally:
        c.close()


def _step(db: Db, url: str, where: str, settings: Settings = QUIET) -> None:
    """Move what was written so far to ``where``: memtable (stay), l0, or a sorted run."""
    if where == "memtable":
        return
    db.flush(memtable=True)
    if where == "run":
        compact_all(url, settings)
        db.refresh_manifest()


WHERE = ["memtable", "l0", "run"]
ORDERED = [(a, b) for i, a in enumerate(WHERE) for b in WHERE[i:]]
"""(older writes at, range delete at): a range delete is never below what it deletes."""


@pytest.mark.parametrize(("old_at", "rdel_at"), ORDERED)
def test_merge_after_a_range_delete_folds_onto_nothing(mem_url: str, old_at: str, rdel_at: str) -> None:
    """put a=old, (move), delete_range, (move), merge a "+x": a reads b"+x", never b"old+x"."""
    st = QUIET.replace(merge_operator=REC)
    with Db.open(mem_url, settings=st) as db:
        db.put(b"a", b"old")
        db.merge(b"b", b"m1")  # operands under the range delete too
        db.put(b"z", b"keep")
        _step(db, mem_url, old_at, st)
        db.delete_range(b"a", b"c")
        if rdel_at != old_at:
            _step(db, mem_url, rdel_at, st)
        db.merge(b"a", b"+x")
        db.merge(b"b", b"+y")
        SEEN.clear()
        assert db.get(b"a") == b"+x" and db.get(b"b") == b"+y"
        assert all(existing is None for k, existing, _ in SEEN if k in (b"a", b"b")), SEEN
        want = [(b"a", b"+x"), (b"b", b"+y"), (b"z", b"keep")]
        assert list(db.scan()) == want
        assert list(db.scan(reverse=True)) == want[::-1]
        assert db.get_many([b"a", b"b", b"z"]) == [b"+x", b"+y", b"keep"]
        for after in ("l0", "run"):  # the memtable's stack and the compaction agree
            _step(db, mem_url, after, st)
            assert list(db.scan()) == want and db.get(b"a") == b"+x"
    with DbReader.open(mem_url, options=DbReaderOptions(merge_operator=REC)) as r:
        assert list(r.scan()) == want and r.get(b"a") == b"+x"


@pytest.mark.parametrize(("merges_at", "rdel_at"), ORDERED)
def test_range_delete_hides_every_operand(mem_url: str, merges_at: str, rdel_at: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k1", b"base")
        db.merge(b"k1", b"1")
        db.merge(b"k2", b"2")
        db.merge(b"k2", b"3")
        db.merge(b"k9", b"9")
        _step(db, mem_url, merges_at)
        snap = db.snapshot()
        db.delete_range(b"k1", b"k5")
        if rdel_at != merges_at:
            _step(db, mem_url, rdel_at)
        assert db.get(b"k1") is None and db.get(b"k2") is None
        assert list(db.scan()) == [(b"k9", b"9")]
        assert list(db.scan(reverse=True)) == [(b"k9", b"9")]
        assert db.get_many([b"k1", b"k2", b"k9"]) == [None, None, b"9"]
        # the snapshot from before the range delete still sees the folded values
        assert snap.get(b"k1") == b"base1" and snap.get(b"k2") == b"23"
        assert list(snap.scan(reverse=True)) == [(b"k9", b"9"), (b"k2", b"23"), (b"k1", b"base1")]
        snap.close()
        with DbReader.open(mem_url) as r:
            assert list(r.scan()) == [(b"k9", b"9")] and r.get(b"k2") is None
        compact_all(mem_url)
        db.refresh_manifest()
        assert list(db.scan()) == [(b"k9", b"9")]


def test_batch_and_wal_replay(tmp_path: Path) -> None:
    """One batch: merge, range delete over it, merge again: only the later merge stands; a
    crash-free reopen replays the WAL the same way, and a bulk read agrees."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"old")
        db.write(WriteBatch().merge(b"a", b"x").delete_range(b"a", b"b").merge(b"a", b"y"))
        db.merge(b"a", b"z")
        assert db.get(b"a") == b"yz"
        db.flush()  # WAL only
        plan = plan_read(url, partitions=1, inline_wal_bytes=1 << 20)
        rows = {
            k: v for part in plan.parts for ks, _s, _t, vs in read_part(part, url) for k, v in zip(ks, vs)
        }
        assert rows == {b"a": b"yz"}
    with Db.open(url, settings=QUIET) as db:
        assert db.get(b"a") == b"yz" and list(db.scan()) == [(b"a", b"yz")]


def test_bulk_read_merge_over_range_deleted_sst_base(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"old")
        db.merge(b"b", b"1")
        db.flush(memtable=True)
        db.delete_range(b"a", b"c")
        db.flush(memtable=True)
        db.merge(b"a", b"x")  # WAL only, over a base the range delete removed
        db.flush()
        plan = plan_read(url, partitions=2, inline_wal_bytes=1 << 20)
        rows = {
            k: v for part in plan.parts for ks, _s, _t, vs in read_part(part, url) for k, v in zip(ks, vs)
        }
        assert rows == {b"a": b"x"}
        pytest.importorskip("pyarrow")
        from shaledb.bulk.read_arrow import read_part_arrow

        arrow = {
            k: v
            for part in plan.parts
            for c in read_part_arrow(part, url)
            for k, v in zip(c.keys.to_pylist(), c.values.to_pylist())
        }
        assert arrow == rows


def test_compaction_above_the_bottom_completes_onto_the_tombstone(mem_url: str) -> None:
    """A compaction of L0 SSTs that holds the range delete and a later merge, with the old
    value left in an older sorted run below: the merge is self-contained (tombstone base)."""
    opts = CompactorOptions(
        min_l0_ssts=2, min_merge_runs=8, max_space_amplification=None, max_sst_size_bytes=4096
    )
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"old")
        db.flush(memtable=True)
        compact_all(mem_url)  # the old value at the bottom
        db.refresh_manifest()
        db.delete_range(b"a", b"b")
        db.flush(memtable=True)
        db.merge(b"a", b"x")
        db.flush(memtable=True)
        c = Compactor.open(mem_url, opts, settings=QUIET)
        try:
            c.run_once()
        finally:
            c.close()
        db.refresh_manifest()
        assert len(db.manifest.data.runs) >= 2
        assert db.get(b"a") == b"x" and list(db.scan(reverse=True)) == [(b"a", b"x")]


@pytest.mark.parametrize("isolation", ["snapshot", "serializable"])
def test_transaction_merge_and_range_delete(mem_url: str, isolation: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"old")
        db.put(b"b", b"old")
        with db.transaction(isolation) as txn:
            txn.merge(b"b", b"gone")  # before the range delete: dropped with it
            txn.delete_range(b"a", b"c")
            txn.merge(b"a", b"x")  # after it: folds onto nothing
            assert txn.get(b"a") == b"x" and txn.get(b"b") is None
            assert list(txn.scan()) == [(b"a", b"x")]
        assert db.get(b"a") == b"x" and db.get(b"b") is None
        assert list(db.scan()) == [(b"a", b"x")]
