"""Fencing in one process: zombie writers, open/open interleavings, WAL id bookkeeping.

The writer protocol (docs/design/writer-open-and-recovery.md): a writer bumps
``writer_epoch`` by manifest CAS, then writes a fencing WAL object at the next free WAL id. A zombie (an older
writer still running) must fail with ``FencedError`` on its next WAL write or
manifest update, and the live writer must keep every write the zombie
acknowledged before the fence. Interleavings are forced with gates on store
calls (:class:`engine_support.GateStore`), not with sleeps.
"""

from __future__ import annotations

import itertools
import random
import threading
from typing import Any

import pytest
from engine_support import GateStore, abandon, dump, sst_paths, wal_paths

from shaledb import Db, FencedError
from shaledb.errors import ClosedError, ShaleError
from shaledb.manifest.store import ManifestStore
from shaledb.store import ObjectStore
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.strategies import tiny_settings

_SEEDS = itertools.count(1000)


def _open(store: ObjectStore, clock: ManualClock, **overrides: Any) -> Db:
    # A distinct seed per handle: object ids (ULIDs) come from the clock and this
    # RNG, and a manual clock does not move between opens.
    return Db.open(store=store, settings=tiny_settings(**overrides), clock=clock, seed=next(_SEEDS))


def _latest_manifest(store: ObjectStore, clock: ManualClock) -> Any:
    return ManifestStore(store, clock, random.Random(0), author="test").require_latest()


class _Thread(threading.Thread):
    """Runs ``fn`` and keeps its result or exception."""

    def __init__(self, fn: Any) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc

    def outcome(self, timeout: float = 30.0) -> Any:
        self.join(timeout)
        assert not self.is_alive(), "background call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def test_zombie_durable_write_is_fenced_and_acknowledged_writes_survive(
    store: ObjectStore, clock: ManualClock
) -> None:
    a = _open(store, clock)
    for i in range(30):
        a.put(b"a%02d" % i, b"from-a-%d" % i)
    h = a.put(b"late", b"not acknowledged", durable=False)
    b = _open(store, clock)
    assert b.epoch > a.epoch
    assert all(b.get(b"a%02d" % i) == b"from-a-%d" % i for i in range(30))

    with pytest.raises(FencedError):
        a.put(b"zombie", b"must not be acknowledged")
    with pytest.raises(FencedError):
        h.wait_durable()
    with pytest.raises(FencedError):
        a.put(b"zombie2", b"x", durable=False)  # the handle now refuses every write
    with pytest.raises(FencedError):
        a.flush()
    with pytest.raises(ClosedError, match="fenced"):
        a.get(b"late")  # reads stop too: it served "late", which the new writer never had
    a.close()  # closing a fenced handle is quiet

    b.put(b"b", b"from-b")
    b.close()
    with _open(store, clock) as c:
        got = dump(c)
    assert b"zombie" not in got and b"zombie2" not in got and b"late" not in got
    assert got[b"b"] == b"from-b"
    assert all(got[b"a%02d" % i] == b"from-a-%d" % i for i in range(30))


def test_every_writer_thread_waiting_on_a_fenced_wal_write_is_told(
    store: ObjectStore, clock: ManualClock
) -> None:
    """Durable puts wait on their own WAL segment's latch: a failed write must open every latch."""
    gate = GateStore(store, lambda op, path: op == "put_create" and path.startswith("wal/"))
    a = _open(gate, clock, wal_max_bytes=64 * 1024)  # (the eight stay in one buffer, not cut when full)
    a.put(b"before", b"acknowledged")
    gate.close_gate()
    first = _Thread(lambda: a.put(b"w0", b"x"))
    first.start()
    gate.wait_for_waiters(1)  # w0's WAL object is in flight
    rest = [_Thread(lambda i=i: a.put(b"w%d" % i, b"x")) for i in range(1, 9)]
    for t in rest:
        t.start()
    for _ in range(1000):  # the other eight are buffered behind it
        if len(a.wal.keys) == 8:
            break
        threading.Event().wait(0.01)
    assert len(a.wal.keys) == 8
    b = _open(store, clock)  # its fence takes the slot w0's object is headed for
    gate.open_gate()
    outcomes = []
    for t in [first, *rest]:
        try:
            t.outcome()
            outcomes.append("acknowledged")
        except FencedError:
            outcomes.append("fenced")
    assert outcomes == ["fenced"] * 9
    assert b.get(b"before") == b"acknowledged"
    assert all(b.get(b"w%d" % i) is None for i in range(9))
    a.close()
    b.close()


