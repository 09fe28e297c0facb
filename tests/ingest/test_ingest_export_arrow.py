"""The Arrow fast path of checkpoint reads returns what the general path returns."""

from __future__ import annotations

import random
import struct

import pytest
from ingest_kit import QUIET, sorted_kv

from shaledb import Compactor, Db, Settings
from shaledb.bulk.ingest import ingest_columns
from shaledb.bulk.read import plan_read, read_part, values_and_metadata
from shaledb.bulk.read_arrow import read_part_arrow
from shaledb.engine.sstable import read_sst_meta
from shaledb.errors import CorruptionError
from shaledb.format import paths
from shaledb.format.coding import crc32c
from shaledb.settings import CompactorOptions
from shaledb.store import open_store
from shaledb.testing.seeds import test_seed

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

# Needs the spark extra (pyarrow, numpy), so it runs with the Spark tests; it starts no JVM.
pytestmark = pytest.mark.spark


def general(url, plan):
    out = []
    for part in plan.parts:
        for keys, seqs, kinds, pays in read_part(part, url):
            vals, metas = values_and_metadata(kinds, pays)
            out.extend(zip(keys, vals, seqs, metas or [None] * len(keys)))
    return out


def fast(url, plan, chunk_bytes=8 << 20):
    out = []
    for part in plan.parts:
        for c in read_part_arrow(part, url, chunk_bytes=chunk_bytes):
            metas = c.metadata.to_pylist() if c.metadata is not None else [None] * len(c)
            out.extend(zip(c.keys.to_pylist(), c.values.to_pylist(), c.seqs.to_pylist(), metas))
    return out


def forbid_general(mp, why):
    """Make any use of the general path fail the test with ``why``."""
    import shaledb.bulk.read_arrow as ea

    def no_general(*a, **k):
        raise AssertionError(why)

    mp.setattr(ea, "_general", no_general)


def spy_general(mp):
    """The ``(lo, hi)`` of every range sent to the general path (which still reads it)."""
    import shaledb.bulk.read_arrow as ea

    real, ranges = ea._general, []

    def spy(part, *a, **k):
        ranges.append((part.lo, part.hi))
        return real(part, *a, **k)

    mp.setattr(ea, "_general", spy)
    return ranges


def test_a_bulk_loaded_run_reads_the_same_through_both_paths(tmp_path, monkeypatch):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(20_000, rng, vlen=0)
    vals = [rng.randbytes(rng.choice([0, 3, 90])) for _ in keys]
    ingest_columns(url, keys, vals, max_sst_size_bytes=256 * 1024)
    ranges = [(None, None, 1), (None, None, 5), (keys[777], keys[15_000], 3), (b"k\x80", None, 2)]
    for start, end, n in ranges:
        plan = plan_read(url, start=start, end=end, partitions=n)
        want = general(url, plan)
        with monkeypatch.context() as mp:
            forbid_general(mp, "a single bulk-loaded run must take the fast path")
            assert fast(url, plan, chunk_bytes=64 * 1024) == want
        inside = [k for k in keys if (start is None or k >= start) and (end is None or k < end)]
        assert [r[0] for r in want] == inside


def test_tombstones_metadata_and_several_sources(tmp_path):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(5000, rng)
    ingest_columns(url, keys, vals, max_sst_size_bytes=64 * 1024)
    with Db.open(url, settings=QUIET) as db:
        for k in rng.sample(keys, 500):
            db.delete(k, durable=False)
        for k in rng.sample(keys, 50):
            db.put(k, b"with metadata", metadata=b"m", durable=False)
        db.flush(memtable=True)
        plan = plan_read(url, partitions=3)  # an L0 SST over a run: the general path
        assert fast(url, plan) == general(url, plan)
    # Compacted into a run above the loaded one: tombstones and metadata inside a single run.
    Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=None)).run_once()
    plan = plan_read(url, partitions=2)
    assert any(len(p.sources) == 2 for p in plan.parts)
    assert fast(url, plan, chunk_bytes=16 * 1024) == general(url, plan)
    Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01)).run_once()
    plan = plan_read(url, partitions=2)
    assert all(len(p.sources) == 1 for p in plan.parts)  # one run: the fast path
    got = fast(url, plan, chunk_bytes=16 * 1024)
    assert got == general(url, plan) and any(r[3] == b"m" for r in got)


def test_a_damaged_block_is_reported(tmp_path):
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(3000, random.Random(5))
    ingest_columns(url, keys, vals)
    plan = plan_read(url, partitions=1)
    _rewrite_sst(
        url, plan.parts[0].sources[0][0], lambda data, offsets: data.__setitem__(5000, data[5000] ^ 0x40)
    )
    with pytest.raises(CorruptionError, match="compacted/"):
        fast(url, plan)


