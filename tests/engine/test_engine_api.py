"""The ordinary behaviours a user relies on (the public API, slatedb acceptance scenarios 2, 5, 7, 8, 10-12).

Durability (durable=False, WriteHandle, flush() as a barrier, the flush
interval), group commit, backpressure, close semantics, argument validation,
sequence numbers across reopen, what an open replays, snapshot isolation,
scans, and opening something that is not a database.
"""

from __future__ import annotations

import itertools
import os
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_support import GateStore, abandon, dump, wal_paths

from shaledb import ClosedError, Db, InvalidArgument, NotFound, Settings, WriteBatch
from shaledb.clock import SYSTEM_CLOCK
from shaledb.format.paths import parse_wal_id
from shaledb.format.sst import decode_meta
from shaledb.store import LatencyStore, ObjectStore, open_store
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.strategies import tiny_settings

_SEEDS = itertools.count(20_000)


def _open(store: ObjectStore, clock: ManualClock | None = None, **overrides: Any) -> Db:
    return Db.open(
        store=store, settings=tiny_settings(**overrides), clock=clock or ManualClock(), seed=next(_SEEDS)
    )


def _wait_until(predicate: Any, timeout: float = 10.0) -> None:
    """Poll a condition that background threads will make true (no timing assertion)."""
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


# ------------------------------------------------------------------ durability


def test_non_durable_write_is_visible_at_once_and_durable_after_wait(memory_store: ObjectStore) -> None:
    gate = GateStore(memory_store, lambda op, path: op == "put_create" and path.startswith("wal/"))
    db = _open(gate)
    gate.close_gate()
    h = db.put(b"k", b"v", durable=False)
    assert db.get(b"k") == b"v"  # readers see it before it is durable
    assert not h.durable
    assert h.wait_durable(timeout=0) is False  # the WAL write is held: not durable yet
    gate.wait_for_waiters()
    gate.open_gate()
    assert h.wait_durable() is True
    assert h.durable
    abandon(db, None)


def test_unacknowledged_write_is_lost_on_crash_and_acknowledged_one_is_not(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=1)
    db = _open(faults)
    db.put(b"acked", b"1")
    h = db.put(b"buffered", b"2", durable=False)  # the manual clock never ends the flush interval
    abandon(db, faults)
    assert not h.durable
    with _open(memory_store) as again:
        assert dump(again) == {b"acked": b"1"}


def test_flush_interval_makes_buffered_writes_durable(memory_store: ObjectStore) -> None:
    clock = ManualClock()
    db = _open(memory_store, clock)
    h = db.put(b"k", b"v", durable=False)
    n = len(wal_paths(memory_store))
    assert not h.durable
    clock.advance(db.settings.flush_interval_s)
    _wait_until(lambda: h.durable)
    assert len(wal_paths(memory_store)) == n + 1
    db.close()


def test_flush_is_a_barrier(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=2)
    db = _open(faults)
    handles = [db.put(b"k%03d" % i, b"v%d" % i, durable=False) for i in range(50)]
    db.delete(b"k007", durable=False)
    db.flush()
    assert all(h.durable for h in handles)
    abandon(db, faults)
    with _open(memory_store) as again:
        want = {b"k%03d" % i: b"v%d" % i for i in range(50) if i != 7}
        assert dump(again) == want


def test_group_commit_many_threads_share_wal_objects(memory_store: ObjectStore) -> None:
    slow = LatencyStore(memory_store, SYSTEM_CLOCK, 0.003)
    faults = FaultInjectingStore(slow, seed=3)
    db = _open(faults)
    before = sum(1 for c in faults.calls if c.op == "put_create" and c.path.startswith("wal/"))
    threads, per_thread = 12, 15
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(per_thread):
                db.put(b"t%02d-%03d" % (t, i), b"x" * 20)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(60)
    assert not errors and not any(th.is_alive() for th in pool)
    wal_puts = sum(1 for c in faults.calls if c.op == "put_create" and c.path.startswith("wal/")) - before
    assert 0 < wal_puts < threads * per_thread, f"{wal_puts} WAL objects for {threads * per_thread} puts"
    abandon(db, faults)
    with _open(memory_store) as again:
        assert len(dump(again)) == threads * per_thread


