"""The change feed (issue 32 item 2): every committed write in sequence order, resumable
exactly once from a stored cursor in other processes, across a writer kill and a fencing
takeover; CursorExpired once the collector removed what a cursor needs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shaledb import (
    ClosedError,
    CursorExpired,
    Db,
    DbReader,
    GarbageCollector,
    GcOptions,
    InvalidArgument,
    Settings,
    WriteBatch,
)
from shaledb.engine.changes import Change, ChangeFeed, Cursor, latest_cursor, open_changes
from shaledb.testing.seeds import test_seed

QUIET = Settings(compactor=None, garbage_collector=None)
WORKER = str(Path(__file__).with_name("changes_worker.py"))


def _apply(changes: list[Change], data: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
    data = {} if data is None else data
    for c in changes:
        if c.kind == "put":
            assert c.value is not None
            data[c.key] = c.value
        else:
            data.pop(c.key, None)
    return data


def test_feed_yields_every_write_in_order_with_its_batch(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"a", b"1")
        db.write(WriteBatch().put(b"b", b"2").delete(b"a").put(b"c", b"3", metadata=b"m"), durable=False)
        db.delete(b"b")
        db.flush()
        got = db.changes(follow=False).read()
    assert [(c.seq, c.kind, c.key, c.value, c.batch_index, c.batch_size) for c in got] == [
        (1, "put", b"a", b"1", 0, 1),
        (2, "put", b"b", b"2", 0, 3),
        (2, "delete", b"a", None, 1, 3),
        (2, "put", b"c", b"3", 2, 3),
        (3, "delete", b"b", None, 0, 1),
    ]
    assert got[3].metadata == b"m"
    # Resuming from every cursor (including inside the batch) yields exactly the rest.
    for i, c in enumerate(got):
        again = open_changes(mem_url, str(c.cursor), follow=False).read()
        assert again == got[i + 1 :]
    assert Cursor.parse(str(got[2].cursor)) == got[2].cursor


def test_feed_from_latest_and_from_a_reader(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        db.put(b"old", b"1")
        feed = db.changes("latest", follow=False)
        assert feed.read() == []
        db.put(b"new", b"2")
        assert [c.key for c in feed.read()] == [b"new"]
        with DbReader.open(mem_url, checkpoint_lifetime_s=None) as r:
            assert [c.key for c in r.changes(follow=False).read()] == [b"old", b"new"]


def test_bad_cursor_is_refused(mem_url: str) -> None:
    with Db.open(mem_url, settings=QUIET) as db:
        for bad in ("", "c1.0.0.0", "c2.1.1.1", "c1.1.x.0", "garbage"):
            with pytest.raises(InvalidArgument, match="cursor"):
                db.changes(bad)


def test_cursor_expires_after_gc_and_retention_keeps_wal(tmp_path: Path) -> None:
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(20):
            db.put(b"k%02d" % i, b"v")
        mid = db.changes(follow=False).read(5)[-1].cursor
    # Closed: the writes are in an L0 SST, so their WAL objects are garbage.
    kept = GarbageCollector.open(url, GcOptions(min_age_s=0, wal_retention_s=3600)).run_once()
    assert kept.deleted["wal"] == []
    assert len(open_changes(url, str(mid), follow=False).read()) == 15
    gone = GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    assert len(gone.deleted["wal"]) >= 20
    with pytest.raises(CursorExpired, match="wal_retention_s"):
        open_changes(url, str(mid), follow=False).read()
    # since=None is the oldest history the WAL still holds (docs/service.md): here none, past
    # the fence wal/1 the collector keeps. It used to raise CursorExpired on any database whose
    # collector had run, so `shaledb changes` without --since failed on every busy database.
    oldest = open_changes(url, follow=False)
    assert oldest.read() == []
    with Db.open(url, settings=QUIET) as db:  # a cursor at the end still follows new writes
        end = db.changes("latest", follow=False)
        db.put(b"after", b"1")
        assert [c.key for c in end.read()] == [b"after"]
        assert [c.key for c in oldest.read()] == [b"after"]
        assert [c.key for c in db.changes(follow=False).read()] == [b"after"]
        db.put(b"later", b"2")
    with Db.open(url, settings=QUIET):  # a fence between kept WAL objects is no gap
        pass
    assert [c.key for c in open_changes(url, follow=False).read()] == [b"after", b"later"]
    GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()  # fences kept, the rest gone
    assert open_changes(url, follow=False).read() == []
    with pytest.raises(CursorExpired):  # a stored cursor never skips what it missed
        open_changes(url, str(mid), follow=False).read()


def test_a_follower_at_the_head_reads_an_object_written_and_flushed_after_its_get(mem_url: str) -> None:
    """A follower GETs the next WAL object, absent; the writer then writes it and flushes the
    memtable past it before the follower reads the manifest. The object is there (nothing
    collected it), yet the feed raised CursorExpired: a follower at the head of a busy
    database with small memtables failed every few seconds. Deterministic: the writer's
    put and flush run inside the feed's manifest read."""
    with Db.open(mem_url, settings=Settings(compactor=None, garbage_collector=None)) as db:
        db.put(b"a", b"1")
        feed = db.changes(follow=False)
        assert [c.key for c in feed.read()] == [b"a"]
        refresh = feed._refresh_manifest
        raced: list[bool] = []

        def write_then_refresh() -> object:
            if not raced:
                raced.append(True)
                db.put(b"b", b"2")
                db.flush(memtable=True)  # the manifest's replay point now covers b's object
            return refresh()

        feed._refresh_manifest = write_then_refresh  # type: ignore[method-assign]
        assert [c.key for c in feed.read()] == [b"b"] and raced