def _reframed(url, edit):
    """The second block of the first SST, edited by ``edit(block, n)`` and given a valid CRC.

    Sizes stay as they were, so the SST index still finds every block: only the
    checks of the block's own layout can catch what ``edit`` did.
    """
    plan = plan_read(url, partitions=1)

    def reframe(data, offsets):
        s, e = offsets[1], offsets[2]
        block = data[s:e]
        (n,) = struct.unpack_from("<I", block, 0)
        edit(block, n)
        block[-4:] = struct.pack("<I", crc32c(bytes(block[:-4])))
        data[s:e] = block

    _rewrite_sst(url, plan.parts[0].sources[0][0], reframe)
    return plan


def _rewrite_sst(url, info, change):
    """Replace an SST with its bytes as ``change(data, block offsets)`` leaves them."""
    st = open_store(url)
    path = paths.sst_path(info.id)
    data = bytearray(st.get(path))
    change(data, read_sst_meta(st, info).index.offsets)
    st.delete(path)
    st.put(path, bytes(data))


def _flip(at):
    """A ``_rewrite_sst`` change: flip the lowest bit ``at`` bytes into the second block."""

    def change(data, offsets):
        data[offsets[1] + at] ^= 1

    return change


def _set_u32(block, at, value):
    block[at : at + 4] = struct.pack("<I", value)


LAYOUT_DAMAGE = {
    "checksum": (lambda b, n: None, "checksum"),  # the CRC is recomputed below, then broken
    "recorded length": (lambda b, n: _set_u32(b, len(b) - 9, len(b) - 8), "recorded"),
    "entry count": (lambda b, n: _set_u32(b, 0, 1 << 25), "entries"),
    "blob size": (lambda b, n: _set_u32(b, 4 + 4 * n, struct.unpack_from("<I", b, 4 + 4 * n)[0] + 1), "blob"),
    "first offset": (lambda b, n: _set_u32(b, 4, 1), "offsets do not span"),
    "decreasing offsets": (
        lambda b, n: _set_u32(b, 8, struct.unpack_from("<I", b, 4 + 4 * n)[0]),
        "decrease",
    ),
    "unknown kind": (lambda b, n: b.__setitem__(12 + 16 * n, 0x7F), "kind"),
}


@pytest.mark.parametrize("damage", sorted(LAYOUT_DAMAGE))
def test_every_layout_check_reports_a_damaged_block(tmp_path, damage):
    """Blocks are checked for a span at once; each check must still fire, naming the SST."""
    edit, message = LAYOUT_DAMAGE[damage]
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(3000, random.Random(7))
    ingest_columns(url, keys, vals)
    plan = _reframed(url, edit)
    if damage == "checksum":
        _rewrite_sst(url, plan.parts[0].sources[0][0], _flip(20))
    with pytest.raises(CorruptionError, match="compacted/") as err:
        fast(url, plan)
    assert message in str(err.value)


@pytest.mark.parametrize("compression", ["lz4", "zstd"])
def test_compressed_blocks_read_the_same_through_both_paths(tmp_path, compression):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(6000, rng, vlen=0)
    vals = [rng.choice([b"", b"a" * 200, rng.randbytes(40)]) for _ in keys]  # some compress, some not
    ingest_columns(url, keys, vals, settings=Settings(compression=compression), max_sst_size_bytes=128 * 1024)
    for start, end, n in [(None, None, 1), (keys[100], keys[5000], 3)]:
        plan = plan_read(url, start=start, end=end, partitions=n)
        assert fast(url, plan, chunk_bytes=32 * 1024) == general(url, plan)
    plan = plan_read(url, partitions=1)
    _rewrite_sst(url, plan.parts[0].sources[0][0], _flip(3))
    with pytest.raises(CorruptionError, match="compacted/"):
        fast(url, plan)


