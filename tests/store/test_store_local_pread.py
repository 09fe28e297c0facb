"""The local backend's pread fast path for immutable objects."""

from __future__ import annotations

import random
import threading

import pytest

from shaledb.errors import ObjectNotFound
from shaledb.store.obstore_store import LocalObstoreStore


@pytest.fixture
def local(tmp_path: object) -> LocalObstoreStore:
    st = LocalObstoreStore(str(tmp_path), description="test")
    st.MAX_OPEN_FILES = 8  # force evictions
    return st


def test_ranges_of_immutable_objects(local: LocalObstoreStore) -> None:
    data = bytes(range(256)) * 40
    local.put("compacted/a.sst", data, create=True)
    assert local.get_range("compacted/a.sst", 10, 20) == data[10:20]
    assert local.get_range("compacted/a.sst", len(data) - 5, len(data) + 100) == data[-5:]
    assert local.get_range("compacted/a.sst", len(data) + 1, len(data) + 9) == b""
    with pytest.raises(ObjectNotFound):
        local.get_range("compacted/missing.sst", 0, 10)


def test_delete_then_read_raises(local: LocalObstoreStore) -> None:
    local.put("wal/1.sst", b"x" * 100, create=True)
    assert local.get_range("wal/1.sst", 0, 3) == b"xxx"
    local.delete("wal/1.sst")
    with pytest.raises(ObjectNotFound):
        local.get_range("wal/1.sst", 0, 3)


def test_concurrent_reads_with_evictions_return_the_right_bytes(local: LocalObstoreStore) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    objects = {f"compacted/{i:03d}.sst": random.Random(seed + i).randbytes(4096) for i in range(40)}
    for path, data in objects.items():
        local.put(path, data, create=True)
    errors: list[str] = []

    def reader(n: int) -> None:
        rng = random.Random(seed * 31 + n)
        for _ in range(2000):
            path = rng.choice(sorted(objects))
            a = rng.randrange(4096)
            b = a + rng.randrange(1, 200)
            if local.get_range(path, a, b) != objects[path][a:b]:
                errors.append(f"{path}[{a}:{b}] (seed={seed})")

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(local._files) <= local.MAX_OPEN_FILES
    local.close()
