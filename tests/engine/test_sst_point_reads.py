"""``SstReader.get``, the point-lookup path: it asks the bloom filter only when the
block is not cached, and must answer exactly as ``SstReader.find`` does."""

from __future__ import annotations

import random

from shaledb.engine.cache import LruCache
from shaledb.engine.sstable import SstReader, put_new_sst, read_sst_meta
from shaledb.format.sst import SstBuilder
from shaledb.store import open_store
from shaledb.store.base import ObjectStore
from shaledb.testing.seeds import test_seed


class CountingStore:
    """Counts ranged reads of the store it wraps (the filter's job is to spare them)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.reads = 0

    def get_range(self, path: str, start: int, end: int) -> bytes:
        self.reads += 1
        return self.inner.get_range(path, start, end)


def _reader(seed: int) -> tuple[SstReader, CountingStore, dict[bytes, list[tuple[int, int, bytes]]]]:
    rng = random.Random(seed)
    store = open_store(f"memory://point-reads-{seed}")
    rows: dict[bytes, list[tuple[int, int, bytes]]] = {}
    for i in range(0, 3000, 2):  # even keys only: odd ones are absent, inside the range
        k = b"key-%06d" % i
        seqs = sorted(rng.sample(range(1, 10_000), rng.choice((1, 1, 1, 2, 5))), reverse=True)
        rows[k] = [(s, rng.choice((0, 0, 1)), rng.randbytes(rng.randrange(0, 40))) for s in seqs]
    b = SstBuilder(block_size=512)
    for k in sorted(rows):
        for s, kind, p in rows[k]:
            b.add(k, s, kind, p if kind == 0 else b"")
    data, props = b.finish()
    info = put_new_sst(store, data, props, lambda: f"01J00000000000000000{seed % 1_000_000:06d}")
    counting = CountingStore(store)
    meta = read_sst_meta(store, info)
    r = SstReader(info, counting, meta, LruCache(1 << 30), 0)  # type: ignore[arg-type]
    return r, counting, rows


def test_get_answers_as_find_does_cached_or_not() -> None:
    seed = test_seed()
    r, _store, rows = _reader(seed)
    rng = random.Random(seed)
    keys = [b"key-%06d" % i for i in range(-2, 3004)]
    for _ in range(2):  # first with cold blocks, then with every block cached
        rng.shuffle(keys)
        for k in keys:
            for seq in (None, 0, rng.randrange(1, 10_000), 9_999):
                assert r.get(k, seq, {}) == r.find(k, seq), (k, seq)
            if k in rows:
                s, kind, p = rows[k][0]
                assert r.get(k, None, {}) == (s, kind, p if kind == 0 else b"")


def test_filter_spares_reads_only_while_the_block_is_not_cached() -> None:
    r, store, _rows = _reader(7)
    absent = [b"key-%06d" % i for i in range(1, 3000, 2)]
    for k in absent:
        assert r.get(k, None, {}) is None
    # The filter says no to nearly every absent key: no data-block read for those.
    assert store.reads < len(absent) * 0.05
    assert r.bloom is not None
    # With the blocks cached, an absent key is settled by the block, not the filter.
    for i in range(len(r.index.keys)):
        r.block(i)
    before = store.reads
    queries: dict[int, tuple[int, int]] = {}
    for k in absent:
        assert r.get(k, None, queries) is None
    assert store.reads == before
    assert queries == {}  # the key was never hashed for the filter