def _extras_db(url, rng, compression="none"):
    """A loaded run whose rows carry metadata (some empty), index terms, both or neither,
    with values of 0 to 300 bytes (the Arrow views inline those of 12 bytes or less)."""
    keys, _ = sorted_kv(4000, rng)
    vals = [rng.randbytes(rng.choice([0, 1, 4, 12, 13, 40, 300])) for _ in keys]
    metas = [rng.choice([None, None, b"", b"m", rng.randbytes(30)]) for _ in keys]
    dest = [rng.choice([None, b"LAX", [b"SFO", b"JFK"]]) for _ in keys]
    settings = Settings(compression=compression)
    ingest_columns(
        url, keys, vals, metas, indexes={"dest": dest}, settings=settings, max_sst_size_bytes=64 << 10
    )
    return keys, vals, metas


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_metadata_and_index_terms_take_the_fast_path(tmp_path, monkeypatch, compression):
    """Extras precede a value in its payload; the fast path cuts them off as decode_extras does."""
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals, metas = _extras_db(url, rng, compression)
    for start, end, n in [(None, None, 1), (keys[123], keys[3210], 3)]:
        plan = plan_read(url, start=start, end=end, partitions=n)
        want = general(url, plan)
        inside = [i for i, k in enumerate(keys) if (start is None or k >= start) and (end is None or k < end)]
        assert [(r[0], r[1], r[3]) for r in want] == [(keys[i], vals[i], metas[i]) for i in inside]
        with monkeypatch.context() as mp:
            forbid_general(mp, "metadata and index terms must not need the general path")
            assert fast(url, plan, chunk_bytes=16 << 10) == want
    # Deletes (tombstones of indexed keys) and expiring entries, compacted into the one run:
    # an expiry needs the clock, so its spans go the general way; the rows still agree.
    with Db.open(url, settings=QUIET) as db:
        for k in rng.sample(keys, 300):
            db.delete(k, durable=False)
        for k in rng.sample(keys, 20):
            db.put(k, b"soon gone", ttl=3600, metadata=b"t", durable=False)
        db.flush(memtable=True)
    Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01)).run_once()
    plan = plan_read(url, partitions=2)
    assert all(len(p.sources) == 1 for p in plan.parts)
    got = fast(url, plan, chunk_bytes=16 << 10)
    assert got == general(url, plan) and any(r[1] == b"soon gone" for r in got)


def _payload_at(block, n, i):
    """Where entry ``i``'s payload starts in a block of ``n`` entries."""
    key_blob = struct.unpack_from("<I", block, 4 + 4 * n)[0]
    return 12 + 17 * n + key_blob + struct.unpack_from("<I", block, 8 + 4 * n + 4 * i)[0]


# name: (rows' metadata, rows' index terms, edit of entry 0 of a block of n entries, message)
EXTRAS_DAMAGE = {
    "metadata past the entry": (
        b"m",
        None,
        lambda b, n: _set_u32(b, _payload_at(b, n, 0), 1 << 20),
        "metadata runs",
    ),
    "terms past the entry": (
        None,
        b"LAX",
        lambda b, n: _set_u32(b, _payload_at(b, n, 0), 1 << 20),
        "terms run",
    ),
    "metadata length truncated": (
        None,
        None,
        lambda b, n: b.__setitem__(12 + 16 * n, 0x04),
        "metadata length",
    ),
    "terms length truncated": (None, None, lambda b, n: b.__setitem__(12 + 16 * n, 0x30), "terms length"),
}


@pytest.mark.parametrize("damage", sorted(EXTRAS_DAMAGE))
def test_damaged_extras_are_reported_by_the_fast_path(tmp_path, damage):
    """Each check of the extras' lengths fires (blocks given valid CRCs), naming the SST."""
    meta, term, edit, message = EXTRAS_DAMAGE[damage]
    url = str(tmp_path / "db")
    keys, _ = sorted_kv(3000, random.Random(11))
    vals = [b"ab"] * len(keys)  # shorter than a length field
    metas = None if meta is None else [meta] * len(keys)
    indexes = None if term is None else {"dest": [term] * len(keys)}
    ingest_columns(url, keys, vals, metas, indexes=indexes)
    plan = _reframed(url, edit)
    with pytest.raises(CorruptionError, match="compacted/") as err:
        fast(url, plan)
    assert message in str(err.value)
    with pytest.raises(CorruptionError, match=message):
        general(url, plan)


def test_a_tombstone_with_flags_in_a_single_run_is_dropped(tmp_path):
    """A run keeps tombstones below a newer run's versions; an indexed key's carries a flag."""
    url = str(tmp_path / "db")
    keys, _ = sorted_kv(3000, random.Random(13))
    ingest_columns(url, keys, [b"value"] * len(keys), indexes={"dest": [b"LAX"] * len(keys)})
    # Entry 0 of the first SST's second block becomes a tombstone of an indexed key (0x11),
    # its payload left as it was: every read must skip it.
    plan = _reframed(url, lambda b, n: b.__setitem__(12 + 16 * n, 0x11))
    want = general(url, plan)
    assert len(want) == len(keys) - 1
    assert fast(url, plan) == want


