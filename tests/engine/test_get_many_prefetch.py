"""``get_many`` reads the blocks its lookups need first, grouped by SST and neighbouring
blocks, in parallel (``engine.prefetch``): the same values as ``get`` one by one, with
far fewer store requests on a cold cache."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest

from shaledb import Db, Settings
from shaledb.bulk.ingest import ingest_columns
from shaledb.engine.prefetch import spans
from shaledb.store import InstrumentedStore, drop_memory_store, open_store

QUIET = Settings(compactor=None, garbage_collector=None)


@pytest.fixture
def url() -> Iterator[str]:
    name = f"memory://prefetch-{uuid.uuid4().hex}"
    yield name
    drop_memory_store(name)


def _load(url: str, rng: random.Random) -> list[bytes]:
    keys = [b"key%07d" % i for i in range(0, 40_000, 2)]
    ingest_columns(url, keys, [k * 6 for k in keys], max_sst_size_bytes=200_000)  # a run of many SSTs
    with Db.open(url, settings=QUIET) as db:  # newer versions and deletes in L0 and in the memtable
        for k in rng.sample(keys, 300):
            db.put(k, b"new " + k, durable=False)
        db.flush(memtable=True)
        for k in rng.sample(keys, 200):
            db.delete(k, durable=False)
        db.flush(memtable=True)
    return keys


def _reads(store: InstrumentedStore) -> int:
    r = store.snapshot().requests
    return r["get"] + r["get_range"] + r["get_ranges"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_same_values_as_get_with_far_fewer_requests(url: str, seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    keys = _load(url, rng)
    batch = rng.sample(keys, 400) + [b"key%07d" % rng.randrange(1, 40_000, 2) for _ in range(100)]
    rng.shuffle(batch)
    one = InstrumentedStore(open_store(url))
    with Db.open(store=one, settings=QUIET) as db:
        db.put(batch[0], b"in the memtable", durable=False)
        base = _reads(one)
        want = [db.get(k) for k in batch]
        by_get = _reads(one) - base
    many = InstrumentedStore(open_store(url))
    with Db.open(store=many, settings=QUIET) as db:
        db.put(batch[0], b"in the memtable", durable=False)
        base = _reads(many)
        assert db.get_many(batch) == want
        by_get_many = _reads(many) - base
        assert db.get_many(batch, workers=1) == want  # one worker: no prefetch, same values
    assert by_get > 200
    print(f"reads: {by_get} by get, {by_get_many} by get_many")
    assert by_get_many * 4 < by_get, (by_get_many, by_get)


def test_spans_join_neighbouring_blocks_and_stop_at_the_size_cap(url: str) -> None:
    ingest_columns(url, [b"k%06d" % i for i in range(20_000)], [bytes(50)] * 20_000)
    with Db.open(url, settings=QUIET) as db:
        (info,) = db._view.runs[0].ssts
        r = db.tables.reader(info)
        n = len(r.index.keys)
        assert n > 100
        got = list(spans(r, [0, 1, 2, n // 2, n - 1], max_span_bytes=1 << 20, max_gap_bytes=0))
        assert [b for _, _, b in got] == [[0, 1, 2], [n // 2], [n - 1]]
        assert got[0][:2] == (r.index.block_span(0)[0], r.index.block_span(2)[1])
        capped = list(spans(r, list(range(n)), max_span_bytes=3 * 4096, max_gap_bytes=1 << 20))
        assert all(e - s <= 3 * 4096 or len(b) == 1 for s, e, b in capped)
        assert [i for _, _, b in capped for i in b] == list(range(n))
