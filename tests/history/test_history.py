"""Time-travel reads: ``Db.snapshot(at_seq=...)`` / ``(at_time=...)`` within
``Settings.history_retention_s``, through memtables, L0 flushes, compaction
(bottom and not) and reopen; the window's edge; and retention 0 changing nothing.
"""

from __future__ import annotations

import logging
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from shaledb import Db, Settings
from shaledb.compaction import Compactor
from shaledb.engine.history import OPT_MARKS, OPT_RETENTION, decode_marks, encode_marks, merge_history
from shaledb.errors import HistoryUnavailable, InvalidArgument
from shaledb.settings import CompactorOptions
from shaledb.testing.clock import ManualClock
from shaledb.testing.seeds import test_seed

QUIET = {"compactor": None, "garbage_collector": None}


def _settings(retention: float) -> Settings:
    return Settings(history_retention_s=retention, **QUIET)  # type: ignore[arg-type]


def _compact(url: str, clock: ManualClock) -> int:
    c = Compactor.open(url, CompactorOptions(min_l0_ssts=2), clock=clock)
    try:
        return c.run_once().committed
    finally:
        c.close()


def _history_run(db: Db, clock: ManualClock, seed: int) -> list[tuple[int, float, dict[bytes, bytes]]]:
    """Random writes, one per simulated second; the state after each: (seq, time, state)."""
    rng = random.Random(seed)
    state: dict[bytes, bytes] = {}
    out = []
    for i in range(30):
        k = b"k%d" % rng.randrange(6)
        if rng.random() < 0.2:
            h = db.delete(k)
            state.pop(k, None)
        else:
            v = b"v%d" % i
            h = db.put(k, v)
            state[k] = v
        out.append((h.seq, clock.now(), dict(state)))
        clock.advance(1.5)
        if i % 7 == 6:
            db.flush(memtable=True)
    return out


def _check(db: Db, history: list[tuple[int, float, dict[bytes, bytes]]]) -> None:
    for seq, _, state in history:
        with db.snapshot(at_seq=seq) as snap:
            assert dict(snap.scan()) == state, f"scan at seq {seq}"
            assert list(snap.scan(reverse=True)) == sorted(state.items(), reverse=True)
            for k in (b"k%d" % i for i in range(6)):
                assert snap.get(k) == state.get(k), f"get {k!r} at seq {seq}"


def test_reads_as_of_every_write_through_flush_compaction_and_reopen(tmp_path: object) -> None:
    seed = test_seed()
    url = str(tmp_path) + "/db"  # type: ignore[operator]
    clock = ManualClock()
    db = Db.open(url, settings=_settings(3600), clock=clock)
    history = _history_run(db, clock, seed)
    _check(db, history)  # memtables and L0 SSTs
    assert _compact(url, clock) >= 1
    db.refresh_manifest()
    _check(db, history)  # one sorted run holding every version
    db.close()
    db = Db.open(url, settings=_settings(3600), clock=clock)
    _check(db, history)
    db.close()


def test_at_time_resolves_to_the_state_then(mem_url: str) -> None:
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(600), clock=clock) as db:
        history = _history_run(db, clock, 1)
        for seq, t, state in history:
            at = datetime.fromtimestamp(t + 1.0, tz=UTC)  # after this write, before the next
            with db.snapshot(at_time=at) as snap:
                assert dict(snap.scan()) == state, f"at {t + 1.0} (seq {seq})"


def test_at_time_sees_writes_milliseconds_apart_in_the_recent_window(mem_url: str) -> None:
    """Writes a few milliseconds apart, within one mark interval: a time between two of them
    reads exactly the writes before it (before: the state of the last whole-second mark, so a
    write 100 ms before the asked time was missing), in memtables and after a flush alike."""
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(600), clock=clock) as db:
        states = []
        state: dict[bytes, bytes] = {}
        for i in range(40):
            clock.advance(0.007)
            db.put(b"k%d" % (i % 5), b"v%d" % i)
            state[b"k%d" % (i % 5)] = b"v%d" % i
            states.append((clock.now(), dict(state)))
            if i == 25:
                db.flush(memtable=True)
        clock.advance(0.01)
        for t, expect in states:
            at = datetime.fromtimestamp(t + 0.003, tz=UTC)  # after this write, before the next
            with db.snapshot(at_time=at) as snap:
                assert dict(snap.scan()) == expect, f"at {t + 0.003}"


def test_a_time_in_the_future_is_refused(mem_url: str) -> None:
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(600), clock=clock) as db:
        db.put(b"k", b"1")
        with pytest.raises(InvalidArgument, match="is in the future"):
            db.snapshot(at_time=datetime.fromtimestamp(clock.now() + 5, tz=UTC))
        with db.snapshot(at_time=datetime.fromtimestamp(clock.now(), tz=UTC)) as snap:
            assert snap.get(b"k") == b"1"


