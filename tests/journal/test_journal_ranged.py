"""Version 2 pointers: a get of a separated value reads its own bytes, not its block.

A write batch is never cut across WAL blocks, so a batch of a hundred large
values is one large block; these tests show that a get reads about the value's
bytes, that a cached block and a cached value never stand in for each other,
that damaged bytes (in the value, or a pointer aimed at another entry) are
refused with CorruptionError, and that version 1 pointers still read.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from shaledb import CorruptionError, Db, DbReader, DbReaderOptions, Settings, WriteBatch
from shaledb.engine.cache import LruCache
from shaledb.errors import InvalidArgument
from shaledb.format import paths
from shaledb.format.journal import Pointer, decode_pointer, encode_pointer, wal_ref
from shaledb.format.row import KIND_VALUE
from shaledb.format.wal import encode_wal_layout, locate_values
from shaledb.journal.resolver import JournalResolver
from shaledb.store import ObjectStore, open_store
from shaledb.store.wrappers import InstrumentedStore, StoreWrapper
from shaledb.testing.strategies import tiny_settings

WAL_ID = 5
N = 100
VALUE = 4096


def _object(
    rng: random.Random, codec: int = 0
) -> tuple[bytearray, dict[bytes, tuple[int, bytes, int]], dict[bytes, bytes]]:
    """One WAL object holding one batch of ``N`` values of ``VALUE`` bytes (one block)."""
    keys = [b"key%03d" % i for i in range(N)]
    vals = {k: rng.randbytes(VALUE) for k in keys}
    ents = [(7, KIND_VALUE, vals[k]) for k in keys]
    data, offsets, ends = encode_wal_layout(
        keys, ents, epoch=1, nonce=b"\0" * 16, created_at_ms=0, codec=codec, block_size=4096
    )
    assert len(ends) == 1, "the batch is one block"
    sink: dict[bytes, tuple[int, bytes, int]] = {}
    locate_values(WAL_ID, keys, ents, offsets, ends, 1024, sink, data)
    return data, sink, vals


def _resolver(store: ObjectStore) -> tuple[JournalResolver, InstrumentedStore]:
    counted = InstrumentedStore(store)
    return JournalResolver(lambda _db: counted, LruCache(8 << 20)), counted


def test_a_get_reads_its_value_and_caches_it_apart_from_blocks(memory_store: ObjectStore, seed: int) -> None:
    rng = random.Random(seed)
    data, sink, vals = _object(rng)
    path = paths.journal_object_path(wal_ref(WAL_ID))
    memory_store.put(path, bytes(data))
    res, counted = _resolver(memory_store)
    k = rng.choice(sorted(vals))
    p = decode_pointer(sink[k][1])
    assert p.value_off is not None and p.block_len > N * VALUE

    before = counted.snapshot()
    assert res.resolve(k, sink[k][1]) == vals[k]
    d = counted.snapshot() - before
    assert d.total_requests == 1 and d.bytes_read == VALUE, "one GET of the value's own bytes"
    assert res.resolve(k, sink[k][1]) == vals[k]
    assert (counted.snapshot() - before).total_requests == 1, "the value is cached"

    # A version 1 pointer to the same entry reads and caches the whole block (its own
    # key): the cached value is never taken for a block.
    v1 = encode_pointer(Pointer(p.ref, p.block_off, p.block_len, p.index, p.value_len))
    assert res.resolve(k, v1) == vals[k]
    d = counted.snapshot() - before
    assert d.total_requests == 2 and d.bytes_read == VALUE + p.block_len
    # Now that the block is cached whole, version 2 gets of its other values read nothing.
    others = [o for o in vals if o != k]
    for o in others[:10]:
        assert res.resolve(o, sink[o][1]) == vals[o]
    assert (counted.snapshot() - before).total_requests == 2


def test_damaged_value_bytes_and_misaimed_pointers_are_refused(memory_store: ObjectStore, seed: int) -> None:
    rng = random.Random(seed)
    data, sink, vals = _object(rng)
    path = paths.journal_object_path(wal_ref(WAL_ID))
    k = rng.choice(sorted(vals))
    p = decode_pointer(sink[k][1])
    assert p.value_off is not None
    start = p.block_off + p.value_off

    bad = bytearray(data)
    bad[start + rng.randrange(VALUE)] ^= 1 << rng.randrange(8)
    memory_store.put(path, bytes(bad))
    res, _ = _resolver(memory_store)
    with pytest.raises(CorruptionError, match="CRC32C") as exc:
        res.resolve(k, sink[k][1])
    assert exc.value.path == path
    other = next(o for o in sorted(vals) if o != k)
    assert res.resolve(other, sink[other][1]) == vals[other], "the other values stay readable"
    v1 = encode_pointer(Pointer(p.ref, p.block_off, p.block_len, p.index, p.value_len))
    with pytest.raises(CorruptionError):
        _resolver(memory_store)[0].resolve(k, v1)  # the block's own CRC catches it too

    memory_store.put(path, bytes(data))
    res, _ = _resolver(memory_store)
    with pytest.raises(CorruptionError, match="CRC32C"):
        res.resolve(other, sink[k][1])  # k's bytes are not other's value: the key is in the CRC
    # The header flipped: a version 2 get does not read it, a version 1 get refuses the block.
    bad = bytearray(data)
    bad[p.block_off + rng.randrange(12)] ^= 0xFF
    memory_store.put(path, bytes(bad))
    res, _ = _resolver(memory_store)
    assert res.resolve(k, sink[k][1]) == vals[k]
    with pytest.raises(CorruptionError):
        res.resolve(k, v1)
    memory_store.delete(path)
    with pytest.raises(CorruptionError, match="missing"):
        _resolver(memory_store)[0].resolve(k, sink[k][1])


def test_compressed_blocks_keep_version_1_pointers(memory_store: ObjectStore, seed: int) -> None:
    rng = random.Random(seed)
    keys = [b"key%03d" % i for i in range(N)]
    ents = [(7, KIND_VALUE, b"%04d" % i * 512) for i in range(N)]  # compressible
    data, offsets, ends = encode_wal_layout(
        keys, ents, epoch=1, nonce=b"\0" * 16, created_at_ms=0, codec=2, block_size=4096
    )
    sink: dict[bytes, tuple[int, bytes, int]] = {}
    locate_values(WAL_ID, keys, ents, offsets, ends, 1024, sink, data)
    memory_store.put(paths.journal_object_path(wal_ref(WAL_ID)), bytes(data))
    res, _ = _resolver(memory_store)
    for i in rng.sample(range(N), 10):
        p = decode_pointer(sink[keys[i]][1])
        assert p.value_off is None and sink[keys[i]][1][0] == 1
        assert res.resolve(keys[i], sink[keys[i]][1]) == ents[i][2]


@pytest.mark.parametrize("reopen", [False, True])
def test_a_get_after_a_batch_of_large_values_reads_about_one_value(
    mem_url: str, seed: int, reopen: bool
) -> None:
    """The engine end to end: a batch of 100 separated 4 KiB values is one WAL block of
    400 KiB; a cold get of one of them reads about 4 KiB (before version 2: the block)."""
    rng = random.Random(seed)
    settings = tiny_settings(
        value_separation_threshold=1024,
        wal_max_bytes=1 << 20,
        block_size_bytes=4096,
        block_cache_bytes=8 << 20,
    )
    vals = {b"key%03d" % i: rng.randbytes(VALUE) for i in range(N)}
    with Db.open(mem_url, settings=settings) as db:
        db.write(WriteBatch().put_many(sorted(vals.items())))
        db.flush(memtable=True)
        if not reopen:
            db.cache.clear()
            before = db.metrics()["store_bytes_read_total"]
            k = rng.choice(sorted(vals))
            assert db.get(k) == vals[k]
            # (The ledger's SST blocks and metadata are read too: about 12 KiB here.)
            assert db.metrics()["store_bytes_read_total"] - before < 8 * VALUE
    if reopen:
        with Db.open(mem_url, settings=settings) as db:
            for k in rng.sample(sorted(vals), 5):
                before = db.metrics()["store_bytes_read_total"]
                assert db.get(k) == vals[k]
                assert db.metrics()["store_bytes_read_total"] - before < 8 * VALUE


def test_small_enough_blocks_are_read_whole_when_asked(memory_store: ObjectStore, seed: int) -> None:
    """``Settings.journal_whole_block_max_bytes``: a block at most that big is read whole
    and cached, so its other values cost no read (a store with long round trips)."""
    rng = random.Random(seed)
    data, sink, vals = _object(rng)
    memory_store.put(paths.journal_object_path(wal_ref(WAL_ID)), bytes(data))
    block_len = decode_pointer(next(iter(sink.values()))[1]).block_len
    counted = InstrumentedStore(memory_store)
    res = JournalResolver(lambda _db: counted, LruCache(8 << 20), None, block_len)
    for k in rng.sample(sorted(vals), 20):
        assert res.resolve(k, sink[k][1]) == vals[k]
    s = counted.snapshot()
    assert s.total_requests == 1 and s.bytes_read == block_len
    small = JournalResolver(lambda _db: counted, LruCache(8 << 20), None, block_len - 1)
    for k in rng.sample(sorted(vals), 20):
        assert small.resolve(k, sink[k][1]) == vals[k]
    assert (counted.snapshot() - s).bytes_read == 20 * VALUE
    with pytest.raises(InvalidArgument):
        Settings(journal_whole_block_max_bytes=-1)


class ValueReads(StoreWrapper):
    """Bytes read from objects other than SSTs: the values' (the reader's SST blocks come in
    part from its read-ahead pool, whenever the pool runs: under load, after the first get,
    and counting them made the whole-block check fail)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.bytes = 0

    def _count(self, path: str, n: int) -> None:
        if not path.startswith(paths.SST_DIR):
            self.bytes += n

    def get(self, path: str) -> bytes:
        out = self.inner.get(path)
        self._count(path, len(out))
        return out

    def get_range(self, path: str, start: int, end: int) -> bytes:
        out = self.inner.get_range(path, start, end)
        self._count(path, len(out))
        return out

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        out = self.inner.get_ranges(path, ranges)
        self._count(path, sum(map(len, out)))
        return out


