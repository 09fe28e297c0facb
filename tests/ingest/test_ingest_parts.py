"""Writing ingest parts: SST bytes, filters, fingerprints, duplicates and order."""

from __future__ import annotations

import os
import random
import uuid

import google_crc32c
import pytest
from ingest_kit import sorted_kv, sst_rows

from shaledb.bulk.ingest import (
    IngestPlan,
    PartWriter,
    bloom_filter_bytes,
    crc32c_combine,
    fingerprint,
    write_part,
)
from shaledb.errors import InvalidArgument
from shaledb.format.bloom import BLAKE2B, WORDMIX, build_filter, key_hash_wordmix, wordmix_column
from shaledb.format.coding import CODEC_NONE, frame_block
from shaledb.format.row import FLAG_META, decode_payload
from shaledb.format.sst import SstBuilder, decode_sst
from shaledb.store import drop_memory_store, open_store
from shaledb.testing.seeds import test_seed


@pytest.fixture
def store():
    name = f"ingest-{uuid.uuid4().hex}"
    yield open_store(f"memory://{name}")
    drop_memory_store(name)


def plan(**kw):
    base = dict(ingest_id="t", behind=False, seq=7, writer_epoch=1, lease_id=None, lease_s=60.0, began_s=0.0)
    base.update(kw)
    return IngestPlan(**base)


@pytest.mark.spark  # numpy and pyarrow (the spark extra); no JVM
@pytest.mark.parametrize("n", [0, 1, 2, 37, 1000, 20_000])
@pytest.mark.parametrize("bits", [1, 10, 14])
def test_vectorized_filter_is_the_wordmix_filter(n, bits):
    pytest.importorskip("numpy")
    pa = pytest.importorskip("pyarrow")
    from shaledb.bulk.ingest.arrow import binary_buffers

    rng = random.Random(n * 31 + bits)
    keys = sorted({rng.randbytes(rng.randint(1, 40)) for _ in range(n)})
    want = build_filter(map(key_hash_wordmix, keys), len(keys), bits, WORDMIX)
    assert bloom_filter_bytes(keys, bits) == want
    # Keys handed over already hashed (the Arrow path) give the same filter.
    cut = n // 3
    hashed = wordmix_column(*binary_buffers(pa.array(keys[:cut], pa.binary())))
    assert bloom_filter_bytes(keys[cut:], bits, [hashed]) == want


@pytest.mark.spark  # numpy (the spark extra); no JVM
def test_sst_with_handed_in_filter_matches_the_reference_builder():
    pytest.importorskip("numpy")  # without it, ingest writes version-1 filters
    seed = test_seed()
    rng = random.Random(seed)
    keys, vals = sorted_kv(5000, rng)
    nonce = rng.randbytes(16)
    kw = dict(block_size=1024, nonce=nonce, created_at_ms=123)
    ref = SstBuilder(bloom_bits_per_key=10, **kw)
    ref.add_many(keys, [5] * len(keys), bytes(len(keys)), vals)
    want, _ = ref.finish()
    raw = SstBuilder(bloom_bits_per_key=0, **kw)
    raw.add_many(keys, [5] * len(keys), bytes(len(keys)), vals)
    filt = bloom_filter_bytes(keys, 10)
    buf, _ = raw.finish_buffer(filter_block=filt)
    got = bytes(buf)
    # The same data blocks, index and properties; only the filter's hash differs.
    ref_meta, ref_blocks = decode_sst(want)
    meta, blocks = decode_sst(got)
    start = ref_meta.footer.filter_off
    assert got[:start] == want[:start] and meta.footer.filter_off == start
    assert got[start : meta.footer.index_off] == frame_block(filt, CODEC_NONE)
    assert [(b.keys, b.vals) for b in blocks] == [(b.keys, b.vals) for b in ref_blocks]
    assert meta.props == ref_meta.props and meta.index.keys == ref_meta.index.keys
    assert ref_meta.bloom is not None and ref_meta.bloom.version == BLAKE2B
    assert meta.bloom is not None and meta.bloom.version == WORDMIX
    own = SstBuilder(bloom_bits_per_key=10, **kw)
    with pytest.raises(ValueError, match="builds its own filter"):
        own.finish_buffer(filter_block=bloom_filter_bytes(keys, 10))
    assert all(meta.bloom.may_contain_key(k) for k in keys[::97])


def test_crc32c_combine_matches_crc_of_concatenation():
    seed = test_seed()
    rng = random.Random(seed)
    for _ in range(200):
        a = rng.randbytes(rng.randint(0, 300))
        b = rng.randbytes(rng.choice([0, 1, 7, 64, rng.randint(0, 5000)]))
        want = google_crc32c.value(a + b)
        assert crc32c_combine(google_crc32c.value(a), google_crc32c.value(b), len(b)) == want


def test_fingerprint_does_not_depend_on_partition_or_chunk_cuts(store):
    seed = test_seed()
    rng = random.Random(seed)
    keys, vals = sorted_kv(3000, rng)
    metas = [rng.choice([None, b"m" + rng.randbytes(3)]) for _ in keys]
    p = plan()

    def parts(cuts, chunk):
        out = []
        edges = [0, *cuts, len(keys)]
        for i in range(len(edges) - 1):
            w = PartWriter(store, p, i)
            lo, hi = edges[i], edges[i + 1]
            for c in range(lo, hi, chunk):
                e = min(hi, c + chunk)
                w.add(keys[c:e], vals[c:e], metas[c:e])
            out.append(w.finish())
        return out

    a = fingerprint(parts([1000, 2000], 333))
    b = fingerprint(parts([17], 1000))
    c = fingerprint(parts([], 3000))
    assert a == b == c and a.startswith("3000:")
    vals[5] = b"changed"
    assert fingerprint(parts([], 3000)) != a


