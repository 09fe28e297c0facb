"""DbReader: what it reads, how it follows the writer, and what it writes (checkpoints only)."""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from readers_kit import QUIET, compact_everything

from shaledb import (
    CheckpointNotFound,
    DatabaseDestroyed,
    Db,
    DbReader,
    DbReaderOptions,
    InvalidArgument,
    NotFound,
    admin,
)
from shaledb.manifest.store import ManifestStore
from shaledb.store import ObjectStore, StoreWrapper, open_store
from shaledb.store.base import ObjectMeta
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.faults import OnFirstGet
from shaledb.testing.seeds import test_seed

MANUAL = DbReaderOptions(background_poll=False, manifest_poll_interval_s=1.0, checkpoint_lifetime_s=60.0)


def manifests(url: str) -> int:
    return len(list(open_store(url).list("manifest/")))


def reader_cps(url: str) -> list:
    return [c for c in admin.read_manifest(url).checkpoints if dict(c.metadata).get("role") == "reader"]


def test_reader_reads_wal_and_sst_data(url: str) -> None:
    seed = test_seed()
    rng = random.Random(seed)
    with Db.open(url, settings=QUIET) as db:
        for i in range(300):
            db.put(b"k%04d" % rng.randrange(500), b"a%d" % i)
        db.flush(memtable=True)
        for i in range(200):
            k = b"k%04d" % rng.randrange(500)
            if rng.random() < 0.2:
                db.delete(k)
            else:
                db.put(k, b"b%d" % i)
        expected = dict(db.scan())
        with DbReader.open(url, options=MANUAL) as r:
            assert dict(r.scan()) == expected
            for k in [b"k%04d" % i for i in range(0, 500, 7)]:
                assert r.get(k) == expected.get(k)
            assert list(r.scan(prefix=b"k00")) == [(k, v) for k, v in sorted(expected.items()) if k < b"k01"]
            assert list(r.scan(reverse=True, limit=5)) == sorted(expected.items(), reverse=True)[:5]
            assert list(r.scan(b"k0100", b"k0200")) == [
                (k, v) for k, v in sorted(expected.items()) if b"k0100" <= k < b"k0200"
            ]
            with r.snapshot() as s:
                db.put(b"k0001", b"changed")
                r.refresh()
                assert r.get(b"k0001") == b"changed"
                assert s.get(b"k0001") == expected.get(b"k0001")
                assert dict(s.scan()) == expected


def test_reader_follows_writes_and_flushes(url: str) -> None:
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
        with DbReader.open(url, options=MANUAL) as r:
            assert r.get(b"a") == b"1"
            db.put(b"b", b"2")
            assert r.get(b"b") is None  # not polled yet
            r.refresh()
            assert r.get(b"b") == b"2"
            before = r.stats()
            db.flush(memtable=True)
            r.refresh()
            after = r.stats()
            assert after["reestablished"] == before["reestablished"] + 1
            assert after["l0_ssts"] == 1 and after["memtable_bytes"] == 0  # purged: the L0 holds it
            assert r.get(b"a") == b"1" and r.get(b"b") == b"2"
            for i in range(5):
                db.put(b"x%d" % i, b"v")
                db.flush(memtable=True)
                r.refresh()
                assert len(reader_cps(url)) <= 2  # the current one and at most one retired
            assert dict(r.scan(prefix=b"x")) == {b"x%d" % i: b"v" for i in range(5)}
        assert reader_cps(url) == []  # close deletes them


def test_snapshot_keeps_its_checkpoint_until_closed(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"k", b"old")
        db.flush(memtable=True)
        r = DbReader.open(mem_url, options=MANUAL)
        first = r.checkpoint
        assert first is not None
        snap = r.snapshot()
        db.put(b"k", b"new")
        db.flush(memtable=True)
        r.refresh()
        assert r.checkpoint is not None and r.checkpoint.id != first.id
        assert r.get(b"k") == b"new" and snap.get(b"k") == b"old"
        db.put(b"k2", b"v")
        db.flush(memtable=True)
        r.refresh()  # re-establishes again: the snapshot's checkpoint is still held
        ids = {c.id for c in reader_cps(mem_url)}
        assert first.id in ids
        assert snap.get(b"k") == b"old"
        snap.close()
        db.put(b"k3", b"v")
        db.flush(memtable=True)
        r.refresh()  # the next write drops idle retired checkpoints
        assert first.id not in {c.id for c in reader_cps(mem_url)}
        with r.scan() as it:
            assert dict(it)[b"k"] == b"new"
        r.close()
        assert reader_cps(mem_url) == []


