"""The local backend's direct system calls: pread of immutable objects, create-if-absent puts."""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore
import pytest

from shaledb.errors import AlreadyExists, InvalidArgument, InvalidPathError, ObjectNotFound
from shaledb.store.local_store import LocalObstoreStore
from shaledb.store.obstore_store import ObstoreStore
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


def test_several_ranges_of_immutable_objects(local: LocalObstoreStore) -> None:
    data = bytes(range(256)) * 40
    local.put("tmp/stage/01J/run.arrows", data)
    ranges = [(7, 9), (0, 2), (4, 4), (len(data) - 3, len(data) + 50), (len(data) + 1, len(data) + 9)]
    assert local.get_ranges("tmp/stage/01J/run.arrows", ranges) == [data[s:e] for s, e in ranges]
    assert local.get_ranges("tmp/stage/01J/run.arrows", []) == []
    with pytest.raises(ObjectNotFound):
        local.get_ranges("tmp/stage/01J/missing.arrows", [(0, 10)])
    with pytest.raises(InvalidArgument):
        local.get_ranges("tmp/stage/01J/run.arrows", [(-1, 3)])


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


class _Advice:
    """Records ``posix_fadvise`` calls and passes them on (the real call still runs)."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, fd: int, offset: int, length: int, advice: int) -> None:
        self.calls.append((os.fstat(fd).st_size, offset, length))
        self.real(fd, offset, length, advice)  # type: ignore[operator]


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise here: writes stay cached")
def test_large_creates_leave_the_page_cache_a_mib_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shaledb.store import local_store as obstore_store

    advice = _Advice(os.posix_fadvise)
    monkeypatch.setattr(obstore_store, "_fadvise", advice)
    mib = LocalObstoreStore.DROP_CACHE_PIECE_BYTES
    st = LocalObstoreStore(str(tmp_path), description="test", drop_cache_min_bytes=2 * mib)
    rng = random.Random(test_seed())
    big = rng.randbytes(3 * mib + 12345)
    small = rng.randbytes(2 * mib - 1)
    st.put("compacted/big.sst", big, create=True)
    # After each MiB is written the whole file is advised: the file has grown a MiB each time.
    assert advice.calls == [(mib, 0, 0), (2 * mib, 0, 0), (3 * mib, 0, 0), (len(big), 0, 0)]
    del advice.calls[:]
    st.put("compacted/small.sst", small, create=True)
    st.put("manifest/big", big)  # overwrites stay cached
    assert advice.calls == []
    assert st.get("compacted/big.sst") == big and st.get("compacted/small.sst") == small
    assert st.get_range("compacted/big.sst", mib - 3, mib + 3) == big[mib - 3 : mib + 3]
    assert sorted(os.listdir(tmp_path / "compacted")) == ["big.sst", "small.sst"]  # no stage left
    with pytest.raises(AlreadyExists):
        st.put("compacted/big.sst", small, create=True)
    assert st.get("compacted/big.sst") == big
    # The default store keeps what it writes in the cache.
    plain = LocalObstoreStore(str(tmp_path / "plain"), description="test")
    plain.put("compacted/big.sst", big, create=True)
    assert advice.calls == [] and plain.get("compacted/big.sst") == big


def test_drop_cache_threshold_must_not_be_negative(tmp_path: Path) -> None:
    from shaledb.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="drop_cache_min_bytes must be >= 0"):
        LocalObstoreStore(str(tmp_path), description="test", drop_cache_min_bytes=-1)


def test_a_file_system_refusing_the_advice_still_gets_every_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shaledb.store import local_store as obstore_store

    calls: list[int] = []

    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        calls.append(os.fstat(fd).st_size)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(obstore_store, "_fadvise", refuse)
    mib = LocalObstoreStore.DROP_CACHE_PIECE_BYTES
    st = LocalObstoreStore(str(tmp_path), description="test", drop_cache_min_bytes=mib)
    big = random.Random(test_seed()).randbytes(3 * mib + 7)
    st.put("compacted/a.sst", big, create=True)
    assert calls == [mib]  # asked once, then the rest is written without advice
    assert st.get("compacted/a.sst") == big


def test_deleting_a_stage_s_runs_removes_its_empty_folder(tmp_path: Path) -> None:
    """A directory is not an object: nothing removed a staged exchange's folder once its
    runs were deleted, so a stream into a local directory left one empty folder per
    micro-batch under tmp/stage/."""
    from shaledb.store import open_store

    st = open_store(f"file://{tmp_path}/db")
    a = "tmp/stage/01ARZ3NDEKTSV4RRFFQ69G5FAV"
    b = "tmp/stage/01ARZ3NDEKTSV4RRFFQ69G5FAW"
    for run in (f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA1.arrows", f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA2.arrows"):
        st.put(run, b"run")
    st.put(f"{b}/01ARZ3NDEKTSV4RRFFQ69G5FA3.arrows", b"run")
    st.put(f"{b}/01ARZ3NDEKTSV4RRFFQ69G5FA4.arrows", b"run")
    st.delete_many([f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA1.arrows", f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA2.arrows"])
    st.delete_many([f"{b}/01ARZ3NDEKTSV4RRFFQ69G5FA3.arrows"])
    assert not (tmp_path / "db" / a).exists()
    assert (tmp_path / "db" / b).is_dir()  # still holds a run
    st.put(f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA5.arrows", b"again")  # the folder comes back on demand
    assert st.get(f"{a}/01ARZ3NDEKTSV4RRFFQ69G5FA5.arrows") == b"again"


def _odd_tree(root: Path) -> None:
    """Names a listing must order and filter as obstore's does: stages, '#' names that are
    not stages, a folder that is a prefix of a file's name, links to a file and a folder
    inside, a broken link, an empty folder, spaces, '%', non-ASCII."""
    for name in [
        "a.b", "a!", "a/x", "a/y/z", "ab", "w#1", "w#abc", "w#", "w#12#3", "#7", "sp ace", "pc%20t",
        "uni\u00e9", "st*ar", "m/#2", "m/n/o#x", "wal/00000000000000000001.wal", "wal/02.wal",
    ]:  # fmt: skip
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(name.encode() * 3)
    (root / "filelink").symlink_to(root / "a" / "x")
    (root / "dirlink").symlink_to(root / "a")
    (root / "broken").symlink_to(root / "nowhere")
    (root / "empty").mkdir()


def _obstore_view(root: Path) -> ObstoreStore:
    """The same directory through obstore's own local store (the generic adapter)."""
    return ObstoreStore(obstore.store.LocalStore(prefix=str(root)), description="obstore", sort_listings=True)