def test_backpressure_blocks_writers_until_the_l0_flush_completes(memory_store: ObjectStore) -> None:
    gate = GateStore(memory_store, lambda op, path: op == "put_create" and path.startswith("compacted/"))
    limit = 16 * 1024
    db = _open(gate, l0_sst_size_bytes=4096, max_unflushed_bytes=limit)
    gate.close_gate()
    n = 200  # about 70 KiB accounted: far more than the limit
    done = []

    def writer() -> None:
        for i in range(n):
            db.put(b"k%04d" % i, b"v" * 200, durable=False)
            done.append(i)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    gate.wait_for_waiters()  # an L0 flush is stuck at its SST write
    _wait_until(lambda: db.stats()["unflushed_bytes"] > limit)
    th.join(0.5)
    assert th.is_alive(), "the writer did not block although the unflushed bytes are over the limit"
    assert len(done) < n
    gate.open_gate()
    th.join(30)
    assert not th.is_alive() and len(done) == n
    db.flush(memtable=True)
    assert db.stats()["unflushed_bytes"] == 0
    assert len(dump(db)) == n
    db.close()


# ----------------------------------------------------------------------- close


def test_close_twice_and_use_after_close(memory_store: ObjectStore) -> None:
    db = _open(memory_store)
    h = db.put(b"k", b"v", durable=False)
    db.close()
    db.close()  # a second close is a no-op
    assert db.closed
    assert h.wait_durable() is True  # close flushed it
    for call in (
        lambda: db.put(b"k", b"v"),
        lambda: db.delete(b"k"),
        lambda: db.write(WriteBatch().put(b"a", b"b")),
        db.flush,
        lambda: db.flush(memtable=True),
        lambda: db.get(b"k"),
        db.scan,
        db.snapshot,
    ):
        with pytest.raises(ClosedError, match="closed"):
            call()
    with _open(memory_store) as again:
        assert again.get(b"k") == b"v"


def test_context_managers(memory_store: ObjectStore) -> None:
    with _open(memory_store) as db:
        with db.batch() as b:
            b.put(b"a", b"1").put(b"b", b"2").delete(b"a")
        with pytest.raises(RuntimeError), db.batch() as b:
            b.put(b"never", b"x")
            raise RuntimeError("abandon the batch")
        assert dump(db) == {b"b": b"2"}
    assert db.closed
    with _open(memory_store) as again:
        assert dump(again) == {b"b": b"2"}


def test_a_batch_refuses_writes_after_its_block_committed_it(memory_store: ObjectStore) -> None:
    """A write added to ``b`` after ``with db.batch() as b`` ended (a line dedented too far,
    the batch kept in a variable) used to go into a batch nothing would write again: lost
    without a word. Now every way of adding raises ClosedError and the batch is unchanged."""
    with _open(memory_store) as db:
        with db.batch() as b:
            b.put(b"a", b"1").put_many([(b"b", b"2"), (b"c", b"3")])
        assert len(b) == 3
        late = [
            lambda: b.put(b"late", b"x"),
            lambda: b.put(b"late", b"x", metadata=b"m"),
            lambda: b.put_many([(b"late", b"x")]),
            lambda: b.delete(b"late"),
            lambda: b.delete_range(b"a", b"z"),
            lambda: b.merge(b"late", b"x"),
        ]
        for add in late:
            with pytest.raises(ClosedError, match=r"committed when its 'with db.batch\(\)' block ended"):
                add()
        assert len(b) == 3
        assert dump(db) == {b"a": b"1", b"b": b"2", b"c": b"3"}
        reused = WriteBatch().put(b"d", b"4")  # a batch built by hand stays reusable
        db.write(reused)
        db.write(reused.put(b"e", b"5"))
        assert dump(db)[b"e"] == b"5"