def test_small_memtables_and_purge(mem_url: str) -> None:
    with (
        Db.open(mem_url, settings=QUIET) as db,
        DbReader.open(mem_url, options=replace(MANUAL, max_memtable_bytes=2000)) as r,
    ):
        for i in range(60):
            db.put(b"k%03d" % i, b"v" * 50)
        r.refresh()
        assert r.stats()["memtables"] > 3
        assert dict(r.scan()) == {b"k%03d" % i: b"v" * 50 for i in range(60)}
        db.flush(memtable=True)
        r.refresh()
        assert r.stats()["memtables"] == 1 and r.stats()["memtable_bytes"] == 0
        assert len(dict(r.scan())) == 60


def test_pinned_reader_never_refreshes_or_writes(url: str) -> None:
    with Db.open(url, settings=QUIET) as db:
        db.put(b"a", b"1")
        cp = db.create_checkpoint()
        n = manifests(url)
        with DbReader.open(url, cp.id) as r:
            db.put(b"a", b"2")
            db.flush(memtable=True)
            n = manifests(url)
            r.refresh()
            assert r.get(b"a") == b"1"
            assert r.checkpoint is not None and r.checkpoint.id == cp.id
        assert manifests(url) == n
    with pytest.raises(CheckpointNotFound):
        DbReader.open(url, "01740ee5-6459-44af-9a45-85deb6e468e3")
    with pytest.raises(CheckpointNotFound, match="no live checkpoint named 'nope'"):  # a name
        DbReader.open(url, "nope")
    with pytest.raises(InvalidArgument):
        DbReader.open(url, "")


