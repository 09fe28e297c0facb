"""A database with the disk cache reads what it reads without one: model test over
writer, reopened writer (warm cache), reader and a damaged cache; metrics count hits."""

from __future__ import annotations

import random
from pathlib import Path

from shaledb import Db, DbReader
from shaledb.settings import CompactorOptions, DbReaderOptions, Settings


def _settings(cache: Path | None) -> Settings:
    return Settings(
        l0_sst_size_bytes=16 << 10,
        max_unflushed_bytes=1 << 20,
        block_size_bytes=512,
        block_cache_bytes=64 << 10,  # small: most reads miss in memory and reach the disk cache
        sst_read_ahead_bytes=8 << 10,
        compactor=CompactorOptions(poll_interval_s=0.05, min_l0_ssts=2, min_merge_runs=2),
        garbage_collector=None,
        disk_cache_dir=None if cache is None else str(cache),
        disk_cache_bytes=32 << 20,
    )


def _check(db: Db | DbReader, model: dict[bytes, bytes], rng: random.Random) -> None:
    keys = sorted(model)
    for k in rng.sample(keys, min(300, len(keys))):
        assert db.get(k) == model[k], k
    assert db.get(b"absent") is None
    for _ in range(10):
        lo = rng.choice(keys)
        got = list(db.scan(lo, limit=50))
        want = [(k, model[k]) for k in keys if k >= lo][:50]
        assert got == want
    assert list(db.scan(reverse=True, limit=20)) == [(k, model[k]) for k in reversed(keys)][:20]


def test_reads_with_the_disk_cache_equal_reads_without(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    cache = tmp_path / "cache"
    model: dict[bytes, bytes] = {}
    with Db.open(url, settings=_settings(cache)) as db:
        for round_ in range(3):
            for _ in range(1000):
                k = b"k%06d" % rng.randrange(4000)
                if rng.random() < 0.1 and k in model:
                    db.delete(k)
                    del model[k]
                else:
                    v = rng.randbytes(rng.randrange(1, 120))
                    db.put(k, v)
                    model[k] = v
            db.flush(memtable=True)
            _check(db, model, random.Random(seed + round_))
        m = db.metrics()
        assert m["disk_cache_misses_total"] > 0
    # Reopened: the cache is warm, SST reads come from disk.
    with Db.open(url, settings=_settings(cache).replace(compactor=None)) as db:
        _check(db, model, random.Random(seed))
        m = db.metrics()
        assert m["disk_cache_hits_total"] > 0
        assert m["disk_cache_corrupt_total"] == 0
    # Without the cache: the same answers.
    with Db.open(url, settings=_settings(None).replace(compactor=None)) as db:
        _check(db, model, random.Random(seed))
        assert "disk_cache_hits_total" not in db.metrics()
    # Every cached part damaged on disk: still the same answers, each damaged part dropped.
    for f in cache.rglob("*.val"):
        raw = bytearray(f.read_bytes())
        raw[rng.randrange(len(raw))] ^= 0xFF
        f.write_bytes(bytes(raw))
    with Db.open(url, settings=_settings(cache).replace(compactor=None)) as db:
        _check(db, model, random.Random(seed))
        assert db.metrics()["disk_cache_corrupt_total"] > 0
    # A reader shares the directory.
    opts = DbReaderOptions(
        background_poll=False,
        establish_checkpoint=False,
        block_cache_bytes=64 << 10,
        disk_cache_dir=str(cache),
    )
    with DbReader.open(url, options=opts) as reader:
        _check(reader, model, random.Random(seed))


def test_a_warm_reopen_reads_ssts_without_a_request(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    cache = tmp_path / "cache"
    settings = _settings(cache).replace(compactor=None, l0_sst_size_bytes=1 << 20)  # one L0 SST
    with Db.open(url, settings=settings) as db:
        for i in range(3000):
            db.put(b"k%06d" % i, b"v%d" % i * 10)
        db.flush(memtable=True)
        for i in range(3000):
            assert db.get(b"k%06d" % i) == b"v%d" % i * 10
    with Db.open(url, settings=settings) as db:
        before = db.metrics()["store_requests_total"]
        for i in range(3000):
            assert db.get(b"k%06d" % i) == b"v%d" % i * 10
        m = db.metrics()
        after = m["store_requests_total"]
        assert after["get_range"] == before["get_range"]
        assert after["get_ranges"] == before["get_ranges"]
        assert m["disk_cache_misses_total"] == 0
        assert m["disk_cache_hits_total"] > 0