def _layered_db(url, rng):
    """A loaded run with index terms, a compacted run over it and L0 SSTs over both:
    overwrites (some with metadata), deletes of indexed keys, new keys, and overwrites
    under a snapshot. Returns the model: key -> (value, metadata)."""
    keys, _ = sorted_kv(3000, rng)
    vals = [rng.randbytes(rng.choice([0, 5, 40])) for _ in keys]
    ingest_columns(url, keys, vals, indexes={"dest": [b"LAX"] * len(keys)}, max_sst_size_bytes=32 << 10)
    model = {k: (v, None) for k, v in zip(keys, vals)}

    def round_(db):
        for k in rng.sample(sorted(model), 300):
            v, m = rng.randbytes(rng.choice([1, 13, 60])), rng.choice([None, b"", b"meta"])
            db.put(k, v, metadata=m, durable=False)
            model[k] = (v, m)
        for k in rng.sample(sorted(model), 150):
            db.delete(k, durable=False)
            del model[k]
        for _ in range(100):
            k = b"k" + rng.randbytes(8)
            db.put(k, b"new", durable=False)
            model[k] = (b"new", None)
        with db.snapshot():  # overwrites under a pin (the flush writes only the newest)
            for k in rng.sample(sorted(model), 50):
                db.put(k, b"v1", durable=False)
                db.put(k, b"v2", durable=False)
                model[k] = (b"v2", None)
            db.flush(memtable=True)

    with Db.open(url, settings=QUIET) as db:
        round_(db)
    Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=None)).run_once()
    with Db.open(url, settings=QUIET) as db:
        round_(db)
        round_(db)
    return model


def test_several_sources_merge_without_the_general_path(tmp_path, monkeypatch):
    """L0 SSTs over two runs: each chunk range is merged in Arrow, newest version first."""
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    model = _layered_db(url, rng)
    keys = sorted(model)
    plan = plan_read(url, partitions=1)
    assert len(plan.parts[0].sources) >= 4 and plan.parts[0].l0_count >= 2
    for start, end, n in [(None, None, 1), (None, None, 3), (keys[100], keys[2500], 2)]:
        plan = plan_read(url, start=start, end=end, partitions=n)
        want = general(url, plan)
        inside = [k for k in keys if (start is None or k >= start) and (end is None or k < end)]
        assert [(r[0], r[1], r[3]) for r in want] == [(k, *model[k]) for k in inside]
        with monkeypatch.context() as mp:
            forbid_general(mp, "L0 SSTs over runs must be merged on the fast path")
            for chunk in (8 << 20, 16 << 10, 1):
                assert fast(url, plan, chunk_bytes=chunk) == want


def test_an_expiring_entry_sends_only_its_chunk_range_to_the_general_path(tmp_path, monkeypatch):
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(4000, rng)
    dest = {"dest": [b"LAX"] * len(keys)}
    ingest_columns(url, keys, vals, indexes=dest, max_sst_size_bytes=32 << 10)
    with Db.open(url, settings=QUIET) as db:
        for k in keys[::40]:
            db.put(k, b"over", metadata=b"m", durable=False)
        # Metadata, expiry and terms: cut off, its payload must still parse (terms follow the expiry).
        db.put(keys[1234], b"soon gone", ttl=3600, metadata=b"t", indexes={"dest": [b"SFO"]}, durable=False)
        db.delete(keys[1235], durable=False)
        db.flush(memtable=True)
    plan = plan_read(url, partitions=1)
    want = general(url, plan)
    assert len(want) == len(keys) - 1 and (keys[1234], b"soon gone") in [r[:2] for r in want]
    ranges = spy_general(monkeypatch)
    assert fast(url, plan, chunk_bytes=16 << 10) == want
    assert len(ranges) == 1
    lo, hi = ranges[0]
    assert lo is not None and lo <= keys[1234] < hi and (hi < keys[-1])
    # A range that begins just after the expiring entry reads its block but not the entry.
    ranges.clear()
    after = plan_read(url, start=keys[1236], partitions=1)
    assert fast(url, after, chunk_bytes=16 << 10) == [r for r in want if r[0] >= keys[1236]]
    assert ranges == []
    # The same in a single run: compacted together, the entry's span is read past it.
    Compactor.open(url, CompactorOptions(min_l0_ssts=1, max_space_amplification=0.01)).run_once()
    after = plan_read(url, start=keys[1236], partitions=1)
    assert len(after.parts[0].sources) == 1
    assert fast(url, after, chunk_bytes=16 << 10) == [r for r in want if r[0] >= keys[1236]]
    assert ranges == []


