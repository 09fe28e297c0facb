"""The conformance suite every :class:`~shaledb.store.base.ObjectStore` must pass.

The engine's protocols assume exactly these semantics (sorted listings with
string prefixes and strict offsets, create-if-absent with one winner, ranges
clipped at the end, idempotent deletes), and backends disagree on several of
them out of the box. So each backend and each wrapper stack runs the same
tests: subclass :class:`StoreTests` and override the ``store`` fixture to
return a fresh, empty store::

    class TestMemory(StoreTests):
        @pytest.fixture
        def store(self) -> ObjectStore:
            return open_store(f"memory://{uuid.uuid4().hex}")

Requires pytest (the ``test`` extra).
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from ..errors import AlreadyExists, InvalidArgument, InvalidPathError, ObjectNotFound
from ..format.out_buffers import OutBuffers
from ..store.base import ObjectStore

BAD_PATHS: tuple[str, ...] = (
    "",
    "/abs",
    "a//b",
    "a/",
    "../x",
    "a/../b",
    "./a",
    "a/.",
    "%2e%2e/x",
    "a/%2E%2e/b",
    "a/%2e",
    "a\\b",
    "a\x00b",
    "a\nb",
    "a/%2fb",
    "x" * 1100,
)
"""Object paths every store must refuse with InvalidPathError."""


def check_reused_buffer_puts(store: ObjectStore, seed: int = 7) -> OutBuffers:
    """Put objects built in reused buffers (``format.out_buffers``: the WAL's and the
    L0 flush's), the way the engine does (a view of the buffer; the buffer given back
    once the put returned, then the next object written over it), and read every
    one back: a store that kept a reference to the bytes it was given must still
    return them as they were put. Returns the pool (its ``reused``/``dropped``
    counts say whether this store let the buffer be reused)."""
    rng = random.Random(seed)
    print(f"check_reused_buffer_puts seed={seed}")
    bufs = OutBuffers(1)
    put: dict[str, bytes] = {}
    for i, size in enumerate((300_000, 200_000, 300_000, 5, 450_000)):
        data = rng.randbytes(size)
        out = bufs.take()
        out.seek(0)
        out.write(data)
        whole = out.getbuffer()
        view = whole[: len(data)]
        whole.release()
        path = f"reuse/{i}.sst"
        store.put(path, view, create=i % 2 == 0)
        put[path] = data
        bufs.give(out, view)
    for path, data in put.items():
        assert store.get(path) == data, f"{path} changed after its buffer was reused"
    return bufs


class StoreTests:
    """Conformance tests; subclasses provide the ``store`` fixture.

    Class attributes scale the expensive tests: ``race_threads`` writers race
    on each of ``race_keys`` keys; ``many_objects`` objects are listed (over
    1,000 so S3's pagination is crossed).
    """

    race_threads = 16
    race_keys = 3
    many_objects = 1_050
    put_threads = 8

    @pytest.fixture
    def store(self) -> ObjectStore:
        raise NotImplementedError("override the 'store' fixture to return a fresh, empty store")

    # -- put / get -------------------------------------------------------------------------

    def test_put_get_round_trip(self, store: ObjectStore) -> None:
        store.put("a/b/c.sst", b"hello")
        assert store.get("a/b/c.sst") == b"hello"
        store.put("mv", memoryview(b"view"))
        store.put("ba", bytearray(b"array"))
        assert store.get("mv") == b"view"
        assert store.get("ba") == b"array"
        assert isinstance(store.get("mv"), bytes)

    def test_put_from_a_reused_buffer(self, store: ObjectStore) -> None:
        check_reused_buffer_puts(store)

    def test_overwrite(self, store: ObjectStore) -> None:
        store.put("k", b"one")
        store.put("k", b"two, longer")
        assert store.get("k") == b"two, longer"
        store.put("k", b"3")
        assert store.get("k") == b"3"
        assert store.head("k").size == 1

    def test_binary_and_empty_payloads(self, store: ObjectStore) -> None:
        payload = bytes(range(256)) * 3
        store.put("bin", payload)
        assert store.get("bin") == payload
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.head("empty").size == 0
        assert store.get_range("empty", 0, 10) == b""
        store.put("empty-create", b"", create=True)
        assert store.get("empty-create") == b""

    def test_get_missing(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFound) as info:
            store.get("missing/object")
        assert info.value.path == "missing/object"
        with pytest.raises(ObjectNotFound):
            store.head("missing")
        with pytest.raises(ObjectNotFound):
            store.get_range("missing", 0, 10)
        with pytest.raises(ObjectNotFound):
            store.get_ranges("missing", [(0, 1), (2, 3)])
        with pytest.raises(ObjectNotFound):
            store.attributes("missing")

    # -- create-if-absent ------------------------------------------------------------------

    def test_create_if_absent(self, store: ObjectStore) -> None:
        assert store.supports_conditional_put
        store.put("m/1", b"first", create=True)
        with pytest.raises(AlreadyExists) as info:
            store.put("m/1", b"second", create=True)
        assert info.value.path == "m/1"
        assert store.get("m/1") == b"first"

    def test_create_over_plain_put_fails(self, store: ObjectStore) -> None:
        store.put("p", b"plain")
        with pytest.raises(AlreadyExists):
            store.put("p", b"created", create=True)
        assert store.get("p") == b"plain"

    def test_create_after_delete(self, store: ObjectStore) -> None:
        store.put("d", b"1", create=True)
        store.delete("d")
        store.put("d", b"2", create=True)
        assert store.get("d") == b"2"

    def test_create_race_has_one_winner(self, store: ObjectStore) -> None:
        for key in range(self.race_keys):
            path = f"race/{key:04d}"
            winners = self._race(store, path)
            assert len(winners) == 1, f"{path}: winners {winners}"
            assert store.get(path) == f"writer-{winners[0]}".encode()

    def _race(self, store: ObjectStore, path: str) -> list[int]:
        """Release ``race_threads`` creators of ``path`` at once; the winners' ids."""
        barrier = threading.Barrier(self.race_threads)

        def racer(i: int) -> bool:
            barrier.wait()
            try:
                store.put(path, f"writer-{i}".encode(), create=True)
            except AlreadyExists:
                return False
            return True

        with ThreadPoolExecutor(self.race_threads) as pool:
            won = list(pool.map(racer, range(self.race_threads)))  # re-raises any other error
        return [i for i, w in enumerate(won) if w]

    # -- ranges ----------------------------------------------------------------------------

    def test_get_range(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        assert store.get_range("r", 0, 3) == b"012"
        assert store.get_range("r", 3, 10) == b"3456789"
        assert store.get_range("r", 8, 100) == b"89"
        assert store.get_range("r", 10, 20) == b""
        assert store.get_range("r", 15, 20) == b""
        assert store.get_range("r", 4, 4) == b""
        assert store.get_range("r", 5, 2) == b""
        with pytest.raises(InvalidArgument):
            store.get_range("r", -1, 3)

    def test_get_ranges(self, store: ObjectStore) -> None:
        store.put("r", b"0123456789")
        got = store.get_ranges("r", [(7, 9), (0, 2), (4, 4), (8, 50)])
        assert got == [b"78", b"01", b"", b"89"]
        assert store.get_ranges("r", [(0, 1), (12, 20), (10, 11)]) == [b"0", b"", b""]
        assert store.get_ranges("r", []) == []

    def test_head(self, store: ObjectStore) -> None:
        store.put("h/obj", b"x" * 1234)
        meta = store.head("h/obj")
        assert meta.path == "h/obj"
        assert meta.size == 1234
        assert meta.last_modified > 0

    # -- listing ---------------------------------------------------------------------------

    def test_list_sorted_by_path(self, store: ObjectStore) -> None:
        names = [f"l/{c}{i}" for c in "zamq" for i in range(3)] + ["l/A", "l/_", "l/0"]
        random.Random(7).shuffle(names)
        for n in names:
            store.put(n, n.encode())
        listed = list(store.list("l/"))
        assert [m.path for m in listed] == sorted(names)
        assert all(m.size == len(m.path) for m in listed)

    def test_list_prefix_is_a_string_prefix(self, store: ObjectStore) -> None:
        for n in ("p/x1", "p/x2", "p/y", "p/x/deep", "px/z", "q", "pq"):
            store.put(n, b"1")

        def paths(prefix: str) -> list[str]:
            return [m.path for m in store.list(prefix)]

        assert paths("p/") == ["p/x/deep", "p/x1", "p/x2", "p/y"]
        assert paths("p/x") == ["p/x/deep", "p/x1", "p/x2"]
        assert paths("p/x1") == ["p/x1"]
        assert paths("p") == ["p/x/deep", "p/x1", "p/x2", "p/y", "pq", "px/z"]
        assert paths("") == ["p/x/deep", "p/x1", "p/x2", "p/y", "pq", "px/z", "q"]
        assert paths("nothing/") == []
        assert paths("p/zz") == []

    def test_list_offset_is_strictly_greater(self, store: ObjectStore) -> None:
        names = [f"o/{i:03d}" for i in range(10)]
        for n in names:
            store.put(n, b"")
        assert [m.path for m in store.list("o/", offset="o/004")] == names[5:]
        assert [m.path for m in store.list("o/", offset="o/0045")] == names[5:]
        assert [m.path for m in store.list("o/", offset="o/009")] == []
        assert [m.path for m in store.list("o/", offset="a")] == names
        assert [m.path for m in store.list("", offset="o/007")] == names[8:]

    def test_list_more_than_a_page(self, store: ObjectStore) -> None:
        names = [f"many/{i:06d}" for i in range(self.many_objects)]
        with ThreadPoolExecutor(self.put_threads) as pool:
            list(pool.map(lambda n: store.put(n, b"v"), names))
        assert [m.path for m in store.list("many/")] == names
        cut = min(999, len(names) // 2)
        assert [m.path for m in store.list("many/", offset=names[cut])] == names[cut + 1 :]

    def test_delete_while_listing(self, store: ObjectStore) -> None:
        names = [f"dl/{i:03d}" for i in range(20)]
        for n in names:
            store.put(n, b"1")
        seen = []
        for meta in store.list("dl/"):
            seen.append(meta.path)
            store.delete(meta.path)
        assert seen == names
        assert list(store.list("dl/")) == []

    # -- delete / copy ---------------------------------------------------------------------

    def test_delete_is_idempotent(self, store: ObjectStore) -> None:
        store.put("del", b"1")
        store.delete("del")
        with pytest.raises(ObjectNotFound):
            store.get("del")
        store.delete("del")
        store.delete("never/existed")

    def test_delete_many(self, store: ObjectStore) -> None:
        names = [f"bulk/{i:04d}" for i in range(1203)]  # more than one S3 request's worth
        for n in names:
            store.put(n, b"1")
        store.put("bulk-keep", b"k")
        store.delete_many([*names[::2], "never/existed", names[0]])  # missing and repeated paths
        assert [m.path for m in store.list("bulk/")] == names[1::2]
        store.delete_many(names)
        store.delete_many([])
        assert list(store.list("bulk/")) == []
        assert store.get("bulk-keep") == b"k"

    def test_copy(self, store: ObjectStore) -> None:
        store.put("src", b"payload")
        store.copy("src", "dst/copied")
        assert store.get("dst/copied") == b"payload"
        assert store.get("src") == b"payload"
        store.put("other", b"other")
        store.copy("other", "dst/copied")
        assert store.get("dst/copied") == b"other"
        with pytest.raises(ObjectNotFound):
            store.copy("no-such-source", "dst/x")

    def test_copy_create(self, store: ObjectStore) -> None:
        store.put("src", b"payload")
        store.put("taken", b"keep me")
        with pytest.raises(AlreadyExists):
            store.copy("src", "taken", create=True)
        assert store.get("taken") == b"keep me"
        store.copy("src", "fresh", create=True)
        assert store.get("fresh") == b"payload"

    # -- attributes, paths, description ----------------------------------------------------

    def test_attributes(self, store: ObjectStore) -> None:
        store.put("att", b"1", attributes={"shaletest": "v1"})
        store.put("att-create", b"1", create=True, attributes={"shaletest": "v2"})
        if store.supports_attributes:
            assert store.attributes("att").get("shaletest") == "v1"
            assert store.attributes("att-create").get("shaletest") == "v2"
        else:
            assert store.attributes("att") == {}

    @pytest.mark.parametrize("bad", BAD_PATHS, ids=repr)
    def test_path_validation(self, store: ObjectStore, bad: str) -> None:
        with pytest.raises(InvalidPathError):
            store.put(bad, b"x")
        with pytest.raises(InvalidPathError):
            store.put(bad, b"x", create=True)
        with pytest.raises(InvalidPathError):
            store.get(bad)
        with pytest.raises(InvalidPathError):
            store.head(bad)
        with pytest.raises(InvalidPathError):
            store.delete(bad)
        store.put("innocent", b"x")
        with pytest.raises(InvalidPathError):
            store.delete_many(["innocent", bad])
        assert store.get("innocent") == b"x"  # checked before anything was deleted

    def test_bad_list_prefix(self, store: ObjectStore) -> None:
        for bad in ("/abs", "../", "a/../", "a\\b/", "%2e%2e/"):
            with pytest.raises(InvalidPathError):
                store.list(bad)

    def test_describe(self, store: ObjectStore) -> None:
        text = store.describe()
        assert isinstance(text, str) and text
        assert text in repr(store) or type(store).__name__ in repr(store)