def test_ssts_are_cut_at_the_size_limit_and_hold_every_row(store):
    seed = test_seed()
    rng = random.Random(seed)
    keys, vals = sorted_kv(4000, rng, vlen=100)
    p = plan(max_sst_size_bytes=64 * 1024, block_size_bytes=1024)
    w = PartWriter(store, p, 3, attempt="a")
    for c in range(0, len(keys), 700):
        w.add(keys[c : c + 700], vals[c : c + 700])
    part = w.finish()
    assert part.partition == 3 and part.rows == len(keys)
    assert len(part.ssts) > 4
    assert all(s.size <= 64 * 1024 + 2048 for s in part.ssts[:-1])
    assert all(a.last_key < b.first_key for a, b in zip(part.ssts, part.ssts[1:]))
    rows = list(sst_rows(store, list(part.ssts)))
    assert [r[0] for r in rows] == keys and [r[3] for r in rows] == vals
    assert {r[1] for r in rows} == {7} and {r[2] for r in rows} == {0}
    assert (part.first_key, part.last_key) == (keys[0], keys[-1])


def test_metadata_is_stored_in_the_entry_payload(store):
    keys = [b"a", b"b", b"c"]
    part = write_part(store, plan(), 0, keys, [b"1", b"2", b"3"], [None, b"meta", b""])
    rows = list(sst_rows(store, list(part.ssts)))
    assert rows[0][2] == 0 and rows[0][3] == b"1"
    assert rows[1][2] == FLAG_META and decode_payload(rows[1][2], rows[1][3])[:2] == (b"2", b"meta")
    assert decode_payload(rows[2][2], rows[2][3])[:2] == (b"3", b"")


def test_duplicates_error_by_default_even_across_chunks(store):
    w = PartWriter(store, plan(), 0)
    w.add([b"a", b"b"], [b"1", b"2"])
    with pytest.raises(InvalidArgument, match="appears more than once"):
        w.add([b"b", b"c"], [b"3", b"4"])
    with pytest.raises(InvalidArgument, match="more than once"):
        write_part(store, plan(), 0, [b"a", b"a"], [b"1", b"2"])


def test_duplicates_last_keeps_the_last_row_in_input_order(store):
    w = PartWriter(store, plan(duplicates="last"), 0)
    w.add([b"a", b"b", b"b"], [b"1", b"2", b"3"])
    w.add([b"b", b"c", b"c"], [b"4", b"5", b"6"])
    part = w.finish()
    rows = list(sst_rows(store, list(part.ssts)))
    assert [(r[0], r[3]) for r in rows] == [(b"a", b"1"), (b"b", b"4"), (b"c", b"6")]
    assert part.rows == 3


def test_unsorted_input_and_bad_columns_are_refused(store):
    with pytest.raises(InvalidArgument, match="not in ascending order"):
        write_part(store, plan(), 0, [b"b", b"a"], [b"1", b"2"])
    w = PartWriter(store, plan(), 0)
    w.add([b"m"], [b"1"])
    with pytest.raises(InvalidArgument, match="not in ascending order"):
        w.add([b"a"], [b"2"])
    with pytest.raises(InvalidArgument):
        write_part(store, plan(), 0, ["text"], [b"1"])
    with pytest.raises(InvalidArgument):
        write_part(store, plan(), 0, [b""], [b"1"])
    with pytest.raises(InvalidArgument, match="differ in length"):
        write_part(store, plan(), 0, [b"a"], [])


def test_a_plan_already_committed_only_fingerprints(store):
    part = write_part(store, plan(committed_manifest=9), 0, [b"a", b"b"], [b"1", b"2"])
    assert part.ssts == () and part.rows == 2
    assert list(store.list("compacted/")) == []


def test_abort_deletes_uploaded_ssts(store):
    w = PartWriter(store, plan(max_sst_size_bytes=4096, block_size_bytes=512), 0)
    keys, vals = sorted_kv(500, random.Random(1), vlen=50)
    w.add(keys, vals)
    assert list(store.list("compacted/"))
    w.abort()
    assert list(store.list("compacted/")) == []


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise: writes stay cached")
@pytest.mark.parametrize("keep", [False, True])
def test_ingest_store_drops_its_ssts_from_the_page_cache_unless_kept(tmp_path, monkeypatch, keep):
    from shaledb.bulk.ingest import open_ingest_store
    from shaledb.store import local_store as obstore_store

    calls = []
    real = obstore_store._fadvise
    monkeypatch.setattr(obstore_store, "_fadvise", lambda *a: (calls.append(a[1:3]), real(*a)))
    rng = random.Random(test_seed())
    keys, vals = sorted_kv(30_000, rng, vlen=100)  # one SST of about 3.5 MB
    store = open_ingest_store(str(tmp_path / "db"), keep_page_cache=keep)
    part = write_part(store, plan(), 0, keys, vals)
    assert [s.size > 3 << 20 for s in part.ssts] == [True]
    assert len(calls) == (0 if keep else -(-part.ssts[0].size // (1 << 20)))
    rows = list(sst_rows(store, list(part.ssts)))
    assert [r[0] for r in rows] == keys and [r[3] for r in rows] == vals
