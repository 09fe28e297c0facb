"""The Arrow fast path of PartWriter writes the same bytes as the list path."""

from __future__ import annotations

import random
import uuid

import pytest
from ingest_kit import sorted_kv

from shaledb.bulk.ingest import IngestPlan, PartWriter
from shaledb.errors import InvalidArgument
from shaledb.store import drop_memory_store, open_store
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

# Needs the spark extra (pyarrow, numpy), so it runs with the Spark tests; it starts no JVM.
pytestmark = pytest.mark.spark


@pytest.fixture
def stores():
    names = [f"arrow-{uuid.uuid4().hex}" for _ in range(2)]
    yield [open_store(f"memory://{n}") for n in names]
    for n in names:
        drop_memory_store(n)


def plan(**kw):
    base = dict(ingest_id="t", behind=False, seq=9, writer_epoch=1, lease_id=None, lease_s=60.0, began_s=0.0)
    base.update(kw)
    return IngestPlan(**base)


def writer(store, p, seed):
    return PartWriter(store, p, 0, clock=ManualClock(start=1_700_000_000.0), rng=random.Random(seed))


def objects(store):
    return {m.path: store.get(m.path) for m in store.list("compacted/")}


@pytest.mark.parametrize("sst_kib,block", [(64, 4096), (1024, 512), (100_000, 4096)])
def test_arrow_path_writes_the_bytes_of_the_list_path(stores, sst_kib, block):
    seed = test_seed()
    rng = random.Random(seed)
    keys, vals = sorted_kv(7000, rng, vlen=0)
    vals = [rng.randbytes(rng.choice([0, 1, 50, 300])) for _ in keys]
    p = plan(max_sst_size_bytes=sst_kib * 1024, block_size_bytes=block)
    a, b = writer(stores[0], p, seed), writer(stores[1], p, seed)
    a._first = keys[0]
    a._emit(list(keys), list(vals), None)  # the list path, as add() does for one chunk
    pa_ = a.finish()
    b.add_arrow(pa.array(keys, pa.binary()), pa.array(vals, pa.binary()))
    pb = b.finish()
    assert objects(stores[0]) == objects(stores[1])
    assert pa_ == pb


def test_arrow_path_fingerprint_and_rows_match_across_chunks(stores):
    seed = test_seed()
    keys, vals = sorted_kv(3000, random.Random(seed))
    a, b = writer(stores[0], plan(), seed), writer(stores[1], plan(), seed)
    for s in range(0, 3000, 700):
        a.add(keys[s : s + 700], vals[s : s + 700])
        b.add_arrow(pa.array(keys[s : s + 700]), pa.array(vals[s : s + 700]))
    pa_, pb = a.finish(), b.finish()
    assert (pa_.rows, pa_.first_key, pa_.last_key, pa_.streams) == (
        pb.rows,
        pb.first_key,
        pb.last_key,
        pb.streams,
    )


def test_arrow_path_string_columns_slices_and_duplicates(stores):
    keys = pa.array(["x", "a", "b", "b", "c", "d"]).slice(1)  # an offset into the buffers
    vals = pa.array(["0", "1", "2", "3", "4", "5"]).slice(1)
    w = PartWriter(stores[0], plan(duplicates="last"), 0)
    w.add_arrow(keys, vals)
    part = w.finish()
    from ingest_kit import sst_rows

    rows = [(r[0], r[3]) for r in sst_rows(stores[0], list(part.ssts))]
    assert rows == [(b"a", b"1"), (b"b", b"3"), (b"c", b"4"), (b"d", b"5")]
    with pytest.raises(InvalidArgument, match="more than once"):
        PartWriter(stores[1], plan(), 0).add_arrow(keys, vals)
    with pytest.raises(InvalidArgument, match="not in ascending order"):
        PartWriter(stores[1], plan(), 0).add_arrow(pa.array([b"b", b"a"]), pa.array([b"", b""]))
    w2 = PartWriter(stores[1], plan(), 0)
    w2.add_arrow(pa.array([b"m"]), pa.array([b""]))
    with pytest.raises(InvalidArgument, match="chunks must ascend"):
        w2.add_arrow(pa.array([b"m", b"n"]), pa.array([b"", b""]))
    with pytest.raises(InvalidArgument, match="null"):
        PartWriter(stores[1], plan(), 0).add_arrow(pa.array([b"a", None]), pa.array([b"", b""]))
