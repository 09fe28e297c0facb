"""Issue 30 item 4: a batch written to a database with index terms looks up each key's old
terms; cold keys used to cost one ranged GET each, one after another (500 deletes of the
demo: 500 GETs in series on S3). ``prefetch_old_terms`` warms their blocks first, in a few
grouped, parallel GETs."""

from __future__ import annotations

import random
from pathlib import Path

from shaledb import Db, Settings, WriteBatch
from shaledb.testing.seeds import test_seed

QUIET = Settings(compactor=None, garbage_collector=None)


def _ranged_gets(db: Db) -> int:
    requests = db.metrics()["store_requests_total"]
    assert isinstance(requests, dict)
    return int(requests["get_range"]) + int(requests["get_ranges"])


def test_a_batch_of_cold_deletes_reads_its_old_terms_in_few_requests(tmp_path: Path) -> None:
    seed = test_seed()
    url = str(tmp_path / "db")
    keys = [b"flight/%06d" % i for i in range(20_000)]
    with Db.open(url, settings=QUIET) as db:
        for i in range(0, len(keys), 2_000):
            batch = WriteBatch()
            for n, k in enumerate(keys[i : i + 2_000], start=i):
                batch.put(k, b"x" * 100, indexes={"dest": [b"D%02d" % (n % 50)]})
            db.write(batch, durable=False)
        db.flush(memtable=True)
    gone = sorted(random.Random(seed).sample(keys, 300))
    with Db.open(url, settings=QUIET) as db:  # a cold block cache
        before = _ranged_gets(db)
        batch = WriteBatch()
        for k in gone:
            batch.delete(k)
        db.write(batch)
        used = _ranged_gets(db) - before
        # One lookup per key read ~250 distinct blocks, one GET each; grouped, a few spans.
        assert used < 30, (used, seed)
        left = set(db.index_query("dest"))
        assert left == set(keys) - set(gone), seed
        assert all(db.get(k) is None for k in gone[:20])
