"""A database with the disk cache reads what it reads without one: model test over
writer, reopened writer (warm cache), reader and a damaged cache; metrics count hits."""

from __future__ import annotations

import random
from pathlib import Path

from shaledb import Db, DbReader, admin
from shaledb.settings import CompactorOptions, DbReaderOptions, Settings
from shaledb.testing.seeds import test_seed


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
    seed = test_seed()
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


def _restart_settings(cache: Path, block_cache_bytes: int) -> Settings:
    return _settings(cache).replace(
        compactor=None, l0_sst_size_bytes=1 << 20, block_size_bytes=4096, block_cache_bytes=block_cache_bytes
    )


def _fill(url: str, settings: Settings, rng: random.Random) -> dict[bytes, bytes]:
    """About 10 parts of rows in two SSTs, a few values larger than a part (blocks across parts)."""
    model: dict[bytes, bytes] = {}
    with Db.open(url, settings=settings) as db:
        for half in range(2):
            for i in range(half, 4000, 2):
                k = b"k%06d" % i
                big = rng.random() < 0.002
                v = rng.randbytes(rng.randrange(70_000, 150_000) if big else rng.randrange(1, 200))
                db.put(k, v)
                model[k] = v
            db.flush(memtable=True)
        for k, v in model.items():  # every block read once: the disk cache is warm
            assert db.get(k) == v
    return model


def test_a_restart_reads_whole_parts_once_and_equals_a_dict_model(tmp_path: Path) -> None:
    """On a warm disk cache a restarted handle reads each part once (not once per block)
    and keeps it in memory; every answer equals the model, with no request to the store.
    A block cache too small to keep a part gives the same answers."""
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    cache = tmp_path / "cache"
    model = _fill(url, _restart_settings(cache, 64 << 20), rng)
    parts = len(list(cache.rglob("*.val")))
    keys = list(model)
    for block_cache_bytes in (64 << 20, 16 << 10):
        rng.shuffle(keys)
        with Db.open(url, settings=_restart_settings(cache, block_cache_bytes)) as db:
            before = db.metrics()["store_requests_total"]
            opened = db.metrics()["disk_cache_hits_total"]  # the SSTs' tails
            for k in keys:
                assert db.get(k) == model[k], k
            assert db.get(b"k999999") is None
            m = db.metrics()
            after = m["store_requests_total"]
            assert after["get_range"] == before["get_range"]
            assert after["get_ranges"] == before["get_ranges"]
            assert m["disk_cache_misses_total"] == 0
            assert m["disk_cache_corrupt_total"] == 0
            if block_cache_bytes > 1 << 20:
                # One read per part, then its blocks load from memory.
                assert 0 < m["disk_cache_hits_total"] - opened <= parts
                blocks = [k for k in db.cache.entries if len(k) == 2 and isinstance(k[1], int)]
                assert len(blocks) > 2 * parts
            else:
                assert m["disk_cache_hits_total"] - opened > parts


def test_a_damaged_part_is_caught_on_disk_and_in_memory(tmp_path: Path) -> None:
    """A part damaged on disk away from the block asked for is dropped and refetched
    when its whole part is read; a part damaged in memory fails its blocks' checksums
    and each block is read again. Every answer still equals the model."""
    seed = test_seed()
    rng = random.Random(seed)
    url = str(tmp_path / "db")
    cache = tmp_path / "cache"
    settings = _restart_settings(cache, 64 << 20)
    model = _fill(url, settings, rng)
    files = sorted(cache.rglob("*.val"))
    for f in files:  # one byte flipped in the last 4 KiB of every part on disk
        raw = bytearray(f.read_bytes())
        raw[len(raw) - 1 - rng.randrange(min(4096, len(raw) // 2))] ^= 0xFF
        f.write_bytes(bytes(raw))
    with Db.open(url, settings=settings) as db:
        before = db.metrics()["store_requests_total"]["get_range"]
        for k in sorted(model)[:3]:  # blocks at the start of the first part
            assert db.get(k) == model[k]
        m = db.metrics()
        assert m["disk_cache_corrupt_total"] >= 1
        assert m["store_requests_total"]["get_range"] > before  # refetched from the store
        for k, v in model.items():
            assert db.get(k) == v
        assert db.metrics()["disk_cache_corrupt_total"] == len(files)
    with Db.open(url, settings=settings) as db:
        k0 = sorted(model)[0]
        assert db.get(k0) == model[k0]
        held = [k for k in db.cache.entries if len(k) == 3 and k[1] == "part"]
        assert held
        for k in held:  # damage the parts in memory; drop the blocks decoded from them
            data, n = db.cache.entries[k]
            raw = bytearray(data)
            raw[rng.randrange(len(raw))] ^= 0x01
            db.cache.put(k, bytes(raw), n)
        db.cache.discard_where(lambda k: isinstance(k, tuple) and len(k) == 2 and isinstance(k[1], int))
        for k, v in model.items():
            assert db.get(k) == v, k


def _cached_roots(cache: Path) -> set[str]:
    """The store roots (URLs) whose SST parts the cache directory holds."""
    import diskcache

    with diskcache.Cache(str(cache)) as dc:
        return {k.split("\n")[0] for k in dc.iterkeys() if "\ncompacted/" in k}


def test_a_clone_reads_its_parents_ssts_through_the_disk_cache(tmp_path: Path) -> None:
    """A new clone's rows all live in its parent's SSTs; with a disk cache they are read
    through it like the clone's own (keyed under the parent's URL), for a writer and a
    reader of the clone, and the answers equal the model."""
    seed = test_seed()
    rng = random.Random(seed)
    parent, clone = str(tmp_path / "parent"), str(tmp_path / "clone")
    cache = tmp_path / "cache"
    model: dict[bytes, bytes] = {}
    with Db.open(parent, settings=_settings(None).replace(compactor=None, l0_sst_size_bytes=256 << 10)) as db:
        for _ in range(2000):
            k = b"k%06d" % rng.randrange(3000)
            model[k] = rng.randbytes(rng.randrange(1, 120))
            db.put(k, model[k])
        db.flush(memtable=True)
    cp = admin.create_checkpoint(parent)
    settings = _settings(cache).replace(compactor=None)
    with Db.open_from_checkpoint(clone, parent, parent_checkpoint=cp.id, settings=settings) as db:
        _check(db, model, random.Random(seed))
    roots = _cached_roots(cache)
    assert any(r.endswith("parent") for r in roots), roots
    with Db.open(clone, settings=settings) as db:
        _check(db, model, random.Random(seed + 1))
    opts = DbReaderOptions(background_poll=False, establish_checkpoint=False, disk_cache_dir=str(cache))
    with DbReader.open(clone, options=opts) as reader:
        _check(reader, model, random.Random(seed + 2))