def test_no_feed_from_a_handle_closed_before_or_while_it_is_opened(
    mem_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``changes()`` on a closed handle handed out a feed that followed on (a consumer
    thread kept the process alive), and one opened while another thread closed the
    handle was registered after close had detached the feeds: never detached. Both now
    raise ClosedError. Deterministic: the close runs inside the feed's opening."""
    import shaledb.engine.changes as changes_mod

    real_open = changes_mod.open_feed
    db = Db.open(mem_url, settings=QUIET)
    db.put(b"a", b"1")
    handles: list[Db | DbReader] = [db, DbReader.open(mem_url)]
    for handle in handles:

        def open_then_close(*args: Any, _h: Db | DbReader = handle, **kw: Any) -> ChangeFeed:
            feed = real_open(*args, **kw)
            _h.close()  # another thread closes the handle now
            return feed

        monkeypatch.setattr(changes_mod, "open_feed", open_then_close)
        with pytest.raises(ClosedError):
            handle.changes(poll_interval_s=0.01)
        monkeypatch.setattr(changes_mod, "open_feed", real_open)
        assert handle.closed
        with pytest.raises(ClosedError):
            handle.changes(follow=False)


def _consume(url: str, state: Path, chunk: int, rounds: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, "consumer", url, str(state), str(chunk), str(rounds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _writer(url: str, seed: int, tag: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, WORKER, "writer", url, str(seed), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "open", p.stderr.read() if p.stderr else ""
    return p


def test_consumers_in_other_processes_resume_exactly_once_across_kill_and_takeover(tmp_path: Path) -> None:
    seed = test_seed()
    url = str(tmp_path / "db")
    state = tmp_path / "consumer.json"
    with Db.open(url, settings=QUIET):
        pass

    # Writer 1 is killed mid-stream while a consumer follows it; a consumer is killed too.
    w1 = _writer(url, seed, "w1")
    time.sleep(0.5)
    c = _consume(url, state, 7, 20)
    c.wait(timeout=60)
    crashed = _consume(url, state, 3, 1000)
    time.sleep(0.3)
    crashed.send_signal(signal.SIGKILL)
    crashed.wait()
    w1.send_signal(signal.SIGKILL)
    w1.wait()

    # Writer 2 runs until this process takes the database over (fencing it).
    w2 = _writer(url, seed + 1, "w2")
    time.sleep(0.5)
    _consume(url, state, 11, 20).wait(timeout=60)
    with Db.open(url, settings=QUIET) as db:
        out, err = w2.communicate(timeout=60)
        assert "fenced" in out, (out, err)
        for i in range(50):
            db.write(WriteBatch().put(b"k%03d" % i, b"final").delete(b"k%03d" % (199 - i)))
        db.flush()
        expected = dict(db.scan())
        everything = db.changes(follow=False).read()

    for _ in range(100):  # catch up in chunks, one process per round
        p = _consume(url, state, 1000, 20)
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        if "applied" not in out:
            break
    result = json.loads(state.read_text())
    log = [tuple(x) for x in result["log"]]
    print(f"seed={seed}: {len(everything)} changes, {len({c.seq for c in everything})} batches")
    assert len(everything) > 200
    assert log == [(ch.seq, ch.batch_index) for ch in everything]  # none twice, none missed
    assert _apply(everything) == expected
    assert {bytes.fromhex(k): bytes.fromhex(v) for k, v in result["data"].items()} == expected
    seqs = [ch.seq for ch in everything]
    assert seqs == sorted(seqs)


def test_a_feed_stops_with_closed_error_when_its_handle_closes(mem_url: str) -> None:
    """A following feed used to go on after its Db closed (picking up a later writer's puts),
    so a consumer thread kept the process alive; it now ends with ClosedError at its next
    poll, as a scan of a closed handle does. A feed the user closes still just ends."""
    db = Db.open(mem_url)
    db.put(b"a", b"1")
    feed = db.changes(poll_interval_s=0.05)
    seen: list[bytes] = []
    errors: list[BaseException] = []

    def consume() -> None:
        try:
            for change in feed:
                seen.append(change.key)
        except ClosedError as exc:
            errors.append(exc)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    db.close()
    t.join(10)
    assert not t.is_alive() and seen == [b"a"] and len(errors) == 1
    with pytest.raises(ClosedError):
        feed.read()
    with DbReader.open(mem_url) as reader:
        own = reader.changes(follow=False)
        assert [c.key for c in own] == [b"a"]
        own.close()
        assert list(own) == []  # closed by its user: ends quietly


def test_latest_lists_only_the_wal_after_the_replay_point(tmp_path: Path) -> None:
    """changes("latest") listed every WAL object to find the last one; wal_retention_s (or a
    checkpoint's range) keeps thousands of them, and the listing took seconds on S3.
    It now lists from the latest manifest's replay point, and all of the WAL only when
    nothing is left from there on."""
    from shaledb.format import paths
    from shaledb.store import StoreWrapper, open_store

    class CountingListings(StoreWrapper):
        listed = 0

        def list(self, prefix, *, offset=None):  # type: ignore[no-untyped-def]
            for meta in super().list(prefix, offset=offset):
                if prefix == paths.WAL_DIR:
                    self.listed += 1
                yield meta

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        db.put(b"first", b"1")
        for i in range(60):
            db.put(b"k%02d" % i, b"v")
            if i % 10 == 9:
                db.flush(memtable=True)
        # Keeps the WAL objects (their writes are in SSTs: above the replay point are 0-1).
        GarbageCollector.open(url, GcOptions(min_age_s=0, wal_retention_s=3600)).run_once()
        store = CountingListings(open_store(url))
        feed = open_changes(url, follow=False)  # (a feed of its own, to compare)
        assert len(feed.read()) == 61
        cursor = latest_cursor(store)
        assert store.listed <= 3, store.listed  # listed all 60 before
        db.put(b"after", b"1")
        assert [c.key for c in ChangeFeed(store, cursor, follow=False).read()] == [b"after"]
    fresh = tmp_path / "fresh"
    with Db.open(str(fresh), settings=QUIET) as db:  # nothing past the replay point: lists all
        db.put(b"a", b"1")
        db.flush(memtable=True)
        GarbageCollector.open(str(fresh), GcOptions(min_age_s=0)).run_once()
        end = db.changes("latest", follow=False)
        db.put(b"b", b"2")
        assert [c.key for c in end.read()] == [b"b"]


def test_latest_after_the_collector_removed_every_wal_object_but_fences(tmp_path: Path) -> None:
    """With every write in SSTs and the collector done, the WAL holds only fences below the
    replay point: "latest" started at the last fence and met the collected gap after it
    (CursorExpired), on any quiet database whose collector had run."""
    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(5):
            db.put(b"k%d" % i, b"v")
        db.flush(memtable=True)
    GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    end = open_changes(url, "latest", follow=False)  # (a consumer starting while no writer runs)
    assert end.read() == []
    # Its sequence numbers say every write so far is consumed (a Spark stream's AvailableNow
    # target compares them: a cursor at seq 0 read nothing at all).
    from shaledb.store import open_store

    target = latest_cursor(open_store(url))
    assert target.seq == 6 and end.cursor == target
    with Db.open(url, settings=QUIET) as db:
        db.put(b"new", b"1")
    new = end.read()
    assert [c.key for c in new] == [b"new"]
    assert (new[0].cursor.seq, new[0].cursor.taken) > (target.seq, target.taken)


def test_since_none_starts_after_the_last_collected_gap_not_on_an_island(tmp_path: Path) -> None:
    """The collector keeps a live checkpoint's WAL range and deletes the objects after it once
    they are in SSTs, which leaves an island. ``since=None`` started on the island (the oldest
    object present), yielded its writes and then raised CursorExpired at the gap: ``shaledb
    changes`` on such a database printed a few changes and failed with exit 3, and a new
    consumer could never get going. It now starts where the WAL is whole up to the head; a
    feed pinned at the checkpoint still reads the island."""
    from shaledb import admin
    from shaledb.engine.changes import oldest_cursor
    from shaledb.store import open_store

    url = str(tmp_path / "db")
    with Db.open(url, settings=QUIET) as db:
        for i in range(3):
            db.put(b"a%d" % i, b"1")
        cp = db.create_checkpoint(name="island", lifetime=3600)  # pins a0..a2's WAL range
        db.flush(memtable=True)
        for i in range(3):
            db.put(b"b%d" % i, b"1")
        db.flush(memtable=True)
        for i in range(3):
            db.put(b"c%d" % i, b"1")
    gone = GarbageCollector.open(url, GcOptions(min_age_s=0)).run_once()
    assert gone.deleted["wal"]  # b's objects (and the close's flush of c's) went; a's stayed
    with DbReader.open(url, checkpoint=cp.id) as pinned:  # the island is still the pinned feed's
        assert [c.key for c in pinned.changes(None, follow=False).read()] == [b"a0", b"a1", b"a2"]
    got = open_changes(url, follow=False).read()  # before: a0..a2, then CursorExpired
    assert got == [] or all(not c.key.startswith((b"a", b"b")) for c in got), [c.key for c in got]
    start = oldest_cursor(open_store(url))
    with Db.open(url, settings=QUIET) as db:
        db.put(b"d", b"1")
    assert [c.key for c in open_changes(url, str(start), follow=False).read()] == [b"d"]
    assert [c.key for c in open_changes(url, follow=False).read()] == [b"d"]
    p = subprocess.run(
        [sys.executable, "-m", "shaledb.cli", "--path", url, "changes", "--jsonl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0 and [json.loads(line)["key"] for line in p.stdout.splitlines()] == ["d"], p
    admin.delete_checkpoint(url, cp.id)