def test_zombie_memtable_flush_and_manifest_update_are_fenced(store: ObjectStore, clock: ManualClock) -> None:
    a = _open(store, clock)
    a.put(b"k", b"durable in the WAL, not in L0")
    b = _open(store, clock)
    epoch_b = b.epoch
    with pytest.raises(FencedError):
        a.flush(memtable=True)  # its manifest update must see the newer epoch
    m = _latest_manifest(store, clock)
    assert m.writer_epoch == epoch_b
    assert m.data.l0 == (), "a fenced writer's L0 reached the manifest"
    assert len(sst_paths(store)) == 1  # the zombie's SST is an orphan, referenced by nothing
    assert b.get(b"k") == b"durable in the WAL, not in L0"
    b.put(b"k2", b"v2")
    b.flush(memtable=True)
    b.close()
    with _open(store, clock) as c:
        assert dump(c) == {b"k": b"durable in the WAL, not in L0", b"k2": b"v2"}


def test_writer_paused_during_replay_is_fenced_by_a_concurrent_open(
    memory_store: ObjectStore, clock: ManualClock
) -> None:
    """slatedb's test_writer_paused_in_replay_wal_should_be_fenced_by_concurrent_open."""
    with _open(memory_store, clock) as w:
        for i in range(5):
            w.put(b"k%d" % i, b"v%d" % i)
    # Leave WAL objects to replay: a writer that crashed after durable puts.
    faults = FaultInjectingStore(memory_store, seed=1)
    w = _open(faults, clock)
    w.put(b"wal-only", b"1")
    abandon(w, faults)

    gate = GateStore(memory_store, lambda op, path: op == "get" and path.startswith("wal/"))
    gate.close_gate()
    opening = _Thread(lambda: _open(gate, clock))
    opening.start()
    gate.wait_for_waiters()  # A has claimed its epoch and fenced; it is replaying
    b = _open(memory_store, clock)
    gate.open_gate()
    a = opening.outcome()
    assert a.epoch < b.epoch
    with pytest.raises(FencedError):
        a.put(b"from-a", b"x")
    a.close()
    b.put(b"from-b", b"y")
    assert b.get(b"wal-only") == b"1"
    b.close()
    with _open(memory_store, clock) as c:
        got = dump(c)
    assert b"from-a" not in got and got[b"from-b"] == b"y" and got[b"wal-only"] == b"1"


def test_older_writers_fence_landing_after_ours_does_not_stop_us(
    store: ObjectStore, clock: ManualClock
) -> None:
    """A newer writer's fence (docs/design/writer-open-and-recovery.md), seen from the other side.

    B claims epoch e, A claims e+1 and fences at WAL id n. B, still opening,
    lists the WAL after A's fence and writes its own fence at n+1, then finds
    the newer epoch and gives up (FencedError). A's next WAL write meets B's
    older, empty fence at n+1: that slot was taken by a writer A already
    fenced, so A must move on to n+2, not die.
    """
    with _open(store, clock) as w:
        w.put(b"before", b"0")
    gate = GateStore(store, lambda op, path: op == "list" and path == "wal/")
    gate.close_gate()
    opening_b = _Thread(lambda: _open(gate, clock))
    opening_b.start()
    gate.wait_for_waiters()  # B has its epoch; it is about to look for a free WAL slot
    faults_a = FaultInjectingStore(store, seed=4)
    a = _open(faults_a, clock)
    gate.open_gate()
    with pytest.raises(FencedError):
        opening_b.outcome()
    fences = wal_paths(store)
    a.put(b"after", b"1")  # the first WAL write of A, after B's stray fence
    a.put(b"after2", b"2", durable=False)
    a.flush(memtable=True)
    assert len(wal_paths(store)) > len(fences)
    a.put(b"wal-only", b"3")
    abandon(a, faults_a)
    with _open(store, clock) as c:
        assert dump(c) == {b"before": b"0", b"after": b"1", b"after2": b"2", b"wal-only": b"3"}