def test_marks_thin_to_one_per_interval_beyond_the_fine_window(mem_url: str) -> None:
    """A write every millisecond for 6 s: the writer's marks stay bounded, the manifest holds
    one per interval, and an old time still reads a state at most one interval older."""
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(3600), clock=clock) as db:
        start = clock.now()
        for i in range(6000):
            db.put(b"k", b"%d" % i)
            clock.advance(0.001)
        db.flush(memtable=True)
        marks = decode_marks(db.manifest.option(OPT_MARKS))
        assert len(marks) <= 8, marks
        assert db._history is not None and len(db._history.marks) > 5000  # the fine window keeps all
        clock.advance(120)  # beyond the fine window: the next thinning keeps one per second
        for i in range(7000):  # past twice what the last thinning kept: the list is thinned
            db.put(b"x", b"%d" % i)
            clock.advance(0.001)
        assert len(db._history.marks) < 7100
        with db.snapshot(at_time=datetime.fromtimestamp(start + 2.5, tz=UTC)) as snap:
            got = int(snap.get(b"k") or b"-1")
        assert 1500 - 2 <= got <= 2500, got  # exactly 2500 then; at most one interval older


def test_thin_marks_keeps_the_last_mark_of_each_interval() -> None:
    from shaledb.engine.history import thin_marks

    assert thin_marks([(1000, 1), (1500, 2), (1999, 3), (2000, 4), (4100, 9)]) == [
        (1999, 3),
        (2000, 4),
        (4100, 9),
    ]
    assert thin_marks([]) == []


def test_reads_outside_the_window_are_refused_with_the_oldest_point(mem_url: str) -> None:
    clock = ManualClock()
    with Db.open(mem_url, settings=_settings(10), clock=clock) as db:
        first = db.put(b"k", b"1").seq
        clock.advance(5)
        db.put(b"k", b"2")
        clock.advance(20)
        last = db.put(b"k", b"3").seq
        with pytest.raises(HistoryUnavailable, match="oldest readable point is seq") as info:
            db.snapshot(at_seq=first)
        assert info.value.oldest_seq > first
        with db.snapshot(at_seq=info.value.oldest_seq) as snap:
            assert snap.get(b"k") == b"2"
        with pytest.raises(HistoryUnavailable):
            db.snapshot(at_time=datetime.fromtimestamp(clock.now() - 60, tz=UTC))
        with pytest.raises(InvalidArgument):
            db.snapshot(at_seq=last + 1)
        with pytest.raises(InvalidArgument):
            db.snapshot(at_time=datetime(2020, 1, 1))  # naive
        with pytest.raises(InvalidArgument):
            db.snapshot(at_seq=first, at_time=datetime.now(UTC))


def test_compaction_drops_versions_the_window_no_longer_sees(tmp_path: object) -> None:
    url = str(tmp_path) + "/db"  # type: ignore[operator]
    clock = ManualClock()
    with Db.open(url, settings=_settings(30), clock=clock) as db:
        for i in range(20):
            db.put(b"k", b"v%d" % i)
            clock.advance(2)
            if i % 5 == 4:
                db.flush(memtable=True)
        _compact(url, clock)
        db.refresh_manifest()
        rows = [
            r for s in db.manifest.data.runs for info in s.ssts for r in db.tables.reader(info).all_rows()
        ]
        assert [r[0] for r in rows].count(b"k") > 5, "versions inside the window were dropped"
        clock.advance(100)  # every version but the newest left the window
        db.put(b"other", b"x")
        db.flush(memtable=True)
        db.flush(memtable=True)
        db.put(b"other2", b"x")
        db.flush(memtable=True)
        _compact(url, clock)
        db.refresh_manifest()
        rows = [
            r for s in db.manifest.data.runs for info in s.ssts for r in db.tables.reader(info).all_rows()
        ]
        assert [r[0] for r in rows].count(b"k") == 1, "versions older than the window were kept"
        assert db.get(b"k") == b"v19"


def test_retention_zero_changes_nothing(tmp_path: object) -> None:
    url = str(tmp_path) + "/db"  # type: ignore[operator]
    with Db.open(url, settings=_settings(0)) as db:
        snap = db.snapshot()  # a pinned snapshot keeps memtable history, which must not reach L0
        for i in range(10):
            db.put(b"k", b"v%d" % i)
        db.flush(memtable=True)
        assert db.manifest.option(OPT_RETENTION) is None and db.manifest.option(OPT_MARKS) is None
        (l0,) = db.manifest.data.l0
        assert [r[0] for r in db.tables.reader(l0).all_rows()] == [b"k"]
        with pytest.raises(InvalidArgument, match="history_retention_s"):
            db.snapshot(at_seq=1)
        snap.close()
        assert db._history is None and db._mem.pins == {}
    with pytest.raises(InvalidArgument):
        Settings(history_retention_s=-1)


