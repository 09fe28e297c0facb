"""Reading a checkpoint as columns by key range (the engine of the Spark reader)."""

from __future__ import annotations

import itertools
import random

import pytest
from ingest_kit import QUIET, sorted_kv

from shaledb import Db, DbReader, admin
from shaledb.bulk import read as export
from shaledb.bulk.ingest import ingest_columns
from shaledb.bulk.read import (
    DEFAULT_INLINE_WAL_BYTES,
    DEFAULT_TARGET_BYTES,
    ensure_checkpoint,
    part_count,
    plan_read,
    read_part,
    split_range,
    values_and_metadata,
)
from shaledb.errors import CheckpointNotFound
from shaledb.manifest.model import SstInfo
from shaledb.store import StoreWrapper, open_store
from shaledb.testing.seeds import test_seed


def read_all(url, plan):
    rows = []
    for part in plan.parts:
        for keys, seqs, kinds, pays in read_part(part, url):
            vals, metas = values_and_metadata(kinds, pays)
            rows.extend(zip(keys, vals, metas or [None] * len(keys), seqs))
    return rows


def build(url, seed):
    """A database with a bulk-loaded run, L0 SSTs, WAL-only writes, deletes, metadata."""
    rng = random.Random(seed)
    keys, vals = sorted_kv(4000, rng, vlen=60)
    ingest_columns(url, keys, vals, max_sst_size_bytes=32 * 1024)
    model = dict(zip(keys, vals))
    db = Db.open(url, settings=QUIET)
    for i in range(3):
        for k in rng.sample(keys, 200):
            if rng.random() < 0.2:
                db.delete(k, durable=False)
                model.pop(k, None)
            else:
                v = b"l0-%d" % i
                db.put(k, v, durable=False)
                model[k] = v
        db.flush(memtable=True)
    for k in rng.sample(keys, 100):
        db.put(k, b"wal only", durable=False, metadata=b"meta")
        model[k] = b"wal only"
    db.put(b"zz-new", b"new key, WAL", durable=False)
    model[b"zz-new"] = b"new key, WAL"
    db.flush()
    return db, model


def checkpointed(url):
    """:func:`build`, a checkpoint of it, then a write the checkpoint must not see."""
    db, model = build(url, test_seed())
    cp = db.create_checkpoint(lifetime=600)
    db.put(b"after", b"not in the checkpoint")
    return db, model, cp


def test_parts_concatenate_to_the_checkpoint_and_ignore_later_writes(tmp_path):
    url = str(tmp_path / "db")
    db, model, cp = checkpointed(url)
    try:
        db.put(next(iter(model)), b"changed after")
        plan = plan_read(url, checkpoint=cp.id, partitions=4)
        assert not plan.created and len(plan.parts) == 4
        rows = read_all(url, plan)
    finally:
        db.close()
    assert [r[0] for r in rows] == sorted(model)
    assert {r[0]: r[1] for r in rows} == model
    with DbReader.open(url, checkpoint=cp.id) as r:
        assert [(k, v) for k, v, _, _ in rows] == list(r.scan())
    assert {r[2] for r in rows if r[1] == b"wal only"} == {b"meta"}
    assert all(r[2] is None for r in rows if r[1] != b"wal only")


def test_a_key_range_reads_only_its_keys(tmp_path):
    seed = test_seed()
    url = str(tmp_path / "db")
    db, model = build(url, seed)
    db.close()
    ks = sorted(model)
    lo, hi = ks[1000], ks[1500]
    plan = plan_read(url, start=lo, end=hi, partitions=3)
    assert plan.created
    rows = read_all(url, plan)
    assert [r[0] for r in rows] == ks[1000:1500]
    admin.delete_checkpoint(url, plan.checkpoint_id)


def test_split_range_covers_the_range_in_order():
    seed = test_seed()
    rng = random.Random(seed)
    ssts = []
    for i in range(40):
        a, b = sorted([rng.randbytes(3), rng.randbytes(3)])
        ssts.append(SstInfo(f"0{i:025d}", rng.randint(1, 1000), a, b, 1, 1, 1))
    for lo, hi in [(None, None), (b"\x40", None), (None, b"\xa0"), (b"\x10", b"\x20")]:
        for n in (1, 2, 5, 17):
            ranges = split_range(ssts, lo, hi, n)
            assert ranges[0][0] == lo and ranges[-1][1] == hi and len(ranges) <= n
            assert all(a[1] == b[0] and a[1] is not None for a, b in itertools.pairwise(ranges))
            assert all(r[0] is None or r[1] is None or r[0] < r[1] for r in ranges)


def test_split_range_cuts_at_the_bound_nearest_an_even_share():
    """A bulk load of two parts leaves SSTs of 64, 64 and 7 MB: halves are 64 | 71, not 128 | 7."""
    sizes = {b"a": 64, b"b": 64, b"c": 7}
    ssts = [
        SstInfo(f"0{i:025d}", mb * MB, k + b"0", k + b"9", 1, 1, 1) for i, (k, mb) in enumerate(sizes.items())
    ]
    halves = split_range(ssts, None, None, 2)
    assert len(halves) == 2 and b"a9" < halves[0][1] <= b"b0"  # between the first two SSTs
    thirds = split_range(ssts, None, None, 3)
    assert len(thirds) == 3 and b"a9" < thirds[0][1] <= b"b0" and b"b9" < thirds[1][1] <= b"c0"