# ------------------------------------------------------------------ arguments


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda db: db.put("k", b"v"), "encode text"),
        (lambda db: db.put(b"", b"v"), "empty"),
        (lambda db: db.put(b"k" * 65536, b"v"), "at most 65535"),
        (lambda db: db.put(b"k", "v"), "encode text"),
        (lambda db: db.put(b"k", 5), "bytes, got int"),
        (lambda db: db.get(7), "bytes, got int"),
        (lambda db: db.delete(b""), "empty"),
        (lambda db: db.write([(b"k", b"v")]), "WriteBatch"),
        (lambda db: WriteBatch().put("k", b"v"), "encode text"),
        (lambda db: db.put(b"k", b"v", ttl=-1), "ttl"),
        (lambda db: db.put(b"k", b"v", ttl="soon"), "ttl"),
        (lambda db: list(db.scan("a")), "start must be bytes"),
        (lambda db: list(db.scan(prefix="a")), "prefix must be bytes"),
        (lambda db: db.scan(limit=-1), "limit"),
        (lambda db: db.scan(limit="3"), "limit"),
    ],
)
def test_bad_arguments_raise_invalid_argument_with_a_hint(
    memory_store: ObjectStore, call: Any, message: str
) -> None:
    with _open(memory_store) as db:
        with pytest.raises(InvalidArgument, match=message) as info:
            call(db)
        assert isinstance(info.value, ValueError)
        assert dump(db) == {}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"l0_sst_size_bytes": 100}, "l0_sst_size_bytes"),
        ({"l0_sst_size_bytes": 1 << 20, "max_unflushed_bytes": 1 << 19}, "max_unflushed_bytes"),
        ({"wal_recovery_mode": "yolo"}, "wal_recovery_mode"),
        ({"compression": "gzip"}, "compression"),
        ({"flush_interval_s": 0}, "flush_interval_s"),
        ({"block_size_bytes": "4k"}, "block_size_bytes"),
        ({"track_and_verify_wals": "yes"}, "track_and_verify_wals"),
        ({"wal_read_ahead": 0}, "wal_read_ahead"),
        ({"wal_read_ahead": 2.5}, "wal_read_ahead"),
    ],
)
def test_bad_settings_name_the_option(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        Settings(**changes)


def test_bad_open_arguments(memory_store: ObjectStore) -> None:
    with pytest.raises(InvalidArgument, match="Settings"):
        Db.open(store=memory_store, settings={"flush_interval_s": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="URL or a store"):
        Db.open()


# ------------------------------------------------------------- sequence numbers


def test_sequence_numbers_increase_across_reopen_and_crash(memory_store: ObjectStore) -> None:
    db = _open(memory_store)
    seqs = [db.put(b"k%d" % i, b"v").seq for i in range(5)]
    seqs.append(db.write(WriteBatch().put(b"a", b"1").delete(b"k0")).seq)
    seqs.append(db.delete(b"k1").seq)
    assert seqs == sorted(set(seqs))
    db.close()
    db = _open(memory_store)
    assert db.put(b"after-reopen", b"v").seq > seqs[-1]
    faults = FaultInjectingStore(memory_store, seed=4)
    db.close()
    db = _open(faults)
    last = db.put(b"wal-only", b"v").seq  # durable, in the WAL only
    abandon(db, faults)
    with _open(memory_store) as again:
        assert again.stats()["seq"] >= last
        assert again.put(b"after-crash", b"v").seq > last


def test_open_writes_a_fencing_wal_object(memory_store: ObjectStore) -> None:
    """slatedb acceptance 2: a new database has one WAL object, the empty fence; a reopen adds one."""
    with _open(memory_store):
        fences = wal_paths(memory_store)
        assert len(fences) == 1
        data = memory_store.get(fences[0])
        assert decode_meta(data, len(data)).props.entries == 0
    with _open(memory_store):
        pass
    assert len(wal_paths(memory_store)) == 2  # the close wrote nothing; each open fences


def test_reopen_replays_only_wal_objects_not_yet_in_l0(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=5)
    db = _open(faults)
    for i in range(3):
        db.put(b"in-l0-%d" % i, b"v")
    db.flush(memtable=True)
    in_l0 = {parse_wal_id(p) for p in wal_paths(memory_store)}
    for i in range(3):
        db.put(b"wal-%d" % i, b"v")
    wal_only = {parse_wal_id(p) for p in wal_paths(memory_store)} - in_l0
    assert len(wal_only) == 3
    abandon(db, faults)

    watcher = FaultInjectingStore(memory_store, seed=6)
    with _open(watcher) as again:
        read = {parse_wal_id(c.path) for c in watcher.calls if c.op == "get" and c.path.startswith("wal/")}
        assert read == wal_only, f"replayed {sorted(read)}, expected only {sorted(wal_only)}"
        assert len(dump(again)) == 6


# ------------------------------------------------------------------ reads


def test_snapshot_is_isolated_from_later_writes_and_memtable_flushes(store: ObjectStore) -> None:
    db = _open(store)
    for i in range(40):
        db.put(b"k%02d" % i, b"old%d" % i)
    db.flush(memtable=True)  # some in L0
    db.put(b"mem-only", b"old")
    db.delete(b"k05")
    before = dump(db)
    with db.snapshot() as snap:
        for i in range(40):
            db.put(b"k%02d" % i, b"new%d" % i, durable=False)
        db.delete(b"mem-only")
        db.put(b"k05", b"back")
        db.put(b"later", b"x")
        db.flush(memtable=True)
        db.put(b"k00", b"newer")
        db.flush(memtable=True)
        assert snap.get(b"k00") == b"old0"
        assert snap.get(b"k05") is None
        assert snap.get(b"later") is None
        assert snap.get(b"mem-only") == b"old"
        assert dict(snap.scan()) == before
        assert list(snap.scan(prefix=b"k0", reverse=True, limit=3)) == [
            (b"k09", b"old9"),
            (b"k08", b"old8"),
            (b"k07", b"old7"),
        ]
        assert db.get(b"k00") == b"newer" and db.get(b"mem-only") is None
    with pytest.raises(ClosedError):
        snap.get(b"k00")
    db.close()


def test_a_scan_reads_the_state_of_when_it_started(memory_store: ObjectStore) -> None:
    db = _open(memory_store)
    for i in range(10):
        db.put(b"k%d" % i, b"v%d" % i)
    it = db.scan()
    first = next(it)
    db.delete(b"k5")
    db.put(b"k55", b"new")
    db.flush(memtable=True)
    rest = list(it)
    assert [first, *rest] == [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    db.close()


def test_scans_range_prefix_reverse_limit_and_tombstones(store: ObjectStore) -> None:
    db = _open(store)
    keys = [b"a", b"ab", b"abc", b"abd", b"b", b"ba", b"c", b"\xff", b"\xff\x00", b"\xff\xff"]
    for k in keys:
        db.put(k, b"sst-" + k)
    db.flush(memtable=True)  # values in L0, then shadowed in the memtable
    db.delete(b"abc")
    db.delete(b"ba")
    db.put(b"b", b"mem-b")
    live = {k: b"sst-" + k for k in keys if k not in (b"abc", b"ba")} | {b"b": b"mem-b"}
    ordered = sorted(live.items())
    assert list(db.scan()) == ordered
    assert list(db.scan(reverse=True)) == ordered[::-1]
    assert list(db.scan(b"ab", b"b")) == [(b"ab", b"sst-ab"), (b"abd", b"sst-abd")]
    assert list(db.scan(b"ab", b"b", reverse=True)) == [(b"abd", b"sst-abd"), (b"ab", b"sst-ab")]
    assert list(db.scan(prefix=b"ab")) == [(b"ab", b"sst-ab"), (b"abd", b"sst-abd")]
    assert list(db.scan(prefix=b"b", reverse=True)) == [(b"b", b"mem-b")]
    assert list(db.scan(prefix=b"\xff")) == [(k, b"sst-" + k) for k in (b"\xff", b"\xff\x00", b"\xff\xff")]
    assert list(db.scan(prefix=b"\xff\xff")) == [(b"\xff\xff", b"sst-\xff\xff")]
    assert list(db.scan(limit=2, reverse=True)) == ordered[::-1][:2]
    assert list(db.scan(limit=0)) == []
    assert list(db.scan(b"c", b"a")) == []
    assert list(db.scan(b"abc", b"abd")) == []  # only a tombstone in range
    assert list(db.scan(prefix=b"zz")) == []
    db.close()


# ----------------------------------------------------------- not a database


def test_missing_database_without_create_is_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFound):
        Db.open(store=store, settings=tiny_settings(), create_if_missing=False)
    assert list(store.list("")) == [], "a failed open must not create anything"


def test_directory_that_is_not_a_database_is_not_found(tmp_path: Path) -> None:
    root = tmp_path / "photos"
    root.mkdir()
    (root / "cat.jpg").write_bytes(b"\xff\xd8 not a database")
    with pytest.raises(NotFound, match="no database"):
        Db.open(str(root), settings=tiny_settings(), create_if_missing=False)
    assert sorted(os.listdir(root)) == ["cat.jpg"]
    with pytest.raises(NotFound):
        Db.open(str(tmp_path / "nothing-here"), settings=tiny_settings(), create_if_missing=False)


def test_url_forms_open_the_same_database(tmp_path: Path) -> None:
    path = tmp_path / "db"
    with Db.open(str(path), settings=tiny_settings()) as db:
        db.put(b"k", b"v")
    with Db.open(f"file://{path}", settings=tiny_settings(), create_if_missing=False) as db:
        assert db.get(b"k") == b"v"
    store = open_store(str(path))
    with Db.open(store=store, settings=tiny_settings()) as db:
        assert db.get(b"k") == b"v"


def test_ttl_expires_on_the_injected_clock_across_flush_and_reopen(memory_store: ObjectStore) -> None:
    clock = ManualClock()
    db = _open(memory_store, clock)
    db.put(b"short", b"1", ttl=10)
    db.put(b"long", b"2", ttl=timedelta(hours=1))
    db.put(b"forever", b"3")
    clock.advance(9.9)
    assert dump(db) == {b"short": b"1", b"long": b"2", b"forever": b"3"}
    db.flush(memtable=True)
    clock.advance(0.2)
    assert db.get(b"short") is None
    assert dump(db) == {b"long": b"2", b"forever": b"3"}
    db.close()
    with _open(memory_store, clock) as again:
        assert dump(again) == {b"long": b"2", b"forever": b"3"}
        clock.advance(3600)
        assert dump(again) == {b"forever": b"3"}
        again.put(b"short", b"back")  # a new write without ttl replaces the expired one
        assert again.get(b"short") == b"back"


def test_a_writer_stopped_by_a_store_outage_says_to_reopen(memory_store: ObjectStore) -> None:
    """A WAL write that failed past the retry budget stops the writer; the next write's
    ClosedError said only "database stopped after a background failure: Unavailable ...
    retry later", and retrying on the same handle can never work: it says to reopen."""
    from shaledb import RetryOptions, Unavailable
    from shaledb.store import StoreWrapper

    class Outage(StoreWrapper):
        down = False

        def put(self, path, data, *, create=False, attributes=None):  # type: ignore[no-untyped-def]
            if self.down:
                raise Unavailable("test outage: the store is unreachable, retry later")
            return super().put(path, data, create=create, attributes=attributes)

    flaky = Outage(memory_store)
    quiet = Settings(compactor=None, garbage_collector=None, retry=RetryOptions(max_attempts=1))
    db = Db.open(store=flaky, settings=quiet)
    db.put(b"a", b"1")
    flaky.down = True
    with pytest.raises(Unavailable):
        db.put(b"b", b"2")
    flaky.down = False
    with pytest.raises(ClosedError, match="close it and open the database again"):
        db.put(b"c", b"3")
    db.close()
    with Db.open(store=memory_store, settings=quiet) as again:
        assert again.get(b"a") == b"1"