def test_listings_and_metadata_are_obstore_s(tmp_path: Path) -> None:
    """The local store lists and stats with os calls (obstore's would hang in a forked
    child); paths, order, sizes, times and e-tags are what obstore gives for the same files."""
    root = tmp_path / "db"
    root.mkdir()
    _odd_tree(root)
    ours, theirs = LocalObstoreStore(str(root), description="test"), _obstore_view(root)
    prefixes = ["", "a", "a/", "a/y", "w", "w#", "m/", "wal/", "wal/0000", "dirlink/", "nope", "a/x", "a/x/"]
    seed = test_seed()
    rng = random.Random(seed)
    names = [m.path for m in ours.list("")]
    for prefix in prefixes:
        for offset in [None, prefix.rstrip("/"), *rng.sample(names, 4), "a", "m/n"]:
            got, want = list(ours.list(prefix, offset=offset)), list(theirs.list(prefix, offset=offset))
            assert got == want, (seed, prefix, offset)
    assert "w#1" not in names and "w#12#3" in names and "dirlink/y/z" in names and "broken" not in names
    for name in names:
        assert ours.head(name) == theirs.head(name)
    # An offset is a string to be greater than (obstore's took "a/" for "a", listing "a!" after it).
    assert [m.path for m in ours.list("a", offset="a/")] == ["a/x", "a/y/z", "ab"]


