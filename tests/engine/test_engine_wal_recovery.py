"""WAL tracking and recovery modes (docs/design/wal.md), and damage detection.

With ``track_and_verify_wals`` (the default) the manifest records each closed
WAL object's size and CRC32C; an open must fail with a CorruptionError naming
a tracked object that is missing or shorter, and the first missing id of any
hole in the WAL. Damaged contents: ``absolute_consistency`` refuses to open,
``point_in_time`` keeps the consistent prefix before the damage,
``tolerate_corrupted_tail`` accepts damage only in the last object,
``skip_corrupted_records`` drops damaged blocks and keeps everything else.
After a salvage open, writes made by the salvaging writer survive the next
crash and reopen. Every single-byte flip of a WAL object or a manifest is
detected.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from engine_support import GateStore, abandon, dump, flip_byte, wal_paths

from shaledb import CorruptionError, Db
from shaledb.format.paths import manifest_path, parse_wal_id, wal_path
from shaledb.format.sst import decode_data_block, decode_meta
from shaledb.manifest.store import ManifestStore
from shaledb.store import ObjectStore
from shaledb.testing import FaultInjectingStore
from shaledb.testing.clock import ManualClock
from shaledb.testing.strategies import tiny_settings

_SEEDS = itertools.count(5000)


def _open(store: ObjectStore, **overrides: Any) -> Db:
    return Db.open(store=store, settings=tiny_settings(**overrides), clock=ManualClock(), seed=next(_SEEDS))


def _manifest(store: ObjectStore) -> Any:
    return ManifestStore(store, ManualClock(), random.Random(0), author="test").require_latest()


@dataclass
class Layout:
    """A crashed database: ``in_l0`` flushed, WAL objects after ``replay_after``."""

    in_l0: dict[bytes, bytes]
    by_wal: dict[int, dict[bytes, bytes]]
    """Writes in each WAL object after replay_after (empty dict: a fence)."""
    tracked: list[int]
    replay_after: int

    def expected(self, upto: int | None = None, skip: tuple[int, ...] = ()) -> dict[bytes, bytes]:
        out = dict(self.in_l0)
        for wid in sorted(self.by_wal):
            if upto is not None and wid >= upto:
                break
            if wid not in skip:
                out.update(self.by_wal[wid])
        return out

    @property
    def wal_ids(self) -> list[int]:
        return sorted(self.by_wal)


def _crashed_db_with_tracked_wals(store: ObjectStore, untracked: int = 2) -> Layout:
    """L0 holds a0..a1; WAL objects t0..t2 are closed and tracked by the manifest,
    ``untracked`` more objects u.. were written after the last manifest update.

    The L0 flush is held at its SST write (a gate) while t0..t2 are written, so
    its manifest update closes and tracks them without flushing them.
    """
    faults = FaultInjectingStore(store, seed=11)
    gate = GateStore(faults, lambda op, path: op == "put_create" and path.startswith("compacted/"))
    db = _open(gate)
    db.put(b"a0", b"in L0")
    db.put(b"a1", b"in L0 too")
    gate.close_gate()
    flushing = threading.Thread(target=lambda: db.flush(memtable=True), daemon=True)
    flushing.start()
    gate.wait_for_waiters()
    before = set(wal_paths(store))
    for i in range(3):
        db.put(b"t%d" % i, b"tracked %d" % i)
    gate.open_gate()
    flushing.join(30)
    assert not flushing.is_alive()
    for i in range(untracked):
        db.put(b"u%d" % i, b"untracked %d" % i)
    abandon(db, faults)

    m = _manifest(store)
    by_wal: dict[int, dict[bytes, bytes]] = {}
    for path in wal_paths(store):
        wid = parse_wal_id(path)
        assert wid is not None
        if wid > m.replay_after_wal_id:
            by_wal[wid] = {}
    new_ids = sorted(parse_wal_id(p) or 0 for p in set(wal_paths(store)) - before)
    writes = [(b"t%d" % i, b"tracked %d" % i) for i in range(3)]
    writes += [(b"u%d" % i, b"untracked %d" % i) for i in range(untracked)]
    assert len(new_ids) == len(writes), "each durable put should be its own WAL object"
    for wid, (k, v) in zip(new_ids, writes):
        by_wal[wid] = {k: v}
    tracked = [w.id for w in m.tracked_wals]
    assert tracked == new_ids[:3], f"setup: the manifest should track the three t objects, got {tracked}"
    return Layout({b"a0": b"in L0", b"a1": b"in L0 too"}, by_wal, tracked, m.replay_after_wal_id)


def _expect_corruption_naming(store: ObjectStore, path: str, **overrides: Any) -> CorruptionError:
    with pytest.raises(CorruptionError) as info:
        _open(store, **overrides)
    assert info.value.path == path, f"error names {info.value.path!r}, expected {path!r}: {info.value}"
    assert path in str(info.value)
    return info.value


def test_setup_recovers_everything_when_nothing_is_damaged(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    with _open(store) as db:
        assert dump(db) == layout.expected()


@pytest.mark.parametrize("which", [0, 1, 2], ids=["first", "middle", "last"])
def test_deleted_tracked_wal_fails_open_naming_it(store: ObjectStore, which: int) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    victim = wal_path(layout.tracked[which])
    store.delete(victim)
    _expect_corruption_naming(store, victim)


def test_deleted_tracked_wal_at_the_end_is_caught_by_tracking_alone(store: ObjectStore) -> None:
    """No later object shows a hole: only the manifest's record knows it existed."""
    layout = _crashed_db_with_tracked_wals(store, untracked=0)
    victim = wal_path(layout.tracked[-1])
    assert victim == wal_paths(store)[-1]
    store.delete(victim)
    _expect_corruption_naming(store, victim)