@pytest.mark.parametrize("whole", [0, 1 << 20])
def test_a_reader_follows_the_option_too(mem_url: str, seed: int, whole: int) -> None:
    """``DbReaderOptions.journal_whole_block_max_bytes``: 0 reads each value's bytes, 1 MiB
    reads the 400 KiB block once and serves its other values from the cache."""
    rng = random.Random(seed)
    vals = {b"key%03d" % i: rng.randbytes(VALUE) for i in range(N)}
    settings = tiny_settings(value_separation_threshold=1024, wal_max_bytes=1 << 20, block_size_bytes=4096)
    with Db.open(mem_url, settings=settings) as db:
        db.write(WriteBatch().put_many(sorted(vals.items())))
        db.flush(memtable=True)
    counted = ValueReads(open_store(mem_url))
    opts = DbReaderOptions(
        journal_whole_block_max_bytes=whole, background_poll=False, block_cache_bytes=8 << 20
    )
    with DbReader.open(store=counted, options=opts) as r:
        picks = rng.sample(sorted(vals), 10)
        assert r.get(picks[0]) == vals[picks[0]]
        before = counted.bytes
        for k in picks[1:]:
            assert r.get(k) == vals[k]
        read = counted.bytes - before
    if whole:
        assert read < VALUE, "the block came whole with the first get"
    else:
        assert 9 * VALUE <= read < 9 * VALUE + 16384, "each get read its own value"