def test_writes_deletes_and_copies_match_obstore_s(tmp_path: Path) -> None:
    """Puts replace atomically, copies are hard links (as obstore's), and the errors of
    missing objects, lost creates and ranges past the end are the ones obstore's gave."""
    root = tmp_path / "db"
    root.mkdir()
    ours, theirs = LocalObstoreStore(str(root), description="test"), _obstore_view(root)
    ours.put("m/a", b"one")
    before = os.stat(root / "m" / "a").st_ino
    ours.put("m/a", b"two!")
    assert os.stat(root / "m" / "a").st_ino != before  # a new file renamed into place
    ours.copy("m/a", "deep/er/b")
    assert os.stat(root / "deep" / "er" / "b").st_ino == os.stat(root / "m" / "a").st_ino
    ours.copy("m/a", "deep/er/b")  # over an existing object
    ours.copy("m/a", "c", create=True)
    for st in (ours, theirs):
        with pytest.raises(AlreadyExists):
            st.copy("m/a", "c", create=True)
        with pytest.raises(AlreadyExists):
            st.put("c", b"x", create=True)
        with pytest.raises(ObjectNotFound):
            st.copy("m/none", "d")
        with pytest.raises(ObjectNotFound):
            st.get_range("m/none", 0, 2)
        assert st.get_range("m/a", 2, 99) == b"o!"
        assert st.get_range("m/a", 4, 9) == b""
        assert st.get_ranges("m/a", [(0, 1), (9, 12), (3, 9)]) == [b"t", b"", b"!"]
    assert list(ours.list("")) == list(theirs.list(""))
    assert sorted(os.listdir(root)) == ["c", "deep", "m"]  # no stage left behind
    with pytest.raises(ObjectNotFound):
        ours.copy("deep", "e")  # a folder is no object
    ours.delete("m/none")
    ours.delete("deep")  # a folder: not an object, so not there to delete
    ours.delete_many(["c", "m/none", "deep/er/b"])
    assert [m.path for m in ours.list("")] == ["m/a"] == [m.path for m in theirs.list("")]


def test_a_listing_leaves_out_a_link_that_loops_and_names_that_are_not_utf8(tmp_path: Path) -> None:
    """obstore's listing failed on both (an outage retried forever, an invalid path); the
    objects beside them are listed."""
    root = tmp_path / "db"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "ok").write_bytes(b"1")
    (root / "sub" / "loop").symlink_to(root)
    os.close(os.open(os.path.join(os.fsencode(root), b"bad\xff"), os.O_CREAT | os.O_WRONLY))
    local = LocalObstoreStore(str(root), description="test")
    assert [m.path for m in local.list("")] == ["sub/ok"]


def test_a_link_that_cannot_be_followed_is_left_out_once_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A link that never resolves (``x -> x``, ``a -> b -> a``) made every listing of its
    folder fail: InvalidPathError "cannot list '' ...: it loops through symbolic links",
    naming neither the link nor the objects beside it. It is no shaledb object, so a
    listing leaves it out and warns once per link; the real objects are all listed."""
    root = tmp_path / "db"
    (root / "wal").mkdir(parents=True)
    (root / "wal" / "00000000000000000001.sst").write_bytes(b"w")
    (root / "notes").mkdir()
    (root / "self").symlink_to(root / "self")
    (root / "notes" / "a").symlink_to(root / "notes" / "b")
    (root / "notes" / "b").symlink_to(root / "notes" / "a")
    (root / "notes" / "ok").write_bytes(b"1")
    local = LocalObstoreStore(str(root), description="test")
    with caplog.at_level("WARNING", logger="shaledb"):
        for _ in range(2):
            assert [m.path for m in local.list("")] == ["notes/ok", "wal/00000000000000000001.sst"]
            assert [m.path for m in local.list("notes/")] == ["notes/ok"]
    warned = [r.getMessage() for r in caplog.records if "loops" in r.getMessage()]
    assert sorted(w.split("'")[1] for w in warned) == ["notes/a", "notes/b", "self"], warned


@pytest.mark.parametrize("name", ["wal/00000000000000000002.sst", "manifest", "wal/x", "other/compacted/y"])
def test_a_link_that_loops_where_an_object_may_be_is_an_error_naming_it(tmp_path: Path, name: str) -> None:
    """Leaving it out could hide an object from the engine (the latest WAL or manifest id):
    a typed error that names the link, not the prefix listed."""
    root = tmp_path / "db"
    (root / "wal").mkdir(parents=True)
    (root / "wal" / "00000000000000000001.sst").write_bytes(b"w")
    link = root / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(link)
    local = LocalObstoreStore(str(root), description="test")
    for prefix in ("", name.rpartition("/")[0] + "/" if "/" in name else ""):
        with pytest.raises(InvalidPathError, match=f"'{name}' is a symbolic link that loops"):
            list(local.list(prefix))