def test_a_checkpoint_created_for_a_read_is_refreshed_and_then_lapses(tmp_path):
    url = str(tmp_path / "db")
    ingest_columns(url, [b"a"], [b"1"])
    plan = plan_read(url, lifetime_s=10.0)
    cp = next(c for c in admin.list_checkpoints(url) if str(c.id) == plan.checkpoint_id)
    assert cp.expire_time_s is not None and cp.name == "bulk-read"
    assert ensure_checkpoint(url, plan.checkpoint_id, refresh_lifetime_s=10.0) == cp.expire_time_s
    later = ensure_checkpoint(url, plan.checkpoint_id, refresh_lifetime_s=100.0)  # more than half gone
    assert later is not None and later > cp.expire_time_s + 50
    admin.delete_checkpoint(url, plan.checkpoint_id)
    with pytest.raises(CheckpointNotFound):
        ensure_checkpoint(url, plan.checkpoint_id)


def test_a_clone_reads_its_parents_ssts(tmp_path):
    parent, child = str(tmp_path / "parent"), str(tmp_path / "child")
    keys = [b"k%04d" % i for i in range(300)]
    ingest_columns(parent, keys, [b"p"] * len(keys))
    cp = admin.create_checkpoint(parent, lifetime=600)
    with Db.open_from_checkpoint(child, parent, cp.id, settings=QUIET) as clone:
        clone.put(b"k0001", b"child")
    rows = read_all(child, plan_read(child, partitions=2))
    assert len(rows) == 300 and dict((r[0], r[1]) for r in rows)[b"k0001"] == b"child"


MB = 1_000_000


@pytest.mark.parametrize(
    "in_range,slots,parts",
    [
        (136 * MB, 2, 2),  # the benchmark's load on local[2]: two parts, not three
        (136 * MB, 1, 2),  # no session: parts of at most 128 MiB
        (136 * MB, 4, 4),
        (3 * MB, 8, 1),  # parts are not made smaller than 4 MiB to fill slots
        (20 * MB, 8, 5),
        (1000 * MB, 3, 9),  # 8 parts of 128 MiB, rounded up to a multiple of 3 slots
        (0, 4, 1),
    ],
)
def test_part_count_fills_the_slots_in_even_rounds(in_range, slots, parts):
    assert part_count(in_range, DEFAULT_TARGET_BYTES, slots) == parts


def test_parts_are_cut_inside_an_sst_too_big_for_one(tmp_path, monkeypatch):
    """One large SST still splits into even parts (at its blocks' ends), which tile the range."""
    monkeypatch.setattr(export, "MIN_PART_BYTES", 64 * 1024)  # parts of ~2.5 MB / 7
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(20_000, rng, vlen=100)
    ingest_columns(url, keys, vals)  # one SST of ~2.5 MB
    for n in (2, 4, 7):
        plan = plan_read(url, partitions=n)
        assert len(plan.parts) == n
        assert all(len(p.sources) == 1 and len(p.sources[0]) == 1 for p in plan.parts)  # the same SST
        assert plan.parts[0].lo is None and plan.parts[-1].hi is None
        assert all(a.hi == b.lo for a, b in itertools.pairwise(plan.parts))
        sizes = [
            sum(1 for k in keys if (p.lo is None or k >= p.lo) and (p.hi is None or k < p.hi))
            for p in plan.parts
        ]
        assert max(sizes) <= 1.25 * len(keys) / n, sizes  # even to within a few blocks
        assert [r[0] for r in read_all(url, plan)] == keys

    narrow = plan_read(url, start=keys[100], end=keys[400], partitions=4)
    assert len(narrow.parts) == 1  # 300 keys are far less than a part's share: no cut inside
    monkeypatch.setattr(export, "MIN_PART_BYTES", 4 << 20)
    assert len(plan_read(url, partitions=4).parts) == 1  # parts under 4 MiB: SST boundaries only


class NoWalReads(StoreWrapper):
    """Fails every read of a WAL object: the parts must bring their WAL entries."""

    def get(self, path: str) -> bytes:
        assert not path.startswith("wal/"), f"a task read {path}"
        return self.inner.get(path)


def test_a_plan_hands_each_part_its_wal_entries(tmp_path):
    url = str(tmp_path / "db")
    db, model, cp = checkpointed(url)
    try:
        inline = plan_read(url, checkpoint=cp.id, partitions=4, inline_wal_bytes=DEFAULT_INLINE_WAL_BYTES)
        tasks_read = plan_read(url, checkpoint=cp.id, partitions=4)
        too_big = plan_read(url, checkpoint=cp.id, partitions=4, inline_wal_bytes=1)
    finally:
        db.close()
    assert all(p.wal is not None for p in inline.parts)
    assert all(p.wal is None for p in tasks_read.parts + too_big.parts)
    assert sum(len(p.wal[0]) for p in inline.parts if p.wal is not None) >= 101  # the WAL-only writes
    for a, b in zip(inline.parts, tasks_read.parts):
        assert a.wal == export._wal_columns(open_store(url), b)  # each part: its range only
    no_wal = NoWalReads(open_store(url))
    rows = []
    for part in inline.parts:
        for keys, _, kinds, pays in read_part(part, store=no_wal):
            vals, _ = values_and_metadata(kinds, pays)
            rows.extend(zip(keys, vals))
    assert rows == sorted(model.items())