@pytest.mark.parametrize("track", [True, False], ids=["tracked", "untracked"])
def test_wal_write_in_flight_during_an_l0_flush_leaves_no_gap(
    memory_store: ObjectStore, clock: ManualClock, track: bool
) -> None:
    """The manifest's ``next_wal_id`` must count WAL objects written, not ids handed out.

    A's L0 flush commits while the WAL object after it is still being
    written; A then dies before that write lands. The next writer fences at
    the manifest's ``next_wal_id``; if that id counted the lost object, the
    WAL would have a hole that a later open reports as corruption (with
    tracking) although nothing was lost.
    """
    faults = FaultInjectingStore(memory_store, seed=2)
    wal_gate = GateStore(faults, lambda op, path: op == "put_create" and path.startswith("wal/"))
    sst_gate = GateStore(wal_gate, lambda op, path: op == "put_create" and path.startswith("compacted/"))
    a = _open(sst_gate, clock, track_and_verify_wals=track)
    a.put(b"x", b"durable")
    sst_gate.close_gate()
    flushing = _Thread(lambda: a.flush(memtable=True))
    flushing.start()
    sst_gate.wait_for_waiters()  # the L0 flush of {x} is writing its SST
    wal_gate.close_gate()
    h = a.put(b"y", b"in flight", durable=False)
    assert h.wait_durable(timeout=0) is False  # asks for a WAL write, which the gate holds
    wal_gate.wait_for_waiters()
    sst_gate.open_gate()
    flushing.outcome()  # the L0 flush committed its manifest while the WAL write waits
    faults.crash()  # A dies; its held WAL write is released into a dead store
    wal_gate.open_gate()
    abandon(a, None)

    faults_b = FaultInjectingStore(memory_store, seed=3)
    b = _open(faults_b, clock, track_and_verify_wals=track)
    b.put(b"z", b"acknowledged by b")
    abandon(b, faults_b)  # crash again, so the next open must replay B's WAL objects
    with _open(memory_store, clock, track_and_verify_wals=track) as c:
        assert dump(c) == {b"x": b"durable", b"z": b"acknowledged by b"}


def test_open_fails_cleanly_for_the_loser_of_an_epoch_race(
    memory_store: ObjectStore, clock: ManualClock
) -> None:
    """A writer that sees a newer epoch right after fencing gives up with FencedError."""
    with _open(memory_store, clock) as w:
        w.put(b"k", b"v")
    gate = GateStore(memory_store, lambda op, path: op == "put_create" and path.startswith("wal/"))
    gate.close_gate()
    loser = _Thread(lambda: _open(gate, clock))
    loser.start()
    gate.wait_for_waiters()  # the loser is about to write its fence
    winner = _open(memory_store, clock)
    gate.open_gate()
    with pytest.raises(FencedError):
        loser.outcome()
    winner.put(b"k2", b"v2")
    winner.close()
    with _open(memory_store, clock) as c:
        assert dump(c) == {b"k": b"v", b"k2": b"v2"}


def test_fenced_error_is_a_shale_error() -> None:
    assert issubclass(FencedError, ShaleError)


def test_close_raises_when_its_last_flush_meets_a_fence(store: ObjectStore, clock: ManualClock) -> None:
    """Buffered writes a fenced close could not flush are reported, not dropped quietly."""
    a = _open(store, clock)
    a.put(b"k0", b"v0")
    h = a.put(b"k1", b"v1", durable=False)
    b = _open(store, clock)
    with pytest.raises(FencedError):
        a.close()
    assert not h.durable
    assert b.get(b"k1") is None
    a.close()  # a second close is quiet
    b.close()
