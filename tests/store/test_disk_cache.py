"""The host-local disk cache (shaledb.store.disk_cache): reads equal the store's, damaged
entries are dropped and refetched, the bound holds, and real processes share it, even
one killed with SIGKILL while it writes."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shaledb.errors import InvalidArgument, NotSupported
from shaledb.settings import DbReaderOptions, Settings
from shaledb.store import InstrumentedStore, ObjectStore, open_store
from shaledb.store.disk_cache import PART_BYTES, DiskCachedStore, acquire, release
from shaledb.testing.seeds import test_seed

WORKER = str(Path(__file__).with_name("disk_cache_worker.py"))


def _objects(store: ObjectStore, rng: random.Random, n: int, size: int) -> dict[str, bytes]:
    out = {}
    for i in range(n):
        path = f"compacted/{i:026d}.sst"
        data = rng.randbytes(size + rng.randrange(PART_BYTES))
        store.put(path, data)
        out[path] = data
    return out


def _cached(
    store: ObjectStore, cache_dir: Path, size: int = 64 << 20
) -> tuple[DiskCachedStore, InstrumentedStore]:
    counted = InstrumentedStore(store)
    return DiskCachedStore(counted, acquire(str(cache_dir), size)), counted


def _gets(counted: InstrumentedStore) -> int:
    r = counted.snapshot().requests
    return r["get_range"] + r["get_ranges"] + r["get"]


def test_reads_equal_the_store_and_a_second_pass_makes_no_request(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    objs = _objects(local_store, rng, 3, 3 * PART_BYTES)
    local_store.put("wal/00000000000000000001.sst", b"w" * 1000)
    cached, counted = _cached(local_store, tmp_path / "cache")
    try:
        queries = []
        for _ in range(300):
            path = rng.choice(sorted(objs))
            s = rng.randrange(len(objs[path]))  # the engine reads inside objects
            e = s + rng.choice([1, 7, PART_BYTES, 2 * PART_BYTES + 3, 10 * PART_BYTES])
            queries.append((path, s, e))
        for path, s, e in queries:
            assert cached.get_range(path, s, e) == objs[path][s:e], (path, s, e)
        spans = [(5, 9), (PART_BYTES - 1, PART_BYTES + 1), (3 * PART_BYTES, 4 * PART_BYTES + 9)]
        for path, data in objs.items():
            assert cached.get_ranges(path, spans) == [data[s:e] for s, e in spans]
        before = _gets(counted)
        for path, s, e in queries:
            assert cached.get_range(path, s, e) == objs[path][s:e]
        assert _gets(counted) == before  # everything came from disk
        assert cached.hits > 0
        # WAL objects are never cached: each read goes to the store.
        for _ in range(2):
            assert cached.get_range("wal/00000000000000000001.sst", 0, 10) == b"w" * 10
        assert _gets(counted) == before + 2
    finally:
        cached.close()


def test_a_damaged_entry_is_dropped_and_refetched_never_served(
    local_store: ObjectStore, tmp_path: Path
) -> None:
    objs = _objects(local_store, random.Random(7), 2, 4 * PART_BYTES)
    cache_dir = tmp_path / "cache"
    cached, counted = _cached(local_store, cache_dir)
    try:
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data
        files = sorted(cache_dir.rglob("*.val"))
        assert len(files) >= 8
        for f in files:  # flip one byte in the middle of every stored part, on disk
            raw = bytearray(f.read_bytes())
            raw[len(raw) // 2] ^= 0x5A
            f.write_bytes(bytes(raw))
        before = _gets(counted)
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data  # the store's bytes, not the flipped ones
        assert cached.cache.corrupt == len(files)
        assert _gets(counted) > before
        # The damaged entries were replaced by good ones: a third pass is all hits.
        before = _gets(counted)
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data
        assert _gets(counted) == before
        assert cached.cache.corrupt == len(files)
        # A part file swapped for another part's file fails the check too (the key is in the CRC).
        a, b = sorted(cache_dir.rglob("*.val"))[:2]
        a.write_bytes(b.read_bytes())
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data
        assert cached.cache.corrupt == len(files) + 1
    finally:
        cached.close()


def test_a_truncated_or_missing_part_file_is_a_miss(local_store: ObjectStore, tmp_path: Path) -> None:
    objs = _objects(local_store, random.Random(8), 1, 2 * PART_BYTES)
    cache_dir = tmp_path / "cache"
    cached, _ = _cached(local_store, cache_dir)
    try:
        ((path, data),) = objs.items()
        assert cached.get_range(path, 0, len(data)) == data
        f1, f2 = sorted(cache_dir.rglob("*.val"))[:2]
        f1.write_bytes(f1.read_bytes()[:100])
        f2.unlink()
        assert cached.get_range(path, 0, len(data)) == data
        assert cached.cache.corrupt == 1
    finally:
        cached.close()


def test_whole_part_reads_check_every_piece(local_store: ObjectStore, tmp_path: Path) -> None:
    """A read of one whole part (what a reader keeps in memory) checks all its pieces: a
    byte flipped anywhere in it, or a truncated file, is a dropped part and a GET, never served."""
    seed = test_seed()
    rng = random.Random(seed)
    ((path, data),) = _objects(local_store, rng, 1, 3 * PART_BYTES + 100).items()
    cache_dir = tmp_path / "cache"
    cached, counted = _cached(local_store, cache_dir)
    parts = [(p * PART_BYTES, min(len(data), (p + 1) * PART_BYTES)) for p in range(4)]
    try:
        for s, e in parts:  # misses: each fetched and stored
            assert cached.get_range(path, s, e) == data[s:e]
        assert cached.misses == 4
        before = _gets(counted)
        for s, e in parts:
            assert cached.get_range(path, s, e) == data[s:e]
            assert cached.get_range(path, s + 5, e - 3) == data[s + 5 : e - 3]
        assert _gets(counted) == before
        assert cached.hits == 8
        files = sorted(cache_dir.rglob("*.val"))
        assert len(files) == 4
        for f in files:  # one byte flipped at a random place of each part (header or data)
            raw = bytearray(f.read_bytes())
            raw[rng.randrange(len(raw))] ^= 0x10
            f.write_bytes(bytes(raw))
        for s, e in parts:
            assert cached.get_range(path, s, e) == data[s:e]
        assert cached.cache.corrupt == 4
        assert _gets(counted) == before + 4
        f = sorted(cache_dir.rglob("*.val"))[0]
        f.write_bytes(f.read_bytes()[:-1])  # one byte short: the piece count no longer fits
        for s, e in parts:
            assert cached.get_range(path, s, e) == data[s:e]
        assert cached.cache.corrupt == 5
        assert _gets(counted) == before + 5
    finally:
        cached.close()


def test_a_full_cache_evicts_within_its_bound(local_store: ObjectStore, tmp_path: Path) -> None:
    bound = 2 << 20
    objs = _objects(local_store, random.Random(9), 12, 8 * PART_BYTES)  # ~6.5 MiB: over 3x the bound
    cache_dir = tmp_path / "cache"
    cached, counted = _cached(local_store, cache_dir, bound)
    try:
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data
            on_disk = sum(f.stat().st_size for f in cache_dir.rglob("*.val"))
            assert on_disk <= bound + PART_BYTES, on_disk
        assert cached.cache.volume_bytes() <= bound + PART_BYTES
        assert cached.cache.errors == 0
        # The newest object is still cached, the oldest is not.
        paths = sorted(objs)
        before = _gets(counted)
        assert cached.get_range(paths[-1], 0, 100) == objs[paths[-1]][:100]
        assert _gets(counted) == before
        assert cached.get_range(paths[0], 0, 100) == objs[paths[0]][:100]
        assert _gets(counted) == before + 1
    finally:
        cached.close()


def test_deleting_an_object_drops_its_parts(local_store: ObjectStore, tmp_path: Path) -> None:
    objs = _objects(local_store, random.Random(10), 3, 2 * PART_BYTES)
    cache_dir = tmp_path / "cache"
    cached, _ = _cached(local_store, cache_dir)
    try:
        for path, data in objs.items():
            assert cached.get_range(path, 0, len(data)) == data
        n = len(list(cache_dir.rglob("*.val")))
        first, *rest = sorted(objs)
        cached.delete(first)
        cached.delete_many(rest[:1])
        left = len(list(cache_dir.rglob("*.val")))
        assert left == n - 2 * 3  # three parts each
        assert cached.cache.get(cached._key(first, 0)) is None
    finally:
        cached.close()


def test_two_processes_share_one_cache_dir_concurrently(tmp_path: Path) -> None:
    store_dir = tmp_path / "db"
    store = open_store(str(store_dir))
    _objects(store, random.Random(11), 16, 5 * PART_BYTES)  # ~6 MiB over a 2 MiB cache: evictions race reads
    cache_dir = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, WORKER, str(store_dir), str(cache_dir), str(2 << 20), "3", str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, (out, err)
        hits, misses, corrupt, _errors = map(int, out.split("\n")[1].split())
        assert hits > 0 and misses > 0, out
        assert corrupt == 0, out
    # Each process's reads found parts the other stored (or its own): together they
    # read far more than they fetched.


def test_kill_9_while_writing_leaves_a_usable_cache(tmp_path: Path) -> None:
    store_dir = tmp_path / "db"
    store = open_store(str(store_dir))
    objs = _objects(store, random.Random(12), 24, 6 * PART_BYTES)
    cache_dir = tmp_path / "cache"
    rng = random.Random(test_seed())
    for round_ in range(2):
        p = subprocess.Popen(
            [sys.executable, WORKER, str(store_dir), str(cache_dir), str(4 << 20), "0", str(round_)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.6))
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
        assert p.returncode == -signal.SIGKILL
    cached, _ = _cached(store, cache_dir, 4 << 20)
    try:
        for _ in range(2):
            for path, data in objs.items():
                assert cached.get_range(path, 0, len(data)) == data
        assert cached.hits > 0
        assert cached.cache.errors == 0
    finally:
        cached.close()


def test_options_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="disk_cache_bytes"):
        Settings(disk_cache_bytes=1000)
    with pytest.raises(InvalidArgument, match="disk_cache_bytes"):
        DbReaderOptions(disk_cache_bytes=float("nan"))  # type: ignore[arg-type]
    for bad in ("", "a\0b", 5, b"dir"):
        with pytest.raises(InvalidArgument, match="disk_cache_dir"):
            Settings(disk_cache_dir=bad)  # type: ignore[arg-type]
    assert Settings(disk_cache_dir=Path("/x")).disk_cache_dir == "/x"  # type: ignore[arg-type]
    assert Settings().disk_cache_dir is None  # off by default


def test_a_missing_diskcache_package_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "diskcache", None)
    with pytest.raises(NotSupported, match=r"shaledb\[cache\]"):
        acquire(str(tmp_path / "c"), 1 << 20)


def test_an_unusable_directory_is_a_typed_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(InvalidArgument, match="disk_cache_dir"):
        acquire(str(f / "sub"), 1 << 20)


def test_one_process_shares_one_cache_per_directory(tmp_path: Path) -> None:
    a = acquire(str(tmp_path / "c"), 2 << 20)
    b = acquire(str(tmp_path / "c" / ".." / "c"), 3 << 20)
    assert a is b and a.size_bytes == 3 << 20
    release(a)
    release(b)
    c = acquire(str(tmp_path / "c"), 2 << 20)
    assert c is not a
    release(c)
