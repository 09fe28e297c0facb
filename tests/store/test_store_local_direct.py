"""The local backend's direct system calls: pread of immutable objects, create-if-absent puts."""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from shaledb.errors import AlreadyExists, InvalidPathError, ObjectNotFound
from shaledb.store.obstore_store import LocalObstoreStore
from shaledb.testing.seeds import test_seed


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
    seed = test_seed()
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

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(reader, range(4)))  # a reader's exception is raised here
    assert errors == []
    assert len(local._files) <= local.MAX_OPEN_FILES
    local.close()


def test_create_stages_then_links_and_leaves_nothing_behind(local: LocalObstoreStore, tmp_path: Path) -> None:
    local.put("wal/00000000000000000001.sst", b"first", create=True)
    with pytest.raises(AlreadyExists):
        local.put("wal/00000000000000000001.sst", b"second", create=True)
    assert local.get("wal/00000000000000000001.sst") == b"first"
    assert sorted(os.listdir(tmp_path / "wal")) == ["00000000000000000001.sst"]
    local.put("deep/new/dir/obj", memoryview(b"abc" * 100_000), create=True)  # parents made, long write
    assert local.get("deep/new/dir/obj") == b"abc" * 100_000
    local.put("wal/empty", b"", create=True)
    assert local.get("wal/empty") == b""


def test_a_crashed_writers_stage_neither_blocks_nor_lists(local: LocalObstoreStore, tmp_path: Path) -> None:
    (tmp_path / "wal").mkdir()
    (tmp_path / "wal" / "7.sst#1").write_bytes(b"half written")
    local.put("wal/7.sst", b"whole", create=True)
    assert local.get("wal/7.sst") == b"whole"
    assert [m.path for m in local.list("wal/")] == ["wal/7.sst"]


def test_create_refuses_links_that_leave_the_root(local: LocalObstoreStore, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "target").write_bytes(b"keep")
    local.put("wal/1.sst", b"x", create=True)  # caches the wal directory
    (tmp_path / "evil").symlink_to(outside)
    with pytest.raises(InvalidPathError, match="symlink"):
        local.put("evil/planted", b"x", create=True)
    (tmp_path / "wal" / "2.sst").symlink_to(outside / "target")
    with pytest.raises(AlreadyExists):  # link() does not follow a link at the name
        local.put("wal/2.sst", b"x", create=True)
    with pytest.raises(InvalidPathError, match="symlink"):
        local.get_range("wal/2.sst", 0, 4)
    with pytest.raises(InvalidPathError, match="symlink"):
        local.get("wal/2.sst")
    assert sorted(os.listdir(outside)) == ["target"]
    assert (outside / "target").read_bytes() == b"keep"


def test_sixteen_threads_creating_one_object_have_one_winner(local: LocalObstoreStore) -> None:
    for round_ in range(20):
        path = f"manifest/{round_:020d}.manifest"
        wins: list[int] = []
        barrier = threading.Barrier(16)

        def racer(
            n: int, path: str = path, wins: list[int] = wins, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            try:
                local.put(path, n.to_bytes(2, "big") * 1000, create=True)
                wins.append(n)
            except AlreadyExists:
                pass

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(racer, range(16)))  # any error but AlreadyExists is raised here
        assert len(wins) == 1
        assert local.get(path) == wins[0].to_bytes(2, "big") * 1000