def test_a_lone_l0_sst_takes_the_fast_path(tmp_path, monkeypatch):
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(200):
            db.put(b"k%03d" % i, b"v", metadata=b"m" if i % 3 == 0 else None, durable=False)
        db.delete(b"k001", durable=False)
        db.flush(memtable=True)
    plan = plan_read(url, partitions=1)
    (part,) = plan.parts
    assert part.l0_count == 1 and len(part.sources) == 1
    want = general(url, plan)
    assert [r[0] for r in want] == [b"k%03d" % i for i in range(200) if i != 1]
    forbid_general(monkeypatch, "an L0 SST takes the fast path")
    assert fast(url, plan) == want


def test_merge_keeps_the_first_version_of_a_key_within_a_source():
    """Sources hold a repeated key's versions newest first (``merge_columns``' contract);
    no writer makes such a source today, so the rule is checked on the function itself."""
    import pyarrow as pa

    from shaledb.bulk.read_arrow import _Entries, _merge

    def entries(rows):
        keys, vals, seqs, kinds = zip(*rows)
        return _Entries(
            pa.array(keys, pa.binary()),
            pa.array(vals, pa.binary()),
            pa.array(seqs, pa.int64()),
            None,
            bytes(kinds),
        )

    newer = entries([(b"a", b"a3", 9, 0), (b"a", b"a2", 8, 0), (b"b", b"", 9, 1), (b"b", b"b2", 7, 0)])
    older = entries([(b"a", b"a1", 1, 0), (b"b", b"b1", 1, 0), (b"c", b"c1", 1, 0)])
    for got in ([newer], [newer, older]):
        out = _merge(got)
        rows = list(zip(out.keys.to_pylist(), out.values.to_pylist(), out.seqs.to_pylist()))
        assert rows == [(b"a", b"a3", 9)] + ([(b"c", b"c1", 1)] if len(got) == 2 else [])


def test_wal_entries_of_the_checkpoint_are_the_newest_source(tmp_path, monkeypatch):
    """A writer's updates still only in its WAL: the merge takes them, newest of all."""

    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    keys, vals = sorted_kv(3000, rng)
    ingest_columns(url, keys, vals, max_sst_size_bytes=32 << 10)
    model = {k: (v, None) for k, v in zip(keys, vals)}
    with Db.open(url, settings=QUIET) as db:
        for k in rng.sample(keys, 200):
            db.put(k, b"l0", durable=False)
            model[k] = (b"l0", None)
        db.flush(memtable=True)
        for k in rng.sample(keys, 200):
            m = rng.choice([None, b"m"])
            db.put(k, b"wal", metadata=m, durable=False)
            model[k] = (b"wal", m)
        for k in rng.sample(sorted(model), 100):
            db.delete(k, durable=False)
            del model[k]
        db.put(b"zz", b"new key", durable=False)
        model[b"zz"] = (b"new key", None)
        db.flush()
        cp = db.create_checkpoint(lifetime=600)
        db.put(b"after", b"not in the checkpoint")
        plan = plan_read(url, checkpoint=cp.id, partitions=2)
        assert any(p.wal_ids for p in plan.parts)
        want = general(url, plan)
        assert [r[0] for r in want] == sorted(model)
        assert [(r[1], r[3]) for r in want] == [model[k] for k in sorted(model)]
        with monkeypatch.context() as mp:
            forbid_general(mp, "WAL entries take the fast path")
            assert fast(url, plan, chunk_bytes=16 << 10) == want
        # An expiring entry in the WAL sends its chunk range (and only it) to the general path.
        db.put(keys[1500], b"soon gone", ttl=3600, durable=False)
        db.flush()
        cp2 = db.create_checkpoint(lifetime=600)
        plan = plan_read(url, checkpoint=cp2.id, partitions=1)
        want = general(url, plan)
        assert (keys[1500], b"soon gone") in [r[:2] for r in want]
        ranges = spy_general(monkeypatch)
        assert fast(url, plan, chunk_bytes=16 << 10) == want
        assert len(ranges) == 1


def test_an_empty_database_and_a_wal_only_one_read_through_the_fast_path(tmp_path):
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        plan = plan_read(url, partitions=2)
        assert fast(url, plan) == general(url, plan) == []
        db.put(b"a", b"1", durable=False)
        db.put(b"b", b"2", metadata=b"m", durable=False)
        db.delete(b"a", durable=False)
        db.flush()
        plan = plan_read(url, partitions=2)
        assert all(not p.sources for p in plan.parts)
        want = general(url, plan)
        assert [(r[0], r[1], r[3]) for r in want] == [(b"b", b"2", b"m")]
        assert fast(url, plan) == want