def test_a_writer_opened_without_the_setting_keeps_the_recorded_window(tmp_path: object, caplog: Any) -> None:
    """A plain ``Db.open`` (a script, the CLI's put) removed the history at its first flush
    and compaction then dropped the old versions; now only an explicit 0 turns it off."""
    url = str(tmp_path) + "/db"  # type: ignore[operator]
    clock = ManualClock()
    with Db.open(url, settings=_settings(3600), clock=clock) as db:
        db.put(b"k", b"v1")
        first = db.stats()["seq"]
        clock.advance(1)
        db.put(b"k", b"v2")
        db.flush(memtable=True)
    for _ in range(2):
        with Db.open(url, settings=Settings(**QUIET), clock=clock) as db:  # type: ignore[arg-type]
            assert db.settings.history_retention_s == 3600
            clock.advance(1)
            db.put(b"k", b"v3")
            db.flush(memtable=True)
        _compact(url, clock)
    with Db.open(url, settings=Settings(**QUIET), clock=clock) as db:  # type: ignore[arg-type]
        assert db.manifest.option(OPT_RETENTION) == "3600000"
        with db.snapshot(at_seq=first) as snap:
            assert snap.get(b"k") == b"v1"
    with (
        caplog.at_level(logging.WARNING, logger="shaledb"),
        Db.open(url, settings=_settings(0), clock=clock) as db,
    ):
        db.put(b"k", b"v4")
        db.flush(memtable=True)
        assert db.manifest.option(OPT_RETENTION) is None
    assert "history_retention_s=0 turns off the history" in caplog.text
    with Db.open(url, settings=Settings(**QUIET), clock=clock) as db:  # type: ignore[arg-type]
        assert not db.settings.history_retention_s
        with pytest.raises(InvalidArgument, match="history_retention_s"):
            db.snapshot(at_seq=first)


def test_marks_round_trip_and_merge_keeps_the_base_version() -> None:
    marks = [(1000, 0), (3000, 5), (4500, 9)]
    assert decode_marks(encode_marks(marks)) == marks
    cols = [([b"a", b"a", b"a", b"b"], [9, 6, 2, 1], bytes([0, 1, 0, 1]), [b"9", b"", b"2", b""])]
    keys, seqs, _k, _ = merge_history(cols, 5, bottom=True, now_ms=0)  # type: ignore[arg-type]
    # a@9, a@6 (tombstone, newer than the floor) and a@2 (the base) stay; b's base tombstone goes
    assert (keys, seqs) == ([b"a", b"a", b"a"], [9, 6, 2])
    keys, seqs, _, _ = merge_history(cols, 7, bottom=True, now_ms=0)  # type: ignore[arg-type]
    assert (keys, seqs) == ([b"a"], [9]), "a@6 is the base at floor 7 and a tombstone: dropped with a@2"


def test_index_query_at_a_time_travel_snapshot_through_compaction(tmp_path: object) -> None:
    """The index tree keeps its versions in the window like the data tree. Before: index
    compaction kept only the newest version, so after a compaction a time-travel
    snapshot's index_query lost terms a key had then (and later lost)."""
    url = str(tmp_path) + "/db"  # type: ignore[operator]
    clock = ManualClock()
    with Db.open(url, settings=_settings(3600), clock=clock) as db:
        old = [db.put(b"k%d" % i, b"v", indexes={"f": [b"a"]}).seq for i in range(4)][-1]
        db.flush(memtable=True)
        clock.advance(2)
        db.put(b"k1", b"v", indexes={"f": [b"b"]})  # k1 leaves term a
        db.delete(b"k2")
        db.delete_range(b"k3", b"k4")
        db.flush(memtable=True)
        clock.advance(2)
        db.put(b"x", b"v")
        db.flush(memtable=True)
        for _ in range(3):
            _compact(url, clock)
        db.refresh_manifest()
        assert db.manifest.index.runs and not db.manifest.index.l0, "the index tree was not compacted"
        assert db.index_query("f", b"a", b"a\x00") == [b"k0"]
        with db.snapshot(at_seq=old) as snap:
            assert snap.index_query("f", b"a", b"a\x00") == [b"k0", b"k1", b"k2", b"k3"]
            assert snap.index_query("f", b"b", b"b\x00") == []
    with Db.open(url, settings=_settings(3600), clock=clock) as db, db.snapshot(at_seq=old) as snap:
        assert snap.index_query("f", b"a", b"a\x00") == [b"k0", b"k1", b"k2", b"k3"]