@pytest.mark.parametrize("which", [0, 2], ids=["first", "last"])
def test_shortened_tracked_wal_fails_open_naming_it(store: ObjectStore, which: int) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    victim = wal_path(layout.tracked[which])
    data = store.get(victim)
    store.put(victim, data[: len(data) - 7])
    _expect_corruption_naming(store, victim)


def test_gap_in_untracked_wal_ids_names_the_first_missing(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store, untracked=4)
    untracked = [w for w in layout.wal_ids if w not in layout.tracked]
    store.delete(wal_path(untracked[1]))
    store.delete(wal_path(untracked[2]))
    _expect_corruption_naming(store, wal_path(untracked[1]))


def test_gap_spanning_tracked_and_untracked_names_the_first_missing(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    untracked = [w for w in layout.wal_ids if w not in layout.tracked]
    store.delete(wal_path(layout.tracked[1]))
    store.delete(wal_path(untracked[0]))
    _expect_corruption_naming(store, wal_path(layout.tracked[1]))


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked-object", "untracked-object"])
def test_flipped_byte_in_a_wal_object_is_refused_by_absolute_consistency(
    store: ObjectStore, tracked: bool
) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    untracked = [w for w in layout.wal_ids if w not in layout.tracked]
    victim = wal_path(layout.tracked[1] if tracked else untracked[0])
    flip_byte(store, victim, 40)
    _expect_corruption_naming(store, victim)


def test_point_in_time_keeps_the_prefix_before_the_damage(
    store: ObjectStore, caplog: pytest.LogCaptureFixture
) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    damaged = layout.tracked[1]
    flip_byte(store, wal_path(damaged), 40)
    with caplog.at_level(logging.WARNING, logger="shaledb"):
        db = _open(store, wal_recovery_mode="point_in_time")
    with db:
        assert dump(db) == layout.expected(upto=damaged)
    assert wal_path(damaged) in caplog.text, "point_in_time must log what it gave up"


def test_tolerate_corrupted_tail_accepts_damage_in_the_last_object_only(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    last = layout.wal_ids[-1]
    flip_byte(store, wal_path(last), 40)
    with _open(store, wal_recovery_mode="tolerate_corrupted_tail") as db:
        assert dump(db) == layout.expected(upto=last)


def test_tolerate_corrupted_tail_refuses_damage_before_the_tail(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    victim = wal_path(layout.wal_ids[-2])
    flip_byte(store, victim, 40)
    _expect_corruption_naming(store, victim, wal_recovery_mode="tolerate_corrupted_tail")


def test_skip_corrupted_records_drops_only_the_damaged_object(store: ObjectStore) -> None:
    layout = _crashed_db_with_tracked_wals(store)
    damaged = layout.tracked[1]
    flip_byte(store, wal_path(damaged), 40)
    with _open(store, wal_recovery_mode="skip_corrupted_records") as db:
        assert dump(db) == layout.expected(skip=(damaged,))


# ------------------------------------------------- a WAL object with many blocks

_BIG = 7000  # WAL blocks are at least 16 KiB: three of these values fill more than two blocks


def _crashed_db_with_a_multi_block_wal(
    store: ObjectStore,
) -> tuple[dict[bytes, bytes], list[list[bytes]], str]:
    """One WAL object holding several blocks of single-put batches, then one more object."""
    settings = {"wal_max_bytes": 1 << 20, "l0_sst_size_bytes": 1 << 20, "max_unflushed_bytes": 4 << 20}
    faults = FaultInjectingStore(store, seed=12)
    db = _open(faults, **settings)
    db.put(b"first", b"own object")
    for i in range(12):
        db.put(b"m%02d" % i, bytes([i]) * _BIG, durable=False)
    db.flush()  # one WAL object with all twelve
    db.put(b"last", b"own object too")
    abandon(db, faults)
    big = wal_paths(store)[-2]
    data = store.get(big)
    meta = decode_meta(data, len(data))
    assert len(meta.index) >= 3, "setup: the WAL object should have several blocks"
    blocks: list[list[bytes]] = []
    offs = meta.index.offsets
    for i in range(len(meta.index)):
        blocks.append(list(decode_data_block(data[offs[i] : offs[i + 1]]).keys))
    everything = {b"first": b"own object", b"last": b"own object too"}
    everything.update({b"m%02d" % i: bytes([i]) * _BIG for i in range(12)})
    return everything, blocks, big


def _damage_block(store: ObjectStore, path: str, block: int) -> None:
    data = store.get(path)
    meta = decode_meta(data, len(data))
    start, end = meta.index.block_span(block)
    flip_byte(store, path, (start + end) // 2)


def test_skip_corrupted_records_skips_a_damaged_block_and_keeps_later_ones(store: ObjectStore) -> None:
    everything, blocks, big = _crashed_db_with_a_multi_block_wal(store)
    _damage_block(store, big, 1)
    with _open(store, wal_recovery_mode="skip_corrupted_records") as db:
        got = dump(db)
    assert got == {k: v for k, v in everything.items() if k not in blocks[1]}


def test_point_in_time_stops_inside_a_damaged_object(store: ObjectStore) -> None:
    everything, blocks, big = _crashed_db_with_a_multi_block_wal(store)
    _damage_block(store, big, 1)
    with _open(store, wal_recovery_mode="point_in_time") as db:
        got = dump(db)
    lost = {k for b in blocks[1:] for k in b} | {b"last"}
    assert got == {k: v for k, v in everything.items() if k not in lost}


# --------------------------------------------- salvage, then crash, then reopen

_SALVAGE_MODES = ["point_in_time", "tolerate_corrupted_tail", "skip_corrupted_records"]


@pytest.mark.parametrize("mode", _SALVAGE_MODES)
@pytest.mark.parametrize("where", ["first", "last"])
def test_writes_after_a_salvage_open_survive_the_next_crash(
    store: ObjectStore, mode: str, where: str
) -> None:
    """The salvage must be persisted: a later open must not stop at the same damage
    and drop what the salvaging writer acknowledged (damage in the first object
    after replay_after leaves nothing to recover, the case most easily missed)."""
    layout = _crashed_db_with_tracked_wals(store, untracked=1)
    victim = layout.wal_ids[0] if where == "first" else layout.wal_ids[-1]
    if mode == "tolerate_corrupted_tail" and where == "first":
        victim = layout.wal_ids[-1]
    flip_byte(store, wal_path(victim), 40)
    faults = FaultInjectingStore(store, seed=13)
    db = _open(faults, wal_recovery_mode=mode)
    salvaged = dump(db)
    for i in range(5):
        db.put(b"after%d" % i, b"acknowledged after the salvage")
    abandon(db, faults)
    want = {**salvaged, **{b"after%d" % i: b"acknowledged after the salvage" for i in range(5)}}
    with _open(store, wal_recovery_mode=mode) as again:
        assert dump(again) == want
    with _open(store) as strict:  # the damage is behind us now: the default mode opens too
        assert dump(strict) == want


# ----------------------------------------------------------- every byte flipped


def test_every_single_byte_flip_of_a_wal_object_is_detected(memory_store: ObjectStore) -> None:
    faults = FaultInjectingStore(memory_store, seed=14)
    db = _open(faults)
    db.put(b"key", b"value")
    db.delete(b"gone")
    abandon(db, faults)
    victim = wal_paths(memory_store)[-1]
    original = memory_store.get(victim)
    assert len(original) > 100
    for pos in range(len(original)):
        flip_byte(memory_store, victim, pos)
        try:
            _expect_corruption_naming(memory_store, victim, track_and_verify_wals=False)
        except BaseException as exc:
            raise AssertionError(f"flipping byte {pos} of {len(original)} went undetected: {exc}") from exc
        memory_store.put(victim, original)
    with _open(memory_store) as ok:
        assert dump(ok) == {b"key": b"value"}


def test_every_single_byte_flip_of_a_manifest_is_detected(memory_store: ObjectStore) -> None:
    with _open(memory_store) as db:
        for i in range(30):
            db.put(b"k%02d" % i, b"v" * 50)
    mid = _manifest(memory_store).id
    path = manifest_path(mid)
    original = memory_store.get(path)
    for pos in range(len(original)):
        flip_byte(memory_store, path, pos)
        with pytest.raises(CorruptionError) as info:
            ManifestStore(memory_store, ManualClock(), random.Random(0), author="test").read(mid)
        assert info.value.path == path, f"byte {pos}: {info.value}"
        memory_store.put(path, original)
    flip_byte(memory_store, path, len(original) // 2)
    _expect_corruption_naming(memory_store, path)


@pytest.mark.parametrize("mode", _SALVAGE_MODES)
def test_salvage_after_a_refused_open(store: ObjectStore, mode: str) -> None:
    """The operator's path: the default open refuses the damage, then a salvage mode opens.

    The refused open already fenced (its empty fencing object now follows the
    damaged one), which must not turn the damaged last object into one
    "before the tail".
    """
    layout = _crashed_db_with_tracked_wals(store)
    last = layout.wal_ids[-1]
    flip_byte(store, wal_path(last), 40)
    for _ in range(2):
        _expect_corruption_naming(store, wal_path(last))
    with _open(store, wal_recovery_mode=mode) as db:
        assert dump(db) == layout.expected(upto=last)