def test_follow_latest_mode_writes_nothing(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        n = manifests(mem_url)
        opts = replace(MANUAL, establish_checkpoint=False)
        with DbReader.open(mem_url, options=opts) as r:
            assert r.get(b"a") == b"1" and r.checkpoint is None
            db.put(b"b", b"2")
            db.flush(memtable=True)
            n = manifests(mem_url)
            r.refresh()
            assert r.get(b"b") == b"2" and r.manifest.data.l0
        assert manifests(mem_url) == n


def test_idle_poll_is_two_gets_and_no_list(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        faults = FaultInjectingStore(open_store(mem_url), seed=1)
        with DbReader.open(store=faults, options=MANUAL) as r:
            faults.clear_calls()
            r.refresh()
            r.refresh()
            calls = faults.calls
            assert [c.op for c in calls] == ["get"] * 4, calls
            assert {c.path.split("/")[0] for c in calls} == {"manifest", "wal"}


def test_reader_skips_a_wal_slot_that_was_never_written(mem_url: str) -> None:
    """A crashed writer can leave a WAL id below next_wal_id unwritten; later objects still arrive."""
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        r = DbReader.open(mem_url, options=MANUAL)
        gap = r.stats()["next_wal_id"]
        db.put(b"lost", b"x")  # WAL object `gap`
        db.put(b"b", b"2")  # `gap + 1`
        store = open_store(mem_url)
        store.delete(f"wal/{gap:020d}.sst")
        r.refresh()
        assert r.get(b"b") is None  # the manifest does not say `gap` is used: wait for it
        ms = ManifestStore(store, ManualClock(), random.Random(1), author="test")
        ms.update(lambda m: replace(m, next_wal_id=max(m.next_wal_id, gap + 2)), timeout_s=5)
        r.refresh()
        assert r.get(b"b") == b"2" and r.get(b"lost") is None
        r.close()


@pytest.mark.parametrize("establish", [True, False])
def test_reader_never_skips_a_wal_object_flushed_and_collected_while_it_replays(
    mem_url: str, establish: bool
) -> None:
    """The process tests' lost write (seed 2159074111), step by step.

    A reader far behind a busy writer stays in its WAL replay loop; its
    checkpoint can expire meanwhile (or, following the latest, nothing
    protects the objects), so the writer flushes WAL object ``w2`` into an L0
    SST and the garbage collector deletes the object before the reader gets
    to it. The manifest the reader's poll read already counts ids beyond
    ``w2``, and a later object exists: the reader once took ``w2`` for a slot
    a crashed writer left empty and skipped it. Its writes were then only in
    an L0 SST of a manifest the reader had not installed, and the reader's
    in-memory table still held ``g``'s older value from ``w1``, which shadows
    the L0 SST even after later refreshes install that manifest (the table
    also holds ``w4``, above the manifest's replay point, so it is kept).
    """
    store = open_store(mem_url)
    with Db.open(store=store, settings=QUIET) as db:
        db.put(b"a", b"1")
        w1 = db.stats()["next_wal_id"]
        w2 = w1 + 1

        def flush_and_collect() -> None:
            db.flush(memtable=True)  # g=v2 and h=1 into L0; replay_after_wal_id >= w3
            store.delete(f"wal/{w2:020d}.sst")  # what GC does once the reader no longer pins w2
            db.put(b"z", b"1")  # w4, above the flushed memtable

        spy = OnFirstGet(open_store(mem_url), f"wal/{w2:020d}.sst", flush_and_collect)
        r = DbReader.open(store=spy, options=replace(MANUAL, establish_checkpoint=establish))
        assert r.stats()["next_wal_id"] == w1
        db.put(b"g", b"v1")  # w1
        db.put(b"g", b"v2")  # w2
        db.put(b"h", b"1")  # w3
        db.create_checkpoint()  # a manifest counting w1..w3 (next_wal_id > w2 + 1), no new SSTs
        r.refresh()  # replays w1, then finds w2 gone
        assert r.get(b"g") == b"v2" and r.get(b"h") == b"1" and r.get(b"z") == b"1"
        assert r.manifest.replay_after_wal_id >= w2
        r.refresh()
        assert dict(r.scan()) == dict(db.scan()) == {b"a": b"1", b"g": b"v2", b"h": b"1", b"z": b"1"}
        r.close()


def test_split_points_partition_the_key_space(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        for part in range(8):
            for i in range(100):
                db.put(b"%d-%03d" % (part, i), b"v" * 100)
            db.flush(memtable=True)
        db.put(b"9-memtable-only", b"x")
        cp = db.create_checkpoint()
    with DbReader.open(mem_url, cp.id) as r:
        ranges = r.key_ranges()
        assert len(ranges) == 8 and all(lo <= hi for lo, hi, _ in ranges)
        full = list(r.scan())
        for n in (1, 2, 3, 4, 8, 50):
            points = r.split_points(n)
            assert len(points) <= n - 1 and points == sorted(set(points))
            if n in (2, 4, 8):
                assert len(points) == n - 1
            bounds = [None, *points, None]
            pieces = []
            for lo, hi in itertools.pairwise(bounds):
                pieces.extend(r.scan(lo, hi))
            assert pieces == full
        with pytest.raises(InvalidArgument):
            r.split_points(0)


def test_open_errors(mem_url: str) -> None:
    with pytest.raises(NotFound):
        DbReader.open(mem_url)
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
    admin.destroy(mem_url)
    with pytest.raises(DatabaseDestroyed):
        DbReader.open(mem_url)
    with pytest.raises(InvalidArgument):
        DbReaderOptions(manifest_poll_interval_s=10, checkpoint_lifetime_s=15)
    with pytest.raises(InvalidArgument):
        DbReader.open(mem_url, manifest_poll_interval_s=5, checkpoint_lifetime_s=10)
    with pytest.raises(InvalidArgument):
        DbReaderOptions(max_memtable_bytes=0)
    with pytest.raises(InvalidArgument):
        DbReader.open()


def test_closed_reader_refuses_reads(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
    r = DbReader.open(mem_url, options=MANUAL)
    r.close()
    r.close()
    from shaledb import ClosedError

    with pytest.raises(ClosedError):
        r.get(b"a")
    with pytest.raises(ClosedError):
        r.scan()


def test_reader_of_a_destroyed_database_serves_but_stops_refreshing(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
    r = DbReader.open(mem_url, options=MANUAL)
    cp = r.checkpoint
    assert cp is not None
    admin.destroy(mem_url)
    with pytest.raises(DatabaseDestroyed):
        r.refresh()
    assert r.get(b"a") == b"1"
    assert admin.read_manifest(mem_url).checkpoint(cp.id) == cp  # not extended
    r.close()


@pytest.mark.parametrize("establish", [True, False])
def test_get_recovers_when_the_views_ssts_were_collected(mem_url: str, establish: bool) -> None:
    """A view whose SSTs vanished (its checkpoint lost, or following the latest without one):
    a get moves to the latest version and retries instead of failing."""
    with Db.open(mem_url, settings=QUIET) as db:
        for i in range(50):
            db.put(b"k%02d" % i, b"v%d" % i)
        db.flush(memtable=True)
        r = DbReader.open(mem_url, options=replace(MANUAL, establish_checkpoint=establish))
        assert r.manifest.data.l0
        deleted = compact_everything(mem_url)
        assert deleted
        assert r.get(b"k07") == b"v7"
        assert not r.manifest.data.l0 and r.manifest.data.runs
        assert dict(r.scan()) == {b"k%02d" % i: b"v%d" % i for i in range(50)}
        r.close()


class _ManifestRequests(StoreWrapper):
    """Counts the requests under ``manifest/`` (reads, listings, writes)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.n = 0

    def get(self, path: str) -> bytes:
        self.n += path.startswith("manifest/")
        return self.inner.get(path)

    def list(self, prefix: str, *, offset: str | None = None) -> Iterator[ObjectMeta]:
        self.n += prefix.startswith("manifest/")
        return self.inner.list(prefix, offset=offset)

    def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
        self.n += path.startswith("manifest/")
        self.inner.put(path, data, create=create, attributes=attributes)


class _HeldFeed:
    """Stands in for a change feed of the reader: the first close's detach waits for
    ``release``; a second detach (a second close running it all again) sets ``arrived``."""

    def __init__(self, arrived: threading.Event) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        self.arrived = arrived

    def detach(self, why: str) -> None:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(60)
        else:
            self.arrived.set()


class _Arrival(threading.Event):
    """``DbReader._close_done`` that says when a second close starts waiting on it."""

    def __init__(self, arrived: threading.Event) -> None:
        super().__init__()
        self.arrived = arrived

    def wait(self, timeout: float | None = None) -> bool:
        self.arrived.set()
        return super().wait(timeout)


def test_concurrent_closes_drop_the_readers_checkpoint_once(url: str) -> None:
    """Two threads closing one managed reader: the second waits for the first and the checkpoint
    is dropped by one update, as many manifest requests as a lone close makes."""
    Db.open(url, settings=QUIET).close()
    counting = _ManifestRequests(open_store(url))
    alone = DbReader.open(store=counting, options=MANUAL)
    counting.n = 0
    alone.close()
    lone_close = counting.n

    reader = DbReader.open(store=counting, options=MANUAL)
    assert len(reader_cps(url)) == 1
    arrived = threading.Event()
    feed = _HeldFeed(arrived)
    reader._feeds.add(feed)  # type: ignore[arg-type]
    reader._close_done = _Arrival(arrived)  # (an attribute the code before this fix never read)
    counting.n = 0
    first = threading.Thread(target=reader.close)
    first.start()
    assert feed.entered.wait(60)  # the first close is under way
    second = threading.Thread(target=reader.close)
    second.start()
    assert arrived.wait(60)  # the second close is waiting for it (or, before, ran it all again)
    feed.release.set()
    first.join()
    second.join()
    assert reader.closed and reader_cps(url) == []
    assert counting.n == lone_close, f"{counting.n} manifest requests for two closes, {lone_close} for one"
    reader.close()  # a later close: nothing more
    assert counting.n == lone_close


def test_a_pinned_readers_change_feed_ends_at_its_checkpoint(mem_url: str) -> None:
    """``DbReader.open(url, checkpoint=cp).changes(None)`` went on into writes made after
    the checkpoint, which the reader's reads never show (and, following, never ended). Its
    feed is now the history of the pinned version: it ends at the checkpoint's last write,
    and its cursor resumes on an unpinned feed with exactly the later writes."""
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.delete(b"x")
        cp = db.create_checkpoint()
        db.put(b"b", b"2")
        with DbReader.open(mem_url, checkpoint=cp) as pinned:
            assert pinned.get(b"b") is None
            feed = pinned.changes(None)
            got: list[tuple[str, bytes]] = []
            follower = threading.Thread(target=lambda: got.extend((c.kind, c.key) for c in feed))
            follower.start()
            follower.join(60)  # (a guard: it ends at once; before, it followed for ever)
            ended = not follower.is_alive()
            feed.close()
            follower.join()
            assert ended and got == [("put", b"a"), ("delete", b"x")]
            assert [c.key for c in pinned.changes(None).read()] == [b"a", b"x"]
            latest = pinned.changes("latest")
            assert latest.read() == [] and list(latest) == []
            for cursor in (feed.cursor, latest.cursor):
                assert [c.key for c in db.changes(cursor, follow=False)] == [b"b"]
